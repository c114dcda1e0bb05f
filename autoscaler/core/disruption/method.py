"""The disruption methods, and the annotations that carry a disruption in progress on its Node.

A disruption that launches a replacement first spans many reconciles. Its state lives on the Node being
disrupted (so a restarted or newly elected replica carries on where the last one stopped): which method, since
when, and the launch tokens of the replacement nodes. The planner reads them (a node being replaced, and its
replacements, are never chosen again); the controller writes them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from autoscaler.core.timestamps import parse_time

DISRUPTION = "tidal.dev/disruption"  # the method, while replacements are launched and awaited
DISRUPTION_SINCE = "tidal.dev/disruption-since"  # when the replacements were first launched (RFC 3339)
REPLACEMENTS = "tidal.dev/replacements"  # comma-separated launch tokens of the replacement nodes
# Not before then (RFC 3339) is this node disrupted with a replacement again: set when one was abandoned
# (never Ready in time, refused) and when the node was handed to its drain.
RETRY_AFTER = "tidal.dev/disruption-retry-after"
# A Node annotated so is never disrupted by tidal, except when the cloud reclaims it (Karpenter's spelling).
NODE_DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


class Method(enum.StrEnum):
    """Why a node is disrupted; the values are what ``disruption.budgets[].reasons`` names."""

    EMPTY = "empty"
    UNDERUTILISED = "underutilised"
    REPLACE = "replace"
    INTERRUPTED = "interrupted"
    EXPIRED = "expired"
    DRIFTED = "drifted"
    UNHEALTHY = "unhealthy"

    @property
    def replaces_first(self) -> bool:
        """A replacement is launched and Ready (GPUs visible) before any of the node's pods is evicted."""
        return self in (Method.REPLACE, Method.EXPIRED, Method.DRIFTED)


# The order methods are decided in, and take a disruption budget's room in: a broken node first, then what
# keeps the fleet current, then what saves money.
ORDER = (
    Method.INTERRUPTED,
    Method.UNHEALTHY,
    Method.EXPIRED,
    Method.DRIFTED,
    Method.EMPTY,
    Method.UNDERUTILISED,
    Method.REPLACE,
)


@dataclass(frozen=True, slots=True)
class InProgress:
    """A disruption waiting for its replacements, as its Node's annotations tell it."""

    node: str
    method: str
    since: float
    tokens: tuple[str, ...]


def in_progress(node: str, annotations: Mapping[str, str]) -> InProgress | None:
    """The disruption a Node carries, or None. A mangled start time counts as the epoch: the replacements
    then time out at once rather than never."""
    method = annotations.get(DISRUPTION)
    if not method:
        return None
    tokens = tuple(t.strip() for t in annotations.get(REPLACEMENTS, "").split(",") if t.strip())
    return InProgress(node, method, parse_time(annotations.get(DISRUPTION_SINCE)) or 0.0, tokens)


def retry_after(annotations: Mapping[str, str]) -> float:
    """Epoch seconds before which the node is not disrupted with a replacement again (0: any time)."""
    return parse_time(annotations.get(RETRY_AFTER)) or 0.0
