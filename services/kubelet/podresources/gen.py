"""Generate the Python modules of the PodResources API from ``v1/api.proto`` (grpcio-tools).

``python -m draflow.services.kubelet.podresources.gen`` rewrites ``v1/api_pb2.py``, ``v1/api_pb2.pyi`` and
``v1/api_pb2_grpc.py`` in place; ``generate(out_dir)`` writes them elsewhere, which is how
``tests/services/kubelet/podresources/test_generated.py`` checks that the committed files are what
the proto gives (grpcio-tools is pinned in the ``test`` extra, so the output is reproducible). The
proto is compiled through the ``draflow/`` folder (its ``services`` links to ``services/``) with the
project root as include path, so the generated modules import each other by their package path
under the one import root, ``draflow.services.kubelet.podresources.v1``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from draflow.services.runtime.kubeletapi.gen import GENERATED, ROOT, compile_proto

__all__ = ["GENERATED", "PROTO", "ROOT", "generate"]

PROTO = Path(__file__).resolve().parent / "v1" / "api.proto"


def generate(out_root: Path = ROOT) -> list[Path]:
    """Compile ``PROTO`` into ``out_root`` (mirroring its package path); returns the files written."""
    return compile_proto(PROTO, out_root)


if __name__ == "__main__":
    for path in generate():
        print(path.relative_to(ROOT))
    sys.exit(0)
