"""Expired: a node tidal launched longer ago than ``disruption.nodeMaxLifetime`` is replaced, a new node
launched and Ready before its pods are evicted (as Karpenter's expireAfter, but never forceful: protected
pods, PodDisruptionBudgets, gangs and disruption budgets hold it until they allow)."""

from __future__ import annotations

from autoscaler.config.schema import format_seconds
from autoscaler.core.model import Node

__all__ = ["due", "expired"]


def expired(node: Node, lifetime: float, now: float) -> str:
    """Why the node has expired ("" when it has not, or when nodes live for ever: ``lifetime`` 0)."""
    if lifetime <= 0 or not node.created or now - node.created < lifetime:
        return ""
    return f"launched {format_seconds(now - node.created)} ago; nodeMaxLifetime is {format_seconds(lifetime)}"


def due(node: Node, lifetime: float, now: float) -> float | None:
    """When the node will expire, if later than ``now``."""
    if lifetime <= 0 or not node.created or node.created + lifetime <= now:
        return None
    return node.created + lifetime
