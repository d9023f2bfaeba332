"""The kubelet's ``v1.PodResourcesLister`` gRPC service on its local unix socket (grpcio, asyncio).

* **Socket**: by default ``$DRAFLOW_DATA_DIR/kubelet/<node>/pod-resources/kubelet.sock`` (the
  kubelet's ``/var/lib/kubelet/pod-resources/kubelet.sock``), mode 0600; a stale socket file left by
  a killed kubelet is replaced at start, the socket is removed on a clean stop. Unix socket paths
  are limited to 107 bytes: a longer ``--pod-resources-socket`` is refused with a message saying so;
  when the *default* path is too long (a deep ``DRAFLOW_DATA_DIR``), the socket is created in the
  system's temp dir (``draflow-pr-<hash of the path>.sock``) and the default path is a symlink to
  it (clients connect to the link's target; ``draflow podresources`` follows it).
* **Methods** ``List``, ``Get`` and ``GetAllocatableResources`` answer with bytes the
  :class:`~draflow.services.kubelet.podresources.provider.Source` serialized (the server never builds
  messages itself); ``Get`` of an unknown pod is ``NOT_FOUND`` with the kubelet's message
  ``pod NAME in namespace NS not found``, an empty pod name ``INVALID_ARGUMENT``.
* **Protection**: a token bucket (``ratelimit.TokenBucket``) in front of every method; a refused
  call is ``RESOURCE_EXHAUSTED: rejected by rate limit``. gRPC's default message limits apply
  (4 MiB received by a client: see docs/podresources.md for the measured sizes).
* **Metrics**: ``podresources.metrics`` counters per call, as the kubelet's.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import grpc
from grpc import aio

from draflow.services.kubelet.podresources import metrics
from draflow.services.kubelet.podresources.provider import Source
from draflow.services.kubelet.podresources.ratelimit import DEFAULT_BURST, DEFAULT_QPS, REJECTED, TokenBucket
from draflow.services.kubelet.podresources.v1 import api_pb2 as pb

__all__ = ["MAX_SOCKET_PATH", "SERVICE", "PodResourcesServer", "SocketPathError", "default_socket_path"]

log = logging.getLogger(__name__)

SERVICE = "v1.PodResourcesLister"
VERSION = "v1"
MAX_SOCKET_PATH = 107  # sockaddr_un.sun_path holds 108 bytes with the terminating NUL


class SocketPathError(ValueError):
    """The socket cannot be created at that path (too long, or not a socket in the way)."""


def default_socket_path(data_dir: Path, node: str) -> Path:
    return data_dir / "kubelet" / node / "pod-resources" / "kubelet.sock"


def too_long(path: Path) -> bool:
    return len(os.fsencode(path)) > MAX_SOCKET_PATH


def short_path(path: Path) -> Path:
    """Where the socket of a too long default ``path`` is created (the same path every start)."""
    digest = hashlib.sha256(os.fsencode(path.absolute())).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"draflow-pr-{digest}.sock"


def _clear(path: Path, *, link_ok: bool = False) -> None:
    """Remove what a kubelet that did not stop cleanly left at ``path`` (a socket, or our link)."""
    if not (path.exists() or path.is_symlink()):
        return
    mode = path.lstat().st_mode
    if not (stat.S_ISSOCK(mode) or (link_ok and stat.S_ISLNK(mode))):
        raise SocketPathError(f"pod-resources socket path {path} exists and is not a socket")
    path.unlink()


class PodResourcesServer:
    def __init__(
        self,
        source: Source,
        socket_path: Path,
        *,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        link_if_too_long: bool = False,
    ) -> None:
        self.source = source
        self.socket_path = socket_path
        # the socket file itself: socket_path, or (too long, allowed to link) a short path it links to
        self.bound_path = socket_path
        if too_long(socket_path) and link_if_too_long:
            self.bound_path = short_path(socket_path)
        self.limiter = TokenBucket(qps, burst)
        self._server: aio.Server | None = None

    @property
    def address(self) -> str:
        return f"unix:{self.bound_path}"

    async def start(self) -> None:
        path, bound = self.socket_path, self.bound_path
        if too_long(bound):
            raise SocketPathError(
                f"pod-resources socket path {bound} is {len(os.fsencode(bound))} bytes; a unix socket path "
                f"may have at most {MAX_SOCKET_PATH}: choose a shorter one with --pod-resources-socket"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        _clear(path, link_ok=bound != path)
        if bound != path:
            _clear(bound)
        server = aio.server()
        handlers = {
            "List": grpc.unary_unary_rpc_method_handler(
                self._list, request_deserializer=pb.ListPodResourcesRequest.FromString
            ),
            "Get": grpc.unary_unary_rpc_method_handler(
                self._get, request_deserializer=pb.GetPodResourcesRequest.FromString
            ),
            "GetAllocatableResources": grpc.unary_unary_rpc_method_handler(
                self._allocatable, request_deserializer=pb.AllocatableResourcesRequest.FromString
            ),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        try:
            server.add_insecure_port(self.address)
        except RuntimeError as exc:
            raise SocketPathError(f"cannot listen on {self.address}: {exc}") from None
        await server.start()
        os.chmod(bound, 0o600)
        if bound != path:
            path.symlink_to(bound)
            log.info("pod-resources: %s is too long for a unix socket; it links to %s", path, bound)
        self._server = server

    async def stop(self, grace_s: float = 1.0) -> None:
        if self._server is None:
            return
        await self._server.stop(grace_s)
        self._server = None
        for path in {self.socket_path, self.bound_path}:
            try:
                if stat.S_ISSOCK(path.lstat().st_mode) or path.is_symlink():
                    path.unlink()
            except FileNotFoundError:
                pass

    # -- methods ---------------------------------------------------------------------------------
    # Handlers return serialized bytes (no response serializer is registered): the source caches them.

    async def _refuse(self, context: aio.ServicerContext[Any, Any]) -> None:
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, REJECTED)

    async def _list(
        self, request: pb.ListPodResourcesRequest, context: aio.ServicerContext[Any, Any]
    ) -> bytes:
        if not self.limiter.allow():
            await self._refuse(context)
        metrics.count("list", VERSION)
        return self.source.list_bytes()

    async def _get(self, request: pb.GetPodResourcesRequest, context: aio.ServicerContext[Any, Any]) -> bytes:
        if not self.limiter.allow():
            await self._refuse(context)
        metrics.count("get", VERSION)
        if not request.pod_name:
            metrics.count("get", VERSION, error=True)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "pod_name: Required value")
        blob = self.source.get_bytes(request.pod_namespace, request.pod_name)
        if blob is None:
            metrics.count("get", VERSION, error=True)
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
            )
        assert blob is not None
        return blob

    async def _allocatable(
        self, request: pb.AllocatableResourcesRequest, context: aio.ServicerContext[Any, Any]
    ) -> bytes:
        if not self.limiter.allow():
            await self._refuse(context)
        metrics.count("get_allocatable", VERSION)
        return self.source.allocatable_bytes()
