"""Unhealthy: a node condition a health checker sets has held for as long as the configuration tolerates.

As Karpenter's repair policies: ``disruption.unhealthyConditions`` lists (condition type, status, duration),
e.g. the kubelet's ``Ready: "False"`` for 30 minutes, or the condition a GPU health checker writes when a GPU
fell off the bus or raised XID errors. Such a node is drained and removed without waiting for a replacement
(a broken node holds its pods hostage; their scale-up is the replacement), but only through the Eviction API
and never for a protected pod. When more than a fifth of tidal's nodes are unhealthy at once, none is
repaired: that is a cluster-wide fault (the network, the control plane) that new nodes would not fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autoscaler.config.schema import ConfigError, fail, format_seconds, parse_duration, show, unknown_keys
from autoscaler.core.model import Node

__all__ = ["MAX_UNHEALTHY_SHARE", "ConditionRule", "condition_rules", "due", "unhealthy"]

MAX_UNHEALTHY_SHARE = 0.2
_KEYS = ("type", "status", "duration")


@dataclass(frozen=True, slots=True)
class ConditionRule:
    """A node whose condition ``type`` has had ``status`` for ``duration`` seconds is unhealthy."""

    type: str
    status: str
    duration: float


def _since(node: Node, rule: ConditionRule) -> float | None:
    """When the node's condition took the rule's status (its creation when the time is unknown)."""
    for cond in node.conditions:
        if cond.type == rule.type and cond.status == rule.status:
            return cond.last_transition if cond.last_transition is not None else node.created
    return None


def unhealthy(node: Node, rules: Sequence[ConditionRule], now: float) -> str:
    """Why the node is unhealthy ("" when it is not)."""
    for rule in rules:
        since = _since(node, rule)
        if since is not None and now - since >= rule.duration:
            return (
                f"condition {rule.type}={rule.status} for {format_seconds(max(1.0, now - since))} "
                f"(tolerated for {format_seconds(rule.duration)})"
            )
    return ""


def due(node: Node, rules: Sequence[ConditionRule], now: float) -> float | None:
    """The next time a condition the node has now will have lasted its rule's duration."""
    times = []
    for rule in rules:
        since = _since(node, rule)
        if since is not None and since + rule.duration > now:
            times.append(since + rule.duration)
    return min(times, default=None)


def _rule(value: object, path: str) -> ConditionRule:
    if not isinstance(value, Mapping):
        fail(path, f"{show(value)} is not a map of type, status and duration")
    errors = unknown_keys(value, _KEYS, f"{path}.")
    if errors:
        raise ConfigError(errors)
    kind, status = value.get("type"), value.get("status")
    if not isinstance(kind, str) or not kind:
        fail(f"{path}.type", f"{show(kind)} is not a node condition type (e.g. Ready)")
    if not isinstance(status, str) or status not in ("True", "False", "Unknown"):
        fail(f"{path}.status", f"{show(status)} is not one of 'True', 'False', 'Unknown' (quote it in YAML)")
    seconds = parse_duration(value.get("duration", ""), field=f"{path}.duration")
    return ConditionRule(kind, status, seconds)


def condition_rules(value: object, path: str) -> tuple[ConditionRule, ...]:
    """``disruption.unhealthyConditions``; every problem is reported with its path."""
    if value is None:
        return ()
    if not isinstance(value, list):
        fail(path, f"{show(value)} is not a list of conditions")
    errors: list[str] = []
    rules = []
    for i, item in enumerate(value):
        try:
            rules.append(_rule(item, f"{path}[{i}]"))
        except ConfigError as err:
            errors.extend(err.errors)
    if errors:
        raise ConfigError(errors)
    return tuple(rules)
