"""Generated names: the claim prefix truncation, generateName expansion, suffix sources."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.dra.resourceclaim import generate_claim_name_prefix
from services.runtime.naming import (
    ALPHANUMS,
    SeededSuffixes,
    generate_name,
    hash_suffix,
    safe_encode,
    unique_generated_name,
)

DNS_LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", fullmatch=True)


def test_short_prefix_is_pod_dash_claim_dash() -> None:
    assert generate_claim_name_prefix("pod0", "gpu") == "pod0-gpu-"


def test_prefix_of_exactly_57_characters_is_kept() -> None:
    pod = "p" * 51
    assert len(f"{pod}-gpus-") == 57
    assert generate_claim_name_prefix(pod, "gpus") == f"{pod}-gpus-"


def test_long_pod_name_cuts_both_parts_proportionally_without_trailing_hyphen() -> None:
    # <pod>-<claim>- is 65 characters: pod keeps 60*57//65 = 52, claim keeps 3*57//65 = 2.
    assert generate_claim_name_prefix("a" * 60, "gpu") == "a" * 52 + "-gp"


def test_two_long_names_share_the_space() -> None:
    prefix = generate_claim_name_prefix("p" * 63, "c" * 63)
    assert prefix == "p" * 28 + "-" + "c" * 28
    assert len(prefix) == 57


@given(DNS_LABEL, DNS_LABEL)
def test_prefix_and_generated_name_fit_a_dns_label(pod: str, claim: str) -> None:
    prefix = generate_claim_name_prefix(pod, claim)
    assert len(prefix) <= 57
    name = generate_name(prefix, hash_suffix(pod + claim, 0))
    assert len(name) <= 63
    untruncated = f"{pod}-{claim}-"
    if len(untruncated) <= 57:
        assert name.startswith(untruncated)
    else:
        # Both parts are kept as leading pieces of the originals, joined by one hyphen.
        cut = len(pod) * 57 // len(untruncated)
        assert prefix[:cut] == pod[:cut] and prefix[cut] == "-"
        assert claim.startswith(prefix[cut + 1 :])
        assert len(prefix) - cut - 1 == len(claim) * 57 // len(untruncated)


def test_generate_name_cuts_base_to_58() -> None:
    name = generate_name("x" * 70, "bcdfg")
    assert name == "x" * 58 + "bcdfg"
    assert len(name) == 63
    with pytest.raises(ValueError, match="5 characters"):
        generate_name("x-", "abc")


def test_hash_suffix_is_stable_uses_the_alphabet_and_varies_with_attempt() -> None:
    first = hash_suffix("default/uid-pod/gpu", 0)
    assert first == hash_suffix("default/uid-pod/gpu", 0)
    assert len(first) == 5 and set(first) <= set(ALPHANUMS)
    assert hash_suffix("default/uid-pod/gpu", 1) != first
    assert hash_suffix("default/uid-other/gpu", 0) != first


def test_seeded_suffixes_repeat_with_the_seed() -> None:
    a, b = SeededSuffixes(7), SeededSuffixes(7)
    assert [a("k", 0) for _ in range(3)] == [b("k", 0) for _ in range(3)]
    assert SeededSuffixes(8)("k", 0) != SeededSuffixes(7)("k", 0)


def test_unique_generated_name_skips_taken_names() -> None:
    first = unique_generated_name("pod-gpu-", "key", set())
    second = unique_generated_name("pod-gpu-", "key", {first})
    assert first != second and second.startswith("pod-gpu-")


def test_safe_encode_maps_digits_like_apimachinery() -> None:
    # '0' is code point 48 -> 48 % 27 = 21 -> '4'; '1' -> 22 -> '5'; '9' -> 57 % 27 = 3 -> 'f'.
    assert safe_encode("019") == "45f"
