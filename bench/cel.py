"""CEL selector evaluation throughput, per expression kind and for a typical mix.

Devices are prepared once (as the allocator does per slice generation) and programs compiled
once; the figures are evaluations per second of ``Program.evaluate``. Run::

    python -m bench.cel [--seconds 1.0] [--json]

``measure(seconds)`` returns the same figures for other benchmarks (bench/allocator.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from events.quantity import Quantity
from services.dra.cel import DeviceInput, Version, compile_expression, prepare_device

DRIVER = "gpu.example.com"

EXPRESSIONS: dict[str, str] = {
    "driver_equality": f'device.driver == "{DRIVER}"',
    "attribute_in_list": f'device.attributes["{DRIVER}"].model in ["a100", "h100", "b200"]',
    "quantity_compare": f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0',
    "semver_compare": f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("1.2.0"))',
    "has_int_compare": (
        f'has(device.attributes["{DRIVER}"].cores) && device.attributes["{DRIVER}"].cores >= 8'
    ),
    "class_selector": (
        f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "gpu" && '
        f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("16Gi"))'
    ),
    # a regex on an attribute (RE2, with its cost charged per call); not part of the mix
    "regex_matches": f'device.attributes["{DRIVER}"].model.matches("^[abh][0-9]+$")',
}
# the "typical mix": the six kinds above the regex, each once per device
MIX = [name for name in EXPRESSIONS if name != "regex_matches"]


def device_specs(n: int = 64) -> list[tuple[str, dict[str, object], dict[str, Quantity]]]:
    """A varied pool: several drivers, models, memory sizes and driver versions."""
    models = ["a100", "h100", "b200", "t4", "l4"]
    specs = []
    for i in range(n):
        driver = DRIVER if i % 16 else "other.example.com"
        # names qualified with the selectors' domain, so that other-driver devices do not make the
        # selectors fail (a runtime error aborts a real allocation; it is not the steady state)
        attrs: dict[str, object] = {
            f"{DRIVER}/model": models[i % len(models)],
            f"{DRIVER}/type": "gpu" if i % 3 else "mig",
            f"{DRIVER}/driverVersion": Version(f"1.{i % 5}.{i % 3}"),
            "resource.kubernetes.io/pcieRoot": f"pci{i % 8}",
            "index": i,
        }
        if i % 2:
            attrs[f"{DRIVER}/cores"] = 4 + i % 12
        caps = {
            f"{DRIVER}/memory": Quantity.parse(f"{8 * (1 + i % 10)}Gi"),
            "multiprocessors": Quantity.parse(str(i)),
        }
        specs.append((driver, attrs, caps))
    return specs


def make_devices(n: int = 64) -> list[DeviceInput]:
    return [prepare_device(*spec) for spec in device_specs(n)]


def _rate(program_list: list[Any], devices: list[DeviceInput], seconds: float) -> float:
    evaluations = 0
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    while True:
        for program in program_list:
            evaluate = program.evaluate
            for device in devices:
                evaluate(device)
        evaluations += len(program_list) * len(devices)
        if time.perf_counter() >= deadline:
            break
    return evaluations / (time.perf_counter() - start)


def measure(seconds: float = 1.0) -> dict[str, float]:
    """Evaluations per second for each kind plus ``cel_evals_per_s`` (the typical mix)."""
    devices = make_devices()
    programs = {name: compile_expression(expr) for name, expr in EXPRESSIONS.items()}
    per_kind = max(seconds / (len(programs) + 2), 0.05)
    out: dict[str, float] = {}
    for name, program in programs.items():
        out[f"{name}_evals_per_s"] = _rate([program], devices, per_kind)
    out["cel_evals_per_s"] = _rate([programs[n] for n in MIX], devices, per_kind * 2)
    specs = device_specs(64)
    start = time.perf_counter()
    rounds = 0
    while time.perf_counter() - start < 0.2:
        for spec in specs:
            prepare_device(*spec)
        rounds += 1
    out["prepare_device_per_s"] = rounds * len(specs) / (time.perf_counter() - start)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="total measuring time")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args(argv)
    results = measure(args.seconds)
    width = max(len(k) for k in results)
    for key, value in results.items():
        print(f"{key:<{width}}  {value:>12,.0f}")
    if args.json:
        print(json.dumps({k: round(v) for k, v in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
