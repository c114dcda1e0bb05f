"""Label and field selectors with the syntax and semantics of k8s.io/apimachinery."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.fakes.kube_errors import ApiError, bad_request
from tests.fakes.kube_resources import ResourceType

# Fields the real server accepts in fieldSelector, per (group, plural); metadata.* works everywhere.
# Asking for any other field is a 400 there, and must be here too or tests would accept broken queries.
_COMMON_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
SELECTABLE_FIELDS: dict[tuple[str, str], frozenset[str]] = {
    ("", "pods"): frozenset(
        {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
    ("", "nodes"): frozenset({"spec.unschedulable"}),
    ("", "namespaces"): frozenset({"status.phase"}),
    ("", "secrets"): frozenset({"type"}),
    ("", "events"): frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    ),
    ("events.k8s.io", "events"): frozenset(
        {
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "reason",
            "reportingController",
            "type",
        }
    ),
}

_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class Requirement:
    """One clause of a label selector: `key op values`."""

    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a label set satisfies this clause (absent keys satisfy `!=` and `notin`, as upstream)."""
        present = self.key in labels
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("gt", "lt"):
            try:
                number, bound = int(value or ""), int(self.values[0])
            except ValueError:
                return False
            return number > bound if self.op == "gt" else number < bound
        raise AssertionError(self.op)


@dataclass(frozen=True)
class LabelSelector:
    """A parsed label selector; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Whether every clause holds for `labels`."""
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


def _split_top_level(text: str) -> list[str]:
    # Commas separate clauses except inside `in (a,b)`.
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts]


_SET_CLAUSE = re.compile(r"^(?P<key>[^\s!=<>(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_OP_CLAUSE = re.compile(r"^(?P<key>[^\s!=<>(),]+)\s*(?P<op>==|=|!=|>|<)\s*(?P<value>[^\s!=<>(),]*)$")


def _check_key(key: str, clause: str) -> None:
    if not _LABEL_KEY.match(key):
        raise bad_request(f"unable to parse requirement: invalid label key {key!r} in {clause!r}")


def _check_value(value: str, clause: str) -> None:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise bad_request(f"unable to parse requirement: invalid label value {value!r} in {clause!r}")


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse `a=b,c!=d,e in (x,y),f notin (z),g,!h,n>3`; raise a 400 ApiError on bad syntax."""
    if not text or not text.strip():
        return LabelSelector()
    requirements = []
    for clause in _split_top_level(text):
        if not clause:
            raise bad_request(f"unable to parse requirement: empty clause in {text!r}")
        if m := _SET_CLAUSE.match(clause):
            values = tuple(v.strip() for v in m["values"].split(",") if v.strip())
            _check_key(m["key"], clause)
            for v in values:
                _check_value(v, clause)
            requirements.append(Requirement(m["key"], m["op"], values))
        elif m := _OP_CLAUSE.match(clause):
            op = {"==": "=", ">": "gt", "<": "lt"}.get(m["op"], m["op"])
            _check_key(m["key"], clause)
            if op in ("gt", "lt") and not m["value"].lstrip("-").isdigit():
                raise bad_request(f"unable to parse requirement: {clause!r}: value must be an integer")
            _check_value(m["value"], clause)
            requirements.append(Requirement(m["key"], op, (m["value"],)))
        elif clause.startswith("!"):
            _check_key(clause[1:].strip(), clause)
            requirements.append(Requirement(clause[1:].strip(), "!"))
        else:
            _check_key(clause, clause)
            requirements.append(Requirement(clause, "exists"))
    return LabelSelector(tuple(requirements))


def selector_from_label_selector_object(selector: Mapping[str, Any] | None) -> LabelSelector | None:
    """Convert a `metav1.LabelSelector` dict (matchLabels/matchExpressions); None selects nothing."""
    if selector is None:
        return None
    requirements = [Requirement(k, "=", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in selector.get("matchExpressions") or []:
        op = ops.get(expr.get("operator", ""))
        if op is None:
            raise ApiError(422, f"invalid label selector operator {expr.get('operator')!r}")
        requirements.append(Requirement(expr["key"], op, tuple(expr.get("values") or ())))
    return LabelSelector(tuple(requirements))


@dataclass(frozen=True)
class FieldRequirement:
    """One clause of a field selector."""

    path: str
    equal: bool
    value: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Compare the field (missing -> "") as a string, booleans as true/false."""
        actual = field_value(obj, self.path)
        return (actual == self.value) == self.equal


@dataclass(frozen=True)
class FieldSelector:
    """A parsed field selector; empty matches everything."""

    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether every clause holds for `obj`."""
        return all(r.matches(obj) for r in self.requirements)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string form a field selector compares against."""
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, Mapping):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    if path == "source" and isinstance(current, Mapping):
        return str(current.get("component", ""))
    return str(current)


def parse_field_selector(text: str | None, storage_key: tuple[str, str]) -> FieldSelector:
    """Parse `spec.nodeName=n1,status.phase!=Failed`; unsupported fields are a 400 as upstream."""
    if not text or not text.strip():
        return FieldSelector()
    allowed = _COMMON_FIELDS | SELECTABLE_FIELDS.get(storage_key, frozenset())
    requirements = []
    for clause in _split_top_level(text):
        m = re.match(r"^(?P<path>[A-Za-z0-9_.]+)\s*(?P<op>==|=|!=)\s*(?P<value>.*)$", clause)
        if not m:
            raise bad_request(f"invalid selector: {text!r}; can't understand {clause!r}")
        if m["path"] not in allowed:
            raise bad_request(f"field label not supported: {m['path']}")
        requirements.append(FieldRequirement(m["path"], m["op"] != "!=", m["value"].strip()))
    return FieldSelector(tuple(requirements))


def make_matcher(
    rt: ResourceType, label_selector: str | None, field_selector: str | None
) -> Callable[[dict[str, Any]], bool]:
    """Parse both selectors once (400 on bad syntax) and return a predicate over stored objects."""
    labels = parse_label_selector(label_selector)
    fields = parse_field_selector(field_selector, rt.storage_key)
    return lambda obj: labels.matches((obj.get("metadata") or {}).get("labels")) and fields.matches(obj)
