"""Answering ProvisioningRequests and CapacityBuffers after a reconcile: the status the plan decided, written
only when it changed, and a warning Event once for an object tidal does not serve.

An atomic request whose nodes were planned is answered ``Provisioned=True`` only when every launch planned
for it was accepted by the cloud; otherwise ``Provisioned=False`` (it is planned again next reconcile, and
whatever was launched for it is rolled back after ``gangLaunchTimeout`` like any gang's).
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from autoscaler.core.model import StatusCondition
from autoscaler.core.planning.planner import Plan
from autoscaler.runtime.kube.convert_requests import buffer_status, request_status
from autoscaler.runtime.launching import LaunchOutcome
from autoscaler.runtime.seams import RequestWrites, attempt

__all__ = ["Answers"]

log = structlog.get_logger("tidal.controller")


def _shape(conditions: Sequence[StatusCondition]) -> list[tuple[str, str, str, str]]:
    return sorted((c.type, c.status, c.reason, c.message) for c in conditions)


class Answers:
    """Writes what each plan says of the requests and buffers (nothing in a dry run: it logs instead)."""

    def __init__(self, writes: RequestWrites | None, *, dry_run: bool = False) -> None:
        self.writes = writes
        self.dry_run = dry_run
        self._warned: set[tuple[str, str]] = set()  # (kind, uid or key) already given an Event

    def write(self, decided: Plan, outcomes: Sequence[LaunchOutcome], now: float) -> int:
        """Write the answers of ``decided``; returns how many statuses were written (or would be)."""
        written = 0
        for a in decided.provisioning:
            pr = a.request
            if a.unsupported:
                self._warn(
                    "ProvisioningRequest",
                    pr.namespace,
                    pr.name,
                    pr.uid,
                    "UnsupportedProvisioningClass",
                    a.unsupported,
                )
                continue
            conditions = a.conditions
            if a.gang and not self._launched(decided, a.gang, outcomes):
                conditions = a.refused
            if _shape(conditions) == _shape(pr.conditions):
                continue
            log.info(
                "provisioning_request_answered",
                request=pr.key,
                conditions={c.type: f"{c.status}/{c.reason}" for c in conditions},
                messages={c.type: c.message for c in conditions if c not in pr.conditions},
            )
            written += 1
            if self.writes is not None and not self.dry_run:
                attempt(self.writes.request_status, pr, request_status(conditions, now))
        for b in decided.buffers:
            buffer = b.buffer
            if b.unsupported:
                self._warn(
                    "CapacityBuffer",
                    buffer.namespace,
                    buffer.name,
                    buffer.uid,
                    "UnsupportedProvisioningStrategy",
                    b.unsupported,
                )
                continue
            if not b.changed:
                continue
            log.info(
                "capacity_buffer_answered",
                buffer=buffer.key,
                replicas=b.replicas,
                conditions={c.type: f"{c.status}/{c.reason}" for c in b.conditions},
            )
            written += 1
            if self.writes is not None and not self.dry_run:
                status = buffer_status(
                    b.conditions, now, replicas=b.replicas, template=b.template, strategy=b.strategy
                )
                attempt(self.writes.buffer_status, buffer, status)
        return written

    @staticmethod
    def _launched(decided: Plan, gang: str, outcomes: Sequence[LaunchOutcome]) -> bool:
        """Every launch the plan made for ``gang`` was sent and accepted."""
        planned = {id(la) for la in decided.launch.launches if la.gang == gang}
        done = {id(o.launch) for o in outcomes if o.instance is not None and id(o.launch) in planned}
        return bool(planned) and done == planned

    def _warn(self, kind: str, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        key = (kind, uid or f"{namespace}/{name}")
        if key in self._warned:
            return
        self._warned.add(key)
        log.warning("not_served", kind=kind, object=f"{namespace}/{name}", reason=reason, detail=message)
        if self.writes is not None:
            self.writes.event(kind, namespace, name, uid, reason, message, "Warning")
