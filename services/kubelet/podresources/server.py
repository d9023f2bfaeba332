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
* **Threads**: grpcio's thread-pool server, not its asyncio one, whose per-call machinery (a poller
  thread waking the event loop, a task per call) cost the kubelet's loop about a third more CPU per
  ``List`` (docs/podresources.md#benchmark). A call whose answer is cached (``List`` and
  ``GetAllocatableResources`` between two changes of the node) is answered on the worker thread
  without touching the kubelet's state; building an answer (and every ``Get``) runs on the
  kubelet's event loop, which owns that state, and the worker waits for it.
* **Protection**: a token bucket (``ratelimit.TokenBucket``, behind a lock: the workers share it) in
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
from concurrent import futures
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import grpc

from draflow.services.kubelet.podresources import metrics
from draflow.services.kubelet.podresources.provider import Source
from draflow.services.kubelet.podresources.ratelimit import DEFAULT_BURST, DEFAULT_QPS, REJECTED, TokenBucket
from draflow.services.kubelet.podresources.v1 import api_pb2 as pb

__all__ = ["MAX_SOCKET_PATH", "SERVICE", "PodResourcesServer", "SocketPathError", "default_socket_path"]

log = logging.getLogger(__name__)

SERVICE = "v1.PodResourcesLister"
VERSION = "v1"
MAX_SOCKET_PATH = 107  # sockaddr_un.sun_path holds 108 bytes with the terminating NUL
# worker threads: a cached answer takes one a few hundred microseconds; more than one so that calls
# waiting for the loop (a Get, an answer being built) do not hold up the cached ones
WORKERS = 4
STOPPING = "pod-resources server stopping"

T = TypeVar("T")


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
        self._limit_lock = threading.Lock()
        self._server: Any = None  # grpc.Server
        self._workers: futures.ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: set[futures.Future[Any]] = set()  # workers waiting for the loop
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
        self._workers = futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="pod-resources")
        server = grpc.server(self._workers)
        # registered with the C core: a call finds its handler without a lookup by method name
        server.add_registered_method_handlers(SERVICE, handlers)
        try:
            server.add_insecure_port(self.address)
        except RuntimeError as exc:
            self._workers.shutdown(wait=False)
            raise SocketPathError(f"cannot listen on {self.address}: {exc}") from None
        server.start()
        os.chmod(bound, 0o600)
        if bound != path:
            path.symlink_to(bound)
            log.info("pod-resources: %s is too long for a unix socket; it links to %s", path, bound)
        self._server = server

    async def stop(self, grace_s: float = 1.0) -> None:
        if self._server is None:
            return
        stopped = self._server.stop(grace_s)  # a threading.Event, set once every call has ended
        with self._waiting_lock:  # calls waiting for this loop: it may not run them any more
            for waiting in self._waiting:
                waiting.cancel()
        await asyncio.to_thread(stopped.wait)
        if self._workers is not None:
            await asyncio.to_thread(self._workers.shutdown)
        self._server = self._workers = None
        for path in {self.socket_path, self.bound_path}:
            try:
                if stat.S_ISSOCK(path.lstat().st_mode) or path.is_symlink():
                    path.unlink()
            except FileNotFoundError:
                pass

    # -- methods ---------------------------------------------------------------------------------
    # Handlers run on the server's worker threads and return serialized bytes (no response
    # serializer is registered): the source caches them. context.abort raises: the call ends there.

    def _admit(self, context: grpc.ServicerContext) -> None:
        with self._limit_lock:
            allowed = self.limiter.allow()
        if not allowed:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, REJECTED)

    def _on_loop(self, context: grpc.ServicerContext, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` run on the kubelet's event loop (the owner of the state it reads), awaited."""
        loop = self._loop
        assert loop is not None
        done: futures.Future[T] = futures.Future()

        def run() -> None:
            if done.set_running_or_notify_cancel():
                try:
                    done.set_result(fn(*args))
                except BaseException as exc:  # handed to the waiting worker: the call fails with it
                    done.set_exception(exc)

        with self._waiting_lock:
            self._waiting.add(done)
        try:
            loop.call_soon_threadsafe(run)
            return done.result()
        except (futures.CancelledError, RuntimeError):  # stop() cancelled it, or the loop is closed
            if not done.cancelled() and done.done():
                raise  # fn itself raised a RuntimeError
            self._abort_stopping(context)
        finally:
            with self._waiting_lock:
                self._waiting.discard(done)

    def _abort_stopping(self, context: grpc.ServicerContext) -> NoReturn:
        context.abort(grpc.StatusCode.UNAVAILABLE, STOPPING)
        raise AssertionError("unreachable: abort raises")

    def _list(self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext) -> bytes:
        self._admit(context)
        metrics.count("list", VERSION)
        blob = self.source.cached_list_bytes()
        return blob if blob is not None else self._on_loop(context, self.source.list_bytes)

    def _get(self, request: pb.GetPodResourcesRequest, context: grpc.ServicerContext) -> bytes:
        self._admit(context)
        metrics.count("get", VERSION)
        if not request.pod_name:
            metrics.count("get", VERSION, error=True)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "pod_name: Required value")
        blob = self._on_loop(context, self.source.get_bytes, request.pod_namespace, request.pod_name)
        if blob is None:
            metrics.count("get", VERSION, error=True)
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
            )
        assert blob is not None
        return blob

    def _allocatable(self, request: pb.AllocatableResourcesRequest, context: grpc.ServicerContext) -> bytes:
        self._admit(context)
        metrics.count("get_allocatable", VERSION)
        blob = self.source.cached_allocatable_bytes()
        return blob if blob is not None else self._on_loop(context, self.source.allocatable_bytes)
