"""Launch tokens recorded in scale-set tags: how a Uniform scale set remembers which instance is whose.

A Uniform scale set's instances cannot carry their own tags, and raising its capacity does not say which
instance the new one is. So every launch writes one tag on the scale set, in the same PATCH as the capacity
change (ARM applies both or neither):

    tidal.dev.token.<token> = pending:<highest instance id before>:<epoch>   capacity raised, instance unknown
                            = vm:<instance id>:<epoch>                       instance identified

Instance ids of a scale set only grow, so a pending token owns the lowest unclaimed id above the highest
id before its launch (pending tokens in launch order). Once the scale set's operation is over the tag is
rewritten to ``vm:``. A retried launch finds the tag and never raises the capacity again. When the instance
is gone (deleted by tidal, evicted), the tag stays a while so the launch is listed as terminated.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "PENDING",
    "TOKEN_TAG_PREFIX",
    "VM",
    "TokenRecord",
    "parse_records",
    "prune",
    "resolve",
    "token_key",
]

TOKEN_TAG_PREFIX = "tidal.dev.token."
PENDING, VM = "pending", "vm"
_SAFE_TOKEN = re.compile(r"[A-Za-z0-9._-]{1,128}")


def token_key(token: str) -> str:
    """The tag name for ``token`` (tokens with characters ARM refuses in tag names are hashed)."""
    if _SAFE_TOKEN.fullmatch(token):
        return TOKEN_TAG_PREFIX + token
    return TOKEN_TAG_PREFIX + hashlib.sha256(token.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """One token tag, parsed."""

    key: str
    kind: str  # PENDING | VM
    number: int  # PENDING: highest instance id before the launch; VM: the instance id
    since: float  # epoch of the launch

    @property
    def token(self) -> str:
        """The launch token (or its hash, for tokens ARM would not accept in a tag name)."""
        return self.key[len(TOKEN_TAG_PREFIX) :]

    def value(self) -> str:
        """The tag value: ``kind:number:epoch``."""
        return f"{self.kind}:{self.number}:{int(self.since)}"

    @classmethod
    def pending(cls, token: str, highest_before: int, now: float) -> TokenRecord:
        """The record a launch writes with its capacity change."""
        return cls(token_key(token), PENDING, highest_before, now)


def parse_records(tags: Mapping[str, str] | None) -> list[TokenRecord]:
    """Token records among a scale set's tags; values tidal did not write are ignored."""
    out = []
    for key, value in (tags or {}).items():
        if not key.startswith(TOKEN_TAG_PREFIX):
            continue
        parts = str(value).split(":")
        if len(parts) != 3 or parts[0] not in (PENDING, VM):
            continue
        try:
            out.append(TokenRecord(key, parts[0], int(parts[1]), float(parts[2])))
        except ValueError:
            continue
    return out


def resolve(records: Iterable[TokenRecord], instance_ids: Iterable[int]) -> dict[str, int | None]:
    """The instance id each record stands for (None: a pending launch whose instance is not listed yet)."""
    records = list(records)
    present = sorted(set(instance_ids))
    out: dict[str, int | None] = {r.key: r.number for r in records if r.kind != PENDING}
    claimed = {n for n in out.values() if n is not None}
    for r in sorted((r for r in records if r.kind == PENDING), key=lambda r: (r.number, r.since, r.key)):
        found = next((i for i in present if i > r.number and i not in claimed), None)
        out[r.key] = found
        if found is not None:
            claimed.add(found)
    return out


def prune(
    records: Iterable[TokenRecord],
    instance_ids: Iterable[int],
    now: float,
    *,
    retention: float,
    pending_timeout: float,
    missing_since: Mapping[str, float],
) -> list[TokenRecord]:
    """The records worth keeping, pending ones that found their instance rewritten as ``vm``.

    Dropped: instances gone (deleted, or evicted) for longer than ``retention`` (``missing_since`` holds
    when each was first seen gone), and pending launches that never produced an instance within
    ``pending_timeout``.
    """
    records = list(records)
    present = set(instance_ids)
    resolved = resolve(records, present)
    kept = []
    for r in records:
        number = resolved.get(r.key)
        if r.kind == PENDING:
            if number is not None:
                kept.append(TokenRecord(r.key, VM, number, r.since))
            elif now - r.since < pending_timeout:
                kept.append(r)
        elif r.number in present or now - missing_since.get(r.key, now) < retention:
            kept.append(r)
    return kept
