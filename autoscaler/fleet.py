"""The lifecycle of the nodes tidal launched, rebuilt every reconcile from cloud instances and Nodes.

Ownership lives only in cloud tags and node labels, so a restarted or newly elected replica sees exactly what
the previous one saw. The in-memory part is just the launches whose instance the cloud has not listed yet, so
that they keep absorbing demand (nothing is launched twice) in the meantime.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from autoscaler.config import Config
from autoscaler.model import TAINT_DISRUPTED, Instance, Node, Offering, Snapshot
from autoscaler.planning.cluster import node_gpus, pods_by_node
from autoscaler.planning.plan import Launching, Usage

log = structlog.get_logger("tidal.fleet")


class State(enum.StrEnum):
    LAUNCHING = "launching"
    REGISTERED = "registered"
    READY = "ready"
    IDLE = "idle"
    DRAINING = "draining"
    GONE = "gone"


# Allowed edges, each with what causes it. Anything else is refused (and logged): it means the facts moved
# in a way the model does not expect, which is worth seeing.
TRANSITIONS: Mapping[tuple[State, State], str] = {
    (State.LAUNCHING, State.REGISTERED): "a Node with the instance's providerID appeared",
    (State.LAUNCHING, State.READY): "the Node appeared already Ready between two observations",
    (State.LAUNCHING, State.IDLE): "the Node appeared Ready and empty between two observations",
    (State.LAUNCHING, State.GONE): "the instance terminated before registering (timeout, capacity, reclaim)",
    (State.REGISTERED, State.READY): "Ready, and for GPU offerings nvidia.com/gpu allocatable > 0",
    (State.REGISTERED, State.IDLE): "Ready and GPUs present, no workload pods",
    (State.REGISTERED, State.DRAINING): "tidal cordoned it (GPU readiness timeout)",
    (State.REGISTERED, State.GONE): "the instance or Node disappeared",
    (State.READY, State.IDLE): "its last workload pod finished",
    (State.IDLE, State.READY): "a pod was scheduled to it",
    (State.READY, State.DRAINING): "tidal cordoned it for removal",
    (State.IDLE, State.DRAINING): "tidal cordoned it for removal",
    (State.DRAINING, State.READY): "removal failed and tidal uncordoned it",
    (State.DRAINING, State.IDLE): "removal failed and tidal uncordoned it",
    (State.DRAINING, State.GONE): "Node deleted and instance terminated",
    (State.READY, State.REGISTERED): "the Node went NotReady",
    (State.IDLE, State.REGISTERED): "the Node went NotReady",
    (State.READY, State.GONE): "the instance disappeared (spot reclaim, manual termination)",
    (State.IDLE, State.GONE): "the instance disappeared (spot reclaim, manual termination)",
}


@dataclass(slots=True)
class Member:
    """One node tidal launched: its instance (if the cloud lists it), its Node (once registered), its state."""

    key: str  # provider id, or the launch token before the cloud lists the instance
    state: State
    instance: Instance | None = None
    node: Node | None = None
    offering: Offering | None = None
    pods: tuple[str, ...] = ()
    history: list[tuple[State, float]] = field(default_factory=list)

    @property
    def gpus(self) -> int:
        if self.node is not None:
            return node_gpus(self.node)
        if self.offering is not None:
            return self.offering.gpu_count
        return self.instance.gpu_count if self.instance else 0


@dataclass(frozen=True, slots=True)
class Overdue:
    """A member that broke a timeout or lost its other half, and what to do about it."""

    member: Member
    reason: str
    terminate: bool  # terminate the instance
    delete_node: bool  # delete the Node object
    bench_offering: bool  # mark its offering unavailable for a while


@dataclass(slots=True)
class _Pending:
    """A launch whose instance the cloud has not listed yet."""

    token: str
    offering: Offering
    pods: tuple[str, ...]
    instance: Instance | None
    since: float


class Fleet:
    """Observe (facts → states) then report what needs acting on; the controller acts."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.members: dict[str, Member] = {}
        self._pending: dict[str, _Pending] = {}
        self._by_type: (
            tuple[Sequence[Offering], dict[tuple[str, str, str], Offering], dict[str, Offering]] | None
        )
        self._by_type = None

    def record_launch(
        self, token: str, offering: Offering, pods: Sequence[str], instance: Instance | None, now: float
    ) -> None:
        """Remember a launch until the cloud lists its instance, so its capacity is not planned again.

        It counts at once: a plan made later in the same reconcile (the fallback after a capacity error)
        must see its room and GPUs, or the same pods would be launched for twice and the limits overrun."""
        self._pending[token] = _Pending(token, offering, tuple(pods), instance, now)
        key = f"token:{token}"
        if key not in self.members:
            self.members[key] = Member(
                key, State.LAUNCHING, instance, None, offering, tuple(pods), [(State.LAUNCHING, now)]
            )

    def observe(
        self, instances: Iterable[Instance], snapshot: Snapshot, offerings: Sequence[Offering], now: float
    ) -> list[Overdue]:
        """Rebuild every member from the facts; return members past a timeout or orphaned."""
        cfg = self.config
        if self._by_type is None or self._by_type[0] is not offerings:
            self._by_type = (
                offerings,
                {(o.instance_type, o.zone, o.capacity_type): o for o in offerings},
                {o.instance_type: o for o in offerings},
            )
        _, by_type, by_type_any = self._by_type
        nodes = {n.provider_id: n for n in snapshot.nodes if n.provider_id}
        workload = pods_by_node(p for p in snapshot.pods if not p.daemonset and not p.mirror)
        seen: dict[str, Member] = {}
        overdue: list[Overdue] = []
        listed_tokens = set()
        for inst in instances:
            listed_tokens.add(inst.launch_token)
            offering = by_type.get((inst.instance_type, inst.zone, inst.capacity_type)) or by_type_any.get(
                inst.instance_type
            )
            if inst.state == "terminated":
                node = nodes.get(inst.provider_id)
                if node is not None and node.managed:
                    # The offering goes with it so a reclaimed spot offering is benched, not bought again at once.
                    member = Member(inst.provider_id, State.REGISTERED, inst, node, offering)
                    seen[inst.provider_id] = member
                    overdue.append(
                        Overdue(
                            member,
                            "its instance was terminated (e.g. spot reclaim)",
                            False,
                            True,
                            inst.capacity_type == "spot",
                        )
                    )
                continue
            node = nodes.get(inst.provider_id)
            pending = self._pending.get(inst.launch_token)
            member = Member(
                inst.provider_id, State.LAUNCHING, inst, node, offering, pending.pods if pending else ()
            )
            member.state = self._state_of(member, workload)
            seen[inst.provider_id] = member
            if node is None and now - inst.created > cfg.registration_timeout:
                overdue.append(
                    Overdue(
                        member,
                        f"no Node registered within {int(cfg.registration_timeout)}s",
                        True,
                        False,
                        True,
                    )
                )
            elif (
                node is not None
                and offering is not None
                and offering.gpu_count
                and node.allocatable.gpus == 0
                and now - node.created > cfg.gpu_readiness_timeout
            ):
                overdue.append(
                    Overdue(
                        member,
                        f"GPUs did not appear within {int(cfg.gpu_readiness_timeout)}s",
                        True,
                        True,
                        True,
                    )
                )
        # Managed Nodes with no live instance behind them: the instance is gone (reclaimed, deleted by hand).
        live = set(seen)
        for node in snapshot.nodes:
            if node.managed and node.provider_id and node.provider_id not in live and not node.ready:
                member = Member(node.provider_id, State.REGISTERED, None, node)
                seen[node.provider_id] = member
                overdue.append(Overdue(member, "its instance no longer exists", False, True, False))
        # Launches the cloud has not listed yet still hold their capacity, for a bounded time.
        for token, p in list(self._pending.items()):
            if token in listed_tokens or now - p.since > cfg.registration_timeout:
                del self._pending[token]
                continue
            seen[f"token:{token}"] = Member(
                f"token:{token}", State.LAUNCHING, p.instance, None, p.offering, p.pods
            )
        self._transition_all(seen, now)
        return overdue

    def _state_of(self, m: Member, workload: Mapping[str, Sequence[object]]) -> State:
        node = m.node
        if node is None:
            return State.LAUNCHING
        if node.unschedulable and any(t.key == TAINT_DISRUPTED for t in node.taints):
            return State.DRAINING
        gpu_missing = m.offering is not None and m.offering.gpu_count > 0 and node.allocatable.gpus == 0
        if not node.ready or gpu_missing:
            return State.REGISTERED
        return State.READY if workload.get(node.name) else State.IDLE

    def _transition_all(self, seen: dict[str, Member], now: float) -> None:
        for key, member in seen.items():
            before = self.members.get(key)
            if before is None:
                member.history = [(member.state, now)]
            else:
                member.history = before.history
                if before.state != member.state:
                    if (before.state, member.state) not in TRANSITIONS:
                        log.warning(
                            "unexpected_transition",
                            member=key,
                            old=before.state.value,
                            new=member.state.value,
                        )
                    member.history.append((member.state, now))
                    del member.history[:-20]
        for key, before in self.members.items():
            if key not in seen and before.state != State.GONE:
                log.info("fleet_member_gone", member=key, last_state=before.state.value)
        self.members = seen

    # -- what the planner needs --------------------------------------------------------------------------

    def launching_capacity(self) -> list[Launching]:
        """Launches that have no Node yet (a Node, once it exists, is seen through the snapshot). The planner
        gives them their offering's allocatable, DaemonSets included, as it does the nodes it plans."""
        return [
            Launching(m.key, m.offering)
            for m in sorted(self.members.values(), key=lambda m: m.key)
            if m.state == State.LAUNCHING and m.offering is not None
        ]

    def launching_usage(self) -> Usage:
        """What launches without a Node count against the limits (Nodes count through the snapshot)."""
        gpus = cpu = n = 0
        for m in self.members.values():
            if m.state == State.LAUNCHING:
                gpus += m.gpus
                cpu += (m.offering.vcpu * 1000) if m.offering else 0
                n += 1
        return Usage(gpus=gpus, cpu_milli=cpu, managed_nodes=n)

    def counts(self) -> dict[str, int]:
        """Members by state, every state present (for metrics)."""
        out = {s.value: 0 for s in State if s != State.GONE}
        for m in self.members.values():
            if m.state != State.GONE:
                out[m.state.value] += 1
        return out

    def instance_for_node(self, node_name: str) -> Instance | None:
        for m in self.members.values():
            if m.node is not None and m.node.name == node_name:
                return m.instance
        return None

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
