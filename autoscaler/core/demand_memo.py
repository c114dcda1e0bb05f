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
from dataclasses import dataclass, fields
from operator import attrgetter, is_

from autoscaler.config.values import Config
from autoscaler.core.fit import AnnotationError, Constraints
from autoscaler.core.model import Pod

__all__ = ["DemandMemo", "Screened"]


# Every field of a pod but its PodScheduled condition, at once: a pod whose other fields are the very same
# objects as another's is that pod with its condition rewritten (the scheduler does so at every try).
_REST = attrgetter(*(f.name for f in fields(Pod) if f.name != "scheduled"))


@dataclass(slots=True)
class Screened:
    """What a plan read of one pending pod: the reason that keeps it out of demand but for its PodScheduled
    condition (None when only the condition may), and, for a pod that may count (or is gated for a cost
    estimate), the key its constraints were read under and what they are."""

    pod: Pod
    spec: object  # the demand.Ignored, or None
    rest: tuple[object, ...] = ()
    shape: tuple[object, ...] | None = None
    found: Constraints | AnnotationError | None = None
    # Its KAI queue by its labels (it names no PodGroup, whose queue would come first); None until read or
    # when it names a PodGroup.
    queue: str | None = None

    def __post_init__(self) -> None:
        self.rest = _REST(self.pod)

    def same(self, pod: Pod) -> bool:
        """Whether ``pod`` is this pod, or this pod with its condition rewritten (then it is kept as this
        pod from now on): what was read of it stands."""
        if pod is self.pod:
            return True
        if all(map(is_, _REST(pod), self.rest)):
            self.pod = pod
            return True
        return False


class DemandMemo:
    """What plans read of pending pods under one configuration, by pod object."""

    def __init__(self) -> None:
        self.config: Config | None = None
        # By namespace/name, each entry holding the pod it was read of.
        self.pods: dict[str, Screened] = {}
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
