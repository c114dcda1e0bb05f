"""What the cloud refused lately, and until when tidal leaves it alone: the one availability store.

Every refusal a launch reports (see :class:`autoscaler.cloud.Attempt`), whether it came back from ``launch``
or later from ``poll_errors()``, lands here:

- **no capacity**, **invalid request** and **other** bench the offering itself;
- **quota** benches every offering its scope covers (a family, a GPU type, an instance type, a region);
- **throttled** holds back every launch: a cloud rate-limits its launch API as a whole, so trying another
  offering would only be refused again and deepen the throttling.

A bench lasts ``unavailable_for`` seconds the first time and doubles with every refusal of the same offering
or scope while it keeps being refused (capped at ``cap_factor`` times), never less than the retry_after the
cloud asked for, and stretched by up to ``jitter`` at random so that replicas and offerings do not all come
back at once. Given a seeded ``random.Random`` the delays are reproducible. A launch that succeeds on an
offering clears its strikes.

The planner never sees this store: it reads ``Offering.available``, which :meth:`Availability.apply` sets.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from autoscaler.cloud import Attempt, QuotaScope, Refusal
from autoscaler.core.offering import Offering

__all__ = ["Availability", "Bench"]

THROTTLE_BASE = 1.0  # seconds of the first back-off after throttling when the cloud names no retry_after
THROTTLE_CAP = 300.0


@dataclass(frozen=True, slots=True)
class Bench:
    """One offering or quota scope held back until ``until``, and why."""

    key: str
    until: float
    refusal: Refusal
    detail: str
    strikes: int


class _Backoff:
    """Exponential, capped, jittered delays per key, with the strike count of each key."""

    def __init__(self, rng: random.Random, jitter: float) -> None:
        self.rng = rng
        self.jitter = jitter
        self.strikes: dict[str, tuple[int, float]] = {}  # key -> (strikes, when the last bench ends)

    def delay(
        self, key: str, now: float, base: float, cap: float, retry_after: float | None
    ) -> tuple[float, int]:
        strikes, until = self.strikes.get(key, (0, 0.0))
        if strikes and now < until:
            # Refused again while benched (parallel launches that shared a candidate, a late failure):
            # the same bench, not another strike, unless the cloud now asks for longer.
            left = max(until - now, retry_after or 0.0)
            self.strikes[key] = (strikes, now + left)
            return left, strikes
        # A key quiet for a whole cap since its last bench ended starts again from the shortest delay.
        if strikes and now - until > cap:
            strikes = 0
        strikes += 1
        ceiling = min(cap, base * 2 ** (strikes - 1))
        delay = max(ceiling, retry_after or 0.0) * (1.0 + self.jitter * self.rng.random())
        self.strikes[key] = (strikes, now + delay)
        return delay, strikes

    def clear(self, key: str) -> None:
        self.strikes.pop(key, None)


class Availability:
    """Offerings and quota scopes benched after refusals, and the launch back-off after throttling."""

    def __init__(
        self,
        *,
        unavailable_for: float,
        cap_factor: float = 8.0,
        jitter: float = 0.2,
        rng: random.Random | None = None,
    ) -> None:
        self.unavailable_for = unavailable_for
        self.cap_factor = cap_factor
        self._backoff = _Backoff(rng or random.Random(), jitter)
        self._offerings: dict[str, Bench] = {}  # by offering key
        self._scopes: dict[str, tuple[QuotaScope, Bench]] = {}  # by scope key
        self._throttle: Bench | None = None
        self._lock = threading.Lock()  # launches report from a thread pool
        self._view: tuple[Sequence[Offering], frozenset[str], list[Offering]] | None = None

    # -- recording -----------------------------------------------------------------------------------------

    def refused(self, attempts: Iterable[Attempt], now: float) -> list[Bench]:
        """Record the cloud's refusals; returns the benches they started or extended."""
        out = []
        with self._lock:
            for a in attempts:
                if a.refusal == Refusal.THROTTLED:
                    out.append(self._throttled(a, now))
                elif a.refusal == Refusal.QUOTA and a.scope is not None:
                    out.append(self._bench_scope(a, a.scope, now))
                else:
                    out.append(self._bench_offering(a.offering, a.refusal, a.detail, now, a.retry_after))
        return out

    def bench(self, offerings: Iterable[Offering], now: float, detail: str = "") -> None:
        """Bench offerings for a reason found outside a launch (a node that never registered, a reclaim)."""
        with self._lock:
            for o in offerings:
                self._bench_offering(o, Refusal.NO_CAPACITY, detail, now, None)

    def succeeded(self, offering: Offering) -> None:
        """A launch went through on ``offering``: its next refusal starts from the shortest bench again, and
        the launch API is evidently not throttling any more."""
        with self._lock:
            self._backoff.clear(offering.key)
            self._backoff.clear("throttled")

    def _cap(self) -> float:
        return self.unavailable_for * self.cap_factor

    def _bench_offering(
        self, offering: Offering, refusal: Refusal, detail: str, now: float, retry_after: float | None
    ) -> Bench:
        key = offering.key
        delay, strikes = self._backoff.delay(key, now, self.unavailable_for, self._cap(), retry_after)
        bench = Bench(key, max(now + delay, self._until(self._offerings.get(key))), refusal, detail, strikes)
        self._offerings[key] = bench
        return bench

    def _bench_scope(self, attempt: Attempt, scope: QuotaScope, now: float) -> Bench:
        key = f"quota {scope.key}"
        delay, strikes = self._backoff.delay(key, now, self.unavailable_for, self._cap(), attempt.retry_after)
        before = self._scopes.get(key)
        until = max(now + delay, self._until(before[1] if before else None))
        bench = Bench(key, until, Refusal.QUOTA, attempt.detail, strikes)
        self._scopes[key] = (scope, bench)
        return bench

    def _throttled(self, attempt: Attempt, now: float) -> Bench:
        delay, strikes = self._backoff.delay(
            "throttled", now, THROTTLE_BASE, THROTTLE_CAP, attempt.retry_after
        )
        until = max(now + delay, self._until(self._throttle))
        self._throttle = Bench("launches", until, Refusal.THROTTLED, attempt.detail, strikes)
        return self._throttle

    @staticmethod
    def _until(bench: Bench | None) -> float:
        return bench.until if bench is not None else 0.0

    # -- reading ---------------------------------------------------------------------------------------------

    def launch_backoff(self, now: float) -> float:
        """Seconds before launches may be sent again after throttling (0: now)."""
        with self._lock:
            return max(0.0, self._until(self._throttle) - now)

    def why_unavailable(self, offering: Offering, now: float) -> Bench | None:
        """The bench holding ``offering`` back at ``now`` (its own, else a quota scope's), or None."""
        with self._lock:
            return self._why(offering, now)

    def _why(self, offering: Offering, now: float) -> Bench | None:
        own = self._offerings.get(offering.key)
        if own is not None and own.until > now:
            return own
        for scope, bench in self._scopes.values():
            if bench.until > now and scope.covers(offering):
                return bench
        return None

    def apply(self, offerings: Sequence[Offering], now: float) -> Sequence[Offering]:
        """``offerings`` with ``available=False`` on every benched one. The very same list while nothing is
        benched, and the same derived list while neither the offerings nor the benches change, so a planner
        that keeps work keyed on the list keeps it through an outage."""
        with self._lock:
            self._expire(now)
            if not self._offerings and not self._scopes:
                return offerings
            active = frozenset(self._offerings) | frozenset(self._scopes)
            if self._view is not None and self._view[0] is offerings and self._view[1] == active:
                return self._view[2]
            view = [
                replace(o, available=False) if o.available and self._why(o, now) is not None else o
                for o in offerings
            ]
            self._view = (offerings, active, view)
            return view

    def _expire(self, now: float) -> None:
        self._offerings = {k: b for k, b in self._offerings.items() if b.until > now}
        self._scopes = {k: v for k, v in self._scopes.items() if v[1].until > now}

    def benched(self, now: float) -> list[str]:
        """Offerings and quota scopes held back now, for the status ConfigMap (sorted)."""
        with self._lock:
            keys = [k for k, b in self._offerings.items() if b.until > now]
            keys += [k for k, (_, b) in self._scopes.items() if b.until > now]
            if self._throttle is not None and self._throttle.until > now:
                keys.append("launches (throttled)")
        return sorted(keys)
