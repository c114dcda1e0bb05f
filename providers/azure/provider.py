"""AzureProvider: AKS nodes from node-pool scale sets, priced by the Retail Prices API.

``offerings()`` joins Resource SKUs (shapes, zones, restrictions), the configured scale sets and prices.
``launch()`` tries the candidates cheapest first, grows the chosen scale set (or creates a VM in a Flexible
one) and gives the operation a short grace (``azure.operationWait``) to report a capacity error, so that the
next candidate is tried in the same call. An operation still running then is not waited for: the launch
answers ``pending``, the SDK's poller keeps following it in its own thread, and later ``offerings()`` and
``instances()`` calls look at the poller without waiting. A failure found that way is reported once by
``poll_errors()``, so the controller benches the offering (or the quota's scope). Other writes (tag rewrites,
``delete_instances``, VM deletes) are sent and not waited for at all: the next listing shows how they went.
Idempotency is by launch token (scale-set tags for Uniform sets, VM names and tags for Flexible ones); see
``ledger`` and docs/azure.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog
from azure.core.exceptions import AzureError, HttpResponseError

from autoscaler.cloud import (
    Attempt,
    CapacityUnavailable,
    InstanceNotFound,
    InvalidRequest,
    LateFailure,
    ProviderError,
    QuotaExceeded,
    Refusal,
    Throttled,
    launch_failure,
)
from autoscaler.config.values import Config
from autoscaler.core.model import ON_DEMAND, RESERVED, SPOT, InstanceState
from autoscaler.core.offering import Instance, LaunchRequest, Offering
from autoscaler.runtime.catalog import with_templates
from providers.azure import clients
from providers.azure.arm import ArmCompute
from providers.azure.clients import ClientOptions, RetailPricesClient
from providers.azure.errors import ArmQuotaExceeded, classify
from providers.azure.flexible import FlexiblePools
from providers.azure.node_template import node_template
from providers.azure.permissions import LinkWarnings
from providers.azure.prices import Prices, fallback_prices, prices_from_items
from providers.azure.quota import quota_scope, sku_scope
from providers.azure.reservations import ReservationGroups
from providers.azure.resources import ScaleSet
from providers.azure.settings import SECTION, AzureSection, parse_settings
from providers.azure.skus import VmShape, shapes_from_skus
from providers.azure.targets import LaunchTarget, every_size_targets, make_offerings, plan_targets
from providers.azure.template import copy_body, is_copy_of
from providers.azure.uniform import LIVE, PoolSettings, UniformPools

__all__ = ["AzureProvider"]

log = structlog.get_logger("tidal.providers.azure")
LATE_KEPT = 1000  # refusals kept for poll_errors() between two calls

TERMINATED_RETENTION = 600.0  # seconds an ended instance stays listed as terminated, as clouds do
SCAN_REUSE = 15.0  # a launch may trust an instance listing this recent for its idempotency check
OfferingKey = tuple[str, str, str]


class AzureProvider:
    """A CloudProvider for AKS: grows node-pool scale sets, deletes exactly the instances it drained."""

    name = "azure"
    settings_model = AzureSection  # the azure: section's keys, for the configuration's JSON Schema

    def __init__(
        self,
        config: Config,
        *,
        clock: Callable[[], float] = time.time,
        kube_api_client: Any = None,
        credential: Any = None,
        connection_verify: bool | str = True,
        polling_interval: float = 5.0,
        connect_retries: int = 3,
        client: Any = None,
        launching: bool | None = None,
    ) -> None:
        """Check the ``azure:`` section (ProviderConfigError lists every problem) and build the clients.

        ``launching``: whether this provider is built to launch nodes (by default, when built by the daemon,
        which passes ``kube_api_client``). Built only to list offerings (``tidal catalog``) it needs no
        resource group or scale sets (then every VM size of the region is listed), and :meth:`launch`
        refuses, saying what is missing.

        ``credential`` defaults to Workload Identity / DefaultAzureCredential; ``connection_verify`` is a CA
        bundle for a private endpoint; ``polling_interval`` is the LRO poll interval when ARM sends no
        Retry-After; ``connect_retries`` is how often a refused or dropped connection is retried;
        ``client`` replaces the ComputeManagementClient the factory would build. AKS registers the nodes
        itself, so ``kube_api_client`` is not used.
        """
        if launching is None:
            launching = kube_api_client is not None
        self.config = config
        self.settings = parse_settings(config.providers.get(SECTION) or {}, config, launching=launching)
        self.clock = clock
        self.options = ClientOptions(
            connection_verify=connection_verify,
            polling_interval=polling_interval,
            connect_retries=connect_retries,
        )
        s = self.settings
        if client is None:
            credential = credential if credential is not None else clients.default_credential()
            client = clients.compute_client(s.subscription_id, s.endpoint, credential, self.options)
        self.arm = ArmCompute(client, s.subscription_id, s.resource_group)
        self.retail = RetailPricesClient(s.prices_endpoint, self.options)
        self.prices = Prices(
            lambda: prices_from_items(self.retail.vm_items(config.region), config.region),
            refresh_interval=s.price_refresh_interval,
            fallback=fallback_prices(s.fallback_offerings),
            fallback_name=s.catalog_fallback.name if s.catalog_fallback else "",
            clock=clock,
        )
        pools = PoolSettings(
            cluster=config.cluster_name,
            region=config.region,
            subscription=s.subscription_id,
            resource_group=s.resource_group,
            wait=s.operation_wait,
            retention=TERMINATED_RETENTION,
            pending_timeout=config.registration_timeout,
        )
        self.uniform = UniformPools(self.arm, pools, clock, self._describe)
        self.flexible = FlexiblePools(self.arm, pools, clock, self._describe)
        self._lock = threading.Lock()
        self._targets: dict[OfferingKey, LaunchTarget] = {}
        self._shapes: dict[str, VmShape] = {}
        self._offers: dict[OfferingKey, Offering] = {}
        self._late: list[LateFailure] = []  # failures found since poll_errors() last asked
        self._inflight: dict[str, tuple[Any, Offering]] = {}
        self._recent: dict[str, tuple[Instance, float]] = {}
        self._scan: tuple[float, list[Instance]] | None = None
        self._flex_live: dict[str, Instance] = {}
        self._flex_gone: dict[str, tuple[Instance, float]] = {}
        self.links = LinkWarnings()
        self._reserved_targets: dict[str, LaunchTarget] = {}
        self._reservation_ids: dict[tuple[str, str, str], str] = {}
        self.reservation_groups = ReservationGroups(
            self.arm, s.capacity_reservation_groups, region=config.region, resource_group=s.resource_group
        )
        self.flexible.reservation_of = self._reservation_of
        if s.capacity_reservation_groups and RESERVED not in config.capacity_types:
            log.warning(
                "azure_capacity_reservations_unused_by_default",
                capacity_types=list(config.capacity_types),
                consequence="only pods whose instance-offerings annotation lists reserved, or that name a "
                "reservation, run in azure.capacityReservationGroups; add reserved to capacityTypes",
            )

    # --- offerings -------------------------------------------------------------------------------------

    def offerings(self) -> list[Offering]:
        """Every (size, zone, capacity type) a configured scale set can launch, priced, with availability,
        each with the node template of an AKS node of it."""
        return with_templates(self._offerings(), node_template)

    def _offerings(self) -> list[Offering]:
        self._collect_inflight()
        location = self.config.region
        try:
            shapes = shapes_from_skus(self.arm.skus(location), location)
            every_size = self.settings.every_size or not self.settings.resource_group
            scale_sets: dict[str, ScaleSet | None] = (
                {} if every_size else {ss.name: ss for ss in self.arm.scale_sets()}
            )
        except AzureError as err:
            error = classify(err, what="reading Resource SKUs and scale sets")
            if not self.settings.fallback_offerings:
                raise error from None
            log.warning("azure_offerings_from_catalog", error=str(error))
            return self._catalog_offerings()
        # Listing offerings with no scale set to grow: every size of the region, in every zone it has.
        targets = (
            every_size_targets(shapes) if every_size else plan_targets(self.settings, scale_sets, shapes)
        )
        linked = sorted({t.template or t.scale_set for t in targets})
        self.links.check((name, ss.raw) for name in linked if (ss := scale_sets.get(name)) is not None)
        offerings, by_key = make_offerings(
            targets,
            shapes,
            self.prices.book(),
            region=location,
            max_pods=self.config.max_pods_per_node,
            zones=self.config.zones,
        )
        reserved, reserved_targets = self.reservation_groups.offerings(targets, offerings)
        offerings += reserved
        with self._lock:
            self._targets, self._shapes = by_key, shapes
            self._offers = {(o.instance_type, o.zone, o.capacity_type): o for o in offerings}
            self._reserved_targets = reserved_targets
            self._reservation_ids = {
                (o.reservation.name, o.instance_type, o.zone): o.reservation.id
                for o in reserved
                if o.reservation is not None
            }
        log.info("azure_offerings", offerings=len(offerings), targets=len(targets), sizes=len(shapes))
        return offerings

    def _reservation_of(self, group: str, size: str, zone: str) -> str:
        with self._lock:
            return self._reservation_ids.get((group, size, zone), "")

    def _catalog_offerings(self) -> list[Offering]:
        """Offerings from the catalog file when ARM cannot be read: prices shown as coming from it."""
        s = self.settings
        with self._lock:  # the scale sets' priorities as last read, else what the section suggests
            wanted = {(t.size, t.capacity_type) for t in self._targets.values()}
        wanted = wanted or (
            {(size, ON_DEMAND) for size in s.scale_sets} | {(size, SPOT) for size in s.spot_scale_sets}
        )
        name = s.catalog_fallback.name if s.catalog_fallback else ""
        return [
            dataclasses.replace(o, price_source=f"catalog file {name} (Azure Resource Manager unavailable)")
            for o in s.fallback_offerings
            if s.template_scale_set or (o.instance_type, o.capacity_type) in wanted
        ]

    def _describe(self, size: str, zone: str, capacity_type: str) -> tuple[float, int]:
        with self._lock:
            offer = self._offers.get((size, zone, capacity_type)) or next(
                (o for k, o in self._offers.items() if k[0] == size and k[2] == capacity_type), None
            )
            shape = self._shapes.get(size)
        gpus = shape.gpu.count if shape is not None and shape.gpu is not None else 0
        return (offer.price if offer else 0.0), (offer.gpu_count if offer else gpus)

    def _attempt(self, offering: Offering, err: ProviderError) -> Attempt | None:
        """What a failed launch on ``offering`` says about it (None: not an answer about the offering)."""
        detail = str(err)
        if isinstance(err, CapacityUnavailable):
            return Attempt(offering, Refusal.NO_CAPACITY, detail)
        if isinstance(err, ArmQuotaExceeded):
            region = self.config.region
            with self._lock:
                shapes = dict(self._shapes)
            scope = (
                sku_scope(err.detail, offering, region)
                if err.sku_restricted
                else quota_scope(err.detail, offering, shapes, region)
            )
            return Attempt(offering, Refusal.QUOTA, detail, scope)
        if isinstance(err, QuotaExceeded):
            return Attempt(offering, Refusal.QUOTA, detail)
        if isinstance(err, Throttled):
            return Attempt(offering, Refusal.THROTTLED, detail, retry_after=err.retry_after)
        if isinstance(err, InvalidRequest):
            return Attempt(offering, Refusal.INVALID, detail)
        return None

    # --- launch ----------------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> Instance:
        """Launch one node on the first candidate with capacity; the same token never makes a second one."""
        if not request.token:
            raise ProviderError("launch request has no idempotency token")
        if not request.offerings:
            raise ProviderError(f"launch request {request.token} has no candidate offerings")
        if self.settings.launch_problems:
            raise ProviderError(f"cannot launch: {'; '.join(self.settings.launch_problems)}")
        existing = self._live(request.token)
        if existing is not None:
            log.info(
                "azure_launch_repeated",
                idempotency_token=request.token,
                instance=existing.id,
                state=existing.state,
            )
            return existing
        if not self._targets:
            self.offerings()
        refused: list[Attempt] = []
        unknown: list[str] = []
        for candidate in request.offerings:
            key = (candidate.instance_type, candidate.zone, candidate.capacity_type)
            with self._lock:
                target = (
                    self._reserved_targets.get(candidate.key)
                    if candidate.reservation is not None
                    else self._targets.get(key)
                )
            if target is None:
                unknown.append(candidate.key)
                continue
            if any(a.scope is not None and a.scope.covers(candidate) for a in refused):
                continue  # a quota refused earlier in this launch covers it: asking again would be refused
            try:
                instance, poller = self._launch_on(target, candidate, request)
            except ProviderError as err:
                attempt = self._attempt(candidate, err)
                if attempt is None:
                    if refused:
                        raise launch_failure(refused, f"{launch_failure(refused)}; then: {err}") from None
                    raise
                log.info(
                    "azure_launch_refused",
                    offering=candidate.key,
                    refusal=attempt.refusal.value,
                    idempotency_token=request.token,
                    error=attempt.detail,
                )
                refused.append(attempt)
                if attempt.refusal == Refusal.THROTTLED:
                    break  # ARM throttles the subscription's writes: every other candidate would wait too
                continue
            with self._lock:
                self._recent[request.token] = (instance, self.clock())
                if poller is not None:
                    self._inflight[request.token] = (poller, candidate)
                # Candidates passed over before this one took are news all the same.
                self._late += [LateFailure(request.token, a) for a in refused]
                del self._late[:-LATE_KEPT]  # nobody polling (a tool, not the daemon): keep the newest
            log.info("azure_launched", instance=instance.id, offering=candidate.key, state=instance.state)
            return instance
        if refused:
            raise launch_failure(refused)
        raise ProviderError(f"launch {request.token}: no configured scale set offers {', '.join(unknown)}")

    def poll_errors(self) -> list[LateFailure]:
        """Launches that answered ``pending`` and whose long-running operation has failed since
        (AllocationFailed, a quota), and the candidates a launch passed over before one took, each reported
        once."""
        self._collect_inflight()
        with self._lock:
            late, self._late = self._late, []
        return late

    def _launch_on(
        self, target: LaunchTarget, offering: Offering, request: LaunchRequest
    ) -> tuple[Instance, Any]:
        if target.flexible:
            ss = self._scale_set(target.scale_set)
            return self.flexible.launch(ss, offering, request.tags, request.token)
        if target.template:
            self._ensure_copy(target, offering)
        return self.uniform.launch(target.scale_set, offering, request.token)

    def _scale_set(self, name: str) -> ScaleSet:
        try:
            ss = self.arm.scale_set(name)
        except HttpResponseError as err:
            raise classify(err, what=f"reading scale set {name}") from None
        if ss is None:
            raise ProviderError(f"scale set {name} does not exist in {self.settings.resource_group}")
        return ss

    def _ensure_copy(self, target: LaunchTarget, offering: Offering) -> None:
        """Create the template copy for ``target`` unless it exists (same name, so retries are harmless)."""
        with self.uniform.lock(target.scale_set):
            try:
                if self.arm.scale_set(target.scale_set) is not None:
                    return
                body = copy_body(self._scale_set(target.template), target, self.config.cluster_name)
                poller = self.arm.create_scale_set(target.scale_set, body)
                poller.wait(timeout=self.uniform.settings.wait)
            except HttpResponseError as err:
                raise classify(
                    err, [offering], what=f"copying {target.template} to {target.scale_set}"
                ) from None
            if not poller.done():
                raise ProviderError(f"scale set {target.scale_set} is still being created; will retry")
            log.info("azure_template_copied", template=target.template, scale_set=target.scale_set)

    def _live(self, token: str) -> Instance | None:
        with self._lock:
            recent = self._recent.get(token)
            scanned_at = self._scan[0] if self._scan else float("-inf")
        if recent is not None and recent[1] >= scanned_at and recent[0].state in LIVE:
            return recent[0]
        listing = (
            self._scan[1] if self._scan and self.clock() - scanned_at <= SCAN_REUSE else self.instances()
        )
        return next((i for i in listing if i.launch_token == token and i.state in LIVE), None)

    # --- instances -------------------------------------------------------------------------------------

    def instances(self) -> list[Instance]:
        """Every instance this cluster's tidal launched, in any state (ended ones for a while)."""
        self._collect_inflight()
        now = self.clock()
        try:
            managed = [ss for ss in self.arm.scale_sets() if self._managed(ss)]
            found: list[Instance] = []
            flexible: list[Instance] = []
            for ss in managed:
                if ss.flexible:
                    vms = self.arm.flexible_vms(ss.name)
                    flexible += self.flexible.owned(vms)
                    if any(v.provisioning.lower() == "failed" for v in vms):
                        self.flexible.clean_up(vms)
                else:
                    by_id = {
                        int(v.instance_id): v
                        for v in self.arm.uniform_vms(ss.name)
                        if v.instance_id.isdigit()
                    }
                    found += self.uniform.owned(ss, by_id)
                    if ss.provisioning.lower() != "updating" and self.uniform.untidy(ss, by_id):
                        self.uniform.clean_up(ss.name)
        except HttpResponseError as err:
            raise classify(err, what="listing scale sets and their VMs") from None
        found += flexible + self._vanished(flexible, now)
        found.sort(key=lambda i: (i.created, i.id))
        self._collect_inflight(ended={i.launch_token for i in found if i.state == "terminated"})
        with self._lock:
            self._scan = (now, found)
        return found

    def _managed(self, ss: ScaleSet) -> bool:
        s = self.settings
        if ss.name in s.scale_set_names():
            return ss.flexible or ss.name != s.template_scale_set
        return bool(s.template_scale_set) and is_copy_of(
            ss, s.template_scale_set or "", self.config.cluster_name
        )

    def _vanished(self, flexible: list[Instance], now: float) -> list[Instance]:
        """Flexible VMs that disappeared without tidal deleting them (Spot eviction with Delete), as
        terminated for a while: a Uniform set remembers them in its tags, a Flexible one cannot."""
        with self._lock:
            present = {i.provider_id: i for i in flexible}
            for pid, inst in self._flex_live.items():
                if pid not in present and pid not in self._flex_gone:
                    self._flex_gone[pid] = (dataclasses.replace(inst, state=InstanceState.TERMINATED), now)
            self._flex_live = {p: i for p, i in present.items() if i.state in LIVE}
            for pid in list(self._flex_gone):
                if pid in present or now - self._flex_gone[pid][1] > TERMINATED_RETENTION:
                    del self._flex_gone[pid]
            return [inst for inst, _ in self._flex_gone.values()]

    def _collect_inflight(self, ended: set[str] | frozenset[str] = frozenset()) -> None:
        """Launches that answered ``pending``: a failure found since is queued for :meth:`poll_errors`. For
        launches the listing already shows ended, give their pollers (together) at most the grace to report
        why."""
        with self._lock:
            waiting = [p for t, (p, _) in self._inflight.items() if t in ended and not p.done()]
        deadline = time.monotonic() + self.settings.operation_wait
        for poller in waiting:
            with contextlib.suppress(HttpResponseError):  # the error is read below, with the others
                poller.wait(timeout=max(0.0, deadline - time.monotonic()))
        with self._lock:
            done = [(t, p, o) for t, (p, o) in self._inflight.items() if p.done()]
            for token, _, _ in done:
                del self._inflight[token]
            self._recent = {
                t: v for t, v in self._recent.items() if self.clock() - v[1] < TERMINATED_RETENTION
            }
        for token, poller, offering in done:
            try:
                poller.result(timeout=0)
            except HttpResponseError as err:
                error = classify(err, [offering])
                attempt = self._attempt(offering, error) or Attempt(offering, Refusal.OTHER, str(error))
                with self._lock:
                    recent = self._recent.get(token)
                    self._late.append(LateFailure(token, attempt, recent[0] if recent else None))
                    del self._late[:-LATE_KEPT]  # nobody polling (a tool, not the daemon): keep the newest
                log.warning(
                    "azure_launch_failed_later",
                    idempotency_token=token,
                    offering=offering.key,
                    refusal=attempt.refusal.value,
                    error=str(error),
                )

    # --- terminate -------------------------------------------------------------------------------------

    def terminate(self, instance: Instance) -> None:
        """Delete exactly ``instance`` (``delete_instances`` on its scale set, or its VM); again is harmless
        while it is being deleted; :class:`InstanceNotFound` once it is gone."""
        name, _, key = instance.id.partition("/")
        if not name or not key:
            raise ProviderError(
                f"{instance.id!r} is not an Azure instance id of tidal's (scale-set/instance)"
            )
        try:
            ss = self.arm.scale_set(name)
        except HttpResponseError as err:
            raise classify(err, what=f"reading scale set {name}") from None
        if ss is None:
            raise InstanceNotFound(instance, f"scale set {name} of {instance.id} does not exist")
        if not self._managed(ss):
            raise ProviderError(f"scale set {name} is not one tidal manages; not deleting {instance.id}")
        if ss.flexible:
            found = self.flexible.terminate(ss, key)
        else:
            found = self.uniform.terminate(name, key, instance.launch_token)
        with self._lock:
            self._scan = None
            self._recent.pop(instance.launch_token, None)
        if not found:
            raise InstanceNotFound(instance)
