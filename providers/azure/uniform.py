"""Uniform scale sets (AKS node pools): grow by one with the token in a tag, find the new instance, delete
exactly the instance drained. The tag scheme is in ``ledger``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from azure.core.exceptions import HttpResponseError, ResourceModifiedError

from autoscaler.cloud import ProviderError
from autoscaler.core.model import (
    LABEL_CLUSTER,
    LABEL_LAUNCH_TOKEN,
    LABEL_MANAGED,
    ON_DEMAND,
    SPOT,
    InstanceState,
)
from autoscaler.core.offering import Instance, Offering
from providers.azure.arm import ArmCompute
from providers.azure.errors import classify, is_not_found
from providers.azure.ledger import (
    PENDING,
    TOKEN_TAG_PREFIX,
    VM,
    TokenRecord,
    parse_records,
    prune,
    resolve,
    token_key,
)
from providers.azure.resources import ScaleSet, VirtualMachine, instance_state, uniform_provider_id
from providers.azure.targets import zone_label

__all__ = ["LIVE", "Describe", "PoolSettings", "UniformPools"]

log = structlog.get_logger("tidal.providers.azure")

LIVE = ("pending", "running")
MAX_TOKEN_TAGS = 30  # ARM allows 50 tags per resource and AKS keeps its own on the scale set
Describe = Callable[[str, str, str], tuple[float, int]]  # (size, zone, capacity type) -> (price, GPUs)


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """What launching into and listing scale sets needs from the configuration."""

    cluster: str
    region: str
    subscription: str
    resource_group: str
    wait: float  # the grace a launch gives its operation to fail before answering "pending"
    retention: float  # how long ended launches stay listed as terminated
    pending_timeout: float  # a pending launch that never produced an instance ends after this


class UniformPools:
    """Launch, list and remove instances of Uniform scale sets; one writer per scale set at a time."""

    def __init__(
        self, arm: ArmCompute, settings: PoolSettings, clock: Callable[[], float], describe: Describe
    ):
        self.arm = arm
        self.settings = settings
        self.clock = clock
        self.describe = describe
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._missing: dict[str, dict[str, float]] = {}  # scale set -> token key -> first seen gone

    def lock(self, scale_set: str) -> threading.Lock:
        """The lock that makes this process the only writer of ``scale_set`` at a time."""
        with self._locks_guard:
            return self._locks.setdefault(scale_set, threading.Lock())

    # --- reading ---------------------------------------------------------------------------------------

    def read(self, name: str) -> tuple[ScaleSet, dict[int, VirtualMachine]]:
        """The scale set (fresh, with its etag) and its instances by id."""
        try:
            ss = self.arm.scale_set(name)
            if ss is None:
                raise ProviderError(f"scale set {name} does not exist in {self.settings.resource_group}")
            vms = {int(v.instance_id): v for v in self.arm.uniform_vms(name) if v.instance_id.isdigit()}
        except HttpResponseError as err:
            raise classify(err, what=f"reading scale set {name}") from None
        return ss, vms

    def owned(self, ss: ScaleSet, vms: dict[int, VirtualMachine]) -> list[Instance]:
        """The instances the scale set's token tags claim, in any state."""
        now = self.clock()
        records = parse_records(ss.tags)
        resolved = resolve(records, vms)
        missing = self._missing.setdefault(ss.name, {})
        out = []
        for record in records:
            number = resolved.get(record.key)
            if record.kind == VM and number not in vms:
                missing.setdefault(record.key, now)
            out.append(self._instance(ss, record, number, vms, now))
        for key in [k for k in missing if k not in {r.key for r in records}]:
            del missing[key]
        return out

    def _instance(
        self,
        ss: ScaleSet,
        record: TokenRecord,
        number: int | None,
        vms: dict[int, VirtualMachine],
        now: float,
    ) -> Instance:
        vm = vms.get(number) if number is not None else None
        if number is None:  # capacity raised, instance not listed yet
            young = record.kind == PENDING and now - record.since < self.settings.pending_timeout
            state, key, zone = (
                (InstanceState.PENDING if young else InstanceState.TERMINATED),
                f"pending-{record.token[:8]}",
                "",
            )
        else:
            state, key = (instance_state(vm) if vm else InstanceState.TERMINATED), str(number)
            # A scale set spanning several zones is sold as one zone-less offering (Azure picks the zone);
            # the instance reports the offering's zone so tidal matches its Node to that offering. The
            # Node still carries its real zone label from AKS.
            zone = zone_label(self.settings.region, vm.zone) if vm and len(ss.zones) <= 1 else ""
        capacity_type = SPOT if ss.spot else ON_DEMAND
        price, gpus = self.describe(ss.size, zone, capacity_type)
        s = self.settings
        return Instance(
            id=f"{ss.name}/{key}",
            provider_id=uniform_provider_id(s.subscription, s.resource_group, ss.name, key),
            instance_type=ss.size,
            zone=zone,
            capacity_type=capacity_type,
            state=state,
            launch_token=record.token,
            created=record.since,
            price=price,
            gpu_count=gpus,
            tags={LABEL_CLUSTER: s.cluster, LABEL_MANAGED: "true", LABEL_LAUNCH_TOKEN: record.token},
        )

    # --- writing ---------------------------------------------------------------------------------------

    def _tags(self, ss: ScaleSet, records: list[TokenRecord]) -> dict[str, str]:
        tags = {k: v for k, v in ss.tags.items() if not k.startswith(TOKEN_TAG_PREFIX)}
        tags.update({r.key: r.value() for r in records})
        return tags

    def _pruned(self, ss: ScaleSet, vms: dict[int, VirtualMachine], now: float) -> list[TokenRecord]:
        s = self.settings
        return prune(
            parse_records(ss.tags),
            vms,
            now,
            retention=s.retention,
            pending_timeout=s.pending_timeout,
            missing_since=self._missing.get(ss.name, {}),
        )

    def launch(self, name: str, offering: Offering, token: str) -> tuple[Instance, Any]:
        """Raise the capacity by one with the token recorded; (instance, poller still running or None)."""
        key = token_key(token)
        with self.lock(name):
            for _ in range(3):
                ss, vms = self.read(name)
                now = self.clock()
                records = parse_records(ss.tags)
                resolved = resolve(records, vms)
                mine = next((r for r in records if r.key == key), None)
                if mine is not None:
                    existing = self._instance(ss, mine, resolved.get(key), vms, now)
                    if existing.state in LIVE:
                        log.info(
                            "azure_launch_repeated",
                            idempotency_token=token,
                            instance=existing.id,
                            state=existing.state,
                        )
                        return existing, None
                kept = [r for r in self._pruned(ss, vms, now) if r.key != key]
                if len(kept) >= MAX_TOKEN_TAGS:
                    raise ProviderError(
                        f"scale set {name} already tracks {len(kept)} launches; waiting for them"
                    )
                record = TokenRecord.pending(token, max(vms, default=-1), now)
                sku = {**(ss.raw.get("sku") or {}), "name": ss.size, "capacity": ss.capacity + 1}
                body = {"sku": sku, "tags": self._tags(ss, [*kept, record])}
                try:
                    poller = self.arm.update_scale_set(name, body, ss.etag)
                    break
                except ResourceModifiedError:
                    log.info("azure_scale_set_changed_meanwhile", scale_set=name)
                except HttpResponseError as err:
                    raise classify(err, [offering], what=f"growing scale set {name}") from None
            else:
                raise ProviderError(f"scale set {name} kept changing while tidal grew it; will retry")
        log.info(
            "azure_scale_set_grown",
            scale_set=name,
            capacity=ss.capacity + 1,
            idempotency_token=token,
            size=ss.size,
        )
        return self._follow(name, record, offering, poller)

    def _follow(
        self, name: str, record: TokenRecord, offering: Offering, poller: Any
    ) -> tuple[Instance, Any]:
        try:
            poller.wait(timeout=self.settings.wait)
        except HttpResponseError as err:
            error = classify(err, [offering], what=f"growing scale set {name}")
            log.info(
                "azure_scale_out_failed", scale_set=name, idempotency_token=record.token, error=str(error)
            )
            self.clean_up(name)
            raise error from None
        ss, vms = self.read(name)
        done = poller.done()
        if done:
            with self.lock(name):
                self.settle(ss, vms)
        records = parse_records(ss.tags)
        mine = next((r for r in records if r.key == record.key), record)
        instance = self._instance(ss, mine, resolve(records, vms).get(record.key), vms, self.clock())
        return instance, None if done else poller

    def untidy(self, ss: ScaleSet, vms: dict[int, VirtualMachine]) -> bool:
        """Whether the token tags need rewriting or a failed instance needs deleting (see clean_up)."""
        records = parse_records(ss.tags)
        kept = self._pruned(ss, vms, self.clock())
        if {r.key: r.value() for r in kept} != {r.key: r.value() for r in records}:
            return True
        return bool(self._dead(ss, vms))

    def _dead(self, ss: ScaleSet, vms: dict[int, VirtualMachine]) -> list[int]:
        """Recorded instances that will never run again but still hold capacity: a failed allocation, or
        a Spot VM evicted with the Deallocate policy (tidal's own pools use Delete; a pool may not)."""
        dead = []
        for r in parse_records(ss.tags):
            vm = vms.get(r.number) if r.kind == VM else None
            if vm is None or vm.provisioning.lower() == "deleting":
                continue
            if vm.provisioning.lower() == "failed" or (
                ss.spot and vm.power in ("deallocated", "deallocating")
            ):
                dead.append(r.number)
        return sorted(dead)

    def settle(self, ss: ScaleSet, vms: dict[int, VirtualMachine]) -> bool:
        """Rewrite the token tags (pending ones that found their instance become ``vm:``, stale ones go).

        ARM applies a PATCH's tags when it accepts the request; the operation is not waited for."""
        kept = self._pruned(ss, vms, self.clock())
        if {r.key: r.value() for r in kept} == {r.key: r.value() for r in parse_records(ss.tags)}:
            return False
        try:
            self.arm.update_scale_set(ss.name, {"tags": self._tags(ss, kept)}, ss.etag)
        except HttpResponseError as err:
            log.info("azure_token_tags_not_written", scale_set=ss.name, error=str(classify(err)))
            return False
        return True

    def clean_up(self, name: str) -> None:
        """Settle the tags, then delete recorded instances that will never run (settled first, so a
        pending token can never claim an id that is about to disappear)."""
        with self.lock(name):
            try:
                ss, vms = self.read(name)
                if ss.provisioning.lower() == "updating":
                    return  # an operation is still running; the next listing tidies up
                if self.settle(ss, vms):
                    ss, vms = self.read(name)
                dead = self._dead(ss, vms)
                if dead:
                    self.arm.delete_instances(name, [str(n) for n in dead])
                    log.info("azure_dead_instances_deleted", scale_set=name, instances=dead)
            except (ProviderError, HttpResponseError) as err:
                log.info("azure_clean_up_skipped", scale_set=name, error=str(err))

    def terminate(self, name: str, key: str, token: str) -> bool:
        """Delete exactly this instance (``key``: its id, or ``pending-…`` for one never identified); the
        delete is sent and not waited for (the instance is listed as stopping until it is gone). False when
        the instance is gone already."""
        with self.lock(name):
            ss, vms = self.read(name)
            records = parse_records(ss.tags)
            resolved = resolve(records, vms)
            if key.startswith("pending-"):
                number = resolved.get(token_key(token))
                if number is None:  # never appeared: forget the launch so it cannot claim a later instance
                    kept = [r for r in self._pruned(ss, vms, self.clock()) if r.key != token_key(token)]
                    self._write_tags(ss, kept)
                    return True
            elif key.isdigit():
                number = int(key)
            else:
                raise ProviderError(f"{key!r} is not an instance id of scale set {name}")
            owner = next((r for r in records if resolved.get(r.key) == number), None)
            if owner is None:
                if number in vms:
                    raise ProviderError(
                        f"instance {number} of {name} has no tidal launch tag; not deleting it"
                    )
                return False
            if owner.kind == PENDING and not self.settle(ss, vms):
                raise ProviderError(
                    f"could not record instance {number} of {name} before deleting it; will retry"
                )
            vm = vms.get(number)
            if vm is None:
                return False
            if vm.provisioning.lower() == "deleting":
                return True
            try:
                self.arm.delete_instances(name, [str(number)])  # sent, not waited for
            except HttpResponseError as err:
                if not is_not_found(err):
                    raise classify(err, what=f"deleting instance {number} of {name}") from None
                return False
        log.info("azure_instance_deleted", scale_set=name, instance=number, idempotency_token=owner.token)
        return True

    def _write_tags(self, ss: ScaleSet, records: list[TokenRecord]) -> None:
        try:
            self.arm.update_scale_set(ss.name, {"tags": self._tags(ss, records)}, ss.etag)
        except HttpResponseError as err:
            raise classify(err, what=f"updating the tags of {ss.name}") from None
