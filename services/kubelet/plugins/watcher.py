"""The kubelet's plugin watcher: registration sockets in ``plugins_registry`` become plugins.

After upstream's ``pluginwatcher`` and the DRA registration handler. The directory is watched with
inotify (``inotify.DirectoryWatch``, upstream uses fsnotify): a change wakes the watcher, which
rescans the directory (the directory, not the events, is the truth). Besides that it wakes when a
handshake retry is due, and every ``resync_s`` (default 60 s) as a safety net for changes inotify
does not report (a data dir on a network or FUSE mount written from another host). Where inotify
cannot be had (not Linux, the instance or watch limit reached) it scans every ``poll_s``.

* a new socket (or one re-created: another inode, as after a plugin restart) gets the handshake:
  ``GetInfo``; the plugin is accepted when its type is ``DRAPlugin``, it names a driver and offers a
  version this kubelet speaks (``v1.DRAPlugin`` preferred over ``v1beta1.DRAPlugin``); its
  node service is dialled at the advertised endpoint (the registration socket when it gives none);
  ``NotifyRegistrationStatus`` tells it the verdict, with the reason when refused;
* a socket that does not answer yet (a plugin still starting, or the leftover of a killed one) is
  tried again with a backoff (``retry_s`` doubling up to ``max_retry_s``) for as long as it exists;
  a refused one is not tried again until it is re-created;
* a socket that disappears deregisters its instance; the driver stays served while another
  instance of it is registered (``registry``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grpc import aio

from draflow.services.kubelet.plugins.client import DEFAULT_TIMEOUT_S, PluginClient
from draflow.services.kubelet.plugins.inotify import DirectoryWatch
from draflow.services.kubelet.plugins.registry import PluginRegistry
from draflow.services.runtime.kubeletapi import sockets, wire
from draflow.services.runtime.kubeletapi.pluginregistration.v1 import api_pb2 as reg_pb2
from draflow.services.runtime.kubeletapi.pluginregistration.v1 import api_pb2_grpc as reg_grpc

__all__ = ["RegistrationWatcher", "Verdict", "validate"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of validating a ``PluginInfo``: the version chosen, or why it is refused."""

    version: wire.Version | None
    error: str = ""


def validate(info: reg_pb2.PluginInfo) -> Verdict:
    """Upstream's checks for a DRA plugin (pure: the message in, the verdict out)."""
    if info.type != wire.DRA_PLUGIN_TYPE:
        return Verdict(None, f"plugin type {info.type!r} is not supported by this kubelet (only DRAPlugin)")
    if not info.name:
        return Verdict(None, "plugin name is empty: a DRA plugin must name its driver")
    version = wire.pick_version(list(info.supported_versions))
    if version is None:
        offered = ", ".join(info.supported_versions) or "none"
        known = ", ".join(v.service for v in wire.VERSIONS)
        return Verdict(
            None,
            f"none of the services supported by the plugin ({offered}) is supported by the kubelet ({known})",
        )
    return Verdict(version)


@dataclass(slots=True)
class _Seen:
    identity: tuple[int, int]
    registered: bool = False
    refused: bool = False
    failures: int = 0
    retry_at: float = 0.0


class RegistrationWatcher:
    def __init__(
        self,
        directory: Path,
        registry: PluginRegistry,
        *,
        resync_s: float = 60.0,
        poll_s: float = 0.2,
        use_inotify: bool = True,
        call_timeout_s: float = DEFAULT_TIMEOUT_S,
        handshake_timeout_s: float = 5.0,
        retry_s: float = 0.5,
        max_retry_s: float = 5.0,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.directory = directory
        self.registry = registry
        self.resync_s = resync_s
        self.poll_s = poll_s
        self.use_inotify = use_inotify
        self.watching = False  # True while inotify wakes us (False: scanning every poll_s)
        self.call_timeout_s = call_timeout_s
        self.handshake_timeout_s = handshake_timeout_s
        self.retry_s = retry_s
        self.max_retry_s = max_retry_s
        self.on_change = on_change
        self._seen: dict[Path, _Seen] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """Watch until ``stop``; the registered plugins' channels are closed on the way out."""
        self.directory.mkdir(parents=True, exist_ok=True)
        watch = DirectoryWatch.open(self.directory) if self.use_inotify else None
        stopping = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                if watch is not None:
                    watch.changed.clear()
                    if not watch.armed:  # the directory itself went: make it again, watch it again
                        self.directory.mkdir(parents=True, exist_ok=True)
                        watch.rearm()
                self.watching = watch is not None and watch.armed
                await self.scan()
                await self._sleep(stopping, watch)
        finally:
            stopping.cancel()
            if watch is not None:
                watch.close()
            self.watching = False
            for path in list(self._seen):
                await self._deregister(path, quiet=True)

    def _timeout(self) -> float:
        """Until the next scan without a wake-up: the safety net, or a handshake retry due sooner."""
        if not self.watching:
            return self.poll_s
        timeout = self.resync_s
        now = time.monotonic()
        for seen in self._seen.values():
            if not (seen.registered or seen.refused):
                timeout = min(timeout, max(seen.retry_at - now, 0.0))
        return timeout

    async def _sleep(self, stopping: asyncio.Task[bool], watch: DirectoryWatch | None) -> None:
        waits: set[asyncio.Task[bool]] = {stopping}
        changed: asyncio.Task[bool] | None = None
        if watch is not None and self.watching:
            changed = asyncio.create_task(watch.changed.wait())
            waits.add(changed)
        try:
            await asyncio.wait(waits, timeout=self._timeout(), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if changed is not None:
                changed.cancel()

    async def scan(self) -> None:
        """One pass: handshake with new or re-created sockets, deregister the vanished ones."""
        present: dict[Path, tuple[int, int]] = {}
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.directory):
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISSOCK(st.st_mode) or stat.S_ISLNK(st.st_mode):
                    present[Path(entry.path)] = (st.st_ino, st.st_ctime_ns)
        for path in [p for p in self._seen if p not in present]:
            await self._deregister(path)
        now = time.monotonic()
        for path, identity in sorted(present.items()):
            seen = self._seen.get(path)
            if seen is not None and seen.identity != identity:
                await self._deregister(path)  # re-created: the old instance is gone
                seen = None
            if seen is None:
                seen = self._seen[path] = _Seen(identity)
            if seen.registered or seen.refused or now < seen.retry_at:
                continue
            await self._handshake(path, seen)

    async def _handshake(self, path: Path, seen: _Seen) -> None:
        try:
            address = sockets.dial_address(path)
        except sockets.SocketPathError as exc:
            seen.refused = True
            log.error("plugin registration %s: %s", path, exc)
            return
        async with aio.insecure_channel(address) as channel:
            stub = reg_grpc.RegistrationStub(channel)
            try:
                info = await stub.GetInfo(reg_pb2.InfoRequest(), timeout=self.handshake_timeout_s)
            except aio.AioRpcError as exc:
                seen.failures += 1
                delay = min(self.retry_s * 2 ** (seen.failures - 1), self.max_retry_s)
                seen.retry_at = time.monotonic() + delay
                if seen.failures == 1:
                    log.info("plugin registration %s: no answer yet (%s); retrying", path, exc.code())
                return
            verdict = validate(info)
            client: PluginClient | None = None
            if verdict.version is not None:
                endpoint = Path(info.endpoint) if info.endpoint else path
                try:
                    client = PluginClient(
                        info.name,
                        sockets.dial_address(endpoint),
                        verdict.version,
                        timeout_s=self.call_timeout_s,
                    )
                except sockets.SocketPathError as exc:
                    verdict = Verdict(None, str(exc))
            status = reg_pb2.RegistrationStatus(plugin_registered=client is not None, error=verdict.error)
            if client is not None and verdict.version is not None:
                seen.registered = True
                replaced = self.registry.add(info.name, path, info.endpoint, verdict.version.service, client)
                if replaced is not None:
                    await replaced.client.close()
                log.info(
                    "plugin %s registered (%s at %s, via %s)",
                    info.name,
                    verdict.version.service,
                    info.endpoint,
                    path,
                )
                self._changed()
            else:
                seen.refused = True
                log.error("plugin registration %s (%s) refused: %s", path, info.name, verdict.error)
            try:
                await stub.NotifyRegistrationStatus(status, timeout=self.handshake_timeout_s)
            except aio.AioRpcError as exc:  # the verdict stands; the plugin just did not hear it
                log.warning("plugin registration %s: NotifyRegistrationStatus failed: %s", path, exc.code())

    async def _deregister(self, path: Path, *, quiet: bool = False) -> None:
        self._seen.pop(path, None)
        instance = self.registry.remove(path)
        if instance is None:
            return
        await instance.client.close()
        if not quiet:
            log.info("plugin %s deregistered (%s gone)", instance.driver, path)
            self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()
