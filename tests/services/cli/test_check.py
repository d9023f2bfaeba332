"""``draflow check`` on recorded logs, imported into a real nats-server and read like a user would.

``reapply-running-pod-deallocated.jsonl`` is a real run of the services at commit 3653736 (before
issue 13's fix): the basic ResourceClaimTemplate example applied twice; the second apply unbound
both running pods, the scheduler bound them again and the kubelet then released and deallocated
their claims while they kept Running. That log passed that version's ``verify-replay``; the check
names the apply that broke "prepared on node" and the release that left pod0 Running without its
claim. The basic golden run (apply, schedule, run, unschedulable pod, teardown) passes.
"""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

from draflow.events.dra import ClaimDeallocated
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.services.cli.checker import check_records
from draflow.services.cli.export import import_log
from draflow.services.cli.main import main
from draflow.services.runtime.client import ApiClient
from tests.paths import GOLDEN
from tests.services.cli.test_verify_invariants import CLAIM, _as, _records, running_pod

pytestmark = pytest.mark.kep4381

REAPPLY = GOLDEN / "reapply-running-pod-deallocated.jsonl"
BASIC = GOLDEN / "basic-claim-template.jsonl"


@pytest.fixture
def cli_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("DRAFLOW_NATS_URL", settings.nats_url)
    monkeypatch.setenv("DRAFLOW_STREAM", settings.stream)
    monkeypatch.setenv("DRAFLOW_SUBJECT_ROOT", settings.root)
    return settings


async def _imported(settings: Settings, path: Path) -> None:
    await import_log(settings, path, io.StringIO())


async def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def test_the_reapply_log_breaks_two_rules_named_with_their_events(
    event_store: EventStore, cli_env: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    await _imported(cli_env, REAPPLY)
    code, out, _ = await _cli(capsys, "check")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == (
        "checked 6 invariants after each of 71 events, sequences 1..71 (settling rules: grace 60s)"
    )
    i = lines.index(
        "VIOLATED  running-pod-claims: every Running pod's claims are allocated and reserved for it"
    )
    assert lines[i + 1] == (
        "  broken at seq 67  2026-11-29T01:11:58.623Z  ClaimReservationsReleased on "
        "ResourceClaim/pod0-gpu-lfwxh by kubelet-node-1"
    )
    assert lines[i + 2] == (
        "    pod basic-resourceclaimtemplate/pod0 is Running on node-1 but its claim pod0-gpu-lfwxh is not "
        "reserved for it"
    )
    assert lines[i + 3] == "  still broken at seq 71 (0.0s later)"
    history = lines[
        i + 5 : lines.index(
            "  explain: draflow explain pod pod0 -n basic-resourceclaimtemplate --as-of-seq 67"
        )
    ]
    assert history[0].split() == ["SEQ", "TIME", "ACTOR", "OBJECT", "EVENT", "CORRELATION"]
    assert [h.split()[0] for h in history[1:]] == [
        "10",
        "12",
        "13",
        "24",
        "25",
        "32",
        "40",
        "41",
        "42",
        "46",
        "60",
        "67",
    ]
    j = lines.index("VIOLATED  prepared-on-node: a node holds prepared claims only for pods bound to it")
    assert (
        lines[j + 1].startswith("  broken at seq 46 ")
        and "PodApplied on Pod/pod0 by apiserver" in lines[j + 1]
    )
    assert lines[j + 2] == (
        "    node node-1 holds claims pod0-gpu-lfwxh prepared for pod basic-resourceclaimtemplate/pod0, "
        "which is not bound to any node"
    )
    assert lines[j + 3].startswith("  repaired at seq 60 ")
    assert lines[-1] == "2 invariant(s) violated"
    for rule in ("device-once", "reserved-for-gone-pod", "claim-of-deleted-pod", "quota-usage"):
        assert any(line.startswith(f"ok        {rule}: ") for line in lines), rule

    # before the re-apply everything held; as JSON, the same findings
    code, out, _ = await _cli(capsys, "check", "--as-of-seq", "45")
    assert code == 0 and out.splitlines()[-1] == "every invariant holds"
    code, out, _ = await _cli(capsys, "check", "-o", "json")
    doc = json.loads(out)
    assert code == 1 and doc["violated"] == 2 and doc["to_seq"] == 71
    bad = {r["id"]: r["violation"] for r in doc["rules"] if not r["ok"]}
    assert bad["running-pod-claims"]["broken_by"]["seq"] == 67
    assert bad["running-pod-claims"]["repaired_by"] is None
    assert bad["prepared-on-node"]["repaired_by"]["type"] == "PodBound"


async def test_the_basic_run_holds_every_invariant(
    event_store: EventStore, cli_env: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    await _imported(cli_env, BASIC)
    code, out, _ = await _cli(capsys, "check")
    assert code == 0, out
    assert out.splitlines()[-1] == "every invariant holds"
    assert "VIOLATED" not in out
    code, out, err = await _cli(capsys, "check", "--grace", "-1")
    assert code == 2 or "--grace: must be >= 0" in err


async def test_a_settling_rule_counts_only_past_the_grace(event_store: EventStore, api: ApiClient) -> None:
    """A pod deleted while its claim stays reserved: within the grace it is settling, beyond it a
    violation (grace measured in log time, to the last event checked)."""
    pod = await running_pod(api, event_store)
    (res,) = await api.delete([("Pod", "default", "pod0")], grace_period_seconds=0)
    assert res.error is None, res.error
    records = await _records(event_store)
    checker = check_records(records, event_store.root, grace_s=60)
    assert checker.first_violations() == {}
    (settling,) = [b for b in checker.settling() if b.finding.rule.id == "reserved-for-gone-pod"]
    assert settling.finding.key[-1] == pod.metadata.uid
    strict = check_records(records, event_store.root, grace_s=0)
    assert set(strict.first_violations()) == {"reserved-for-gone-pod", "claim-of-deleted-pod"}


async def test_verify_replay_runs_the_check(
    api: ApiClient, event_store: EventStore, cli_env: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every recorded decision re-decides the same, and no transition rule is broken, but a running
    pod's claim is deallocated under it: verify-replay reports the check's violation."""
    await running_pod(api, event_store)
    code, out, _ = await _cli(capsys, "verify-replay")
    assert code == 0, out
    assert out.splitlines()[-1].startswith("checked 6 invariants after each of ")
    assert out.splitlines()[-1].endswith(" events: every invariant holds")
    seq = await _as(event_store, "kubelet-node-1", "ResourceClaim", CLAIM, [ClaimDeallocated()])
    code, out, err = await _cli(capsys, "verify-replay")
    assert code == 1
    assert "every decision matches the log" in out
    assert "VIOLATED  running-pod-claims: every Running pod's claims are allocated and reserved for it" in out
    assert (
        f"  broken at seq {seq} " in out
        and "ClaimDeallocated on ResourceClaim/pod0-gpu-x7k2p by kubelet-node-1" in out
    )
    assert "breaks 1 invariant(s)" in err
