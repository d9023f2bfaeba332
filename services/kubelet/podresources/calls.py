"""Unary gRPC calls served from one thread on grpcio's C core (its completion-queue API).

Why not ``grpc.server``: grpcio's thread-pool server hands every call between its polling thread
and a worker (a thread wake-up each way, a condition per call, a servicer context, a future), and
its asyncio server between a poller thread and the event loop; for a ``List`` answered from cached
bytes that machinery was nearly all of the kubelet's CPU per call (docs/podresources.md#benchmark).
Here one thread polls the completion queue and does a call's three steps itself: the call arrives,
its request message is read, its answer is sent (initial metadata, the message and the status in
one batch). A call that must wait for something else (the kubelet's event loop) is answered later
from any thread: the C core takes a batch from any thread, and its completion comes back here.

This is the layer both of grpcio's servers are built on (``grpc._cython.cygrpc``: the same C
core, HTTP/2 transport and wire format; only the Python around it is ours). It is not grpcio's
public API: tests/services/kubelet/podresources/test_calls.py drives every path of it with
grpcio's client on the grpcio installed (checked on 1.85), and the PodResources tests with
upstream's generated client.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import grpc
from grpc._cython import cygrpc

__all__ = ["Call", "CallServer", "Handler"]

log = logging.getLogger(__name__)

_FLAGS = 0
_OK = cygrpc.StatusCode.ok
_OPERATION_COMPLETE = cygrpc.CompletionType.operation_complete
_QUEUE_SHUTDOWN = cygrpc.CompletionType.queue_shutdown
_CANCELLED_S = 5.0  # how long stop() waits for calls to end once cancelled
_UNKNOWN = None  # the request tag of a method that was not registered


class Call:
    """One call of a method: answer it once, with :meth:`reply` or :meth:`fail`, from any thread."""

    __slots__ = ("_call", "answered", "method")

    def __init__(self, call: Any, method: str) -> None:
        self._call = call
        self.method = method
        self.answered = False

    def _answer(self) -> bool:
        if self.answered:  # a bug of the caller's: the C core would refuse a second status
            log.error("pod-resources: %s answered twice; the second answer is dropped", self.method)
            return False
        self.answered = True
        return True

    def reply(self, message: bytes) -> None:
        """Send ``message`` (already serialized: sent as it is) and status OK."""
        if not self._answer():
            return
        self._call.start_server_batch(
            (
                cygrpc.SendInitialMetadataOperation(None, _FLAGS),
                cygrpc.SendMessageOperation(message, _FLAGS),
                cygrpc.SendStatusFromServerOperation(None, _OK, b"", _FLAGS),
                cygrpc.ReceiveCloseOnServerOperation(_FLAGS),
            ),
            self,
        )

    def fail(self, code: grpc.StatusCode, details: str) -> None:
        """End the call with ``code`` and ``details``, no message."""
        if not self._answer():
            return
        self._call.start_server_batch(
            (
                cygrpc.SendInitialMetadataOperation(None, _FLAGS),
                cygrpc.SendStatusFromServerOperation(None, code.value[0], details.encode(), _FLAGS),
                cygrpc.ReceiveCloseOnServerOperation(_FLAGS),
            ),
            self,
        )


# A method: called on the server's thread with the call and its request message (bytes, as the
# client serialized it); answers the call now, or later from any thread.
Handler = Callable[[Call, bytes], None]


class _Reading:
    """The tag of a call's read of its request message."""

    __slots__ = ("call", "handler")

    def __init__(self, call: Call, handler: Handler) -> None:
        self.call = call
        self.handler = handler


class CallServer:
    """Serves unary ``handlers`` (full method name, e.g. ``/v1.PodResourcesLister/List``)."""

    def __init__(self, handlers: Mapping[str, Handler], options: tuple[tuple[str, Any], ...] = ()) -> None:
        self.handlers = dict(handlers)
        self._cq = cygrpc.CompletionQueue()
        self._server = cygrpc.Server(options, False)  # (channel args, xds)
        self._server.register_completion_queue(self._cq)
        for method in self.handlers:
            self._server.register_method(method)
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._shutdown_tag = object()
        self._active = 0  # calls started and not finished (touched by the server's thread only)
        self._stopped = threading.Event()
        # the C server's calls from two threads (asking for the next call, shutting down, destroying):
        # one at a time, as grpcio's own server does them
        self._lock = threading.Lock()
        self._destroyed = False

    def add_port(self, address: str) -> int:
        """Listen on ``address`` (``unix:PATH``); 0 when the C core could not (grpcio's convention)."""
        return int(self._server.add_http2_port(address.encode(), None))

    def start(self) -> None:
        self._server.start()
        for method in self.handlers:
            self._server.request_registered_call(self._cq, self._cq, method, method)
        self._server.request_call(self._cq, self._cq, _UNKNOWN)
        self._thread = threading.Thread(target=self._serve, name="pod-resources", daemon=True)
        self._thread.start()

    def stop(self, grace_s: float, cancelled_s: float = _CANCELLED_S) -> None:
        """No new calls; calls under way get ``grace_s`` to finish, then are cancelled; a call its
        handler never answers is given up on after ``cancelled_s`` more (with its thread). Blocks."""
        if self._thread is None:
            return
        with self._lock:
            if not self._stopping:
                self._stopping = True
                self._server.shutdown(self._cq, self._shutdown_tag)
        if not self._stopped.wait(grace_s):
            with self._lock:
                if not self._destroyed:
                    self._server.cancel_all_calls()
            if not self._stopped.wait(cancelled_s):  # a call nobody answers: a bug, not a reason to hang
                log.error("pod-resources: calls still open after the server stopped; left behind")
                return
        self._thread.join()
        self._thread = None

    # -- the server's thread ------------------------------------------------------------------------

    def _serve(self) -> None:
        cq, server = self._cq, self._server
        shut_down = False
        while True:
            event = cq.poll()  # woken by every completion, and by the queue's shutdown
            kind = event.completion_type
            if kind == _QUEUE_SHUTDOWN:
                self._stopped.set()
                return
            if kind != _OPERATION_COMPLETE:
                continue  # a timeout (none is set)
            tag = event.tag
            try:
                if isinstance(tag, Call):  # an answer was sent (or the client had gone): done
                    self._active -= 1
                elif isinstance(tag, _Reading):
                    self._read(tag, event)
                elif tag is self._shutdown_tag:
                    shut_down = True
                else:
                    self._arrived(tag, event)
            except Exception:  # the thread serves every other call: it goes on
                log.exception("pod-resources: serving a call failed")
            event = None  # drop the call's last reference before polling again
            if shut_down and self._active == 0:
                shut_down = False
                with self._lock:
                    self._destroyed = True
                    server.destroy()
                cq.shutdown()

    def _arrived(self, method: str | None, event: Any) -> None:
        """A call arrived (``method`` None: not a registered one): read its request."""
        if not event.success:  # a call requested before the server shut down, never to come
            return
        self._active += 1
        if method is _UNKNOWN:
            name = event.call_details.method.decode(errors="replace")
            handler = self.handlers.get(name)
        else:  # (the C core names no method in a registered call's details: it is our tag)
            name, handler = method, self.handlers[method]
        call = Call(event.call, name)
        if handler is None:
            call.fail(grpc.StatusCode.UNIMPLEMENTED, f"unknown method {name}")
        else:
            event.call.start_server_batch((cygrpc.ReceiveMessageOperation(_FLAGS),), _Reading(call, handler))
        with self._lock:  # the next call of that method (none once shutting down: stop() holds the lock)
            if self._stopping:
                return
            if method is _UNKNOWN:
                self._server.request_call(self._cq, self._cq, _UNKNOWN)
            else:
                self._server.request_registered_call(self._cq, self._cq, method, method)

    def _read(self, reading: _Reading, event: Any) -> None:
        call = reading.call
        message = event.batch_operations[0].message() if event.success else None
        if message is None:  # the client cancelled, or half-closed without a message
            if event.success:
                details = f'"{call.method}" requires exactly one request message.'  # grpcio's words
                call.fail(grpc.StatusCode.UNIMPLEMENTED, details)
            else:
                self._active -= 1  # nothing more will complete for it
            return
        try:
            reading.handler(call, message)
        except Exception as exc:  # a handler's bug: the call fails, the server goes on
            log.exception("pod-resources: %s failed", call.method)
            if not call.answered:
                call.fail(grpc.StatusCode.UNKNOWN, f"Exception calling application: {exc}")
