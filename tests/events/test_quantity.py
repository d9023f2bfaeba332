"""Quantity parsing and printing, checked against apimachinery's documented behaviour."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from draflow.events.quantity import BINARY_SI, DECIMAL_EXPONENT, DECIMAL_SI, Quantity, QuantityError

CANONICAL = [
    # (input, String(), format)
    ("80Gi", "80Gi", BINARY_SI),
    ("10G", "10G", DECIMAL_SI),
    ("500m", "500m", DECIMAL_SI),
    ("1000M", "1G", DECIMAL_SI),
    ("0.5", "500m", DECIMAL_SI),
    ("1.5Gi", "1536Mi", BINARY_SI),
    ("1024Mi", "1Gi", BINARY_SI),
    ("1536Mi", "1536Mi", BINARY_SI),
    ("1.5k", "1500", DECIMAL_SI),
    ("12e6", "12e6", DECIMAL_EXPONENT),
    ("1e19", "10e18", DECIMAL_EXPONENT),
    ("1000E", "1e21", DECIMAL_SI),
    ("0.1n", "1n", DECIMAL_SI),  # rounded up to the smallest representable amount
    ("0.5Ki", "512", BINARY_SI),  # BinarySI below 1024 prints as DecimalSI
    ("10Ei", "9223372036854775807", BINARY_SI),  # BinarySI is capped at int64 max
    ("+1", "+1", DECIMAL_SI),  # apimachinery keeps already-canonical input text verbatim
    ("1E3", "1E3", DECIMAL_EXPONENT),
    ("-0", "0", DECIMAL_SI),
    ("284208Mi", "284208Mi", BINARY_SI),
]


@pytest.mark.parametrize(("text", "shown", "fmt"), CANONICAL)
def test_parse_and_print_like_apimachinery(text: str, shown: str, fmt: str) -> None:
    q = Quantity.parse(text)
    assert str(q) == shown
    assert q.format == fmt


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "must match the regular expression"),
        ("1.5.5", "must match the regular expression"),
        ("abc", "must match the regular expression"),
        ("1K", "unable to parse quantity's suffix"),
        ("1Mi5", "unable to parse quantity's suffix"),
        ("1e", "unable to parse quantity's suffix"),
        ("1e99999", "out of range"),
    ],
)
def test_invalid_quantities_are_rejected_with_upstream_messages(text: str, message: str) -> None:
    with pytest.raises(QuantityError, match=message):
        Quantity.parse(text)


def test_semantic_equality_and_ordering() -> None:
    assert Quantity.parse("1Gi") == Quantity.parse("1024Mi")
    assert hash(Quantity.parse("1Gi")) == hash(Quantity.parse("1024Mi"))
    assert Quantity.parse("1G") < Quantity.parse("1Gi")
    assert Quantity.parse("10G") > Quantity.parse("8")
    assert Quantity.parse("1") + Quantity.parse("500m") == Quantity.parse("1.5")
    assert str(Quantity.parse("2Gi") - Quantity.parse("1Gi")) == "1Gi"


def test_numbers_from_yaml_are_read_through_their_text() -> None:
    assert Quantity.parse(1) == Quantity.parse("1")
    assert str(Quantity.parse(0.5)) == "500m"
    with pytest.raises(QuantityError):
        Quantity.parse(True)


def test_integer_views() -> None:
    assert Quantity.parse("4Gi").as_int() == 4 * 2**30
    assert Quantity.parse("1500m").value() == 2
    assert Quantity.parse("-1500m").value() == -2
    assert Quantity.parse("1500m").milli_value() == 1500
    assert not Quantity.parse("1500m").is_integer()
    with pytest.raises(ValueError, match="exact int64"):
        Quantity.parse("1500m").as_int()
    assert Quantity.parse("1e19").is_integer() is False  # beyond int64


_texts = st.builds(
    lambda sign, num, frac, suffix: f"{sign}{num}{'.' + frac if frac else ''}{suffix}",
    st.sampled_from(["", "-", "+"]),
    st.integers(min_value=0, max_value=10**20).map(str),
    st.sampled_from(["", "5", "25", "0001", "123456789012"]),
    st.sampled_from(
        ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3", "e-7"]
    ),
)


@given(_texts)
def test_printing_round_trips(text: str) -> None:
    q = Quantity.parse(text)
    again = Quantity.parse(str(q))
    assert again == q
    assert Quantity.parse(q.canonical()) == q
