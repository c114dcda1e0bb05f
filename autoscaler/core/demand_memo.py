"""What :func:`autoscaler.core.demand.select` read of each pending pod, kept from one plan to the next.

At every plan every pending pod is screened (the first reason that keeps it out of demand), its constraints
are read, and the pods that count are put in order. While a cluster limit keeps them waiting, the same
thousands of pods are pending plan after plan: pods are immutable values, so a pod that changed is a different
object, and what was read of the very same object under the same configuration still holds. A
:class:`DemandMemo` keeps it by pod object; the caller that plans again and again (the controller, the
simulator's planners) holds one and hands it to every plan, as it hands it the offerings' memo, so the plan
stays a function of its input. Pods no longer pending are forgotten at each plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autoscaler.config.values import Config
from autoscaler.core.fit import AnnotationError, Constraints
from autoscaler.core.model import Pod

__all__ = ["DemandMemo", "Screened"]


@dataclass(slots=True)
class Screened:
    """What a plan read of one pending pod: why it is not demand (None when it is), and, for a pod that is
    (or is gated for a cost estimate), the key its constraints were read under and what they are."""

    pod: Pod
    verdict: object  # the demand.Ignored that keeps it out, or None
    shape: tuple[object, ...] | None = None
    found: Constraints | AnnotationError | None = None
    # Its KAI queue by its labels (it names no PodGroup, whose queue would come first); None until read or
    # when it names a PodGroup.
    queue: str | None = None


class DemandMemo:
    """What plans read of pending pods under one configuration, by pod object."""

    def __init__(self) -> None:
        self.config: Config | None = None
        # By id of the pod, the pod itself held in the entry: an id is only the same pod while it lives.
        self.pods: dict[int, Screened] = {}
        # Constraints by the key they were read under: pods that read alike share one Constraints (its hash
        # is worked out once), the pods of this plan and of the plans before it alike.
        self.shapes: dict[tuple[object, ...], Constraints | AnnotationError] = {}
        # The pods that counted at the last plan, as given and as put in order, and whether their tie-breaks
        # (uid, else namespace/name) are all different, which makes that order one of the set alone.
        self.order: tuple[Sequence[Pod], list[Pod], bool] | None = None

    def start(self, config: Config) -> None:
        """Begin a plan under ``config``: everything read under another configuration is forgotten."""
        if self.config is not config:
            self.config = config
            self.pods = {}
            self.shapes = {}
            self.order = None
