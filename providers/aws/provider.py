"""AwsProvider: EKS worker nodes from EC2 offerings, launched one instant EC2 Fleet request per node.

Ownership lives in instance tags (``tidal.dev/cluster``, ``tidal.dev/launch-token``), so a restarted tidal
finds everything it launched, and a launch repeated with the same token returns the instance it already made.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import botocore.exceptions
import structlog

from autoscaler.cloud import (
    Attempt,
    InstanceNotFound,
    LateFailure,
    ProviderError,
    Refusal,
    Throttled,
    launch_failure,
)
from autoscaler.config.values import Config
from autoscaler.core.model import LABEL_CLUSTER, LABEL_LAUNCH_TOKEN, LABEL_MANAGED, RESERVED
from autoscaler.core.offering import Instance, LaunchRequest, Offering
from autoscaler.runtime.catalog import CatalogError
from providers.aws.clients import ClientFactory, ClientOptions
from providers.aws.errors import (
    CAPACITY_CODES,
    INVALID_CODES,
    QUOTA_CODES,
    ApiGuard,
    describe,
    error_code,
    provider_error,
    refusal,
)
from providers.aws.fleet import (
    MAX_CANDIDATES,
    FleetAttempt,
    FleetOutcome,
    client_token,
    fleet_request,
    offerings_named,
    plan_attempts,
    read_fleet_response,
)
from providers.aws.instances import Ec2Instances, provider_id
from providers.aws.interruptions import SpotInterruptionQueue
from providers.aws.launch_template import LaunchTemplates
from providers.aws.offerings import OfferingSource
from providers.aws.pricing import CatalogFallback, NoRowsForRegion
from providers.aws.reservations import reservation_refusal, run_request
from providers.aws.settings import SECTION, AwsConfigError, AwsSection, AwsSettings, parse_settings
from providers.aws.tokens import SpentTokens

__all__ = ["AwsProvider", "load_settings", "provider_id"]

log = structlog.get_logger("tidal.providers.aws")
LATE_KEPT = 1000  # refusals kept for poll_errors() between two calls

_GONE = frozenset({"InvalidInstanceID.NotFound"})
_ID_FILTER_LIMIT = 200
_TOKEN_MISMATCH = "IdempotentParameterMismatch"
_TOKEN_MISMATCHES = 4  # client tokens tried per CreateFleet attempt before giving up


def load_settings(config: Config, *, launching: bool = True) -> tuple[AwsSettings, CatalogFallback | None]:
    """The ``aws:`` section and its catalog file; :class:`AwsConfigError` lists every problem in one line.

    ``launching=False`` is for listing offerings only: subnets and a launch template may be missing, and a
    catalog file without rows for the region is left unused (``catalog_fallback_unused`` says why).
    """
    errors: list[str] = []
    settings: AwsSettings | None = None
    raw = config.providers.get(SECTION) or {}
    try:
        settings = parse_settings(raw, config)
    except AwsConfigError as err:
        errors.extend(err.errors)
    if settings is not None and launching:
        errors.extend(settings.launch_problems)
    fallback = None
    path = settings.catalog_fallback if settings is not None else None
    if path is not None and settings is not None:
        try:
            fallback = CatalogFallback.load(path, region=config.region, max_pods=config.max_pods_per_node)
        except NoRowsForRegion as err:
            if launching:
                errors.append(f"{SECTION}.catalogFallback: {err}")
            else:
                unused = f"{SECTION}.catalogFallback {path} has no rows for region {config.region!r}"
                settings = replace(settings, catalog_fallback_unused=unused)
        except CatalogError as err:
            errors.append(f"{SECTION}.catalogFallback: {err}")
    if errors or settings is None:
        raise AwsConfigError(errors)
    return settings, fallback


class AwsProvider:
    """The CloudProvider for ``cloud: aws``."""

    name = "aws"
    settings_model = AwsSection  # the aws: section's keys, for the configuration's JSON Schema

    def __init__(
        self,
        config: Config,
        *,
        clock: Callable[[], float] = time.time,
        kube_api_client: Any = None,
        client_options: ClientOptions | None = None,
        session_factory: Callable[[], Any] | None = None,
        rng: random.Random | None = None,
        launching: bool | None = None,
    ) -> None:
        """Check the ``aws:`` section (nothing is called on AWS until the first contract call).

        ``launching``: whether this provider is built to launch nodes, so that subnets and a launch template
        missing from the section are an error at once. By default it is when built by the daemon (which
        passes ``kube_api_client``, otherwise unused: EKS nodes register themselves); built for listing
        offerings (``tidal catalog``) only the region is needed, and :meth:`launch` says what is missing.
        """
        if launching is None:
            launching = kube_api_client is not None
        self.config = config
        self.settings, fallback = load_settings(config, launching=launching)
        if self.settings.catalog_fallback_unused:
            log.warning(
                "aws_catalog_fallback_unused",
                reason=self.settings.catalog_fallback_unused,
                consequence="prices come from the AWS APIs only",
            )
        self.clock = clock
        self.clients = ClientFactory(
            config.region,
            client_options,
            endpoint_url=self.settings.endpoint_url,
            session_factory=session_factory,
        )
        self.guard = ApiGuard(clock=clock, rng=rng)
        # Launch tokens whose requests came back having launched nothing, and how many times.
        self._spent = SpentTokens()
        self._late_lock = threading.Lock()
        self._late: list[LateFailure] = []
        self.source = OfferingSource(
            config, self.settings, self.clients, self.guard, fallback=fallback, clock=clock
        )
        self.ec2_instances = Ec2Instances(config, self.clients, self.guard, self.source, clock)
        self.templates = LaunchTemplates(
            self.settings,
            config.cluster_name,
            self.clients,
            self.guard,
            node_tags=config.node_tags,
            clock=clock,
        )
        queue = self.settings.spot_interruption_queue
        self.queue = SpotInterruptionQueue(queue, self.clients, self.guard, clock=clock) if queue else None
        if self.settings.selects_reservations and RESERVED not in config.capacity_types:
            log.warning(
                "aws_capacity_reservations_unused_by_default",
                capacity_types=list(config.capacity_types),
                consequence="only pods whose instance-offerings annotation lists reserved, or that name a "
                "reservation, run in the selected capacity reservations; add reserved to capacityTypes",
            )

    # --- the provider contract -------------------------------------------------------------------------

    def offerings(self) -> list[Offering]:
        """Every (type, zone, capacity type) launchable in the configured subnets, priced, with its source."""
        return self.source.offerings()

    def launch(self, request: LaunchRequest) -> Instance:
        """Launch one node from the candidates; the same token returns the instance already launched."""
        if not request.token:
            raise ProviderError("launch request has no idempotency token")
        if not request.offerings:
            raise ProviderError(f"launch request {request.token} has no candidate offerings")
        if self.settings.launch_problems:
            raise ProviderError(f"cannot launch: {'; '.join(self.settings.launch_problems)}")
        existing = self.ec2_instances.by_token(request.token)
        if existing is not None:
            log.info(
                "aws_launch_repeated",
                idempotency_token=request.token,
                instance=existing.id,
                state=existing.state,
            )
            return existing
        subnets = self.source.subnet_map()
        by_type: dict[str, list[Offering]] = {}
        reserved: list[Offering] = []
        for o in request.offerings[:MAX_CANDIDATES]:
            if o.reservation is not None:
                reserved.append(o)  # launched into its reservation by RunInstances, before any fleet
            else:
                by_type.setdefault(o.capacity_type, []).append(o)
        groups = [
            (
                capacity_type,
                self.templates.for_launch(capacity_type, offerings, request.labels, request.taints),
            )
            for capacity_type, offerings in by_type.items()
        ]
        attempts, unplaceable = plan_attempts(groups, subnets.by_zone)
        if unplaceable:
            # Not a capacity problem: nothing here can launch them, so they are not benched as if it were.
            log.warning(
                "aws_launch_candidates_without_subnet",
                idempotency_token=request.token,
                offerings=_keys(unplaceable),
            )
        tags = self._tags(request)
        refused: list[Attempt] = []
        for o in reserved:
            subnet = next(iter(subnets.by_zone.get(o.zone, ())), None)
            if subnet is None:
                unplaceable.append(o)
                continue
            launched, refusals = self._run_reserved(o, subnet, request, tags)
            if launched is not None:
                self._passed_over(request.token, refused)
                return launched
            refused += refusals
        for attempt in attempts:
            try:
                outcome = self._create_fleet(attempt, request.token, tags, subnets.zone_of)
                if outcome.existing is not None:
                    return outcome.existing
                if outcome.instance_id:
                    # Overrides EC2 refused before one took (Errors[] beside Instances[]) are news all the same.
                    self._passed_over(request.token, [*refused, *outcome.attempts])
                    return self._launched(outcome, request.token, tags)
                if outcome.throttled or not outcome.attempts:
                    outcome.raise_for_failure(attempt, self.guard)
            except Throttled as err:
                # The launch API itself is throttled: no other candidate may be asked before retry_after.
                throttled = err.attempts or (
                    Attempt(attempt.offerings[0], Refusal.THROTTLED, str(err), retry_after=err.retry_after),
                )
                raise Throttled(err.retry_after, str(err), [*refused, *throttled]) from None
            except ProviderError as err:
                if refused:
                    # What was refused is still reported, so the re-plan moves past it; then this error.
                    raise launch_failure(refused, f"{launch_failure(refused)}; then: {err}") from None
                raise
            refused += outcome.attempts
            if {o.key for o in attempt.offerings} - {a.offering.key for a in outcome.attempts}:
                break  # some candidates of this kind were not tried: the re-plan falls back to them
        if refused:
            log.info(
                "aws_launch_refused",
                idempotency_token=request.token,
                refusals=sorted({f"{a.offering.key}: {a.refusal.value}" for a in refused}),
            )
            raise launch_failure(refused)
        raise ProviderError(
            f"launch {request.token}: no candidate offering is in a zone with a configured subnet "
            f"({_keys(unplaceable)}); subnets are in {', '.join(sorted(subnets.by_zone)) or 'no zone'}"
        )

    def node_template(self) -> Mapping[str, str]:
        """What nodes boot from (the launch template, or the settings tidal writes one from): a node launched
        before it changed has drifted."""
        return {
            "launchTemplate": repr(self.settings.launch_template),
            "managedLaunchTemplate": repr(self.settings.managed_launch_template),
            "securityGroupIds": ",".join(self.settings.security_group_ids),
        }

    def poll_errors(self) -> list[LateFailure]:
        """The candidates a launch passed over before one took, each reported once (an instant EC2 Fleet
        answers for its launch in the call itself: nothing fails later)."""
        with self._late_lock:
            late, self._late = self._late, []
        return late

    def _passed_over(self, token: str, refused: Sequence[Attempt]) -> None:
        if refused:
            with self._late_lock:
                self._late += [LateFailure(token, a) for a in refused]
                del self._late[:-LATE_KEPT]  # nobody polling (a tool, not the daemon): keep the newest

    def terminate(self, instance: Instance) -> None:
        """Terminate (again: harmless, EC2 lists terminated instances for an hour); :class:`InstanceNotFound`
        when EC2 no longer knows the instance. Refuses another cluster's instance."""
        owner = instance.tags.get(LABEL_CLUSTER) if instance.tags else None
        if owner is not None and owner != self.config.cluster_name:
            raise ProviderError(
                f"instance {instance.id} belongs to cluster {owner!r}, not {self.config.cluster_name!r}; "
                "not terminating it"
            )
        ec2 = self.clients.client("ec2")
        try:
            with self.guard.call("TerminateInstances"):
                ec2.terminate_instances(InstanceIds=[instance.id])
        except botocore.exceptions.ClientError as err:
            if error_code(err) in _GONE:
                raise InstanceNotFound(instance, f"instance {instance.id}: {describe(err)}") from None
            raise provider_error("ec2:TerminateInstances", err) from None
        except botocore.exceptions.BotoCoreError as err:
            raise provider_error("ec2:TerminateInstances", err) from None
        log.info("aws_instance_terminating", instance=instance.id)

    def instances(self) -> list[Instance]:
        """Every instance tagged for this cluster, in any state (EC2 lists terminated ones for about an hour)."""
        found = self.ec2_instances.owned([])
        return sorted(found, key=lambda i: (i.created, i.id))

    # --- spot interruptions (optional) -----------------------------------------------------------------

    def interruptions(self) -> list[str]:
        """Instance ids named by interruption notices (read from ``aws.spotInterruptionQueue`` now)."""
        if self.queue is None:
            return []
        self.queue.poll()
        return self.queue.instance_ids()

    def interrupted_instances(self) -> list[Instance]:
        """This cluster's live instances that AWS is about to reclaim or stop: cordon and drain their nodes."""
        ids = self.interruptions()
        found: list[Instance] = []
        for start in range(0, len(ids), _ID_FILTER_LIMIT):
            chunk = ids[start : start + _ID_FILTER_LIMIT]
            found += self.ec2_instances.owned([{"Name": "instance-id", "Values": chunk}])
        return [i for i in found if i.state != "terminated"]

    # --- internals -------------------------------------------------------------------------------------

    def _tags(self, request: LaunchRequest) -> dict[str, str]:
        fixed = self.templates.tags  # nodeTags, ownership tags and Name, as the managed templates carry them
        owner = (LABEL_CLUSTER, LABEL_MANAGED, f"kubernetes.io/cluster/{self.settings.eks_cluster_name}")
        return {
            **fixed,
            **request.tags,
            **{k: fixed[k] for k in owner},
            LABEL_LAUNCH_TOKEN: request.token,
        }

    def _create_fleet(
        self, attempt: FleetAttempt, token: str, tags: Mapping[str, str], zone_of: Mapping[str, str]
    ) -> FleetOutcome:
        """One CreateFleet call under the launch's current ClientToken (see :func:`client_token`).

        A token EC2 already saw with other parameters means an earlier request of this launch (another
        candidate list, maybe from before a restart): the instance launched under it is returned if there is
        one; if there is none, that request launched nothing and the launch goes on under the next token.
        """
        request = fleet_request(attempt, spot_strategy=self.settings.spot_allocation_strategy, tags=tags)
        ec2 = self.clients.client("ec2", launch=True)
        for _ in range(_TOKEN_MISMATCHES):
            request["ClientToken"] = client_token(token, self._spent.count(token))
            try:
                with self.guard.call("CreateFleet"):
                    response = ec2.create_fleet(**request)
            except botocore.exceptions.ClientError as err:
                code = error_code(err)
                if code == _TOKEN_MISMATCH:
                    existing = self.ec2_instances.by_token(token)
                    if existing is not None:
                        log.info("aws_launch_repeated", idempotency_token=token, instance=existing.id)
                        return FleetOutcome(existing=existing)
                    self._spent.spend(token)
                    continue
                if code in CAPACITY_CODES | QUOTA_CODES | INVALID_CODES:
                    self._spent.spend(token)
                    message = str(err.response.get("Error", {}).get("Message", ""))
                    named = offerings_named(code, message, attempt.offerings)
                    return FleetOutcome(attempts=[refusal(code, describe(err), o) for o in named])
                raise provider_error("ec2:CreateFleet", err) from None
            except botocore.exceptions.BotoCoreError as err:
                # No answer: the same ClientToken next time, in case EC2 did launch.
                raise provider_error("ec2:CreateFleet", err) from None
            outcome = read_fleet_response(response, attempt, zone_of)
            if outcome.instance_id:
                self._spent.forget(token)
            else:
                self._spent.spend(token)  # EC2 would answer this ClientToken with this failure from now on
            return outcome
        raise ProviderError(
            f"CreateFleet for launch {token}: EC2 kept refusing its client tokens as used by other requests"
        )

    def _run_reserved(
        self, o: Offering, subnet: str, request: LaunchRequest, tags: Mapping[str, str]
    ) -> tuple[Instance | None, list[Attempt]]:
        """Launch one node into ``o``'s reservation (RunInstances targeting it): the instance, or EC2's
        refusal. Under the same idempotency rules as a fleet launch (see :meth:`_create_fleet`)."""
        assert o.reservation is not None
        [(template, _)] = self.templates.for_launch(RESERVED, [o], request.labels, request.taints)
        ec2 = self.clients.client("ec2", launch=True)
        key = f"{request.token}/{o.reservation.id}"  # a token of its own per reservation tried
        for _ in range(_TOKEN_MISMATCHES):
            token = client_token(f"{request.token}-r", self._spent.count(key))
            params = run_request(o, template, subnet, token, tags)
            try:
                with self.guard.call("RunInstances"):
                    response = ec2.run_instances(**params)
            except botocore.exceptions.ClientError as err:
                code = error_code(err)
                if code == _TOKEN_MISMATCH:
                    existing = self.ec2_instances.by_token(request.token)
                    if existing is not None:
                        return existing, []
                    self._spent.spend(key)
                    continue
                self._spent.spend(key)
                log.info("aws_reservation_refused", reservation=o.reservation.id, error=describe(err))
                return None, [reservation_refusal(code, describe(err), o)]
            except botocore.exceptions.BotoCoreError as err:
                raise provider_error("ec2:RunInstances", err) from None
            self._spent.forget(key)
            [data] = response.get("Instances") or [{}]
            instance = self.ec2_instances.make(
                str(data.get("InstanceId") or ""),
                o.instance_type,
                o.zone,
                RESERVED,
                "pending",
                tags,
                self.clock(),
                o.reservation.id,
            )
            log.info(
                "aws_instance_launched",
                instance=instance.id,
                instance_type=o.instance_type,
                zone=o.zone,
                capacity_type=RESERVED,
                reservation=o.reservation.id,
                idempotency_token=request.token,
            )
            return instance, []
        raise ProviderError(
            f"RunInstances for launch {request.token}: EC2 kept refusing its client tokens as used by other requests"
        )

    def _launched(self, outcome: FleetOutcome, token: str, tags: Mapping[str, str]) -> Instance:
        instance = self.ec2_instances.make(
            outcome.instance_id,
            outcome.instance_type,
            outcome.zone,
            outcome.capacity_type,
            "pending",
            tags,
            self.clock(),
        )
        log.info(
            "aws_instance_launched",
            instance=instance.id,
            instance_type=instance.instance_type,
            zone=instance.zone,
            capacity_type=instance.capacity_type,
            idempotency_token=token,
        )
        return instance


def _keys(offerings: Sequence[Offering]) -> str:
    return ", ".join(o.key for o in offerings) or "none"
