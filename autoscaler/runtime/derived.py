"""What a reconcile works out from the snapshot's pods, kept from one reconcile to the next while the pods are
the same.

The cluster cache hands over one tuple of pods until a pod changes (``Informer.sorted_items``), and at
100,000 pods a pass over all of them for the same answer costs more than the plan's own work on them. The
decision core stays pure: what is kept here is given to it as an input.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from autoscaler.core.model import Pod

__all__ = ["OfPods"]

T = TypeVar("T")


class OfPods(Generic[T]):
    """``derive(pods)``, worked out again only when given another sequence of pods than last time. What it
    returns is shared between calls: whoever reads it must not change it."""

    def __init__(self, derive: Callable[[Sequence[Pod]], T]) -> None:
        self._derive = derive
        self._seen: tuple[Sequence[Pod], T] | None = None

    def __call__(self, pods: Sequence[Pod]) -> T:
        # The sequence itself is held, not its id: a new one can never be taken for it.
        if self._seen is None or self._seen[0] is not pods:
            self._seen = (pods, self._derive(pods))
        return self._seen[1]
