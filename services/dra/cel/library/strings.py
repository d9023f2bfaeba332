"""cel-go's strings extension at version 2 (Kubernetes' base environment since 1.29).

``charAt``, ``indexOf``, ``lastIndexOf``, ``lowerAscii``, ``upperAscii``, ``replace``, ``split``,
``substring``, ``trim``, ``join`` and ``strings.quote``. Indices count code points, as upstream.
"""

from __future__ import annotations

from ..cost import COSTLY_OVERLOADS, charge, charge_text
from ..errors import EvalError
from ..types import INT, STRING, list_of
from . import register

_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}
_UPPER = {c + 32: c for c in range(ord("A"), ord("Z") + 1)}
# Go's unicode.IsSpace set (used by strings.TrimSpace in the trim function)
_SPACE = (
    "\t\n\v\f\r \x85\xa0\u1680"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000"
)


def _char_at(s: str, i: int) -> str:
    if i < 0 or i > len(s):
        raise EvalError(f"index out of range: {i}")
    return s[i : i + 1]


def _index_of(s: str, sub: str, start: int = 0) -> int:
    if start < 0:
        raise EvalError(f"index out of range: {start}")
    if sub == "":
        return min(start, len(s))
    if start >= len(s):
        return -1
    return s.find(sub, start)


def _last_index_of(s: str, sub: str, start: int | None = None) -> int:
    if start is None:
        if sub == "":
            return len(s)
        if len(s.encode()) < len(sub.encode()):
            return -1
        start = len(s) - 1
    if start < 0:
        raise EvalError(f"index out of range: {start}")
    if sub == "":
        return min(start, len(s))
    if start >= len(s):
        return -1
    start = min(start, len(s) - len(sub))
    if start < 0:
        return -1
    return s.rfind(sub, 0, start + len(sub))


def _replace(s: str, old: str, new: str, limit: int = -1) -> str:
    if limit < 0:
        limit = -1
    hits = (len(s) + 1 if old == "" else s.count(old)) if limit < 0 else limit
    charge_text(len(s) + hits * len(new))
    if old == "":
        # Go inserts ``new`` before every code point and at the end
        pieces = list(s)
        n = len(pieces) + 1 if limit < 0 else min(limit, len(pieces) + 1)
        out = []
        for i in range(len(pieces) + 1):
            if i < n:
                out.append(new)
            if i < len(pieces):
                out.append(pieces[i])
        return "".join(out)
    return s.replace(old, new, limit)


def _split(s: str, sep: str, limit: int = -1) -> list[str]:
    charge(1 + len(s) // 10 + (len(s) if sep == "" else s.count(sep)))
    if limit == 0:
        return []
    if limit == 1:
        return [s]
    if sep == "":
        chars = list(s)
        if limit < 0 or limit >= len(chars):
            return chars
        return [*chars[: limit - 1], "".join(chars[limit - 1 :])]
    return s.split(sep, -1 if limit < 0 else limit - 1)


def _substring(s: str, start: int, end: int | None = None) -> str:
    n = len(s)
    if end is None:
        if start < 0 or start > n:
            raise EvalError(f"index out of range: {start}")
        return s[start:]
    if start > end:
        raise EvalError(f"invalid substring range. start: {start}, end: {end}")
    if start < 0 or start > n:
        raise EvalError(f"index out of range: {start}")
    if end < 0 or end > n:
        raise EvalError(f"index out of range: {end}")
    return s[start:end]


def _join(items: list[object], sep: str = "") -> str:
    for x in items:
        if type(x) is not str:
            raise EvalError("join: list must contain only strings")
    charge_text(sum(len(str(x)) for x in items) + len(sep) * len(items))
    return sep.join(items)  # type: ignore[arg-type]


def _quote(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch in "\a\b\f\n\r\t\v":
            out.append(
                {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}[
                    ch
                ]
            )
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


register("charAt", "string_char_at_int", True, (STRING, INT), STRING)(_char_at)
register("indexOf", "string_index_of_string", True, (STRING, STRING), INT)(_index_of)
register("indexOf", "string_index_of_string_int", True, (STRING, STRING, INT), INT)(_index_of)
register("lastIndexOf", "string_last_index_of_string", True, (STRING, STRING), INT)(_last_index_of)
register("lastIndexOf", "string_last_index_of_string_int", True, (STRING, STRING, INT), INT)(_last_index_of)
register("lowerAscii", "string_lower_ascii", True, (STRING,), STRING)(lambda s: s.translate(_LOWER))
register("upperAscii", "string_upper_ascii", True, (STRING,), STRING)(lambda s: s.translate(_UPPER))
register("replace", "string_replace_string_string", True, (STRING, STRING, STRING), STRING)(_replace)
register("replace", "string_replace_string_string_int", True, (STRING, STRING, STRING, INT), STRING)(_replace)
register("split", "string_split_string", True, (STRING, STRING), list_of(STRING))(_split)
register("split", "string_split_string_int", True, (STRING, STRING, INT), list_of(STRING))(_split)
register("substring", "string_substring_int", True, (STRING, INT), STRING)(_substring)
register("substring", "string_substring_int_int", True, (STRING, INT, INT), STRING)(_substring)
register("trim", "string_trim", True, (STRING,), STRING)(lambda s: s.strip(_SPACE))
register("join", "list_join", True, (list_of(STRING),), STRING)(_join)
register("join", "list_join_string", True, (list_of(STRING), STRING), STRING)(_join)
register("strings.quote", "strings_quote", False, (STRING,), STRING)(_quote)
COSTLY_OVERLOADS.update(
    (
        "string_replace_string_string",
        "string_replace_string_string_int",
        "string_split_string",
        "string_split_string_int",
        "list_join",
        "list_join_string",
    )
)
