"""Name and format checks of apimachinery (``k8s.io/apimachinery/pkg/util/validation``).

Each checker returns the list of messages upstream would produce (empty = valid), worded the
same, so errors read like the API server's.
"""

from __future__ import annotations

import functools
import re
import uuid

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63
C_IDENTIFIER_MAX = 32  # DRA DeviceMaxIDLength
DRIVER_NAME_MAX = 63

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = rf"{_LABEL}(\.{_LABEL})*"
_QNAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_RE = re.compile(rf"^{_LABEL}$")
_SUBDOMAIN_RE = re.compile(rf"^{_SUBDOMAIN}$")
_QNAME_RE = re.compile(rf"^{_QNAME}$")
_LABEL_VALUE_RE = re.compile(rf"^({_QNAME})?$")
_C_ID_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SEMVER_RE = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$"
)
_RFC3339_RE = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def _regex_msg(what: str, rx: str, examples: tuple[str, ...]) -> str:
    ex = ",  or ".join(f"'{e}'" for e in examples)
    return f"{what} (e.g. {ex}, regex used for validation is '{rx}')"


_LABEL_MSG = _regex_msg(
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character",
    _LABEL,
    ("my-name", "123-abc"),
)
_SUBDOMAIN_MSG = _regex_msg(
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character",
    _SUBDOMAIN,
    ("example.com",),
)
_QNAME_CHARS = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_QNAME_MSG = _regex_msg(f"name part {_QNAME_CHARS}", _QNAME, ("MyName", "my.name", "123-abc"))
_LABEL_VALUE_MSG = _regex_msg(
    f"a valid label must be an empty string or {_QNAME_CHARS[5:]}".replace("or consist", "or consist"),
    f"({_QNAME})?",
    ("MyValue", "my_value", "12345"),
)
_C_ID_MSG = _regex_msg(
    "a valid C identifier must start with alphabetic character or '_', followed by a string of "
    "alphanumeric characters or '_'",
    "[A-Za-z_][A-Za-z0-9_]*",
    ("my_name", "MY_NAME", "MyName"),
)


def dns1123_label(value: str) -> list[str]:
    out = []
    if len(value) > DNS1123_LABEL_MAX:
        out.append(_max_len(DNS1123_LABEL_MAX))
    if not _LABEL_RE.fullmatch(value):
        out.append(_LABEL_MSG)
    return out


def dns1123_subdomain(value: str) -> list[str]:
    out = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        out.append(_max_len(DNS1123_SUBDOMAIN_MAX))
    if not _SUBDOMAIN_RE.fullmatch(value):
        out.append(_SUBDOMAIN_MSG)
    return out


def qualified_name(value: str) -> list[str]:
    """Label keys, annotation keys, resource names: ``[prefix/]name``."""
    parts = value.split("/")
    if len(parts) == 1:
        name, prefix = parts[0], None
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
    else:
        return [
            "a qualified name "
            + _regex_msg(_QNAME_CHARS, _QNAME, ("MyName", "my.name", "123-abc"))
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    out: list[str] = []
    if prefix is not None:
        out.extend("prefix part " + m for m in dns1123_subdomain(prefix))
    if not name:
        out.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX:
        out.append("name part " + _max_len(QUALIFIED_NAME_MAX))
    if name and not _QNAME_RE.fullmatch(name):
        out.append(_QNAME_MSG)
    return out


def label_value(value: str) -> list[str]:
    out = []
    if len(value) > LABEL_VALUE_MAX:
        out.append(_max_len(LABEL_VALUE_MAX))
    if not _LABEL_VALUE_RE.fullmatch(value):
        out.append(_LABEL_VALUE_MSG)
    return out


def c_identifier(value: str) -> list[str]:
    return [] if _C_ID_RE.fullmatch(value) else [_C_ID_MSG]


def is_semver(value: str) -> bool:
    return bool(_SEMVER_RE.fullmatch(value))


def is_rfc3339(value: str) -> bool:
    return bool(_RFC3339_RE.fullmatch(value))


def uuid_messages(value: str) -> list[str]:
    """``validateUID`` of the resource API (shareID): RFC 4122, normalized lower-case form."""
    try:
        uuid.UUID(value)
    except ValueError:
        return [f"error validating uid: invalid UUID format: {value!r}"]
    if len(value) != 36 or value != value.lower():
        return [
            "uid must be in RFC 4122 normalized form, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` with "
            "lowercase hexadecimal characters"
        ]
    return []


# -- resource names (core/v1 helpers) ----------------------------------------------------------

STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_STANDARD_RESOURCES = STANDARD_CONTAINER_RESOURCES | {
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "storage",
    "requests.cpu",
    "requests.memory",
    "requests.storage",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "services.nodeports",
    "services.loadbalancers",
}
REQUESTS_PREFIX = "requests."


def is_hugepages(name: str) -> bool:
    return name.startswith("hugepages-")


def is_native_resource(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


@functools.lru_cache(maxsize=1024)  # asked per container resource on the scheduler's hot path
def is_extended_resource_name(name: str) -> bool:
    """``v1helper.IsExtendedResourceName``: domain-qualified, not native, quota-name compatible."""
    if is_native_resource(name) or name.startswith(REQUESTS_PREFIX):
        return False
    return not qualified_name(REQUESTS_PREFIX + name)


def is_standard_resource_name(name: str) -> bool:
    return name in _STANDARD_RESOURCES or is_hugepages(name) or name.startswith(("requests.hugepages-",))


def resource_name(name: str) -> list[str]:
    """``validateResourceName``: a qualified name, and standard when it has no domain."""
    msgs = qualified_name(name)
    if msgs:
        return msgs
    if "/" not in name and not is_standard_resource_name(name):
        return ["must be a standard resource type or fully qualified"]
    return []


def container_resource_name(name: str) -> list[str]:
    msgs = resource_name(name)
    if "/" not in name:
        if name not in STANDARD_CONTAINER_RESOURCES and not is_hugepages(name):
            return [*msgs, "must be a standard resource for containers"]
    elif not is_native_resource(name) and not is_extended_resource_name(name):
        return [*msgs, "doesn't follow extended resource name standard"]
    return msgs
