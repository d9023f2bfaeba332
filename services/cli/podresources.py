"""`draflow podresources list|get POD [-n NS]|allocatable --node NODE [-o json|yaml]`.

A real gRPC client of a kubelet's PodResources API (``v1.PodResourcesLister``) on that node's unix
socket (``$DRAFLOW_DATA_DIR/kubelet/<node>/pod-resources/kubelet.sock``, or ``--socket PATH``):
it prints what a monitoring agent or a CNI meta-plugin would see. Tables by default, one row per
device (POD, CONTAINER, CLAIM, DRIVER/POOL/DEVICE, CDI; device-plugin devices show their resource
under CLAIM); ``-o json`` is the response in protobuf's JSON mapping (the field names grpcurl
prints), ``-o yaml`` the same as YAML. gRPC errors are printed in Go's shape
(``rpc error: code = NotFound desc = ...``) with exit code 1.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from infra.config import Settings

__all__ = ["register", "rows", "run"]

TIMEOUT_S = 10.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "podresources",
        help="ask a kubelet's PodResources gRPC API which devices each container got",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, help_ in (
        ("list", "every pod on the node (List)"),
        ("get", "one pod (Get)"),
        ("allocatable", "the devices the node's device plugins advertise (GetAllocatableResources)"),
    ):
        v = verbs.add_parser(verb, help=help_)
        if verb == "get":
            v.add_argument("pod", metavar="POD")
            v.add_argument(
                "-n", "--namespace", default="default", help="the pod's namespace (default: default)"
            )
        v.add_argument("--node", required=True, help="the node whose kubelet to ask")
        v.add_argument(
            "--socket", type=Path, default=None, help="the kubelet's socket (default: from --node)"
        )
        v.add_argument("-o", "--output", choices=("json", "yaml"), default=None, help="output format")
        v.set_defaults(func=run)


def _socket(args: argparse.Namespace) -> Path:
    if args.socket is not None:
        path: Path = args.socket
        return path
    from services.kubelet.podresources.server import default_socket_path

    return default_socket_path(Settings.from_env().data_dir, args.node)


def run(args: argparse.Namespace) -> int:
    import grpc
    from google.protobuf import json_format

    from services.cli.main import UserError
    from services.kubelet.podresources.v1 import api_pb2 as pb
    from services.kubelet.podresources.v1 import api_pb2_grpc

    path = _socket(args)
    if not path.exists():
        raise UserError(f"no pod-resources socket at {path} (is the kubelet of node {args.node} running?)")
    # a kubelet whose default socket path is too long links it to a short one: connect to that
    with grpc.insecure_channel(f"unix:{path.resolve()}") as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        try:
            response: Any
            if args.verb == "list":
                response = stub.List(pb.ListPodResourcesRequest(), timeout=TIMEOUT_S)
            elif args.verb == "get":
                request = pb.GetPodResourcesRequest(pod_name=args.pod, pod_namespace=args.namespace)
                response = stub.Get(request, timeout=TIMEOUT_S)
            else:
                response = stub.GetAllocatableResources(pb.AllocatableResourcesRequest(), timeout=TIMEOUT_S)
        except grpc.RpcError as exc:
            code = exc.code()
            name = "".join(part.capitalize() for part in code.name.split("_")) if code else "Unknown"
            raise UserError(f"rpc error: code = {name} desc = {exc.details()}") from None
    data = json_format.MessageToDict(response)
    if args.output == "json":
        print(json.dumps(data, indent=2))
    elif args.output == "yaml":
        import yaml

        print(yaml.safe_dump(data, sort_keys=False), end="")
    else:
        for line in table(args.verb, data):
            print(line)
    return 0


def rows(pods: list[dict[str, Any]]) -> list[list[str]]:
    """One row per device of every container (a container with none: one row of ``<none>``)."""
    out = []
    for pod in pods:
        ns, name = pod.get("namespace", ""), pod.get("name", "")
        for c in pod.get("containers", []):
            lines = []
            for dev in c.get("devices", []):
                for device_id in dev.get("deviceIds", []):
                    lines.append([dev.get("resourceName", ""), device_id, "<none>"])
            for claim in c.get("dynamicResources", []):
                resources = claim.get("claimResources", [])
                for r in resources:
                    where = f"{r.get('driverName', '')}/{r.get('poolName', '')}/{r.get('deviceName', '')}"
                    cdi = ",".join(d.get("name", "") for d in r.get("cdiDevices", [])) or "<none>"
                    lines.append([claim.get("claimName", ""), where, cdi])
                if not resources:
                    lines.append([claim.get("claimName", ""), "<none>", "<none>"])
            for line in lines or [["<none>", "<none>", "<none>"]]:
                out.append([ns, name, c.get("name", ""), *line])
    return out


def table(verb: str, data: dict[str, Any]) -> list[str]:
    from services.runtime.printers import format_table

    if verb == "allocatable":
        body = [
            [d.get("resourceName", ""), ",".join(d.get("deviceIds", []))] for d in data.get("devices", [])
        ]
        if not body:
            return ["No device-plugin resources on this node."]
        return format_table([["RESOURCE", "DEVICE IDS"], *body])
    pods = data.get("podResources", [])
    pods = pods if isinstance(pods, list) else [pods]
    body = rows(pods)
    if not body:
        return ["No pods on this node."]
    return format_table([["NAMESPACE", "POD", "CONTAINER", "CLAIM", "DRIVER/POOL/DEVICE", "CDI"], *body])
