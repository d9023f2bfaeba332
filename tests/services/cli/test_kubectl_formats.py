"""The draflow CLI's kubectl-like verbs accept what kubectl users type: -o jsonpath, -o
custom-columns, --sort-by, --dry-run=client; finished pods show Completed; empty input is an error."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.services.cli.conftest import ThreadedApiServer
from tests.services.cli.test_cli import CLASS, Draflow, write


def _ns(name: str, **labels: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})


def test_jsonpath_and_custom_columns(draflow: Draflow) -> None:
    for name, rank in (("b", "2"), ("a", "10"), ("c", "1")):
        assert draflow("apply", "-f", "-", stdin=_ns(name, rank=rank)).code == 0
    names = draflow("get", "namespaces", "-l", "rank", "-o", "jsonpath={.items[*].metadata.name}")
    assert names == (0, "a b c", "")
    ranged = draflow(
        "get",
        "ns",
        "-l",
        "rank",
        "-o",
        r'jsonpath={range .items[*]}{.metadata.name}{"\t"}{.metadata.labels.rank}{"\n"}{end}',
    )
    assert ranged.out == "a\t10\nb\t2\nc\t1\n"
    one = draflow("get", "ns", "a", "-o", "jsonpath={.metadata.labels}")
    assert one.out == '{"rank":"10"}'
    filtered = draflow("get", "ns", "-o", 'jsonpath={.items[?(@.metadata.labels.rank=="2")].metadata.name}')
    assert filtered.out == "b"
    missing = draflow("get", "ns", "a", "-o", "jsonpath={.spec.nothing}")
    assert missing.code == 1 and "nothing is not found" in missing.err
    cols = draflow(
        "get",
        "ns",
        "-l",
        "rank",
        "-o",
        "custom-columns=NAME:.metadata.name,RANK:.metadata.labels.rank,X:.nope",
    )
    assert cols.out.splitlines() == [
        "NAME   RANK   X",
        "a      10     <none>",
        "b      2      <none>",
        "c      1      <none>",
    ]
    bad = draflow("get", "ns", "-o", "custom-columns=NAME")
    assert bad.code == 2 and "expected <header>:<json-path-expr>" in bad.err
    unknown = draflow("get", "ns", "-o", "go-template={{.}}")
    assert unknown.code == 2 and "allowed formats are" in unknown.err


def test_sort_by(draflow: Draflow) -> None:
    for name, rank in (("b", "2"), ("a", "10"), ("c", "1")):
        draflow("apply", "-f", "-", stdin=_ns(name, rank=rank))
    by_rank = draflow("get", "ns", "-l", "rank", "--sort-by", ".metadata.labels.rank", "-o", "name")
    assert by_rank.out.split() == ["namespace/c", "namespace/a", "namespace/b"]  # text order, as kubectl
    newest_last = draflow("get", "ns", "-l", "rank", "--sort-by={.metadata.resourceVersion}", "-o", "name")
    assert newest_last.out.split() == ["namespace/b", "namespace/a", "namespace/c"]


def test_dry_run_client_and_empty_input(draflow: Draflow, system: ThreadedApiServer, tmp_path: Path) -> None:
    path = write(tmp_path, "class.yaml", CLASS)
    dry = draflow("apply", "-f", path, "--dry-run=client")
    assert dry == (0, "deviceclass.resource.k8s.io/gpu.example.com created (dry run)\n", "")
    assert draflow("get", "deviceclasses", "-o", "name").out == ""  # nothing sent
    draflow("apply", "-f", path)
    again = draflow("apply", "-f", path, "--dry-run=client")
    assert again.out == "deviceclass.resource.k8s.io/gpu.example.com configured (dry run)\n"
    create = draflow("create", "-f", "-", "--dry-run=client", stdin=_ns("dry"))
    assert create.out == "namespace/dry created (dry run)\n"
    assert draflow("get", "ns", "dry").code == 1
    empty = draflow("apply", "-f", "-", stdin="")
    assert empty == (1, "", "error: no objects passed to apply\n")
    comments = draflow("create", "-f", "-", stdin="# nothing\n---\n")
    assert comments == (1, "", "error: no objects passed to create\n")


def test_finished_pod_shows_completed(draflow: Draflow, system: ThreadedApiServer) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "done"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    draflow("apply", "-f", "-", stdin=json.dumps(pod))
    terminated = {"exitCode": 0, "reason": "Completed"}
    status = {
        "phase": "Succeeded",
        "containerStatuses": [
            {
                "name": "c",
                "ready": False,
                "restartCount": 0,
                "image": "busybox",
                "imageID": "",
                "state": {"terminated": terminated},
            }
        ],
    }
    system.call(lambda c: c.update_status("Pod", "done", status, namespace="default"))
    row = draflow("get", "pods", "--no-headers").out.split()
    assert row[:3] == ["done", "0/1", "Completed"]
    status["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 2}}  # type: ignore[index]
    status["phase"] = "Failed"
    system.call(lambda c: c.update_status("Pod", "done", status, namespace="default"))
    assert draflow("get", "pods", "--no-headers").out.split()[2] == "ExitCode:2"


def test_crash_looping_pod_shows_the_waiting_reason_and_its_restarts(
    draflow: Draflow, system: ThreadedApiServer
) -> None:
    """kubectl's STATUS shows ``CrashLoopBackOff`` and RESTARTS ``N (<age> ago)`` of the last exit."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "looping"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    draflow("apply", "-f", "-", stdin=json.dumps(pod))
    finished = (datetime.now(UTC) - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": "c",
                "ready": False,
                "restartCount": 2,
                "image": "busybox",
                "imageID": "",
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s ..."}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": finished}},
            }
        ],
    }
    system.call(lambda c: c.update_status("Pod", "looping", status, namespace="default"))
    row = draflow("get", "pods", "--no-headers").out.split()
    assert row[:3] == ["looping", "0/1", "CrashLoopBackOff"]
    assert row[3:6] == ["2", "(30s", "ago)"] or row[3:6] == ["2", "(31s", "ago)"]
