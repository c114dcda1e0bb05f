"""RFC 3339 timestamps as epoch seconds: pure parsing shared by the decision core and the Kubernetes edge."""

from __future__ import annotations

from datetime import datetime

__all__ = ["epoch", "parse_time"]


def epoch(value: str) -> float | None:
    """An RFC 3339 string → epoch seconds; ``None`` when it is not one (a time without an offset is not)."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None  # RFC 3339 always carries Z or an offset; a local time would depend on the machine
    return parsed.timestamp()


def parse_time(value: object) -> float | None:
    """RFC 3339 timestamp → epoch seconds; ``None`` when absent *or not a timestamp* (never raises).

    For values tidal reads back from its own annotations (``tidal.dev/unneeded-since``) and leases, where a
    mangled value must mean "start counting again", not stop a reconcile.
    """
    if type(value) is not str or not value:
        return None
    return epoch(value)
