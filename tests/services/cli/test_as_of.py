"""``draflow get --as-of-seq/--as-of-time``: the past, folded from the log with the real reducers."""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.services.cli.conftest import Result
from tests.services.cli.test_cli import CLASS, NS_AND_CLAIM, write

Draflow = Callable[..., Result]


def _log(draflow: Draflow) -> list[dict[str, Any]]:
    res = draflow("log", "-o", "json")
    assert res.code == 0, res.err
    return [json.loads(line) for line in res.out.splitlines()]


def _last(draflow: Draflow) -> int:
    return int(_log(draflow)[-1]["seq"])


def test_as_of_seq_shows_each_past_state(draflow: Draflow, tmp_path: Path) -> None:
    f = write(tmp_path, "all.yaml", CLASS + "---\n" + NS_AND_CLAIM)
    assert draflow("apply", "-f", f).code == 0
    created = _last(draflow)
    f.write_text(CLASS + "---\n" + NS_AND_CLAIM.replace("app: train", "app: serve"))
    assert draflow("apply", "-f", f).code == 0
    changed = _last(draflow)
    res = draflow("delete", "resourceclaim", "gpu", "-n", "team-a")
    assert res.code == 0, res.err
    deleted = _last(draflow)
    assert created < changed < deleted

    def labels_at(seq: int) -> str:
        res = draflow("get", "rc", "gpu", "-n", "team-a", "--as-of-seq", str(seq), "-o", "json")
        assert res.code == 0, res.err
        obj = json.loads(res.out)
        assert int(obj["metadata"]["resourceVersion"]) <= seq
        return str(obj["metadata"]["labels"]["app"])

    assert labels_at(created) == "train"
    assert labels_at(changed - 1) == "train"
    assert labels_at(changed) == "serve"
    assert labels_at(deleted - 1) == "serve"
    gone = draflow("get", "rc", "gpu", "-n", "team-a", "--as-of-seq", str(deleted))
    assert gone.code == 1
    assert gone.err == 'Error from server (NotFound): resourceclaims.resource.k8s.io "gpu" not found\n'
    assert draflow("get", "rc", "-n", "team-a", "--as-of-seq", str(deleted)).err == (
        "No resources found in team-a namespace.\n"
    )
    # the live state agrees with the last point of the log
    assert draflow("get", "rc", "-A").err == "No resources found\n"

    # tables, -A, -l, -o name and several kinds, as plain `get` prints them
    table = draflow("get", "rc", "-A", "--as-of-seq", str(changed))
    assert table.code == 0
    lines = table.out.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "STATE", "AGE"]
    assert lines[1].split()[:3] == ["team-a", "gpu", "pending"]
    sel = draflow("get", "rc", "-A", "-l", "app=train", "--as-of-seq", str(changed))
    assert sel.out == "" and sel.err == "No resources found\n"
    assert draflow("get", "rc", "-A", "-l", "app=train", "--as-of-seq", str(created), "-o", "name").out == (
        "resourceclaim.resource.k8s.io/gpu\n"
    )
    both = draflow("get", "deviceclasses,ns", "--as-of-seq", str(created), "-o", "name")
    assert "deviceclass.resource.k8s.io/gpu.example.com\n" in both.out and "namespace/team-a\n" in both.out
    yaml_out = draflow("get", "ns", "team-a", "--as-of-seq", str(created), "-o", "yaml").out
    assert "name: team-a" in yaml_out

    # --as-of-time: the state after the last event stored at or before T
    times = {int(e["seq"]): str(e["time"]) for e in _log(draflow)}
    t = times[changed]
    bound = max(seq for seq, when in times.items() if when <= t)
    assert bound >= changed
    by_time = draflow("get", "rc", "-A", "--as-of-time", t, "-o", "json")
    assert by_time.code == 0, by_time.err
    assert by_time.out == draflow("get", "rc", "-A", "--as-of-seq", str(bound), "-o", "json").out
    by_time = draflow("get", "rc", "-A", "--as-of-time", times[created], "-o", "json")
    assert json.loads(by_time.out)["items"][0]["metadata"]["labels"]["app"] == "train"
    early = draflow("get", "ns", "--as-of-time", "2000-01-01T00:00:00Z")
    assert early.code == 0 and early.err == "No resources found\n"


def test_as_of_ages_count_from_the_as_of_time(draflow: Draflow, tmp_path: Path) -> None:
    """AGE in a view of the past is the age the object had then, not its age now."""
    assert draflow("apply", "-f", write(tmp_path, "all.yaml", CLASS + "---\n" + NS_AND_CLAIM)).code == 0
    created = _last(draflow)
    when = datetime.datetime.fromisoformat(str(_log(draflow)[-1]["time"]))

    def age_at(*bound: str) -> str:
        res = draflow("get", "rc", "gpu", "-n", "team-a", *bound)
        assert res.code == 0, res.err
        return res.out.splitlines()[1].split()[-1]

    later = (when + datetime.timedelta(seconds=90)).isoformat().replace("+00:00", "Z")
    assert age_at("--as-of-time", later) == "90s"  # now, it is a second old at most
    assert age_at("--as-of-seq", str(created)) == "0s"
    hours = (when + datetime.timedelta(hours=5, seconds=1)).isoformat().replace("+00:00", "Z")
    assert age_at("--as-of-time", hours) == "5h"


def test_as_of_bad_arguments_are_one_line_errors(draflow: Draflow, tmp_path: Path) -> None:
    assert draflow("apply", "-f", write(tmp_path, "c.yaml", CLASS)).code == 0
    last = _last(draflow)
    cases = {
        ("--as-of-seq", "0"): "error: --as-of-seq: must be >= 1, got 0\n",
        ("--as-of-seq", "x"): "error: --as-of-seq: not a sequence number: 'x'\n",
        ("--as-of-seq", str(last + 5)): (
            f"error: --as-of-seq: {last + 5} is past the end of the log (last sequence {last})\n"
        ),
        ("--as-of-time", "yesterday"): "error: --as-of-time: not an RFC3339 time: 'yesterday'\n",
        ("--as-of-time", "2026-01-01T00:00:00"): (
            "error: --as-of-time: '2026-01-01T00:00:00' has no time zone (add Z or +hh:mm)\n"
        ),
        ("--as-of-seq", "1", "--as-of-time", "2026-01-01T00:00:00Z"): (
            "error: --as-of-seq and --as-of-time cannot be used together\n"
        ),
        ("--as-of-seq", "1", "-w"): "error: --as-of-seq/--as-of-time show the past and cannot be watched\n",
    }
    for extra, err in cases.items():
        assert draflow("get", "deviceclasses", *extra) == (1, "", err), extra
