"""GcpProvider (``cloud: gcp``): GKE nodes from the cheapest Spot and on-demand Compute Engine offerings.

Offerings are every machine type of the configured zones (and N1 + attachable GPU combinations), priced from
the Cloud Billing Catalog (or the fallback files); launches are VMs built from a GKE node pool's instance
template, so they join the cluster as nodes; ownership is GCE labels. See docs/gcp.md.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog
from google.api_core import exceptions as api_exceptions
from google.auth.credentials import Credentials
from google.cloud import compute_v1

from autoscaler.cloud import (
    Attempt,
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
from autoscaler.core.model import RESERVED, CapacityType, InstanceState
from autoscaler.core.new_nodes import node_labels as offering_node_labels
from autoscaler.core.offering import Instance, LaunchRequest, Offering
from autoscaler.runtime.catalog import with_templates
from providers.gcp.bootstrap import LABEL_CLUSTER, LABEL_TOKEN, gce_label
from providers.gcp.cache import Refreshing
from providers.gcp.clients import ClientFactory
from providers.gcp.errors import CALL_ERRORS, GceQuotaExceeded, GceRefusal, NoCapacity, api_error
from providers.gcp.fallback import load_fallback
from providers.gcp.inventory import Inventory, instance_from_gce, provider_id
from providers.gcp.launch import Finished, Launcher, Pending
from providers.gcp.node_template import node_template
from providers.gcp.nodes import instance_name, launch_labels, template_arch
from providers.gcp.pricing import PriceBook, fetch_price_book
from providers.gcp.quota import quota_scope
from providers.gcp.reservations import GceReservation, by_key, fetch_reservations, reserved_offering, selected
from providers.gcp.settings import SECTION, GcpSection, parse_settings
from providers.gcp.shapes import Shape, fetch_shapes, fetch_zones
from providers.gcp.template import build_instance, fetch_template

__all__ = ["TEMPLATE_REFRESH", "GcpProvider"]

log = structlog.get_logger("tidal.providers.gcp")
LATE_KEPT = 1000  # refusals kept for poll_errors() between two calls
TEMPLATE_REFRESH = 300.0  # node pool upgrades replace the template; look again this often
RETRY_AFTER = 60.0  # after a failed refresh, seconds before the cloud is asked again
RESERVATION_REFRESH = 60.0  # free counts change with every launch, tidal's or anyone's


class GcpProvider:
    """A CloudProvider for Compute Engine VMs that join a GKE cluster."""

    name = "gcp"
    settings_model = GcpSection  # the gcp: section's keys, for the configuration's JSON Schema

    def __init__(
        self,
        config: Config,
        *,
        clock: Callable[[], float] = time.time,
        kube_api_client: Any = None,
        credentials: Credentials | None = None,
        factory: ClientFactory | None = None,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        launching: bool | None = None,
    ) -> None:
        """Check the ``gcp:`` section (ProviderConfigError) and build the clients.

        ``kube_api_client`` is accepted for the provider registry and unused: GKE nodes register themselves.
        ``launching``: whether this provider is built to launch nodes (by default, when built by the daemon,
        which passes ``kube_api_client``). Built only to list offerings (``tidal catalog``) it needs no
        instance template, node pool or zones (it lists the region's zones), and :meth:`launch` refuses,
        saying what is missing.
        """
        if launching is None:
            launching = kube_api_client is not None
        self.config = config
        self.settings = s = parse_settings(config.providers.get(SECTION) or {}, config, launching=launching)
        self.zones = tuple(config.zones)
        # A fallback file is checked before credentials are looked for, once the zones are known.
        fallback = (
            load_fallback(s.catalog_fallback, s.gpu_price_fallback, region=config.region, zones=self.zones)
            if self.zones
            else None
        )
        self.factory = factory or ClientFactory(
            endpoint=s.endpoint,
            billing_endpoint=s.billing_endpoint,
            credentials=credentials,
            timeout=s.request_timeout,
            retry_deadline=s.request_timeout,
            poll_interval=s.poll_interval,
            operation_timeout=s.operation_timeout,
        )
        self.factory.compute()  # fail at start, not at the first launch, when there are no credentials
        self.clock = clock
        interval = s.price_refresh_interval
        if fallback is None:
            # Listing offerings without configured zones: those of the region, as GCE lists them.
            self.zones = fetch_zones(self.factory, s.project, config.region)
            fallback = load_fallback(
                s.catalog_fallback, s.gpu_price_fallback, region=config.region, zones=self.zones
            )
        self.fallback = fallback
        self._shapes = Refreshing(
            "machine types",
            lambda: fetch_shapes(self.factory, s.project, self.zones),
            interval=interval,
            retry_after=RETRY_AFTER,
        )
        self._prices = Refreshing(
            "billing prices",
            lambda: fetch_price_book(self.factory, config.region),
            interval=interval,
            retry_after=min(interval, RETRY_AFTER * 5),
        )
        self._template = Refreshing(
            "instance template",
            lambda: fetch_template(self.factory, s.project, self.zones, s.template, s.node_pool),
            interval=TEMPLATE_REFRESH,
            retry_after=RETRY_AFTER / 2,
        )
        self._reservations = Refreshing(
            "reservations",
            lambda: fetch_reservations(self.factory, s.project, self.zones),
            interval=RESERVATION_REFRESH,
            retry_after=RETRY_AFTER,
        )
        self._missing: list[str] = []
        if s.reservations and RESERVED not in config.capacity_types:
            log.warning(
                "gcp_reservations_unused_by_default",
                capacity_types=list(config.capacity_types),
                consequence="only pods whose instance-offerings annotation lists reserved, or that name a "
                "reservation, run in gcp.reservations; add reserved to capacityTypes",
            )
        self._priced: dict[tuple[str, str, str], float] = {}
        self._pending: dict[str, tuple[Instance, Offering]] = {}  # VM name -> launch answered pending
        self._late: list[LateFailure] = []  # failures found since poll_errors() last asked
        self._lock = threading.Lock()
        self.inventory = Inventory(
            factory=self.factory,
            project=s.project,
            cluster=config.cluster_name,
            clock=clock,
            price=self._price_of,
        )
        self.launcher = Launcher(self.factory, s.project, sleep=sleep, monotonic=monotonic)
        self.monotonic = monotonic

    # --- the provider contract -------------------------------------------------------------------------

    def offerings(self) -> list[Offering]:
        """Every priced (shape, zone, capacity type), priced from billing, else from the fallback files."""
        self._follow_up()
        now = self.clock()
        shapes = self._get(self._shapes, now)
        book: PriceBook | None = None
        try:
            book = self._prices.get(now)
        except Exception:  # reported once per attempt by the cache; the fallback files take over
            log.warning(
                "gcp_billing_unavailable", error=self._prices.last_error, fallback=bool(self.fallback)
            )
        out = []
        for shape in shapes:
            for capacity_type in ("on-demand", "spot"):
                offering = self._offering(shape, capacity_type, book)
                if offering is not None:  # no SKU and no fallback price: the planner cannot weigh it
                    out.append(offering)
        if not out:
            raise ProviderError(
                f"no priced offerings in {', '.join(self.zones)}: billing catalog: "
                f"{self._prices.last_error or 'no matching SKUs'}; set {SECTION}.catalogFallback to price "
                "from a file"
            )
        out = with_templates(out + self._reserved(out, now), node_template)
        with self._lock:
            self._priced = {(o.instance_type, o.zone, o.capacity_type): o.price for o in out}
        return out

    def launch(self, request: LaunchRequest) -> Instance:
        """Launch one VM from the first candidate GCE has capacity for; the same token never makes two.

        All candidates together wait at most ``operationTimeout`` for their insert operations; a launch
        whose operation is still running then answers ``pending`` (see :meth:`_follow_up`)."""
        if not request.token or not request.offerings:
            raise ProviderError("a launch request needs a token and at least one candidate offering")
        if self.settings.launch_problems:
            raise ProviderError(f"cannot launch: {'; '.join(self.settings.launch_problems)}")
        self._follow_up()
        existing = [
            i for i in self.inventory.find({LABEL_TOKEN: gce_label(request.token)}) if i.state != "terminated"
        ]
        if existing:
            log.info("gcp_launch_repeated", idempotency_token=request.token, instance=existing[0].id)
            return existing[0]
        deadline = self.monotonic() + self.settings.operation_timeout
        template = self._get(self._template, self.clock())
        arch = template_arch(template)
        shapes = {(sh.name, sh.zone): sh for sh in self._get(self._shapes, self.clock())}
        refused: list[Attempt] = []
        skipped: list[str] = []
        for offering in request.offerings:
            shape = shapes.get((offering.instance_type, offering.zone))
            if shape is None or shape.arch != arch:
                why = "not offered in the zone" if shape is None else f"template is {arch.value}"
                skipped.append(f"{offering.key} ({why})")
                continue
            if any(a.scope is not None and a.scope.covers(offering) for a in refused):
                continue  # a quota refused earlier in this launch covers it: asking again would be refused
            try:
                launched = self._launch_one(request, offering, shape, template, deadline)
            except ProviderError as err:
                attempt = self._attempt(offering, err, shapes.values())
                if attempt is None:  # GCE never answered (a connection failed): nothing learnt
                    if refused:
                        raise launch_failure(refused, f"{launch_failure(refused)}; then: {err}") from None
                    raise
                log.info(
                    "gcp_launch_refused",
                    offering=offering.key,
                    refusal=attempt.refusal.value,
                    idempotency_token=request.token,
                    error=attempt.detail,
                )
                refused.append(attempt)
                if attempt.refusal in (Refusal.THROTTLED, Refusal.OTHER):
                    break  # the API itself refuses: the next candidates would only be refused the same way
                continue
            self._passed_over(request.token, refused)
            return launched
        if refused:
            raise launch_failure(refused)
        raise ProviderError(f"no candidate could be launched: {'; '.join(skipped)}")

    def poll_errors(self) -> list[LateFailure]:
        """Inserts that answered ``pending`` and whose zone operation has failed since (a stockout, a quota),
        and the candidates a launch passed over before one took, each reported once."""
        self._follow_up()
        with self._lock:
            late, self._late = self._late, []
        return late

    def terminate(self, instance: Instance) -> None:
        """Delete the VM (without waiting for it to stop); :class:`InstanceNotFound` when it is already gone."""
        owner = instance.tags.get(LABEL_CLUSTER)
        if owner is not None and owner != self.inventory.cluster:
            raise ProviderError(f"instance {instance.id} belongs to cluster {owner!r}; not deleting it")
        try:
            self.factory.compute().instances.delete_unary(
                request=compute_v1.DeleteInstanceRequest(
                    project=self.settings.project, zone=instance.zone, instance=instance.id
                ),
                retry=self.factory.retry(),
                timeout=self.factory.timeout,
            )
        except api_exceptions.NotFound:
            raise InstanceNotFound(
                instance, f"instance {instance.id} in {instance.zone} does not exist"
            ) from None
        except CALL_ERRORS as err:
            raise api_error(err, f"deleting instance {instance.id} in {instance.zone}") from None
        log.info("gcp_instance_deleting", instance=instance.id, zone=instance.zone)

    def instances(self) -> list[Instance]:
        """Owned VMs in every zone and state; preempted (vanished) ones, and launches whose insert failed
        after they answered ``pending``, reported as terminated for a while."""
        self._follow_up()
        return self.inventory.owned()

    def stop(self) -> None:
        """Close the clients' HTTP sessions (the daemon calls this at shutdown)."""
        self.factory.close()

    # --- internals -------------------------------------------------------------------------------------

    def _get(self, cache: Refreshing[Any], now: float) -> Any:
        try:
            return cache.get(now)
        except ProviderError:
            raise
        except Exception as err:  # a failure outside the API (transport, DNS) is still a provider failure
            raise ProviderError(f"{cache.what}: {cache.last_error or type(err).__name__}") from None

    def _offering(self, shape: Shape, capacity_type: str, book: PriceBook | None) -> Offering | None:
        price = book.price(shape, capacity_type) if book is not None else None
        source = book.source if book is not None else ""
        if price is None:
            found = self.fallback.price(shape, capacity_type)
            if found is None:
                return None
            price, source = found
        gpu = shape.gpu
        return Offering(
            instance_type=shape.name,
            zone=shape.zone,
            capacity_type=CapacityType(capacity_type),
            vcpu=shape.vcpu,
            memory_mib=shape.memory_mib,
            price=price,
            gpu_count=shape.gpu_count if gpu else 0,
            gpu_model=gpu.model if gpu else "",
            gpu_vendor="NVIDIA" if gpu else "",
            gpu_memory_mib=gpu.memory_mib if gpu else 0,
            gpu_fraction=float(shape.gpu_count) if gpu else 0.0,
            arch=shape.arch,
            max_pods=self.config.max_pods_per_node,
            region=self.config.region,
            price_source=source,
        )

    def _reserved(self, offerings: list[Offering], now: float) -> list[Offering]:
        """An offering per reservation of ``gcp.reservations`` that is ready; a name listed in no configured
        zone is said once. While reservations cannot be read, none is offered (the failure is logged)."""
        names = self.settings.reservations
        if not names:
            return []
        try:
            found: list[GceReservation] = self._reservations.get(now)
        except Exception:  # reported by the cache; plan without reservations until they can be read
            log.warning("gcp_reservations_unavailable", error=self._reservations.last_error)
            return []
        chosen, missing = selected(found, names)
        if missing != self._missing:
            self._missing = missing
            if missing:
                log.warning(
                    "gcp_reservations_not_found",
                    names=missing,
                    problem=f"{SECTION}.reservations: {', '.join(missing)} not found in zones "
                    f"{', '.join(self.zones)} of project {self.settings.project}",
                )
        bases = by_key(offerings)
        out = []
        for r in chosen:
            base = bases.get((r.instance_type, r.zone))
            if base is None:
                log.debug("gcp_reservation_unused", reservation=r.name, reason="machine not offered here")
                continue
            out.append(reserved_offering(r, base))
        return out

    def _passed_over(self, token: str, refused: list[Attempt]) -> None:
        """A launch succeeded after GCE refused earlier candidates: those refusals are news all the same."""
        if refused:
            with self._lock:
                self._late += [LateFailure(token, a) for a in refused]
                del self._late[:-LATE_KEPT]  # nobody polling (a tool, not the daemon): keep the newest

    def _attempt(self, offering: Offering, err: ProviderError, shapes: Any) -> Attempt | None:
        """What an insert's failure says about ``offering`` (None: GCE never answered)."""
        detail = str(err)
        if isinstance(err, NoCapacity):
            return Attempt(offering, Refusal.NO_CAPACITY, detail)
        if isinstance(err, GceQuotaExceeded):
            scope = quota_scope(err.metric, err.region or self.config.region, shapes)
            return Attempt(offering, Refusal.QUOTA, detail, scope)
        if isinstance(err, QuotaExceeded):
            return Attempt(offering, Refusal.QUOTA, detail)
        if isinstance(err, Throttled):
            return Attempt(offering, Refusal.THROTTLED, detail, retry_after=err.retry_after)
        if isinstance(err, InvalidRequest):
            return Attempt(offering, Refusal.INVALID, detail)
        if isinstance(err, GceRefusal):
            return Attempt(offering, Refusal.OTHER, detail)
        return None

    def _follow_up(self) -> None:
        """Look (without waiting) at launches that answered ``pending``: a failure found now is queued for
        :meth:`poll_errors` (the controller benches the offering, or the quota's scope), and the launch is
        reported as terminated so its pods are planned again."""
        try:
            finished = self.launcher.follow_up()
        except ProviderError as err:  # reported; the next call looks again
            log.warning("gcp_follow_up_failed", error=str(err))
            return
        for done in finished:
            self._finished(done)

    def _finished(self, done: Finished) -> None:
        with self._lock:
            found = self._pending.pop(done.pending.instance, None)
        if found is None or done.error is None:
            return
        instance, offering = found
        shapes = self._shapes.value or ()
        attempt = self._attempt(offering, done.error, shapes) or Attempt(
            offering, Refusal.OTHER, str(done.error)
        )
        with self._lock:
            self._late.append(LateFailure(instance.launch_token, attempt, instance))
            del self._late[:-LATE_KEPT]  # nobody polling (a tool, not the daemon): keep the newest
        self.inventory.ended(instance)
        log.warning(
            "gcp_launch_failed_later",
            instance=instance.id,
            offering=offering.key,
            refusal=attempt.refusal.value,
            idempotency_token=instance.launch_token,
            error=str(done.error),
        )

    def _price_of(self, instance_type: str, zone: str, capacity_type: str) -> float:
        with self._lock:
            priced = bool(self._priced)
        if not priced:  # a restart lists instances before anything asked for offerings
            with contextlib.suppress(ProviderError):
                self.offerings()
        with self._lock:
            return self._priced.get((instance_type, zone, capacity_type), 0.0)

    def _launch_one(
        self,
        request: LaunchRequest,
        offering: Offering,
        shape: Shape,
        template: compute_v1.InstanceTemplate,
        deadline: float,
    ) -> Instance:
        name = instance_name(self.config.cluster_name, request.token)
        gce, node = launch_labels(
            template,
            request,
            offering,
            offering_node_labels(offering, self.config),
            cluster=self.config.cluster_name,
            driver=self.settings.gpu_driver_version,
        )
        body = build_instance(
            template,
            project=self.settings.project,
            name=name,
            shape=shape,
            offering=offering,
            gce_labels=gce,
            node_labels=node,
            taints=request.taints,
        )
        vm = self.launcher.create(
            body, shape.zone, token=request.token, offering_key=offering.key, deadline=deadline
        )
        if not isinstance(vm, Pending):
            instance = instance_from_gce(vm, self.settings.project, self._price_of)
        else:
            instance = Instance(
                id=name,
                provider_id=provider_id(self.settings.project, shape.zone, name),
                instance_type=offering.instance_type,
                zone=shape.zone,
                capacity_type=offering.capacity_type,
                state=InstanceState.PENDING,
                launch_token=request.token,
                created=self.clock(),
                price=offering.price,
                gpu_count=offering.gpu_count,
                tags=gce,
                reservation_id=offering.reservation.id if offering.reservation is not None else "",
            )
            with self._lock:
                self._pending[name] = (instance, offering)
        log.info(
            "gcp_launched",
            instance=name,
            offering=offering.key,
            idempotency_token=request.token,
            state=instance.state,
        )
        return instance
