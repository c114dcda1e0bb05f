"""The provider contract: what a cloud adapter implements, and how tidal finds one.

A provider knows one cloud. It never decides *what* to launch; it launches what it is told, cheaply and
safely, and reports failures through the typed errors below so the core can react (mark an offering
unavailable, back off, stop asking).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any, Protocol, runtime_checkable

from autoscaler.model import Instance, LaunchRequest, Offering

__all__ = [
    "CapacityUnavailable",
    "CloudProvider",
    "Instance",
    "LaunchRequest",
    "Offering",
    "ProviderError",
    "ProviderNotFound",
    "QuotaExceeded",
    "Throttled",
    "available_providers",
    "load_provider",
]

ENTRY_POINT_GROUP = "tidal.providers"
SDK_EXTRAS = frozenset({"aws", "gcp", "azure"})
"""Built-in clouds whose SDK comes with the package extra of the same name."""


class ProviderError(Exception):
    """A cloud call failed for a reason the core cannot act on beyond reporting it."""


class CapacityUnavailable(ProviderError):
    """The cloud has no capacity for these offerings right now; try others."""

    def __init__(self, offerings: Sequence[Offering], message: str = "") -> None:
        self.offerings = tuple(offerings)
        keys = ", ".join(o.key for o in self.offerings) or "no offerings"
        super().__init__(message or f"no capacity for {keys}")


class QuotaExceeded(ProviderError):
    """An account quota (vCPUs, GPUs, spot instances) stops this launch."""


class Throttled(ProviderError):
    """The cloud API is rate limiting; retry after ``retry_after`` seconds."""

    def __init__(self, retry_after: float, message: str = "") -> None:
        self.retry_after = retry_after
        super().__init__(message or f"throttled, retry after {retry_after:.1f}s")


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
        """Launch one node from ``request.offerings`` (cheapest first); idempotent by ``request.token``."""
        ...

    def terminate(self, instance: Instance) -> None:
        """Terminate an instance; terminating one that is already gone is not an error."""
        ...

    def instances(self) -> list[Instance]:
        """Every instance this cluster's tidal owns, in any state, found by tag."""
        ...


ProviderFactory = Callable[..., CloudProvider]


def available_providers() -> dict[str, ProviderFactory]:
    """Providers registered in the ``tidal.providers`` entry-point group, by name."""
    found: dict[str, ProviderFactory] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found[ep.name] = _lazy(ep)
    return found


def _lazy(ep: Any) -> ProviderFactory:
    def factory(*args: Any, **kwargs: Any) -> CloudProvider:
        cls = ep.load()
        provider: CloudProvider = cls(*args, **kwargs)
        return provider

    return factory


def load_provider(
    name: str, *args: Any, registry: Mapping[str, ProviderFactory] | None = None, **kwargs: Any
) -> CloudProvider:
    """Build the provider registered as ``name``; unknown names list what is installed, and a provider whose
    cloud SDK is not installed says which extra brings it (one line, not an import traceback)."""
    providers = dict(registry) if registry is not None else available_providers()
    if name not in providers:
        known = ", ".join(sorted(providers)) or "none"
        raise ProviderNotFound(
            f"cloud {name!r} has no installed provider (installed: {known}); "
            f"install the extra, e.g. pip install 'tidal-autoscaler[{name}]'"
        )
    try:
        return providers[name](*args, **kwargs)
    except ModuleNotFoundError as err:
        missing = f"module {err.name!r} is not installed" if err.name else str(err)
        if name in SDK_EXTRAS:
            raise ProviderNotFound(
                f"cloud {name!r} needs the {name} extra: pip install 'tidal-autoscaler[{name}]' ({missing})"
            ) from None
        raise ProviderNotFound(f"cloud {name!r}: its provider cannot be loaded ({missing})") from None
