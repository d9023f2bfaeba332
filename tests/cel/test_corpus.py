"""Every CEL selector in the real-world manifest corpus (tests/data/realworld) compiles and
evaluates to a bool or a CEL runtime error (never a Python exception) on assorted devices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from events.quantity import Quantity
from services.dra.cel import CelCompileError, CelRuntimeError, Version, compile_expression, prepare_device

CORPUS = Path(__file__).resolve().parents[1] / "data" / "realworld"


def _expressions(node: Any, out: list[str]) -> None:
    if isinstance(node, dict):
        cel = node.get("cel")
        if isinstance(cel, dict) and isinstance(cel.get("expression"), str):
            out.append(cel["expression"])
        for value in node.values():
            _expressions(value, out)
    elif isinstance(node, list):
        for value in node:
            _expressions(value, out)


def corpus_expressions() -> list[str]:
    found: list[str] = []
    for path in sorted(CORPUS.rglob("*.y*ml")):
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError:
            continue
        for doc in docs:
            _expressions(doc, found)
    return sorted(set(found))


EXPRESSIONS = corpus_expressions()
DEVICES = [
    prepare_device("gpu.nvidia.com", {"type": "gpu", "productName": "NVIDIA A100", "index": 0}, {}),
    prepare_device(
        "gpu.nvidia.com",
        {
            "type": "mig",
            "profile": "1g.5gb",
            "productName": "a100",
            "index": 2,
            "driverVersion": Version("580.1.2"),
        },
        {"multiprocessors": Quantity.parse("14"), "memory": Quantity.parse("5Gi")},
    ),
    prepare_device(
        "dra.net",
        {"rdma": True, "numaNode": 0, "ifName": "eth0", "rdmaDevice": "mlx5_0", "pciDevice": "x"},
        {},
    ),
    prepare_device("driver.example.com", {"type": "gpu"}, {"memory": Quantity.parse("64Gi")}),
    prepare_device("other.example.com", {"resource.kubernetes.io/pciBusID": "0008:06:00.0"}, {}),
]


def test_corpus_has_selectors() -> None:
    assert len(EXPRESSIONS) >= 20


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_corpus_selector(expr: str) -> None:
    try:
        program = compile_expression(expr)
    except CelCompileError:
        pytest.fail(f"corpus selector does not compile: {expr!r}")
    for device in DEVICES:
        try:
            assert program.evaluate(device) in (True, False)
        except CelRuntimeError as exc:
            assert exc.expression == expr
