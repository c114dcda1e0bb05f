"""The nodes a plan can put pods on, all one type: nodes that exist, nodes launching, and nodes to launch.

A node to launch is not one offering yet but the *options* it could still be — instance type × capacity type,
each with the zones still open — narrowed as pods are added (an option that cannot hold them, or that a pod's
constraints rule out, drops away) and settled on the cheapest when the plan is final.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from autoscaler.core.fit import Constraints
from autoscaler.core.gpu.share import GpuShare
from autoscaler.core.model import LABEL_HOSTNAME, HostPort, Taint
from autoscaler.core.offering import Offering
from autoscaler.core.placement.gpus import GpuSlots, device_slots
from autoscaler.core.resources import EMPTY, NVIDIA_GPU, Resources


class Templates(Protocol):
    """What a node of an offering will look like once launched (its node template)."""

    def labels(self, o: Offering) -> Mapping[str, str]: ...

    def taints(self, o: Offering) -> tuple[Taint, ...]: ...


class NoTemplates:
    """For a cluster that only has nodes that exist (the simulator's scheduler): nothing is launched."""

    def labels(self, o: Offering) -> Mapping[str, str]:
        """None: there is no node to launch."""
        raise LookupError(f"no node template for {o.key}: this cluster launches nothing")

    def taints(self, o: Offering) -> tuple[Taint, ...]:
        """None: there is no node to launch."""
        raise LookupError(f"no node template for {o.key}: this cluster launches nothing")


class Kind(enum.StrEnum):
    """What a bin stands for (the words ``tidal plan`` uses)."""

    NODE = "node"
    LAUNCHING = "launching node"
    NEW = "new node"


def shape_key(o: Offering) -> tuple[str, str]:
    """What offerings of one option share: instance type and capacity type, and for reserved capacity the
    reservation (a node planned into one reservation must not end up in another, whose count it was not
    charged against), and the GPU layout (a node cut for MIG offers other resources than an uncut one)."""
    ctype = o.capacity_type if o.reservation is None else f"{o.capacity_type}/{o.reservation.id}"
    if o.layout is not None:
        ctype = f"{ctype}/{o.layout.name}"
    return (o.instance_type, ctype)


@dataclass(frozen=True, slots=True)
class Option:
    """One instance type in one capacity type that a new node may still be, with its zones' offerings."""

    alloc: Resources
    offerings: tuple[Offering, ...]  # cheapest first
    # Its devices and key, once asked for (an option is weighed again and again).
    _devices: GpuSlots | None = field(default=None, init=False, compare=False, repr=False)
    _key: tuple[str, str] | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def cheapest(self) -> Offering:
        return self.offerings[0]

    @property
    def key(self) -> tuple[str, str]:
        found = self._key
        if found is None:
            found = shape_key(self.offerings[0])
            object.__setattr__(self, "_key", found)
        return found

    @property
    def devices(self) -> GpuSlots:
        """The devices a new node of this instance type has, none of them used."""
        found = self._devices
        if found is None:
            found = device_slots(self.offerings[0])
            object.__setattr__(self, "_devices", found)
        return found


@dataclass(slots=True)
class Bin:
    """A node pods can be placed on: what it has room for, what it carries, what it is labelled with.

    For a node that exists or is launching ``labels``, ``taints`` and ``free`` are the node's own. For a new
    node ``options`` says what it may still become, ``used`` what its pods need, and ``labels`` only what is
    certain whatever it becomes (see :meth:`value`)."""

    name: str
    kind: Kind
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    free: Resources = EMPTY
    used: Resources = EMPTY
    ports: list[HostPort] = field(default_factory=list)
    pods: list[str] = field(default_factory=list)
    # New nodes only.
    mode: str = ""
    gang: str = ""
    options: list[Option] = field(default_factory=list)
    classes: frozenset[Constraints] = frozenset()
    gpus: int = 0  # what it was charged against the limits when opened: no option may have more
    vcpu: int = 0
    # Topology labels chosen for its pods (a zone, say): every option and fallback must keep them.
    settled: dict[str, str] = field(default_factory=dict)
    # Its GPU devices as KAI's GPU sharing sees them, once it has any (or, for a new node, once a share is on
    # it: its options then all have the same GPUs).
    devices: GpuSlots | None = None
    # The options' labels, per key, once asked for (cleared whenever the options change).
    _values: dict[str, frozenset[str | None]] = field(default_factory=dict)
    # A room lent by its keeper (see autoscaler.core.planning.rooms): its lists and dicts are the keeper's,
    # copied by :meth:`own` before anything changes them.
    lent: bool = field(default=False, repr=False, compare=False)

    def own(self) -> None:
        """Make the lists and dicts of a lent room this bin's own, before the first change to any of them."""
        if self.lent:
            self.labels = dict(self.labels)
            self.ports = list(self.ports)
            self.pods = list(self.pods)
            self.options = list(self.options)
            self.settled = dict(self.settled)
            self._values = dict(self._values)
            self.lent = False

    @property
    def new(self) -> bool:
        return self.kind == Kind.NEW

    @property
    def price(self) -> float:
        """What the node costs as it stands: its cheapest option (0 for one that exists or is launching)."""
        return min((o.cheapest.price for o in self.options), default=0.0)

    def room(self, option: Option) -> Resources:
        return option.alloc - self.used

    def set_options(self, options: list[Option]) -> None:
        mine = self.options
        if len(options) != len(mine) or any(a is not b for a, b in zip(options, mine, strict=True)):
            self._values.clear()  # the very same options (most pods added narrow nothing) keep their labels
        self.options = options

    def values(self, key: str, templates: Templates) -> frozenset[str | None]:
        """Every value ``key`` could have on this node (``None``: the label could be absent)."""
        if not self.new or key in self.labels or key == LABEL_HOSTNAME:
            return frozenset({self.labels.get(key) if key != LABEL_HOSTNAME else self.name})
        found = self._values.get(key)
        if found is None:
            found = frozenset(templates.labels(o).get(key) for opt in self.options for o in opt.offerings)
            self._values[key] = found
        return found


def narrow(
    options: Sequence[Option], templates: Templates, chosen: Mapping[str, str], absent: set[str]
) -> tuple[Option, ...]:
    """The options, each kept to the offerings whose nodes carry the ``chosen`` labels and none of the
    ``absent`` ones (an option left with none drops away)."""
    out = []
    for opt in options:
        kept = tuple(
            o
            for o in opt.offerings
            if all(templates.labels(o).get(k) == v for k, v in chosen.items())
            and not any(k in templates.labels(o) for k in absent)
        )
        if kept:
            out.append(opt if len(kept) == len(opt.offerings) else Option(opt.alloc, kept))
    return tuple(out)


def shares_fitting(bin: Bin, option: Option, share: GpuShare, want: int) -> tuple[GpuSlots, int, int]:
    """How a new node that becomes ``option`` takes up to ``want`` pods of ``share``, its whole-GPU pods
    counted: (slots after, pods placed, devices opened)."""
    slots = bin.devices
    if slots is None:
        slots = option.devices
        slots = replace(slots, whole=max(0, slots.whole - bin.used.get(NVIDIA_GPU, 0) // 1000))
    return slots.take_many(share, want)
