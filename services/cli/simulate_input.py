"""What ``draflow simulate`` reads besides the log: ``--pods`` files, ``--node-group`` specs and
their template files, checked the way the API server checks objects (one clear line per error).

Pods from ``--pods`` are admitted as the API server would create them (defaults, validation);
a Deployment or Job becomes the pods its controller would create, and pods using claim templates
get their claims as the claim controller would generate them. Everything gets a deterministic
uid, so the same files give the same simulation.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import msgspec

from draflow.events.api.base import ApiStruct
from draflow.events.api.codec import decode_object, object_meta
from draflow.events.api.core_v1 import Node, Pod
from draflow.events.api.errors import ApiError
from draflow.events.api.numeric_v1alpha2 import NodeResourceCapacity
from draflow.events.api.resource_v1 import ResourceClaim, ResourceClaimTemplate, ResourceSlice
from draflow.events.api.workloads_v1 import Deployment, Job
from draflow.services.apiserver.admission import admit
from draflow.services.apiserver.admission.served import admit_create, is_classic
from draflow.services.claim_controller.controller import sync_pod
from draflow.services.cli.main import UserError
from draflow.services.cli.manifests import read_manifests
from draflow.services.dra.claimactions import CreateClaim, RecordPodClaimStatus
from draflow.services.scheduler.autoscaler import NodeGroup, NodeTemplate, template_from_objects
from draflow.services.workloads.actions import CreatePod
from draflow.services.workloads.deployment import sync_deployment
from draflow.services.workloads.job import sync_job

__all__ = ["FilePods", "parse_node_group", "read_pods", "read_template"]

_GROUP = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_EPOCH = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)  # Jobs' clock: no time passes here


def _admitted(source: str, manifest: object) -> ApiStruct:
    try:
        obj = decode_object(manifest)
        meta = object_meta(obj)
        if is_classic(obj):  # NodeResourceCapacity (KEP-4381) is checked as the apiserver does
            return admit_create(obj, meta.namespace or "default")
        return admit(obj, namespace=meta.namespace or "default")
    except ApiError as exc:
        raise UserError(f"{source}: {exc}") from None


def _objects(path: str) -> list[tuple[str, ApiStruct]]:
    out: list[tuple[str, ApiStruct]] = []
    for doc in read_manifests([path]):
        if doc.error:
            raise UserError(doc.error)
        out.append((doc.source, _admitted(doc.source, doc.manifest)))
    return out


def _uid(kind: str, namespace: str, name: str) -> str:
    return f"simulated-{kind.lower()}-{namespace}-{name}"


def _with_uid(obj: ApiStruct, kind: str) -> ApiStruct:
    meta = object_meta(obj)
    uid = meta.uid or _uid(kind, meta.namespace, meta.name)
    return msgspec.structs.replace(obj, metadata=msgspec.structs.replace(meta, uid=uid))


class FilePods(msgspec.Struct, kw_only=True):
    """The pods of ``--pods`` files (in file order) and the claims they bring or generate."""

    pods: list[Pod] = []
    claims: list[ResourceClaim] = []


def read_pods(paths: Iterable[str], log_objects: Mapping[tuple[str, str, str], object]) -> FilePods:
    """Pods (Deployments and Jobs expanded), claims and claim templates from ``paths``.
    ``log_objects``: (kind, namespace, name) of the snapshot, for name clashes and templates."""
    out = FilePods()
    templates: dict[tuple[str, str], ResourceClaimTemplate] = {
        (ns, name): obj
        for (kind, ns, name), obj in log_objects.items()
        if kind == "ResourceClaimTemplate" and isinstance(obj, ResourceClaimTemplate)
    }
    pods: list[tuple[str, Pod]] = []
    for path in paths:
        for source, obj in _objects(path):
            meta = object_meta(obj)
            if isinstance(obj, Pod):
                pods.append((source, _with_uid(obj, "Pod")))  # type: ignore[arg-type]
            elif isinstance(obj, Deployment):
                actions = sync_deployment(_with_uid(obj, "Deployment"), [], at_seq=0)  # type: ignore[arg-type]
                pods += [(source, a.pod) for a in actions if isinstance(a, CreatePod)]
            elif isinstance(obj, Job):
                actions = sync_job(_with_uid(obj, "Job"), [], _EPOCH, at_seq=0)  # type: ignore[arg-type]
                pods += [(source, a.pod) for a in actions if isinstance(a, CreatePod)]
            elif isinstance(obj, ResourceClaim):
                out.claims.append(_with_uid(obj, "ResourceClaim"))  # type: ignore[arg-type]
            elif isinstance(obj, ResourceClaimTemplate):
                templates[(meta.namespace, meta.name)] = obj
            else:
                raise UserError(
                    f"{source}: {obj.KIND} {meta.name}: --pods takes Pods, Deployments, Jobs, "
                    "ResourceClaims and ResourceClaimTemplates"
                )
    names = {(kind, ns, name) for kind, ns, name in log_objects}
    for claim in out.claims:
        key = ("ResourceClaim", claim.metadata.namespace, claim.metadata.name)
        if key in names:
            raise UserError(f"--pods: ResourceClaim {key[1]}/{key[2]} exists already in the cluster")
        names.add(key)
    for source, pod in pods:
        pod = _with_uid(pod, "Pod")  # type: ignore[assignment]
        meta = pod.metadata
        if ("Pod", meta.namespace, meta.name) in names:
            raise UserError(f"{source}: Pod {meta.namespace}/{meta.name} exists already in the cluster")
        names.add(("Pod", meta.namespace, meta.name))
        pod = _generate_claims(pod, templates, names, out)
        out.pods.append(pod)
    return out


def _generate_claims(
    pod: Pod,
    templates: Mapping[tuple[str, str], ResourceClaimTemplate],
    names: set[tuple[str, str, str]],
    out: FilePods,
) -> Pod:
    """The claims the claim controller would create for the pod's template entries."""
    ns = pod.metadata.namespace
    taken = _Taken(names, ns)
    own = [t for (tns, _), t in templates.items() if tns == ns]
    for action in sync_pod(pod, out.claims, own, taken=taken):
        if isinstance(action, CreateClaim):
            claim = _with_uid(action.claim, "ResourceClaim")
            out.claims.append(claim)  # type: ignore[arg-type]
            names.add(("ResourceClaim", ns, action.claim.metadata.name))
        elif isinstance(action, RecordPodClaimStatus):
            status = msgspec.structs.replace(pod.status, resource_claim_statuses=action.statuses)
            pod = msgspec.structs.replace(pod, status=status)
    for pc in pod.spec.resource_claims:
        if pc.resource_claim_template_name and (ns, pc.resource_claim_template_name) not in templates:
            raise UserError(
                f"Pod {ns}/{pod.metadata.name}: spec.resourceClaims[{pc.name}]: ResourceClaimTemplate "
                f'"{pc.resource_claim_template_name}" not found (in the log or the --pods files)'
            )
    return pod


class _Taken:
    __slots__ = ("names", "namespace")

    def __init__(self, names: set[tuple[str, str, str]], namespace: str) -> None:
        self.names = names
        self.namespace = namespace

    def __contains__(self, name: object) -> bool:
        return ("ResourceClaim", self.namespace, str(name)) in self.names


def read_template(path: str) -> NodeTemplate:
    """A scale-from-zero template: one Node and the ResourceSlices published for it (their
    ``nodeName`` is the Node's name, the placeholder every new node's name replaces)."""
    nodes: list[Node] = []
    slices: list[tuple[str, ResourceSlice]] = []
    capacities: list[tuple[str, NodeResourceCapacity]] = []
    for source, obj in _objects(path):
        if isinstance(obj, Node):
            nodes.append(obj)
        elif isinstance(obj, ResourceSlice):
            slices.append((source, obj))
        elif isinstance(obj, NodeResourceCapacity):
            capacities.append((source, obj))
        else:
            raise UserError(
                f"{source}: {obj.KIND} {object_meta(obj).name}: a node template holds one Node "
                "and its ResourceSlices or NodeResourceCapacity objects"
            )
    if len(nodes) != 1:
        raise UserError(f"{path}: a node template holds exactly one Node, found {len(nodes)}")
    node = nodes[0]
    name = node.metadata.name
    for source, slc in slices:
        if slc.spec.node_name != name:
            got = slc.spec.node_name or ("allNodes" if slc.spec.all_nodes else "a node selector")
            raise UserError(
                f'{source}: ResourceSlice {slc.metadata.name}: spec.nodeName: Invalid value: "{got}": '
                f'must be the template node\'s name "{name}"'
            )
    for source, cap in capacities:
        if cap.node_name != name:
            raise UserError(
                f"{source}: NodeResourceCapacity {cap.metadata.name}: nodeName: Invalid value: "
                f'"{cap.node_name}": must be the template node\'s name "{name}"'
            )
    return template_from_objects(node, [s for _, s in slices], path, [c for _, c in capacities])


def parse_node_group(
    spec: str,
    nodes: Mapping[str, Node],
    slices: Iterable[ResourceSlice],
    capacities: Iterable[NodeResourceCapacity] = (),
) -> NodeGroup:
    """``NAME=NODE|FILE[:MAX]``: a group templated on an existing node or a template file."""
    name, eq, rest = spec.partition("=")
    if not eq or not name or not rest:
        raise UserError(f"--node-group {spec}: expected NAME=NODE|FILE[:MAX]")
    if not _GROUP.match(name) or len(name) > 50:
        raise UserError(
            f"--node-group {spec}: NAME must be a DNS label of at most 50 characters "
            "(its nodes are NAME-1, NAME-2, ...)"
        )
    source, max_nodes = rest, None
    head, colon, tail = rest.rpartition(":")
    if colon and tail.isdigit():
        source, max_nodes = head, int(tail)
        if max_nodes < 1:
            raise UserError(f"--node-group {spec}: MAX must be at least 1")
    taken = sorted(n for n in nodes if re.fullmatch(rf"{re.escape(name)}-\d+", n))
    if taken:
        raise UserError(f"--node-group {spec}: node {taken[0]} exists already; choose another group name")
    if source in nodes:
        template = template_from_objects(nodes[source], slices, source, capacities)
    elif Path(source).is_file():
        template = read_template(source)
    else:
        raise UserError(f"--node-group {spec}: no node or file named {source!r}")
    return NodeGroup(name, template, max_nodes)
