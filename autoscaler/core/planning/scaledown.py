"""Scale-down: which nodes tidal launched are no longer worth keeping (the consolidation methods of
:mod:`autoscaler.core.disruption`: empty, underutilised, replace), and what keeps the others.

A node is removable when it has been unneeded for ``nodeUnneededDuration``: empty (only DaemonSet, mirror
and KAI background pods), or under-utilised with every pod safe to evict and a place to go on the nodes that
stay (the pods are re-planned with the same fit rules as scale-up), or, failing that, on new nodes that cost at
least ``replaceSavings`` less than it does, within the cluster limits. GPU nodes go all the way to zero. While
a cluster limit keeps pending pods out, no node is replaced: the budget it frees would go to those pods.

A node whose pods all started within ``replaceYoungPodsWithin`` is replaced, however busy, when new nodes cost
at least ``YOUNG_REPLACE_SAVINGS`` less: moving such pods loses minutes of work, while leaving them holds a node
bought for bigger pods (the scheduler binds a new pod to any idle node that fits) for their whole run.

An empty node waits ``nodeUnneededDuration`` only while a pod that waits could use it (held back by its KAI
queue, a member of a gang not yet whole, any pending pod the node would hold); otherwise ``unneededWithoutDemand``
(shorter): what it is kept for then is a pod nobody has asked for yet.

With ``move_shares``, a node's KAI reservation pods do not hold it: each holds a GPU for the pods sharing it,
which all run on that node, so when every one of them may be evicted the reservation goes with them (KAI
deletes it once nobody shares its GPU, and makes a new one where they land). tidal never evicts it; the drain
waits for KAI to delete it before the Node goes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from operator import attrgetter

from autoscaler.core.census import PodCensus
from autoscaler.core.disruption import empty, underutilised
from autoscaler.core.disruption.method import Method, retry_after
from autoscaler.core.disruption.protection import eviction_blocker, without_reservations
from autoscaler.core.disruption.protection import workload as workload_of
from autoscaler.core.disruption.replace import Replacement, cheaper, node_offering, unlimited
from autoscaler.core.disruption.underutilised import NODE_MODE
from autoscaler.core.model import Node, Pod, Snapshot
from autoscaler.core.placement.bins import Bin, Kind
from autoscaler.core.placement.engine import Engine
from autoscaler.core.planning import reserved
from autoscaler.core.planning.cluster import build_engine, node_gpus, pods_by_node, usage
from autoscaler.core.planning.decisions import Block, Blocked, Hold, Removal, RemovalPlan, Usage
from autoscaler.core.planning.node_facts import NodeFacts, Workload
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.quantity import format_duration
from autoscaler.core.resources import Resources
from autoscaler.core.timestamps import parse_time
from autoscaler.core.words import count

__all__ = ["NODE_MODE", "UNNEEDED_SINCE", "YOUNG_REPLACE_SAVINGS", "node_offering", "scale_down"]

UNNEEDED_SINCE = "tidal.dev/unneeded-since"
# The saving that justifies restarting pods that have only just started (capped by replaceSavings).
YOUNG_REPLACE_SAVINGS = 0.2

_name = attrgetter("name")
_node_of = attrgetter("node")
_NO_REPLACEMENT = Replacement()


def _bound_since(pods: Sequence[Pod]) -> float | None:
    """When the first of ``pods`` was bound (+inf for no pod), or None when one is not known to be bound."""
    first = float("inf")
    for p in pods:
        bound = p.scheduled
        if bound is None or bound.status != "True" or bound.last_transition is None:
            return None
        first = min(first, bound.last_transition)
    return first


def _young(since: float | None, now: float, within: float) -> bool:
    """Every pod was bound at most ``within`` seconds ago (never, when ``within`` is 0), ``since`` being
    :func:`_bound_since` of them."""
    return within > 0 and since is not None and now - since <= within


def _workload(
    node: Node, pods: Sequence[Pod], index: OfferingIndex, move_shares: bool, facts: NodeFacts | None
) -> Workload:
    """The node's workload and what follows from it: kept in ``facts`` (the node's, from an earlier plan of
    the same node, pods and index) when given."""
    found = facts.by_shares.get(move_shares) if facts is not None else None
    if found is None:
        # A pod tidal cannot fully read counts as workload whatever it says it is: its node is never empty.
        workload = workload_of(pods)
        if move_shares:
            workload = without_reservations(workload)
        kept = empty.kept(workload)
        utilization = underutilised.utilization(node, kept)
        threshold = underutilised.threshold(node, index.config)
        found = Workload(
            workload,
            kept,
            utilization,
            threshold,
            _bound_since(kept),
            bool(kept) and utilization >= threshold,
        )
        if facts is not None:
            facts.by_shares[move_shares] = found
    return found


def _cheaper(
    node: Node, work: Workload, index: OfferingIndex, savings: float, total: Usage
) -> tuple[str, str, Replacement]:
    """:func:`cheaper` for the node's kept pods, the plan of new nodes for them alone worked out once."""
    # Planned only where cheaper would plan it: not for pods that keep off new nodes, nor beside a node
    # whose price is unknown.
    if work.unlimited is None and not any(p.topological for p in work.kept) and node_offering(node, index):
        work.unlimited = unlimited(work.kept, index)
    return cheaper(node, work.kept, index, savings, total, planned=work.unlimited)


def _young_replaceable(
    node: Node, work: Workload, snapshot: Snapshot, index: OfferingIndex, now: float, total: Usage
) -> bool:
    """A busy node of young, movable pods that new nodes hold for ``YOUNG_REPLACE_SAVINGS`` less.

    Only such nodes join the candidates (a busy node that stays must stay a place other pods can move to).
    """
    cfg = index.config.scale_down
    if cfg.replace_savings >= 1.0 or not _young(work.bound_since, now, cfg.replace_young_pods_within):
        return False
    if eviction_blocker(work.kept, snapshot.pdbs, {}):
        return False
    blocker, _, _ = _cheaper(node, work, index, min(cfg.replace_savings, YOUNG_REPLACE_SAVINGS), total)
    return not blocker


def _waiting(snapshot: Snapshot, census: PodCensus | None = None) -> list[tuple[bool, Resources]]:
    """What the pods that wait for a place (whether or not they count as demand now) ask for: whether they
    want GPUs (whole or a share), and their requests; each such pair once."""
    # A pending pod is bound to no node: the census's unbound pods hold them all, in the same order.
    pods = census.unbound if census is not None and census.describes(snapshot.pods) else snapshot.pods
    # By identity of the requests first: replicas share one, and hashing one by value costs more.
    shapes = {
        (id(p.requests), p.gpu_share is not None): p
        for p in pods
        if p.pending and not p.daemonset and not p.mirror
    }
    return list(
        dict.fromkeys((bool(p.requests.gpus) or shared, p.requests) for (_, shared), p in shapes.items())
    )


class _Wanted:
    """Whether a waiting pod could use a node by its requests: GPU pods (whole GPUs or a share) a node with
    GPUs, other pods one without (a GPU node is kept for GPU work, as tidal launches them). The waiting pods
    are gathered when first asked about, and the answer kept per allocatable (nodes of one type ask alike)."""

    def __init__(self, snapshot: Snapshot, census: PodCensus | None) -> None:
        self._snapshot, self._census = snapshot, census
        self._shapes: list[tuple[bool, Resources]] | None = None
        self._by_alloc: dict[Resources, bool] = {}

    def __call__(self, node: Node) -> bool:
        alloc = node.allocatable
        found = self._by_alloc.get(alloc)
        if found is None:
            if self._shapes is None:
                self._shapes = _waiting(self._snapshot, self._census)
            gpus = bool(alloc.gpus)
            found = any(wants == gpus and requests.fits_in(alloc) for wants, requests in self._shapes)
            self._by_alloc[alloc] = found
        return found


def scale_down(
    snapshot: Snapshot,
    index: OfferingIndex,
    now: float,
    *,
    unneeded_since: Mapping[str, float] | None = None,
    needed: Collection[str] = (),
    by_node: Mapping[str, list[Pod]] | None = None,
    engine: Engine | None = None,
    total: Usage | None = None,
    contended: str = "",
    held: Mapping[str, Block] | None = None,
    move_shares: bool = False,
    census: PodCensus | None = None,
    facts: Mapping[str, NodeFacts] | None = None,
) -> RemovalPlan:
    """Removable managed nodes and, for every other managed node, what blocks its removal.

    ``total`` is what counts against the cluster limits (nodes still launching and planned included); the
    snapshot's nodes when not given. ``contended`` is the limit that keeps pending pods out, if one does: no
    node is then replaced (its pods would lose the budget it frees to them). ``held`` are nodes another
    disruption has a say in (being replaced, a replacement, chosen by another method), with why: they are
    neither removed nor given anybody's pods here. ``move_shares``: KAI reservation pods go with the pods
    sharing their GPUs (tidal's consolidation; the baselines' leaves their nodes alone). ``census`` is that of
    the snapshot's pods, when the caller has it. ``facts`` are what an earlier plan read of each node whose
    Node and pods are the very ones of this snapshot (:attr:`~autoscaler.core.planning.rooms.NodeRooms.facts`),
    with the same index; read and filled here."""
    cfg = index.config.scale_down
    if not cfg.enabled:
        return RemovalPlan()
    grace = index.config.new_node_grace_period
    total = total if total is not None else usage(snapshot)
    by_node = by_node if by_node is not None else pods_by_node(snapshot.pods)
    since_map = unneeded_since or {}
    removals: list[Removal] = []
    blocked: list[Blocked] = []
    seen: dict[str, float] = {}
    candidates: list[tuple[float, Node, Workload]] = []
    listed = reserved.live(index.memo, (*index.offerings, *index.excluded))
    held = held or {}
    pods_of = by_node.get
    facts_of = facts.get if facts else None
    young_within = cfg.replace_young_pods_within
    # Whether a busy node may yet be replaced for its young pods (see _young_replaceable): most plans, no
    # busy node is, and the verdict kept with its workload stands.
    young_replace = not contended and cfg.replace_savings < 1.0 and young_within > 0
    for node in sorted(snapshot.nodes, key=_name):
        if not node.managed or node.deleting:
            continue
        name = node.name
        if name in held:
            blocked.append(Blocked(name, (held[name],)))
            continue
        if name in needed:
            blocked.append(_blocked(node, Hold.PENDING_PODS, "pending pods will run here"))
            continue
        if node.unreadable:
            blocked.append(
                _blocked(node, Hold.UNREADABLE, f"tidal cannot read all of this Node ({node.unreadable})")
            )
            continue
        if not node.ready:
            continue
        if listed:  # without a listed reservation, none keeps a node
            keeps = reserved.keeps(node, listed, index.config, now)
            if keeps:
                blocked.append(_blocked(node, Hold.RESERVATION, keeps))
                continue
        known = facts_of(name) if facts_of is not None else None
        work = known.by_shares.get(move_shares) if known is not None else None
        if work is None:
            work = _workload(node, pods_of(name, ()), index, move_shares, known)
        if work.busy:
            bound = work.bound_since
            if not (
                young_replace
                and bound is not None
                and now - bound <= young_within
                and _young_replaceable(node, work, snapshot, index, now, total)
            ):
                if work.utilised is None:
                    mode = underutilised.mode(node)
                    work.utilised = _blocked(
                        node,
                        Hold.UTILISED,
                        f"utilization {work.utilization:.2f} is at or above {work.threshold:.2f} ({mode})",
                    )
                blocked.append(work.utilised)
                continue
        candidates.append((work.utilization, node, work))

    # The nodes pods may move to, and the engine that holds them, only once a candidate has pods to move.
    targets: list[Bin] | None = None
    evicting: dict[tuple[str, str], int] = {}
    replace_ok = cfg.replace_savings < 1.0
    wanted = _Wanted(snapshot, census) if cfg.unneeded_without_demand < cfg.node_unneeded_duration else None
    wake: list[float] = []
    durations: dict[float, str] = {}  # format_duration, by value: the nodes of a plan wait alike

    def duration(seconds: float) -> str:
        found = durations.get(seconds)
        if found is None:
            found = durations[seconds] = format_duration(seconds)
        return found

    # The words of a block, by what it says: nodes unneeded alike (since the same plan) share them.
    notes: dict[tuple[Hold, str], Block] = {}
    for util, node, work in sorted(candidates, key=_candidate_order):
        since = since_map.get(node.name)
        if since is None:
            since = _marked(node, facts_of(node.name) if facts_of is not None else None) or now
        how = ""
        found = _NO_REPLACEMENT
        hold = Hold.PODS_STAY
        workload, kept = work.pods, work.kept
        # No pod to evict takes a share of any budget (most candidates, empty nodes, have none).
        counted = dict(evicting) if workload else evicting
        blocker = eviction_blocker(workload, snapshot.pdbs, counted) if workload else ""
        if not blocker and kept:
            if targets is None:
                if engine is None:
                    engine = build_engine(snapshot, index, by_node=by_node)
                removing = {c[1].name for c in candidates} | set(held)
                targets = [b for b in engine.bins if b.kind == Kind.NODE and b.name not in removing]
            assert engine is not None
            blocker = underutilised.move(kept, node, engine, targets, index.config)
            if blocker and replace_ok and contended:
                blocker = f"{blocker}; no node is replaced while pending pods wait for a limit ({contended})"
            elif blocker and replace_ok:
                savings = cfg.replace_savings
                if _young(work.bound_since, now, cfg.replace_young_pods_within):
                    savings = min(savings, YOUNG_REPLACE_SAVINGS)
                blocker, how, found = _cheaper(node, work, index, savings, total)
                again = retry_after(node.annotations)
                if not blocker and again > now:
                    hold = Hold.RETRY_LATER
                    blocker = f"a replacement was given up; tried again in {duration(again - now)}"
        if blocker:
            blocked.append(_blocked(node, hold, blocker))
            continue
        seen[node.name] = since
        waited = now - since
        wait = cfg.node_unneeded_duration
        if wanted is not None and not kept and not wanted(node):
            wait = cfg.unneeded_without_demand
            wake.append(since + wait)
        if waited < wait:
            detail = f"unneeded for {duration(waited)} of {duration(wait)}"
            note = work.waiting
            if note is None or note.blocks[0].detail != detail:  # as the last plan said, most plans
                note = work.waiting = _noted(node, Hold.UNNEEDED_TOO_SHORT, detail, notes)
            blocked.append(note)
            continue
        # The unneeded clock runs from the start, but a node is never removed younger than the grace period:
        # a pod cancelled while its node launched is often followed by the next one.
        age = now - node.created
        if node.created and age < grace:
            blocked.append(
                _blocked(
                    node,
                    Hold.NEW_NODE,
                    f"new node: {duration(age)} old of newNodeGracePeriod {duration(grace)}",
                )
            )
            continue
        evicting = counted  # this node's pods now take their share of every budget
        if how and found.first:
            # Its replacements run beside it for a while: the next one is planned within what is left.
            total += Usage.of(la.offering for la in found.launches)
        if kept:
            method = Method.REPLACE if how else Method.UNDERUTILISED
            movable = count(len(kept), "pod")
            kind = f"utilization {util:.2f}, {how or f'{movable} can move'}"
        else:
            method, kind = Method.EMPTY, empty.describe(workload)
        if work.removed is None:
            work.removed = (node_gpus(node), tuple(p.key for p in workload))
        gpus, keys = work.removed
        removals.append(
            Removal(
                node.name,
                f"{kind}; unneeded for {duration(waited)}",
                not workload,
                keys,
                method,
                found.launches if how and found.first else (),
                gpus=gpus,
            )
        )
    blocked.sort(key=_node_of)
    future = [t for t in wake if t > now]
    return RemovalPlan(tuple(removals), tuple(blocked), seen, min(future, default=None))


def _blocked(node: Node, kind: Hold, detail: str) -> Blocked:
    return Blocked(node.name, (Block(kind, detail),))


def _noted(node: Node, kind: Hold, detail: str, notes: dict[tuple[Hold, str], Block]) -> Blocked:
    """:func:`_blocked`, the block shared by the nodes of one plan that say the same."""
    block = notes.get((kind, detail))
    if block is None:
        block = notes[(kind, detail)] = Block(kind, detail)
    return Blocked(node.name, (block,))


def _marked(node: Node, facts: NodeFacts | None) -> float | None:
    """When the node's annotation says it was first seen unneeded (None without a readable one), read once
    per Node when its ``facts`` are given."""
    if facts is None:
        return parse_time(node.annotations.get(UNNEEDED_SINCE))
    found = facts.marked
    if found is None:
        found = facts.marked = (parse_time(node.annotations.get(UNNEEDED_SINCE)),)
    return found[0]


def _candidate_order(c: tuple[float, Node, Workload]) -> tuple[float, str]:
    return c[0], c[1].name
