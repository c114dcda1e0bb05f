"""One VM insert, followed to its end: ``instances.insert`` with a requestId, then the zone operation.

The insert call only accepts the request; whether the zone had capacity is known when the zone operation is
``DONE`` (a stockout is an ``error.errors[].code`` of the operation, not an HTTP error). The operation is
polled with tidal's own ZoneOperationsClient (``ExtendedOperation.result()`` would poll the public endpoint
whatever endpoint the client was built with), at ``pollInterval``, until the launch's deadline
(``operationTimeout`` for all candidates of one launch together). An operation still running then yields a
:class:`Pending` insert: the launch answers ``pending`` at once, and :meth:`Launcher.follow_up` looks at
the operation once per later call, never waiting for it.

**requestIds.** ``requestId`` makes the insert idempotent: GCE answers a repeated insert with the same
requestId with the same operation instead of a second VM, which is what makes a retried insert (a lost
answer, a restart in the middle of a launch) safe. Each offering of a launch has its own chain of
requestIds, all derived from the launch token and the offering, so every replica and every restart computes
the same ones:

- the first attempt uses ``uuid5(token, offering)``;
- once an attempt is over without a VM (its operation failed, e.g. a stockout, or it succeeded and the VM
  has gone since), the next attempt uses ``uuid5(token, offering + "#after:" + that operation's name)``.

So a launch retried with the same token after a stockout does not get the old failed operation back
forever: it reaches GCE with a new requestId. A failure is remembered as soon as it is seen (in this
process); a restarted tidal learns it from GCE: an insert answered with an operation that is already
``DONE`` and failed was not started by that call (GCE answers a new insert with a ``PENDING`` or
``RUNNING`` operation), so the chain moves on, once per call, to keep a surprise from GCE from turning into
a burst of inserts.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import structlog
from google.api_core import exceptions as api_exceptions
from google.cloud import compute_v1

from autoscaler.cloud import ProviderError
from providers.gcp.bootstrap import LABEL_TOKEN
from providers.gcp.clients import ClientFactory
from providers.gcp.errors import CALL_ERRORS, api_error, operation_error

__all__ = ["MAX_ATTEMPTS", "Finished", "Launcher", "Pending", "request_id"]

log = structlog.get_logger("tidal.providers.gcp")
DONE = compute_v1.Operation.Status.DONE
MAX_ATTEMPTS = 8  # requestIds one call walks through for one offering before giving up
REMEMBERED = 6 * 3600.0  # seconds an attempt that ended is remembered (GCE keeps requestIds for a while)
PENDING_LIMIT = 3600.0  # seconds a still-running insert is followed before it is forgotten


def request_id(token: str, offering_key: str, after: str = "") -> str:
    """The insert's requestId for ``(launch token, offering)``; ``after`` is the name of the operation of
    the attempt that ended before this one ("" for the first attempt). A valid UUID, as GCE requires."""
    try:
        namespace = uuid.UUID(token)
    except ValueError:
        namespace = uuid.uuid5(uuid.NAMESPACE_URL, token)
    return str(uuid.uuid5(namespace, f"{offering_key}#after:{after}" if after else offering_key))


@dataclass(frozen=True, slots=True)
class Pending:
    """An insert whose operation was still running when its launch returned."""

    token: str
    offering_key: str
    zone: str
    instance: str  # the VM's name
    operation: str  # the zone operation's name
    request_id: str
    since: float  # monotonic


@dataclass(frozen=True, slots=True)
class Finished:
    """A pending insert whose operation is now DONE: ``error`` is None when the VM was created."""

    pending: Pending
    error: ProviderError | None


class Launcher:
    """Inserts VMs, waits (boundedly) for their zone operations, and follows the ones still running."""

    def __init__(
        self,
        factory: ClientFactory,
        project: str,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.factory = factory
        self.project = project
        self.monotonic = monotonic
        self.sleep = sleep
        self._ended: dict[str, tuple[str, float]] = {}  # requestId -> (its operation, when it ended)
        self._pending: dict[str, Pending] = {}  # by VM name
        self._lock = threading.Lock()

    # --- reads -----------------------------------------------------------------------------------------

    def get(self, zone: str, name: str) -> compute_v1.Instance | None:
        """The VM, or None when it does not exist."""
        try:
            return self.factory.compute().instances.get(
                project=self.project,
                zone=zone,
                instance=name,
                retry=self.factory.retry(),
                timeout=self.factory.timeout,
            )
        except api_exceptions.NotFound:
            return None
        except CALL_ERRORS as err:
            raise api_error(err, f"reading instance {name} in {zone}") from None

    def _operation(self, zone: str, name: str) -> compute_v1.Operation:
        try:
            return self.factory.compute().zone_operations.get(
                project=self.project,
                zone=zone,
                operation=name,
                retry=self.factory.retry(),
                timeout=self.factory.timeout,
            )
        except CALL_ERRORS as err:
            raise api_error(err, f"polling operation {name} in {zone}") from None

    def wait(
        self, operation: compute_v1.Operation, zone: str, deadline: float
    ) -> compute_v1.Operation | None:
        """Poll the zone operation until DONE (returned) or ``deadline`` (monotonic) passes (None)."""
        while operation.status != DONE:
            left = deadline - self.monotonic()
            if left <= 0:
                return None
            self.sleep(min(self.factory.poll_interval, left))
            operation = self._operation(zone, operation.name)
        return operation

    # --- the requestId chain ---------------------------------------------------------------------------

    def _remember(self, rid: str, operation: str) -> None:
        now = self.monotonic()
        with self._lock:
            self._ended[rid] = (operation, now)
            for key in [k for k, (_, at) in self._ended.items() if now - at > REMEMBERED]:
                del self._ended[key]

    def _next(self, token: str, offering_key: str, rid: str) -> tuple[str, bool]:
        """(the requestId to send, whether ``rid`` was skipped because its attempt is known to be over)."""
        with self._lock:
            ended = self._ended.get(rid)
        if ended is None:
            return rid, False
        return request_id(token, offering_key, after=ended[0]), True

    def _insert(
        self, body: compute_v1.Instance, zone: str, rid: str
    ) -> compute_v1.Operation | compute_v1.Instance:
        """``instances.insert``; the VM instead when one of that name with this launch's token exists."""
        what = f"creating {body.name} in {zone}"
        try:
            return self.factory.compute().instances.insert_unary(
                request=compute_v1.InsertInstanceRequest(
                    project=self.project, zone=zone, instance_resource=body, request_id=rid
                ),
                retry=self.factory.retry(),
                timeout=self.factory.timeout,
            )
        except api_exceptions.Conflict:
            existing = self.get(zone, body.name)
            if existing is not None and existing.labels.get(LABEL_TOKEN) == body.labels.get(LABEL_TOKEN):
                return existing  # created by an earlier call for this launch
            raise ProviderError(f"{what}: the name is taken by another instance") from None
        except CALL_ERRORS as err:
            raise api_error(err, what) from None

    def create(
        self,
        body: compute_v1.Instance,
        zone: str,
        *,
        token: str,
        offering_key: str,
        deadline: float,
    ) -> compute_v1.Instance | Pending:
        """Insert ``body`` and follow it until ``deadline``: the VM, or a :class:`Pending` insert.

        Raises NoCapacity, QuotaExceeded, Throttled or ProviderError as this attempt's insert or its
        operation failed.
        """
        what = f"creating {body.name} in {zone}"
        rid = request_id(token, offering_key)
        stale_skipped = False
        for _ in range(MAX_ATTEMPTS):
            rid, skipped = self._next(token, offering_key, rid)
            if skipped:
                continue
            operation = self._insert(body, zone, rid)
            if isinstance(operation, compute_v1.Instance):
                return operation
            fresh = operation.status != DONE
            log.info(
                "gcp_insert_accepted",
                instance=body.name,
                zone=zone,
                operation=operation.name,
                replayed=not fresh,
            )
            done = self.wait(operation, zone, deadline) if fresh else operation
            if done is None:
                log.info("gcp_insert_still_running", instance=body.name, zone=zone, operation=operation.name)
                pending = Pending(token, offering_key, zone, body.name, operation.name, rid, self.monotonic())
                with self._lock:
                    self._pending[body.name] = pending
                return pending
            failure = operation_error(done, what)
            if failure is not None:
                self._remember(rid, done.name)
                if fresh or stale_skipped:
                    raise failure
                # GCE answered with an operation that had failed before this call asked: an earlier
                # attempt's (from before a restart). This launch is a new attempt.
                stale_skipped = True
                log.info("gcp_insert_replayed_failure", instance=body.name, zone=zone, operation=done.name)
                continue
            vm = self.get(zone, body.name)
            if vm is not None:
                return vm
            # The operation of an earlier insert whose VM has since gone (GCE remembers requestIds for a
            # while): this launch needs a new VM, so a new requestId.
            self._remember(rid, done.name)
            log.info("gcp_insert_replayed_gone_instance", instance=body.name, zone=zone)
        raise ProviderError(f"{what}: {MAX_ATTEMPTS} inserts of this launch ended without a VM")

    # --- inserts still running ----------------------------------------------------------------------------

    def follow_up(self) -> list[Finished]:
        """Look once (no waiting) at every insert that was still running when its launch returned; the
        ones now DONE are returned and forgotten. A failed one ends its requestId's attempt."""
        with self._lock:
            pending = list(self._pending.values())
        finished: list[Finished] = []
        now = self.monotonic()
        for p in pending:
            try:
                operation = self.factory.compute().zone_operations.get(
                    project=self.project,
                    zone=p.zone,
                    operation=p.operation,
                    retry=self.factory.retry(),
                    timeout=self.factory.timeout,
                )
            except api_exceptions.NotFound:  # GCE no longer knows it: nothing more to learn
                self._forget(p)
                continue
            except CALL_ERRORS as err:
                if now - p.since > PENDING_LIMIT:
                    self._forget(p)
                log.info("gcp_pending_insert_unknown", instance=p.instance, error=str(api_error(err, "")))
                continue
            if operation.status != DONE:
                if now - p.since > PENDING_LIMIT:
                    self._forget(p)
                continue
            error = operation_error(operation, f"creating {p.instance} in {p.zone}")
            if error is not None:
                self._remember(p.request_id, operation.name)
            self._forget(p)
            finished.append(Finished(p, error))
        return finished

    def _forget(self, p: Pending) -> None:
        with self._lock:
            if self._pending.get(p.instance) == p:
                del self._pending[p.instance]

    def pending(self, token: str) -> list[Pending]:
        """Inserts of this launch token that are still being followed."""
        with self._lock:
            return [p for p in self._pending.values() if p.token == token]
