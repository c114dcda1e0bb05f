"""The syntax of the CEL subset tidal evaluates: expressions are read into small tuples, and anything outside
the subset raises :class:`NotEvaluable` naming it (evaluation is in :mod:`autoscaler.core.dra_selectors`).

The grammar follows CEL's precedence (cel-spec ``doc/langdef.md``): ``||`` below ``&&`` below relations
(``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``) below ``!`` below member access, index and calls.
Arithmetic, the conditional operator, floating-point literals, maps and macros are left out on purpose.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["NotEvaluable", "parse"]


class NotEvaluable(Exception):
    """An expression (or, during evaluation, a value) outside the subset; the message names what."""


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>[rR]?(?:"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'))
    | (?P<float>[0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)
    | (?P<number>0x[0-9a-fA-F]+u?|[0-9]+u?)
    | (?P<op>&&|\|\||==|!=|<=|>=|[<>!()\[\].,?:+\-*/%{}])
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r"}


def _unquote(token: str) -> str:
    raw = token[0] in "rR"
    body = token[2:-1] if raw else token[1:-1]
    if raw:
        return body
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            nxt = body[i + 1]
            if nxt not in _ESCAPES:
                raise NotEvaluable(f"the escape \\{nxt} in a string")
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _tokens(expr: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(expr):
        if expr[pos:].strip() == "":
            break
        match = _TOKEN.match(expr, pos)
        if match is None or match.end() == pos:
            raise NotEvaluable(f"cannot read {expr[pos:].strip()[:20]!r}")
        pos = match.end()
        kind = match.lastgroup or ""
        text = match.group(kind)
        if kind == "string":
            out.append(("lit", _unquote(text)))
        elif kind == "float":
            raise NotEvaluable(f"the floating-point number {text}")
        elif kind == "number":
            out.append(("lit", int(text.rstrip("u"), 0)))
        elif kind == "ident" and text in ("true", "false"):
            out.append(("lit", text == "true"))
        elif kind == "ident" and text == "in":
            out.append(("op", "in"))
        else:
            out.append((kind, text))
    out.append(("end", None))
    return out


_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})


class _Parser:
    """Recursive descent over CEL's precedence: || < && < relations < member access."""

    def __init__(self, expr: str) -> None:
        self.tokens = _tokens(expr)
        self.i = 0

    def peek(self) -> tuple[str, Any]:
        return self.tokens[self.i]

    def take(self, kind: str, value: Any = None) -> Any:
        token = self.tokens[self.i]
        if token[0] != kind or (value is not None and token[1] != value):
            got = "the end" if token[0] == "end" else repr(token[1])
            raise NotEvaluable(f"expected {value or kind}, found {got}")
        self.i += 1
        return token[1]

    def accept(self, value: str) -> bool:
        if self.peek()[0] == "op" and self.peek()[1] == value:
            self.i += 1
            return True
        return False

    def parse(self) -> tuple[Any, ...]:
        node = self.logical("||")
        if self.peek()[0] != "end":
            raise NotEvaluable(f"the operator {self.peek()[1]!r} here")
        return node

    def logical(self, op: str) -> tuple[Any, ...]:
        node = self.logical("&&") if op == "||" else self.relation()
        while self.accept(op):
            node = (op, node, self.logical("&&") if op == "||" else self.relation())
        if self.peek() == ("op", "?"):
            raise NotEvaluable("the conditional operator ?:")
        return node

    def relation(self) -> tuple[Any, ...]:
        node = self.unary()
        kind, value = self.peek()
        if kind == "op" and value in ("==", "!=", "<", "<=", ">", ">=", "in"):
            self.i += 1
            node = ("rel", value, node, self.unary())
            if self.peek()[0] == "op" and self.peek()[1] in ("==", "!=", "<", "<=", ">", ">=", "in"):
                raise NotEvaluable("chained comparisons")
        return node

    def unary(self) -> tuple[Any, ...]:
        if self.accept("!"):
            return ("not", self.unary())
        if self.peek() == ("op", "-"):
            raise NotEvaluable("arithmetic (unary minus)")
        return self.member()

    def member(self) -> tuple[Any, ...]:
        node = self.primary()
        while True:
            if self.accept("."):
                name = self.take("ident")
                if name in _MACROS and self.peek() == ("op", "("):
                    raise NotEvaluable(f"the macro {name}()")
                node = ("call", node, name, self.arguments()) if self.accept("(") else ("field", node, name)
            elif self.accept("["):
                node = ("index", node, self.logical("||"))
                self.take("op", "]")
            else:
                kind, value = self.peek()
                if kind == "op" and value in ("+", "-", "*", "/", "%"):
                    raise NotEvaluable(f"arithmetic ({value})")
                return node

    def arguments(self) -> tuple[tuple[Any, ...], ...]:
        args = []
        if not self.accept(")"):
            args.append(self.logical("||"))
            while self.accept(","):
                args.append(self.logical("||"))
            self.take("op", ")")
        return tuple(args)

    def primary(self) -> tuple[Any, ...]:
        kind, value = self.peek()
        self.i += 1
        if kind == "lit":
            return ("lit", value)
        if kind == "op" and value == "(":
            node = self.logical("||")
            self.take("op", ")")
            return node
        if kind == "op" and value == "[":
            items: list[tuple[Any, ...]] = []
            if not self.accept("]"):
                items.append(self.logical("||"))
                while self.accept(","):
                    items.append(self.logical("||"))
                self.take("op", "]")
            return ("list", tuple(items))
        if kind == "ident":
            if self.accept("("):
                if value == "has":
                    raise NotEvaluable("the macro has()")
                return ("func", value, self.arguments())
            if value != "device":
                raise NotEvaluable(f"the identifier {value!r} (only device is defined)")
            return ("device",)
        raise NotEvaluable("nothing to evaluate" if kind == "end" else f"{value!r} here")


def parse(expr: str) -> tuple[Any, ...]:
    """The syntax tree of ``expr``: ``("lit", value)``, ``("device",)``, ``("field", node, name)``,
    ``("index", node, key)``, ``("call", node, method, args)``, ``("func", name, args)``, ``("list", items)``,
    ``("not", node)``, ``("rel", op, left, right)``, ``("&&", left, right)``, ``("||", left, right)``."""
    return _Parser(expr).parse()
