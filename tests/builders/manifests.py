"""Objects from the repository's manifest files (examples, upstream's real-world copies)."""

from __future__ import annotations

from pathlib import Path

from draflow.events.api.loader import load_manifests
from draflow.services.apiserver.admission import admit
from tests.paths import EXAMPLES, REALWORLD, ROOT

__all__ = ["EXAMPLES", "REALWORLD", "ROOT", "gpu_template_yaml", "load"]


def load(path: Path) -> list[object]:
    """Every document of a manifest file, decoded and admitted (defaults applied)."""
    out: list[object] = []
    for r in load_manifests(path):
        assert r.ok and r.obj is not None, r.error
        out.append(admit(r.obj))
    return out


def gpu_template_yaml(name: str = "single-gpu", namespace: str = "default") -> str:
    """A ResourceClaimTemplate for one device of the example driver's class, as manifest text
    (one YAML document, for tests that apply YAML as a user does)."""
    return f"""apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {{deviceClassName: gpu.example.com}}
"""
