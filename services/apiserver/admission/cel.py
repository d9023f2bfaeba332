"""CEL selector checks for admission: compile with the project's CEL engine, as the scheduler will.

The expression length limit (10 KiB, ``CELSelectorExpressionMaxLength``) is checked by the caller
before compiling, as upstream does.
"""

from __future__ import annotations

from services.scheduler.cel import compile_expression

__all__ = ["CEL_MAX_LENGTH", "check_cel"]

CEL_MAX_LENGTH = 10 * 1024


def check_cel(expr: str) -> str | None:
    """None when ``expr`` compiles; otherwise the reason, worded like the API server's."""
    if not expr.strip():
        return "compilation failed: expression must not be empty"
    try:
        compile_expression(expr)
    except (ValueError, TypeError) as exc:
        # One line: the compiler's caret diagram follows the first line, which has the position.
        text = str(exc).split("\n", 1)[0]
        return text if text.startswith("compilation failed") else f"compilation failed: {text}"
    except Exception as exc:  # an engine bug must not become a stack trace for the user
        return f"compilation failed: internal error: {type(exc).__name__}: {exc}"
    return None
