"""Recursive-descent parser for CEL (cel-spec langdef grammar) with macro recognition.

Grammar (precedence from loosest to tightest)::

    Expr     = Or ["?" Or ":" Expr]
    Or       = And {"||" And}
    And      = Rel {"&&" Rel}
    Rel      = Add {("<"|"<="|">="|">"|"=="|"!="|"in") Add}
    Add      = Mul {("+"|"-") Mul}
    Mul      = Unary {("*"|"/"|"%") Unary}
    Unary    = Member | "!"+ Member | "-"+ Member
    Member   = Primary {"." ["?"] IDENT ["(" args ")"] | "[" ["?"] Expr "]"}
    Primary  = ["."] IDENT ["(" args ")"] | "(" Expr ")" | "[" list "]" | "{" map "}" | literal

Macros (``has``, ``all``, ``exists``, ``exists_one``/``existsOne``, ``map``, ``filter``, the
two-variable forms, ``transformList/Map/MapEntry``, ``optMap``/``optFlatMap``, ``cel.bind``) are
recognised here, as cel-go's parser does, and become dedicated AST nodes.
"""

from __future__ import annotations

from typing import Final

from . import lexer
from .ast import Call, Ident, Index, ListExpr, Literal, MapExpr, Node, Select
from .errors import CelCompileError
from .lexer import Token
from .macro_syntax import global_call, member_call

__all__ = ["MAX_EXPRESSION_LENGTH", "MAX_NESTING", "parse"]

# Kubernetes limits selector expressions to 10 Ki characters (resource.k8s.io CELSelectorExpressionMaxLength).
MAX_EXPRESSION_LENGTH: Final = 10 * 1024
# cel-go's default parser recursion limit.
MAX_NESTING: Final = 250

_RESERVED: Final = frozenset(
    (
        "as break const continue else for function if import let loop "
        + "package namespace return var void while"
    ).split()
)
_RELOPS: Final = {"<": "_<_", "<=": "_<=_", ">": "_>_", ">=": "_>=_", "==": "_==_", "!=": "_!=_"}
_INT64_MAX: Final = 2**63 - 1
_UINT64_MAX: Final = 2**64 - 1


def parse(text: str) -> Node:
    """Parse ``text`` into an AST; raises CelCompileError with the position of the problem."""
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise CelCompileError(
            text,
            f"expression code point size exceeds limit: size: {len(text)}, limit {MAX_EXPRESSION_LENGTH}",
        )
    root = _Parser(text, lexer.tokenize(text)).parse_all()
    if _depth(root) > MAX_NESTING:
        raise CelCompileError(
            text, f"expression nesting exceeds the limit of {MAX_NESTING}", positional=False
        )
    return root


class _Parser:
    def __init__(self, text: str, tokens: list[Token]) -> None:
        self.text = text
        self.tokens = tokens
        self.pos = 0
        self.depth = 0

    # -- helpers -------------------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def peek(self, k: int = 1) -> Token:
        return self.tokens[min(self.pos + k, len(self.tokens) - 1)]

    def advance(self) -> Token:
        t = self.tokens[self.pos]
        if t.kind != lexer.EOF:
            self.pos += 1
        return t

    def at(self, op: str) -> bool:
        t = self.tokens[self.pos]
        return t.kind == lexer.OP and t.value == op

    def error(self, message: str, tok: Token | None = None) -> CelCompileError:
        t = tok or self.tok
        return CelCompileError(self.text, message, t.offset)

    def unexpected(self, expecting: str) -> CelCompileError:
        t = self.tok
        shown = (
            "<EOF>"
            if t.kind == lexer.EOF
            else self.text[t.offset : self.peek().offset].strip() or str(t.value)
        )
        return self.error(f"Syntax error: mismatched input '{shown}' expecting {expecting}")

    def expect(self, op: str) -> Token:
        if not self.at(op):
            raise self.unexpected(f"'{op}'")
        return self.advance()

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(f"expression recursion limit exceeded: {MAX_NESTING}")

    # -- grammar -------------------------------------------------------------------------------
    def parse_all(self) -> Node:
        if self.tok.kind == lexer.EOF:
            raise self.error("Syntax error: mismatched input '<EOF>' expecting an expression")
        node = self.expr()
        if self.tok.kind != lexer.EOF:
            raise self.unexpected("<EOF>")
        return node

    def expr(self) -> Node:
        self.enter()
        cond = self.or_()
        if self.at("?"):
            q = self.advance()
            then = self.or_()
            self.expect(":")
            other = self.expr()
            cond = Call(q.offset, "_?_:_", None, [cond, then, other])
        self.depth -= 1
        return cond

    def or_(self) -> Node:
        terms = [self.and_()]
        offsets: list[int] = []
        while self.at("||"):
            offsets.append(self.advance().offset)
            terms.append(self.and_())
        return _balance("_||_", terms, offsets)

    def and_(self) -> Node:
        terms = [self.relation()]
        offsets: list[int] = []
        while self.at("&&"):
            offsets.append(self.advance().offset)
            terms.append(self.relation())
        return _balance("_&&_", terms, offsets)

    def relation(self) -> Node:
        left = self.addition()
        while True:
            t = self.tok
            if t.kind == lexer.OP and t.value in _RELOPS:
                self.advance()
                left = Call(t.offset, _RELOPS[str(t.value)], None, [left, self.addition()])
            elif t.kind == lexer.IDENT and t.value == "in":
                self.advance()
                left = Call(t.offset, "@in", None, [left, self.addition()])
            else:
                return left

    def addition(self) -> Node:
        left = self.multiplication()
        while self.at("+") or self.at("-"):
            op = self.advance()
            name = "_+_" if op.value == "+" else "_-_"
            left = Call(op.offset, name, None, [left, self.multiplication()])
        return left

    def multiplication(self) -> Node:
        left = self.unary()
        while self.at("*") or self.at("/") or self.at("%"):
            op = self.advance()
            name = {"*": "_*_", "/": "_/_", "%": "_%_"}[str(op.value)]
            left = Call(op.offset, name, None, [left, self.unary()])
        return left

    def unary(self) -> Node:
        if self.at("!"):
            first = self.tok
            count = 0
            while self.at("!"):
                self.advance()
                count += 1
            operand = self.member()
            return Call(first.offset, "!_", None, [operand]) if count % 2 else operand
        if self.at("-"):
            nxt = self.peek()
            if nxt.kind in (lexer.INT, lexer.DOUBLE):
                return self.member()  # signed literal
            first = self.tok
            count = 0
            while self.at("-"):
                self.advance()
                count += 1
            operand = self.member()
            return Call(first.offset, "-_", None, [operand]) if count % 2 else operand
        return self.member()

    def member(self) -> Node:
        node = self.primary()
        while True:
            if self.at("."):
                dot = self.advance()
                optional = False
                if self.at("?"):
                    self.advance()
                    optional = True
                name_tok = self.tok
                if name_tok.kind == "quoted":
                    self.advance()
                    field = str(name_tok.value)
                elif name_tok.kind == lexer.IDENT:
                    self.advance()
                    field = str(name_tok.value)
                    if field in _RESERVED:
                        raise self.error(f"Syntax error: reserved identifier: {field}", name_tok)
                else:
                    raise self.unexpected("IDENTIFIER")
                if self.at("(") and name_tok.kind == lexer.IDENT and not optional:
                    self.advance()
                    args = self.call_args()
                    node = member_call(self.text, name_tok, node, field, args)
                else:
                    node = Select(dot.offset, node, field, optional)
            elif self.at("["):
                br = self.advance()
                optional = False
                if self.at("?"):
                    self.advance()
                    optional = True
                index = self.expr()
                self.expect("]")
                node = Index(br.offset, node, index, optional)
            elif self.at("{") and _is_qualified_name(node):
                raise self.error("message construction is not supported in DRA selectors")
            else:
                return node

    def call_args(self) -> list[Node]:
        args: list[Node] = []
        if self.at(")"):
            self.advance()
            return args
        while True:
            args.append(self.expr())
            if self.at(","):
                self.advance()
                continue
            self.expect(")")
            return args

    def primary(self) -> Node:
        t = self.tok
        kind = t.kind
        if kind == lexer.IDENT or (t.is_op(".") and self.peek().kind == lexer.IDENT):
            if t.is_op("."):
                self.advance()
                t = self.tok
            name = str(t.value)
            if name in ("true", "false"):
                self.advance()
                return Literal(t.offset, "bool", name == "true")
            if name == "null":
                self.advance()
                return Literal(t.offset, "null", None)
            if name in _RESERVED or name == "in":
                raise self.error(f"Syntax error: reserved identifier: {name}", t)
            self.advance()
            if self.at("("):
                self.advance()
                args = self.call_args()
                return global_call(self.text, t, name, args)
            return Ident(t.offset, name)
        if t.is_op("-") and self.peek().kind in (lexer.INT, lexer.UINT, lexer.DOUBLE):
            self.advance()
            num = self.advance()
            return self.number(num, negative=True, offset=t.offset)
        if kind in (lexer.INT, lexer.UINT, lexer.DOUBLE):
            self.advance()
            return self.number(t, negative=False, offset=t.offset)
        if kind == lexer.STRING:
            self.advance()
            return Literal(t.offset, "string", t.value)
        if kind == lexer.BYTES:
            self.advance()
            return Literal(t.offset, "bytes", t.value)
        if t.is_op("("):
            self.advance()
            inner = self.expr()
            self.expect(")")
            return inner
        if t.is_op("["):
            self.advance()
            return self.list_literal(t)
        if t.is_op("{"):
            self.advance()
            return self.map_literal(t)
        raise self.unexpected("an expression")

    def number(self, t: Token, negative: bool, offset: int) -> Node:
        value = t.value
        if t.kind == lexer.DOUBLE:
            assert isinstance(value, float)
            return Literal(offset, "double", -value if negative else value)
        assert isinstance(value, int)
        if t.kind == lexer.UINT:
            if negative or value > _UINT64_MAX:
                raise self.error("invalid uint literal", t)
            return Literal(offset, "uint", value)
        value = -value if negative else value
        if not -(2**63) <= value <= _INT64_MAX:
            raise self.error("invalid int literal", t)
        return Literal(offset, "int", value)

    def list_literal(self, start: Token) -> Node:
        elements: list[Node] = []
        optional: list[bool] = []
        while not self.at("]"):
            opt = False
            if self.at("?"):
                self.advance()
                opt = True
            elements.append(self.expr())
            optional.append(opt)
            if self.at(","):
                self.advance()
                continue
            if not self.at("]"):
                raise self.unexpected("']'")
        self.advance()
        return ListExpr(start.offset, elements, optional)

    def map_literal(self, start: Token) -> Node:
        entries: list[tuple[Node, Node, bool]] = []
        while not self.at("}"):
            opt = False
            if self.at("?"):
                self.advance()
                opt = True
            key = self.expr()
            self.expect(":")
            value = self.expr()
            entries.append((key, value, opt))
            if self.at(","):
                self.advance()
                continue
            if not self.at("}"):
                raise self.unexpected("'}'")
        self.advance()
        return MapExpr(start.offset, entries)


def _balance(function: str, terms: list[Node], offsets: list[int]) -> Node:
    """Build a balanced tree for a chain of ``&&``/``||`` (as cel-go does) to keep nesting shallow;
    both operators are associative and absorb errors commutatively, so the shape is unobservable."""
    if len(terms) == 1:
        return terms[0]
    mid = len(terms) // 2
    left = _balance(function, terms[:mid], offsets[: mid - 1])
    right = _balance(function, terms[mid:], offsets[mid:])
    return Call(offsets[mid - 1], function, None, [left, right])


def _depth(root: Node) -> int:
    deepest = 0
    stack = [(root, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((ch, d + 1) for ch in node.children())
    return deepest


def _is_qualified_name(node: Node) -> bool:
    while isinstance(node, Select) and not node.optional:
        node = node.operand
    return isinstance(node, Ident)
