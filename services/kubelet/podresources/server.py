"""The kubelet's ``v1.PodResourcesLister`` gRPC service on its local unix socket (grpcio).

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
* **Threads**: one thread of its own on grpcio's C core (``calls.CallServer``: grpcio's servers'
  per-call thread hand-offs were most of the kubelet's CPU per ``List``, docs/podresources.md#benchmark).
  A call whose answer is cached (``List`` and ``GetAllocatableResources`` between two changes of the
  node) is answered on that thread without touching the kubelet's state; building an answer (and
  every ``Get``) runs on the kubelet's event loop, which owns that state and sends the answer
  itself; the server's thread goes on meanwhile.
* **Protection**: a token bucket (``ratelimit.TokenBucket``; only the server's thread uses it) in
  front of every method; a refused call is ``RESOURCE_EXHAUSTED: rejected by rate limit``. gRPC's
  default message limits apply (4 MiB received by a client: see docs/podresources.md for the
  measured sizes).
* **Metrics**: ``podresources.metrics`` counters per call, as the kubelet's.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import stat
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from draflow.services.kubelet.podresources import metrics
from draflow.services.kubelet.podresources.calls import Call, CallServer
from draflow.services.kubelet.podresources.provider import Source
from draflow.services.kubelet.podresources.ratelimit import DEFAULT_BURST, DEFAULT_QPS, REJECTED, TokenBucket
from draflow.services.kubelet.podresources.v1 import api_pb2 as pb

__all__ = ["MAX_SOCKET_PATH", "SERVICE", "PodResourcesServer", "SocketPathError", "default_socket_path"]

log = logging.getLogger(__name__)

SERVICE = "v1.PodResourcesLister"
VERSION = "v1"
MAX_SOCKET_PATH = 107  # sockaddr_un.sun_path holds 108 bytes with the terminating NUL
STOPPING = "pod-resources server stopping"

M = TypeVar("M", bound=Message)


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
        self._server: CallServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: set[Call] = set()  # calls waiting for the loop to answer them
        self._waiting_lock = threading.Lock()

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
        self._loop = asyncio.get_running_loop()
        server = CallServer(
            {
                f"/{SERVICE}/List": self._list,
                f"/{SERVICE}/Get": self._get,
                f"/{SERVICE}/GetAllocatableResources": self._allocatable,
            }
        )
        if not server.add_port(self.address):
            raise SocketPathError(f"cannot listen on {self.address}")
        server.start()
        os.chmod(bound, 0o600)
        if bound != path:
            path.symlink_to(bound)
            log.info("pod-resources: %s is too long for a unix socket; it links to %s", path, bound)
        self._server = server

    async def stop(self, grace_s: float = 1.0) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        # calls waiting for the loop: it may not answer them any more (it is the caller's, stopping)
        for call in self._claim_all():
            call.fail(grpc.StatusCode.UNAVAILABLE, STOPPING)
        await asyncio.to_thread(server.stop, grace_s)
        for path in {self.socket_path, self.bound_path}:
            try:
                if stat.S_ISSOCK(path.lstat().st_mode) or path.is_symlink():
                    path.unlink()
            except FileNotFoundError:
                pass

    # -- methods ---------------------------------------------------------------------------------
    # Handlers run on the server's thread with the request's bytes and answer with bytes the
    # source serialized (cached ones as they are: nothing is serialized per call).

    def _admit(self, call: Call) -> bool:
        if self.limiter.allow():
            return True
        call.fail(grpc.StatusCode.RESOURCE_EXHAUSTED, REJECTED)
        return False

    def _claim(self, call: Call) -> bool:
        """Whether ``call`` was still waiting (it is not any more): whoever claims it answers it."""
        with self._waiting_lock:
            if call in self._waiting:
                self._waiting.discard(call)
                return True
            return False

    def _claim_all(self) -> list[Call]:
        with self._waiting_lock:
            calls = list(self._waiting)
            self._waiting.clear()
            return calls

    def _on_loop(self, call: Call, fn: Callable[..., bytes | None], *args: Any, not_found: str = "") -> None:
        """Answers ``call`` with ``fn(*args)``, run on the kubelet's event loop (the owner of the
        state it reads); ``None`` from ``fn`` is ``NOT_FOUND`` with the message ``not_found``."""
        loop = self._loop
        assert loop is not None

        def run() -> None:
            if not self._claim(call):
                return  # the server stopped meanwhile and answered it
            try:
                blob = fn(*args)
            except Exception as exc:  # the source's own error: the call fails with it
                log.exception("pod-resources: %s failed", call.method)
                call.fail(grpc.StatusCode.UNKNOWN, f"Exception calling application: {exc}")
                return
            if blob is None:  # only Get's source answers None: no such pod
                metrics.count("get", VERSION, error=True)
                call.fail(grpc.StatusCode.NOT_FOUND, not_found)
            else:
                call.reply(blob)

        with self._waiting_lock:
            self._waiting.add(call)
        try:
            loop.call_soon_threadsafe(run)
        except RuntimeError:  # the kubelet's loop is closed
            if self._claim(call):
                call.fail(grpc.StatusCode.UNAVAILABLE, STOPPING)

    @staticmethod
    def _parse(call: Call, kind: type[M], request: bytes) -> M | None:
        """The request, or ``None`` when it is not one (the call has failed as grpcio fails it)."""
        try:
            return kind.FromString(request)
        except DecodeError:
            call.fail(grpc.StatusCode.INTERNAL, "Exception deserializing request!")
            return None

    def _list(self, call: Call, request: bytes) -> None:
        if self._parse(call, pb.ListPodResourcesRequest, request) is None or not self._admit(call):
            return
        metrics.count("list", VERSION)
        blob = self.source.cached_list_bytes()
        if blob is not None:
            call.reply(blob)
        else:
            self._on_loop(call, self.source.list_bytes)

    def _get(self, call: Call, request: bytes) -> None:
        asked = self._parse(call, pb.GetPodResourcesRequest, request)
        if asked is None or not self._admit(call):
            return
        metrics.count("get", VERSION)
        if not asked.pod_name:
            metrics.count("get", VERSION, error=True)
            call.fail(grpc.StatusCode.INVALID_ARGUMENT, "pod_name: Required value")
            return
        self._on_loop(
            call,
            self.source.get_bytes,
            asked.pod_namespace,
            asked.pod_name,
            not_found=f"pod {asked.pod_name} in namespace {asked.pod_namespace} not found",
        )

    def _allocatable(self, call: Call, request: bytes) -> None:
        if self._parse(call, pb.AllocatableResourcesRequest, request) is None or not self._admit(call):
            return
        metrics.count("get_allocatable", VERSION)
        blob = self.source.cached_allocatable_bytes()
        if blob is not None:
            call.reply(blob)
        else:
            self._on_loop(call, self.source.allocatable_bytes)
