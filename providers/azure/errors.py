"""ARM errors turned into the contract's typed errors.

Failures arrive two ways: synchronously on the request (SkuNotAvailable, a quota's OperationNotAllowed,
sometimes a 409 with AllocationFailed) or inside the long-running operation's final status. Both surface from
the SDK as an ``HttpResponseError`` whose error (or its details) carries the code, so one classifier serves
both: AllocationFailed and its zonal and overconstrained kin are no capacity; OperationNotAllowed about a
quota, QuotaExceeded and SkuNotAvailable (a size this subscription may not create there) are quota refusals
whose scope ``quota.py`` reads from the message; a 429 is throttling.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from autoscaler.cloud import CapacityUnavailable, ProviderError, QuotaExceeded, Throttled
from autoscaler.core.offering import Offering

__all__ = [
    "CAPACITY_CODES",
    "QUOTA_CODES",
    "SKU_RESTRICTED",
    "ArmQuotaExceeded",
    "classify",
    "error_codes",
    "is_not_found",
]

CAPACITY_CODES = frozenset(
    {
        "AllocationFailed",
        "ZonalAllocationFailed",
        "OverconstrainedAllocationRequest",
        "OverconstrainedZonalAllocationRequest",
    }
)
QUOTA_CODES = frozenset({"QuotaExceeded", "SkuFamilyQuotaExceeded"})
SKU_RESTRICTED = "SkuNotAvailable"
_QUOTA_MESSAGE = re.compile(r"quota|cores|vCPU", re.IGNORECASE)
DEFAULT_RETRY_AFTER = 10.0


class ArmQuotaExceeded(QuotaExceeded):
    """A quota refusal with ARM's own message (``detail``), from which the provider reads the scope;
    ``sku_restricted`` for SkuNotAvailable."""

    def __init__(self, message: str, detail: str, *, sku_restricted: bool = False) -> None:
        super().__init__(message)
        self.detail, self.sku_restricted = detail, sku_restricted


def _walk(error: Any) -> Iterator[tuple[str, str]]:
    if error is None:
        return
    yield str(getattr(error, "code", "") or ""), str(getattr(error, "message", "") or "")
    for detail in getattr(error, "details", None) or []:
        yield from _walk(detail)


def error_codes(err: BaseException) -> list[tuple[str, str]]:
    """Every (code, message) an SDK error carries, outermost first."""
    found = list(_walk(getattr(err, "error", None)))
    return [(c, m) for c, m in found if c] or [("", str(getattr(err, "message", "") or err))]


def _retry_after(err: BaseException) -> float:
    response = getattr(err, "response", None)
    headers = getattr(response, "headers", None) or {}
    for name in ("Retry-After", "retry-after", "x-ms-retry-after-ms"):
        value = headers.get(name)
        if value:
            try:
                seconds = float(value)
            except ValueError:
                continue
            return seconds / 1000 if name.endswith("-ms") else seconds
    return DEFAULT_RETRY_AFTER


def is_not_found(err: BaseException) -> bool:
    """A 404: the resource is gone (which terminate and lookups treat as an answer, not a failure)."""
    return getattr(err, "status_code", None) == 404


def _summary(codes: Sequence[tuple[str, str]]) -> str:
    code, message = codes[-1] if codes[-1][0] else codes[0]
    return f"{code}: {' '.join(message.split())[:300]}" if code else " ".join(message.split())[:300]


def classify(err: BaseException, offerings: Sequence[Offering] = (), *, what: str = "") -> ProviderError:
    """The typed error for an Azure SDK exception (``offerings``: those a capacity error is about)."""
    if isinstance(err, ProviderError):
        return err
    codes = error_codes(err)
    names = {c for c, _ in codes}
    prefix = f"{what}: " if what else ""
    if getattr(err, "status_code", None) == 429 or "TooManyRequests" in names:
        return Throttled(_retry_after(err), f"{prefix}ARM throttled the request")
    if names & CAPACITY_CODES:
        return CapacityUnavailable(
            offerings, f"{prefix}{_summary([c for c in codes if c[0] in CAPACITY_CODES])}"
        )
    quota = [
        (c, m)
        for c, m in codes
        if c in QUOTA_CODES or (c == "OperationNotAllowed" and _QUOTA_MESSAGE.search(m))
    ]
    if quota:
        return ArmQuotaExceeded(f"{prefix}{_summary(codes)}", quota[-1][1])
    if SKU_RESTRICTED in names:
        restricted = [(c, m) for c, m in codes if c == SKU_RESTRICTED]
        return ArmQuotaExceeded(f"{prefix}{_summary(restricted)}", restricted[-1][1], sku_restricted=True)
    status = getattr(err, "status_code", None)
    return ProviderError(
        f"{prefix}{type(err).__name__}" + (f" HTTP {status}" if status else "") + f": {_summary(codes)}"
    )
