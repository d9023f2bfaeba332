"""A plugin's admin endpoint: its failure switches read and changed from outside while it runs.

One JSON object per line on a unix socket next to the plugin's node service
(``plugins/<driver>/admin.sock``, ``admin-<instance>.sock``), one JSON answer per line:

* ``{"op": "get"}`` → ``{"switches": {...}, "calls": {"prepare": N, "unprepare": N}}``;
* ``{"op": "set", "switches": {"fail_prepare_calls": 2, "prepare_claims": ["gpu-claim"]}}``;
* ``{"op": "clear"}`` → every switch back to off.

A bad request gets ``{"error": "..."}`` and changes nothing. From a shell::

    python -m draflow.services.drivers.kubeletplugin.admin --node node-1 --driver gpu.example.com \\
        set '{"prepare_claims": ["gpu-claim"]}'

Tests and demos use it to make a plugin fail on demand (upstream's e2e test driver has the same
knobs); a production driver simply runs without it (``--no-admin``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from draflow.infra.config import Settings
from draflow.services.drivers.kubeletplugin.faults import FailureSwitches, SwitchError
from draflow.services.runtime.kubeletapi import sockets

__all__ = ["AdminEndpoint", "admin_path", "admin_request"]


def admin_path(plugins_dir: Path, driver: str, instance: str = "") -> Path:
    return plugins_dir / driver / (f"admin-{instance}.sock" if instance else "admin.sock")


class AdminEndpoint:
    def __init__(
        self,
        path: Path,
        switches: FailureSwitches,
        calls: dict[str, int],
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.path = path
        self.switches = switches
        self.calls = calls
        self.on_change = on_change  # e.g. health streams send again (unhealthy_devices)
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        address = sockets.bind(self.path).removeprefix("unix:")
        self._server = await asyncio.start_unix_server(self._serve, path=address)
        sockets.link(self.path, f"unix:{address}")

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
            sockets.release(self.path)

    def handle(self, request: Any) -> dict[str, Any]:
        """One request's answer (pure apart from the switches it changes)."""
        if not isinstance(request, dict):
            return {"error": "expected a JSON object with an 'op'"}
        op = request.get("op")
        if op == "set":
            changes = request.get("switches")
            if not isinstance(changes, dict):
                return {"error": "set: expected 'switches', an object"}
            trial = FailureSwitches(**vars(self.switches))
            try:
                trial.update(changes)  # all or nothing
            except SwitchError as exc:
                return {"error": f"set: {exc}"}
            self.switches.update(changes)
            self._changed()
        elif op == "clear":
            self.switches.clear()
            self._changed()
        elif op != "get":
            return {"error": f"unknown op {op!r}: get, set or clear"}
        return {"switches": self.switches.to_dict(), "calls": dict(self.calls)}

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                try:
                    answer = self.handle(json.loads(line))
                except json.JSONDecodeError as exc:
                    answer = {"error": f"not JSON: {exc}"}
                writer.write(json.dumps(answer).encode() + b"\n")
                await writer.drain()
        finally:
            writer.close()


async def admin_request(path: Path, request: dict[str, Any], timeout_s: float = 5.0) -> dict[str, Any]:
    """Send one request to a plugin's admin endpoint and return its answer."""
    target = sockets.dial_address(path).removeprefix("unix:")
    async with asyncio.timeout(timeout_s):
        reader, writer = await asyncio.open_unix_connection(target)
        try:
            writer.write(json.dumps(request).encode() + b"\n")
            await writer.drain()
            answer: dict[str, Any] = json.loads(await reader.readline())
        finally:
            writer.close()
    return answer


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m draflow.services.drivers.kubeletplugin.admin",
        description="Read or change a running kubelet plugin's failure switches.",
    )
    p.add_argument("--node", required=True)
    p.add_argument("--driver", required=True)
    p.add_argument("--instance", default="", help="the plugin instance (rolling update), if named")
    p.add_argument("op", choices=("get", "set", "clear"))
    p.add_argument("switches", nargs="?", default="{}", help="for set: a JSON object of switches")
    args = p.parse_args(argv)
    settings = Settings.from_env()
    path = admin_path(sockets.plugins_dir(settings.data_dir, args.node), args.driver, args.instance)
    try:
        request: dict[str, Any] = {"op": args.op}
        if args.op == "set":
            request["switches"] = json.loads(args.switches)
        answer = asyncio.run(admin_request(path, request))
    except (OSError, TimeoutError, json.JSONDecodeError, sockets.SocketPathError) as exc:
        print(f"error: {path}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(answer, sort_keys=True))
    return 1 if "error" in answer else 0


if __name__ == "__main__":
    sys.exit(main())
