"""The scenarios that ship with tidal (``scenarios/NAME.yaml``), named apart so the command line can list
them without importing the simulator."""

from __future__ import annotations

__all__ = ["BUILT_IN"]

BUILT_IN = (
    "kai-day",
    "kai-day-reserved",
    "kai-day-block",
    "spot-storm",
    "spot-risk",
    "burst-10k",
    "trace",
    "alibaba-week",
    "kueue-day",
    "buffer-day",
)
