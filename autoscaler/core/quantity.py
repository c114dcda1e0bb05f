"""Kubernetes resource quantities, parsed exactly.

A quantity is ``<signed number><suffix>`` where the number may have a decimal point and the suffix is a
binary SI suffix (Ki … Ei), a decimal SI suffix (n u m "" k M G T P E) or a decimal exponent (e3, E-2).
Values are kept as :class:`fractions.Fraction` so ``0.1 + 0.2`` style drift never happens; the model then
stores resources as integer *milli-units* (what the API server itself does for cpu).
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = [
    "MAX_MILLI",
    "QuantityError",
    "QuantityMemo",
    "format_cpu",
    "format_duration",
    "format_memory",
    "format_quantity",
    "parse_quantity",
    "to_milli",
]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY_RE = re.compile(
    r"^(?P<sign>[+-])?(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<binary>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?[0-9]+)|(?P<decimal>[numkMGTPE]?))\Z"
)

# Kubernetes: "no quantity may represent a number greater than 2^63-1 in magnitude" (the API server caps it
# there). tidal keeps amounts as Python integers of milli-units, which hold that whole range (1E, 8Ei - 1,
# memory far above 8 PiB); beyond it a value is an error rather than silently capped.
MAX_UNITS = 2**63 - 1
MAX_MILLI = MAX_UNITS * 1000


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity, or one out of range."""


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a Kubernetes quantity (``"500m"``, ``"16Gi"``, ``"1e3"``, ``2``) into an exact Fraction."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"{value!r} is not a quantity")
        # YAML turns `1.5` into a float; its shortest repr is what the user wrote.
        return parse_quantity(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    match = _QUANTITY_RE.match(value)
    if match is None:
        if value != value.strip():
            # As Kubernetes' ParseQuantity: a quantity has no spaces around it.
            raise QuantityError(f"{value!r} is not a quantity (remove the spaces)")
        raise QuantityError(f"{value!r} is not a quantity (expected e.g. 500m, 1.5, 16Gi, 1e3)")
    number = Fraction(match.group("number"))
    if match.group("binary"):
        number *= _BINARY[match.group("binary")]
    elif match.group("exp"):
        exponent = int(match.group("exp")[1:])
        if abs(exponent) > 60:
            raise QuantityError(f"{value!r} is out of range")
        number *= Fraction(10) ** exponent
    else:
        number *= _DECIMAL[match.group("decimal") or ""]
    if match.group("sign") == "-":
        number = -number
    return number


class QuantityMemo:
    """Quantities already read, in milli-units, held by whoever decodes many objects (the cluster cache, a
    snapshot reader): a cluster repeats a few hundred distinct quantities across 100,000 pods, so each is
    parsed once. Bounded: past ``max_entries`` distinct values it starts again from nothing."""

    __slots__ = ("_max", "_milli", "made", "maps")

    def __init__(self, max_entries: int = 16384) -> None:
        self._milli: dict[str | int | float, int] = {}
        self._max = max_entries
        # Whole resource maps already read (``(("cpu", "1"), ("memory", "2Gi"))`` → what they were read as), for
        # :meth:`autoscaler.core.resources.Resources.parse`: a workload's replicas all carry the same map.
        self.maps: dict[tuple[tuple[object, object], ...], object] = {}
        # Other values replicas repeat field for field (an owner, a PodScheduled condition), by what they were
        # read from: one immutable value for all of them. Bounded as the quantities are.
        self.made: dict[tuple[object, ...], object] = {}

    def keep_made(self, key: tuple[object, ...], value: object) -> None:
        """Remember the value read from ``key``; bounded as the quantities are."""
        if len(self.made) >= self._max:
            self.made.clear()
        self.made[key] = value

    def keep_map(self, key: tuple[tuple[object, object], ...], value: object) -> None:
        """Remember what the map ``key`` was read as; bounded as the quantities are."""
        if len(self.maps) >= self._max:
            self.maps.clear()
        self.maps[key] = value

    def milli(self, value: str | int | float) -> int:
        """``value`` in milli-units (see :func:`to_milli`); raises as it does, and remembers only successes."""
        found = self._milli.get(value)
        if found is None:
            found = _milli(value)
            if len(self._milli) >= self._max:
                self._milli.clear()
            self._milli[value] = found
        return found


def to_milli(value: str | int | float, *, field: str = "quantity", memo: QuantityMemo | None = None) -> int:
    """Parse a quantity into integer milli-units, rounding up as the API server does; reject out-of-range.

    ``memo`` keeps what was parsed for the next call that reads the same value."""
    if isinstance(value, bool):
        raise QuantityError(f"{field}: {value!r} is not a quantity")
    try:
        return memo.milli(value) if memo is not None else _milli(value)
    except QuantityError as err:
        raise QuantityError(f"{field}: {err}") from None
    except TypeError:  # unhashable garbage
        raise QuantityError(f"{field}: {value!r} is not a quantity") from None


def _milli(value: str | int | float) -> int:
    milli = parse_quantity(value) * 1000
    rounded = milli.numerator // milli.denominator
    if rounded != milli:
        rounded += 1
    if abs(rounded) > MAX_MILLI:
        raise QuantityError(f"{value!r} is out of range (Kubernetes quantities stop at 2^63-1)")
    return rounded


def format_quantity(milli: int) -> str:
    """Format milli-units in the shortest exact decimal form (``1500`` → ``"1500m"``, ``2000`` → ``"2"``)."""
    if milli % 1000:
        return f"{milli}m"
    return str(milli // 1000)


def format_cpu(milli: int) -> str:
    """Format a cpu amount for people: ``"500m"``, ``"2"``."""
    return format_quantity(milli)


def format_memory(milli: int) -> str:
    """Format a byte amount (given in milli-bytes) with the largest exact binary suffix."""
    value = milli // 1000
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if value and value % unit == 0:
            return f"{value // unit}{suffix}"
    if value >= 2**30:
        return f"{value / 2**30:.1f}Gi"
    return str(value)


_DURATION_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def format_duration(seconds: float) -> str:
    """A duration for people: its two largest units, whole (``338794`` → ``"3d22h"``, ``90`` → ``"1m30s"``,
    ``300`` → ``"5m"``, ``0.4`` → ``"0s"``)."""
    rest = max(0, int(seconds))
    parts: list[str] = []
    for suffix, size in _DURATION_UNITS:
        count, rest = divmod(rest, size)
        if count or parts:
            parts.append(f"{count}{suffix}" if count else "")
        if len(parts) == 2:
            break
    return "".join(parts) or "0s"
