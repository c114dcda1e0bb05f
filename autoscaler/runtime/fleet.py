"""The lifecycle of the nodes tidal launched, rebuilt every reconcile from cloud instances and Nodes.

Ownership lives only in cloud tags and node labels, so a restarted or newly elected replica sees exactly what
the previous one saw. The in-memory part is the launches whose instance the cloud has not listed yet, so
that they keep absorbing demand (nothing is launched twice) in the meantime, and each member's transition
history: states move only along the edges of ``TRANSITIONS``, and the registration and GPU readiness timeouts
count from when a member entered its state (a GPU node that flaps NotReady after a week gets the whole
``gpuReadinessTimeout`` again, not none). A member seen for the first time (after a restart) starts its
history at its instance's creation and its Node's registration.

A fleet of thousands changes in a few members between two reconciles: a member whose instance and Node are
the very objects seen last time, whose state has no timeout and does not hang on anything else that moved,
is kept as it was, and what is asked of the fleet (a member by Node name or launch token, the members still
coming up, the count by state, the members the last observe changed) is kept by the fleet with its members.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from operator import attrgetter

import structlog

from autoscaler.config.values import Config
from autoscaler.core.census import PodCensus
from autoscaler.core.gpu.layouts import gpus_visible
from autoscaler.core.model import TAINT_DISRUPTED, Node, Pod, Snapshot
from autoscaler.core.offering import Instance, Offering
from autoscaler.core.planning.decisions import Launching, Usage
from autoscaler.core.quantity import format_duration
from autoscaler.runtime.members import (
    HISTORY_KEPT,
    TRANSITIONS,
    Action,
    Member,
    MemberIndex,
    Overdue,
    State,
)

__all__ = ["HISTORY_KEPT", "TRANSITIONS", "Action", "Fleet", "Member", "Overdue", "State"]

log = structlog.get_logger("tidal.fleet")
_STATE = attrgetter("state")
_KEY = attrgetter("key")


@dataclass(slots=True)
class _Pending:
    """A launch whose instance the cloud has not listed yet."""

    token: str
    offering: Offering
    pods: tuple[str, ...]
    instance: Instance | None
    since: float


class Fleet:
    """Observe (facts → states) then report what needs acting on; the controller acts.

    ``on_refused(old, new)`` is told of every refused transition (the controller counts it in a metric).
    """

    def __init__(self, config: Config, on_refused: Callable[[State, State], None] | None = None) -> None:
        self.config = config
        self.members: dict[str, Member] = {}
        self.on_refused = on_refused
        self.refusals: Counter[tuple[State, State]] = Counter()
        self._pending: dict[str, _Pending] = {}
        # The pods each launch was for, by launch token, until its node is Ready: the planner keeps a node
        # coming up for them, not for whichever pending pod sorts first.
        self._for: dict[str, tuple[str, ...]] = {}
        self._by_type: (
            tuple[
                Sequence[Offering],
                dict[tuple[str, str, str], Offering],
                dict[str, Offering],
                dict[str, Offering],
            ]
            | None
        )
        self._by_type = None
        # Per-Node facts by provider id, with the Node object they were worked out from (see _state_of).
        self._facts: dict[str, tuple[Node, bool, bool]] = {}
        # The members by Node name and by launch token, and the ``members`` dict they were built from: built
        # when first asked after ``members`` changed, instead of a pass over the fleet for every question.
        self._indexed: tuple[dict[str, Member], MemberIndex] | None = None
        # The members still coming up or without a Node, in the fleet's order, and the ``members`` dict they
        # were picked from: what the planner asks of the fleet is about them, a few among thousands.
        self._unready: tuple[dict[str, Member], list[Member]] | None = None
        # What the last observe changed: (the members before, the members after, the keys of members it
        # (re)built, the keys gone); and the launches forgotten since, gone at the next observe.
        self._changes: tuple[dict[str, Member], dict[str, Member], list[str], list[str]] | None = None
        self._forgotten: set[str] = set()
        # The nodes that ran workload pods at the last observe, and the members to look at again at the next
        # (their launch was just listed).
        self._busy: AbstractSet[str] = frozenset()
        self._recheck: set[str] = set()
        # The members by state, and the ``members`` dict counted: kept up to date as members change.
        self._tally: tuple[dict[str, Member], Counter[State]] | None = None

    def record_launch(
        self, token: str, offering: Offering, pods: Sequence[str], instance: Instance | None, now: float
    ) -> None:
        """Remember a launch until the cloud lists its instance, so its capacity is not planned again.

        It counts at once: a plan made later in the same reconcile (the fallback after a capacity error)
        must see its room and GPUs, or the same pods would be launched for twice and the limits overrun."""
        self._pending[token] = _Pending(token, offering, tuple(pods), instance, now)
        self._for[token] = tuple(pods)
        key = f"token:{token}"
        if key not in self.members:
            self.members[key] = Member(
                key, State.LAUNCHING, instance, None, offering, tuple(pods), [(State.LAUNCHING, now)]
            )
            self._indexed = self._unready = None
            if self._tally is not None and self._tally[0] is self.members:
                self._tally[1][State.LAUNCHING] += 1

    def forget_launch(self, token: str) -> None:
        """Stop counting a launch not yet listed by the cloud (its instance was terminated on purpose)."""
        self._pending.pop(token, None)
        self._for.pop(token, None)
        forgotten = self.members.pop(f"token:{token}", None)
        if forgotten is not None:
            self._indexed = self._unready = None
            self._forgotten.add(f"token:{token}")
            if self._tally is not None and self._tally[0] is self.members:
                self._tally[1][forgotten.state] -= 1

    def observe(
        self,
        instances: Iterable[Instance],
        snapshot: Snapshot,
        offerings: Sequence[Offering],
        now: float,
        *,
        census: PodCensus | None = None,
    ) -> list[Overdue]:
        """Rebuild every member from the facts, moving states along allowed edges only; return members past
        a timeout (counted from when they entered their state) or orphaned. ``census``, when it is that of
        the snapshot's pods, says which nodes run workload pods without another pass over the pods."""
        old = self.members
        # A member whose instance, Node and launch are the very objects of the last observe, and whose state
        # neither times out nor depends on anything else that changed, is kept without another look (the
        # first test in the loop below): only when the last observe made these members, with these offerings.
        quick = self._changes is not None and self._changes[1] is old
        if self._by_type is None or self._by_type[0] is not offerings:
            quick = False
            self._by_type = (
                offerings,
                {(o.instance_type, o.zone, o.capacity_type): o for o in offerings},
                {o.instance_type: o for o in offerings},
                {o.reservation.id: o for o in offerings if o.reservation is not None},
            )
        _, by_type, by_type_any, reserved_by_id = self._by_type
        nodes = {n.provider_id: n for n in snapshot.nodes if n.provider_id}
        instances = list(instances)
        busy: AbstractSet[str] = set()
        if census is not None and census.describes(snapshot.pods):
            busy = census.busy
        elif any(i.provider_id in nodes for i in instances):
            busy = _busy(snapshot.pods)
        # The Nodes that became busy or idle, and the launches whose planned offering or pods may differ
        # from what their member holds: their members are looked at again.
        flipped = busy ^ self._busy if quick else frozenset()
        hot = self._pending.keys() | self._for.keys()
        recheck, self._recheck = self._recheck, set()
        facts: dict[str, tuple[Node, bool, bool]] = self._facts if quick else {}
        seen: dict[str, Member] = {}
        overdue: list[Overdue] = []
        rebuilt: list[str] = []  # the members made anew (a key may appear twice)
        # The tokens of the instances looked at: every launch not yet listed (in ``hot``) is among them.
        listed_tokens = set()
        coming: set[str] = set()  # the launches whose node is not Ready yet (see _for)
        members_get, pending_get, for_get, nodes_get = (
            old.get,
            self._pending.get,
            self._for.get,
            nodes.get,
        )
        launching, registered = State.LAUNCHING, State.REGISTERED
        for inst in instances:
            pid, token = inst.provider_id, inst.launch_token
            if quick:
                before = members_get(pid)
                # Unchanged: the same instance and Node objects (the same facts about the Node, the same
                # offering), no launch pods or planned offering to take in, nothing refused, a state without
                # a timeout and, if it depends on the Node's pods, the same answer about them. The look below
                # would find the same state and keep it.
                if (
                    before is not None
                    and before.instance is inst
                    and before.refused is None
                    and not before.pods
                    and before.state is not launching
                    and before.state is not registered
                    and before.node is nodes_get(pid)
                    and token not in hot
                    and pid not in recheck
                    and (before.node is None or before.node.name not in flipped)
                    and inst.state != "terminated"
                ):
                    seen[pid] = before
                    continue
            listed_tokens.add(token)
            offering = (
                reserved_by_id.get(inst.reservation_id)
                or by_type.get((inst.instance_type, inst.zone, inst.capacity_type))
                or by_type_any.get(inst.instance_type)
            )
            node = nodes_get(pid)
            if inst.state == "terminated":
                if node is not None and node.managed:
                    # The offering goes with it so a reclaimed spot offering is benched, not bought again at once.
                    member = Member(pid, State.REGISTERED, inst, node, offering)
                    seen[pid] = member
                    rebuilt.append(pid)
                    self._settle(member, State.REGISTERED, now)
                    _note_coming(member, coming)
                    spot = inst.capacity_type == "spot"
                    action = Action.DELETE_NODE_OF_RECLAIMED_SPOT if spot else Action.DELETE_NODE_OF_ENDED
                    overdue.append(Overdue(member, action, "its instance was terminated (e.g. spot reclaim)"))
                continue
            pending = pending_get(token)
            if pending is not None:
                self._recheck.add(pid)  # the launch is forgotten now: its offering is the listing's next time
            if pending is not None and pending.offering.key == (offering.key if offering else ""):
                offering = pending.offering  # as planned: its GPU layout is not in the cloud's listing
            pods = for_get(token, ())
            before = members_get(pid)
            if (
                before is not None
                and before.instance is inst
                and before.node is node
                and before.offering is offering
                and before.refused is None
                and before.pods == pods
                and self._state_of(before, busy, facts) is before.state
            ):
                # The very same facts and the same state: rebuilding would make an equal member (same
                # history, nothing refused), so keep it. Timeouts count with time alone: still checked, for
                # the only states that have one when nothing was refused.
                seen[pid] = before
                state = before.state
                if state is State.LAUNCHING or state is State.REGISTERED:
                    coming.add(token)  # as _note_coming: a member with an instance
                    overdue += self._overdue(before, now)
                continue
            member = Member(pid, State.LAUNCHING, inst, node, offering, pods)
            seen[pid] = member
            rebuilt.append(pid)
            self._settle(member, self._state_of(member, busy, facts), now)
            _note_coming(member, coming)
            overdue += self._overdue(member, now)
        # Managed Nodes with no live instance behind them: the instance is gone (reclaimed, deleted by hand).
        live = set(seen)
        for node in snapshot.nodes:
            if node.managed and not node.ready and node.provider_id and node.provider_id not in live:
                member = Member(node.provider_id, State.REGISTERED, None, node)
                seen[node.provider_id] = member
                rebuilt.append(node.provider_id)
                self._settle(member, State.REGISTERED, now)
                _note_coming(member, coming)
                overdue.append(Overdue(member, Action.DELETE_ORPHAN_NODE, "its instance no longer exists"))
        # Launches the cloud has not listed yet still hold their capacity, for a bounded time.
        for token, p in list(self._pending.items()):
            if token in listed_tokens or now - p.since > self.config.registration_timeout:
                del self._pending[token]
                continue
            member = Member(f"token:{token}", State.LAUNCHING, p.instance, None, p.offering, p.pods)
            seen[member.key] = member
            rebuilt.append(member.key)
            self._settle(member, State.LAUNCHING, now)
            _note_coming(member, coming)
        gone = sorted(old.keys() - seen.keys())
        self._recount(old, seen, rebuilt, gone)
        for key in gone:
            before = old[key]
            facts.pop(key, None)
            if before.state != State.GONE and not key.startswith("token:"):
                log.info("fleet_member_gone", member=key, last_state=before.state.value)
        gone += [key for key in self._forgotten if key not in seen]
        self._changes = (old, seen, rebuilt, gone)
        self._forgotten = set()
        self.members = seen
        self._facts = facts
        self._busy = busy
        self._for = {t: pods for t, pods in self._for.items() if t in coming}
        return overdue

    def _settle(self, member: Member, observed: State, now: float) -> None:
        """Give ``member`` its state: the observed one when the edge from its previous state is allowed (or it
        is new), else the previous one, with the refusal logged and counted once per episode."""
        before = self.members.get(member.key)
        if before is None and member.instance is not None:
            # Listed for the first time: carry the history of the launch that made it, so a timeout counts
            # from the launch, not from when the cloud first listed the instance.
            before = self.members.get(f"token:{member.instance.launch_token}")
        if before is None:
            member.state = observed
            member.history = _first_history(member, observed, now)
            return
        member.history = before.history
        member.state = before.state
        if observed == before.state:
            return
        if (before.state, observed) not in TRANSITIONS:
            member.refused = before.refused if before.refused and before.refused[0] == observed else None
            if member.refused is None:
                member.refused = (observed, now)
                self.refusals[(before.state, observed)] += 1
                log.warning(
                    "fleet_transition_refused",
                    member=member.key,
                    old=before.state.value,
                    new=observed.value,
                    node=member.node.name if member.node else "",
                )
                if self.on_refused is not None:
                    self.on_refused(before.state, observed)
            return
        member.state = observed
        member.history = [*before.history, (observed, now)][-HISTORY_KEPT:]

    def _overdue(self, m: Member, now: float) -> list[Overdue]:
        cfg = self.config
        inst, node, offering = m.instance, m.node, m.offering
        if inst is None or inst.state == "stopping":
            return []
        if m.state == State.LAUNCHING and node is None and now - m.entered > cfg.registration_timeout:
            why = f"no Node registered within {format_duration(cfg.registration_timeout)}"
            return [Overdue(m, Action.REPLACE_UNREGISTERED, why)]
        if (
            m.refused is not None
            and m.refused[0] == State.LAUNCHING
            and now - m.refused[1] > cfg.registration_timeout
        ):
            why = f"its Node was deleted and did not register again within {format_duration(cfg.registration_timeout)}"
            return [Overdue(m, Action.TERMINATE_NODELESS, why)]
        if (
            m.state == State.REGISTERED
            and node is not None
            and offering is not None
            and offering.gpu_count
            and not gpus_visible(node.labels, node.allocatable, 1)
            and now - m.entered > cfg.gpu_readiness_timeout
        ):
            why = f"GPUs did not appear within {format_duration(cfg.gpu_readiness_timeout)}"
            return [Overdue(m, Action.REPLACE_WITHOUT_GPUS, why)]
        return []

    def _state_of(self, m: Member, busy: Collection[str], facts: dict[str, tuple[Node, bool, bool]]) -> State:
        node = m.node
        if node is None:
            return (
                State.GONE if m.instance is not None and m.instance.state == "stopping" else State.LAUNCHING
            )
        # Whether the Node is cordoned by tidal, and whether its GPUs are visible: worked out once per Node
        # object (a changed Node is a new object), as most of a large fleet's Nodes do not change between two
        # reconciles. ``facts`` collects this reconcile's, so Nodes that are gone are not kept.
        cached = facts.get(node.provider_id) or self._facts.get(node.provider_id)
        if cached is None or cached[0] is not node:
            draining = node.unschedulable and any(t.key == TAINT_DISRUPTED for t in node.taints)
            cached = (node, draining, gpus_visible(node.labels, node.allocatable, 1))
        facts[node.provider_id] = cached
        if cached[1]:
            return State.DRAINING
        gpu_missing = m.offering is not None and m.offering.gpu_count > 0 and not cached[2]
        if not node.ready or gpu_missing:
            return State.REGISTERED
        return State.READY if node.name in busy else State.IDLE

    # -- what the planner needs --------------------------------------------------------------------------

    def launching_capacity(self) -> list[Launching]:
        """Launches that have no Node yet (a Node, once it exists, is seen through the snapshot). The planner
        gives them their offering's allocatable, DaemonSets included, as it does the nodes it plans."""
        return [
            Launching(m.key, m.offering)
            for m in sorted(self._not_ready(), key=_KEY)
            if m.state == State.LAUNCHING and m.offering is not None
        ]

    def launched_for(self) -> dict[str, str]:
        """The node each pod a node still coming up was launched for waits on, by pod key: the launching
        member's name (as in :meth:`launching_capacity`) or its Node's, once registered and not yet Ready."""
        out: dict[str, str] = {}
        for m in sorted(self._not_ready(), key=_KEY):
            if m.state == State.LAUNCHING and m.offering is not None:
                name = m.key
            elif m.state == State.REGISTERED and m.node is not None:
                name = m.node.name
            else:
                continue
            for key in m.pods:
                out.setdefault(key, name)
        return out

    def launching_usage(self) -> Usage:
        """What instances without a Node count against the limits (Nodes count through the snapshot): those
        launching, and those whose Node is gone while they still run (a termination that failed, or one
        not yet made), which cost and hold their GPUs as much as any."""
        gpus = cpu = n = 0
        for m in self._not_ready():
            nodeless = m.node is None and m.instance is not None and m.instance.state != "terminated"
            if m.state == State.LAUNCHING or nodeless:
                gpus += m.gpus
                cpu += (m.offering.vcpu * 1000) if m.offering else 0
                n += 1
        return Usage(gpus=gpus, cpu_milli=cpu, managed_nodes=n)

    def launched_into_reservations(self, since: float | None) -> dict[str, int]:
        """Nodes launched into each reservation at or after ``since`` (when the provider last counted what
        the reservations have free): its count does not know of them yet."""
        out: dict[str, int] = {}
        for m in self.members.values():
            if m.state == State.GONE or not m.history:
                continue
            rid = m.instance.reservation_id if m.instance is not None else ""
            if (
                not rid
                and m.offering is not None
                and m.offering.reservation is not None
                and m.instance is None
            ):
                rid = m.offering.reservation.id
            if rid and (since is None or m.history[0][1] >= since):
                out[rid] = out.get(rid, 0) + 1
        return out

    def counts(self) -> dict[str, int]:
        """Members by state, every state present (for metrics)."""
        tally = self._tally
        if tally is None or tally[0] is not self.members:
            tally = self._tally = (self.members, Counter(map(_STATE, self.members.values())))
        by_state = tally[1]
        return {s.value: by_state[s] for s in State if s != State.GONE}

    def _recount(
        self, old: dict[str, Member], seen: dict[str, Member], rebuilt: Sequence[str], gone: Sequence[str]
    ) -> None:
        """Bring the count by state from ``old`` to ``seen`` through the members that changed (or drop it,
        when it did not count ``old``)."""
        tally = self._tally
        if tally is None or tally[0] is not old:
            self._tally = None
            return
        by_state = tally[1]
        for key in gone:
            by_state[old[key].state] -= 1
        for key in set(rebuilt):
            before = old.get(key)
            if before is not None:
                by_state[before.state] -= 1
            by_state[seen[key].state] += 1
        self._tally = (seen, by_state)

    def instance_for_node(self, node_name: str) -> Instance | None:
        """The instance of the member whose Node is named ``node_name`` (None: no such member, or it has
        no instance the cloud lists)."""
        m = self._index().by_node.get(node_name)
        return m.instance if m is not None else None

    def changes_since(self, members: Mapping[str, Member]) -> tuple[Sequence[str], Sequence[str]] | None:
        """What the last observe changed when ``members`` is the members it replaced: (the keys of members
        that may have changed, new ones included; the keys of members gone); None when it is not (nothing
        observed since, or ``members`` is older), and everything must be looked at again. A member under
        another key is the very object it was, with the same facts and state."""
        changes = self._changes
        if changes is None or changes[0] is not members or changes[1] is not self.members:
            return None
        return changes[2], changes[3]

    def member_for_token(self, token: str) -> Member | None:
        """The member a launch with idempotency token ``token`` made: the launch itself until the cloud
        lists its instance, then the instance's member."""
        return self._index().by_token.get(token)

    def _not_ready(self) -> list[Member]:
        """The members launching, registered but not Ready, or without a Node, in the fleet's order."""
        unready = self._unready
        if unready is not None and unready[0] is self.members:
            return unready[1]
        launching, registered = State.LAUNCHING, State.REGISTERED
        found = [
            m
            for m in self.members.values()
            if m.node is None or m.state is launching or m.state is registered
        ]
        self._unready = (self.members, found)
        return found

    def _index(self) -> MemberIndex:
        indexed = self._indexed
        if indexed is not None and indexed[0] is self.members:
            return indexed[1]
        index = MemberIndex(self.members)
        self._indexed = (self.members, index)
        return index

    def cost_per_hour(self) -> float:
        return round(
            sum(
                (
                    m.instance.price
                    if m.instance and m.instance.price
                    else (m.offering.price if m.offering else 0.0)
                )
                for m in self.members.values()
                if m.state != State.GONE
            ),
            6,
        )


def _busy(pods: Iterable[Pod]) -> set[str]:
    """The nodes that run a workload pod (not a DaemonSet's or a mirror pod, not finished). Only asked of
    the fleet's own nodes, and only when one has registered, so a cluster without any costs no pass over
    its pods."""
    return {p.node_name for p in pods if p.node_name and not p.finished and not p.daemonset and not p.mirror}


def _note_coming(member: Member, coming: set[str]) -> None:
    """Add the launch token of ``member`` to ``coming`` if its node is still to come (not Ready yet)."""
    if member.state is State.LAUNCHING or member.state is State.REGISTERED:
        instance = member.instance
        coming.add(instance.launch_token if instance is not None else member.key.removeprefix("token:"))


def _first_history(member: Member, state: State, now: float) -> list[tuple[State, float]]:
    """The history of a member seen for the first time (after a restart, or a launch by another replica):
    it entered LAUNCHING when its instance was created and its current state when its Node registered,
    the best the facts can tell."""
    launched = min(now, member.instance.created) if member.instance and member.instance.created else now
    if state == State.LAUNCHING:
        return [(State.LAUNCHING, launched)]
    registered = member.node.created if member.node is not None and member.node.created else now
    return [(State.LAUNCHING, launched), (state, min(now, max(launched, registered)))]
