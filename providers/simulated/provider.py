"""SimulatedProvider: an in-memory (or file-shared) cloud that sells the offerings of a catalog CSV.

It behaves like a real provider where tidal can tell the difference: launches are idempotent by token and
fall back across candidates, capacity and quota failures raise the contract's errors, instances go
pending → running → (Node registered, Ready) → (GPUs allocatable) on a clock, and a terminated or reclaimed
instance's Node turns NotReady but stays until tidal deletes it. With ``spotInterruptionRate`` set, spot
instances get interruption notices at random (reproducibly for a seed) and are reclaimed after
``spotInterruptionNotice``, as a cloud does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

from autoscaler.cloud import (
    Attempt,
    InstanceNotFound,
    LateFailure,
    ProviderError,
    QuotaScope,
    Refusal,
    launch_failure,
)
from autoscaler.config.values import Config
from autoscaler.core.model import LABEL_CLUSTER, LABEL_LAUNCH_TOKEN, LABEL_MANAGED, SPOT
from autoscaler.core.offering import Instance, LaunchRequest, Offering
from autoscaler.runtime.catalog import with_templates
from providers.simulated.due import DueTimes
from providers.simulated.kubelets import Kubelets, describe_error, record_done
from providers.simulated.listing import Listing
from providers.simulated.node import NodeRegistrar
from providers.simulated.node_template import template_builder
from providers.simulated.reservations import BLOCK_RECLAIM, reservation_refusal, reserved_offerings
from providers.simulated.settings import (
    SECTION,
    CapacityRule,
    ProviderConfigError,
    SimulatedSection,
    load_catalog,
    parse_settings,
)
from providers.simulated.state import (
    PENDING,
    RUNNING,
    TERMINATED,
    CloudState,
    FileStore,
    InstanceRecord,
    MemoryStore,
    StateStore,
)

__all__ = ["TERMINATED_RETENTION", "SimulatedProvider"]

log = structlog.get_logger("tidal.providers.simulated")
LATE_KEPT = 1000  # refusals kept for poll_errors() between two calls

TERMINATED_RETENTION = 600.0  # seconds a terminated instance is still listed, as clouds do
MAX_CALLS = 10_000  # calls kept for assertions; the oldest half is dropped beyond this
CONTRACT_METHODS = ("offerings", "launch", "terminate", "instances")


class SimulatedProvider:
    """A CloudProvider whose offerings come from a catalog CSV and whose instances exist only here."""

    name = "simulated"
    settings_model = SimulatedSection  # the simulated: section's keys, for the configuration's JSON Schema

    def __init__(
        self,
        config: Config,
        *,
        clock: Callable[[], float] = time.time,
        kube: NodeRegistrar | None = None,
        kube_api_client: Any = None,
        seed: int = 0,
    ) -> None:
        """Check the ``simulated:`` section and read the catalog; :class:`ProviderConfigError` if unusable."""
        self.config = config
        self.settings = parse_settings(config.providers.get(SECTION) or {})
        catalog = load_catalog(self.settings, config)
        # Its nodes look like those of the cloud it stands in for (config.cloud), or like no cloud's.
        self._template = template_builder(config.cloud)
        self.catalog = dataclasses.replace(
            catalog, offerings=tuple(with_templates(catalog.offerings, self._template))
        )
        self.clock = clock
        self.seed = seed
        if kube is None and kube_api_client is not None:
            # How the daemon hands over its Kubernetes client through the provider registry.
            kube = NodeRegistrar(kube_api_client)
        self.kube = kube if self.settings.register_nodes else None
        self._kubelets = (
            None if self.kube is None else Kubelets(self.kube, config, self.catalog.region, self._template)
        )
        self.calls: list[tuple[str, str]] = []
        self._by_key: dict[str, Offering] = {}
        # The contract view of each listed instance, in listing order, changed only where an instance did:
        # clusters of thousands of nodes are listed several times a reconcile.
        self._listing = Listing(config.cluster_name)
        # Each launch token's instance, for one state object (the in-memory one): a launch looks its token up
        # rather than at every instance.
        self._tokens: tuple[CloudState, dict[str, str]] | None = None
        self._due_times = DueTimes()
        for offering in self.catalog.offerings:
            self._by_key.setdefault(offering.key, offering)
        self._store: StateStore = MemoryStore()
        if self.settings.state_file is not None:
            self._store = FileStore(self.settings.state_file)
            try:
                with self._store.transaction():
                    pass
            except ProviderError as err:
                raise ProviderConfigError([f"{SECTION}.stateFile: {err}"]) from None
        self._lock = threading.Lock()  # calls, injected errors, interruption notices
        self._kube_lock = threading.Lock()  # one thread at a time talks to the API server
        self._injected: dict[str, list[ProviderError]] = {}
        self._late: list[LateFailure] = []
        self._stopping = threading.Event()
        self._due = threading.Event()  # something changed that the cloud's thread should act on now
        self._thread: threading.Thread | None = None
        self._offerings_cache: tuple[str, list[Offering]] | None = None
        self._notices: list[str] = []
        self._noticed: set[str] = set()  # instances whose configured interruption notice went out
        if self.settings.register_nodes and kube is None:
            log.debug("simulated_nodes_not_registered", reason="no Kubernetes client given")

    # --- the provider contract -------------------------------------------------------------------------

    def offerings(self) -> list[Offering]:
        """Every catalog offering in the configured zones, ``available=False`` where capacity is failed, and
        an offering per reservation (until it ends) with its free count."""
        self._enter("offerings", "")
        with self._store.transaction() as state:
            reserved = self._reserved(state, self.clock())
            key = repr(state.capacity_rules) + repr(reserved)
            cached = self._offerings_cache
            if cached is not None and cached[0] == key:
                return cached[1]  # the same list while capacity is unchanged: planners may cache on it
            result = [
                o if self._has_capacity(state, o) else dataclasses.replace(o, available=False)
                for o in self.catalog.offerings
            ] + reserved
            self._offerings_cache = (key, result)
            return result

    def _reserved(self, state: CloudState, now: float) -> list[Offering]:
        # Reserved offerings are catalog ones with a reservation: their nodes are labelled for it.
        return with_templates(
            reserved_offerings(self.settings.reservations, self._by_key, state, now), self._template
        )

    def launch(self, request: LaunchRequest) -> Instance:
        """Launch on the first candidate with capacity (and quota); the same token returns the same instance."""
        keys = ",".join(o.key for o in request.offerings)
        self._enter("launch", f"token={request.token} offerings={keys}")
        if not request.token:
            raise ProviderError("launch request has no idempotency token")
        if not request.offerings:
            raise ProviderError(f"launch request {request.token} has no candidate offerings")
        unknown = [o.key for o in request.offerings if o.reservation is None and o.key not in self._by_key]
        if unknown:
            raise ProviderError(f"launch request {request.token}: not offered here: {', '.join(unknown)}")
        now = self.clock()
        quota = self.settings.quota_gpus
        with self._store.transaction() as state:
            tokens = self._token_index(state)
            repeated = state.instances.get(tokens.get(request.token, ""))
            if repeated is not None and repeated.token == request.token:
                log.info("launch_repeated", token=request.token, instance=repeated.id, state=repeated.state)
                return repeated.instance()
            gpus_in_use = (
                sum(r.offering.gpu_count for r in state.instances.values() if r.state != TERMINATED)
                if quota is not None
                else 0  # read only against a quota
            )
            refused: list[Attempt] = []
            reserved = {o.reservation.id: o for o in self._reserved(state, now) if o.reservation is not None}
            for candidate in request.offerings:
                if candidate.reservation is not None:
                    refusal = reservation_refusal(candidate, reserved.get(candidate.reservation.id), now)
                    if refusal is not None:
                        refused.append(refusal)
                        continue
                    offering = reserved[candidate.reservation.id]
                else:
                    offering = self._by_key[candidate.key]
                if not self._has_capacity(state, offering):
                    refused.append(Attempt(candidate, Refusal.NO_CAPACITY, "no capacity"))
                elif quota is not None and gpus_in_use + offering.gpu_count > quota:
                    detail = f"GPU quota of {quota} reached ({gpus_in_use} in use)"
                    refused.append(Attempt(candidate, Refusal.QUOTA, detail, self._quota_scope()))
                else:
                    record = self._new_record(state, request, offering, now)
                    state.instances[record.id] = record
                    tokens[record.token] = record.id
                    self._due_times.added(record)
                    self._listing.added(state, record)
                    passed_over = [LateFailure(request.token, a) for a in refused]
                    with self._lock:  # for poll_errors (the newest only, when nobody polls)
                        self._late = (self._late + passed_over)[-LATE_KEPT:]
                    log.info(
                        "instance_launched",
                        instance=record.id,
                        offering=offering.key,
                        token=request.token,
                        skipped=len(refused),
                    )
                    self._due.set()  # its kubelet need not wait for the next tick to register it
                    return record.instance()
        log.info(
            "launch_refused",
            token=request.token,
            offerings=keys,
            refusals=sorted({a.refusal.value for a in refused}),
        )
        over_quota = [a.offering.key for a in refused if a.refusal == Refusal.QUOTA]
        message = ""
        if over_quota:
            message = (
                f"GPU quota of {quota} reached ({gpus_in_use} in use); "
                f"{', '.join(over_quota)} would exceed it"
            )
        raise launch_failure(refused, message)

    def node_lead(self, offering: Offering) -> float:
        """Seconds from a launch call until the instance's Node is registered (and its GPUs reported): the
        configured delays, since its kubelet acts as soon as they pass."""
        s = self.settings
        return s.launch_delay + s.registration_delay + (s.gpu_ready_delay if offering.gpu_count else 0.0)

    def _token_index(self, state: CloudState) -> dict[str, str]:
        """This cluster's instances by launch token (the first of a token, as a look at each would find)."""
        known = self._tokens
        if known is not None and known[0] is state:
            return known[1]
        tokens: dict[str, str] = {}
        for record in state.instances.values():
            if record.cluster == self.config.cluster_name:
                tokens.setdefault(record.token, record.id)
        self._tokens = (state, tokens)
        return tokens

    def poll_errors(self) -> list[LateFailure]:
        """The candidates a launch passed over before one took (nothing fails after a simulated launch
        returned), each reported once."""
        with self._lock:
            late, self._late = self._late, []
        return late

    def _quota_scope(self) -> QuotaScope:
        """The simulated cloud's one quota: GPUs of any model in its region."""
        return QuotaScope("gpu", "GPUs", region=self.catalog.region, gpus_only=True)

    def terminate(self, instance: Instance) -> None:
        """Terminate (again: harmless); :class:`InstanceNotFound` once the cloud has forgotten the instance.
        The Node is left to tidal."""
        self._enter("terminate", instance.id)
        with self._store.transaction() as state:
            record = state.instances.get(instance.id)
            if record is None:
                raise InstanceNotFound(instance)
            if record.tags.get(LABEL_CLUSTER) != self.config.cluster_name:
                raise ProviderError(
                    f"instance {instance.id} belongs to cluster {record.tags.get(LABEL_CLUSTER)!r}, "
                    f"not {self.config.cluster_name!r}; not terminating it"
                )
            if record.state != TERMINATED:
                self._end(state, record, interrupted=False)

    def instances(self) -> list[Instance]:
        """Instances tagged with this cluster, in any state; terminated ones for 10 minutes."""
        self._enter("instances", "")
        with self._store.transaction() as state:
            return self._listing.of(state)

    def live_ids(self) -> set[str]:
        """The ids of :meth:`instances` not terminated, without building the list (the simulator asks before
        and after every reconcile which instances ended)."""
        self._enter("instances", "")
        with self._store.transaction() as state:
            return self._listing.live_ids(state)

    # --- test hooks ------------------------------------------------------------------------------------

    def fail_capacity(
        self, instance_type: str | None = None, zone: str | None = None, capacity_type: str | None = None
    ) -> None:
        """From now on offerings matching the pattern (None = any) have no capacity."""
        self._set_capacity(CapacityRule(instance_type, zone, capacity_type, has_capacity=False))

    def restore_capacity(
        self, instance_type: str | None = None, zone: str | None = None, capacity_type: str | None = None
    ) -> None:
        """From now on offerings matching the pattern have capacity again (config failures included)."""
        self._set_capacity(CapacityRule(instance_type, zone, capacity_type, has_capacity=True))

    def interrupt(self, instance_id: str) -> Instance:
        """Reclaim an instance as a spot interruption does: terminated now, its Node goes NotReady."""
        self.advance()
        with self._store.transaction() as state:
            record = state.instances.get(instance_id)
            if record is None:
                raise KeyError(f"no simulated instance {instance_id!r}")
            if record.state != TERMINATED:
                self._end(state, record, interrupted=True)
            return record.instance()

    def warn_interruption(self, instance_id: str) -> None:
        """Send a spot interruption notice (the two-minute warning) for an instance; it keeps running."""
        with self._lock:
            self._notices.append(instance_id)

    def interrupted_instances(self) -> list[Instance]:
        """Instances with an interruption notice since the last call (reading consumes the notices)."""
        self.advance()  # configured interruptions due by now send their notices first
        with self._lock:
            ids, self._notices = self._notices, []
        if not ids:
            return []
        live = {i.id: i for i in self.instances() if i.state != "terminated"}
        return [live[i] for i in ids if i in live]

    def inject_error(self, method: str, error: ProviderError, count: int = 1) -> None:
        """Make the next ``count`` calls of a contract method raise ``error`` (e.g. ``Throttled(2.0)``)."""
        if method not in CONTRACT_METHODS:
            raise ValueError(f"{method!r} is not one of {', '.join(CONTRACT_METHODS)}")
        with self._lock:
            self._injected.setdefault(method, []).extend([error] * count)

    # --- time ------------------------------------------------------------------------------------------

    def advance(self) -> None:
        """Move time-based state to ``clock()``: pending → running, Node registration, GPUs, NotReady."""
        now = self.clock()
        kubelets = self._kubelets
        due = self._due_times
        with self._store.transaction() as state:
            touched: list[InstanceRecord] | None = None
            if self.settings.spot_interruption_rate <= 0 and due.knows(state):
                # Only the instances something is due for by now, and those launched or ended since.
                touched = due.take_due(state, now)
                for one in touched:
                    self._progress_one(state, one, now)
            else:
                self._progress(state, now)
                self._interrupt_spot(state, now)
            work = kubelets.due(state, now, touched) if kubelets is not None else []
            if not work:
                self._settle(state, now, touched)
        if kubelets is None or not work:
            return
        if not self._kube_lock.acquire(blocking=False):
            due.forget()
            return  # another thread is already talking to the API server; it or the next advance will do it
        try:
            done = [(action, record.id) for action, record in work if kubelets.step(action, record, now)]
        finally:
            self._kube_lock.release()
        with self._store.transaction() as state:
            for action, instance_id in done:
                if (record := state.instances.get(instance_id)) is not None:
                    record_done(record, action, now)
            if len(done) == len(work):
                self._settle(state, now, touched)
            else:
                due.forget()  # a write failed: the next advance tries it again

    def _settle(self, state: CloudState, now: float, touched: list[InstanceRecord] | None) -> None:
        """After a pass over every instance (``touched`` None) or over the touched ones: when anything is
        next due."""
        if touched is None:
            self._due_times.settle(state, now, TERMINATED_RETENTION)
        else:
            self._due_times.include(state, touched, now, TERMINATED_RETENTION)

    def start(self, interval: float = 0.2) -> None:
        """Run :meth:`advance` every ``interval`` seconds in a daemon thread (for the live daemon)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stopping.clear()
        self._thread = threading.Thread(
            target=self._run, args=(interval,), name="simulated-cloud", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread started by :meth:`start` and wait for it."""
        self._stopping.set()
        self._due.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    # --- internals -------------------------------------------------------------------------------------

    def _enter(self, method: str, summary: str) -> None:
        with self._lock:
            self.calls.append((method, summary))
            if len(self.calls) > MAX_CALLS:  # a long-running daemon must not grow without bound
                del self.calls[: MAX_CALLS // 2]
        self.advance()
        with self._lock:
            queued = self._injected.get(method)
            error = queued.pop(0) if queued else None
        if error is not None:
            log.info("injected_error", method=method, error=type(error).__name__)
            raise error

    def _has_capacity(self, state: CloudState, offering: Offering) -> bool:
        verdict = True
        for rule in (*self.settings.capacity_failures, *state.capacity_rules):
            if rule.matches(offering):
                verdict = rule.has_capacity
        return verdict

    def _set_capacity(self, rule: CapacityRule) -> None:
        self.advance()
        with self._store.transaction() as state:
            state.set_capacity(rule)
        log.info("capacity_changed", offerings=rule.describe(), has_capacity=rule.has_capacity)

    def _new_record(
        self, state: CloudState, request: LaunchRequest, offering: Offering, now: float
    ) -> InstanceRecord:
        while True:
            state.counter += 1
            digest = hashlib.sha256(f"{self.seed}:{state.counter}".encode()).hexdigest()
            instance_id = f"sim-{digest[:8]}"
            if instance_id not in state.instances:
                break
        settings = self.settings
        tags = {
            **request.tags,
            LABEL_CLUSTER: self.config.cluster_name,
            LABEL_MANAGED: "true",
            LABEL_LAUNCH_TOKEN: request.token,
        }
        return InstanceRecord(
            id=instance_id,
            cluster=self.config.cluster_name,
            token=request.token,
            offering=offering,
            created=now,
            running_at=now + settings.launch_delay,
            register_at=now + settings.launch_delay + settings.registration_delay,
            gpu_ready_delay=settings.gpu_ready_delay,
            tags=tags,
            labels=dict(request.labels),
            taints=tuple(request.taints),
            state=RUNNING if settings.launch_delay <= 0 else PENDING,
        )

    def _end(self, state: CloudState, record: InstanceRecord, *, interrupted: bool) -> None:
        record.state = TERMINATED
        record.terminated_at = self.clock()
        record.interrupted = interrupted
        self._due_times.touch(record)
        self._listing.changed(state, record)
        log.info("instance_terminated", instance=record.id, interrupted=interrupted)

    def _progress(self, state: CloudState, now: float) -> None:
        for record in list(state.instances.values()):
            self._progress_one(state, record, now)

    def _progress_one(self, state: CloudState, record: InstanceRecord, now: float) -> None:
        r = record.offering.reservation
        if (
            record.state != TERMINATED
            and r is not None
            and r.block
            and r.end is not None
            and now >= r.end - BLOCK_RECLAIM
        ):
            log.info("capacity_block_reclaimed", instance=record.id, reservation=r.id)
            self._end(state, record, interrupted=False)
        if record.state == PENDING and now >= record.running_at:
            record.state = RUNNING
            self._listing.changed(state, record)
            log.info("instance_running", instance=record.id)
        elif record.terminated_at is not None and now - record.terminated_at >= TERMINATED_RETENTION:
            del state.instances[record.id]
            self._listing.forgotten(state, record)
            log.debug("instance_forgotten", instance=record.id)

    def interruption_notice_at(self, record: InstanceRecord) -> float | None:
        """When ``spotInterruptionRate`` sends this instance its notice (None: never). The same for a seed and
        an instance whatever the polling pattern: drawn from both, counted from when it started running."""
        rate = self.settings.spot_interruption_rate
        if rate <= 0 or record.offering.capacity_type != SPOT:
            return None
        draw = random.Random(f"{self.seed}:{record.id}").expovariate(rate / 3600.0)
        return record.running_at + draw

    def _interrupt_spot(self, state: CloudState, now: float) -> None:
        """Configured spot interruptions: the notice when its time comes, the reclaim a notice period later."""
        if self.settings.spot_interruption_rate <= 0:
            return
        for record in list(state.instances.values()):
            if record.state != RUNNING or record.cluster != self.config.cluster_name:
                continue
            notice_at = self.interruption_notice_at(record)
            if notice_at is None or now < notice_at:
                continue
            with self._lock:
                first = record.id not in self._noticed
                if first:
                    self._noticed.add(record.id)
                    self._notices.append(record.id)
            if first:
                log.info(
                    "spot_interruption_notice",
                    instance=record.id,
                    reclaim_in=self.settings.spot_interruption_notice,
                )
            if now >= notice_at + self.settings.spot_interruption_notice:
                self._end(state, record, interrupted=True)

    def _run(self, interval: float) -> None:
        while not self._stopping.is_set():
            self._due.wait(interval)
            self._due.clear()
            if self._stopping.is_set():
                return
            try:
                self.advance()
            except Exception as err:  # keep the simulated cloud running; the next tick tries again
                log.warning("simulated_advance_failed", error=describe_error(err))
