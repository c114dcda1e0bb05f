"""The members of tidal's fleet: their lifecycle states and the edges between them, what is done about a
member that broke a timeout, and the indexes the fleet keeps of its members."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from autoscaler.core.model import Node
from autoscaler.core.offering import Instance, Offering
from autoscaler.core.planning.cluster import node_gpus

__all__ = ["HISTORY_KEPT", "TRANSITIONS", "Action", "Member", "MemberIndex", "Overdue", "State"]


class State(enum.StrEnum):
    LAUNCHING = "launching"
    REGISTERED = "registered"
    READY = "ready"
    IDLE = "idle"
    DRAINING = "draining"
    GONE = "gone"


# Allowed edges, each with what causes it. Anything else is refused: the member keeps its state, the refusal
# is logged and counted (tidal_fleet_transitions_refused_total), because it means the facts moved in a way
# the model does not expect. A refused state is not silently adopted: timeouts keep counting from the state
# the member was in (see Action.TERMINATE_NODELESS for the one refusal that costs money while it lasts).
TRANSITIONS: Mapping[tuple[State, State], str] = {
    (State.LAUNCHING, State.REGISTERED): "a Node with the instance's providerID appeared",
    (State.LAUNCHING, State.READY): "the Node appeared already Ready between two observations",
    (State.LAUNCHING, State.IDLE): "the Node appeared Ready and empty between two observations",
    (
        State.LAUNCHING,
        State.DRAINING,
    ): "the Node appeared already cordoned by tidal (removal before a restart)",
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
    (State.DRAINING, State.REGISTERED): "the Node went NotReady while draining",
    (State.DRAINING, State.GONE): "Node deleted and instance terminated",
    (State.READY, State.REGISTERED): "the Node went NotReady",
    (State.IDLE, State.REGISTERED): "the Node went NotReady",
    (State.READY, State.GONE): "the instance disappeared (spot reclaim, manual termination)",
    (State.IDLE, State.GONE): "the instance disappeared (spot reclaim, manual termination)",
}
HISTORY_KEPT = 20


class Action(enum.Enum):
    """What to do about a member that broke a timeout or lost its other half."""

    # (terminate the instance, delete the Node, bench the offering)
    REPLACE_UNREGISTERED = (True, False, True)  # no Node within registrationTimeout of launching
    REPLACE_WITHOUT_GPUS = (True, True, True)  # GPUs not allocatable within gpuReadinessTimeout
    TERMINATE_NODELESS = (True, False, False)  # its Node was deleted and never came back
    DELETE_NODE_OF_ENDED = (False, True, False)  # the instance was terminated (reclaimed) under its Node
    DELETE_NODE_OF_RECLAIMED_SPOT = (False, True, True)  # as above, a spot reclaim: bench the offering
    DELETE_ORPHAN_NODE = (False, True, False)  # a NotReady managed Node with no instance behind it

    @property
    def terminate(self) -> bool:
        return bool(self.value[0])

    @property
    def delete_node(self) -> bool:
        return bool(self.value[1])

    @property
    def bench_offering(self) -> bool:
        return bool(self.value[2])


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
    refused: tuple[State, float] | None = None  # a state the facts showed and the model refused, since when

    @property
    def gpus(self) -> int:
        if self.node is not None:
            return node_gpus(self.node)
        if self.offering is not None:
            return self.offering.gpu_count
        return self.instance.gpu_count if self.instance else 0

    @property
    def entered(self) -> float:
        """When the member entered its current state (from the transition history)."""
        return self.history[-1][1] if self.history else 0.0


@dataclass(frozen=True, slots=True)
class Overdue:
    """A member that broke a timeout or lost its other half, and what to do about it."""

    member: Member
    action: Action
    reason: str


class MemberIndex:
    """The members by Node name and by launch token (see :meth:`~autoscaler.runtime.fleet.Fleet.member_for_token`), each worked out
    when first asked. Where several members answer, the first in the fleet's order does, as a scan would."""

    def __init__(self, members: dict[str, Member]) -> None:
        self._members = members
        self._by_node: dict[str, Member] | None = None
        self._by_token: dict[str, Member] | None = None

    @property
    def by_node(self) -> dict[str, Member]:
        if self._by_node is None:
            # Built backwards, so that the first member with a name is the one left under it.
            self._by_node = {m.node.name: m for m in reversed(self._members.values()) if m.node is not None}
        return self._by_node

    @property
    def by_token(self) -> dict[str, Member]:
        if self._by_token is None:
            found: dict[str, Member] = {}
            for key, m in self._members.items():
                if key.startswith("token:"):
                    found.setdefault(key[6:], m)
                if m.instance is not None:
                    found.setdefault(m.instance.launch_token, m)
            self._by_token = found
        return self._by_token
