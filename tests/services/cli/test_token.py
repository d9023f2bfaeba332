"""``draflow token`` on a data dir whose Kubernetes API never started: a one-line error, no files.
(With a running API: tests/services/apiserver/kubeapi/test_identities.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from draflow.services.cli.main import main as draflow


def test_without_a_started_api_each_action_says_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    assert draflow(["token", "create", "alice", "--data-dir", str(data)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"error: {data / 'kubeconfig'}: no Kubernetes API has started with this data dir yet"
    )
    assert draflow(["token", "list", "--data-dir", str(data)]) == 1
    assert "start the apiserver with --kube-api once to create it" in capsys.readouterr().err
    assert draflow(["token", "revoke", "alice", "--data-dir", str(data)]) == 1
    assert 'user "alice" has no token' in capsys.readouterr().err
    assert sorted(p.name for p in data.iterdir()) == []  # nothing written


def test_a_bad_user_name_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from draflow.services.apiserver.kubeapi.auth import load_or_create, write_kubeconfig

    creds = load_or_create(tmp_path / "kubeapi", "127.0.0.1")
    write_kubeconfig(creds, "https://127.0.0.1:8443", tmp_path / "kubeconfig")
    before = (tmp_path / "kubeapi" / "tokens.csv").read_bytes()
    assert draflow(["token", "create", "system:evil", "--data-dir", str(tmp_path)]) == 1
    assert "reserved for the system" in capsys.readouterr().err
    assert (tmp_path / "kubeapi" / "tokens.csv").read_bytes() == before
    assert not (tmp_path / "kubeconfigs").exists()
