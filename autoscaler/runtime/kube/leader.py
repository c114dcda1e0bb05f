"""Leader election on a ``coordination.k8s.io/v1`` Lease, with optimistic concurrency.

Written directly on the Lease API rather than with ``kubernetes.leaderelection``: that module builds its API
client from the global default configuration, has no release, and cannot be stepped one round at a time in
tests. Every write is a replace carrying the lease's resourceVersion, so of two replicas racing for the same
lease exactly one wins and the other gets 409.

Expiry follows client-go: a lease held by someone else counts as expired only when its ``renewTime`` plus
``leaseDurationSeconds`` lies in the past *and* this replica has itself watched the record stay unchanged for a
whole lease duration. The second half makes a standby whose clock runs ahead wait instead of taking over a
lease that is still being renewed; a released lease (no holder) is taken at once.

Not leading is never silent: why (the Lease's namespace does not exist, RBAC refuses the Lease, another
identity holds it) is logged at warning whenever it changes and kept in :meth:`LeaderElector.state`, which
``/readyz``, the status ConfigMap and ``tidal run --once`` report.
"""

from __future__ import annotations

import copy
import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import kubernetes.client
import structlog
from kubernetes.client.exceptions import ApiException

from autoscaler.runtime.kube.client import KubeClient, api_error_message
from autoscaler.runtime.kube.convert import parse_time
from autoscaler.runtime.status import Leadership

__all__ = ["LeaderElector", "micro_time"]

log = structlog.get_logger(__name__)


def micro_time(epoch: float) -> str:
    """Epoch seconds as a Kubernetes ``MicroTime`` (RFC 3339 with microseconds, UTC)."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """One replica's side of the election for the Lease ``namespace/name``.

    ``on_started_leading`` and ``on_stopped_leading`` run on the electing thread and must return quickly.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float,
        renew_deadline: float,
        retry_period: float,
        clock: Callable[[], float] = time.time,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
    ) -> None:
        if not identity:
            raise ValueError("identity: must not be empty")
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError(
                f"need 0 < retry_period ({retry_period}) < renew_deadline ({renew_deadline}) "
                f"< lease_duration ({lease_duration})"
            )
        self._client = client
        self._api = client.api(kubernetes.client.CoordinationV1Api)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._clock = clock
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._lock = threading.RLock()
        # One round at a time: the electing thread and a caller of its own (`tidal run --once`) would
        # otherwise both read "no lease", both create it, and the one answered 409 would think another
        # replica holds what this very replica just took.
        self._round = threading.Lock()
        self._leader = False
        self._last_renew = 0.0
        # The lease record as last seen (by resourceVersion) and when this replica first saw it.
        self._observed_rv = ""
        self._observed_at = 0.0
        self.observed_holder = ""
        self._reason = "not tried yet"  # why this replica does not lead (while it does not)

    @property
    def lease(self) -> str:
        """``namespace/name`` of the Lease."""
        return f"{self.namespace}/{self.name}"

    def state(self) -> Leadership:
        """Whether this replica leads, and if not, why."""
        leading = self.is_leader()
        with self._lock:
            reason, holder = ("", self.identity) if leading else (self._reason, self.observed_holder)
        return Leadership(leading, self.lease, self.identity, reason, holder)

    def _not_leading(self, reason: str) -> None:
        """Remember why this replica does not lead; say so at warning whenever the reason changes."""
        with self._lock:
            changed, self._reason = reason != self._reason, reason
        if changed:
            log.warning("not leading", lease=self.lease, identity=self.identity, reason=reason)

    # --- state -------------------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        """True while this replica holds a lease it renewed within ``renew_deadline``."""
        with self._lock:
            overdue = self._leader and self._clock() - self._last_renew > self.renew_deadline
        if overdue:
            self._step_down("renew deadline passed")
        with self._lock:
            return self._leader

    def _become_leader(self, now: float) -> None:
        with self._lock:
            self._last_renew = now
            self._reason = ""
            if self._leader:
                return
            self._leader = True
        log.info("became leader", lease=f"{self.namespace}/{self.name}", identity=self.identity)
        self._callback(self._on_started, "on_started_leading")

    def _step_down(self, why: str) -> None:
        with self._lock:
            if not self._leader:
                return
            self._leader = False
        log.warning(
            "stopped leading", lease=f"{self.namespace}/{self.name}", identity=self.identity, reason=why
        )
        self._callback(self._on_stopped, "on_stopped_leading")

    @staticmethod
    def _callback(fn: Callable[[], None] | None, which: str) -> None:
        if fn is None:
            return
        try:
            fn()
        except Exception:
            log.exception("leader election callback failed", callback=which)

    # --- one round -----------------------------------------------------------------------------------------

    def _spec(self, now: float, previous: dict[str, Any]) -> dict[str, Any]:
        ours = previous.get("holderIdentity") == self.identity
        transitions = int(previous.get("leaseTransitions") or 0)
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)),
            "acquireTime": previous.get("acquireTime") if ours else micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions if ours or not previous else transitions + 1,
        }

    def _failed(self, now: float, why: str) -> bool:
        """A round that could not write the lease: keep leading until the renew deadline, then stop."""
        with self._lock:
            leader = self._leader
        if leader and now - self._last_renew > self.renew_deadline:
            self._step_down(why)
        elif leader:
            log.warning("lease renewal failed, retrying", lease=f"{self.namespace}/{self.name}", reason=why)
        leading = self.is_leader()
        if not leading:
            self._not_leading(why)
        return leading

    def _refusal(self, exc: ApiException, verb: str, where: str) -> str:
        """Why a Lease call was refused, in the words an operator needs."""
        message = api_error_message(exc)
        if exc.status == 403:
            return f"RBAC refuses to {verb} {where}: {message}"
        if exc.status == 404 and verb == "create":
            return f"namespace {self.namespace!r} does not exist ({message})"
        return f"{verb} {where}: HTTP {exc.status}: {message}"

    def _held_by_other(self, lease: dict[str, Any], now: float) -> bool:
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        rv = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        if rv != self._observed_rv:
            self._observed_rv, self._observed_at = rv, now
        self.observed_holder = holder
        if not holder or holder == self.identity:
            return False
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        try:
            renewed = parse_time(spec.get("renewTime")) or 0.0
        except ValueError:
            renewed = 0.0
        record_expired = renewed + duration < now
        seen_stale = now - self._observed_at > duration
        return not (record_expired and seen_stale)

    def try_acquire_or_renew(self) -> bool:
        """One round: create, take over or renew the lease. Returns whether this replica now leads."""
        with self._round:
            return self._round_once()

    def _round_once(self) -> bool:
        now = self._clock()
        where = f"lease {self.namespace}/{self.name}"
        try:
            lease = self._client.call(self._api.read_namespaced_lease, self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                return self._failed(now, self._refusal(exc, "read", where))
            lease = None
        except Exception as exc:
            return self._failed(now, f"read {where}: {type(exc).__name__}")
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now, {}),
            }
            return self._write(now, where, self._api.create_namespaced_lease, self.namespace, body)
        if self._held_by_other(lease, now):
            # Someone else holds a fresh lease: even a replica that thought it led must stop now.
            self._step_down(f"lease held by {self.observed_holder}")
            self._not_leading(f"held by {self.observed_holder}")
            return False
        body = copy.deepcopy(lease)
        body["spec"] = self._spec(now, lease.get("spec") or {})
        return self._write(now, where, self._api.replace_namespaced_lease, self.name, self.namespace, body)

    def _write(self, now: float, where: str, fn: Callable[..., Any], *args: Any) -> bool:
        verb = "create" if fn == self._api.create_namespaced_lease else "update"
        try:
            written = self._client.call(fn, *args)
        except ApiException as exc:
            if exc.status == 409:
                # Another replica wrote the lease after we read it: it won this round.
                self._step_down("lost the lease in a concurrent update")
                self._not_leading("another replica took the lease in a concurrent update")
                return False
            return self._failed(now, self._refusal(exc, verb, where))
        except Exception as exc:
            return self._failed(now, f"write {where}: {type(exc).__name__}")
        with self._lock:
            self._observed_rv = str(((written or {}).get("metadata") or {}).get("resourceVersion") or "")
            self._observed_at = now
            self.observed_holder = self.identity
        self._become_leader(now)
        return True

    # --- loop and shutdown ---------------------------------------------------------------------------------

    def run(self, stop_event: threading.Event) -> None:
        """Try every ``retry_period`` until ``stop_event`` is set, then release the lease if held."""
        while not stop_event.is_set():
            try:
                self.try_acquire_or_renew()
            except Exception:  # a bug in one round must not end the election
                log.exception("leader election round failed", lease=f"{self.namespace}/{self.name}")
            stop_event.wait(self.retry_period)
        self.release()

    def start(self, stop_event: threading.Event) -> threading.Thread:
        """Run :meth:`run` in a daemon thread and return it."""
        thread = threading.Thread(target=self.run, args=(stop_event,), name="leader-election", daemon=True)
        thread.start()
        return thread

    def release(self) -> None:
        """Give the lease up (no holder, 1 s duration) so a standby takes over at once; never raises."""
        with self._lock:
            was_leader = self._leader
        if not was_leader:
            return
        self._step_down("released")
        now = self._clock()
        try:
            lease = self._client.call(self._api.read_namespaced_lease, self.name, self.namespace)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            lease["spec"] = {
                **spec,
                "holderIdentity": None,
                "leaseDurationSeconds": 1,
                "renewTime": micro_time(now),
                "acquireTime": micro_time(now),
            }
            self._client.call(self._api.replace_namespaced_lease, self.name, self.namespace, lease)
            log.info("lease released", lease=f"{self.namespace}/{self.name}", identity=self.identity)
        except Exception as exc:
            reason = api_error_message(exc) if isinstance(exc, ApiException) else type(exc).__name__
            log.warning("lease release failed", lease=f"{self.namespace}/{self.name}", error=reason)
