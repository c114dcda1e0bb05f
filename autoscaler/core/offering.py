"""What the cloud offers and what it has launched: offerings with their shape, price and node template,
reservations they launch into, the instances tidal owns, and a launch request.

Immutable values, built by the providers at the edge; the core plans with them and never sees a cloud SDK.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from autoscaler.core.model import Arch, CapacityType, InstanceState, Taint
from autoscaler.core.resources import GIB, MIB, MILLI, NVIDIA_GPU, Resources


class ReservationKind(enum.StrEnum):
    """How a reservation is consumed."""

    OPEN = "open"  # any matching launch may use it
    TARGETED = "targeted"  # only launches that name it; tidal uses it only for pods that ask for it
    CAPACITY_BLOCK = "capacity-block"  # a fixed window (EC2 Capacity Blocks for ML, GCP calendar mode)


@dataclass(frozen=True, slots=True)
class Reservation:
    """Capacity bought ahead that a reserved offering launches into.

    ``available`` is how many more instances it takes now (a hard cap for the planner); ``start`` and
    ``end`` (epoch seconds) bound a Capacity Block, outside which nothing can be launched into it.
    ``on_demand_price`` is what an instance of it would cost bought on demand: it is paid for whether used
    or not, so its marginal price is 0, but among reservations the planner spends the cheaper ones first.
    """

    id: str
    kind: ReservationKind = ReservationKind.OPEN
    available: int = 0
    total: int = 0
    start: float | None = None
    end: float | None = None
    name: str = (
        ""  # the cloud's own name where it has one (GCP reservation, Azure capacity reservation group)
    )
    on_demand_price: float = 0.0

    @property
    def block(self) -> bool:
        return self.kind == ReservationKind.CAPACITY_BLOCK

    def named(self, names: tuple[str, ...]) -> bool:
        """Whether ``names`` (ids or names, as a pod annotation lists them) names this reservation."""
        return self.id in names or (bool(self.name) and self.name in names)


@dataclass(frozen=True, slots=True)
class GpuLayout:
    """How a new node's GPUs will be offered to pods: cut into MIG instances or replicated for time-slicing
    or MPS, as the labels tidal gives the node tell NVIDIA's GPU operator.

    ``resources`` replace the node's ``nvidia.com/gpu`` (per node, whole units); ``labels`` go on the node."""

    name: str  # as plans show it: "mig all-1g.10gb", "time-slicing ts4 x4"
    resources: tuple[tuple[str, int], ...]
    labels: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class NodeTemplate:
    """What the cloud makes of a node of an offering, as the provider of that cloud says: the labels and
    taints its node bootstrap gives the node, and what its kubelet keeps back from pods (kube-reserved,
    system-reserved and the hard eviction threshold together).

    Only the cloud's part: tidal's own labels (well-known, ``tidal.dev/...``, GPU and GPU-layout labels, the
    configured ``nodeLabels``) and taints (``nodeTaints``, the GPU taint) are added by the core. ``reserved``
    None leaves the reservation to tidal's default formula."""

    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[Taint, ...] = ()
    reserved: Resources | None = None


@dataclass(frozen=True, slots=True)
class Offering:
    """One launchable (instance type, zone, capacity type) with its shape and price; ``layout``, when set, is
    how tidal will have its GPUs cut or shared (a variant of the same cloud offering).

    ``template`` is what a node of it will look like, built by its provider from the fields above (so an
    offering changed with ``dataclasses.replace`` needs its template built again); being derived from them,
    it takes no part in an offering's equality or hash (which stay as cheap as before)."""

    instance_type: str
    zone: str
    capacity_type: CapacityType
    vcpu: int
    memory_mib: int
    price: float
    gpu_count: int = 0
    gpu_model: str = ""
    gpu_vendor: str = ""
    gpu_memory_mib: int = 0
    gpu_fraction: float = 0.0
    arch: Arch = Arch.AMD64
    max_pods: int = 110
    region: str = ""
    available: bool = True
    price_source: str = ""
    # Set on reserved offerings only: the reservation a node of this offering is launched into.
    reservation: Reservation | None = None
    layout: GpuLayout | None = None
    # Spot only: interruptions per instance-hour as the cloud publishes them (0: none known, or not spot).
    interruption_rate: float = 0.0
    template: NodeTemplate | None = field(default=None, compare=False, repr=False)
    # The hash, worked out on first use: offerings fill the sets a plan narrows a new node's options with.
    _hash: int | None = field(default=None, init=False, compare=False, repr=False)

    def __hash__(self) -> int:
        found = self._hash
        if found is None:
            found = hash(tuple([getattr(self, name) for name in _HASHED]))
            object.__setattr__(self, "_hash", found)
        return found

    def __getstate__(self) -> list[object]:
        # A hash holds only in the process that worked it out (string hashes are salted per process).
        return [None if f.name == "_hash" else getattr(self, f.name) for f in fields(self)]

    @property
    def key(self) -> str:
        """``type/zone/capacity-type``, and the reservation id for a reserved offering (two reservations of
        one type in one zone are two offerings)."""
        base = f"{self.instance_type}/{self.zone}/{self.capacity_type}"
        return f"{base}/{self.reservation.id}" if self.reservation is not None else base

    @property
    def family(self) -> str:
        """Instance family: ``g5`` of ``g5.xlarge``, ``n1`` of ``n1-standard-8``, ``NCasT4_v3`` on Azure."""
        return instance_family(self.instance_type)

    @property
    def partial_gpu(self) -> bool:
        """Exposes a fraction of one physical GPU (AWS g6f, Azure NVads A10, GCP g4-standard-6)."""
        return self.gpu_count > 0 and 0 < self.gpu_fraction < self.gpu_count

    def capacity(self) -> Resources:
        """Node capacity as the kubelet would report it (before reservations)."""
        values = {
            "cpu": self.vcpu * MILLI,
            "memory": self.memory_mib * MIB,
            "pods": self.max_pods * MILLI,
            "ephemeral-storage": 100 * GIB,
        }
        if self.layout is not None:
            values.update((name, count * MILLI) for name, count in self.layout.resources)
        elif self.gpu_count:
            resource = "amd.com/gpu" if self.gpu_vendor.upper() == "AMD" else NVIDIA_GPU
            values[resource] = self.gpu_count * MILLI
        return Resources(values)


_HASHED = tuple(f.name for f in fields(Offering) if f.compare)


def instance_family(instance_type: str) -> str:
    """The family part of an instance type name, per each cloud's naming scheme."""
    if "." in instance_type:  # AWS: g5.xlarge
        return instance_type.split(".", 1)[0]
    if instance_type.startswith("Standard_"):  # Azure: Standard_NC4as_T4_v3 -> NCasT4_v3
        rest = instance_type[len("Standard_") :]
        head, _, tail = rest.partition("_")
        letters = "".join(ch for ch in head if not ch.isdigit())
        return f"{letters}_{tail}" if tail else letters
    return instance_type.split("-", 1)[0]  # GCP: n1-standard-8 -> n1


@dataclass(frozen=True, slots=True)
class Instance:
    """A cloud instance that this cluster's tidal owns, in any state."""

    id: str
    provider_id: str
    instance_type: str
    zone: str
    capacity_type: CapacityType
    state: InstanceState
    launch_token: str = ""
    created: float = 0.0
    price: float = 0.0
    gpu_count: int = 0
    tags: Mapping[str, str] = field(default_factory=dict)
    reservation_id: str = ""  # the reservation it runs in (its capacity type is then reserved)


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """What the controller asks a provider to launch: one node, any one of ``offerings``, cheapest first."""

    token: str
    offerings: tuple[Offering, ...]
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    tags: Mapping[str, str] = field(default_factory=dict)
