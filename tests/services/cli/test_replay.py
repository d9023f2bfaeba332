"""``draflow replay`` / ``draflow rebuild`` / ``verify-replay`` on the golden log, imported into a real
JetStream stream (the CLI runs in-process; the log is read back from nats-server)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from draflow.events.api.core_v1 import Pod
from draflow.infra.config import Settings
from draflow.infra.eventstore import EventStore
from draflow.infra.projection_store import ProjectionStore
from draflow.projections.catalog import all_projections
from draflow.services.cli.asof import fold_objects
from draflow.services.cli.main import main
from tests.paths import TESTS

GOLDEN = TESTS / "data" / "golden" / "basic-claim-template.jsonl"


@pytest.fixture
def imported(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("DRAFLOW_NATS_URL", settings.nats_url)
    monkeypatch.setenv("DRAFLOW_STREAM", settings.stream)
    monkeypatch.setenv("DRAFLOW_SUBJECT_ROOT", settings.root)
    monkeypatch.setenv("DRAFLOW_DATA_DIR", str(settings.data_dir))
    assert main(["import", str(GOLDEN)]) == 0
    return settings


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def rows(db: Path, table: str) -> dict[str, bytes]:
    con = sqlite3.connect(db)
    try:
        return dict(con.execute(f"SELECT key, value FROM p_{table}"))
    finally:
        con.close()


def test_replay_builds_every_projection_to_a_point(
    imported: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "at40"
    code, out, err = run(capsys, "replay", "--to-seq", "40", "--data-dir", str(out_dir))
    assert code == 0, err
    assert out.startswith(f"replayed 40 events (sequences 1..40) into {out_dir}/projections.sqlite in ")
    assert "events/s" in out and "events/s" in err and "40/40 events" in err  # summary and progress bar
    db = out_dir / "projections.sqlite"
    names = {p.name for p in all_projections(imported.root)}
    con = sqlite3.connect(db)
    tables = {r[0][2:] for r in con.execute("SELECT name FROM sqlite_master WHERE name LIKE 'p_%'")}
    assert tables == names
    assert con.execute("SELECT seq FROM checkpoints WHERE consumer = 'replay'").fetchone() == (40,)
    con.close()
    # the same objects the apiserver held at sequence 40 (``get --as-of-seq 40`` folds the same way)

    async def expected() -> set[str]:
        store = await EventStore.open(imported, "t", ensure=False)
        try:
            index = await fold_objects(store, 40)
            return {
                f"{p.metadata.namespace}/{p.metadata.name}" for p in index.items("Pod") if isinstance(p, Pod)
            }
        finally:
            await store.close()

    pods = {
        json.loads(v)["metadata"]["namespace"] + "/" + json.loads(v)["metadata"]["name"]
        for v in rows(db, "objects_pod").values()
    }
    assert pods == asyncio.run(expected()) and pods
    sagas = [json.loads(v) for v in rows(db, "sagas").values()]
    assert sorted(s["status"] for s in sagas) == ["Completed", "Completed"]

    # the summary names the tables a user can open, and --query reads them
    assert "  p_objects_pod " in out and "\n  objects_pod " not in out
    assert f'query them: draflow replay --data-dir {out_dir} --query "SELECT key FROM p_objects_pod"' in out
    code, out, err = run(
        capsys, "replay", "--data-dir", str(out_dir), "--query", "SELECT key FROM p_objects_pod ORDER BY key"
    )
    assert code == 0, err
    listed = out.splitlines()
    assert listed[0].strip() == "KEY" and len(listed) == len(pods) + 1
    code, out, err = run(
        capsys,
        "replay",
        "--data-dir",
        str(out_dir),
        "--query",
        "SELECT json_extract(CAST(value AS TEXT), '$.status') AS status FROM p_sagas",
    )
    assert code == 0 and out.split() == ["STATUS", "Completed", "Completed"], err
    code, _, err = run(capsys, "replay", "--data-dir", str(out_dir), "--query", "DELETE FROM p_heads")
    assert code == 1 and err.startswith("error: --query: attempt to write a readonly database"), err
    code, _, err = run(capsys, "replay", "--data-dir", str(out_dir), "--query", "SELECT * FROM objects_pod")
    assert code == 1 and err == "error: --query: no such table: objects_pod\n"
    code, _, err = run(capsys, "replay", "--data-dir", str(tmp_path / "none"), "--query", "SELECT 1")
    assert code == 1 and "no projections there" in err

    code, _, err = run(capsys, "replay", "--data-dir", str(out_dir))
    assert code == 1 and "is not empty" in err
    code, _, err = run(capsys, "replay", "--to-seq", "9999", "--data-dir", str(tmp_path / "x"))
    assert code == 1 and "past the end of the log" in err and not list((tmp_path / "x").iterdir())


def test_replay_to_time_and_rebuild_in_place(
    imported: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys, "replay", "--to-time", "2026-11-22T03:42:59.533Z", "--data-dir", str(tmp_path / "t")
    )
    assert code == 0, err
    assert "(sequences 1..22)" in out  # the last event at or before that millisecond
    full = tmp_path / "full"
    assert run(capsys, "replay", "--data-dir", str(full))[0] == 0
    db = full / "projections.sqlite"
    before = rows(db, "objects_resourceclaim"), rows(db, "heads")
    con = sqlite3.connect(db)
    con.execute("DELETE FROM p_objects_resourceclaim")
    con.execute("UPDATE p_heads SET value = 'garbage'")
    con.commit()
    con.close()
    code, out, err = run(capsys, "rebuild", "objects_resourceclaim", "--data-dir", str(full))
    assert code == 0, err
    assert out.startswith("rebuilt objects_resourceclaim from 66 events (sequences 1..66): ")
    assert rows(db, "objects_resourceclaim") == before[0]
    assert rows(db, "heads") != before[1]  # only the named projection was rebuilt
    assert run(capsys, "rebuild", "p_heads", "--data-dir", str(full))[0] == 0  # the table's name works too
    assert rows(db, "heads") == before[1]

    code, _, err = run(capsys, "rebuild", "objects_widget", "--data-dir", str(full))
    assert code == 1 and err.startswith('error: projection "objects_widget" not found (known: heads, ')
    code, _, err = run(capsys, "rebuild", "heads", "--data-dir", str(tmp_path / "none"))
    assert code == 1 and "no projections there" in err
    # the services keep no SQLite projections in the data dir: a rebuild names the directory
    # `draflow replay` built
    code, _, err = run(capsys, "rebuild", "heads")
    assert code == 2 and "--data-dir" in err


async def test_replayed_projection_equals_a_live_projection_store(imported: Settings, tmp_path: Path) -> None:
    """The CLI's replay writes exactly what ``draflow.infra.projection_store.rebuild`` writes."""
    from draflow.infra.projection_store import rebuild

    code = await asyncio.to_thread(main, ["replay", "--data-dir", str(tmp_path / "cli")])
    assert code == 0
    store = await EventStore.open(imported, "t", ensure=False)
    try:
        for p in all_projections(imported.root)[:3]:
            ref = await ProjectionStore.open(tmp_path / f"{p.name}.sqlite", [p], imported.root)
            try:
                await rebuild(store, ref, "ref")
                assert await ref.rows(p.name) == {
                    k: ref.tables[0].decoder.decode(v)
                    for k, v in rows(tmp_path / "cli" / "projections.sqlite", p.name).items()
                }
            finally:
                await ref.close()
    finally:
        await store.close()


def test_verify_replay_reads_the_old_golden_log(
    imported: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """Logs written before decided_at_seq / snapshot_seq existed are verified from the saga ids."""
    code, out, err = run(capsys, "verify-replay")
    assert code == 0, out + err
    assert out.startswith(
        "verified 6 decisions (2 PodScheduling, 1 PodUnschedulable, 3 claims from templates, 0 quota"
    )
    code, _, err = run(capsys, "verify-replay", "--to-seq", "500")
    assert code == 1 and "outside the log" in err


def test_verify_replay_re_decides_claims_with_the_claim_controller(
    imported: Settings, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claims made from templates are re-decided by the claim controller's own ``sync_pod_from``
    (what its service runs): a changed naming rule there is the first difference."""
    import draflow.services.claim_controller.controller as controller

    monkeypatch.setattr(controller, "generate_claim_name_prefix", lambda pod, claim: f"{pod}-x-{claim}-")
    code, out, err = run(capsys, "verify-replay", "-o", "json")
    assert code == 1, out + err
    divergence = json.loads(out)["divergence"]
    assert divergence["event"].startswith("ResourceClaim ") and " created for pod " in divergence["event"]
    assert divergence["expected"]["spec"] == divergence["actual"]["spec"]
    assert divergence["actual"]["name"].startswith(divergence["expected"]["name"].split("-")[0] + "-x-")
