"""Sending a plan's launches to the cloud: idempotency tokens, parallel calls, and what each refusal benches.

Every launch the cloud refuses reports, per candidate, why (see :mod:`autoscaler.cloud`); those answers go
into the availability store so that the plan made again in the same reconcile falls back to what is left.
While the launch API is throttled nothing is sent at all: the launches wait for the cloud's retry_after.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from autoscaler.cloud import (
    Attempt,
    CapacityUnavailable,
    CloudProvider,
    InvalidRequest,
    LaunchFailed,
    ProviderError,
    QuotaExceeded,
    QuotaScope,
    Refusal,
    Throttled,
)
from autoscaler.config.values import Config
from autoscaler.core.disruption.drifted import TEMPLATE_LABEL
from autoscaler.core.model import LABEL_CLUSTER, LABEL_LAUNCH_TOKEN, LABEL_MANAGED
from autoscaler.core.new_nodes import node_taints
from autoscaler.core.offering import Instance, LaunchRequest, Offering
from autoscaler.core.planning.decisions import Launch
from autoscaler.core.planning.scaledown import NODE_MODE
from autoscaler.runtime.availability import Availability
from autoscaler.runtime.fleet import Fleet, State

__all__ = ["LaunchOutcome", "Launcher", "launch_token"]

if TYPE_CHECKING:
    from autoscaler.runtime.seams import Metrics

log = structlog.get_logger("tidal.controller")

# Outcome labels of tidal_launches_total, by the error a launch ended with.
_OUTCOMES: tuple[tuple[type[ProviderError], str], ...] = (
    (Throttled, "throttled"),
    (QuotaExceeded, "quota_exceeded"),
    (CapacityUnavailable, "capacity_unavailable"),
    (InvalidRequest, "invalid_request"),
)


def launch_token(cluster: str, pods: Iterable[str], attempt: int) -> str:
    """A UUID derived from the pods a launch is for, so a replan after a restart reuses it (and the cloud
    deduplicates); ``attempt`` moves on once an instance with the previous token has ended."""
    digest = hashlib.sha256("\n".join([cluster, str(attempt), *sorted(pods)]).encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


@dataclass(slots=True)
class LaunchOutcome:
    """One planned launch and how it went: the instance, or the error and the cloud's refusals."""

    launch: Launch
    token: str
    instance: Instance | None = None
    error: str = ""
    refusals: tuple[Attempt, ...] = ()
    deferred: bool = False  # not sent: launches were backing off after throttling

    @property
    def capacity_failed(self) -> tuple[Offering, ...]:
        """The candidates that had no capacity."""
        return tuple(a.offering for a in self.refusals if a.refusal == Refusal.NO_CAPACITY)


class Launcher:
    """Launches a plan's nodes through the provider and records what the cloud said."""

    def __init__(
        self,
        provider: CloudProvider,
        availability: Availability,
        fleet: Fleet,
        metrics: Metrics,
        *,
        dry_run: bool = False,
    ) -> None:
        self.provider = provider
        self.availability = availability
        self.fleet = fleet
        self.metrics = metrics
        self.dry_run = dry_run
        self.retired_tokens: set[str] = set()
        # The digest of the node template nodes launched now get (autoscaler.core.disruption.drifted), as a label.
        self.node_template = ""

    def launch_all(
        self,
        launches: Sequence[Launch],
        cfg: Config,
        instances: Sequence[Instance],
        now: float,
        *,
        tokens: Sequence[str] = (),
    ) -> list[LaunchOutcome]:
        """Launch every node of ``launches`` in parallel (or say what would be launched, in a dry run);
        ``tokens``, when given, are their idempotency tokens (a replacement's, written down before)."""
        if not launches:
            return []
        if tokens:
            outcomes = [LaunchOutcome(la, t) for la, t in zip(launches, tokens, strict=True)]
        else:
            outcomes = self._with_tokens(launches, cfg, instances)
        if self.dry_run:
            for o in outcomes:
                off = o.launch.offering
                log.info(
                    "would_launch",
                    instance_type=off.instance_type,
                    zone=off.zone,
                    capacity_type=off.capacity_type,
                    price=off.price,
                    pods=len(o.launch.pods),
                )
                self.metrics.launch(off.instance_type, off.zone, off.capacity_type, "dry_run")
            return outcomes
        wait = self.availability.launch_backoff(now)
        if wait > 0:
            for o in outcomes:
                o.deferred = True
                o.error = f"launches are backing off after throttling; next try in {wait:.1f}s"
                off = o.launch.offering
                self.metrics.launch(off.instance_type, off.zone, off.capacity_type, "deferred")
            log.warning("launches_deferred", launches=len(outcomes), retry_in=round(wait, 1))
            return outcomes
        with ThreadPoolExecutor(
            max_workers=cfg.max_parallel_launches, thread_name_prefix="tidal-launch"
        ) as pool:
            learnt = _Round()
            list(pool.map(lambda o: self._launch_one(o, cfg, learnt), outcomes))
        for o in outcomes:
            if o.instance is not None:
                self.fleet.record_launch(o.token, o.launch.offering, o.launch.pods, o.instance, now)
                self.availability.succeeded(_launched_offering(o.launch, o.instance))
            if o.refusals:
                for bench in self.availability.refused(o.refusals, now):
                    log.info(
                        "offering_benched",
                        benched=bench.key,
                        refusal=bench.refusal.value,
                        seconds=round(bench.until - now, 1),
                        strikes=bench.strikes,
                        detail=bench.detail,
                    )
        return outcomes

    def _with_tokens(
        self, launches: Sequence[Launch], cfg: Config, instances: Sequence[Instance]
    ) -> list[LaunchOutcome]:
        # A token is reused on purpose while its instance is launching or its Node is not yet Ready, so that
        # the cloud deduplicates a launch planned twice. Once that Node is Ready (or the instance ended, or is
        # being reclaimed), a plan for the same pods is new demand: the node went to other pods, or away.
        ended = {i.launch_token for i in instances if i.state == "terminated"} | self.retired_tokens
        ended |= {
            m.instance.launch_token
            for m in self.fleet.members.values()
            if m.instance is not None and m.state in (State.READY, State.IDLE, State.DRAINING)
        }
        outcomes = []
        for la in launches:
            attempt = 0
            token = launch_token(cfg.cluster_name, la.pods, attempt)
            while token in ended:
                attempt += 1
                token = launch_token(cfg.cluster_name, la.pods, attempt)
            outcomes.append(LaunchOutcome(la, token))
        return outcomes

    def _launch_one(self, outcome: LaunchOutcome, cfg: Config, learnt: _Round) -> None:
        la = outcome.launch
        labels = {
            LABEL_MANAGED: "true",
            LABEL_CLUSTER: cfg.cluster_name,
            LABEL_LAUNCH_TOKEN: outcome.token,
            NODE_MODE: la.mode.value,
            **({TEMPLATE_LABEL: self.node_template} if self.node_template else {}),
            **cfg.node_labels,
        }
        tags = {
            LABEL_CLUSTER: cfg.cluster_name,
            LABEL_MANAGED: "true",
            LABEL_LAUNCH_TOKEN: outcome.token,
            **cfg.node_tags,
        }
        held = learnt.holds(la.candidates)
        candidates = tuple(o for o in la.candidates if o.available and o not in held)
        if la.candidates and (learnt.throttled or not candidates):
            # What the cloud said to a launch sent a moment ago, in this same round, stands for this one
            # too: nothing while it throttles, nothing a quota it refused covers. The round's fallback plan
            # (or the next reconcile) takes it from there.
            outcome.deferred = True
            outcome.error = (
                "held back: the cloud throttled launches a moment ago"
                if learnt.throttled
                else "held back: a quota the cloud refused a moment ago covers every candidate"
            )
            self.metrics.launch(
                la.offering.instance_type, la.offering.zone, la.offering.capacity_type, "deferred"
            )
            return
        # The GPU operator cuts or shares the node's GPUs as these labels say, from its first start on.
        layouts = {o.layout.labels if o.layout is not None else () for o in candidates}
        if len(layouts) == 1:
            labels.update(next(iter(layouts)))
        # Taints must be there when the kubelet registers, before any pod lands: send those every candidate
        # shares (the GPU taint on GPU offerings, AKS's spot taint on spot ones).
        shared = set.intersection(*(set(node_taints(o, cfg)) for o in candidates)) if candidates else set()
        taints = tuple(cfg.node_taints) + tuple(sorted(shared - set(cfg.node_taints), key=str))
        request = LaunchRequest(outcome.token, candidates, labels, taints, tags)
        o = la.offering
        try:
            outcome.instance = self.provider.launch(request)
        except LaunchFailed as err:
            outcome.error = str(err)
            outcome.refusals = err.attempts or _attempts_of(err, candidates)
            learnt.learn(outcome.refusals)
            self._failed(o, _outcome_of(err), err)
            for a in outcome.refusals:
                self.metrics.launch_refusal(self.provider.name, a.refusal.value)
            return
        except ProviderError as err:
            # Not an answer about the offerings (a transport failure, a setting the provider lacks): reported,
            # nothing benched; the next reconcile tries again.
            outcome.error = str(err)
            self._failed(o, "error", err)
            return
        inst = outcome.instance
        self.metrics.launch(inst.instance_type, inst.zone, inst.capacity_type, "success")
        log.info(
            "launched",
            instance=inst.id,
            instance_type=inst.instance_type,
            zone=inst.zone,
            capacity_type=inst.capacity_type,
            pods=len(la.pods),
            gang=la.gang or None,
            idempotency_token=outcome.token,
        )

    def _failed(self, o: Offering, outcome: str, err: Exception) -> None:
        self.metrics.launch(o.instance_type, o.zone, o.capacity_type, outcome)
        self.metrics.cloud_error(self.provider.name, "launch", type(err).__name__)
        log.warning(
            "launch_failed",
            instance_type=o.instance_type,
            zone=o.zone,
            capacity_type=o.capacity_type,
            outcome=outcome,
            error=str(err),
        )


class _Round:
    """What the cloud answered the launches of one round so far: the launches still to go hold back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.throttled = False
        self._quotas: list[QuotaScope] = []

    def learn(self, refusals: Sequence[Attempt]) -> None:
        with self._lock:
            for a in refusals:
                if a.refusal == Refusal.THROTTLED:
                    self.throttled = True
                elif a.refusal == Refusal.QUOTA and a.scope is not None:
                    self._quotas.append(a.scope)

    def holds(self, offerings: Sequence[Offering]) -> set[Offering]:
        """The offerings a quota refused in this round covers."""
        with self._lock:
            return {o for o in offerings if any(q.covers(o) for q in self._quotas)}


def _outcome_of(err: LaunchFailed) -> str:
    return next((label for kind, label in _OUTCOMES if isinstance(err, kind)), "error")


def _attempts_of(err: LaunchFailed, candidates: Sequence[Offering]) -> tuple[Attempt, ...]:
    """Refusals for an error that carries none (a provider written before the per-offering outcomes): what
    its type says, for every candidate it was asked to try (throttling once, for the whole API)."""
    if not candidates:
        return ()
    if isinstance(err, Throttled):
        return (Attempt(candidates[0], Refusal.THROTTLED, str(err), retry_after=err.retry_after),)
    if isinstance(err, QuotaExceeded):
        return tuple(Attempt(c, Refusal.QUOTA, str(err), err.scope) for c in candidates)
    kind = Refusal.OTHER
    if isinstance(err, CapacityUnavailable):
        kind = Refusal.NO_CAPACITY
    elif isinstance(err, InvalidRequest):
        kind = Refusal.INVALID
    return tuple(Attempt(c, kind, str(err)) for c in candidates)


def _launched_offering(la: Launch, inst: Instance) -> Offering:
    """The candidate the cloud picked (EC2 Fleet may take any of them)."""
    return next(
        (
            o
            for o in la.candidates
            if (o.instance_type, o.zone, o.capacity_type)
            == (inst.instance_type, inst.zone, inst.capacity_type)
            and (o.reservation.id if o.reservation is not None else "") == inst.reservation_id
        ),
        la.offering,
    )
