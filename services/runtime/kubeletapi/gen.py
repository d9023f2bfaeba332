"""Generate the Python modules of the kubelet plugin APIs from their ``api.proto`` (grpcio-tools).

``python -m draflow.services.runtime.kubeletapi.gen`` rewrites every ``api_pb2.py``,
``api_pb2.pyi`` and ``api_pb2_grpc.py`` next to its proto in place; ``generate(out_root)`` writes
them elsewhere, which is how ``tests/services/runtime/kubeletapi/test_generated.py`` checks that the
committed files are what the protos give (grpcio-tools is pinned in the ``test`` extra, so the output
is reproducible). As for the PodResources API (``draflow.services.kubelet.podresources.gen``), each
proto is compiled through the ``draflow/`` folder with the project root as include path, so the
generated modules import each other under the one import root.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["GENERATED", "PROTOS", "ROOT", "compile_proto", "generate"]

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
PROTOS = (
    HERE / "pluginregistration" / "v1" / "api.proto",
    HERE / "dra" / "v1" / "api.proto",
    HERE / "dra" / "v1beta1" / "api.proto",
    HERE / "drahealth" / "v1alpha1" / "api.proto",
    HERE / "dranumeric" / "v1alpha1" / "api.proto",
)
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")


def compile_proto(proto: Path, out_root: Path = ROOT) -> list[Path]:
    """Compile one of the project's ``.proto`` files into ``out_root`` (mirroring its package path,
    under the ``draflow`` import root); returns the three files written."""
    from grpc_tools import protoc  # a build/test tool, not a runtime dependency

    relative = Path("draflow") / proto.relative_to(ROOT)  # draflow/services -> services
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


def generate(out_root: Path = ROOT) -> list[Path]:
    """Compile every proto of ``PROTOS`` into ``out_root``; returns the files written, in ``PROTOS``
    order."""
    return [path for proto in PROTOS for path in compile_proto(proto, out_root)]


if __name__ == "__main__":
    for path in generate():
        print(path.relative_to(ROOT))
    sys.exit(0)
