"""The shared resource.k8s.io rules of ``validation.common``: pure, no I/O.

Each case feeds one rule a value upstream rejects (or accepts) and expects the field path and the
apiserver wording of ``pkg/apis/resource/validation`` and ``metav1validation.ValidateConditions``.
Where draflow renders a list-valued ``Invalid value`` differently from Go's ``%#v``, only the path,
type and detail are compared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from draflow.events.api.errors import FORBIDDEN, INVALID, NOT_SUPPORTED, REQUIRED
from draflow.events.api.meta import Condition, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from draflow.events.api.resource_v1 import DeviceTaint, DeviceToleration, OpaqueDeviceConfiguration
from draflow.services.dra.validation import common
from draflow.services.dra.validation.errs import Errs

pytestmark = pytest.mark.kep4381

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
C_ID_MSG = (
    "a valid C identifier must start with alphabetic character or '_', followed by a string of "
    "alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for "
    "validation is '[A-Za-z_][A-Za-z0-9_]*')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
REASON_MSG = (
    "a condition reason must start with alphabetic character, optionally followed by a string of "
    "alphanumeric characters or '_,:', and must end with an alphanumeric character or '_' (e.g. "
    "'my_name',  or 'MY_NAME',  or 'MyName',  or 'ReasonA,ReasonB',  or 'ReasonA:ReasonB', regex "
    "used for validation is '[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')"
)
CIDR_MSG = "must be a valid address in CIDR form, (e.g. 10.9.8.7/24 or 2001:db8::1/64)"
EFFECTS = 'supported values: "NoExecute", "NoSchedule", "None"'


def _errors(check: Callable[..., None], *args: Any) -> list[tuple[str, str]]:
    """Run one rule on a fresh error list; (path, rule) pairs in the order reported."""
    errs = Errs("ResourceSlice", "", "s")
    check(errs, *args)
    return [(e.path, e.rule) for e in errs.items]


def _typed(check: Callable[..., None], *args: Any) -> list[tuple[str, str, str]]:
    """(path, type, rule) for rules whose value is a list (rendered unlike Go's ``%#v``)."""
    errs = Errs("ResourceSlice", "", "s")
    check(errs, *args)
    return [(e.path, e.type, e.rule) for e in errs.items]


# -- list limits -------------------------------------------------------------------------------


def test_too_many_tolerations_short_circuit_the_per_item_checks() -> None:
    bad = DeviceToleration(key="k", operator="Gt")  # each one alone would be an Unsupported value
    assert _errors(common.tolerations, [bad] * 17, "spec.tolerations") == [
        ("spec.tolerations", "Too many: 17: must have at most 16 items")
    ]


def test_tolerations_under_the_limit_are_checked_with_their_index() -> None:
    ok = DeviceToleration(key="k", operator="Exists")
    assert _errors(common.tolerations, [ok, DeviceToleration(key="k")], "spec.tolerations") == [
        ("spec.tolerations[1].operator", "Required value")
    ]


# -- driver and pool names ---------------------------------------------------------------------


def test_driver_name_longer_than_63_is_too_long() -> None:
    assert _errors(common.driver_name, "a" * 64, "spec.driver") == [
        ("spec.driver", "Too long: may not be more than 63 bytes")
    ]


def test_driver_name_is_checked_case_insensitively() -> None:
    assert _errors(common.driver_name, "GPU.Example.COM", "spec.driver") == []
    assert _errors(common.driver_name, "gpu_example", "spec.driver") == [
        ("spec.driver", f'Invalid value: "gpu_example": {SUBDOMAIN_MSG}')
    ]


def test_pool_name_longer_than_253_is_too_long_even_with_valid_parts() -> None:
    name = "a" * 200 + "/" + "b" * 60
    assert _errors(common.pool_name, name, "spec.pool.name") == [
        ("spec.pool.name", "Too long: may not be more than 253 bytes")
    ]


def test_each_pool_name_segment_must_be_a_subdomain() -> None:
    assert _errors(common.pool_name, "node-1/Bad_Part", "spec.pool.name") == [
        ("spec.pool.name", f'Invalid value: "Bad_Part": {SUBDOMAIN_MSG}')
    ]


# -- metav1.Condition --------------------------------------------------------------------------

_T = "2026-01-02T03:04:05Z"


def test_valid_conditions_pass() -> None:
    conds = [
        Condition(type="Ready", status="True", last_transition_time=_T, reason="Prepared"),
        Condition(type="example.com/Healthy", status="Unknown", last_transition_time=_T, reason="A:B,c_"),
    ]
    assert _errors(common.conditions, conds, "status.conditions") == []


def test_duplicate_condition_type_is_reported_on_the_later_entry() -> None:
    ready = Condition(type="Ready", status="True", last_transition_time=_T, reason="Ok")
    assert _errors(common.conditions, [ready, ready], "status.conditions") == [
        ("status.conditions[1].type", 'Duplicate value: "Ready"')
    ]


def test_condition_fields_are_each_checked_in_upstream_order() -> None:
    bad = Condition(type="Ready", status="Maybe", observed_generation=-1, reason="")
    assert _errors(common.conditions, [bad], "status.conditions") == [
        (
            "status.conditions[0].status",
            'Unsupported value: "Maybe": supported values: "False", "True", "Unknown"',
        ),
        (
            "status.conditions[0].observedGeneration",
            "Invalid value: -1: must be greater than or equal to zero",
        ),
        ("status.conditions[0].lastTransitionTime", "Required value: must be set"),
        ("status.conditions[0].reason", "Required value: must be set"),
    ]


def test_condition_reason_format_and_lengths() -> None:
    bad_reason = Condition(type="A", status="True", last_transition_time=_T, reason="1-bad")
    long_reason = Condition(type="B", status="True", last_transition_time=_T, reason="R" * 1025)
    long_message = Condition(
        type="C", status="False", last_transition_time=_T, reason="Ok", message="m" * (32 * 1024 + 1)
    )
    assert _errors(common.conditions, [bad_reason, long_reason, long_message], "c") == [
        ("c[0].reason", f'Invalid value: "1-bad": {REASON_MSG}'),
        ("c[1].reason", "Too long: may not be more than 1024 bytes"),
        ("c[2].message", "Too long: may not be more than 32768 bytes"),
    ]


def test_condition_limits_are_inclusive() -> None:
    at_limit = Condition(
        type="A", status="True", last_transition_time=_T, reason="R" * 1024, message="m" * 32 * 1024
    )
    assert _errors(common.conditions, [at_limit], "c") == []


# -- interface addresses (networkData.ips) -----------------------------------------------------


@pytest.mark.parametrize("value", ["10.9.8.7/24", "2001:db8::1/64", "192.168.0.1/32", "::/0"])
def test_canonical_interface_addresses_pass(value: str) -> None:
    assert _errors(common.interface_address, value, "ips[0]") == []


@pytest.mark.parametrize(
    "value", ["10.9.8.7", "10.9.8.7/", "10.9.8.7/x", "10.9.8.7/33", "10.9.8/24", "1.2.3.4.5/8", "gpu/24", ""]
)
def test_values_that_are_not_cidrs_are_rejected(value: str) -> None:
    shown = '""' if not value else f'"{value}"'
    assert _errors(common.interface_address, value, "ips[0]") == [
        ("ips[0]", f"Invalid value: {shown}: {CIDR_MSG}")
    ]


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ("010.9.8.7/24", "10.9.8.7/24"),  # leading zeros are read as decimal, then rejected
        ("2001:DB8::1/64", "2001:db8::1/64"),  # IPv6 in lower case
        ("2001:db8:0:0:0:0:0:1/64", "2001:db8::1/64"),  # zeros compressed
        ("::ffff:192.168.0.1/120", "192.168.0.1/24"),  # IPv4-mapped, prefix over 96 bits
    ],
)
def test_non_canonical_interface_addresses_name_the_canonical_form(value: str, canonical: str) -> None:
    assert _errors(common.interface_address, value, "ips[0]") == [
        ("ips[0]", f'Invalid value: "{value}": must be in canonical form ("{canonical}")')
    ]


# -- qualified names (attributes, capacities, constraints) --------------------------------------


def test_qualified_name_with_empty_domain_or_name() -> None:
    assert _errors(common.qualified_name, "/model", "a") == [
        ("a", 'Invalid value: "": the domain must not be empty')
    ]
    assert _errors(common.qualified_name, "gpu.example.com/", "a") == [
        ("a", 'Invalid value: "": the name must not be empty')
    ]


def test_qualified_name_with_two_slashes() -> None:
    assert _errors(common.qualified_name, "a.com/b/c", "a") == [
        ("a", 'Invalid value: "a.com/b/c": must not contain more than one slash')
    ]


def test_qualified_name_parts_are_a_driver_name_and_a_c_identifier() -> None:
    assert _errors(common.qualified_name, "gpu.example.com/memory_GiB", "a") == []
    assert _errors(common.qualified_name, "Gpu_Example/1model", "a") == [
        ("a", f'Invalid value: "Gpu_Example": {SUBDOMAIN_MSG}'),
        ("a", f'Invalid value: "1model": {C_ID_MSG}'),
    ]


def test_identifier_longer_than_32_is_too_long() -> None:
    assert _errors(common.qualified_name, "m" * 33, "a") == [("a", "Too long: may not be more than 32 bytes")]
    assert _errors(common.qualified_name, "m" * 32, "a") == []


def test_fully_qualified_name_needs_a_domain() -> None:
    assert _errors(common.fully_qualified_name, "model", "spec.matchAttribute") == [
        (
            "spec.matchAttribute",
            'Invalid value: "model": a fully qualified name must be a domain and a name separated by a slash',
        )
    ]
    assert _errors(common.fully_qualified_name, "gpu.example.com/model", "spec.matchAttribute") == []


# -- opaque configuration ----------------------------------------------------------------------


def test_config_without_opaque_is_required() -> None:
    assert _errors(common.opaque_config, None, "spec.config[0]") == [
        ("spec.config[0].opaque", "Required value")
    ]


def test_opaque_parameters_are_required() -> None:
    opaque = OpaqueDeviceConfiguration(driver="gpu.example.com")
    assert _errors(common.opaque_config, opaque, "spec.config[0]") == [
        ("spec.config[0].opaque.parameters", "Required value")
    ]


def test_opaque_parameters_must_be_a_json_object() -> None:
    opaque = OpaqueDeviceConfiguration(driver="gpu.example.com", parameters=[1, 2])
    assert _errors(common.opaque_config, opaque, "c") == [
        ("c.opaque.parameters", 'Invalid value: "<value omitted>": must be a valid JSON object')
    ]


def test_opaque_parameters_over_10_kib_are_too_long() -> None:
    opaque = OpaqueDeviceConfiguration(driver="gpu.example.com", parameters={"blob": "x" * 10240})
    assert _errors(common.opaque_config, opaque, "c") == [
        ("c.opaque.parameters", "Too long: may not be more than 10240 bytes")
    ]


def test_opaque_driver_name_is_checked() -> None:
    opaque = OpaqueDeviceConfiguration(driver="GPU_driver", parameters={"a": 1})
    assert _errors(common.opaque_config, opaque, "c") == [
        ("c.opaque.driver", f'Invalid value: "GPU_driver": {SUBDOMAIN_MSG}')
    ]


# -- taints and tolerations --------------------------------------------------------------------


def test_taint_effect_is_required_and_must_be_known() -> None:
    assert _errors(common.taint, DeviceTaint(key="example.com/broken"), "spec.taint") == [
        ("spec.taint.effect", "Required value")
    ]
    assert _errors(common.taint, DeviceTaint(key="k", effect="Sometimes"), "spec.taint") == [
        ("spec.taint.effect", f'Unsupported value: "Sometimes": {EFFECTS}')
    ]


def test_taint_value_must_be_a_label_value() -> None:
    taint = DeviceTaint(key="k", value="not ok!", effect="NoSchedule")
    assert _errors(common.taint, taint, "t") == [("t.value", f'Invalid value: "not ok!": {LABEL_VALUE_MSG}')]


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute", "None"])
def test_every_known_taint_effect_passes(effect: str) -> None:
    assert _errors(common.taint, DeviceTaint(key="example.com/k", value="v", effect=effect), "t") == []


def test_toleration_operator_is_required_and_must_be_known() -> None:
    assert _errors(common.toleration, DeviceToleration(key="k"), "t") == [("t.operator", "Required value")]
    assert _errors(common.toleration, DeviceToleration(key="k", operator="Gt"), "t") == [
        ("t.operator", 'Unsupported value: "Gt": supported values: "Equal", "Exists"')
    ]


def test_exists_toleration_takes_no_value() -> None:
    tol = DeviceToleration(key="k", operator="Exists", value="v")
    assert _errors(common.toleration, tol, "t") == [
        ("t.value", 'Invalid value: "v": must be empty for operator `Exists`')
    ]


def test_equal_toleration_value_must_be_a_label_value() -> None:
    tol = DeviceToleration(key="k", operator="Equal", value="a b")
    assert _errors(common.toleration, tol, "t") == [("t.value", f'Invalid value: "a b": {LABEL_VALUE_MSG}')]


def test_toleration_effect_is_optional_but_must_be_known() -> None:
    assert _errors(common.toleration, DeviceToleration(operator="Exists"), "t") == []
    tol = DeviceToleration(operator="Exists", effect="Evict")
    assert _errors(common.toleration, tol, "t") == [("t.effect", f'Unsupported value: "Evict": {EFFECTS}')]


# -- binding conditions ------------------------------------------------------------------------


def test_paired_binding_conditions_pass() -> None:
    assert _errors(common.binding_conditions, ["Attached"], ["AttachFailed"], "d") == []


def test_binding_failure_conditions_need_binding_conditions_and_vice_versa() -> None:
    assert _typed(common.binding_conditions, [], ["AttachFailed"], "d") == [
        (
            "d.bindingConditions",
            INVALID,
            "Invalid value: []: bindingConditions are required to use bindingFailureConditions",
        )
    ]
    (only,) = _typed(common.binding_conditions, ["Attached"], [], "d")
    assert only[:2] == ("d.bindingFailureConditions", INVALID)
    assert only[2].endswith(": bindingFailureConditions are required to use bindingConditions")


def test_duplicate_binding_conditions() -> None:
    assert _errors(common.binding_conditions, ["A", "A"], ["F"], "d") == [
        ("d.bindingConditions[1]", 'Duplicate value: "A"')
    ]
    assert _errors(common.binding_conditions, ["A"], ["F", "F"], "d") == [
        ("d.bindingFailureConditions[1]", 'Duplicate value: "F"')
    ]


def test_binding_failure_conditions_must_not_overlap() -> None:
    assert _errors(common.binding_conditions, ["A", "B"], ["B"], "d") == [
        (
            "d.bindingFailureConditions[0]",
            'Invalid value: "B": bindingFailureConditions must not overlap with bindingConditions',
        )
    ]


def test_at_most_four_binding_conditions_of_each_kind() -> None:
    five = ["A", "B", "C", "D", "E"]
    assert _errors(common.binding_conditions, five, [f"F{c}" for c in five], "d") == [
        ("d.bindingConditions", "Too many: 5: must have at most 4 items"),
        ("d.bindingFailureConditions", "Too many: 5: must have at most 4 items"),
    ]


# -- skipNodeOperations ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ops",
    [
        [],
        ["NodeUnprepareResources"],
        ["NodePrepareResources", "NodeUnprepareResources"],
        ["NodePrepareResources", "*"],
    ],
)
def test_allowed_skip_node_operations(ops: list[str]) -> None:
    assert _errors(common.skip_node_operations, ops, "spec.skipNodeOperations") == []


def test_skipping_prepare_needs_skipping_unprepare() -> None:
    (only,) = _typed(common.skip_node_operations, ["NodePrepareResources"], "spec.skipNodeOperations")
    assert only[:2] == ("spec.skipNodeOperations", INVALID)
    assert only[2].endswith(
        ": NodePrepareResources cannot be skipped unless NodeUnprepareResources is also skipped"
    )


def test_unknown_skip_node_operation() -> None:
    (only,) = _typed(common.skip_node_operations, ["NodeUnprepareResources", "Reboot"], "s")
    assert only[:2] == ("s[1]", NOT_SUPPORTED)
    assert only[2].startswith('Unsupported value: "Reboot": supported values: ')


# -- node selectors ----------------------------------------------------------------------------


def _selector(
    *exprs: NodeSelectorRequirement, fields: tuple[NodeSelectorRequirement, ...] = ()
) -> NodeSelector:
    return NodeSelector(node_selector_terms=(NodeSelectorTerm(match_expressions=exprs, match_fields=fields),))


def test_node_selector_needs_a_term() -> None:
    assert _errors(common.node_selector, NodeSelector(), "spec.nodeSelector") == [
        ("spec.nodeSelector.nodeSelectorTerms", "Required value: must have at least one node selector term")
    ]


def test_node_selector_operators_and_their_values() -> None:
    sel = _selector(
        NodeSelectorRequirement(key="zone", operator="In"),
        NodeSelectorRequirement(key="zone", operator="NotIn", values=("a",)),
        NodeSelectorRequirement(key="gpu", operator="Exists", values=("x",)),
        NodeSelectorRequirement(key="gpu", operator="DoesNotExist"),
        NodeSelectorRequirement(key="cores", operator="Gt", values=("1", "2")),
        NodeSelectorRequirement(key="cores", operator="Lt", values=("8",)),
    )
    at = "n.nodeSelectorTerms[0].matchExpressions"
    assert _typed(common.node_selector, sel, "n") == [
        (f"{at}[0].values", REQUIRED, "Required value: must be specified when `operator` is 'In' or 'NotIn'"),
        (
            f"{at}[2].values",
            FORBIDDEN,
            "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
        ),
        (
            f"{at}[4].values",
            REQUIRED,
            "Required value: must be specified single value when `operator` is 'Lt' or 'Gt'",
        ),
    ]


def test_node_selector_expression_key_is_a_label_name() -> None:
    sel = _selector(NodeSelectorRequirement(key="a/b/c", operator="Exists"))
    (only,) = _typed(common.node_selector, sel, "n")
    assert only[:2] == ("n.nodeSelectorTerms[0].matchExpressions[0].key", INVALID)
    assert only[2].startswith('Invalid value: "a/b/c": a qualified name must consist of')


def test_node_field_selector_takes_exactly_one_node_name() -> None:
    sel = _selector(
        fields=(
            NodeSelectorRequirement(key="metadata.name", operator="In", values=("node-1", "node-2")),
            NodeSelectorRequirement(key="metadata.name", operator="NotIn", values=("Node_1",)),
            NodeSelectorRequirement(key="metadata.name", operator="In", values=("node-3",)),
        )
    )
    at = "n.nodeSelectorTerms[0].matchFields"
    assert _errors(common.node_selector, sel, "n") == [
        (
            f"{at}[0].values",
            "Required value: must be only one value when `operator` is 'In' or 'NotIn' "
            "for node field selector",
        ),
        (f"{at}[1].values[0]", f'Invalid value: "Node_1": {SUBDOMAIN_MSG}'),
    ]


def test_unknown_selector_operators_and_field_keys_are_invalid_values() -> None:
    """As upstream's ValidateNodeSelectorRequirement / ValidateNodeFieldSelectorRequirement: an
    operator it does not know is an invalid value, a matchFields key other than metadata.name is
    "not a valid field selector key" (after the operator) and its values are not checked."""
    sel = _selector(
        NodeSelectorRequirement(key="zone", operator="Has", values=("a",)),
        fields=(
            NodeSelectorRequirement(key="metadata.name", operator="Exists"),
            NodeSelectorRequirement(key="metadata.namespace", operator="Gt", values=("Not_A_Name",)),
        ),
    )
    at = "n.nodeSelectorTerms[0]"
    assert _typed(common.node_selector, sel, "n") == [
        (
            f"{at}.matchExpressions[0].operator",
            INVALID,
            'Invalid value: "Has": not a valid selector operator',
        ),
        (f"{at}.matchFields[0].operator", INVALID, 'Invalid value: "Exists": not a valid selector operator'),
        (f"{at}.matchFields[1].operator", INVALID, 'Invalid value: "Gt": not a valid selector operator'),
        (
            f"{at}.matchFields[1].key",
            INVALID,
            'Invalid value: "metadata.namespace": not a valid field selector key',
        ),
    ]


def test_errors_name_the_object() -> None:
    errs = Errs("ResourceClaim", "default", "gpu")
    common.toleration(errs, DeviceToleration(key="k", operator="Exists", value="v"), "spec.t")
    assert [str(e) for e in errs.items] == [
        'ResourceClaim default/gpu: spec.t.value: Invalid value: "v": must be empty for operator `Exists`'
    ]
