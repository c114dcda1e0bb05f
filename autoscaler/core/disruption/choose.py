"""Which nodes to disrupt in one plan: every method, then gangs, then the disruption budgets. Pure.

Nodes another disruption already has a say in are held: a node waiting for its replacements, those
replacements (their room is for its pods), a node being drained, and a Node annotated
``karpenter.sh/do-not-disrupt``. Then, node by node, the methods that do not wait for a node to be unneeded
(unhealthy, expired, drifted), then consolidation (:func:`autoscaler.core.planning.scaledown.scale_down`: empty,
underutilised, replace). A removal whose node holds a member of a running gang stays only if every node of
that gang goes too. Last, the budgets: in :data:`~autoscaler.core.disruption.method.ORDER`, each removal takes a
place under every budget that bounds its method, counting the nodes already being disrupted; those that find
none wait, with the budget named.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.core.census import PodCensus
from autoscaler.core.disruption import empty, expired, underutilised, unhealthy
from autoscaler.core.disruption.budgets import allowed
from autoscaler.core.disruption.drifted import drifted
from autoscaler.core.disruption.method import (
    DISRUPTION,
    NODE_DO_NOT_DISRUPT,
    ORDER,
    InProgress,
    Method,
    in_progress,
    retry_after,
)
from autoscaler.core.disruption.protection import (
    eviction_blocker,
    gang_blocker,
    without_reservations,
    workload,
)
from autoscaler.core.disruption.replace import replacement
from autoscaler.core.model import LABEL_LAUNCH_TOKEN, Node, Pod, Snapshot
from autoscaler.core.placement.bins import Kind
from autoscaler.core.placement.engine import Engine
from autoscaler.core.planning.decisions import Block, Blocked, Hold, Removal, RemovalPlan, Usage
from autoscaler.core.planning.node_facts import NodeFacts
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.planning.scaledown import scale_down
from autoscaler.core.words import count

__all__ = ["disrupt", "progress"]


@dataclass(slots=True)
class _Pass:
    """What one plan has decided so far."""

    removals: list[Removal] = field(default_factory=list)
    blocked: dict[str, list[Block]] = field(default_factory=dict)
    wake: list[float] = field(default_factory=list)
    evicting: dict[tuple[str, str], int] = field(default_factory=dict)
    # Nodes whose reasons are, so far, exactly those of one Blocked taken over whole (see adopt).
    whole: dict[str, Blocked] = field(default_factory=dict)

    def block(self, node: str, kind: Hold, why: str) -> None:
        reasons = self.blocked.setdefault(node, [])
        if all(b.detail != why for b in reasons):  # gangs and budgets are decided again until they agree
            reasons.append(Block(kind, why))

    def adopt(self, blocked: Blocked) -> None:
        """:meth:`block` for each block of ``blocked``, the blocks already made."""
        fresh = blocked.node not in self.blocked
        reasons = self.blocked.setdefault(blocked.node, [])
        for block in blocked.blocks:
            if all(b.detail != block.detail for b in reasons):
                reasons.append(block)
        if fresh and len(reasons) == len(blocked.blocks):
            self.whole[blocked.node] = blocked

    def result(self) -> tuple[Blocked, ...]:
        """Every node's reasons, by node name: a Blocked taken over whole, and added to since, is made anew."""
        out = []
        for node, reasons in sorted(self.blocked.items()):
            same = self.whole.get(node)
            # Reasons are only ever appended: as many as when taken over means the same ones.
            out.append(
                same
                if same is not None and len(same.blocks) == len(reasons)
                else Blocked(node, tuple(reasons))
            )
        return tuple(out)


def progress(snapshot: Snapshot) -> dict[str, InProgress]:
    """The disruptions waiting for replacements, by node."""
    out = {}
    # Most nodes have no disruption written on them: asked with ``in``, the cheapest question to a mapping.
    for node in [n for n in snapshot.nodes if DISRUPTION in n.annotations]:
        found = in_progress(node.name, node.annotations)
        if found is not None:
            out[node.name] = found
    return out


def held_nodes(snapshot: Snapshot, draining: Collection[str] = ()) -> dict[str, Block]:
    """The managed nodes no removal may choose now, with why: nodes waiting for their replacements, the
    replacements themselves (their room is for the pods of the node they replace), nodes being drained and
    nodes annotated do-not-disrupt. Every planner acting through the controller must leave these alone, or
    it removes a replacement as empty and the controller launches the next one."""
    return _held(snapshot, progress(snapshot), draining)


def _held(
    snapshot: Snapshot, waiting: Mapping[str, InProgress], draining: Collection[str]
) -> dict[str, Block]:
    held: dict[str, Block] = {}
    owner = {t: p.node for p in waiting.values() for t in p.tokens}
    # Every managed node is asked, at every plan: the questions most nodes answer no to come cheapest first.
    for node in snapshot.nodes:
        if not node.managed:
            continue
        name = node.name
        if name in waiting:
            p = waiting[name]
            held[name] = Block(
                Hold.DISRUPTING,
                f"being disrupted ({p.method}): waiting for {len(p.tokens)} replacement node(s) to be Ready",
            )
        elif owner and node.labels.get(LABEL_LAUNCH_TOKEN, "") in owner:
            held[name] = Block(
                Hold.DISRUPTING,
                f"replacement for node {owner[node.labels[LABEL_LAUNCH_TOKEN]]}, kept for its pods",
            )
        elif name in draining:
            # A node left cordoned by a drain that is no longer running (it failed to uncordon, or the
            # replica restarted) is not held: it is decided again, and its removal finished or undone.
            held[name] = Block(Hold.DISRUPTING, BEING_DRAINED)
        elif (
            NODE_DO_NOT_DISRUPT in node.annotations
            and node.annotations[NODE_DO_NOT_DISRUPT].lower() == "true"
        ):
            held[name] = Block(Hold.DISRUPTING, f"the Node is annotated {NODE_DO_NOT_DISRUPT}")
    return held


def _forced(
    node: Node, index: OfferingIndex, now: float, template: str, sick: int, managed: int
) -> tuple[Method | None, str, str]:
    """(method, why, what holds it) of the first method that does not wait for the node to be unneeded;
    no method and empty strings when none applies."""
    cfg = index.config.disruption
    why = unhealthy.unhealthy(node, cfg.unhealthy_conditions, now)
    if why:
        if sick > max(1, math.floor(managed * unhealthy.MAX_UNHEALTHY_SHARE)):
            return (
                Method.UNHEALTHY,
                why,
                (
                    f"{sick} of {count(managed, 'node')} {'is' if sick == 1 else 'are'} unhealthy, more than {unhealthy.MAX_UNHEALTHY_SHARE:.0%}: "
                    "a cluster-wide fault that new nodes would not fix"
                ),
            )
        return Method.UNHEALTHY, why, ""
    if not node.ready:
        return None, "", ""
    why = expired.expired(node, cfg.node_max_lifetime, now)
    if why:
        return Method.EXPIRED, why, ""
    why = drifted(node, template) if cfg.drift else ""
    return (Method.DRIFTED, why, "") if why else (None, "", "")


REMOVED, HELD, FREE = "removed", "held", "free"
BEING_DRAINED = "being drained"


def _decide_forced(
    node: Node,
    method: Method,
    why: str,
    pods: Sequence[Pod],
    snapshot: Snapshot,
    index: OfferingIndex,
    engine: Engine,
    total: Usage,
    now: float,
    state: _Pass,
    held: Collection[str],
) -> str:
    """Decide an unhealthy, expired or drifted node: REMOVED, HELD (it waits on this method's account:
    consolidation leaves it alone) or FREE (blocked here; consolidation may still take it)."""
    counted = dict(state.evicting)
    blocker = eviction_blocker(pods, snapshot.pdbs, counted)
    if blocker:
        state.block(node.name, Hold.PODS_STAY, f"{method}: {why}; {blocker}")
        return FREE
    keys = tuple(p.key for p in pods)
    kept = empty.kept(pods)
    if method == Method.UNHEALTHY or not kept:
        state.evicting = counted
        state.removals.append(Removal(node.name, f"{method}: {why}", not pods, keys, method))
        return REMOVED
    again = retry_after(node.annotations)
    if again > now:
        state.block(
            node.name,
            Hold.RETRY_LATER,
            f"{method}: {why}; a replacement was given up, tried again in {int(again - now)}s",
        )
        state.wake.append(again)
        return HELD
    # Not onto a node leaving too, nor into a replacement's room.
    targets = [b for b in engine.bins if b.kind == Kind.NODE and b.name != node.name and b.name not in held]
    if not underutilised.move(kept, node, engine, targets, index.config):
        state.evicting = counted
        reason = f"{method}: {why}; its pods fit on other nodes"
        state.removals.append(Removal(node.name, reason, False, keys, method))
        return REMOVED
    found = replacement(node, kept, index, total)
    if found.blocker:
        state.block(node.name, Hold.PODS_STAY, f"{method}: {why}; nowhere to move its pods ({found.blocker})")
        return FREE
    if not found.first:
        state.block(
            node.name,
            Hold.CLUSTER_LIMIT,
            f"{method}: {why}; a replacement would exceed a cluster limit while both run",
        )
        return FREE
    state.evicting = counted
    reason = f"{method}: {why}; {len(found.launches)} new node(s) first"
    state.removals.append(Removal(node.name, reason, False, keys, method, found.launches))
    return REMOVED


def disrupt(
    snapshot: Snapshot,
    index: OfferingIndex,
    now: float,
    *,
    by_node: Mapping[str, list[Pod]],
    engine: Engine,
    total: Usage,
    unneeded_since: Mapping[str, float] | None = None,
    needed: Collection[str] = (),
    contended: str = "",
    template: str = "",
    draining: Collection[str] = (),
    census: PodCensus | None = None,
    facts: Mapping[str, NodeFacts] | None = None,
) -> RemovalPlan:
    """Every node to disrupt now, and for every other managed node what keeps it.

    ``template`` is the digest of the node template a node launched now gets (see
    :mod:`autoscaler.core.disruption.drifted`); ``draining`` the nodes whose drains are under way;
    ``census`` that of the snapshot's pods, when the caller has it; ``facts`` what earlier plans read of the
    nodes (see :func:`~autoscaler.core.planning.scaledown.scale_down`)."""
    cfg = index.config
    waiting = progress(snapshot)
    held = _held(snapshot, waiting, draining)
    state = _Pass()
    for p in waiting.values():
        state.wake.append(p.since + cfg.disruption.replacement_timeout)
    managed = [n for n in snapshot.nodes if n.managed and not n.deleting]
    rules = cfg.disruption.unhealthy_conditions
    sick = sum(1 for n in managed if unhealthy.unhealthy(n, rules, now))
    if cfg.scale_down.enabled:
        for node in sorted(managed, key=lambda n: n.name):
            if node.name in held or node.unreadable:
                continue
            _wake(node, cfg.disruption.node_max_lifetime, rules, now, state)
            method, why, holds = _forced(node, index, now, template, sick, len(managed))
            if holds:
                state.block(node.name, Hold.CLUSTER_FAULT, f"{method}: {why}; {holds}")
                held[node.name] = state.blocked[node.name][-1]
                continue
            if method is None:
                continue
            pods = workload(by_node.get(node.name, ()))
            verdict = _decide_forced(
                node, method, why, pods, snapshot, index, engine, total, now, state, held
            )
            if verdict == REMOVED:
                held[node.name] = Block(Hold.DISRUPTING, f"chosen as {method}")
                # Its replacements run beside it for a while: the next one is planned within what is left.
                total += Usage.of(la.offering for la in state.removals[-1].replacement)
            elif verdict == HELD:
                held[node.name] = state.blocked[node.name][-1]
    chosen = {r.node for r in state.removals}
    consolidation = scale_down(
        snapshot,
        index,
        now,
        unneeded_since=unneeded_since,
        needed=needed,
        by_node=by_node,
        engine=engine,
        total=total,
        contended=contended,
        held=held,
        move_shares=True,
        census=census,
        facts=facts,
    )
    removals = [*state.removals, *consolidation.removals]
    if cfg.scale_down.multi_node and _quiet(snapshot, waiting, draining):
        more = _multi_node(
            snapshot,
            index,
            now,
            removals=removals,
            by_node=by_node,
            engine=engine,
            total=total,
            held=held,
            taken={*needed, *consolidation.unneeded_since},
            contended=contended,
            evicting=dict(state.evicting),
        )
        chosen |= {r.node for r in more}
        removals += more
    for b in consolidation.blocked:
        if b.node not in chosen:
            state.adopt(b)
    if consolidation.next_check is not None:
        state.wake.append(consolidation.next_check)
    while True:  # a budget that holds back one node of a gang holds back the whole gang
        before = len(removals)
        removals = _whole_gangs(removals, snapshot, by_node, waiting, state)
        removals = _within_budgets(removals, snapshot, index, now, len(managed), waiting, held, state)
        if len(removals) == before:
            break
    blocked = state.result()
    future = [t for t in state.wake if t > now]
    return RemovalPlan(tuple(removals), blocked, consolidation.unneeded_since, min(future, default=None))


def _multi_node(
    snapshot: Snapshot,
    index: OfferingIndex,
    now: float,
    *,
    removals: Sequence[Removal],
    by_node: Mapping[str, list[Pod]],
    engine: Engine,
    total: Usage,
    held: Mapping[str, Block],
    taken: Collection[str],
    contended: str,
    evicting: dict[tuple[str, str], int],
) -> list[Removal]:
    """Multi-node consolidation (:mod:`autoscaler.core.disruption.multinode`) over the nodes no other method
    took (``taken``: more nodes it must leave alone)."""
    # Imported only when a quiet cluster is looked at for it: a plan with pending pods never gets here.
    from autoscaler.core.disruption import multinode

    leaving = {r.node for r in removals}
    for r in removals:  # their pods take their share of every PodDisruptionBudget first
        eviction_blocker(workload(by_node.get(r.node, ())), snapshot.pdbs, evicting)
        total += Usage.of(la.offering for la in r.replacement)
    workloads = {
        n.name: without_reservations(workload(by_node.get(n.name, ()))) for n in snapshot.nodes if n.managed
    }
    found = multinode.candidates(snapshot, index, now, workloads=workloads, taken={*held, *leaving, *taken})
    if not found:
        return []
    chosen = multinode.consolidate(
        found,
        snapshot,
        index,
        engine=engine,
        staying={*held, *leaving},
        total=total,
        evicting=evicting,
        replace=not contended,
    )
    return chosen.removals


def _quiet(snapshot: Snapshot, waiting: Collection[str], draining: Collection[str]) -> bool:
    """No pod waits for a place (the room a move fills is what it would take), no disruption waits for
    replacements, no drain runs and no Node is being deleted: the room they make or take is not settled yet (a
    node being drained has pods that still need its replacements' room)."""
    if waiting or draining or any(n.managed and n.deleting for n in snapshot.nodes):
        return False
    return not any(p.pending and not p.daemonset and not p.mirror for p in snapshot.pods)


def _wake(
    node: Node, lifetime: float, rules: Sequence[unhealthy.ConditionRule], now: float, state: _Pass
) -> None:
    for t in (expired.due(node, lifetime, now), unhealthy.due(node, rules, now)):
        if t is not None:
            state.wake.append(t)


def _whole_gangs(
    removals: list[Removal],
    snapshot: Snapshot,
    by_node: Mapping[str, list[Pod]],
    waiting: Collection[str],
    state: _Pass,
) -> list[Removal]:
    """Drop removals that would leave part of a running gang behind, until none would. The nodes of a gang
    must also go at the same moment: all drained now, or all replaced first (their drains then start together,
    once every replacement is Ready)."""
    while True:
        now_ = {r.node for r in removals if not r.replacement}
        later = {r.node for r in removals if r.replacement} | set(waiting)
        kept, dropped = [], False
        for r in removals:
            leaving = later if r.replacement else now_
            blocker = gang_blocker(workload(by_node.get(r.node, ())), snapshot, leaving)
            if blocker:
                state.block(r.node, Hold.GANG, f"{r.method}: {blocker}")
                dropped = True
            else:
                kept.append(r)
        removals = kept
        if not dropped:
            return removals


def _within_budgets(
    removals: list[Removal],
    snapshot: Snapshot,
    index: OfferingIndex,
    now: float,
    managed: int,
    waiting: Mapping[str, InProgress],
    held: Mapping[str, Block],
    state: _Pass,
) -> list[Removal]:
    """The removals the disruption budgets leave room for, in method order."""
    budgets = index.config.disruption.budgets
    if not budgets:
        return removals
    busy = {n for n, why in held.items() if n in waiting or why.detail == BEING_DRAINED}
    busy |= {n.name for n in snapshot.nodes if n.managed and n.deleting}
    order = {m: i for i, m in enumerate(ORDER)}
    taken = 0
    chosen: set[str] = set()
    for r in sorted(removals, key=lambda r: order.get(r.method, len(order))):
        room, budget = allowed(r.method, budgets, managed, len(busy) + taken, now)
        if room is not None and room <= 0:
            assert budget is not None
            state.block(
                r.node,
                Hold.BUDGET,
                f"{r.method}: disruption budget {budget.describe()} allows no more now "
                f"({len(busy) + taken} of {count(managed, 'node')} being disrupted)",
            )
            continue
        taken += 1
        chosen.add(r.node)
    return [r for r in removals if r.node in chosen]
