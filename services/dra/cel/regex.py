"""Regular expressions of CEL (``matches``, ``find``, ``findAll``) on RE2, as cel-go runs them.

Why RE2 and not Python's ``re``: ``re`` backtracks, so ``'a' * 28 + '!'`` against ``^(a+)+$``
takes seconds, and CEL's cost limit (which charges a regex call by text and pattern length) would
not bound it. RE2 (the ``google-re2`` wheel, the C++ library Go's ``regexp`` was ported from)
matches in time linear in the text, so the cost charged here is a real bound again.

Syntax and errors are Go's ``regexp``: what RE2 refuses is reported with Go's wording
(``error parsing regexp: missing closing ]: `[` ``), and the few constructs C++ RE2 accepts but
Go refuses (``\\C``) are refused. ``findAll`` follows Go's ``FindAllString`` (an empty match right
after the previous match is skipped). Patterns are compiled once and cached.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Final

import re2  # google-re2

from .errors import EvalError

__all__ = ["REGEX_CACHE", "Regex", "RegexError", "compile_regex", "eval_regex", "regex_cost"]

# cel-go common.StringTraversalCostFactor / RegexStringLengthCostFactor
STRING_TRAVERSAL_COST_FACTOR: Final = 0.1
REGEX_STRING_LENGTH_COST_FACTOR: Final = 0.25

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print every refused pattern to stderr
_OPTIONS.never_capture = True  # only whole-match spans are used: lets RE2 pick its fastest engine
_UNANCHORED = re2._re2.RE2.Anchor.UNANCHORED
_NO_MATCH = (-1, -1)

# C++ RE2's error texts (RegexpStatus::CodeText) -> Go regexp/syntax's ErrorCode texts
_GO_CODES: Final = {
    "missing )": "missing closing )",
    "unexpected )": "unexpected )",
    "missing ]": "missing closing ]",
    "bad repetition operator": "invalid nested repetition operator",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "invalid escape sequence": "invalid escape sequence",
    "invalid character class range": "invalid character class range",
    "invalid character class": "invalid character class",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
    "invalid UTF-8": "invalid UTF-8",
}

_CACHE_SIZE: Final = 256
_MEMO_SIZE: Final = 512  # per pattern: texts already matched (attribute values repeat a lot)
_MEMO_TEXT: Final = 256  # only short texts are remembered


class RegexError(ValueError):
    """The pattern is not a valid Go/RE2 regular expression; ``str()`` is Go's error text."""


def go_error(pattern: str, re2_message: str) -> str:
    """Go's ``regexp.Compile`` error for a pattern C++ RE2 refused with ``re2_message``."""
    if re2_message.startswith("trailing \\"):
        return "error parsing regexp: trailing backslash at end of expression: ``"
    if re2_message.startswith("pattern too large"):
        return f"error parsing regexp: expression too large: `{pattern}`"
    code, sep, arg = re2_message.partition(": ")
    go = _GO_CODES.get(code)
    if go is None or not sep:
        return f"error parsing regexp: {re2_message}"
    return f"error parsing regexp: {go}: `{arg}`"


def _go_only_refusal(pattern: str) -> str | None:
    """Constructs C++ RE2 accepts but Go refuses: ``\\C`` (any byte). ``\\Q...\\E`` is literal."""
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c != "\\" or i + 1 >= n:
            i += 1
            continue
        nxt = pattern[i + 1]
        if nxt == "C":
            return "error parsing regexp: invalid escape sequence: `\\C`"
        if nxt == "Q":
            end = pattern.find("\\E", i + 2)
            if end < 0:
                return None
            i = end + 2
            continue
        i += 2
    return None


class Regex:
    """One compiled pattern: ``search``, ``find``, ``find_all`` (Go semantics) and its cost."""

    __slots__ = ("_memo", "_re", "factor", "pattern")

    def __init__(self, pattern: str) -> None:
        refusal = _go_only_refusal(pattern)
        if refusal is not None:
            raise RegexError(refusal)
        compiled = re2._re2.RE2(pattern.encode("utf-8", "surrogatepass"), _OPTIONS)
        if not compiled.ok():
            raise RegexError(go_error(pattern, compiled.error().decode("utf-8", "replace")))
        self.pattern = pattern
        self._re: Any = compiled
        # cel-go: ceil(len(pattern) * RegexStringLengthCostFactor)
        self.factor = math.ceil(len(pattern) * REGEX_STRING_LENGTH_COST_FACTOR)
        self._memo: dict[str, bool] = {}

    def cost(self, text: str) -> int:
        """cel-go's runtime cost of one call: traversal of the text times the pattern factor."""
        return math.ceil((1.0 + len(text)) * 0.1) * self.factor  # STRING_TRAVERSAL_COST_FACTOR

    def search(self, text: str) -> bool:
        """Does the pattern match anywhere in ``text`` (CEL ``matches``)."""
        memo = self._memo
        found = memo.get(text)
        if found is not None:
            return found
        data = text.encode("utf-8", "surrogatepass")
        found = self._re.Match(_UNANCHORED, data, 0, len(data))[0] != _NO_MATCH
        if len(text) <= _MEMO_TEXT:
            if len(memo) >= _MEMO_SIZE:
                memo.clear()
            memo[text] = found
        return found

    def find(self, text: str) -> str:
        """The leftmost match, "" when there is none (Go ``FindString``)."""
        data = text.encode("utf-8", "surrogatepass")
        start, end = self._re.Match(_UNANCHORED, data, 0, len(data))[0]
        if start < 0:
            return ""
        return data[start:end].decode("utf-8", "surrogatepass")

    def find_all(self, text: str, limit: int = -1) -> list[str]:
        """Successive non-overlapping matches, at most ``limit`` (all when negative), Go's way:
        an empty match right after the previous match is not reported."""
        data = text.encode("utf-8", "surrogatepass")
        end = len(data)
        if limit < 0:
            limit = end + 1
        out: list[str] = []
        pos, prev_end = 0, -1
        match = self._re.Match
        while len(out) < limit and pos <= end:
            start, stop = match(_UNANCHORED, data, pos, end)[0]
            if start < 0:
                break
            accept = True
            if stop == pos:  # an empty match
                if start == prev_end:
                    accept = False
                pos = _next_char(data, pos)
            else:
                pos = stop
            prev_end = stop
            if accept:
                out.append(data[start:stop].decode("utf-8", "surrogatepass"))
        return out


def _next_char(data: bytes, pos: int) -> int:
    """The byte offset of the UTF-8 character after the one at ``pos`` (pos + 1 at the end)."""
    pos += 1
    while pos < len(data) and 0x80 <= data[pos] < 0xC0:
        pos += 1
    return pos


# compiled patterns by text, oldest first (a hit does not reorder: cheap lookups on the hot path)
REGEX_CACHE: OrderedDict[str, Regex] = OrderedDict()


def compile_regex(pattern: str) -> Regex:
    """The compiled pattern (cached); raises :class:`RegexError` with Go's error text."""
    rx = REGEX_CACHE.get(pattern)
    if rx is not None:
        return rx
    rx = Regex(pattern)
    REGEX_CACHE[pattern] = rx
    if len(REGEX_CACHE) > _CACHE_SIZE:
        REGEX_CACHE.popitem(last=False)
    return rx


def regex_cost(text: str, pattern: str) -> int:
    """cel-go's cost of a regex call on ``text`` with ``pattern`` (charged before running it)."""
    return math.ceil((1.0 + len(text)) * STRING_TRAVERSAL_COST_FACTOR) * math.ceil(
        len(pattern) * REGEX_STRING_LENGTH_COST_FACTOR
    )


def eval_regex(pattern: str, prefix: str = "") -> Regex:
    """For runtime calls: the compiled pattern, or an EvalError with Go's text (after ``prefix``)."""
    try:
        return compile_regex(pattern)
    except RegexError as exc:
        raise EvalError(f"{prefix}{exc}") from None
