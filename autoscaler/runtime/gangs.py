"""Gangs being launched: every node of a gang is asked for in one reconcile, and a gang that cannot be
completed within ``gangLaunchTimeout`` gives its launched nodes back instead of holding a partial gang.

A gang is complete once a reconcile ends with none of its pods left unplaced and every launch planned for it
sent and accepted. Until then its missing members are planned again each reconcile (with the refused
offerings benched, so on whatever is left). When the timeout passes first, the instances launched for it are
terminated, except one whose Node already runs workload pods (those are never killed outside the Eviction
API; scale-down drains such a node once it is unneeded). The launched nodes are not offered to other demand:
a rolled-back gang's nodes are terminated, simply.

What is tracked lives in memory: after a restart, a partial gang's nodes are found empty and removed by
scale-down after ``nodeUnneededDuration``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from autoscaler.core.offering import Instance
from autoscaler.core.planning.planner import Plan
from autoscaler.runtime.fleet import Fleet, State
from autoscaler.runtime.launching import Launcher, LaunchOutcome

if TYPE_CHECKING:
    from autoscaler.runtime.seams import Metrics

__all__ = ["GangLaunch", "Gangs"]

log = structlog.get_logger("tidal.controller")


@dataclass(slots=True)
class GangLaunch:
    """The nodes launched so far for one gang, since when, and whether the gang is whole."""

    key: str
    started: float
    instances: dict[str, Instance] = field(default_factory=dict)  # launch token -> instance

    def age(self, now: float) -> float:
        return now - self.started


class Gangs:
    """Gangs with nodes launched but not yet complete."""

    def __init__(self) -> None:
        self.active: dict[str, GangLaunch] = {}

    def settle(
        self, decided: Plan, outcomes: Sequence[LaunchOutcome], now: float, timeout: float
    ) -> list[GangLaunch]:
        """Update the gangs after this reconcile's launches (``decided``: the last plan made); return those to
        roll back: incomplete for longer than ``timeout``."""
        for o in outcomes:
            gang = o.launch.gang
            if gang and o.instance is not None:
                entry = self.active.setdefault(gang, GangLaunch(gang, now))
                entry.instances[o.token] = o.instance
        incomplete = self._incomplete(decided, outcomes)
        pending = {g.key for g in decided.demand.gangs}
        expired = []
        for key, entry in list(self.active.items()):
            if key not in incomplete:
                # Whole, or no longer pending at all (scheduled, or deleted): nothing left to undo.
                if key in pending:
                    log.info("gang_launched", gang=key, nodes=len(entry.instances))
                del self.active[key]
            elif entry.age(now) >= timeout:
                expired.append(entry)
                del self.active[key]
        return expired

    @staticmethod
    def roll_back(
        expired: Sequence[GangLaunch],
        fleet: Fleet,
        launcher: Launcher,
        terminate: Callable[[Instance, str], bool],
        metrics: Metrics,
        *,
        dry_run: bool = False,
        in_use: Callable[[Instance], str] = lambda _: "",
    ) -> list[str]:
        """Terminate the nodes of gangs that could not be completed in time; returns the gangs rolled back.
        A node already running workload pods is kept: it is never killed outside the Eviction API. ``in_use``
        asks the API server itself (the cache may lag) why an instance must stay, "" when it may go."""
        if not expired:
            return []  # nothing to roll back: no pass over the fleet
        busy = {
            m.instance.launch_token
            for m in fleet.members.values()
            if m.instance is not None and m.state == State.READY
        }
        rolled = []
        for gang in expired:
            kept = []
            for token, instance in sorted(gang.instances.items()):
                if token in busy or (not dry_run and in_use(instance)):
                    kept.append(instance.id)
                    continue
                launcher.retired_tokens.add(token)
                fleet.forget_launch(token)
                if not dry_run:
                    terminate(instance, "gang_rollback")
            metrics.gang_rollback()
            rolled.append(gang.key)
            log.warning(
                "gang_rolled_back",
                gang=gang.key,
                terminated=len(gang.instances) - len(kept),
                kept_running_pods=kept,
                reason="the gang could not be completed within gangLaunchTimeout",
            )
        return rolled

    @staticmethod
    def _incomplete(decided: Plan, outcomes: Sequence[LaunchOutcome]) -> set[str]:
        gang_of = {p.key: g.key for g in decided.demand.gangs for p in g.pods}
        out = {gang_of[u.pod] for u in decided.launch.unplaced if u.pod in gang_of}
        sent = {id(o.launch): o for o in outcomes}
        for la in decided.launch.launches:
            o = sent.get(id(la))
            if la.gang and (o is None or o.instance is None):
                out.add(la.gang)
        return out
