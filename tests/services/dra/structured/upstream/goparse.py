"""A small parser for the Go subset used by upstream's allocator test table (literals, calls,
selectors, composite literals, closures with assignments and returns)."""

from __future__ import annotations

import re

TOKEN_RE = re.compile(
    r"""
 (?P<ws>[ \t\r]+)
|(?P<nl>\n)
|(?P<comment>//[^\n]*|/\*.*?\*/)
|(?P<raw>`[^`]*`)
|(?P<str>"(?:\\.|[^"\\])*")
|(?P<num>\d+(?:\.\d+)?)
|(?P<op>\+\+|\+=|:=|==|!=|&&|\|\||\.\.\.|[-+*/&(){}\[\],:.;=!<>])
|(?P<id>[A-Za-z_][A-Za-z0-9_]*)
""",
    re.X | re.S,
)


def tokenize(src):
    toks: list[tuple[str, str]] = []
    i = 0
    while i < len(src):
        m = TOKEN_RE.match(src, i)
        if not m:
            raise SyntaxError(f"bad char at {i}: {src[i : i + 30]!r}")
        i = m.end()
        k = m.lastgroup
        v = m.group()
        if k in ("ws", "comment"):
            continue
        if k == "nl":
            # Go semicolon insertion
            if toks and (toks[-1][0] in ("id", "str", "raw", "num") or toks[-1][1] in (")", "]", "}", "++")):
                toks.append(("op", ";"))
            continue
        toks.append((k or "", v))
    toks.append(("eof", ""))
    return toks


class P:
    def __init__(self, toks):
        self.t = toks
        self.i = 0

    def peek(self, k=0):
        return self.t[self.i + k]

    def next(self):
        tok = self.t[self.i]
        self.i += 1
        return tok

    def at(self, v):
        return self.t[self.i][1] == v and self.t[self.i][0] in ("op", "id")

    def expect(self, v):
        tok = self.next()
        if tok[1] != v:
            raise SyntaxError(f"expected {v!r} got {tok!r} near {self.t[self.i - 5 : self.i + 5]}")
        return tok

    def skip_semis(self):
        while self.at(";"):
            self.next()

    # types -------------------------------------------------------------
    def parse_type(self):
        if self.at("*"):
            self.next()
            return ("ptr", self.parse_type())
        if self.at("["):
            self.next()
            self.expect("]")
            return ("slice", self.parse_type())
        if self.at("map"):
            self.next()
            self.expect("[")
            k = self.parse_type()
            self.expect("]")
            return ("map", k, self.parse_type())
        if self.at("func"):
            self.next()
            self.expect("(")
            self.expect(")")
            return ("func", self.parse_type())
        name = self.next()[1]
        while self.at(".") and self.peek(1)[0] == "id":
            self.next()
            name += "." + self.next()[1]
        if self.at("["):  # generics like wrapper[T]; not needed
            pass
        return ("named", name)

    # expressions -------------------------------------------------------
    def parse_expr(self):
        left = self.parse_unary()
        while self.at("+") or self.at("==") or self.at("&&") or self.at("/") or self.at("-") or self.at("*"):
            op = self.next()[1]
            right = self.parse_unary()
            left = ("bin", op, left, right)
        return left

    def parse_unary(self):
        if self.at("&"):
            self.next()
            return ("addr", self.parse_unary())
        if self.at("*"):
            self.next()
            return ("deref", self.parse_unary())
        if self.at("-"):
            self.next()
            return ("neg", self.parse_unary())
        return self.parse_postfix(self.parse_primary())

    def is_type_start(self):
        tok = self.peek()
        return (tok[1] in ("[", "map") and tok[0] == "op") or tok == ("id", "map")

    def parse_primary(self):
        tok = self.peek()
        if tok[0] == "str":
            self.next()
            return ("lit", bytes(tok[1][1:-1], "utf-8").decode("unicode_escape"))
        if tok[0] == "raw":
            self.next()
            return ("lit", tok[1][1:-1])
        if tok[0] == "num":
            self.next()
            return ("lit", int(tok[1]) if "." not in tok[1] else float(tok[1]))
        if tok[1] == "(" and tok[0] == "op":
            self.next()
            e = self.parse_expr()
            self.expect(")")
            return e
        if tok[1] == "func" and tok[0] == "id":
            self.next()
            self.expect("(")
            self.expect(")")
            if not self.at("{"):
                self.parse_type()
            body = self.parse_block()
            return ("funclit", body)
        if (tok[0] == "op" and tok[1] == "[") or tok == ("id", "map"):
            typ = self.parse_type()
            return self.parse_composite(typ)
        if tok[0] == "id":
            self.next()
            return ("id", tok[1])
        if tok[1] == "{":
            return self.parse_composite(None)
        raise SyntaxError(f"unexpected {tok} near {self.t[self.i - 5 : self.i + 5]}")

    def parse_composite(self, typ):
        self.expect("{")
        elems = []
        self.skip_semis()
        while not self.at("}"):
            if self.at("{"):
                val = self.parse_composite(None)
                key = None
            else:
                first = self.parse_expr()
                if self.at(":"):
                    self.next()
                    self.skip_semis()
                    key = first
                    val = self.parse_composite(None) if self.at("{") else self.parse_expr()
                else:
                    key, val = None, first
            elems.append((key, val))
            self.skip_semis()
            if self.at(","):
                self.next()
            self.skip_semis()
        self.expect("}")
        return ("composite", typ, elems)

    def parse_postfix(self, e):
        while True:
            if self.at("."):
                self.next()
                if self.at("("):  # type assertion, not used
                    raise SyntaxError("type assertion")
                name = self.next()[1]
                e = ("sel", e, name)
            elif self.at("("):
                self.next()
                args = []
                self.skip_semis()
                while not self.at(")"):
                    if self.at("{"):
                        args.append(self.parse_composite(None))
                    else:
                        args.append(self.parse_expr())
                    if self.at("..."):
                        self.next()
                        args[-1] = ("spread", args[-1])
                    self.skip_semis()
                    if self.at(","):
                        self.next()
                    self.skip_semis()
                self.expect(")")
                e = ("call", e, args)
            elif self.at("["):
                self.next()
                idx = self.parse_expr()
                if self.at(":"):
                    raise SyntaxError("slicing unsupported")
                self.expect("]")
                e = ("index", e, idx)
            elif self.at("{") and self._composite_ok(e):
                e = self.parse_composite(("named", self._name(e)))
            else:
                return e

    def _name(self, e):
        if e[0] == "id":
            return e[1]
        if e[0] == "sel":
            return self._name(e[1]) + "." + e[2]
        raise SyntaxError("not a type")

    def _composite_ok(self, e):
        # Type names start with an upper-case letter (Features{}, resourceapi.X{}, v1.NodeSelector{})
        try:
            name = self._name(e)
        except SyntaxError:
            return False
        last = name.split(".")[-1]
        return last[:1].isupper()

    # statements ----------------------------------------------------------
    def parse_block(self):
        self.expect("{")
        stmts = []
        self.skip_semis()
        while not self.at("}"):
            stmts.append(self.parse_stmt())
            self.skip_semis()
        self.expect("}")
        return stmts

    def parse_stmt(self):
        if self.at("return"):
            self.next()
            return ("return", self.parse_expr())
        if self.at("for"):
            raise SyntaxError("for unsupported")
        lhs = self.parse_expr()
        if self.at("++"):
            self.next()
            return ("assign", "+=", lhs, ("lit", 1))
        if self.at(":=") or self.at("=") or self.at("+="):
            op = self.next()[1]
            rhs = self.parse_expr()
            return ("assign", op, lhs, rhs)
        return ("expr", lhs)
