"""Flexible scale sets: one VM per launch, of any size and priority, tagged with tidal's tags.

The VM is built from the scale set's VM profile (image, OS disk, NICs) and identity with the offering's
size, zone and priority. Its name derives from the launch token and the offering, so a retried launch finds (or re-PUTs)
the same VM instead of making a second one.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from azure.core.exceptions import HttpResponseError

from autoscaler.cloud import CapacityUnavailable, ProviderError
from autoscaler.core.model import LABEL_CLUSTER, LABEL_LAUNCH_TOKEN, LABEL_MANAGED, ON_DEMAND, RESERVED, SPOT
from autoscaler.core.offering import Instance, Offering
from providers.azure.arm import ArmCompute
from providers.azure.errors import classify, is_not_found
from providers.azure.resources import (
    ScaleSet,
    VirtualMachine,
    flexible_provider_id,
    identity_for_write,
    instance_state,
)
from providers.azure.targets import zone_label
from providers.azure.uniform import LIVE, Describe, PoolSettings

__all__ = ["FlexiblePools", "arm_tags", "spot_settings", "vm_name"]

log = structlog.get_logger("tidal.providers.azure")

NETWORK_API_VERSION = "2020-11-01"  # lets Compute create the NIC from the profile's configuration
_FORBIDDEN = set("<>%&\\?/")


def arm_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """tidal's tags as ARM accepts them: ``/`` (and ``<>%&\\?``) are not allowed in tag names."""
    return {"".join("." if c in _FORBIDDEN else c for c in k): str(v)[:256] for k, v in tags.items()}


def tidal_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """ARM tags read back with tidal's own names (``tidal.dev.cluster`` → ``tidal.dev/cluster``)."""
    return {
        (k.replace("tidal.dev.", "tidal.dev/", 1) if k.startswith("tidal.dev.") else k): v
        for k, v in tags.items()
    }


def spot_settings(spot: bool) -> dict[str, Any]:
    """Spot: evicted VMs are deleted (nothing to clean up), and the price never evicts them (max -1)."""
    if spot:
        return {"priority": "Spot", "evictionPolicy": "Delete", "billingProfile": {"maxPrice": -1}}
    return {"priority": "Regular"}


def vm_name(token: str, offering: Offering) -> str:
    """``tidal-<12 hex>``: the same for a retried launch of one offering, different across offerings."""
    return "tidal-" + hashlib.sha256(f"{token}|{offering.key}".encode()).hexdigest()[:12]


class FlexiblePools:
    """Launch, list and remove VMs of Flexible scale sets."""

    def __init__(
        self, arm: ArmCompute, settings: PoolSettings, clock: Callable[[], float], describe: Describe
    ):
        self.arm = arm
        self.settings = settings
        self.clock = clock
        self.describe = describe
        # (group, size, zone) -> the reservation of the group a VM of that size and zone runs in
        self.reservation_of: Callable[[str, str, str], str] = lambda group, size, zone: ""

    def instance(self, vm: VirtualMachine) -> Instance:
        """A VM of a Flexible scale set as the contract's Instance."""
        tags = tidal_tags(vm.tags)
        capacity_type = SPOT if vm.priority == "Spot" else ON_DEMAND
        zone = zone_label(self.settings.region, vm.zone)
        reservation = self.reservation_of(vm.reservation_group, vm.size, zone) if vm.reservation_group else ""
        if vm.reservation_group:
            capacity_type = RESERVED
        price, gpus = self.describe(vm.size, zone, capacity_type)
        s = self.settings
        return Instance(
            id=f"{vm.scale_set}/{vm.name}",
            provider_id=flexible_provider_id(s.subscription, s.resource_group, vm.name),
            instance_type=vm.size,
            zone=zone,
            capacity_type=capacity_type,
            state=instance_state(vm),
            launch_token=tags.get(LABEL_LAUNCH_TOKEN, ""),
            created=vm.created or self.clock(),
            price=price,
            gpu_count=gpus,
            tags=tags,
            reservation_id=reservation,
        )

    def owned(self, vms: list[VirtualMachine]) -> list[Instance]:
        """The VMs carrying this cluster's tag."""
        return [
            self.instance(vm) for vm in vms if tidal_tags(vm.tags).get(LABEL_CLUSTER) == self.settings.cluster
        ]

    def clean_up(self, vms: list[VirtualMachine]) -> None:
        """Delete owned VMs whose allocation failed (Azure keeps them, in state Failed)."""
        for vm in vms:
            if (
                vm.provisioning.lower() == "failed"
                and tidal_tags(vm.tags).get(LABEL_CLUSTER) == self.settings.cluster
            ):
                try:
                    self.arm.delete_vm(vm.name)
                    log.info("azure_failed_vm_deleted", vm=vm.name)
                except HttpResponseError as err:
                    log.info("azure_clean_up_skipped", vm=vm.name, error=str(classify(err)))

    def body(self, ss: ScaleSet, name: str, offering: Offering, tags: Mapping[str, str]) -> dict[str, Any]:
        """The VM to PUT: the scale set's profile with this offering's size, zone and priority."""
        profile = copy.deepcopy((ss.raw.get("properties") or {}).get("virtualMachineProfile") or {})
        os_profile = profile.get("osProfile") or {}
        os_profile.pop("computerNamePrefix", None)
        os_profile["computerName"] = name
        network = profile.get("networkProfile") or {}
        properties: dict[str, Any] = {
            "hardwareProfile": {"vmSize": offering.instance_type},
            "virtualMachineScaleSet": {"id": self.arm.scale_set_id(ss.name)},
            "storageProfile": profile.get("storageProfile") or {},
            "osProfile": os_profile,
            "networkProfile": {
                "networkApiVersion": NETWORK_API_VERSION,
                "networkInterfaceConfigurations": network.get("networkInterfaceConfigurations") or [],
            },
            **spot_settings(offering.capacity_type == SPOT),
        }
        if offering.reservation is not None:  # placed in its reservation through the group
            group = self.arm.capacity_reservation_group_id(offering.reservation.name)
            properties["capacityReservation"] = {"capacityReservationGroup": {"id": group}}
        body: dict[str, Any] = {
            "location": ss.raw.get("location") or self.settings.region,
            "tags": arm_tags(tags),
            "properties": properties,
        }
        identity = identity_for_write(ss.raw.get("identity"))
        if identity:  # the kubelet identity the node pool's VMs carry (image pulls, disks)
            body["identity"] = identity
        zone = offering.zone.removeprefix(f"{self.settings.region}-") if offering.zone else ""
        if zone:
            body["zones"] = [zone]
        return body

    def launch(
        self, ss: ScaleSet, offering: Offering, tags: Mapping[str, str], token: str
    ) -> tuple[Instance, Any]:
        """Create the offering's VM in the scale set; (instance, poller still running or None)."""
        name = vm_name(token, offering)
        try:
            existing = self.arm.vm(name, ss.name)
        except HttpResponseError as err:
            raise classify(err, what=f"reading VM {name}") from None
        if existing is not None:
            instance = self.instance(existing)
            if instance.state in LIVE:
                log.info(
                    "azure_launch_repeated",
                    idempotency_token=token,
                    instance=instance.id,
                    state=instance.state,
                )
                return instance, None
            raise CapacityUnavailable(
                [offering], f"an earlier attempt of this launch ({name}) is still being removed"
            )
        all_tags = {
            **tags,
            LABEL_CLUSTER: self.settings.cluster,
            LABEL_MANAGED: "true",
            LABEL_LAUNCH_TOKEN: token,
        }
        try:
            poller = self.arm.create_vm(name, self.body(ss, name, offering, all_tags))
        except HttpResponseError as err:
            raise classify(err, [offering], what=f"creating VM {name} in {ss.name}") from None
        log.info(
            "azure_vm_created",
            vm=name,
            scale_set=ss.name,
            size=offering.instance_type,
            idempotency_token=token,
        )
        try:
            poller.wait(timeout=self.settings.wait)
        except HttpResponseError as err:
            error = classify(err, [offering], what=f"creating VM {name} in {ss.name}")
            log.info("azure_vm_create_failed", vm=name, idempotency_token=token, error=str(error))
            self._delete_quietly(name)
            raise error from None
        vm = self.arm.vm(name, ss.name)
        if vm is None:
            raise ProviderError(f"VM {name} disappeared right after it was created")
        return self.instance(vm), None if poller.done() else poller

    def terminate(self, ss: ScaleSet, name: str) -> bool:
        """Delete one VM tidal created (refusing VMs without this cluster's tag); False when it is gone."""
        try:
            vm = self.arm.vm(name, ss.name)
            if vm is None:
                return False
            if vm.provisioning.lower() == "deleting":
                return True
            if tidal_tags(vm.tags).get(LABEL_CLUSTER) != self.settings.cluster:
                raise ProviderError(
                    f"VM {name} does not carry cluster {self.settings.cluster}'s tag; not deleting it"
                )
            self.arm.delete_vm(name)  # sent, not waited for: the VM is listed as stopping until it is gone
        except HttpResponseError as err:
            if not is_not_found(err):
                raise classify(err, what=f"deleting VM {name}") from None
            return False
        log.info("azure_vm_deleted", vm=name, scale_set=ss.name)
        return True

    def _delete_quietly(self, name: str) -> None:
        try:
            self.arm.delete_vm(name)
        except HttpResponseError as err:
            log.info("azure_clean_up_skipped", vm=name, error=str(classify(err)))
