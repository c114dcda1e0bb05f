"""PodDisruptionBudgets in the emulated cluster: ``status.disruptionsAllowed`` as the disruption controller
computes it, and the Eviction API's refusal (HTTP 429) when a budget allows no more."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from autoscaler.core.model import DisruptionBudget, Pod, Requirement

Budgets = Mapping[str, tuple[Mapping[str, str], int]]
"""name -> (the labels a budget selects, in namespace default; minAvailable)."""


def _selects(match: Mapping[str, str], pod: Pod) -> bool:
    return pod.namespace == "default" and all(pod.labels.get(k) == v for k, v in match.items())


def _allowed(match: Mapping[str, str], least: int, pods: Iterable[Pod]) -> int:
    """Healthy (bound) pods over the minimum."""
    return max(0, sum(1 for p in pods if p.node_name and _selects(match, p)) - least)


def budgets(defined: Budgets, pods: Iterable[Pod]) -> tuple[DisruptionBudget, ...]:
    """The budgets as the API server shows them, with their allowance now."""
    pods = list(pods)
    return tuple(
        DisruptionBudget(
            "default",
            name,
            tuple(Requirement(k, "In", (v,)) for k, v in sorted(match.items())),
            _allowed(match, least, pods),
        )
        for name, (match, least) in sorted(defined.items())
    )


def blocks(defined: Budgets, pods: Sequence[Pod], pod: Pod) -> bool:
    """Whether evicting ``pod`` now is refused by one of the budgets that select it."""
    return any(
        _selects(match, pod) and _allowed(match, least, pods) <= 0 for match, least in defined.values()
    )
