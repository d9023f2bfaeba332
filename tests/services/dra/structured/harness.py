"""Run a conformance vector through ``draflow allocate`` and compare with its ``expect`` block.

Comparison rules (vectors/README.md): devices in order; optional device keys only when
non-empty; ``shareID: generated`` = any fresh unique id; quantities numerically; node selector
terms and requirements as sets (values order-insensitive); ``config`` empty unless given;
``error`` is a substring of the reported error.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import yaml

from draflow.events.quantity import Quantity
from draflow.services.cli.main import main

HERE = Path(__file__).parent
VECTORS = sorted((HERE / "vectors").glob("*.yaml"))
EXTRA = sorted((HERE / "vectors_extra").glob("*.yaml"))


def run_cli(path: Path, *extra: str) -> tuple[int, str, str]:
    """In-process ``draflow allocate PATH`` (same code path as the console script)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["allocate", str(path), *extra])
    return code, out.getvalue(), err.getvalue()


def _quantities(d: dict[str, Any] | None) -> dict[str, int]:
    return {k: Quantity.parse(v).nanos for k, v in (d or {}).items()}


def _requirement(r: dict[str, Any]) -> tuple[str, str, frozenset[str]]:
    return (r["key"], r["operator"], frozenset(r.get("values") or ()))


def _selector(sel: dict[str, Any] | None) -> frozenset[Any] | None:
    if sel is None:
        return None
    terms = set()
    for term in sel.get("nodeSelectorTerms") or ():
        exprs = frozenset(_requirement(r) for r in term.get("matchExpressions") or ())
        fields = frozenset(_requirement(r) for r in term.get("matchFields") or ())
        terms.add((exprs, fields))
    return frozenset(terms)


_PLAIN = ("request", "driver", "pool", "device")
_LISTS = ("tolerations", "bindingConditions", "bindingFailureConditions")


def compare(expect: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """Differences between a vector's ``expect`` and the CLI's JSON answer (empty = pass)."""
    problems: list[str] = []
    if bool(expect.get("ok")) != bool(got.get("ok")):
        problems.append(f"ok: expected {expect.get('ok')}, got {got.get('ok')} (error={got.get('error')!r})")
        return problems
    want_err = expect.get("error")
    if want_err is not None:
        if not got.get("error") or want_err not in got["error"]:
            problems.append(f"error: expected substring {want_err!r}, got {got.get('error')!r}")
    elif not expect.get("ok") and got.get("error") is not None:
        problems.append(f"expected no fit without error, got error {got['error']!r}")
    if not expect.get("ok"):
        return problems
    want_alloc: dict[str, Any] = expect.get("allocations") or {}
    got_alloc: dict[str, Any] = got.get("allocations") or {}
    if set(want_alloc) != set(got_alloc):
        problems.append(f"claims: expected {sorted(want_alloc)}, got {sorted(got_alloc)}")
        return problems
    share_ids: set[str] = set()
    for name, want in want_alloc.items():
        have = got_alloc[name]
        wd, hd = want.get("devices") or [], have.get("devices") or []
        if len(wd) != len(hd):
            problems.append(f"{name}: expected {len(wd)} devices, got {len(hd)}: {hd}")
            continue
        for i, (w, h) in enumerate(zip(wd, hd, strict=True)):
            where = f"{name}.devices[{i}]"
            for key in _PLAIN:
                if w.get(key) != h.get(key):
                    problems.append(f"{where}.{key}: expected {w.get(key)!r}, got {h.get(key)!r}")
            if bool(w.get("adminAccess")) != bool(h.get("adminAccess")) or ("adminAccess" in h) != (
                "adminAccess" in w
            ):
                problems.append(
                    f"{where}.adminAccess: expected {w.get('adminAccess')}, got {h.get('adminAccess')}"
                )
            for key in _LISTS:
                if (w.get(key) or []) != (h.get(key) or []) or (key in h and not h[key]):
                    problems.append(f"{where}.{key}: expected {w.get(key)}, got {h.get(key)}")
            if "shareID" in w:
                sid = h.get("shareID")
                if not sid or sid in share_ids:
                    problems.append(f"{where}.shareID: expected a fresh unique id, got {sid!r}")
                share_ids.add(sid or "")
            elif "shareID" in h:
                problems.append(f"{where}.shareID: unexpected {h['shareID']!r}")
            if _quantities(w.get("consumedCapacity")) != _quantities(h.get("consumedCapacity")):
                want_cc, got_cc = w.get("consumedCapacity"), h.get("consumedCapacity")
                problems.append(f"{where}.consumedCapacity: expected {want_cc}, got {got_cc}")
            extra_keys = set(h) - set(_PLAIN) - {"adminAccess", "shareID", "consumedCapacity", *_LISTS}
            if extra_keys:
                problems.append(f"{where}: unexpected keys {sorted(extra_keys)}")
        if _selector(want.get("nodeSelector")) != _selector(have.get("nodeSelector")):
            problems.append(
                f"{name}.nodeSelector: expected {want.get('nodeSelector')}, got {have.get('nodeSelector')}"
            )
        if (want.get("config") or []) != (have.get("config") or []):
            problems.append(f"{name}.config: expected {want.get('config')}, got {have.get('config')}")
    return problems


def check_vector(path: Path) -> list[str]:
    vector = yaml.safe_load(path.read_text())
    code, out, err = run_cli(path)
    if code != 0:
        return [f"exit code {code}: {err.strip()}"]
    got = json.loads(out.strip().splitlines()[-1])
    return compare(vector["expect"], got)
