"""Output like kubectl's: tables with per-kind columns, ages, ``-o yaml|json|name``.

Objects are handled in their JSON form (what the apiserver returns). Tables are padded like
kubectl's tabwriter (three spaces between columns); ``-o wide`` adds the extra columns; ages are
shown as kubectl's HumanDuration (``45s``, ``3m10s``, ``5h``, ``12d``).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import yaml

from draflow.events.api.classic_pod import POD_RESOURCES_ANNOTATION, encode_classic
from draflow.events.api.codec import decode_object

__all__ = [
    "age",
    "as_shown",
    "clock_at",
    "columns",
    "format_table",
    "human_duration",
    "row",
    "to_json",
    "to_yaml",
]

Obj = dict[str, Any]
Getter = Callable[[Obj], str]


def _parse_time(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """kubectl's short duration: seconds up to 2 minutes, then m+s, m, h+m, h, d+h, d, y+d, y."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    years = days // 365
    if years < 8:
        return f"{years}y{days % 365}d" if days % 365 else f"{years}y"
    return f"{years}y"


# The "now" ages are counted from: unset, the wall clock; in an as-of view (``get --as-of-*``),
# the time of the point of the log shown, so a pod 5s old then says 5s, not hours.
_AS_OF: ContextVar[datetime.datetime | None] = ContextVar("draflow_printers_as_of", default=None)


@contextmanager
def clock_at(when: datetime.datetime | None) -> Iterator[None]:
    """Count every AGE printed inside the block from ``when`` (None: from now)."""
    token = _AS_OF.set(when)
    try:
        yield
    finally:
        _AS_OF.reset(token)


def age(timestamp: Any, now: datetime.datetime | None = None) -> str:
    t = _parse_time(timestamp)
    if t is None:
        return "<unknown>"
    now = now or _AS_OF.get() or datetime.datetime.now(datetime.UTC)
    return human_duration((now - t).total_seconds())


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _meta_age(o: Obj) -> str:
    return age(_get(o, "metadata", "creationTimestamp"))


def _name(o: Obj) -> str:
    return str(_get(o, "metadata", "name") or "")


def _claim_state(o: Obj) -> str:
    """As kubectl's resourceclaim printer: deleted, pending | allocated(,reserved)."""
    states = []
    deleting = _get(o, "metadata", "deletionTimestamp") is not None
    if deleting:
        states.append("deleted")
    if _get(o, "status", "allocation") is None:
        if not deleting:
            states.append("pending")
    else:
        states.append("allocated")
        if _get(o, "status", "reservedFor"):
            states.append("reserved")
    return ",".join(states)


def _classic_claim_state(o: Obj) -> str:
    """As kubectl 1.27's v1alpha2 claim printer, from the KEP's phase: deleted, pending |
    allocated(,reserved) | reallocate."""
    states = ["deleted"] if _get(o, "metadata", "deletionTimestamp") is not None else []
    states.append(str(_get(o, "status", "phase") or "Pending").lower())
    if _get(o, "status", "reservedFor"):
        states.append("reserved")
    return ",".join(states)


def _classic_claim_node(o: Obj) -> str:
    """The node a classic driver named in its attributes, or a numeric allocation's node."""
    node = _get(o, "status", "attributes", "node") or _get(o, "status", "numericAllocation", "nodeName")
    return str(node) if node else "<none>"


def _claim_devices(o: Obj) -> str:
    results = _get(o, "status", "allocation", "devices", "results") or []
    return ",".join(f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}" for r in results) or "<none>"


def _pod_ready(o: Obj) -> str:
    statuses = _get(o, "status", "containerStatuses") or []
    total = len(_get(o, "spec", "containers") or [])
    ready = sum(1 for s in statuses if isinstance(s, dict) and s.get("ready"))
    return f"{ready}/{total}"


def _pod_status(o: Obj) -> str:
    """kubectl's STATUS: the pod's reason or phase, overridden by a container's waiting or
    terminated reason (``Completed`` for a finished pod, ``ExitCode:N`` / ``Signal:N`` without
    one); ``Terminating`` once deleted."""
    if _get(o, "metadata", "deletionTimestamp") is not None:
        return "Unknown" if _get(o, "status", "reason") == "NodeLost" else "Terminating"
    reason = str(_get(o, "status", "reason") or _get(o, "status", "phase") or "Pending")
    running = False
    for s in _get(o, "status", "containerStatuses") or []:
        waiting = _get(s, "state", "waiting", "reason")
        terminated = _get(s, "state", "terminated")
        if waiting:
            reason = str(waiting)
        elif isinstance(terminated, dict) and terminated.get("reason"):
            reason = str(terminated["reason"])
        elif isinstance(terminated, dict):
            signal = terminated.get("signal")
            reason = f"Signal:{signal}" if signal else f"ExitCode:{terminated.get('exitCode', 0)}"
        elif isinstance(s, dict) and s.get("ready") and _get(s, "state", "running") is not None:
            running = True
    if reason == "Completed" and running:
        ready = any(
            isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
            for c in _get(o, "status", "conditions") or []
        )
        reason = "Running" if ready else "NotReady"
    return reason


def _pod_restarts(o: Obj) -> str:
    """kubectl's RESTARTS: the containers' restarts, ``N (<age> ago)`` of the last one when known."""
    statuses = [s for s in _get(o, "status", "containerStatuses") or [] if isinstance(s, dict)]
    restarts = sum(int(s.get("restartCount", 0) or 0) for s in statuses)
    last = max((str(_get(s, "lastState", "terminated", "finishedAt") or "") for s in statuses), default="")
    if restarts and last:
        return f"{restarts} ({age(last)} ago)"
    return str(restarts)


def _node_status(o: Obj) -> str:
    ready = "Unknown"
    for c in _get(o, "status", "conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Ready":
            ready = "Ready" if c.get("status") == "True" else "NotReady"
    if _get(o, "spec", "unschedulable"):
        ready += ",SchedulingDisabled"
    return ready


def _node_roles(o: Obj) -> str:
    labels = _get(o, "metadata", "labels") or {}
    roles = sorted(
        k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and "/" in k
    )
    return ",".join(r for r in roles if r) or "<none>"


def _address(kind: str) -> Getter:
    def get(o: Obj) -> str:
        for a in _get(o, "status", "addresses") or []:
            if isinstance(a, dict) and a.get("type") == kind:
                return str(a.get("address", ""))
        return "<none>"

    return get


def _field(*path: str, default: str = "<none>") -> Getter:
    def get(o: Obj) -> str:
        value = _get(o, *path)
        return default if value in (None, "") else str(value)

    return get


def _deploy_ready(o: Obj) -> str:
    return f"{_get(o, 'status', 'readyReplicas') or 0}/{_get(o, 'spec', 'replicas') or 0}"


def _job_status(o: Obj) -> str:
    for c in _get(o, "status", "conditions") or []:
        if (
            isinstance(c, dict)
            and c.get("status") == "True"
            and c.get("type") in ("Complete", "Failed", "Suspended")
        ):
            return str(c["type"])
    return "Running"


def _quota(kind: str) -> Getter:
    def get(o: Obj) -> str:
        hard, used = (
            _get(o, "status", "hard") or _get(o, "spec", "hard") or {},
            _get(o, "status", "used") or {},
        )
        keys = sorted(k for k in hard if k.startswith("limits.") == (kind == "limits"))
        return ", ".join(f"{k}: {used.get(k, 0)}/{hard[k]}" for k in keys)

    return get


def _event_object(o: Obj) -> str:
    return f"{_get(o, 'involvedObject', 'kind')}/{_get(o, 'involvedObject', 'name')}"


def event_order(o: Obj) -> tuple[str, int]:
    """Oldest first: last seen (second precision), then the order they were written in."""
    rv = str(_get(o, "metadata", "resourceVersion") or "0")
    return (str(o.get("lastTimestamp") or o.get("firstTimestamp") or ""), int(rv) if rv.isdigit() else 0)


def event_last_seen(o: Obj) -> str:
    return age(o.get("lastTimestamp") or o.get("firstTimestamp") or _get(o, "metadata", "creationTimestamp"))


AGE = ("AGE", _meta_age, False)
# kind -> columns after NAME: (header, getter, wide only)
_COLUMNS: dict[str, list[tuple[str, Getter, bool]]] = {
    "ResourceClaim": [("STATE", _claim_state, False), AGE, ("DEVICES", _claim_devices, True)],
    "ResourceSlice": [
        ("NODE", _field("spec", "nodeName"), False),
        ("DRIVER", _field("spec", "driver"), False),
        ("POOL", _field("spec", "pool", "name"), False),
        AGE,
        ("DEVICES", lambda o: str(len(_get(o, "spec", "devices") or [])), True),
    ],
    "DeviceTaintRule": [
        AGE,
        ("DRIVER", _field("spec", "deviceSelector", "driver"), True),
        ("EFFECT", _field("spec", "taint", "effect"), True),
    ],
    "Pod": [
        ("READY", _pod_ready, False),
        ("STATUS", _pod_status, False),
        ("RESTARTS", _pod_restarts, False),
        AGE,
        ("IP", _field("status", "podIP"), True),
        ("NODE", _field("spec", "nodeName"), True),
        ("NOMINATED NODE", _field("status", "nominatedNodeName"), True),
        ("READINESS GATES", lambda o: "<none>", True),
    ],
    "Node": [
        ("STATUS", _node_status, False),
        ("ROLES", _node_roles, False),
        AGE,
        ("VERSION", _field("status", "nodeInfo", "kubeletVersion", default=""), False),
        ("INTERNAL-IP", _address("InternalIP"), True),
        ("EXTERNAL-IP", _address("ExternalIP"), True),
        ("OS-IMAGE", _field("status", "nodeInfo", "osImage", default="<unknown>"), True),
        ("KERNEL-VERSION", _field("status", "nodeInfo", "kernelVersion", default="<unknown>"), True),
        (
            "CONTAINER-RUNTIME",
            _field("status", "nodeInfo", "containerRuntimeVersion", default="<unknown>"),
            True,
        ),
    ],
    "Namespace": [("STATUS", _field("status", "phase", default="Active"), False), AGE],
    "Lease": [("HOLDER", _field("spec", "holderIdentity", default=""), False), AGE],
    "Deployment": [
        ("READY", _deploy_ready, False),
        ("UP-TO-DATE", _field("status", "updatedReplicas", default="0"), False),
        ("AVAILABLE", _field("status", "availableReplicas", default="0"), False),
        AGE,
    ],
    "Job": [
        ("STATUS", _job_status, False),
        (
            "COMPLETIONS",
            lambda o: f"{_get(o, 'status', 'succeeded') or 0}/{_get(o, 'spec', 'completions') or 1}",
            False,
        ),
        AGE,
    ],
    # classic DRA (KEP-3063), columns of kubectl's resource.k8s.io/v1alpha2 printers
    "ClassicResourceClaim": [
        ("RESOURCECLASSNAME", _field("spec", "resourceClassName"), False),
        ("ALLOCATIONMODE", _field("spec", "allocationMode"), False),
        ("STATE", _classic_claim_state, False),
        AGE,
        ("NODE", _classic_claim_node, True),
    ],
    "ResourceClass": [("DRIVERNAME", _field("driverName"), False), AGE],
    # KEP-4381: a node's capacity for one driver
    "NodeResourceCapacity": [
        ("NODE", _field("nodeName"), False),
        ("DRIVER", _field("driverName"), False),
        ("INSTANCES", lambda o: str(len(_get(o, "instances") or [])), False),
        AGE,
    ],
    "ResourceQuota": [AGE, ("REQUEST", _quota("requests"), False), ("LIMIT", _quota("limits"), False)],
    "Event": [
        ("TYPE", _field("type", default=""), False),
        ("REASON", _field("reason", default=""), False),
        ("OBJECT", _event_object, False),
        ("MESSAGE", _field("message", default=""), False),
    ],
}


def set_columns(kind: str, cols: list[tuple[str, Getter, bool]] | None) -> None:
    """A custom resource's columns (its CRD's ``additionalPrinterColumns``); None: AGE only."""
    if cols is None:
        _COLUMNS.pop(kind, None)
    else:
        _COLUMNS[kind] = cols


def columns(kind: str, wide: bool) -> list[tuple[str, Getter]]:
    """The columns of a kind's table (NAME first; LAST SEEN first for events)."""
    chosen = [(h, g) for h, g, w in _COLUMNS.get(kind, [AGE]) if wide or not w]
    if kind == "Event":
        return [("LAST SEEN", event_last_seen), *chosen]
    return [("NAME", _name), *chosen]


def row(kind: str, obj: Obj, wide: bool, *, namespace: bool = False, name_prefix: str = "") -> list[str]:
    cells = []
    for header, get in columns(kind, wide):
        value = get(obj)
        cells.append(name_prefix + value if header == "NAME" else value)
    return [str(_get(obj, "metadata", "namespace") or ""), *cells] if namespace else cells


def headers(kind: str, wide: bool, *, namespace: bool = False) -> list[str]:
    hs = [h for h, _ in columns(kind, wide)]
    return ["NAMESPACE", *hs] if namespace else hs


def format_table(rows: Sequence[Sequence[str]], widths: list[int] | None = None, pad: int = 3) -> list[str]:
    """Rows padded like kubectl's tabwriter: each column as wide as its widest cell plus ``pad``
    (3 for get's tables, 2 in describe)."""
    if not rows:
        return []
    n = max(len(r) for r in rows)
    if widths is None:
        widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(n)]
    out = []
    for r in rows:
        cells = [c.ljust(widths[i] + pad) if i < len(r) - 1 else c for i, c in enumerate(r)]
        out.append("".join(cells).rstrip())
    return out


class _Dumper(yaml.SafeDumper):
    """Strings that would read back as something else are double-quoted, as kubectl (go-yaml) does."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    tag = "tag:yaml.org,2002:str"
    style: str | None = None
    if "\n" in data:
        style = "|"
    elif not data or dumper.resolve(yaml.ScalarNode, data, (True, False)) != tag:
        style = '"'
    return dumper.represent_scalar(tag, data, style=style)


_Dumper.add_representer(str, _represent_str)


def to_yaml(obj: Any) -> str:
    """kubectl's ``-o yaml``: keys sorted, block style, ambiguous strings double-quoted."""
    return yaml.dump(
        obj, Dumper=_Dumper, sort_keys=True, default_flow_style=False, allow_unicode=True, width=10_000
    )


def to_json(obj: Any) -> str:
    return json.dumps(obj, indent=4, ensure_ascii=False)


def as_shown(obj: Obj) -> Obj:
    """The object as a user wrote it: a classic (cdi.k8s.io) claim with its wire kind
    ``ResourceClaim``, a KEP-3063 Pod in the KEP shape (``encode_classic``); others unchanged."""
    kind = obj.get("kind")
    if kind == "Pod":
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if POD_RESOURCES_ANNOTATION not in annotations:
            return obj
    elif kind != "ClassicResourceClaim":
        return obj
    try:
        return encode_classic(decode_object(obj))
    except Exception:  # an object this client cannot decode (newer server): show it as stored
        return obj


def as_list(items: list[Obj]) -> Obj:
    """The ``kind: List`` wrapper kubectl prints for several objects."""
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}
