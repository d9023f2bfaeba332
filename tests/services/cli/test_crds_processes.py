"""A CRD and its objects with the real processes: the apiserver as a service and the CLI as a
command (which learns the custom kind from the apiserver), across an apiserver restart (the CRD's
kind is served again from the log)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from draflow.infra.config import Settings
from tests.builders.crds import FROB_GROUP, frobnicator_crd, make_frob
from tests.processes import Proc, draflow

pytestmark = pytest.mark.kep4381


def _apiserver(settings: Settings) -> Proc:
    proc = Proc(settings, "draflow.services.apiserver")
    proc.expect("apiserver: serving", 60)
    return proc


def test_custom_kind_survives_an_apiserver_restart(settings: Settings, tmp_path: Path) -> None:
    f = tmp_path / "frob.yaml"
    f.write_text(yaml.safe_dump_all([frobnicator_crd(), make_frob("three", 3)]))
    server = _apiserver(settings)
    try:
        applied = draflow(settings, "apply", "-f", str(f))
        assert applied.returncode == 0, applied.stderr
        assert f"claimparameters.{FROB_GROUP}/three created" in applied.stdout.splitlines()
    finally:
        assert server.terminate() == 0
    server = _apiserver(settings)  # folds the log again: the CRD, then its objects
    try:
        table = draflow(settings, "get", "claimparameters")
        assert table.returncode == 0, table.stderr
        assert table.stdout.splitlines() == ["NAME    FROBNICATORS", "three   3"]
        bad = draflow(settings, "apply", "-f", "-", stdin=yaml.safe_dump(make_frob("many", 0)))
        assert bad.returncode == 1
        assert bad.stderr.strip().endswith(
            "spec.numberOfFrobnicators: Invalid value: 0: "
            "spec.numberOfFrobnicators in body should be greater than or equal to 1"
        )
        deleted = draflow(settings, "delete", "crd", f"claimparameters.{FROB_GROUP}")
        assert deleted.returncode == 0, deleted.stderr
        gone = draflow(settings, "get", "claimparameters")
        assert gone.returncode == 1 and "doesn't have a resource type" in gone.stderr
    finally:
        assert server.terminate() == 0
