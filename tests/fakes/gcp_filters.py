"""The Compute Engine list ``filter`` language, as much as the fake needs, and list paging.

Terms are ``field = value``, ``field != value`` (exact), ``field eq regexp`` and ``field ne regexp`` (RE2 full
match), optionally parenthesised and joined by ``AND`` (or by whitespace, which GCE treats as AND). Fields
are dotted paths into the resource (``labels.tidal-cluster``, ``status``, ``scheduling.provisioningModel``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["FilterError", "page", "parse_filter"]

_TERM = re.compile(
    r"\s*\(?\s*(?P<field>[A-Za-z0-9_.\-]+)\s*(?P<op>!=|=|\beq\b|\bne\b)\s*"
    r"(?P<value>\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^\s()]+)\s*\)?\s*(?:AND\s+)?",
)
MAX_RESULTS = 500


class FilterError(ValueError):
    """A filter the fake (like GCE) cannot parse; answered with HTTP 400."""


def _value(resource: dict[str, Any], field: str) -> str | None:
    node: Any = resource
    head, _, rest = field.partition(".")
    if head == "labels" and rest:
        labels = resource.get("labels") or {}
        return None if rest not in labels else str(labels[rest])
    for part in field.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    if isinstance(node, bool):
        return "true" if node else "false"
    return None if isinstance(node, (dict, list)) else str(node)


def parse_filter(text: str) -> Callable[[dict[str, Any]], bool]:
    """A predicate for ``text`` (an empty filter matches everything); FilterError when unparseable."""
    if not text.strip():
        return lambda _: True
    if re.search(r"\bOR\b", text):
        raise FilterError(f"unsupported filter {text!r}: OR")
    terms = []
    pos = 0
    while pos < len(text):
        m = _TERM.match(text, pos)
        if m is None or m.end() == pos:
            raise FilterError(f"invalid filter {text!r} at {pos}")
        raw = m.group("value")
        value = raw[1:-1] if raw[:1] in "\"'" else raw
        terms.append((m.group("field"), m.group("op"), value))
        pos = m.end()

    def matches(resource: dict[str, Any]) -> bool:
        for field, op, value in terms:
            have = _value(resource, field)
            if op == "=":
                ok = have == value
            elif op == "!=":
                ok = have != value
            else:
                found = have is not None and re.fullmatch(value, have) is not None
                ok = found if op == "eq" else not found
            if not ok:
                return False
        return True

    return matches


def page(
    items: Sequence[dict[str, Any]], max_results: str | None, token: str | None
) -> tuple[list[dict[str, Any]], str]:
    """One page of ``items`` and the next page token ("" on the last page)."""
    size = MAX_RESULTS if not max_results else max(1, min(int(max_results), MAX_RESULTS))
    start = 0
    if token:
        if not token.startswith("p") or not token[1:].isdigit():
            raise FilterError(f"invalid pageToken {token!r}")
        start = int(token[1:])
    chunk = list(items[start : start + size])
    return chunk, (f"p{start + size}" if start + size < len(items) else "")
