"""One setting moves every port of a system (``DRAFLOW_PORT_OFFSET``); an address set in the
environment always wins; the Procfile sets no port or address of its own; one ``--nats-url`` flag
on every command and service."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from draflow.infra.config import Settings
from draflow.infra.metrics import metrics_port_from_env
from draflow.infra.ports import PortError, Ports
from draflow.infra.tracing import ExportTarget, export_target
from draflow.services.cli.main import build_parser
from draflow.services.kubelet.__main__ import parse_args as kubelet_args
from draflow.services.workloads.__main__ import parse_args as workloads_args
from tests.paths import ROOT
from tests.processes import Proc, draflow


def test_defaults_are_the_usual_ports() -> None:
    ports = Ports.from_env({})
    assert (ports.nats, ports.otlp_grpc, ports.otlp_http, ports.metrics(1), ports.metrics(14)) == (
        4222,
        4317,
        4318,
        9101,
        9114,
    )
    assert Settings.from_env({}).nats_url == "nats://127.0.0.1:4222"
    assert metrics_port_from_env({"DRAFLOW_METRICS_SLOT": "3"}) == 9103
    assert metrics_port_from_env({}) is None  # a service started by hand serves no metrics


def test_the_offset_moves_every_port_and_explicit_addresses_win() -> None:
    env = {"DRAFLOW_PORT_OFFSET": "1000"}
    ports = Ports.from_env(env)
    assert (ports.nats, ports.otlp_grpc, ports.otlp_http, ports.metrics(1)) == (5222, 5317, 5318, 10101)
    assert Settings.from_env(env).nats_url == "nats://127.0.0.1:5222"
    assert metrics_port_from_env({**env, "DRAFLOW_METRICS_SLOT": "11"}) == 10111
    assert export_target(env) == ExportTarget(
        "http/protobuf",
        "http://127.0.0.1:5318/v1/traces",
        "default: the Procfile's otlp receiver, port 5318 with DRAFLOW_PORT_OFFSET=1000",
    )
    grpc = export_target({**env, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert grpc is not None and (grpc.protocol, grpc.url) == ("grpc", "http://127.0.0.1:5317")
    # what the environment names is never replaced by a derived default
    assert (
        Settings.from_env({**env, "DRAFLOW_NATS_URL": "nats://10.0.0.1:4222"}).nats_url
        == "nats://10.0.0.1:4222"
    )
    assert metrics_port_from_env({**env, "DRAFLOW_METRICS_SLOT": "1", "DRAFLOW_METRICS_PORT": "9999"}) == 9999
    jaeger = export_target({**env, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318/"})
    assert jaeger == ExportTarget(
        "http/protobuf", "http://jaeger:4318/v1/traces", "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    exact = export_target(
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:9/x", "OTEL_EXPORTER_OTLP_ENDPOINT": "y"}
    )
    assert exact is not None and exact.url == "http://c:9/x"


def test_tracing_is_turned_off_by_the_standard_variables() -> None:
    assert export_target({"OTEL_TRACES_EXPORTER": "none"}) is None
    assert export_target({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1"}) is None
    assert export_target({"OTEL_TRACES_EXPORTER": "otlp"}) is not None


@pytest.mark.parametrize("raw", ["abc", "-1", "60000", "1.5"])
def test_a_bad_offset_is_one_clear_error(raw: str) -> None:
    with pytest.raises(PortError, match=rf"DRAFLOW_PORT_OFFSET='{re.escape(raw)}': expected a whole number"):
        Ports.from_env({"DRAFLOW_PORT_OFFSET": raw})


def test_procfile_derives_every_port_and_overrides_no_variable() -> None:
    """Each service line names only its metrics slot: a port or address written in the Procfile
    would override the environment and collide with a second system on the machine."""
    lines = [ln for ln in (ROOT / "Procfile").read_text().splitlines() if ln.strip()]
    slots: list[int] = []
    for line in lines:
        name, command = line.split(":", 1)
        assignments = re.findall(r"(\w+)=(\S+)\s", command.split("exec", 1)[0])
        assert all(var == "DRAFLOW_METRICS_SLOT" for var, _ in assignments), line
        assert not re.search(r"\b\d{4,5}\b", command), f"{name}: a fixed port number"
        slots += [int(v) for _, v in assignments]
    # all but nats, otlp and the drivers' kubelet plugins (a DaemonSet-like process per node and
    # driver: its metrics are off in the demo rather than given a slot per node) serve metrics
    plugins = [ln for ln in lines if "_plugin_node_" in ln.split(":", 1)[0]]
    assert len(slots) == len(set(slots)) == len(lines) - 2 - len(plugins)


def _leaf_parsers(parser: argparse.ArgumentParser, path: str = "") -> dict[str, argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {path.strip(): parser}
    out: dict[str, argparse.ArgumentParser] = {}
    for name, child in subs[0].choices.items():
        out |= _leaf_parsers(child, f"{path} {name}")
    return out


def test_every_command_that_reads_the_system_takes_nats_url() -> None:
    leaves = _leaf_parsers(build_parser())
    # no NATS: the allocator on a file; the trace store only; up starts its own system, examples are files
    offline = {"version", "allocate", "trace id", "up", "examples"}
    offline |= {"podresources list", "podresources get", "podresources allocatable"}  # a kubelet's socket
    offline |= {"token create", "token list", "token revoke"}  # the Kubernetes API's token file
    for name, parser in leaves.items():
        options = {o: a.dest for a in parser._actions for o in a.option_strings}
        if name in offline:
            continue
        assert options.get("--nats-url") == "nats_url", name
        assert options.get("--server", "nats_url") == "nats_url", f"{name}: --server is an alias"
    get = leaves["get"].parse_args(["pods", "--server", "nats://a:1"])
    assert get.nats_url == "nats://a:1"
    assert "--server" not in leaves["get"].format_help()  # kept for old scripts, not advertised


def test_services_take_nats_url() -> None:
    assert kubelet_args(["--node", "n", "--nats-url", "nats://h:1"]).nats_url == "nats://h:1"
    assert workloads_args(["--nats-url", "nats://h:1"]).nats_url == "nats://h:1"
    # every service that parses its own arguments lets --nats-url through to run_service
    parsing = [
        ".".join(["draflow", *m.relative_to(ROOT).parent.parts])
        for m in sorted((ROOT / "services").rglob("__main__.py"))
        if "ArgumentParser" in m.read_text() and "run_service" in m.read_text()
    ]
    assert len(parsing) >= 4, parsing
    for module in parsing:
        helped = subprocess.run(
            [sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert helped.returncode == 0 and "--nats-url" in helped.stdout, (module, helped.stderr)


def test_a_service_connects_where_nats_url_says(settings: Settings) -> None:
    # the environment points nowhere; the flag wins, as it does for the CLI
    worker = Proc(
        settings,
        "draflow.services.scheduler",
        ["--nats-url", settings.nats_url],
        {"DRAFLOW_NATS_URL": "nats://127.0.0.1:1"},
        merge_stderr=True,
    )
    try:
        worker.expect(f"scheduler: connected to {settings.nats_url}", anywhere=True, timeout_s=30)
    finally:
        worker.proc.terminate()
        assert worker.wait(timeout_s=15) == 0


def test_log_and_get_take_both_spellings(settings: Settings) -> None:
    for flag in ("--nats-url", "--server"):
        r = draflow(settings, "log", flag, "nats://127.0.0.1:1")
        assert r.returncode == 1 and "cannot connect to NATS at nats://127.0.0.1:1" in r.stderr, r.stderr
    r = draflow(settings, "get", "pods", "--nats-url", "nats://127.0.0.1:1")
    assert r.returncode == 1 and r.stderr.startswith("error: cannot connect to nats://127.0.0.1:1"), r.stderr
    r = draflow(settings, "get", "pods", DRAFLOW_PORT_OFFSET="x", DRAFLOW_NATS_URL="")
    assert r.returncode == 1 and r.stderr.startswith("error: DRAFLOW_PORT_OFFSET='x'"), r.stderr
