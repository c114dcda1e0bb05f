"""Disruption budgets: how many nodes tidal may disrupt at once, per method, optionally only in a time window.

As Karpenter's NodePool budgets: ``nodes`` is a count ("3") or a share of tidal's nodes ("10%", rounded up);
``reasons`` names the methods a budget bounds (all but ``interrupted`` when absent: the cloud does not wait);
``schedule`` (cron, UTC) and ``duration`` make a budget hold only from each time the schedule names, for that
long. Every budget that holds bounds its methods; the most restrictive one wins. Nodes already being disrupted
(whatever the method) count against every budget.
"""

from __future__ import annotations

import calendar
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from autoscaler.config.schema import ConfigError, fail, parse_duration, show, unknown_keys
from autoscaler.core.disruption.method import Method

__all__ = ["Budget", "Cron", "allowed", "budget_list", "parse_cron"]

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
_DAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
# (name, lowest, highest, names)
_FIELDS: tuple[tuple[str, int, int, Mapping[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)


@dataclass(frozen=True, slots=True)
class Cron:
    """A standard five-field cron schedule, in UTC."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 is Sunday
    any_day: bool  # day of month is "*"
    any_weekday: bool  # day of week is "*"

    def day_matches(self, when: datetime) -> bool:
        """Whether the schedule fires on this date (as cron: day of month OR day of week when both are set)."""
        if when.month not in self.months:
            return False
        weekday = (when.weekday() + 1) % 7
        by_day, by_weekday = when.day in self.days, weekday in self.weekdays
        if self.any_day or self.any_weekday:
            return by_day and by_weekday
        return by_day or by_weekday

    def fired_within(self, now: float, seconds: float) -> bool:
        """Whether the schedule fired at some minute in ``(now - seconds, now]``."""
        t = float(math.floor(now / 60) * 60)
        while t > now - seconds:
            when = datetime.fromtimestamp(t, UTC)
            if not self.day_matches(when):
                t = datetime(when.year, when.month, when.day, tzinfo=UTC).timestamp() - 60
            elif when.hour not in self.hours:
                t = datetime(when.year, when.month, when.day, when.hour, tzinfo=UTC).timestamp() - 60
            elif when.minute in self.minutes:
                return True
            else:
                t -= 60
        return False


def _values(text: str, lowest: int, highest: int, names: Mapping[str, int]) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        step = int(step_text) if step_text.isdigit() and int(step_text) > 0 else None
        if step_text and step is None:
            raise ValueError(f"{part!r} has a bad step")
        if body == "*":
            first, last = lowest, highest
        else:
            start, dash, end = body.partition("-")
            first = _number(start, names)
            last = _number(end, names) if dash else (highest if step else first)
        if not lowest <= first <= last <= highest:
            raise ValueError(f"{part!r} is outside {lowest}-{highest}")
        out.update(range(first, last + 1, step or 1))
    return frozenset(out)


def _number(text: str, names: Mapping[str, int]) -> int:
    lowered = text.lower()
    if lowered in names:
        return names[lowered]
    if not text.isdigit():
        raise ValueError(f"{text!r} is not a number" + (" or a name" if names else ""))
    return int(text)


def parse_cron(text: str) -> Cron:
    """A cron schedule (``"0 9 * * mon-fri"``, ``@daily``); ValueError saying what is wrong."""
    fields = _MACROS.get(text.strip().lower(), text).split()
    if len(fields) != 5:
        raise ValueError("a schedule has five fields: minute hour day-of-month month day-of-week")
    parsed = []
    for (name, lowest, highest, names), value in zip(_FIELDS, fields, strict=True):
        try:
            parsed.append(_values(value, lowest, highest, names))
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None
    weekdays = frozenset(0 if d == 7 else d for d in parsed[4])
    return Cron(parsed[0], parsed[1], parsed[2], parsed[3], weekdays, fields[2] == "*", fields[4] == "*")


@dataclass(frozen=True, slots=True)
class Budget:
    """At most ``count`` nodes (or ``percent`` of tidal's nodes, rounded up) disrupted at once, for the
    methods in ``reasons`` (every method but interruptions when empty), while the window holds."""

    count: int | None = None
    percent: int | None = None
    reasons: tuple[str, ...] = ()
    schedule: Cron | None = None
    schedule_text: str = ""
    duration: float = 0.0

    def bounds(self, method: str) -> bool:
        """Whether this budget bounds ``method`` (a spot interruption is never held back)."""
        if method == Method.INTERRUPTED:
            return False
        return not self.reasons or method in self.reasons

    def holds(self, now: float) -> bool:
        """Whether the budget applies at ``now`` (always, without a schedule)."""
        return self.schedule is None or self.schedule.fired_within(now, self.duration)

    def limit(self, nodes: int) -> int:
        """How many of ``nodes`` may be disrupted at once."""
        if self.percent is not None:
            return math.ceil(nodes * self.percent / 100)
        return self.count or 0

    def describe(self) -> str:
        """The budget as a person wrote it, for reasons and logs."""
        text = f"{self.percent}%" if self.percent is not None else str(self.count)
        if self.reasons:
            text += f" for {', '.join(self.reasons)}"
        if self.schedule is not None:
            text += f" from {self.schedule_text!r} for {self.duration:g}s"
        return text


def allowed(
    method: str, budgets: Sequence[Budget], nodes: int, disrupting: int, now: float
) -> tuple[int | None, Budget | None]:
    """How many more nodes ``method`` may disrupt now (None: no budget bounds it), and the budget that
    bounds it most."""
    best: tuple[int | None, Budget | None] = (None, None)
    for budget in budgets:
        if not budget.bounds(method) or not budget.holds(now):
            continue
        room = max(0, budget.limit(nodes) - disrupting)
        if best[0] is None or room < best[0]:
            best = (room, budget)
    return best


_NODES = re.compile(r"(?P<n>\d+)(?P<percent>%?)")
_BUDGET_KEYS = ("nodes", "reasons", "schedule", "duration")


def _budget(value: object, path: str) -> Budget:
    if not isinstance(value, Mapping):
        fail(path, f"{show(value)} is not a map (nodes, and optionally reasons, schedule and duration)")
    errors = unknown_keys(value, _BUDGET_KEYS, f"{path}.")
    if errors:
        raise ConfigError(errors)
    raw = value.get("nodes")
    text = str(raw) if isinstance(raw, int | str) and not isinstance(raw, bool) else ""
    found = _NODES.fullmatch(text.strip())
    if found is None:
        fail(f"{path}.nodes", f"{show(raw)} is not a number of nodes or a percentage ('3', '10%')")
    count = int(found["n"])
    percent = count if found["percent"] else None
    if percent is not None and percent > 100:
        fail(f"{path}.nodes", f"{show(raw)} is more than 100%")
    reasons = value.get("reasons") or []
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        fail(f"{path}.reasons", f"{show(reasons)} is not a list of methods")
    known = [m.value for m in Method if m != Method.INTERRUPTED]
    for i, reason in enumerate(reasons):
        if reason not in known:
            fail(f"{path}.reasons[{i}]", f"{show(reason)} is not one of {', '.join(known)}")
    schedule, duration = value.get("schedule"), value.get("duration")
    if (schedule is None) != (duration is None):
        fail(f"{path}.schedule", "schedule and duration go together: give both or neither")
    cron = None
    seconds = 0.0
    if schedule is not None:
        if not isinstance(schedule, str):
            fail(f"{path}.schedule", f"{show(schedule)} is not a cron schedule")
        try:
            cron = parse_cron(schedule)
        except ValueError as err:
            fail(f"{path}.schedule", f"{show(schedule)}: {err}")
        seconds = parse_duration(duration if duration is not None else "", field=f"{path}.duration")
        if seconds <= 0:
            fail(f"{path}.duration", f"{show(duration)} must be longer than 0s")
    return Budget(
        None if percent is not None else count,
        percent,
        tuple(reasons),
        cron,
        schedule or "",
        seconds,
    )


def budget_list(value: object, path: str) -> tuple[Budget, ...]:
    """``disruption.budgets``: a list of budgets; every problem is reported with its path."""
    if value is None:
        return ()
    if not isinstance(value, list):
        fail(path, f"{show(value)} is not a list of budgets")
    errors: list[str] = []
    budgets = []
    for i, item in enumerate(value):
        try:
            budgets.append(_budget(item, f"{path}[{i}]"))
        except ConfigError as err:
            errors.extend(err.errors)
    if errors:
        raise ConfigError(errors)
    return tuple(budgets)
