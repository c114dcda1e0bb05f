"""Empty: nothing but DaemonSet and mirror pods runs on the node, or only KAI background pods, which give
their capacity back whenever it is wanted (they are evicted with the node, through the Eviction API).

An empty node is cordoned, looked at once more on the API server itself, and deleted; one holding background
pods is drained like any other.
"""

from __future__ import annotations

from collections.abc import Sequence

from autoscaler.core.disruption.protection import expendable
from autoscaler.core.model import Pod

__all__ = ["describe", "is_empty", "kept"]


def kept(workload: Sequence[Pod]) -> list[Pod]:
    """The pods that keep a node in use: its workload but KAI background pods."""
    return [p for p in workload if not expendable(p)]


def is_empty(workload: Sequence[Pod]) -> bool:
    """No pod keeps the node in use."""
    return not kept(workload)


def describe(workload: Sequence[Pod]) -> str:
    """How an empty node is described in its removal's reason."""
    if not workload:
        return "empty"
    return f"empty but for {len(workload)} KAI background pods"
