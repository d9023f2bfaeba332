"""Objects from the repository's manifest files (examples, upstream's real-world copies)."""

from __future__ import annotations

from pathlib import Path

from draflow.events.api.loader import load_manifests
from draflow.services.apiserver.admission import admit
from tests.paths import EXAMPLES, REALWORLD, ROOT

__all__ = ["EXAMPLES", "REALWORLD", "ROOT", "load"]


def load(path: Path) -> list[object]:
    """Every document of a manifest file, decoded and admitted (defaults applied)."""
    out: list[object] = []
    for r in load_manifests(path):
        assert r.ok and r.obj is not None, r.error
        out.append(admit(r.obj))
    return out
