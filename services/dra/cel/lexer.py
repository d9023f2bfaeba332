"""Tokenizer for CEL source text (cel-spec langdef, "Lexical structure").

Produces a flat list of tokens with their start offsets so the parser can report positions.
Literal values are decoded here (escapes, raw strings, bytes, hex and unsigned integers).
"""

from __future__ import annotations

from typing import Final

from .errors import CelCompileError

__all__ = ["Token", "tokenize"]

# token kinds
INT: Final = "int"
UINT: Final = "uint"
DOUBLE: Final = "double"
STRING: Final = "string"
BYTES: Final = "bytes"
IDENT: Final = "ident"
OP: Final = "op"
EOF: Final = "eof"

_PUNCT2: Final = ("==", "!=", "<=", ">=", "&&", "||")
_PUNCT1: Final = "()[]{}.,?:!-+*/%<>"

_SIMPLE_ESCAPES: Final = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "`": "`",
    "?": "?",
}
_IDENT_START: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_IDENT_CHARS: Final = _IDENT_START | frozenset("0123456789")
_DIGITS: Final = frozenset("0123456789")
_HEX: Final = frozenset("0123456789abcdefABCDEF")


class Token:
    """One token: ``kind`` (see constants), ``value`` (decoded literal or text) and ``offset``."""

    __slots__ = ("kind", "offset", "value")

    def __init__(self, kind: str, value: object, offset: int) -> None:
        self.kind = kind
        self.value = value
        self.offset = offset

    def is_op(self, text: str) -> bool:
        return self.kind == OP and self.value == text

    def __repr__(self) -> str:
        return f"Token({self.kind}, {self.value!r}, {self.offset})"


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens; raises CelCompileError on malformed input."""
    tokens: list[Token] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c in " \t\n\r\f\v":
            i += 1
            continue
        if c == "/" and text.startswith("//", i):
            nl = text.find("\n", i)
            i = n if nl < 0 else nl + 1
            continue
        start = i
        if c in _IDENT_START:
            j = i + 1
            while j < n and text[j] in _IDENT_CHARS:
                j += 1
            word = text[i:j]
            # string prefixes: r, b, rb, br (any case) directly followed by a quote
            if j < n and text[j] in "'\"" and len(word) <= 2 and set(word.lower()) <= {"r", "b"}:
                lower = word.lower()
                if len(set(lower)) == len(lower):
                    i = _lex_string(text, j, "r" in lower, "b" in lower, start, tokens)
                    continue
            tokens.append(Token(IDENT, word, start))
            i = j
            continue
        if c in _DIGITS or (c == "." and i + 1 < n and text[i + 1] in _DIGITS):
            i = _lex_number(text, i, tokens)
            continue
        if c in "'\"":
            i = _lex_string(text, i, False, False, start, tokens)
            continue
        if c == "`":
            end = text.find("`", i + 1)
            if end < 0 or "\n" in text[i + 1 : end]:
                raise CelCompileError(text, "Syntax error: unterminated quoted identifier", i)
            tokens.append(Token("quoted", text[i + 1 : end], start))
            i = end + 1
            continue
        two = text[i : i + 2]
        if two in _PUNCT2:
            tokens.append(Token(OP, two, start))
            i += 2
            continue
        if c in _PUNCT1:
            tokens.append(Token(OP, c, start))
            i += 1
            continue
        raise CelCompileError(text, f"Syntax error: token recognition error at: '{c}'", i)
    tokens.append(Token(EOF, None, n))
    return tokens


def _lex_number(text: str, i: int, tokens: list[Token]) -> int:
    n = len(text)
    start = i
    if text.startswith(("0x", "0X"), i):
        j = i + 2
        while j < n and text[j] in _HEX:
            j += 1
        if j == i + 2:
            raise CelCompileError(text, "Syntax error: invalid hex literal", start)
        value = int(text[i + 2 : j], 16)
        if j < n and text[j] in "uU":
            tokens.append(Token(UINT, value, start))
            return _check_end(text, j + 1, start)
        tokens.append(Token(INT, value, start))
        return _check_end(text, j, start)
    j = i
    while j < n and text[j] in _DIGITS:
        j += 1
    is_float = False
    if j < n and text[j] == "." and j + 1 < n and text[j + 1] in _DIGITS:
        is_float = True
        j += 1
        while j < n and text[j] in _DIGITS:
            j += 1
    if j < n and text[j] in "eE":
        k = j + 1
        if k < n and text[k] in "+-":
            k += 1
        if k < n and text[k] in _DIGITS:
            is_float = True
            while k < n and text[k] in _DIGITS:
                k += 1
            j = k
    literal = text[i:j]
    if is_float:
        tokens.append(Token(DOUBLE, float(literal), start))
        return _check_end(text, j, start)
    if j < n and text[j] in "uU":
        tokens.append(Token(UINT, int(literal), start))
        return _check_end(text, j + 1, start)
    tokens.append(Token(INT, int(literal), start))
    return _check_end(text, j, start)


def _check_end(text: str, j: int, start: int) -> int:
    if j < len(text) and text[j] in _IDENT_CHARS:
        raise CelCompileError(text, f"Syntax error: invalid number literal '{text[start : j + 1]}'", start)
    return j


def _lex_string(text: str, i: int, raw: bool, is_bytes: bool, start: int, tokens: list[Token]) -> int:
    n = len(text)
    quote = text[i]
    triple = text.startswith(quote * 3, i)
    delim = quote * 3 if triple else quote
    j = i + len(delim)
    chars: list[str] = []
    byte_parts: list[bytes] = []

    def push(s: str) -> None:
        if is_bytes:
            byte_parts.append(s.encode("utf-8"))
        else:
            chars.append(s)

    while True:
        if j >= n:
            raise CelCompileError(text, "Syntax error: unterminated string literal", start)
        if text.startswith(delim, j):
            j += len(delim)
            break
        c = text[j]
        if c == "\n" and not triple:
            raise CelCompileError(text, "Syntax error: newline in string literal", start)
        if c != "\\" or raw:
            push(c)
            j += 1
            continue
        # escape sequence
        if j + 1 >= n:
            raise CelCompileError(text, "Syntax error: unterminated escape sequence", j)
        e = text[j + 1]
        if e in _SIMPLE_ESCAPES:
            push(_SIMPLE_ESCAPES[e])
            j += 2
        elif e in "xX":
            digits = text[j + 2 : j + 4]
            if len(digits) != 2 or not set(digits) <= _HEX:
                raise CelCompileError(text, "Syntax error: invalid hex escape", j)
            value = int(digits, 16)
            if is_bytes:
                byte_parts.append(bytes([value]))
            else:
                chars.append(chr(value))
            j += 4
        elif e in "uU":
            width = 4 if e == "u" else 8
            digits = text[j + 2 : j + 2 + width]
            if is_bytes:
                raise CelCompileError(text, "Syntax error: unicode escape in bytes literal", j)
            if len(digits) != width or not set(digits) <= _HEX:
                raise CelCompileError(text, "Syntax error: invalid unicode escape", j)
            code = int(digits, 16)
            if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                raise CelCompileError(text, "Syntax error: invalid unicode code point", j)
            chars.append(chr(code))
            j += 2 + width
        elif e in "0123":
            digits = text[j + 1 : j + 4]
            if len(digits) != 3 or not set(digits) <= set("01234567"):
                raise CelCompileError(text, "Syntax error: invalid octal escape", j)
            value = int(digits, 8)
            if is_bytes:
                byte_parts.append(bytes([value]))
            else:
                chars.append(chr(value))
            j += 4
        else:
            raise CelCompileError(text, f"Syntax error: invalid escape sequence '\\{e}'", j)
    if is_bytes:
        tokens.append(Token(BYTES, b"".join(byte_parts), start))
    else:
        tokens.append(Token(STRING, "".join(chars), start))
    return j
