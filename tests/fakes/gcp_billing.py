"""The state behind the fake Cloud Billing Catalog API: ``/v1/services`` and ``/v1/services/{id}/skus``.

Both lists are paginated (``pageSize`` up to ``max_page`` items, ``pageToken``/``nextPageToken``) so the
client's pager is exercised; SKUs come from :func:`tests.fakes.gcp_fixtures.billing_skus`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.fakes.gcp_fixtures import COMPUTE_ENGINE_ID, billing_skus
from tests.fakes.gcp_rules import GceError

SERVICES = [
    {
        "name": "services/95FF-2EF5-5EA1",
        "serviceId": "95FF-2EF5-5EA1",
        "displayName": "Cloud Storage",
        "businessEntityName": "businessEntities/GCP",
    },
    {
        "name": f"services/{COMPUTE_ENGINE_ID}",
        "serviceId": COMPUTE_ENGINE_ID,
        "displayName": "Compute Engine",
        "businessEntityName": "businessEntities/GCP",
    },
    {
        "name": "services/CCD8-9BF1-090E",
        "serviceId": "CCD8-9BF1-090E",
        "displayName": "Kubernetes Engine",
        "businessEntityName": "businessEntities/GCP",
    },
]


@dataclass
class BillingState:
    """Services and Compute Engine SKUs, served a page at a time."""

    skus: list[dict[str, Any]] = field(default_factory=billing_skus)
    max_page: int = 25
    sku_lists: int = 0

    def _page(self, items: list[dict[str, Any]], query: dict[str, str], key: str) -> dict[str, Any]:
        size = min(int(query.get("pageSize") or self.max_page), self.max_page)
        token = query.get("pageToken") or "0"
        if not token.isdigit():
            raise GceError(400, "badRequest", f"invalid page token {token!r}")
        start = int(token)
        out: dict[str, Any] = {key: items[start : start + size]}
        out["nextPageToken"] = str(start + size) if start + size < len(items) else ""
        return out

    def services(self, query: dict[str, str]) -> dict[str, Any]:
        """services.list, one page."""
        return self._page(SERVICES, query, "services")

    def list_skus(self, service: str, query: dict[str, str]) -> dict[str, Any]:
        """services.skus.list, one page (only USD)."""
        if query.get("currencyCode", "USD") != "USD":
            raise GceError(400, "badRequest", "only USD in this fake")
        if service != COMPUTE_ENGINE_ID:
            return {"skus": [], "nextPageToken": ""}
        if (query.get("pageToken") or "0") == "0":
            self.sku_lists += 1
        return self._page(self.skus, query, "skus")
