"""The controller's side of a disruption that launches first: write it down, launch the replacements, wait
for them to be Ready (GPUs visible), then hand the node to its drain; or give up and leave the node as it was.

Nothing is evicted, cordoned or deleted on the old node until every replacement is Ready. The state lives on
the old Node's annotations (:mod:`autoscaler.core.disruption.method`) and the replacements' launch tokens, which
are written *before* anything is launched, so a restarted or newly elected replica carries on, and never
launches a second set. A replacement that fails (the cloud refused it, it never registered, its GPUs never
showed) or is not Ready within ``disruption.replacementTimeout`` gives the disruption up: the replacements
that hold no workload are removed, the old node keeps its pods, and it is not tried again for as long.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence

import structlog

from autoscaler.cloud import (
    CloudProvider,
    HasNodeTemplate,
    InstanceNotFound,
    ProviderError,
    ReportsInterruptions,
)
from autoscaler.config.values import Config
from autoscaler.core.disruption.drifted import template_digest
from autoscaler.core.disruption.interrupted import interrupted
from autoscaler.core.disruption.method import (
    DISRUPTION,
    DISRUPTION_SINCE,
    REPLACEMENTS,
    RETRY_AFTER,
    InProgress,
    Method,
)
from autoscaler.core.disruption.protection import eviction_blocker, gang_blocker, workload
from autoscaler.core.model import Node, Pod, Snapshot
from autoscaler.core.offering import Instance
from autoscaler.core.planning.cluster import pods_by_node
from autoscaler.core.planning.decisions import Removal
from autoscaler.runtime.availability import Availability
from autoscaler.runtime.drain import DrainJob, DrainRunner, Termination, last_look, remove_node
from autoscaler.runtime.fleet import Action, Fleet, Member, State
from autoscaler.runtime.launching import Launcher, LaunchOutcome, launch_token
from autoscaler.runtime.seams import ClusterWrites, EventRecorder, Metrics

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
        actions: ClusterWrites,
        events: EventRecorder,
        fleet: Fleet,
        launcher: Launcher,
        availability: Availability,
        drainer: DrainRunner | None,
        metrics: Metrics,
        dry_run: bool = False,
    ) -> None:
        self.provider = provider
        self.actions = actions
        self.events = events
        self.fleet = fleet
        self.launcher = launcher
        self.availability = availability
        self.drainer = drainer
        self.metrics = metrics
        self.dry_run = dry_run
        # Annotations written lately, by node, until the cache shows them: a cache that lags (a broken watch)
        # must not make a disruption look not started, and start it again.
        self._written: dict[str, dict[str, str | None]] = {}

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
        """The fleet members (as :class:`~autoscaler.core.planning.decisions.Launching` names them) that are
        replacements: their room is for the pods of the node they replace, not for pending pods."""
        tokens = {t for p in waiting for t in p.tokens}
        if not tokens:
            return set()  # no replacement coming: no pass over the fleet
        return {
            m.key
            for m in self.fleet.members.values()
            if m.key.removeprefix("token:") in tokens
            or (m.instance is not None and m.instance.launch_token in tokens)
        }

    def still_in_use(self, member: Member, action: Action) -> str:
        """Why an overdue member's instance must not be terminated after all (see :meth:`in_use`). Nodes of
        instances already gone are only cleaned up: their pods went with the machine."""
        if not action.terminate or member.instance is None:
            return ""
        # Terminated for having no Node: a Node the cache has not seen yet is reason enough to wait.
        return self.in_use(member.instance, member.node, nodeless=member.node is None)

    def in_use(self, instance: Instance, node: Node | None = None, *, nodeless: bool = False) -> str:
        """Why ``instance`` must not be terminated now, asked of the API server (the cache may lag): pods bound
        to its Node, or, when it is terminated for having none (``nodeless``), a Node registered for it that
        the cache has not seen; "" when it may go."""
        try:
            name = node.name if node is not None else self.actions.node_for(instance.provider_id)
            if not name:
                return ""
            _, on_it = last_look(self.actions, name, ())
        except Exception as err:  # cannot tell: wait for the next reconcile rather than guess
            return f"the API server cannot say whether it is in use: {err}"
        if on_it:
            return f"pod {on_it[0]} runs on its Node {name}"
        return f"its Node {name} is registered (the cache has not seen it yet)" if nodeless else ""

    # -- empty nodes --------------------------------------------------------------------------------------

    def remove_empty(self, removals: Sequence[Removal], cache: Callable[[], Snapshot]) -> list[str]:
        """Cordon the empty nodes, look again, and delete those still empty; returns the nodes removed. A pod
        the scheduler bound after the snapshot was taken must never go down with its Node outside the
        Eviction API: the look is at the API server itself (the cache may not have seen that pod yet), and
        at the cache (``cache``) too."""
        cordoned = [r for r in removals if self._act("cordon", self.actions.cordon, r.node)]
        if not cordoned:
            return []
        names = {r.node for r in cordoned}
        cached = pods_by_node(
            p
            for p in cache().pods
            if p.node_name in names and (p.unreadable or (not p.daemonset and not p.mirror))
        )
        removed = []
        for r in cordoned:
            try:
                _, arrived = last_look(self.actions, r.node, ())
            except Exception as err:  # the server cannot say what runs there: the node stays
                self._keep(r.node, f"could not read its pods from the API server: {err}")
                continue
            arrived += [p.key for p in cached.get(r.node, ())]
            if arrived:
                self._keep(r.node, f"pod {arrived[0]} was scheduled to it")
                continue
            try:
                self.events.node(r.node, "ScaleDown", f"removing empty node: {r.reason}")
                remove_node(self.actions, self.provider, r.node, self.fleet.instance_for_node(r.node))
            except ProviderError as err:
                # The Node is gone; the fleet's orphan cleanup terminates the instance later.
                self.metrics.termination("empty", "error")
                log.warning("terminate_failed", node=r.node, error=str(err))
                continue
            except Exception as err:  # the Node could not be deleted: put it back in service
                self.metrics.termination("empty", "error")
                self._keep(r.node, f"could not delete the Node: {err}")
                continue
            self.metrics.termination("empty", "success")
            removed.append(r.node)
        return removed

    def _keep(self, node: str, why: str) -> None:
        """Undo a cordon for a removal that will not happen, and say why."""
        self._act("uncordon", self.actions.uncordon, node)
        self.events.node(node, "ScaleDownFailed", f"removal abandoned, node uncordoned: {why}", "Warning")
        log.warning("remove_abandoned", node=node, reason=why)

    def _act(self, action: str, call: Callable[[str], object], node: str) -> bool:
        try:
            call(node)
        except Exception as err:  # the next reconcile tries again
            log.warning("action_failed", action=action, target=node, error=str(err))
            return False
        return True

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
            self.metrics.cloud_error(self.provider.name, "interruptions", type(err).__name__)
            log.warning("interruptions_unavailable", error=str(err))
            return set(), []
        if not doomed:
            return set(), []  # most reconciles: no notice, and nothing of the cluster to look at
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
            job = DrainJob(
                r.node,
                tuple(pods[k] for k in r.pods),
                instance,
                r.reason,
                reclaimed=True,
                termination=Termination.SPOT_INTERRUPTION,
            )
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
        # The plan may be older than what the cloud refused since (another launch of this reconcile).
        launches = []
        for la in removal.replacement:
            offerings = [
                o for o in la.candidates if o.available and self.availability.why_unavailable(o, now) is None
            ]
            if not offerings:
                log.info("replacement_deferred", node=node.name, reason="every candidate is benched")
                return []
            launches.append(dataclasses.replace(la, offering=offerings[0], alternatives=tuple(offerings[1:])))
        if self.availability.launch_backoff(now) > 0:
            log.info(
                "replacement_deferred", node=node.name, reason="launches are backing off after throttling"
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
        outcomes = self.launcher.launch_all(launches, cfg, instances, now, tokens=tokens)
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
        """Move every disruption waiting for replacements on: drain the nodes whose replacements are all Ready
        (the nodes of a gang together), give up those whose replacements failed or are late, or whose pods
        gained a protection meanwhile. Returns the nodes whose drains started."""
        if self.dry_run or not waiting:
            return []  # nothing waits: no pass over the nodes and pods
        nodes = {n.name: n for n in snapshot.nodes}
        draining = self.drainer.active() if self.drainer else set()
        waiting = [p for p in waiting if p.node in nodes and p.node not in draining]
        if not waiting:
            return []
        by_node = pods_by_node(snapshot.pods)
        pods = {p.node: workload(by_node.get(p.node, ())) for p in waiting}
        members = {p.node: [self._member(t) for t in p.tokens] for p in waiting}
        ready = set()
        going = []
        for p in waiting:
            found = members[p.node]
            failed = [t for t, m in zip(p.tokens, found, strict=True) if m is None or m.state == State.GONE]
            slow = sum(1 for m in found if m is None or m.state not in (State.READY, State.IDLE))
            blocker = eviction_blocker(pods[p.node], snapshot.pdbs, {})
            timeout = cfg.disruption.replacement_timeout
            if blocker:
                self._abandon(p, blocker, cfg, now)
            elif failed:
                self._abandon(
                    p, f"replacement {failed[0]} failed (refused, reclaimed or timed out)", cfg, now
                )
            elif slow and now - p.since > timeout:
                self._abandon(p, f"{slow} replacement(s) not Ready within {int(timeout)}s", cfg, now)
            else:
                going.append(p)
                if not slow:
                    ready.add(p.node)
        pending = {p.node for p in going}
        # A gang's nodes are drained together, once all their replacements are Ready: the nodes that go now
        # are those whose every gang goes with them (until no more drop out).
        go = set(ready)
        while True:
            held = {n for n in go if gang_blocker(pods[n], snapshot, go)}
            if not held:
                break
            go -= held
        started = []
        for p in going:
            if p.node in go:
                if self._drain(p, nodes[p.node], pods[p.node], cfg, now):
                    started.append(p.node)
            elif p.node in ready:
                blocker = gang_blocker(pods[p.node], snapshot, pending)
                if blocker:  # another node of the gang is not being replaced (any more)
                    self._abandon(p, blocker, cfg, now)
                elif now - p.since > cfg.disruption.replacement_timeout:
                    self._abandon(p, "the rest of its gang's replacements were not Ready in time", cfg, now)
        return started

    def _member(self, token: str) -> Member | None:
        return self.fleet.member_for_token(token)

    def _drain(self, p: InProgress, node: Node, pods: Sequence[Pod], cfg: Config, now: float) -> bool:
        """Hand the node to its drain, its pods as they are now; False when every drain slot is busy."""
        if self.drainer is None:
            return False
        reason = f"{p.method}: its {len(p.tokens)} replacement node(s) are Ready"
        # Only methods that replace first get here; a node replaced by a cheaper one is counted as a plain drain.
        termination = (
            Termination.of(p.method) if p.method in (Method.EXPIRED, Method.DRIFTED) else Termination.DRAIN
        )
        job = DrainJob(
            node.name, tuple(pods), self.fleet.instance_for_node(node.name), reason, termination=termination
        )
        if not self.drainer.submit(job):
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
        self.metrics.termination(p.method, "abandoned")
        log.warning("replacement_abandoned", node=p.node, method=p.method, reason=why)

    def _remove_replacement(self, token: str, instance: Instance | None, node: Node | None) -> None:
        """Remove a replacement of a disruption given up, unless pods run on it: its Node (looked up on the
        API server when the cache shows none: it may lag) after a last look, then its instance."""
        try:
            name = node.name if node is not None else None
            if name is None and instance is not None:
                name = self.actions.node_for(instance.provider_id)
            if name:
                _, on_it = last_look(self.actions, name, ())
                if on_it:
                    log.info("replacement_kept", node=name, reason=f"pod {on_it[0]} runs there")
                    return
                self.actions.delete_node(name)
        except Exception as err:  # cannot tell, or cannot delete: scale-down takes it once it is empty
            log.warning("replacement_kept", node=node.name if node else "", reason=str(err))
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
        self._written.setdefault(node, {}).update(values)
        return True

    def overlay(self, snapshot: Snapshot) -> Snapshot:
        """The snapshot with the disruption annotations this replica wrote and the cache does not show yet."""
        if not self._written:
            return snapshot
        nodes = []
        seen = set()
        for n in snapshot.nodes:
            wrote = self._written.get(n.name)
            seen.add(n.name)
            if wrote is None:
                nodes.append(n)
            elif all(n.annotations.get(k) == v for k, v in wrote.items()):
                del self._written[n.name]  # the cache caught up
                nodes.append(n)
            else:
                merged = {**n.annotations, **wrote}
                nodes.append(
                    dataclasses.replace(n, annotations={k: v for k, v in merged.items() if v is not None})
                )
        for gone in set(self._written) - seen:
            del self._written[gone]
        return dataclasses.replace(snapshot, nodes=tuple(nodes))
