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

__all__ = ["GENERATED", "PROTO", "ROOT", "generate"]

ROOT = Path(__file__).resolve().parents[3]
PROTO = Path(__file__).resolve().parent / "v1" / "api.proto"
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")


def generate(out_root: Path = ROOT) -> list[Path]:
    """Compile ``PROTO`` into ``out_root`` (mirroring its package path); returns the files written."""
    from grpc_tools import protoc  # a build/test tool, not a runtime dependency

    relative = Path("draflow") / PROTO.relative_to(ROOT)  # draflow/services -> services
    out_root.mkdir(parents=True, exist_ok=True)
    code = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{ROOT}",
            f"--python_out={out_root}",
            f"--pyi_out={out_root}",
            f"--grpc_python_out={out_root}",
            str(relative),
        ]
    )
    if code != 0:
        raise RuntimeError(f"protoc failed on {relative} (exit {code})")
    return [out_root / relative.parent / name for name in GENERATED]


if __name__ == "__main__":
    for path in generate():
        print(path.relative_to(ROOT))
    sys.exit(0)
