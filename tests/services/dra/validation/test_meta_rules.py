"""ObjectMeta rules of ``validation.meta`` (``ValidateObjectMeta`` and friends): pure, no I/O.

Each case expects the field path and wording of apimachinery's ``api/validation/objectmeta.go``
and core's ``ValidateObjectMeta`` / ``ValidateTemplateObjectMeta``.
"""

from __future__ import annotations

import msgspec
import pytest

from draflow.events.api.meta import ObjectMeta
from draflow.services.dra.validation import meta, names
from draflow.services.dra.validation.errs import Errs

pytestmark = pytest.mark.kep4381

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def _create(m: ObjectMeta, *, namespaced: bool = True) -> list[tuple[str, str]]:
    errs = Errs("ResourceClaim", m.namespace, m.name)
    meta.validate_object_meta(errs, m, namespaced=namespaced, name_check=names.dns1123_subdomain)
    return [(e.path, e.rule) for e in errs.items]


def _template(m: ObjectMeta) -> list[tuple[str, str]]:
    errs = Errs("ResourceClaimTemplate", "default", "t")
    meta.validate_template_meta(errs, m, "spec.metadata")
    return [(e.path, e.rule) for e in errs.items]


def _update(new: ObjectMeta, old: ObjectMeta) -> list[tuple[str, str]]:
    errs = Errs("ResourceClaim", old.namespace, old.name)
    meta.validate_meta_update(errs, new, old)
    return [(e.path, e.rule) for e in errs.items]


# -- names and namespaces ----------------------------------------------------------------------


def test_valid_metadata_passes() -> None:
    m = ObjectMeta(
        name="gpu-claim",
        namespace="default",
        labels={"app.kubernetes.io/name": "trainer"},
        annotations={"Example.COM/Note": "free text, any characters!"},
        finalizers=("kubernetes", "orphan", "example.com/cleanup"),
    )
    assert _create(m) == []
    assert _create(msgspec.structs.replace(m, finalizers=("foregroundDeletion",))) == []


def test_orphan_and_foreground_deletion_cannot_both_be_set() -> None:
    m = ObjectMeta(name="c", namespace="default", finalizers=("foregroundDeletion", "orphan"))
    ((path, rule),) = _create(m)
    assert path == "metadata.finalizers"
    assert rule.startswith("Invalid value: ")
    assert rule.endswith(": finalizer orphan and foregroundDeletion cannot be both set")


def test_generate_name_may_stand_in_for_the_name() -> None:
    assert _create(ObjectMeta(generate_name="gpu-claim-", namespace="default")) == []
    assert _create(ObjectMeta(namespace="default")) == [
        ("metadata.name", "Required value: name or generateName is required")
    ]


def test_generate_name_is_checked_with_its_trailing_dash_masked() -> None:
    assert _create(ObjectMeta(generate_name="Gpu-", namespace="default")) == [
        ("metadata.generateName", f'Invalid value: "Gpu-": {SUBDOMAIN_MSG}')
    ]


def test_namespaced_kind_requires_a_dns_label_namespace() -> None:
    assert _create(ObjectMeta(name="c")) == [("metadata.namespace", "Required value")]
    assert _create(ObjectMeta(name="c", namespace="team.a")) == [
        ("metadata.namespace", f'Invalid value: "team.a": {LABEL_MSG}')
    ]


def test_cluster_scoped_kind_forbids_a_namespace() -> None:
    assert _create(ObjectMeta(name="gpu.example.com", namespace="default"), namespaced=False) == [
        ("metadata.namespace", "Forbidden: not allowed on this type")
    ]
    assert _create(ObjectMeta(name="gpu.example.com"), namespaced=False) == []


def test_generation_must_not_be_negative() -> None:
    assert _create(ObjectMeta(name="c", namespace="default", generation=-1)) == [
        ("metadata.generation", "Invalid value: -1: must be greater than or equal to 0")
    ]


# -- annotations and finalizers ----------------------------------------------------------------


def test_annotations_over_256_kib_in_total_are_too_long() -> None:
    half = 128 * 1024
    fits = {"a": "x" * (half - 1), "b": "y" * (half - 1)}  # keys count too: exactly 256 KiB
    assert _create(ObjectMeta(name="c", namespace="default", annotations=fits)) == []
    over = {"a": "x" * half, "b": "y" * (half - 1)}
    assert _create(ObjectMeta(name="c", namespace="default", annotations=over)) == [
        ("metadata.annotations", "Too long: may not be more than 262144 bytes")
    ]


def test_a_finalizer_is_standard_or_domain_qualified() -> None:
    m = ObjectMeta(name="c", namespace="default", finalizers=("example.com/keep", "cleanup"))
    assert _create(m) == [
        (
            "metadata.finalizers[1]",
            'Invalid value: "cleanup": name is neither a standard finalizer name nor is it fully qualified',
        )
    ]


# -- template metadata -------------------------------------------------------------------------


def test_template_metadata_may_carry_labels_and_annotations() -> None:
    m = ObjectMeta(labels={"team": "ml"}, annotations={"note": "ok"})
    assert _template(m) == []


@pytest.mark.parametrize(
    ("field", "m"),
    [
        ("name", ObjectMeta(name="x")),
        ("generateName", ObjectMeta(generate_name="x-")),
        ("namespace", ObjectMeta(namespace="default")),
        ("selfLink", ObjectMeta(self_link="/apis/x")),
        ("resourceVersion", ObjectMeta(resource_version="7")),
        ("generation", ObjectMeta(generation=2)),
        ("creationTimestamp", ObjectMeta(creation_timestamp="2026-01-02T03:04:05Z")),
        ("deletionGracePeriodSeconds", ObjectMeta(deletion_grace_period_seconds=30)),
        ("finalizers", ObjectMeta(finalizers=("example.com/f",))),
    ],
)
def test_template_metadata_forbids_every_other_field(field: str, m: ObjectMeta) -> None:
    assert _template(m) == [(f"spec.metadata.{field}", "Forbidden: cannot be set for a template")]


def test_template_labels_are_still_validated() -> None:
    assert _template(ObjectMeta(labels={"team": "not ok!"})) == [
        (
            "spec.metadata.labels",
            'Invalid value: "not ok!": a valid label must be an empty string or consist of alphanumeric '
            "characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
            "'MyValue',  or 'my_value',  or '12345', regex used for validation is "
            "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
        )
    ]


# -- updates -----------------------------------------------------------------------------------

_OLD = ObjectMeta(name="c", namespace="default", uid="0b0c5a5e-1111-4a4a-8b8b-000000000001")


def test_identity_fields_are_immutable() -> None:
    assert _update(ObjectMeta(name="d", namespace="default", uid=_OLD.uid), _OLD) == [
        ("metadata.name", 'Invalid value: "d": field is immutable')
    ]
    assert _update(ObjectMeta(name="c", namespace="other", uid=_OLD.uid), _OLD) == [
        ("metadata.namespace", 'Invalid value: "other": field is immutable')
    ]
    new_uid = "0b0c5a5e-1111-4a4a-8b8b-000000000002"
    assert _update(ObjectMeta(name="c", namespace="default", uid=new_uid), _OLD) == [
        ("metadata.uid", f'Invalid value: "{new_uid}": field is immutable')
    ]


def test_an_update_without_a_uid_keeps_the_stored_one() -> None:
    """The apiserver fills an omitted uid from the stored object before validating."""
    assert _update(ObjectMeta(name="c", namespace="default", labels={"a": "b"}), _OLD) == []
