"""The controller's side of a disruption that launches first: write it down, launch the replacements, wait
for them to be Ready (GPUs visible), then hand the node to its drain; or give up and leave the node as it was.

Nothing is evicted, cordoned or deleted on the old node until every replacement is Ready. The state lives on
the old Node's annotations (:mod:`autoscaler.disruption.method`) and the replacements' launch tokens, which
are written *before* anything is launched, so a restarted or newly elected replica carries on, and never
launches a second set. A replacement that fails (the cloud refused it, it never registered, its GPUs never
showed) or is not Ready within ``disruption.replacementTimeout`` gives the disruption up: the replacements
that hold no workload are removed, the old node keeps its pods, and it is not tried again for as long.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from autoscaler.cloud import (
    CloudProvider,
    HasNodeTemplate,
    InstanceNotFound,
    ProviderError,
    ReportsInterruptions,
)
from autoscaler.config import Config
from autoscaler.disruption.drifted import template_digest
from autoscaler.disruption.interrupted import interrupted
from autoscaler.disruption.method import (
    DISRUPTION,
    DISRUPTION_SINCE,
    REPLACEMENTS,
    RETRY_AFTER,
    InProgress,
)
from autoscaler.disruption.protection import eviction_blocker, gang_blocker, workload
from autoscaler.drain import DrainJob, DrainRunner, last_look
from autoscaler.fleet import Fleet, Member, State
from autoscaler.launching import Launcher, LaunchOutcome, launch_token
from autoscaler.model import Instance, Node, Snapshot
from autoscaler.planning.cluster import pods_by_node
from autoscaler.planning.plan import Removal

__all__ = ["Disruptions"]

log = structlog.get_logger("tidal.controller")
_CLEARED: dict[str, str | None] = {DISRUPTION: None, DISRUPTION_SINCE: None, REPLACEMENTS: None}


def _rfc3339(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


class Disruptions:
    """What the controller does for a disruption: spot interruptions drained at once, and disruptions that
    launch first, from decision to drain."""

    def __init__(
        self,
        *,
        provider: CloudProvider,
        actions: Any,
        events: Any,
        fleet: Fleet,
        launcher: Launcher,
        drainer: DrainRunner | None,
        metric: Callable[..., None],
        dry_run: bool = False,
    ) -> None:
        self.provider = provider
        self.actions = actions
        self.events = events
        self.fleet = fleet
        self.launcher = launcher
        self.drainer = drainer
        self.metric = metric
        self.dry_run = dry_run

    def template(self, cfg: Config) -> str:
        """The digest of the node template a node launched now gets (the provider's part, when it has one)."""
        provided: Mapping[str, str] = {}
        if isinstance(self.provider, HasNodeTemplate):
            try:
                provided = self.provider.node_template()
            except ProviderError as err:  # without it nothing can be called drifted: better than everything
                log.warning("node_template_unavailable", error=str(err))
                return ""
        return template_digest(cfg, provided)

    def reserved(self, waiting: Sequence[InProgress]) -> set[str]:
        """The fleet members (as :class:`~autoscaler.planning.plan.Launching` names them) that are
        replacements: their room is for the pods of the node they replace, not for pending pods."""
        tokens = {t for p in waiting for t in p.tokens}
        return {
            m.key
            for m in self.fleet.members.values()
            if m.key.removeprefix("token:") in tokens
            or (m.instance is not None and m.instance.launch_token in tokens)
        }

    # -- interruptions ------------------------------------------------------------------------------------

    def interrupted(self, snapshot: Snapshot) -> tuple[set[str], list[str]]:
        """Nodes whose instances the cloud is about to reclaim (spot interruption notices), drained at once
        (no replacement first, no budget): (their names, the drains started). Reading the notices consumes
        them, so only the acting leader reads, never a dry run."""
        if not isinstance(self.provider, ReportsInterruptions) or self.dry_run:
            return set(), []
        try:
            doomed = {i.provider_id: i for i in self.provider.interrupted_instances()}
        except ProviderError as err:
            self.metric("cloud_error", self.provider.name, "interruptions", type(err).__name__)
            log.warning("interruptions_unavailable", error=str(err))
            return set(), []
        draining = self.drainer.active() if self.drainer else set()
        provider_ids = {n.name: n.provider_id for n in snapshot.nodes}
        pods = {p.key: p for p in snapshot.pods}
        started = []
        removals = interrupted(snapshot, doomed)
        for r in removals:
            instance = doomed[provider_ids[r.node]]
            self.launcher.retired_tokens.add(instance.launch_token)
            if r.node in draining:
                continue
            self.events.node(r.node, "SpotInterrupted", "the cloud is reclaiming this node; draining now")
            job = DrainJob(r.node, tuple(pods[k] for k in r.pods), instance, r.reason)
            if self.drainer is not None and self.drainer.submit(job):
                started.append(r.node)
        return {r.node for r in removals}, started

    # -- starting -----------------------------------------------------------------------------------------

    def start(
        self, removal: Removal, node: Node, cfg: Config, instances: Sequence[Instance], now: float
    ) -> list[LaunchOutcome]:
        """Write the disruption on the Node, then launch its replacements; returns the launches. A launch
        the cloud refuses gives the disruption up at once."""
        if self.dry_run:
            log.info(
                "would_replace", node=removal.node, method=removal.method, launches=len(removal.replacement)
            )
            return []
        seed = f"replace/{node.uid or node.name}/{now:.0f}"
        tokens = [launch_token(cfg.cluster_name, [f"{seed}/{i}"], 0) for i in range(len(removal.replacement))]
        written = {
            DISRUPTION: str(removal.method),
            DISRUPTION_SINCE: _rfc3339(now),
            REPLACEMENTS: ",".join(tokens),
        }
        if not self._annotate(node.name, written):
            return []  # nothing launched: nothing to lose track of
        self.events.node(
            node.name,
            "DisruptionStarted",
            f"{removal.reason}; launching {len(tokens)} replacement node(s) before any pod is evicted",
        )
        log.info("replacement_started", node=node.name, method=removal.method, tokens=tokens)
        outcomes = self.launcher.launch_all(removal.replacement, cfg, instances, now, tokens=tokens)
        failed = [o for o in outcomes if o.instance is None]
        if failed:
            progress = InProgress(node.name, str(removal.method), now, tuple(tokens))
            launched = {o.token: o.instance for o in outcomes if o.instance is not None}
            self._abandon(progress, f"the cloud refused a replacement: {failed[0].error}", cfg, now, launched)
        return outcomes

    # -- waiting ------------------------------------------------------------------------------------------

    def advance(
        self, snapshot: Snapshot, waiting: Sequence[InProgress], cfg: Config, now: float
    ) -> list[str]:
        """Move every disruption waiting for replacements on: drain the nodes whose replacements are all Ready,
        give up those whose replacements failed or are late. Returns the nodes whose drains started."""
        if self.dry_run:
            return []
        started = []
        nodes = {n.name: n for n in snapshot.nodes}
        draining = self.drainer.active() if self.drainer else set()
        for p in waiting:
            if p.node in draining or p.node not in nodes:
                continue
            members = [self._member(t) for t in p.tokens]
            failed = [t for t, m in zip(p.tokens, members, strict=True) if m is None or m.state == State.GONE]
            ready = all(m is not None and m.state in (State.READY, State.IDLE) for m in members)
            if ready and self._drain(p, snapshot, nodes[p.node], cfg, now):
                started.append(p.node)
            elif ready:
                continue
            elif failed:
                self._abandon(
                    p, f"replacement {failed[0]} failed (refused, reclaimed or timed out)", cfg, now
                )
            elif now - p.since > cfg.disruption.replacement_timeout:
                late = sum(1 for m in members if m is None or m.state not in (State.READY, State.IDLE))
                self._abandon(
                    p,
                    f"{late} replacement(s) not Ready within {int(cfg.disruption.replacement_timeout)}s",
                    cfg,
                    now,
                )
        return started

    def _member(self, token: str) -> Member | None:
        for m in self.fleet.members.values():
            if m.key == f"token:{token}" or (m.instance is not None and m.instance.launch_token == token):
                return m
        return None

    def _drain(self, p: InProgress, snapshot: Snapshot, node: Node, cfg: Config, now: float) -> bool:
        """Hand the node to its drain, its pods as they are now (any protection that appeared meanwhile keeps
        it); True when the drain started."""
        pods = workload(pods_by_node(snapshot.pods).get(node.name, ()))
        blocker = eviction_blocker(pods, snapshot.pdbs, {}) or gang_blocker(pods, snapshot, {node.name})
        if blocker:
            self._abandon(p, blocker, cfg, now)
            return False
        if self.drainer is None:
            return False
        reason = f"{p.method}: its {len(p.tokens)} replacement node(s) are Ready"
        if not self.drainer.submit(
            DrainJob(node.name, tuple(pods), self.fleet.instance_for_node(node.name), reason)
        ):
            return False  # every drain slot is busy: the next reconcile tries again
        # Handed over: whatever the drain's outcome, this node is not replaced again before the retry time.
        self._annotate(
            node.name, {**_CLEARED, RETRY_AFTER: _rfc3339(now + cfg.disruption.replacement_timeout)}
        )
        log.info("replacement_ready_draining", node=node.name, method=p.method)
        return True

    # -- giving up ----------------------------------------------------------------------------------------

    def _abandon(
        self,
        p: InProgress,
        why: str,
        cfg: Config,
        now: float,
        launched: Mapping[str, Instance | None] | None = None,
    ) -> None:
        """Give the disruption up: the replacements holding no workload go, the old node keeps its pods and is
        left alone until the retry time."""
        for token in p.tokens:
            member = self._member(token)
            instance = member.instance if member is not None else (launched or {}).get(token)
            node = member.node if member is not None else None
            self._remove_replacement(token, instance, node)
        self._annotate(p.node, {**_CLEARED, RETRY_AFTER: _rfc3339(now + cfg.disruption.replacement_timeout)})
        self.events.node(
            p.node, "DisruptionAbandoned", f"{p.method} disruption given up, node kept: {why}", "Warning"
        )
        self.metric("termination", p.method, "abandoned")
        log.warning("replacement_abandoned", node=p.node, method=p.method, reason=why)

    def _remove_replacement(self, token: str, instance: Instance | None, node: Node | None) -> None:
        if node is not None:
            try:
                _, on_it = last_look(self.actions, node.name, ())
            except Exception as err:  # cannot tell what runs there: leave it to scale-down
                log.warning("replacement_kept", node=node.name, reason=str(err))
                return
            if on_it:
                log.info("replacement_kept", node=node.name, reason=f"pod {on_it[0]} runs there")
                return
            try:
                self.actions.delete_node(node.name)
            except Exception as err:  # scale-down removes it once it has been empty long enough
                log.warning("replacement_kept", node=node.name, reason=str(err))
                return
        self.launcher.retired_tokens.add(token)
        self.fleet.forget_launch(token)
        if instance is None:
            return
        try:
            self.provider.terminate(instance)
        except InstanceNotFound:
            pass
        except ProviderError as err:  # the fleet's orphan handling retries once its Node is gone
            log.warning(
                "terminate_failed", instance=instance.id, reason="replacement abandoned", error=str(err)
            )

    def _annotate(self, node: str, values: Mapping[str, str | None]) -> bool:
        try:
            self.actions.annotate_node(node, dict(values))
        except Exception as err:  # the next reconcile tries again
            log.warning("action_failed", action="annotate_node", target=node, error=str(err))
            return False
        return True
