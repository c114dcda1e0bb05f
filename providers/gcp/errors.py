"""Compute Engine failures translated into the provider contract's errors.

GCE reports a failure in two places: the HTTP call itself (429 rate limiting, 403 quota, 404, 409) and,
for inserts, the zone operation that finishes later (``error.errors[].code`` such as
``ZONE_RESOURCE_POOL_EXHAUSTED``). Both go through here so that a stockout is a stockout wherever it
surfaces. Messages keep the codes and GCE's own message, never request bodies or credentials.
"""

from __future__ import annotations

from collections.abc import Iterable

import requests
from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions
from google.cloud import compute_v1

from autoscaler.cloud import InvalidRequest, ProviderError, QuotaExceeded, Throttled
from providers.gcp.quota import parse_quota

__all__ = [
    "CALL_ERRORS",
    "DEFAULT_RETRY_AFTER",
    "GceQuotaExceeded",
    "GceRefusal",
    "NoCapacity",
    "api_error",
    "is_not_found",
    "operation_error",
    "reasons",
]

DEFAULT_RETRY_AFTER = 5.0
STOCKOUT_CODES = frozenset(
    {
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "RESOURCE_POOL_EXHAUSTED",
        "REGION_RESOURCE_POOL_EXHAUSTED",
    }
)
QUOTA_CODES = frozenset({"QUOTA_EXCEEDED", "QUOTAEXCEEDED"})
RATE_CODES = frozenset({"RATELIMITEXCEEDED", "USERRATELIMITEXCEEDED", "RATE_LIMIT_EXCEEDED"})
INVALID_REASONS = frozenset({"INVALID", "BADREQUEST", "INVALIDPARAMETER", "REQUIRED", "CONDITIONNOTMET"})
# Operation codes that say the request itself cannot succeed as made (not a stockout, not a quota).
INVALID_CODES = frozenset(
    {
        "INVALID_USAGE",
        "UNSUPPORTED_OPERATION",
        "INVALID_FIELD_VALUE",
        "RESOURCE_NOT_FOUND",
        "BAD_REQUEST",
        "CONDITION_NOT_MET",  # e.g. a reservation named in the affinity that does not exist (any more)
    }
)
_MESSAGE_LIMIT = 300
# How GCE says a reservation named in a VM's affinity has no free instance (code CONDITION_NOT_MET): for that
# reservation's offering, a stockout.
RESERVATION_FULL = "does not have available resources"

# What an SDK call can raise: an API error response, retries running out, or the connection itself
# (refused, reset, timed out, credentials that cannot be refreshed).
CALL_ERRORS: tuple[type[Exception], ...] = (
    api_exceptions.GoogleAPIError,
    requests.RequestException,
    auth_exceptions.GoogleAuthError,
)


class NoCapacity(ProviderError):
    """The zone has no capacity for one offering right now (a stockout); the next candidate may have it."""


class GceQuotaExceeded(QuotaExceeded):
    """A quota stopped the insert: ``metric`` (``NVIDIA_T4_GPUS``, ``N2_CPUS``…) in ``region``, as GCE named
    it; the provider turns them into the scope of offerings the quota covers."""

    def __init__(self, message: str, metric: str, region: str) -> None:
        super().__init__(message)
        self.metric, self.region = metric, region


class GceRefusal(ProviderError):
    """GCE answered the call with an error that is none of the above (a 5xx, a refusal tidal has no name
    for): an answer about this attempt, unlike a connection that failed."""


def _quota(message: str, metric_name: str = "", region: str = "") -> QuotaExceeded:
    parsed = parse_quota(message, metric_name, region)
    if parsed is None:
        return QuotaExceeded(message)
    return GceQuotaExceeded(message, *parsed)


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MESSAGE_LIMIT else flat[: _MESSAGE_LIMIT - 3] + "..."


def _is_stockout(code: str) -> bool:
    upper = code.upper()
    return upper in STOCKOUT_CODES or "STOCKOUT" in upper or upper.endswith("RESOURCE_POOL_EXHAUSTED")


def reasons(err: api_exceptions.GoogleAPICallError) -> list[str]:
    """The ``error.errors[].reason`` values of an API error response."""
    found = []
    for item in err.errors or ():
        reason = item.get("reason") if isinstance(item, dict) else getattr(item, "reason", None)
        if reason:
            found.append(str(reason))
    return found


def _retry_after(err: api_exceptions.GoogleAPICallError) -> float:
    response = getattr(err, "response", None)
    header = getattr(response, "headers", {}).get("Retry-After") if response is not None else None
    try:
        return max(0.0, float(header)) if header is not None else DEFAULT_RETRY_AFTER
    except ValueError:
        return DEFAULT_RETRY_AFTER


def is_not_found(err: BaseException) -> bool:
    """A 404 from the API."""
    return isinstance(err, api_exceptions.NotFound)


def api_error(err: Exception, action: str) -> ProviderError:
    """The contract error for a failed API call (``action`` says what tidal was doing)."""
    if not isinstance(err, api_exceptions.GoogleAPICallError):
        cause = err.cause if isinstance(err, api_exceptions.RetryError) and err.cause is not None else err
        return ProviderError(f"{action}: {type(cause).__name__}: {_short(str(cause))}")
    found = {r.upper() for r in reasons(err)}
    message = f"{action}: HTTP {err.code} {_short(err.message or '')}".rstrip()
    if isinstance(err, api_exceptions.TooManyRequests) or found & RATE_CODES:
        return Throttled(_retry_after(err), message)
    if found & QUOTA_CODES:
        return _quota(message)
    if (
        any(_is_stockout(r) for r in found)
        or "RESOURCE_POOL_EXHAUSTED" in (err.message or "").upper()
        or RESERVATION_FULL in (err.message or "")
    ):
        return NoCapacity(message)
    if isinstance(err, api_exceptions.BadRequest) or found & INVALID_REASONS:
        return InvalidRequest(message)
    return GceRefusal(message)


def operation_error(operation: compute_v1.Operation, action: str) -> ProviderError | None:
    """The contract error for a zone operation that finished with ``error.errors``; None when it succeeded.

    A stockout wins over other codes in the same operation: the next offering may well have capacity.
    """
    errors: Iterable[compute_v1.Errors] = operation.error.errors if "error" in operation else ()
    codes = [e.code for e in errors]
    if not codes:
        return None
    details = "; ".join(f"{e.code}: {_short(e.message)}" for e in operation.error.errors)
    status = operation.http_error_status_code if "http_error_status_code" in operation else 0
    message = f"{action}: operation {operation.name} failed (HTTP {status}): {details}"
    if any(_is_stockout(c) for c in codes) or any(
        RESERVATION_FULL in e.message for e in operation.error.errors
    ):
        return NoCapacity(message)
    upper = {c.upper() for c in codes}
    if upper & QUOTA_CODES:
        quota = next(e for e in operation.error.errors if e.code.upper() in QUOTA_CODES)
        info = next((d.quota_info for d in quota.error_details if "quota_info" in d), None)
        if info is not None:
            return _quota(message, info.metric_name, dict(info.dimensions).get("region", ""))
        return _quota(message)
    if upper & RATE_CODES or status == 429:
        return Throttled(DEFAULT_RETRY_AFTER, message)
    if upper & INVALID_CODES or status == 400:
        return InvalidRequest(message)
    return GceRefusal(message)
