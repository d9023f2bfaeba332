"""Checks shared by the resource.k8s.io kinds (names, taints, tolerations, config, node selectors).

Device selectors (CEL) are checked by the apiserver's admission (``admission.resource``), which
compiles them off the event loop.

Paraphrased from ``pkg/apis/resource/validation/validation.go`` (kubernetes/kubernetes): same
limits, same rules, same wording; written anew.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec

from draflow.events.api import resource_v1 as r1
from draflow.events.api.meta import Condition, NodeSelector
from draflow.services.dra.validation import names
from draflow.services.dra.validation.errs import Errs

T = TypeVar("T")

# Limits of resource.k8s.io/v1 (types.go constants).
MAX_REQUESTS = 32
MAX_CONSTRAINTS = 32
MAX_CONFIG = 32
MAX_SELECTORS = 32
MAX_SUBREQUESTS = 8
MAX_TOLERATIONS = 16
MAX_RESULTS = 32
OPAQUE_PARAMETERS_MAX = 10 * 1024
DEVICE_STATUS_DATA_MAX = 10 * 1024
MAX_DEVICE_CONDITIONS = 8
MAX_BINDING_CONDITIONS = 4
DOMAIN_MAX = 63
ID_MAX = 32

TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")
TOLERATION_OPERATORS = ("Equal", "Exists")


def check_list(errs: Errs, items: Sequence[T], limit: int, path: str, each: Callable[[T, str], None]) -> None:
    """``validateSlice``: too many items short-circuits (DoS protection), else check each."""
    if limit >= 0 and len(items) > limit:
        errs.too_many(path, len(items), limit)
        return
    for i, item in enumerate(items):
        each(item, f"{path}[{i}]")


def check_set(
    errs: Errs,
    items: Sequence[T],
    limit: int,
    path: str,
    each: Callable[[T, str], None],
    key: Callable[[T], Any],
) -> None:
    """``validateSet``: like ``check_list`` plus a duplicate check on ``key``."""
    if limit >= 0 and len(items) > limit:
        errs.too_many(path, len(items), limit)
        return
    seen: set[Any] = set()
    for i, item in enumerate(items):
        each(item, f"{path}[{i}]")
    for i, item in enumerate(items):
        k = key(item)
        if k in seen:
            errs.duplicate(f"{path}[{i}]", k)
        seen.add(k)


def driver_name(errs: Errs, value: str, path: str) -> None:
    """Same rules as a CSI driver name: required, <= 63, a DNS subdomain (case-insensitive)."""
    if not value:
        errs.required(path)
        return
    if len(value) > names.DRIVER_NAME_MAX:
        errs.too_long(path, names.DRIVER_NAME_MAX)
    errs.messages(path, value, names.dns1123_subdomain(value.lower()))


def pool_name(errs: Errs, value: str, path: str) -> None:
    if not value:
        errs.required(path)
        return
    if len(value) > names.DNS1123_SUBDOMAIN_MAX:
        errs.too_long(path, names.DNS1123_SUBDOMAIN_MAX)
    for part in value.split("/"):
        errs.messages(path, part, names.dns1123_subdomain(part))


def label_name(errs: Errs, value: str, path: str) -> None:
    """``metav1validation.ValidateLabelName`` (also used for taint keys, binding conditions)."""
    errs.messages(path, value, names.qualified_name(value))


CONDITION_STATUSES = ("False", "True", "Unknown")
_CONDITION_REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
_REASON_MESSAGE = names._regex_msg(
    "a condition reason must start with alphabetic character, optionally followed by a string of "
    "alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'",
    _CONDITION_REASON.pattern,
    ("my_name", "MY_NAME", "MyName", "ReasonA,ReasonB", "ReasonA:ReasonB"),
)


def conditions(errs: Errs, items: Sequence[Condition], path: str) -> None:
    """``metav1validation.ValidateConditions``: unique types; each a label-name type, a known
    status, a non-negative observedGeneration, a lastTransitionTime, a reason of the condition
    reason format (<= 1024), a message <= 32 KiB."""
    seen: set[str] = set()
    for i, cond in enumerate(items):
        at = f"{path}[{i}]"
        if cond.type in seen:
            errs.duplicate(f"{at}.type", cond.type)
        seen.add(cond.type)
        label_name(errs, cond.type, f"{at}.type")
        if cond.status not in CONDITION_STATUSES:
            errs.not_supported(f"{at}.status", cond.status, CONDITION_STATUSES)
        if cond.observed_generation < 0:
            errs.invalid(
                f"{at}.observedGeneration", cond.observed_generation, "must be greater than or equal to zero"
            )
        if not cond.last_transition_time:
            errs.required(f"{at}.lastTransitionTime", "must be set")
        if not cond.reason:
            errs.required(f"{at}.reason", "must be set")
        else:
            if not _CONDITION_REASON.fullmatch(cond.reason):
                errs.invalid(f"{at}.reason", cond.reason, _REASON_MESSAGE)
            if len(cond.reason) > 1024:
                errs.too_long(f"{at}.reason", 1024)
        if len(cond.message) > 32 * 1024:
            errs.too_long(f"{at}.message", 32 * 1024)


def _sloppy_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """``netutils.ParseIPSloppy``: IPv4 octets may have leading zeros (read as decimal)."""
    if "." in text and ":" not in text:
        parts = text.split(".")
        if len(parts) == 4 and all(p.isdigit() and len(p) <= 3 for p in parts):
            return ipaddress.IPv4Address(".".join(str(int(p)) for p in parts))
    return ipaddress.ip_address(text)


def interface_address(errs: Errs, value: str, path: str) -> None:
    """``IsValidInterfaceAddress``: an IP address with a prefix length, in canonical form."""
    address, slash, length = value.rpartition("/")
    try:
        if not slash or not length.isdigit():
            raise ValueError(value)
        ip = _sloppy_ip(address)
        bits = int(length)
        if bits > ip.max_prefixlen:
            raise ValueError(value)
    except ValueError:
        errs.invalid(
            path, value, "must be a valid address in CIDR form, (e.g. 10.9.8.7/24 or 2001:db8::1/64)"
        )
        return
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None and bits >= 96:
        ip, bits = ip.ipv4_mapped, bits - 96
    canonical = f"{ip}/{bits}"
    if canonical != value:
        errs.invalid(path, value, f'must be in canonical form ("{canonical}")')


def c_identifier(errs: Errs, value: str, path: str) -> None:
    if len(value) > ID_MAX:
        errs.too_long(path, ID_MAX)
    errs.messages(path, value, names.c_identifier(value))


def qualified_name(errs: Errs, value: str, path: str) -> None:
    """A DRA QualifiedName: ``id`` or ``domain/id`` (domain like a driver name, id a C identifier)."""
    parts = value.split("/")
    if len(parts) == 1:
        c_identifier(errs, parts[0], path)
    elif len(parts) == 2:
        if not parts[0]:
            errs.invalid(path, "", "the domain must not be empty")
        else:
            driver_name(errs, parts[0], path)
        if not parts[1]:
            errs.invalid(path, "", "the name must not be empty")
        else:
            c_identifier(errs, parts[1], path)
    else:
        errs.invalid(path, value, "must not contain more than one slash")


def fully_qualified_name(errs: Errs, value: str, path: str) -> None:
    qualified_name(errs, value, path)
    if "/" not in value:
        errs.invalid(path, value, "a fully qualified name must be a domain and a name separated by a slash")


def opaque_config(errs: Errs, opaque: r1.OpaqueDeviceConfiguration | None, path: str) -> None:
    """``DeviceConfiguration``: ``opaque`` required, driver name, parameters a JSON object <= 10 KiB."""
    if opaque is None:
        errs.required(f"{path}.opaque")
        return
    driver_name(errs, opaque.driver, f"{path}.opaque.driver")
    raw_extension(errs, opaque.parameters, f"{path}.opaque.parameters", OPAQUE_PARAMETERS_MAX)


def raw_extension(errs: Errs, value: Any, path: str, limit: int) -> None:
    if value is None:
        errs.required(path)
        return
    try:
        size = len(msgspec.json.encode(value))
    except (TypeError, ValueError, msgspec.EncodeError):
        errs.invalid(path, "<value omitted>", "error parsing data as JSON")
        return
    if size > limit:
        errs.too_long(path, limit)
    elif not isinstance(value, dict):
        errs.invalid(path, "<value omitted>", "must be a valid JSON object")


def taint(errs: Errs, t: r1.DeviceTaint, path: str) -> None:
    label_name(errs, t.key, f"{path}.key")  # includes the non-empty check
    if t.value:
        errs.messages(f"{path}.value", t.value, names.label_value(t.value))
    if not t.effect:
        errs.required(f"{path}.effect")
    elif t.effect not in TAINT_EFFECTS:
        errs.not_supported(f"{path}.effect", t.effect, TAINT_EFFECTS)
    if t.time_added is not None and not names.is_rfc3339(t.time_added):
        errs.invalid(f"{path}.timeAdded", t.time_added, "must be an RFC 3339 timestamp")


def toleration(errs: Errs, tol: r1.DeviceToleration, path: str) -> None:
    if tol.key:
        label_name(errs, tol.key, f"{path}.key")
    if tol.operator == "Exists":
        if tol.value:
            errs.invalid(f"{path}.value", tol.value, "must be empty for operator `Exists`")
    elif tol.operator == "Equal":
        errs.messages(f"{path}.value", tol.value, names.label_value(tol.value))
    elif not tol.operator:
        errs.required(f"{path}.operator")
    else:
        errs.not_supported(f"{path}.operator", tol.operator, TOLERATION_OPERATORS)
    if tol.effect and tol.effect not in TAINT_EFFECTS:
        errs.not_supported(f"{path}.effect", tol.effect, TAINT_EFFECTS)


def tolerations(errs: Errs, items: Sequence[r1.DeviceToleration], path: str) -> None:
    check_list(errs, items, MAX_TOLERATIONS, path, lambda t, at: toleration(errs, t, at))


def binding_conditions(errs: Errs, conds: Sequence[str], failures: Sequence[str], path: str) -> None:
    check_list(
        errs,
        conds,
        MAX_BINDING_CONDITIONS,
        f"{path}.bindingConditions",
        lambda c, at: label_name(errs, c, at),
    )
    check_list(
        errs,
        failures,
        MAX_BINDING_CONDITIONS,
        f"{path}.bindingFailureConditions",
        lambda c, at: label_name(errs, c, at),
    )
    for field, items in (("bindingConditions", conds), ("bindingFailureConditions", failures)):
        seen: set[str] = set()
        for i, c in enumerate(items):
            if c in seen:
                errs.duplicate(f"{path}.{field}[{i}]", c)
            seen.add(c)
    for i, c in enumerate(failures):
        if c in conds:
            errs.invalid(
                f"{path}.bindingFailureConditions[{i}]",
                c,
                "bindingFailureConditions must not overlap with bindingConditions",
            )
    if not conds and failures:
        errs.invalid(
            f"{path}.bindingConditions",
            list(conds),
            "bindingConditions are required to use bindingFailureConditions",
        )
    if conds and not failures:
        errs.invalid(
            f"{path}.bindingFailureConditions",
            list(failures),
            "bindingFailureConditions are required to use bindingConditions",
        )


def skip_node_operations(errs: Errs, ops: Sequence[str], path: str) -> None:
    allowed = ("NodePrepareResources", "NodeUnprepareResources", "*")
    for i, op in enumerate(ops):
        if op not in allowed:
            errs.not_supported(f"{path}[{i}]", op, allowed)
    if "NodePrepareResources" in ops and "NodeUnprepareResources" not in ops and "*" not in ops:
        errs.invalid(
            path,
            list(ops),
            "NodePrepareResources cannot be skipped unless NodeUnprepareResources is also skipped",
        )


def node_selector(errs: Errs, sel: NodeSelector, path: str) -> None:
    """core ``ValidateNodeSelector`` (terms ORed; matchFields only on metadata.name)."""
    if not sel.node_selector_terms:
        errs.required(f"{path}.nodeSelectorTerms", "must have at least one node selector term")
    for t, term in enumerate(sel.node_selector_terms):
        at = f"{path}.nodeSelectorTerms[{t}]"
        for i, req in enumerate(term.match_expressions):
            r_at = f"{at}.matchExpressions[{i}]"
            n = len(req.values)
            if req.operator in ("In", "NotIn"):
                if n == 0:
                    errs.required(f"{r_at}.values", "must be specified when `operator` is 'In' or 'NotIn'")
            elif req.operator in ("Exists", "DoesNotExist"):
                if n:
                    errs.forbidden(
                        f"{r_at}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                    )
            elif req.operator in ("Gt", "Lt"):
                if n != 1:
                    errs.required(
                        f"{r_at}.values", "must be specified single value when `operator` is 'Lt' or 'Gt'"
                    )
            else:
                errs.invalid(f"{r_at}.operator", req.operator, "not a valid selector operator")
            label_name(errs, req.key, f"{r_at}.key")
        for i, req in enumerate(term.match_fields):
            r_at = f"{at}.matchFields[{i}]"
            if req.operator in ("In", "NotIn"):
                if len(req.values) != 1:
                    errs.required(
                        f"{r_at}.values",
                        "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
                    )
            else:
                errs.invalid(f"{r_at}.operator", req.operator, "not a valid selector operator")
            if req.key != "metadata.name":  # the only node field selector key; its values unchecked
                errs.invalid(f"{r_at}.key", req.key, "not a valid field selector key")
                continue
            for j, v in enumerate(req.values):
                errs.messages(f"{r_at}.values[{j}]", v, names.dns1123_subdomain(v))
