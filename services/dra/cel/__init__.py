"""CEL engine for DRA device selectors, with Kubernetes' semantics.

Public API (pure, no I/O, not thread-safe)::

    from draflow.services.dra.cel import (
        compile_expression, prepare_device, Version, CelCompileError, CelRuntimeError,
    )

    program = compile_expression('device.attributes["gpu.example.com"].model == "a100"')
    #   -> Program; cached (LRU by expression text); raises CelCompileError (expression, line,
    #      column, message; str() is "compilation failed: ERROR: <input>:L:C: ...") for syntax
    #      errors, undeclared references, unknown functions/fields, type errors, or a result
    #      that is not bool/dyn. The apiserver can call it for validation.

    device = prepare_device(
        driver="gpu.example.com",
        attributes={"model": "a100", "resource.kubernetes.io/pcieRoot": "pci0",
                    "driverVersion": Version("1.2.3"), "cores": 8, "links": ["a", "b"]},
        capacity={"memory": Quantity.parse("80Gi")},       # draflow.events.quantity.Quantity
        allow_multiple_allocations=None,                   # bool | None (None = false)
    )
    #   -> DeviceInput; build it once per device and reuse it for every claim and selector.
    #      Bare names belong to the driver's domain. Attribute values: int, bool, str,
    #      Version (semver), or lists of those. Any other value (None = "no value set") or a
    #      Version that is not valid semver makes every evaluation on this device raise
    #      CelRuntimeError ("attribute X: unsupported attribute value"), as upstream.

    program.evaluate(device)   # -> bool; raises CelRuntimeError (.expression, .message, and the
                               #    failing sub-expression's .offset/.line/.column; str() is the
                               #    message alone, as upstream; .located() adds the position)

``compile_rule(expression, ("self", "oldSelf"))`` compiles an expression over named JSON-like
variables instead (CRD ``x-kubernetes-validations``, templates): ``.evaluate({"self": ...})``.

A CelRuntimeError (missing key, overflow, no such overload, cost limit exceeded, ...) is an
allocation *error* in Kubernetes, not "device does not match". "no such key" errors carry
upstream's hint to use ``.?``/``orValue()`` or ``has()``. See docs/cel.md for the language.

``with time_limit(deadline):`` (a ``time.monotonic()`` value) bounds the wall time of every
evaluation inside: one that runs past it raises CelInterrupted ("operation interrupted"), which
is about the clock, not the device. Regexes run on RE2 (linear time, Go's syntax and errors).
"""

from .cost import time_limit
from .device import DeviceInput, Version, prepare_device
from .errors import CelCompileError, CelError, CelInterrupted, CelRuntimeError
from .program import (
    COST_LIMIT,
    Program,
    RuleProgram,
    cache_clear,
    check_expression,
    compile_any,
    compile_expression,
    compile_rule,
)

__all__ = [
    "COST_LIMIT",
    "CelCompileError",
    "CelError",
    "CelInterrupted",
    "CelRuntimeError",
    "DeviceInput",
    "Program",
    "RuleProgram",
    "Version",
    "cache_clear",
    "check_expression",
    "compile_any",
    "compile_expression",
    "compile_rule",
    "prepare_device",
    "time_limit",
]
