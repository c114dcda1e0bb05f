"""Label and field selectors with the semantics of Kubernetes' apimachinery, which kube-scheduler uses."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from autoscaler.core.model import NodeSelectorTerm, Requirement, Selector

_INT64 = 2**63


def _int64(text: str) -> int | None:
    """What Go's ``strconv.ParseInt(text, 10, 64)`` accepts: a sign and ASCII digits, in range."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    value = int(text)
    return value if -_INT64 <= value < _INT64 else None


def requirement_matches(req: Requirement, labels: Mapping[str, str]) -> bool:
    """One requirement against a label set (In, NotIn, Exists, DoesNotExist, and node selectors' Gt, Lt)."""
    value = labels.get(req.key)
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None or len(req.values) != 1:
            return False
        have, want = _int64(value), _int64(req.values[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def requirements_match(reqs: Iterable[Requirement], labels: Mapping[str, str]) -> bool:
    """Every requirement holds."""
    return all(requirement_matches(r, labels) for r in reqs)


def selector_matches(selector: Selector, labels: Mapping[str, str]) -> bool:
    """A label selector: an absent one (``None``) selects nothing, an empty one everything."""
    return selector is not None and requirements_match(selector, labels)


def term_matches(term: NodeSelectorTerm, labels: Mapping[str, str], name: str | None) -> bool:
    """One node-selector term. ``name`` is ``None`` for a node not launched yet: its name is not known, so a
    ``metadata.name In`` field requirement cannot hold and a ``NotIn`` always does."""
    if not term.expressions and not term.fields:
        return False  # an empty term matches no node
    for f in term.fields:
        if name is None:
            if f.operator == "In":
                return False
            continue
        if not requirement_matches(f, {"metadata.name": name}):
            return False
    return requirements_match(term.expressions, labels)


def node_affinity_matches(
    node_selector: Mapping[str, str],
    terms: Sequence[NodeSelectorTerm],
    labels: Mapping[str, str],
    name: str | None = None,
) -> bool:
    """``nodeSelector`` (every pair) and required node affinity (any term) against a node."""
    for k, v in node_selector.items():
        if labels.get(k) != v:
            return False
    return not terms or any(term_matches(t, labels, name) for t in terms)
