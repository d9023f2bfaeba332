"""The watcher woken by inotify, not a poll: registration and deregistration come at once with the
safety-net rescan an hour away, and only come on the timer when inotify is off (the fallback)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from draflow.services.kubelet.plugins.inotify import DirectoryWatch
from draflow.services.kubelet.plugins.watcher import RegistrationWatcher
from draflow.services.runtime.kubeletapi import sockets
from tests.helpers import assert_eventually
from tests.services.kubelet.plugins.test_registration import DRIVER, Node

pytestmark = pytest.mark.kep4381

HOUR = 3600.0


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(tmp_path)
    yield n
    for instance in n.registry.instances():
        await instance.client.close()


@contextlib.asynccontextmanager
async def _running(watcher: RegistrationWatcher) -> AsyncIterator[asyncio.Event]:
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    await assert_eventually(lambda: watcher.watching or task.done(), timeout_s=5)
    try:
        yield stop
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


def _watched(node: Node, *, use_inotify: bool = True, poll_s: float = 0.2) -> RegistrationWatcher:
    node.watcher = RegistrationWatcher(
        node.registry_dir,
        node.registry,
        call_timeout_s=2.0,
        retry_s=0.05,
        resync_s=HOUR,
        use_inotify=use_inotify,
        poll_s=poll_s,
        on_change=node._changed,
    )
    return node.watcher


async def test_directory_watch_wakes_on_changes_and_notices_the_directory_going(tmp_path: Path) -> None:
    watch = DirectoryWatch.open(tmp_path)
    assert watch is not None and watch.armed
    try:
        (tmp_path / "a").write_text("x")
        await asyncio.wait_for(watch.changed.wait(), 2)
        watch.changed.clear()
        os.chmod(tmp_path / "a", 0o600)  # an attribute change (a socket made owner-only once it listens)
        await asyncio.wait_for(watch.changed.wait(), 2)
        watch.changed.clear()
        (tmp_path / "a").unlink()
        await asyncio.wait_for(watch.changed.wait(), 2)
        watch.changed.clear()
        os.rmdir(tmp_path)
        await asyncio.wait_for(watch.changed.wait(), 2)
        await assert_eventually(lambda: not watch.armed, timeout_s=2)
        os.mkdir(tmp_path)
        assert watch.rearm() and watch.armed
    finally:
        watch.close()


async def test_a_plugin_is_registered_and_deregistered_without_waiting_for_a_scan(node: Node) -> None:
    watcher = _watched(node)
    async with _running(watcher):
        assert watcher.watching
        plugin = node.plugin()
        started = time.monotonic()
        await plugin.start()
        try:
            await assert_eventually(lambda: DRIVER in node.registry, timeout_s=3.0, interval_s=0.005)
            assert time.monotonic() - started < 3.0  # the safety-net rescan is an hour away
            await asyncio.wait_for(plugin.registered.wait(), 2)
        finally:
            await plugin.stop()
        await assert_eventually(lambda: DRIVER not in node.registry, timeout_s=3.0, interval_s=0.005)
        restarted = node.plugin()  # the same socket path, re-created: registered again
        await restarted.start()
        try:
            await assert_eventually(lambda: DRIVER in node.registry, timeout_s=3.0, interval_s=0.005)
        finally:
            await restarted.stop()
        assert node.changes == 4


async def test_the_registry_directory_removed_and_made_again_is_watched_again(node: Node) -> None:
    watcher = _watched(node)
    async with _running(watcher):
        shutil.rmtree(node.registry_dir)
        await assert_eventually(lambda: node.registry_dir.is_dir() and watcher.watching, timeout_s=2)
        plugin = node.plugin()
        await plugin.start()
        try:
            await assert_eventually(lambda: DRIVER in node.registry, timeout_s=3.0, interval_s=0.005)
        finally:
            await plugin.stop()


async def test_without_inotify_the_directory_is_scanned_on_a_timer(node: Node) -> None:
    """The fallback, and the proof that the tests above do not pass by scanning: with the timer an
    hour away and inotify off, a new plugin is not seen; a short timer finds it."""
    watcher = _watched(node, use_inotify=False, poll_s=HOUR)
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    plugin = node.plugin()
    try:
        await asyncio.sleep(0.1)  # the first scan (empty directory) is done
        assert not watcher.watching
        await plugin.start()
        await asyncio.sleep(0.5)
        assert DRIVER not in node.registry
        stop.set()
        await asyncio.wait_for(task, 5)
        polled = _watched(node, use_inotify=False, poll_s=0.05)
        stop = asyncio.Event()
        task = asyncio.create_task(polled.run(stop))
        await assert_eventually(lambda: DRIVER in node.registry, timeout_s=2)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
        await plugin.stop()


async def test_a_handshake_retry_comes_on_its_own_timer(node: Node) -> None:
    """A socket that does not answer yet is dialled again after ``retry_s``, not at the resync."""
    watcher = _watched(node)
    async with _running(watcher):
        path = node.registry_dir / f"{DRIVER}-reg.sock"
        address = sockets.bind(path)
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(address.removeprefix("unix:"))  # bound, never listening: the handshake fails
        sockets.link(path, address)

        def retried() -> bool:
            seen = watcher._seen.get(path)
            return seen is not None and seen.failures >= 3

        try:
            await assert_eventually(retried, timeout_s=2)
        finally:
            sock.close()
            sockets.release(path)
