"""Prices from the Cloud Billing Catalog API: Compute Engine SKUs for one region, turned into a price book.

GCE does not sell machine types; it bills their parts. A machine costs ``vCPU × core SKU + GiB × RAM SKU``
of its family (``N1 Predefined Instance Core``, ``E2 Instance Ram``, C2's ``Compute optimized Core``, …),
plus ``count × GPU SKU`` for every GPU it has, built in (A2, A3, G2) or attached (T4 on N1). Spot prices
come from the Preemptible SKUs (``Spot Preemptible N1 Predefined Instance Core``, ``Nvidia Tesla T4 GPU
attached to Spot Preemptible VMs``). Commitment, custom, sole-tenancy and licence SKUs are not what tidal
launches and are left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from google.cloud import billing_v1

from autoscaler.cloud import ProviderError
from autoscaler.core.model import ON_DEMAND, SPOT
from providers.gcp.clients import ClientFactory
from providers.gcp.errors import CALL_ERRORS, api_error
from providers.gcp.shapes import Shape

__all__ = ["BILLING_SOURCE", "COMPUTE_ENGINE", "PriceBook", "book_from_skus", "fetch_price_book"]

BILLING_SOURCE = "billing catalog"
COMPUTE_ENGINE = "Compute Engine"
SKU_PAGE_SIZE = 5000

_USAGE = {"OnDemand": ON_DEMAND, "Preemptible": SPOT}
_SKIP = re.compile(
    r"custom|sole tenancy|extended|commitment|reserved|confidential|dws|flex|calendar|premium|upgrade|"
    r"workstation|licen[cs]|windows|sql server|rhel|suse",
    re.IGNORECASE,
)
_PREFIX = r"^(?:Spot Preemptible |Preemptible )?"
# "N1 Predefined Instance Core running in Americas", and C2's "Compute optimized Core running in Americas"
# (no "Instance"; "Compute optimized Instance Core" is seen too).
_PART = re.compile(_PREFIX + r"(?P<family>.+?) (?:Instance )?(?P<part>Core|Ram) running in ")
_GPU = re.compile(
    _PREFIX + r"Nvidia (?P<name>.+?) GPU(?: attached to (?:Spot )?Preemptible VMs)? running in ",
    re.IGNORECASE,
)
_FAMILY_WORDS = {"compute optimized": "c2", "memory-optimized": "m1", "memory optimized": "m1"}
_VENDOR_WORDS = {"predefined", "amd", "arm", "intel", "ampere"}
_FAMILY = re.compile(r"[a-z][0-9][a-z]?")
_GPU_NAMES = {
    "t4": "nvidia-tesla-t4",
    "v100": "nvidia-tesla-v100",
    "p100": "nvidia-tesla-p100",
    "p4": "nvidia-tesla-p4",
    "k80": "nvidia-tesla-k80",
    "a100": "nvidia-tesla-a100",
    "a100 80gb": "nvidia-a100-80gb",
    "l4": "nvidia-l4",
    "h100 80gb": "nvidia-h100-80gb",
    "h100 80gb mega": "nvidia-h100-mega-80gb",
    "h100 mega 80gb": "nvidia-h100-mega-80gb",
    "h200 141gb": "nvidia-h200-141gb",
    "b200": "nvidia-b200",
}
_UNITS = {"core": "h", "ram": "GiBy.h", "gpu": "h"}


@dataclass(frozen=True, slots=True)
class PriceBook:
    """Per-family core and RAM prices and per-type GPU prices of one region, by capacity type (USD/hour)."""

    region: str
    parts: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (core|ram, family, capacity)
    gpus: dict[tuple[str, str], float] = field(default_factory=dict)  # (accelerator type, capacity)
    source: str = BILLING_SOURCE

    def price(self, shape: Shape, capacity_type: str) -> float | None:
        """What ``shape`` costs per hour as ``capacity_type``; None when a part has no SKU here."""
        core = self.parts.get(("core", shape.family, capacity_type))
        ram = self.parts.get(("ram", shape.family, capacity_type))
        if core is None or ram is None:
            return None
        total = shape.vcpu * core + shape.memory_gib * ram
        if shape.gpu is not None and shape.gpu_count:
            gpu = self.gpus.get((shape.gpu.type, capacity_type))
            if gpu is None:
                return None
            total += shape.gpu_count * gpu
        return round(total, 6)

    @property
    def families(self) -> set[str]:
        """Machine families with a core price."""
        return {family for part, family, _ in self.parts if part == "core"}


def _family(text: str) -> str | None:
    lowered = text.strip().lower()
    if lowered in _FAMILY_WORDS:
        return _FAMILY_WORDS[lowered]
    words = [w for w in lowered.split() if w not in _VENDOR_WORDS]
    name = "".join(words)
    return name if _FAMILY.fullmatch(name) else None


def _gpu_type(text: str) -> str | None:
    words = [w for w in text.lower().split() if w != "tesla"]
    key = " ".join(words)
    return _GPU_NAMES.get(key)


def _unit_price(sku: billing_v1.Sku) -> tuple[str, float] | None:
    if not sku.pricing_info:
        return None
    expression = sku.pricing_info[0].pricing_expression
    rates = sorted(expression.tiered_rates, key=lambda r: r.start_usage_amount)
    if not rates:
        return None
    money = rates[-1].unit_price  # the marginal price: a first tier may be a free allowance
    return expression.usage_unit, money.units + money.nanos / 1e9


def classify_sku(sku: billing_v1.Sku, region: str) -> tuple[tuple[str, ...], float] | None:
    """``(("core", "n1", "spot"), 0.011)`` for a SKU tidal prices with, or None for any other SKU."""
    capacity = _USAGE.get(sku.category.usage_type)
    if capacity is None or sku.category.resource_family != "Compute" or region not in sku.service_regions:
        return None
    if _SKIP.search(sku.description):
        return None
    priced = _unit_price(sku)
    if priced is None:
        return None
    unit, price = priced
    part = _PART.match(sku.description)
    if part is not None:
        family = _family(part.group("family"))
        kind = "core" if part.group("part") == "Core" else "ram"
        if family is None or unit != _UNITS[kind]:
            return None
        return (kind, family, capacity), price
    gpu = _GPU.match(sku.description)
    if gpu is not None:
        accelerator_type = _gpu_type(gpu.group("name"))
        if accelerator_type is None or unit != _UNITS["gpu"]:
            return None
        return ("gpu", accelerator_type, capacity), price
    return None


def book_from_skus(skus: Iterable[billing_v1.Sku], region: str) -> PriceBook:
    """The price book of ``region`` from Compute Engine SKUs; of two SKUs for one part the plainer wins."""
    chosen: dict[tuple[str, ...], tuple[int, float]] = {}
    for sku in skus:
        found = classify_sku(sku, region)
        if found is None:
            continue
        key, price = found
        rank = len(sku.description)
        if key not in chosen or rank < chosen[key][0]:
            chosen[key] = (rank, price)
    book = PriceBook(region)
    for key, (_, price) in chosen.items():
        if key[0] == "gpu":
            book.gpus[(key[1], key[2])] = price
        else:
            book.parts[(key[0], key[1], key[2])] = price
    return book


def fetch_price_book(factory: ClientFactory, region: str) -> PriceBook:
    """List Compute Engine SKUs (every page) and build the price book; ProviderError on failure."""
    client = factory.billing()
    try:
        service = next(
            (
                s
                for s in client.list_services(
                    request=billing_v1.ListServicesRequest(page_size=200),
                    retry=factory.retry(),
                    timeout=factory.timeout,
                )
                if s.display_name == COMPUTE_ENGINE
            ),
            None,
        )
        if service is None:
            raise ProviderError(f"the Cloud Billing Catalog lists no {COMPUTE_ENGINE!r} service")
        skus = client.list_skus(
            request=billing_v1.ListSkusRequest(
                parent=service.name, currency_code="USD", page_size=SKU_PAGE_SIZE
            ),
            retry=factory.retry(),
            timeout=factory.timeout,
        )
        book = book_from_skus(skus, region)
    except CALL_ERRORS as err:
        raise api_error(err, "reading the Cloud Billing Catalog") from None
    if not book.parts:
        raise ProviderError(f"the Cloud Billing Catalog has no Compute Engine core/RAM prices for {region}")
    return book
