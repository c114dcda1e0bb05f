"""The placement engine: where would this pod go — a node that exists, one launching, or one to launch?

Every question of that form in tidal is answered here: scale-up, scale-down's "can these pods move",
gangs and their rollback, the capacity of launching nodes, and the simulator's scheduler. ``can_add`` is
pure and says how many pods like this one a bin takes (and, for a new node, what it narrows to) or why
none; ``add`` commits it. Changes go through a journal, so a gang that cannot be placed whole is undone.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from autoscaler.core.fit import Constraints
from autoscaler.core.gpu.share import GpuShare
from autoscaler.core.model import LABEL_HOSTNAME, Pod, Taint
from autoscaler.core.placement import filters
from autoscaler.core.placement.bins import Bin, Kind, NoTemplates, Option, Templates, shares_fitting
from autoscaler.core.placement.fits import Fit, request
from autoscaler.core.placement.gpus import GpuSlots, device_model
from autoscaler.core.placement.inter_pod import NO_ROOM, InterPodVerdicts, Options
from autoscaler.core.placement.journal import Journal
from autoscaler.core.placement.reasons import Filter, Rejection
from autoscaler.core.placement.static_verdicts import StaticVerdicts
from autoscaler.core.placement.topology import Topology
from autoscaler.core.resources import NVIDIA_GPU, Resources


@dataclass(frozen=True, slots=True)
class _Profile:
    """What every fit of one pod needs: its request, whether other pods matter to it or it to them
    (``inter_pod``), whether its own place is constrained by them, the topology keys whose value on a node
    matters to it (``keys``, counting included) and those its filters read (``checked``)."""

    request: Resources
    inter_pod: bool
    constrained: bool
    keys: tuple[str, ...]
    checked: tuple[str, ...]


class Engine:
    """The cluster a plan places pods in: bins with their pods, and the counts the inter-pod filters read."""

    def __init__(
        self,
        templates: Templates | None,
        *,
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
        journal: Journal | None = None,
    ) -> None:
        self.templates: Templates = templates if templates is not None else NoTemplates()
        self.journal = journal if journal is not None else Journal()
        self.topology = Topology(namespaces, self.journal)
        self.bins: list[Bin] = []
        self._statics = StaticVerdicts()
        self._inter = InterPodVerdicts(self.topology, self.templates)
        # Per pod (by identity, the pod kept alongside so a reused id cannot be mistaken for it).
        self._profiles: dict[int, tuple[Pod, int, _Profile]] = {}
        # What a pod asking for these requests takes from a node (replicas ask alike): see ``_request``.
        self._requests: dict[Resources, Resources] = {}
        self._singles: dict[Constraints, frozenset[Constraints]] = {}
        self._share_fits: dict[tuple[GpuSlots, int, GpuShare, int], tuple[GpuSlots, int, int]] = {}
        self._new = itertools.count(1)
        # The nodes (that exist or launch) with a whole GPU free when they were put in, by name.
        self._gpus_free: dict[str, Bin] = {}

    # -- building the cluster --------------------------------------------------------------------------

    def add_node(
        self,
        bin: Bin,
        pods: Iterable[Pod] = (),
        *,
        listed: bool = False,
        anti_affine: Sequence[Pod] | None = None,
        verdicts: dict[Constraints, Rejection | None] | None = None,
    ) -> Bin:
        """A node that exists or is launching, with the pods already bound to it (their room already taken
        out of ``bin.free``). ``listed``: ``bin`` lists their keys and host ports already (a room kept from
        an earlier plan); ``anti_affine``: those of them with anti-affinity terms of their own, when known;
        ``verdicts``: where the static filters' verdicts on this node are kept (see
        :meth:`StaticVerdicts.adopt`), when the caller keeps them for a node whose labels, taints and cordon
        stay the same."""
        assert not self.bins or not self.bins[-1].new, "nodes to launch come after every node there is"
        self.bins.append(bin)
        if bin.free.get(NVIDIA_GPU, 0) > 0:
            self._gpus_free[bin.name] = bin
        if verdicts is not None:
            self._statics.adopt(bin.name, verdicts)
        pods = pods if isinstance(pods, (list, tuple)) else list(pods)
        # A lent room's labels are its keeper's, which nobody changes (the bin copies them before it does).
        self.topology.add_node(
            bin.name, bin.labels, bin.taints, pods, anti_affine=anti_affine, shared=bin.lent
        )
        if not listed:
            bin.own()
            for pod in pods:
                if pod.host_ports:
                    bin.ports.extend(pod.host_ports)
            bin.pods.extend([pod.key for pod in pods])
        return bin

    def add_topology_node(
        self,
        name: str,
        labels: Mapping[str, str],
        taints: Sequence[Taint],
        pods: Iterable[Pod],
        *,
        anti_affine: Sequence[Pod] | None = None,
    ) -> None:
        """A node no pod may be placed on that still counts as a domain, with pods that count there
        (``anti_affine`` as for :meth:`add_node`)."""
        pods = pods if isinstance(pods, (list, tuple)) else list(pods)
        self.topology.add_node(name, labels, taints, pods, anti_affine=anti_affine)

    def remove_node(self, name: str) -> None:
        """A node leaves, with its pods and what was worked out about it: the scheduler of a cluster that
        changes adds it again as it now is. Not journalled (never inside a trial)."""
        self.remove_nodes((name,))

    def remove_nodes(self, names: Collection[str]) -> None:
        """:meth:`remove_node` for each of ``names`` (nodes with room or counted only), in one pass over the
        bins. Not journalled (never inside a trial)."""
        assert not self.journal.open, "a node leaves only between trials"
        if not names:
            return
        if len(names) == 1:
            (name,) = names
            for i, b in enumerate(self.bins):
                if b.name == name:
                    del self.bins[i]
                    break
        else:
            gone = names if isinstance(names, (set, frozenset, dict)) else set(names)
            self.bins = [b for b in self.bins if b.name not in gone]
        for name in names:
            self.topology.remove_node(name)
            self._statics.forget(name)
            self._gpus_free.pop(name, None)

    def with_free_gpus(self) -> list[Bin]:
        """The nodes that exist or launch that had a whole GPU free when they were put in: between plans (a
        plan's changes taken back, as a kept engine's are) those with one free now."""
        return list(self._gpus_free.values())

    def opened(self) -> list[Bin]:
        """The nodes to launch this plan opened, in order: they come after every node there is, so only
        they are looked at."""
        bins = self.bins
        i = len(bins)
        while i and bins[i - 1].new:
            i -= 1
        return bins[i:]

    def sort_nodes(self) -> None:
        """List the bins, and the nodes the topology counts, by name: the order of a cluster built from
        nodes sorted by name, which a cluster kept from plan to plan loses as nodes come and go (and as
        trials take nodes out and put them back)."""
        self.bins.sort(key=_name)
        self.topology.sort_nodes()

    def restart(self) -> bool:
        """Ready the engine for another plan over the cluster it was built with, once every trial of the
        last plan was taken back: nodes to launch are named from ``new-node-1`` again. False when the
        last plan left a count behind that a cluster built afresh would not have (a spread or affinity
        group it made): the engine must then be built afresh."""
        if self.journal.open or not self.topology.as_built():
            return False
        self._new = itertools.count(1)
        return True

    def open(
        self, options: Sequence[Option], *, mode: str, gang: str = "", gpus: int = 0, vcpu: int = 0
    ) -> Bin:
        """A node to launch, which may still become any of ``options``."""
        name = f"new-node-{next(self._new)}"
        bin = Bin(name, Kind.NEW, {LABEL_HOSTNAME: name}, mode=mode, gang=gang, gpus=gpus, vcpu=vcpu)
        bin.set_options(list(options))
        # Only what the inter-pod filters read is worked out: the labels they count by, and taints when a
        # spread constraint honours them.
        for key in self.topology.tracked_keys():
            values = bin.values(key, self.templates)
            if len(values) == 1:
                (value,) = values
                if value is not None:
                    bin.labels[key] = value
        if self.topology.honours_taints():
            bin.taints = self._shared_taints(options)
        certain, taints = bin.labels, bin.taints
        self.bins.append(bin)
        self.topology.add_node(name, certain, taints)
        self.journal.log(partial(_drop, self.bins, bin))
        return bin

    def open_filled(
        self,
        pod: Pod,
        c: Constraints,
        fit: Fit,
        pods: Sequence[str],
        *,
        mode: str,
        gang: str,
        gpus: int,
        vcpu: int,
        used: Resources | None = None,
    ) -> Bin:
        """A node to launch that holds ``pods`` (like ``pod``) from the start, as :meth:`open` then :meth:`add`
        leave it when ``fit`` is what ``can_add`` says of them on it: for many nodes opened alike while no count
        is kept (no topology label to work out, no pod to count), without repeating the steps one by one.
        ``used`` is what :meth:`filled_use` says of them, when already known."""
        return self.open_filled_alike(
            pod, c, fit, [pods], mode=mode, gang=gang, gpus=gpus, vcpu=vcpu, used=used
        )[0]

    def open_filled_alike(
        self,
        pod: Pod,
        c: Constraints,
        fit: Fit,
        groups: Sequence[Sequence[str]],
        *,
        mode: str,
        gang: str,
        gpus: int,
        vcpu: int,
        used: Resources | None = None,
    ) -> list[Bin]:
        """:meth:`open_filled` for each of ``groups`` (the pods of one node each, all like ``pod``), in order:
        a batch of nodes opened alike at once."""
        assert self.topology.idle and not fit.settled, "only while no count is kept"
        if used is None:
            used = self.filled_use(pod, fit)
        classes = self._only(c)
        options, ports = fit.options, pod.host_ports
        topology, journal, placed = self.topology, self.journal, fit.count
        opened = []
        for pods in groups:
            name = f"new-node-{next(self._new)}"
            bin = Bin(name, Kind.NEW, {LABEL_HOSTNAME: name}, mode=mode, gang=gang, gpus=gpus, vcpu=vcpu)
            bin.options = list(options)
            bin.used = used
            bin.classes = classes
            bin.devices = fit.gpus
            bin.pods.extend(pods)
            bin.ports.extend(ports)
            self.bins.append(bin)
            topology.add_node(name, bin.labels, bin.taints)
            journal.log(partial(_drop, self.bins, bin))
            topology.place(pod, name, placed)
            opened.append(bin)
        return opened

    def _only(self, c: Constraints) -> frozenset[Constraints]:
        """The classes of a node opened for pods of ``c`` alone: one set for every such node."""
        found = self._singles.get(c)
        if found is None:
            found = self._singles[c] = frozenset((c,))
        return found

    @staticmethod
    def filled_use(pod: Pod, fit: Fit) -> Resources:
        """What ``fit.count`` pods like ``pod`` take of a new node, the reservation pods of the devices their
        shares open included."""
        one = request(pod)
        need = one if fit.count == 1 else one.scaled(fit.count)
        return need + {NVIDIA_GPU: fit.opened * 1000} if fit.opened else need

    def _shared_taints(self, options: Sequence[Option]) -> tuple[Taint, ...]:
        """Taints every offering of every option will carry."""
        shared: set[Taint] | None = None
        for opt in options:
            for o in opt.offerings:
                here = set(self.templates.taints(o))
                shared = here if shared is None else shared & here
        return tuple(sorted(shared or (), key=str))

    # -- can it go there? ------------------------------------------------------------------------------

    def static(self, c: Constraints, bin: Bin) -> Rejection | None:
        """The filters that read only the pod's constraints and the node's labels, taints and name."""
        return self._statics.verdict(c, bin)

    def inter_pod(self, pod: Pod) -> bool:
        """Where ``pod`` goes depends on, or matters to, where other pods are."""
        if self.topology.idle and not pod.topological:
            return False
        return self._profile(pod).inter_pod

    def independent(self, pod: Pod) -> bool:
        """Whether a fit of ``pod`` on a new node reads nothing but the node's options and contents: no other
        pod's place matters to it and it asks for no host port."""
        if pod.host_ports:
            return False
        # As inter_pod: while no count is kept, only a pod's own inter-pod terms make others matter to it.
        if self.topology.idle and not pod.topological:
            return True
        return not self._profile(pod).inter_pod

    def _profile(self, pod: Pod) -> _Profile:
        """What every fit of ``pod`` needs, worked out once per pod and topology version."""
        version = self.topology.version
        found = self._profiles.get(id(pod))
        if found is None or found[0] is not pod or found[1] != version:
            constrained = self.topology.constrains(pod)
            inter_pod = constrained or self.topology.selected(pod)
            keys = tuple(sorted(self.topology.keys_for(pod))) if inter_pod else ()
            checked = tuple(sorted(self.topology.check_keys(pod))) if constrained else ()
            found = (pod, version, _Profile(self._request(pod), inter_pod, constrained, keys, checked))
            self._profiles[id(pod)] = found
        return found[2]

    def can_add(
        self, pod: Pod, c: Constraints, bin: Bin, want: int = 1, allowed: Options | None = None
    ) -> Fit | Rejection:
        """How many of ``want`` pods like ``pod`` (constraints ``c``) ``bin`` takes, or why none.

        ``allowed`` (new nodes only) is what ``c`` allows a new node to be, by option key."""
        if pod.topological:
            want = 1
        if bin.new:
            return self._can_add_new(pod, c, bin, want, allowed or {})
        rejection = self.static(c, bin) or filters.node_ports(pod.host_ports, bin.ports)
        if rejection:
            return rejection
        profile = self._profile(pod)
        need = profile.request
        rejection = filters.node_resources(need, bin.free)
        if rejection:
            return rejection
        if profile.constrained:
            rejection = self._inter.check(pod, c, bin.labels, profile.checked)
            if rejection:
                return rejection
        k = min(want, need.times_fits_in(bin.free))
        if pod.gpu_share is None:
            return Fit(k)
        if bin.devices is None:
            return _NO_SHARED_GPU
        # Each device a share opens is held by a reservation pod: one whole nvidia.com/gpu from the node.
        slots, placed, opened = bin.devices.take_many(pod.gpu_share, k)
        while placed and opened * 1000 > bin.free.get(NVIDIA_GPU, 0):
            slots, placed, opened = bin.devices.take_many(pod.gpu_share, placed - 1)
        if not placed:
            return _NO_SHARED_GPU
        return Fit(placed, gpus=slots, opened=opened)

    def blocker(self, pod: Pod, c: Constraints, allowed: Options) -> Callable[[Bin], Rejection | None] | None:
        """For a pod whose place depends on other pods, the inter-pod filters' "no" to it on a new node whose
        every topology key they read is settled (see :meth:`InterPodVerdicts.blocker`). None for a pod no
        other pod's place matters to."""
        profile = self._profile(pod)
        if not profile.inter_pod:
            return None
        return self._inter.blocker(pod, c, allowed, profile.keys, profile.checked)

    def _can_add_new(
        self, pod: Pod, c: Constraints, bin: Bin, want: int, allowed: Options
    ) -> Fit | Rejection:
        options = bin.options
        if c not in bin.classes:
            narrowed = []
            for opt in options:
                ok = allowed.get(opt.key)
                if ok is None:
                    continue
                kept = tuple(o for o in opt.offerings if o in ok)
                if kept:
                    narrowed.append(opt if len(kept) == len(opt.offerings) else Option(opt.alloc, kept))
            if not narrowed:
                return _NO_COMMON_OPTION
            options = narrowed
        rejection = filters.node_ports(pod.host_ports, bin.ports)
        if rejection:
            return rejection
        profile = self._profile(pod)
        need = profile.request
        share = pod.gpu_share
        if share is not None and bin.devices is not None:
            # Shares on it already: only instance types with these very devices remain.
            model = device_model(bin.devices)
            options = [o for o in options if device_model(o.devices) == model]
        best = 0
        counts = []
        for opt in options:
            k = need.times_fit(opt.alloc, bin.used)
            if share is not None and k > 0:
                k = self._shares_fitting(bin, opt, share, min(k, want))[1]
            counts.append(k)
            best = max(best, k)
        if best <= 0:
            if share is not None and options and need.times_fit(options[0].alloc, bin.used) > 0:
                return _NO_SHARED_GPU
            return (filters.node_resources(need, bin.room(options[0])) if options else None) or NO_ROOM
        k = min(want, best)
        fitting = tuple(opt for opt, n in zip(options, counts, strict=True) if n >= k)
        gpus, opened = None, 0
        if share is not None:
            gpus, _, opened = self._shares_fitting(bin, fitting[0], share, k)
            fitting = tuple(o for o in fitting if device_model(o.devices) == device_model(fitting[0].devices))
        if not profile.inter_pod:
            return Fit(k, fitting, gpus=gpus, opened=opened)
        fit = self._inter.settle(pod, c, bin, k, fitting, allowed, profile.keys, profile.checked)
        if isinstance(fit, Rejection) or share is None:
            return fit
        return Fit(fit.count, fit.options, fit.settled, gpus, opened)

    def _shares_fitting(
        self, bin: Bin, option: Option, share: GpuShare, want: int
    ) -> tuple[GpuSlots, int, int]:
        """:func:`shares_fitting`, worked out once for each set of devices: a share pod is weighed on every
        option of every node with room, and the options have a few kinds of GPUs."""
        devices = bin.devices
        key = (
            (devices, -1, share, want)
            if devices is not None
            else (option.devices, bin.used.get(NVIDIA_GPU, 0) // 1000, share, want)
        )
        found = self._share_fits.get(key)
        if found is None:
            found = self._share_fits[key] = shares_fitting(bin, option, share, want)
        return found

    # -- commit ----------------------------------------------------------------------------------------

    def _request(self, pod: Pod) -> Resources:
        """:func:`request` of ``pod``, worked out once per distinct request."""
        found = self._requests.get(pod.requests)
        if found is None:
            found = self._requests[pod.requests] = request(pod)
        return found

    def need(self, pod: Pod) -> Resources:
        """What ``pod`` takes of a node, as the resources filter weighs it (its request and a pod slot)."""
        return self._request(pod)

    def add(self, pod: Pod, c: Constraints, bin: Bin, fit: Fit, pods: Sequence[str]) -> None:
        """Put ``fit.count`` pods like ``pod`` (named ``pods``) on ``bin``."""
        bin.own()
        k = fit.count
        one = self._request(pod)
        need = one if k == 1 else one.scaled(k)
        if fit.opened:
            need = need + {NVIDIA_GPU: fit.opened * 1000}  # the reservation pods holding the shared devices
        before = (bin.free, bin.used, len(bin.pods), len(bin.ports), bin.options, bin.classes, bin.devices)
        if fit.gpus is not None:
            bin.devices = fit.gpus
        elif bin.devices is not None and pod.requests.gpus:
            # Whole GPUs taken by the pod are no longer devices a share could open.
            d = bin.devices  # made directly: dataclasses.replace costs more than the rest of the step
            bin.devices = GpuSlots(
                max(0, d.whole - pod.requests.gpus * k), d.shared, d.memory_mib, d.fraction
            )
        if bin.new:
            bin.used = bin.used + need if bin.used else need
            bin.set_options(list(fit.options))
            if c not in bin.classes:
                bin.classes = bin.classes | {c}
        else:
            bin.free = bin.free - need
        bin.pods.extend(pods)
        bin.ports.extend(pod.host_ports)

        def undo() -> None:
            bin.free, bin.used = before[0], before[1]
            del bin.pods[before[2] :]
            del bin.ports[before[3] :]
            bin.set_options(before[4])
            bin.classes = before[5]
            bin.devices = before[6]

        self.journal.log(undo)
        if fit.settled:
            self._relabel(bin, dict(fit.settled))
        elif bin.new and self.topology.tracked_keys():
            self._resettle(bin)
        self.topology.place(pod, bin.name, k)

    def _relabel(self, bin: Bin, settled: dict[str, str]) -> None:
        bin.own()
        before = (dict(bin.labels), dict(bin.settled))
        bin.labels.update(settled)
        bin.settled.update(settled)
        self.topology.relabel(bin.name, settled)

        def undo() -> None:
            bin.labels.clear()
            bin.labels.update(before[0])
            bin.settled.clear()
            bin.settled.update(before[1])

        self.journal.log(undo)

    def _resettle(self, bin: Bin) -> None:
        """Narrowing for resources or constraints may have settled a topology key: count pods there now."""
        settled = {}
        for key in self.topology.tracked_keys():
            if key in bin.labels:
                continue
            values = bin.values(key, self.templates)
            if len(values) == 1:
                (value,) = values
                if value is not None:
                    settled[key] = value
        if settled:
            self._relabel(bin, settled)


_NO_SHARED_GPU = Rejection(Filter.NODE_RESOURCES_FIT, "Insufficient GPU share (KAI GPU sharing)", NVIDIA_GPU)
_NO_COMMON_OPTION = Rejection(Filter.NODE_AFFINITY, "no instance type suits both these pods and the node's")


def _name(b: Bin) -> str:
    return b.name


def _drop(bins: list[Bin], bin: Bin) -> None:
    """Take ``bin`` itself out of ``bins``, looking from the end, where a plan's newest nodes are (``remove``
    would compare bins field by field from the start)."""
    for i in range(len(bins) - 1, -1, -1):
        if bins[i] is bin:
            del bins[i]
            return
