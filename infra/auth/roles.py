"""Who may write what: the roles of a draflow system and the NATS permissions each one gets.

A role is a credential (one NATS user of the draflow account). Every role is *least privilege*:
its permissions are allow lists, so anything not listed is refused by nats-server itself. The
table here is the single source of the permission matrix: ``draflow.infra.auth.authority`` writes it into
the server's configuration and ``docs/security.md`` shows it (a test keeps the two in step).

Kinds, not event types, are what the server can tell apart: an append is a publish on
``<root>.ev.<Kind>.<namespace>.<name>``, so a role may append only to the kinds it decides on (the
scheduler to Pods, ResourceClaims, classic claims and its sagas; never to DeviceClasses, which only
the apiserver writes). A **kubelet** may append to nothing: its writes go to the apiserver on
``<root>.node.<node>.<verb>``, a subject only that node's credential may publish to, so the
apiserver knows which node asks and applies Kubernetes' NodeRestriction (its own pods and Node,
its Lease, nothing else; ``draflow.services.apiserver.noderestriction``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "ADMIN",
    "CLI",
    "KUBELET_PREFIX",
    "STATIC_ROLES",
    "Permissions",
    "Role",
    "kubelet_role",
    "node_of",
    "permissions",
    "role_named",
]

KUBELET_PREFIX = "kubelet-"
ADMIN = "admin"
CLI = "cli"

# JetStream API operations that change a stream: only the admin may publish these.
STREAM_ADMIN_OPS = ("CREATE", "UPDATE", "DELETE", "PURGE", "MSG.DELETE", "SNAPSHOT", "RESTORE")


@dataclass(frozen=True, slots=True)
class Role:
    """One credential's rights. ``appends``: the kinds whose subjects it publishes events on
    (``("*",)`` = every kind); ``api``: ``"all"`` calls the apiserver's request API,
    ``"node"`` only its node's NodeRestriction API, ``"kube"`` the Kubernetes API replica's, whose
    requests name the user they are for (so no other credential may send there), ``""`` none."""

    name: str
    what: str
    appends: tuple[str, ...] = ()
    api: str = "all"
    serves_api: bool = False
    dead_letters: bool = False
    admin: bool = False


STATIC_ROLES: tuple[Role, ...] = (
    Role(
        ADMIN,
        "stream management, the `archiver` service (trims), `draflow import` / `backup` / `restore` / "
        "`archive`, `dlq retry` / `discard`",
        api="all",
        admin=True,
    ),
    Role(
        "apiserver",
        "admission and every object write; answers the request API and the nodes' API",
        appends=("*",),
        api="",
        serves_api=True,
        dead_letters=True,
    ),
    Role(
        "scheduler",
        "binds pods, allocates and reserves claims (scheduling sagas)",
        appends=("Pod", "ResourceClaim", "ClassicResourceClaim", "NumericLedger", "Saga", "Guard"),
        dead_letters=True,
    ),
    Role(
        "claim-controller",
        "claims from templates, reservations released, claims deallocated",
        appends=("Pod", "ResourceClaim", "ClassicResourceClaim", "Saga", "Guard"),
        dead_letters=True,
    ),
    Role(
        "driver-controller",
        "classic (KEP-3063) claims: allocation, reallocation sagas",
        appends=("ClassicResourceClaim", "PodSchedulingContext", "Saga"),
        dead_letters=True,
    ),
    Role(
        "workloads",
        "Deployments, ReplicaSets, Jobs: pods created and deleted, status (through the API)",
        dead_letters=True,
    ),
    Role("quota-reconciler", "ResourceQuota status (through the API)", dead_letters=True),
    Role(
        "garbage-collector",
        "owner references removed from dependents of any kind",
        appends=("*",),
        dead_letters=True,
    ),
    Role(
        "node-lifecycle-controller",
        "node health (taints, Ready=Unknown), taint eviction, pod GC",
        appends=("Node", "Pod"),
        dead_letters=True,
    ),
    Role(
        "device-taint-eviction-controller",
        "device taint eviction (NoExecute device taints), DeviceTaintRule status",
        appends=("Pod",),
        dead_letters=True,
    ),
    Role("gpu-example-driver", "gpu.example.com: DeviceClass and ResourceSlices (through the API)"),
    Role("acme-gpu-driver", "gpu.acme.com: per-node GPU capacity", appends=("NodeGpuCapacity",)),
    Role(
        "kube-api",
        "the Kubernetes API replica (`--kube-api-only`): reads the log, forwards kubectl's writes "
        "to the apiserver for the user who made them",
        api="kube",
    ),
    Role(CLI, "the `draflow` command: the request API and reading the log, never appending"),
)

_BY_NAME = {role.name: role for role in STATIC_ROLES}


def kubelet_role(node: str) -> Role:
    return Role(
        f"{KUBELET_PREFIX}{node}",
        f"node {node}: its pods' status, its Node and Lease, through its NodeRestriction API",
        api="node",
    )


def node_of(role: str) -> str | None:
    """The node a kubelet role speaks for (None for other roles)."""
    return role[len(KUBELET_PREFIX) :] or None if role.startswith(KUBELET_PREFIX) else None


def role_named(name: str) -> Role | None:
    node = node_of(name)
    if node is not None:
        return kubelet_role(node)
    return _BY_NAME.get(name)


@dataclass(frozen=True, slots=True)
class Permissions:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    publish_deny: tuple[str, ...] = ()
    allow_responses: bool = False

    def to_config(self) -> dict[str, Any]:
        """The ``permissions`` block of a user in nats-server's configuration."""
        pub: dict[str, Any] = {"allow": list(self.publish)}
        if self.publish_deny:
            pub["deny"] = list(self.publish_deny)
        out: dict[str, Any] = {"publish": pub, "subscribe": {"allow": list(self.subscribe)}}
        if self.allow_responses:
            out["allow_responses"] = True
        return out


def inbox_prefix(public_key: str) -> str:
    """Each credential's replies arrive under an inbox of its own, which no one else may read."""
    return f"_INBOX.{public_key}"


def permissions(role: Role, *, root: str, stream: str, dlq_stream: str, public_key: str) -> Permissions:
    """The NATS permissions of ``role`` in a system whose subjects live under ``root``."""
    if role.admin:
        return Permissions(publish=(">",), subscribe=(">",), allow_responses=True)
    js = "$JS.API"
    publish: list[str] = []
    snapshots = f"{stream}_SNAPSHOTS"
    for s in (stream, dlq_stream, snapshots):
        # reading: stream info (identity checks), direct gets, short-lived replay consumers
        publish += [
            f"{js}.STREAM.INFO.{s}",
            f"{js}.DIRECT.GET.{s}",
            f"{js}.DIRECT.GET.{s}.>",
            f"{js}.CONSUMER.CREATE.{s}",
            f"{js}.CONSUMER.CREATE.{s}.>",
            f"{js}.CONSUMER.DURABLE.CREATE.{s}.*",
            f"{js}.CONSUMER.INFO.{s}.*",
            f"{js}.CONSUMER.DELETE.{s}.*",
            f"{js}.CONSUMER.MSG.NEXT.{s}.*",
            f"$JS.ACK.{s}.>",
            f"$JS.FC.{s}.>",
        ]
    if role.appends == ("*",):
        publish.append(f"{root}.ev.>")
    else:
        publish += [f"{root}.ev.{kind}.>" for kind in role.appends]
    if role.dead_letters:
        publish.append(f"{root}.dlq.>")
    if role.name != CLI:
        # snapshots of the fold every service keeps (draflow.infra.snapshots): any service may
        # write one, every one checks what it loads (its hash, its stream, its schema)
        publish.append(f"{root}.snap.>")
    node = node_of(role.name)
    if role.api == "all":
        publish.append(f"{root}.api.*")
    elif role.api == "node" and node is not None:
        publish.append(f"{root}.node.{node}.*")
    elif role.api == "kube":
        publish.append(f"{root}.kapi.*")
    subscribe = [f"{inbox_prefix(public_key)}.>", f"{root}.ev.>", f"{root}.st.>"]
    if role.serves_api:
        subscribe += [f"{root}.api.*", f"{root}.node.*.*", f"{root}.kapi.*"]
        # its answers go to the callers' inboxes. Not `allow_responses`: the server forgets those
        # grants when it reloads its configuration (a new kubelet's credential), and every reply
        # then in flight would be refused
        publish.append("_INBOX.>")
    # explicit denials on top of the allow list: nothing but the admin changes a stream
    deny = [f"{js}.STREAM.{op}.>" for op in STREAM_ADMIN_OPS]
    return Permissions(
        publish=tuple(publish),
        subscribe=tuple(subscribe),
        publish_deny=tuple(deny),
    )


def permission_matrix(root: str = "draflow") -> str:
    """The matrix ``docs/security.md`` shows (a test keeps the page equal to this)."""
    rows = [
        "| role | what it does | appends to the log (`<root>.ev.<Kind>.>`) | request API | "
        "reads the log | manages streams |",
        "|---|---|---|---|---|---|",
    ]
    for role in (*STATIC_ROLES, kubelet_role("<node>")):
        if role.admin:
            appends, api, manages = "everything", f"`{root}.api.*`", "yes"
        else:
            appends = "every kind" if role.appends == ("*",) else ", ".join(role.appends) or "nothing"
            if role.serves_api:
                api = f"answers `{root}.api.*`, `{root}.node.*.*` and `{root}.kapi.*`"
            elif role.api == "node":
                api = f"`{root}.node.<node>.*` only (NodeRestriction)"
            elif role.api == "kube":
                api = f"`{root}.kapi.*` only (for the user it names)"
            else:
                api = f"`{root}.api.*`"
            manages = "no"
        rows.append(f"| `{role.name}` | {role.what} | {appends} | {api} | yes | {manages} |")
    return "\n".join(rows) + "\n"
