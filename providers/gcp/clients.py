"""The one place GCP SDK clients are built: endpoint, credentials, timeouts, retry and polling settings.

Tests point ``endpoint``/``billingEndpoint`` at local fakes and change nothing else. An ``http://`` endpoint
gets anonymous credentials: a bearer token must never travel in clear text, and only a local stand-in of the
API is served over plain HTTP. Otherwise Application Default Credentials apply, which in a GKE Pod with
Workload Identity are the Kubernetes service account's bound Google service account.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.api_core import exceptions as api_exceptions
from google.api_core import retry as api_retry
from google.api_core.client_options import ClientOptions
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import billing_v1, compute_v1

from autoscaler.cloud import ProviderError

__all__ = ["ClientFactory", "ComputeClients"]

T = TypeVar("T")

# Only failures that a repeat can cure, on calls that are safe to repeat (reads, and inserts, which carry a
# requestId). Rate limiting is not retried here: it goes back to the controller as Throttled.
_TRANSIENT = (
    api_exceptions.ServiceUnavailable,
    api_exceptions.InternalServerError,
    api_exceptions.BadGateway,
    api_exceptions.DeadlineExceeded,
)


@dataclass(frozen=True, slots=True)
class ComputeClients:
    """The Compute Engine clients the provider uses, all built with the same options."""

    instances: compute_v1.InstancesClient
    zone_operations: compute_v1.ZoneOperationsClient
    machine_types: compute_v1.MachineTypesClient
    accelerator_types: compute_v1.AcceleratorTypesClient
    instance_templates: compute_v1.InstanceTemplatesClient
    region_instance_templates: compute_v1.RegionInstanceTemplatesClient
    instance_group_managers: compute_v1.InstanceGroupManagersClient
    regions: compute_v1.RegionsClient


@dataclass
class ClientFactory:
    """Builds every client from endpoint, credentials, timeout, retry and polling settings."""

    endpoint: str | None = None
    billing_endpoint: str | None = None
    credentials: Credentials | None = None
    timeout: float = 30.0
    retry_deadline: float = 30.0
    poll_interval: float = 2.0
    operation_timeout: float = 20.0
    _built: dict[str, Any] = field(default_factory=dict, repr=False)

    def retry(self) -> api_retry.Retry:
        """Retry for idempotent calls: transient server errors, backing off, within ``retry_deadline``."""
        return api_retry.Retry(
            initial=min(0.5, self.retry_deadline / 4),
            maximum=5.0,
            multiplier=2.0,
            predicate=api_retry.if_exception_type(*_TRANSIENT),
            timeout=self.retry_deadline,
        )

    def _credentials(self, endpoint: str | None) -> Credentials | None:
        if self.credentials is not None:
            return self.credentials
        if endpoint is not None and endpoint.startswith("http://"):
            return AnonymousCredentials()  # type: ignore[no-untyped-call]
        return None  # Application Default Credentials (Workload Identity in GKE)

    def _build(self, key: str, make: Callable[[], T]) -> T:
        if key not in self._built:
            try:
                self._built[key] = make()
            except auth_exceptions.DefaultCredentialsError as err:
                raise ProviderError(
                    f"no Google credentials: {' '.join(str(err).split())[:200]} "
                    "(run in GKE with Workload Identity, or set GOOGLE_APPLICATION_CREDENTIALS)"
                ) from None
        built: T = self._built[key]
        return built

    def compute_client(self, cls: Callable[..., T]) -> T:
        """A Compute Engine client of class ``cls`` (REST transport, this factory's endpoint)."""
        options = ClientOptions(api_endpoint=self.endpoint) if self.endpoint else None
        return self._build(
            getattr(cls, "__name__", str(cls)),
            lambda: cls(
                credentials=self._credentials(self.endpoint), transport="rest", client_options=options
            ),
        )

    def compute(self) -> ComputeClients:
        """Every Compute Engine client the provider needs."""
        return ComputeClients(
            instances=self.compute_client(compute_v1.InstancesClient),
            zone_operations=self.compute_client(compute_v1.ZoneOperationsClient),
            machine_types=self.compute_client(compute_v1.MachineTypesClient),
            accelerator_types=self.compute_client(compute_v1.AcceleratorTypesClient),
            instance_templates=self.compute_client(compute_v1.InstanceTemplatesClient),
            region_instance_templates=self.compute_client(compute_v1.RegionInstanceTemplatesClient),
            instance_group_managers=self.compute_client(compute_v1.InstanceGroupManagersClient),
            regions=self.compute_client(compute_v1.RegionsClient),
        )

    def billing(self) -> billing_v1.CloudCatalogClient:
        """The Cloud Billing Catalog client; REST, because the library's default gRPC cannot reach a fake."""
        options = ClientOptions(api_endpoint=self.billing_endpoint) if self.billing_endpoint else None
        return self._build(
            "billing",
            lambda: billing_v1.CloudCatalogClient(
                credentials=self._credentials(self.billing_endpoint),
                transport="rest",
                client_options=options,
            ),
        )

    def close(self) -> None:
        """Close every HTTP session the clients opened."""
        for client in self._built.values():
            transport = getattr(client, "transport", None)
            if transport is not None:
                with contextlib.suppress(Exception):  # closing is best effort at shutdown
                    transport.close()
        self._built.clear()
