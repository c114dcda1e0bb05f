"""The provider contract: what a cloud adapter implements, and how tidal finds one.

A provider knows one cloud. It never decides *what* to launch; it launches what it is told, cheaply and
safely, and reports failures through the typed errors below so the core can react (mark an offering
unavailable, back off, stop asking).

A launch that launched nothing raises a :class:`LaunchFailed` carrying one :class:`Attempt` per candidate the
cloud refused, each with its :class:`Refusal` (no capacity, quota with its :class:`QuotaScope`, throttled with
its retry_after, invalid request, other). Failures that arrive after ``launch`` returned (a zone operation or
a long-running operation that ends in a stockout) come from ``poll_errors()``. ``terminate`` raises
:class:`InstanceNotFound` for an instance the cloud no longer has. Optional abilities are Protocols of their
own (:class:`ReportsInterruptions`, :class:`Starts`, :class:`Stops`), checked with ``isinstance``.
"""

from __future__ import annotations

import enum
import functools
import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Protocol, runtime_checkable

from autoscaler.core.offering import Instance, LaunchRequest, Offering

__all__ = [
    "Attempt",
    "CapacityUnavailable",
    "CloudProvider",
    "Instance",
    "InstanceNotFound",
    "InvalidRequest",
    "LateFailure",
    "LaunchFailed",
    "LaunchRequest",
    "Offering",
    "ProviderError",
    "ProviderNotFound",
    "QuotaExceeded",
    "QuotaScope",
    "Refusal",
    "ReportsInterruptions",
    "ReportsNodeLead",
    "Starts",
    "Stops",
    "Throttled",
    "available_providers",
    "check_cloud",
    "launch_failure",
    "lazy_exports",
    "load_provider",
    "registered",
]

ENTRY_POINT_GROUP = "tidal.providers"
SDK_EXTRAS = frozenset({"aws", "gcp", "azure"})
"""Built-in clouds whose SDK comes with the package extra of the same name."""


class ProviderError(Exception):
    """A cloud call failed for a reason the core cannot act on beyond reporting it."""


class Refusal(enum.StrEnum):
    """Why the cloud did not launch one candidate offering."""

    NO_CAPACITY = "no-capacity"  # a stockout: this offering, here, now
    QUOTA = "quota"  # an account limit, for every offering in its scope
    THROTTLED = "throttled"  # the API is rate limiting; nothing is wrong with the offering
    INVALID = "invalid-request"  # the cloud refuses this request as made (unsupported type, bad image)
    OTHER = "other"  # anything else the cloud said


@dataclass(frozen=True, slots=True)
class QuotaScope:
    """What one quota covers, as the cloud named it: a family, a GPU type, an instance type, or a region.

    ``name`` is the cloud's own name for the quota (``VcpuLimitExceeded``, ``NVIDIA_T4_GPUS``,
    ``standardNCASv3_T4Family``); the other fields say which offerings it covers. An empty set matches any.
    """

    kind: str  # family | gpu | instance-type | region
    name: str
    region: str = ""
    capacity_type: str = ""  # "": both; spot and on-demand quotas are separate on every cloud
    families: frozenset[str] = frozenset()
    gpu_models: frozenset[str] = frozenset()
    instance_types: frozenset[str] = frozenset()
    zones: frozenset[str] = frozenset()
    gpus_only: bool = False

    def covers(self, offering: Offering) -> bool:
        """Whether launching ``offering`` counts against this quota."""
        return (
            (not self.capacity_type or offering.capacity_type == self.capacity_type)
            and (not self.region or not offering.region or offering.region == self.region)
            and (not self.families or offering.family in self.families)
            and (not self.gpu_models or offering.gpu_model in self.gpu_models)
            and (not self.instance_types or offering.instance_type in self.instance_types)
            and (not self.zones or offering.zone in self.zones)
            and (not self.gpus_only or offering.gpu_count > 0)
        )

    @property
    def key(self) -> str:
        """A stable name for status and logs: ``family/g4dn/on-demand``, ``region/us-east-1/spot``."""
        parts = [self.kind, self.name]
        if self.region and self.region != self.name:
            parts.append(self.region)
        parts += sorted(self.zones)
        if self.capacity_type:
            parts.append(self.capacity_type)
        return "/".join(parts)


@dataclass(frozen=True, slots=True)
class Attempt:
    """How the cloud answered for one candidate offering of a launch that did not succeed on it."""

    offering: Offering
    refusal: Refusal
    detail: str = ""  # the cloud's code and message, one short line
    scope: QuotaScope | None = None  # for QUOTA
    retry_after: float | None = None  # for THROTTLED: seconds the cloud asked for


class LaunchFailed(ProviderError):
    """A launch that launched nothing, with the cloud's answer for every candidate it tried (``attempts``).

    The subclass names the refusal that decides what happens next (throttling first, then quota, then no
    capacity); the core reads ``attempts`` to bench each offering or quota scope for what it was told.
    """

    def __init__(self, message: str = "", attempts: Sequence[Attempt] = ()) -> None:
        self.attempts = tuple(attempts)
        super().__init__(message or _summary(self.attempts) or "launch failed")


class CapacityUnavailable(LaunchFailed):
    """The cloud has no capacity for these offerings right now; try others."""

    def __init__(
        self, offerings: Sequence[Offering] = (), message: str = "", attempts: Sequence[Attempt] = ()
    ) -> None:
        if not attempts:
            attempts = [Attempt(o, Refusal.NO_CAPACITY, message) for o in offerings]
        keys = ", ".join(a.offering.key for a in attempts if a.refusal == Refusal.NO_CAPACITY)
        super().__init__(message or f"no capacity for {keys or 'no offerings'}", attempts)

    @property
    def offerings(self) -> tuple[Offering, ...]:
        """The offerings that had no capacity."""
        return tuple(a.offering for a in self.attempts if a.refusal == Refusal.NO_CAPACITY)


class QuotaExceeded(LaunchFailed):
    """An account quota (vCPUs, GPUs, spot instances) stops this launch; ``scope`` says which quota."""

    def __init__(
        self, message: str = "", attempts: Sequence[Attempt] = (), scope: QuotaScope | None = None
    ) -> None:
        self.scope = scope or next((a.scope for a in attempts if a.scope is not None), None)
        super().__init__(message, attempts)


class Throttled(LaunchFailed):
    """The cloud API is rate limiting; retry after ``retry_after`` seconds."""

    def __init__(self, retry_after: float, message: str = "", attempts: Sequence[Attempt] = ()) -> None:
        self.retry_after = retry_after
        super().__init__(message or f"throttled, retry after {retry_after:.1f}s", attempts)


class InvalidRequest(LaunchFailed):
    """The cloud refuses the request as made (an unsupported type in that zone, a bad image or template)."""


class InstanceNotFound(ProviderError):
    """``terminate`` found no such instance: it is already gone (callers treat that as done)."""

    def __init__(self, instance: Instance, message: str = "") -> None:
        self.instance = instance
        super().__init__(message or f"instance {instance.id} does not exist")


_PRECEDENCE = (Refusal.THROTTLED, Refusal.QUOTA, Refusal.NO_CAPACITY, Refusal.INVALID, Refusal.OTHER)


def launch_failure(attempts: Sequence[Attempt], message: str = "") -> LaunchFailed:
    """The typed error for a launch whose candidates were all refused: throttling wins (nothing should be
    sent before its retry_after), then quota, no capacity, invalid request, other."""
    kinds = {a.refusal for a in attempts}
    first = next((k for k in _PRECEDENCE if k in kinds), Refusal.OTHER)
    if first == Refusal.THROTTLED:
        waits = [a.retry_after for a in attempts if a.retry_after is not None]
        return Throttled(max(waits, default=0.0), message or _summary(attempts), attempts)
    if first == Refusal.QUOTA:
        return QuotaExceeded(message, attempts)
    if first == Refusal.NO_CAPACITY:
        return CapacityUnavailable(message=message, attempts=attempts)
    if first == Refusal.INVALID:
        return InvalidRequest(message, attempts)
    return LaunchFailed(message, attempts)


def _summary(attempts: Sequence[Attempt]) -> str:
    return "; ".join(
        f"{a.offering.key}: {a.refusal.value}" + (f" ({a.detail})" if a.detail else "") for a in attempts
    )


@dataclass(frozen=True, slots=True)
class LateFailure:
    """A refusal ``launch`` could not raise: a launch that answered (its instance pending) and failed
    afterwards (a GCE zone operation or an ARM long-running operation ending in a stockout or a quota; then
    ``instance`` is what ``launch`` returned, now listed as terminated), or a candidate refused before another
    candidate of the same launch took (``instance`` None)."""

    token: str
    attempt: Attempt
    instance: Instance | None = None


class ProviderNotFound(LookupError):
    """No provider is registered under that name."""


@runtime_checkable
class CloudProvider(Protocol):
    """The contract every cloud adapter implements (see ``providers/``)."""

    name: str

    def offerings(self) -> list[Offering]:
        """Every launchable (instance type, zone, capacity type) with shape, price and availability."""
        ...

    def launch(self, request: LaunchRequest) -> Instance:
        """Launch one node from ``request.offerings`` (cheapest first); idempotent by ``request.token``.
        Raises :class:`LaunchFailed` (one of its subclasses) with an :class:`Attempt` per refused candidate."""
        ...

    def terminate(self, instance: Instance) -> None:
        """Terminate an instance (again: harmless); :class:`InstanceNotFound` when the cloud has no such
        instance any more, which callers treat as done."""
        ...

    def instances(self) -> list[Instance]:
        """Every instance this cluster's tidal owns, in any state, found by tag."""
        ...

    def poll_errors(self) -> list[LateFailure]:
        """Failures of earlier launches found since the last call (a zone or long-running operation that
        failed after ``launch`` returned), and the candidates a launch refused before another took; each
        reported once, never waited for."""
        ...


@runtime_checkable
class ReportsInterruptions(Protocol):
    """A provider that hears of spot interruptions before the cloud reclaims the instance."""

    def interrupted_instances(self) -> list[Instance]:
        """Live instances the cloud is about to reclaim; reading consumes the notices."""
        ...


@runtime_checkable
class ReportsNodeLead(Protocol):
    """A provider that knows how soon after a launch call its node registers and reports Ready: where that is
    within a second, the batch window launches early enough for the scheduler's first retry of the pods."""

    def node_lead(self, offering: Offering) -> float:
        """Seconds from a launch call on ``offering`` until its Node is registered and Ready (GPUs reported,
        for a GPU node), at the quickest."""
        ...


@runtime_checkable
class HasNodeTemplate(Protocol):
    """A provider whose nodes boot from settings a running node cannot take on (an image, a launch
    template, boot scripts): a node launched before they changed has drifted and is replaced."""

    def node_template(self) -> Mapping[str, str]:
        """Those settings, as text, the same on every call while they are unchanged."""
        ...


@runtime_checkable
class Starts(Protocol):
    """A provider with background work to start with the daemon (the simulated cloud's clock)."""

    def start(self) -> None:
        """Start background work; idempotent."""
        ...


@runtime_checkable
class Stops(Protocol):
    """A provider holding resources to release at shutdown (threads, HTTP sessions)."""

    def stop(self) -> None:
        """Release them; idempotent."""
        ...


ProviderFactory = Callable[..., CloudProvider]


def registered() -> tuple[EntryPoint, ...]:
    """The entry points of the ``tidal.providers`` group, as installed where Python looks now."""
    return _registered(tuple(sys.path))


@functools.lru_cache(maxsize=8)
def _registered(search_path: tuple[str, ...]) -> tuple[EntryPoint, ...]:
    # Read once per search path: a reading lists every installed distribution, and one `tidal plan` asks three
    # times (the configuration's sections, the cloud, the catalog's node templates). Keyed on sys.path, a
    # plugin installed where Python looks is seen without a restart of the interpreter.
    return tuple(entry_points(group=ENTRY_POINT_GROUP))


def available_providers() -> dict[str, ProviderFactory]:
    """Providers registered in the ``tidal.providers`` entry-point group, by name."""
    found: dict[str, ProviderFactory] = {}
    for ep in registered():
        found[ep.name] = _lazy(ep)
    return found


def _lazy(ep: Any) -> ProviderFactory:
    def factory(*args: Any, **kwargs: Any) -> CloudProvider:
        cls = ep.load()
        provider: CloudProvider = cls(*args, **kwargs)
        return provider

    return factory


def check_cloud(name: str, registry: Mapping[str, ProviderFactory] | None = None) -> None:
    """Refuse a cloud no provider is registered for, naming the valid choices (before anything else is read:
    the kubeconfig, the catalog). Loads no provider, so no cloud SDK is imported."""
    providers = registry if registry is not None else available_providers()
    if name in providers:
        return
    choices = ", ".join(sorted(providers)) or "none"
    if name in SDK_EXTRAS:
        # A built-in cloud whose provider is not registered: the package was installed without it.
        raise ProviderNotFound(
            f"cloud: {name!r} has no installed provider (installed: {choices}); reinstall tidal-autoscaler "
            f"with its extra: pip install 'tidal-autoscaler[{name}]'"
        )
    raise ProviderNotFound(f"cloud: {name!r} is not a cloud tidal knows (choices: {choices})")


def load_provider(
    name: str, *args: Any, registry: Mapping[str, ProviderFactory] | None = None, **kwargs: Any
) -> CloudProvider:
    """Build the provider registered as ``name``; unknown names list what is installed, and a provider whose
    cloud SDK is not installed says which extra brings it (one line, not an import traceback)."""
    providers = dict(registry) if registry is not None else available_providers()
    check_cloud(name, providers)
    try:
        return providers[name](*args, **kwargs)
    except ModuleNotFoundError as err:
        missing = f"module {err.name!r} is not installed" if err.name else str(err)
        if name in SDK_EXTRAS:
            raise ProviderNotFound(
                f"cloud {name!r} needs the {name} extra: pip install 'tidal-autoscaler[{name}]' ({missing})"
            ) from None
        raise ProviderNotFound(f"cloud {name!r}: its provider cannot be loaded ({missing})") from None


def lazy_exports(package: str, lazy: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for a provider package whose names in ``lazy`` (name -> module) need its
    cloud SDK: they are imported when first used, so what needs no SDK (its node templates) loads without
    it. The first use imports every one of those modules in order, as an eager import would, so a missing
    SDK is named as it always was."""

    def __getattr__(name: str) -> Any:
        module = lazy.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        for each in dict.fromkeys(lazy.values()):
            importlib.import_module(each)
        return getattr(importlib.import_module(module), name)

    return __getattr__
