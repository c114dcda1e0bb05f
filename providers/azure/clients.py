"""The one place Azure clients are built: ARM ``ComputeManagementClient`` and the Retail Prices reader.

Endpoint, credential, TLS verification, retries, timeouts and LRO polling come in as parameters, so tests
point the unmodified SDK at a local HTTPS fake and production uses the defaults. HTTP status retries are
off on purpose: azure-core would sleep a 429's whole Retry-After inside the call, blocking the reconcile;
tidal turns the 429 into ``Throttled`` instead and the controller backs off.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests
import structlog

__all__ = ["ClientOptions", "RetailPricesClient", "compute_client", "default_credential"]

log = structlog.get_logger("tidal.providers.azure")

MAX_PRICE_PAGES = 1000


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """Transport settings shared by every client tidal builds for Azure."""

    connection_verify: bool | str = True  # True, or a CA bundle path (tests: the fake's certificate)
    polling_interval: float = 5.0  # seconds between LRO polls when ARM sends no Retry-After
    connect_retries: int = 3  # connection errors are retried; HTTP status codes never are
    connection_timeout: float = 10.0
    read_timeout: float = 60.0


def default_credential() -> Any:
    """Workload Identity in AKS (env set by the webhook), else the usual DefaultAzureCredential chain."""
    from azure.identity import DefaultAzureCredential

    return DefaultAzureCredential(exclude_interactive_browser_credential=True)


def compute_client(subscription_id: str, endpoint: str, credential: Any, options: ClientOptions) -> Any:
    """A ``ComputeManagementClient`` for ``endpoint`` with tidal's retry, timeout and polling settings."""
    from azure.mgmt.compute import ComputeManagementClient

    return ComputeManagementClient(
        credential,
        subscription_id,
        base_url=endpoint,
        credential_scopes=[f"{_arm_audience(endpoint)}/.default"],
        connection_verify=options.connection_verify,
        polling_interval=options.polling_interval,
        retry_total=options.connect_retries,
        retry_connect=options.connect_retries,
        retry_read=options.connect_retries,
        retry_status=0,
        connection_timeout=options.connection_timeout,
        read_timeout=options.read_timeout,
    )


def _arm_audience(endpoint: str) -> str:
    """The token audience for an ARM endpoint: public cloud ARM for anything that is not a sovereign cloud."""
    host = urlsplit(endpoint).netloc.lower()
    for sovereign in ("management.usgovcloudapi.net", "management.chinacloudapi.cn"):
        if host == sovereign:
            return f"https://{sovereign}"
    return "https://management.azure.com"


class RetailPricesClient:
    """Reads the (anonymous) Azure Retail Prices API, following ``NextPageLink`` page by page."""

    def __init__(
        self, base_url: str, options: ClientOptions, session: requests.Session | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.options = options
        self.session = session or requests.Session()

    def vm_items(self, region: str) -> Iterator[Mapping[str, Any]]:
        """Every pay-as-you-go ("Consumption") Virtual Machines price row of ``region``."""
        query = " and ".join(
            (
                "serviceName eq 'Virtual Machines'",
                f"armRegionName eq '{region}'",
                "priceType eq 'Consumption'",
            )
        )
        url: str | None = f"{self.base_url}/api/retail/prices"
        params: dict[str, str] | None = {"$filter": query}
        origin = urlsplit(self.base_url).netloc.lower()
        for _ in range(MAX_PRICE_PAGES):
            if url is None:
                return
            response = self.session.get(
                url,
                params=params,
                verify=self.options.connection_verify,
                timeout=(self.options.connection_timeout, self.options.read_timeout),
            )
            response.raise_for_status()
            body = response.json()
            yield from body.get("Items") or []
            url, params = body.get("NextPageLink") or None, None
            # The API hands out absolute links; follow them only to the configured host, so a bad page
            # cannot send tidal elsewhere.
            if url is not None and urlsplit(url).netloc.lower().split(":")[0] != origin.split(":")[0]:
                log.warning("azure_prices_foreign_next_page", host=urlsplit(url).netloc)
                return
        log.warning("azure_prices_too_many_pages", pages=MAX_PRICE_PAGES)
