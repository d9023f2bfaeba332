"""Failure switches and the admin endpoint that changes them (a real unix socket)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from draflow.services.dra.kubeletplugin import PluginError, PrepareResult
from draflow.services.dra.resourceclaim import ClaimRef
from draflow.services.drivers.kubeletplugin import admin as admin_cli
from draflow.services.drivers.kubeletplugin.admin import AdminEndpoint, admin_path, admin_request
from draflow.services.drivers.kubeletplugin.faults import FailureSwitches, Faulty, SwitchError
from draflow.services.runtime.kubeletapi import sockets

pytestmark = pytest.mark.kep4381

A = ClaimRef(namespace="default", uid="uid-a", name="a")
B = ClaimRef(namespace="default", uid="uid-b", name="b")


class Recording:
    """A driver that prepares everything and remembers what it was asked."""

    driver_name = "rec.example.com"

    def __init__(self) -> None:
        self.asked: list[tuple[str, ...]] = []

    def node_prepare_resources(self, claims):
        self.asked.append(tuple(c.uid for c in claims))
        return {c.uid: PrepareResult() for c in claims}

    def node_unprepare_resources(self, claims):
        self.asked.append(tuple(c.uid for c in claims))
        return {c.uid: None for c in claims}


def test_faulty_fails_calls_and_claims_without_asking_the_driver_for_them() -> None:
    driver, switches = Recording(), FailureSwitches(fail_prepare_calls=1, prepare_claims={"a"})
    plugin = Faulty(driver, switches)
    with pytest.raises(PluginError, match="injected failure: NodePrepareResources unavailable"):
        plugin.node_prepare_resources([A, B])
    results = plugin.node_prepare_resources([A, B])
    assert results["uid-a"].error.endswith("injected failure for claim a") and not results["uid-b"].error
    assert driver.asked == [("uid-b",)]  # the failing claim never reached the driver
    switches.update({"unprepare_claims": ["uid-b"], "fail_unprepare_calls": 1})
    with pytest.raises(PluginError):
        plugin.node_unprepare_resources([A, B])
    assert plugin.node_unprepare_resources([A, B]) == {
        "uid-a": None,
        "uid-b": "injected failure: cannot unprepare claim b",
    }
    assert list(plugin.calls) == [
        ("prepare", ("uid-a", "uid-b")),
        ("prepare", ("uid-a", "uid-b")),
        ("unprepare", ("uid-a", "uid-b")),
        ("unprepare", ("uid-a", "uid-b")),
    ]


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"no_such": 1}, "no failure switch 'no_such'"),
        ({"prepare_claims": "a"}, "prepare_claims: expected a list of claim or device names"),
        ({"fail_prepare_calls": -1}, "fail_prepare_calls: expected a whole number >= 0"),
        ({"prepare_delay_s": "soon"}, "prepare_delay_s: expected a number of seconds >= 0"),
    ],
)
def test_bad_switches_are_refused(changes: dict, error: str) -> None:
    with pytest.raises(SwitchError, match=error):
        FailureSwitches().update(changes)


async def test_the_admin_endpoint_sets_gets_and_clears(tmp_path: Path) -> None:
    switches, calls = FailureSwitches(), {"prepare": 3, "unprepare": 0}
    path = admin_path(sockets.plugins_dir(tmp_path, "node-1"), "gpu.example.com")
    endpoint = AdminEndpoint(path, switches, calls)
    await endpoint.start()
    try:
        answer = await admin_request(
            path, {"op": "set", "switches": {"prepare_claims": ["c"], "prepare_delay_s": 2}}
        )
        assert answer["switches"]["prepare_claims"] == ["c"] and answer["calls"] == calls
        assert switches.prepare_claims == {"c"} and switches.prepare_delay_s == 2.0
        # a bad request changes nothing, not even its good half
        bad = await admin_request(path, {"op": "set", "switches": {"fail_prepare_calls": 2, "nope": 1}})
        assert bad["error"].startswith("set: no failure switch 'nope'") and switches.fail_prepare_calls == 0
        assert (await admin_request(path, {"op": "explode"}))[
            "error"
        ] == "unknown op 'explode': get, set or clear"
        assert (await admin_request(path, {"op": "clear"}))["switches"] == FailureSwitches().to_dict()
        assert switches == FailureSwitches()
    finally:
        await endpoint.stop()
    assert not path.exists()


async def test_the_admin_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("DRAFLOW_DATA_DIR", str(tmp_path))
    switches = FailureSwitches()
    path = admin_path(sockets.plugins_dir(tmp_path, "node-1"), "gpu.example.com", "b")
    endpoint = AdminEndpoint(path, switches, {})
    await endpoint.start()
    try:
        args = ["--node", "node-1", "--driver", "gpu.example.com", "--instance", "b", "set"]
        code = await asyncio.to_thread(admin_cli.main, [*args, '{"fail_unprepare_calls": 2}'])
        assert code == 0 and switches.fail_unprepare_calls == 2
        assert json.loads(capsys.readouterr().out)["switches"]["fail_unprepare_calls"] == 2
        code = await asyncio.to_thread(admin_cli.main, [*args, '{"fail_unprepare_calls": "x"}'])
        assert code == 1 and "expected a whole number" in capsys.readouterr().out
    finally:
        await endpoint.stop()
    gone = await asyncio.to_thread(admin_cli.main, ["--node", "node-1", "--driver", "gpu.example.com", "get"])
    assert gone == 1 and "error:" in capsys.readouterr().err
