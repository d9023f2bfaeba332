"""Error types of the CEL engine.

Compile errors name the expression and the position (line:column) of the offending token, in the
same ``ERROR: <input>:L:C: message`` shape cel-go prints, so users get the same hints as upstream.
Runtime errors are raised while evaluating a selector against one device; for the allocator they
are fatal (an allocation *error*), never "device does not match".
"""

from __future__ import annotations

__all__ = ["CelCompileError", "CelError", "CelInterrupted", "CelRuntimeError", "EvalError"]

# Kubernetes' DRA package appends this hint to every "no such key" runtime error.
NO_SUCH_KEY_HINT = (
    ". consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() "
    "for optional fields"
)


class CelError(ValueError):
    """Base class: something is wrong with a CEL expression."""

    def __init__(self, expression: str, message: str) -> None:
        super().__init__(message)
        self.expression = expression
        self.message = message


class CelCompileError(CelError):
    """The expression cannot be compiled (syntax, unknown identifier/function, wrong types)."""

    def __init__(
        self, expression: str, message: str, offset: int = 0, positional: bool = True, internal: bool = False
    ) -> None:
        self.offset = offset
        self.positional = positional
        # Kubernetes reports this one as an internal error (``program instantiation failed``)
        self.internal = internal
        self.line, self.column = line_column(expression, offset)
        super().__init__(expression, message)
        self.args = (self.__str__(),)

    def __str__(self) -> str:
        if not self.positional:
            return self.message
        return "compilation failed: " + format_issue(self.expression, self.offset, self.message)


class CelRuntimeError(CelError):
    """Evaluating a compiled expression failed (missing key, overflow, no such overload, cost).

    ``offset``/``line``/``column`` locate the sub-expression that failed (-1/None when the
    failure is not tied to one, e.g. bad device input or the cost limit). ``str()`` is the
    message alone, as upstream prints it; ``located()`` adds the position.
    """

    def __init__(self, expression: str, message: str, offset: int = -1) -> None:
        if "no such key:" in message and not message.endswith(NO_SUCH_KEY_HINT):
            message += NO_SUCH_KEY_HINT
        super().__init__(expression, message)
        self.offset = offset
        self.line: int | None = None
        self.column: int | None = None
        if offset >= 0:
            self.line, self.column = line_column(expression, offset)

    def __str__(self) -> str:
        return self.message

    def located(self) -> str:
        if self.offset < 0:
            return self.message
        return format_issue(self.expression, self.offset, self.message)


class CelInterrupted(CelRuntimeError):
    """The evaluation ran past its wall-time deadline (``cost.time_limit``) and was stopped.

    Not a property of the expression or the device: callers must not remember it as a verdict.
    """

    def __init__(self, expression: str) -> None:
        super().__init__(expression, "operation interrupted")


class EvalError(Exception):
    """Internal: an error *value* during evaluation (absorbed by ``&&``/``||`` like CEL's error values).

    ``offset`` is filled in only when a failed evaluation is replayed to locate the error.
    """

    __slots__ = ("message", "offset")

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.offset = -1


def line_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column (in code points) of ``offset``."""
    offset = max(0, min(offset, len(text)))
    line = text.count("\n", 0, offset) + 1
    start = text.rfind("\n", 0, offset) + 1
    return line, offset - start + 1


def format_issue(text: str, offset: int, message: str) -> str:
    """``ERROR: <input>:L:C: message`` followed by the source line and a caret, like cel-go."""
    line, col = line_column(text, offset)
    lines = text.split("\n")
    src = lines[line - 1] if line - 1 < len(lines) else ""
    caret = "." * (col - 1) + "^"
    return f"ERROR: <input>:{line}:{col}: {message}\n | {src}\n | {caret}"
