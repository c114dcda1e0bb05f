"""Whether ``pendingPodReasonRegexp`` matches anything: a regexp that matches none of the unschedulable pods'
messages (a typo such as ``Insuficient``, a scheduler whose messages it does not know) makes tidal launch
nothing while pods wait, and looks exactly like a quiet cluster. Pure: time is a parameter.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.core.demand import Demand, Reason

# Pods left out before their message is read: the regexp never saw them, so they say nothing about it.
_BEFORE_THE_REGEXP = frozenset(
    {
        Reason.BOUND,
        Reason.TERMINATING,
        Reason.DAEMONSET,
        Reason.GATED,
        Reason.IGNORED,
        Reason.NOT_OPTED_IN,
        Reason.OTHER_SCHEDULER,
        Reason.NO_CONDITION,
    }
)

WINDOW = 600.0
"""Seconds of reconciles the daemon's warning looks back over."""


@dataclass(frozen=True, slots=True)
class Tally:
    """Unschedulable pods whose message the regexp was asked about, and how many it matched."""

    matched: int
    unschedulable: int

    @property
    def unmatched(self) -> int:
        return self.unschedulable - self.matched


def tally(demand: Demand) -> Tally:
    """How many of the pods whose message reached ``pendingPodReasonRegexp`` it matched."""
    verdicts = pod_verdicts(demand)
    return Tally(sum(verdicts.values()), len(verdicts))


def warning(counts: Tally, where: str) -> str | None:
    """The warning to show when the regexp matched none of the unschedulable pods ``where`` (``in the
    snapshot``, ``in the last 10 minutes``); None when it matched one or there were none."""
    if counts.unschedulable == 0 or counts.matched:
        return None
    return (
        f"pendingPodReasonRegexp matched 0 of {counts.unschedulable} unschedulable pods {where}: "
        "tidal launches for none of them (check the regexp against their messages with tidal plan)"
    )


def pod_verdicts(demand: Demand) -> dict[str, bool]:
    """Pod key -> whether the regexp matched its message, for the pods whose message reached it."""
    out = {pod.key: True for pod in demand.counted}
    for ignored in demand.ignored:
        if ignored.reason not in _BEFORE_THE_REGEXP:
            out[ignored.pod] = ignored.reason is not Reason.REASON_MISMATCH
    return out


class ReasonWindow:
    """The regexp's verdicts on every unschedulable pod seen over the last ``window`` seconds, so that one
    reconcile between two pod arrivals does not make the warning come and go."""

    def __init__(self, window: float = WINDOW) -> None:
        self.window = window
        self._seen: dict[str, tuple[float, bool]] = {}

    def observe(self, demand: Demand, now: float) -> None:
        """Record one reconcile's verdicts at ``now``; observing the same reconcile twice changes nothing."""
        for key, matched in pod_verdicts(demand).items():
            self._seen[key] = (now, matched)
        cutoff = now - self.window
        for key in [k for k, (at, _) in self._seen.items() if at < cutoff]:
            del self._seen[key]

    def counts(self) -> Tally:
        """The verdicts in the window, one per pod (its latest)."""
        matched = sum(1 for _, ok in self._seen.values() if ok)
        return Tally(matched, len(self._seen))

    def warning(self) -> str | None:
        """The warning for the window, or None."""
        minutes = self.window / 60
        span = f"{minutes:g} minutes" if minutes != 1 else "minute"
        return warning(self.counts(), f"in the last {span}")
