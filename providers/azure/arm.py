"""Every ARM call the Azure provider makes, one method each, returning tidal's types instead of SDK models.

Keeping the calls here keeps them countable: ``permissions.ACTIONS`` lists the RBAC action of each method,
and ``deploy/azure/role-definition.json`` grants exactly those.
"""

from __future__ import annotations

from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError

from providers.azure.errors import is_not_found
from providers.azure.resources import ScaleSet, VirtualMachine, scale_set_from_wire, vm_from_wire, wire

__all__ = ["ArmCompute"]


class ArmCompute:
    """Calls against one subscription and node resource group through a ``ComputeManagementClient``."""

    def __init__(self, client: Any, subscription: str, resource_group: str) -> None:
        self.client = client
        self.subscription = subscription
        self.resource_group = resource_group

    def scale_set_id(self, name: str) -> str:
        """The ARM id of a scale set in the node resource group."""
        return (
            f"/subscriptions/{self.subscription}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.Compute/virtualMachineScaleSets/{name}"
        )

    # --- reads -----------------------------------------------------------------------------------------

    def skus(self, location: str) -> list[dict[str, Any]]:
        """Resource SKUs of ``location`` (Microsoft.Compute/skus/read, subscription scope)."""
        return [wire(s) for s in self.client.resource_skus.list(filter=f"location eq '{location}'")]

    def scale_set(self, name: str) -> ScaleSet | None:
        """One scale set, or None when it does not exist."""
        try:
            return scale_set_from_wire(
                wire(self.client.virtual_machine_scale_sets.get(self.resource_group, name))
            )
        except HttpResponseError as err:
            if is_not_found(err):
                return None
            raise

    def scale_sets(self) -> list[ScaleSet]:
        """Every scale set of the node resource group."""
        return [
            scale_set_from_wire(wire(s))
            for s in self.client.virtual_machine_scale_sets.list(self.resource_group)
        ]

    def uniform_vms(self, scale_set: str) -> list[VirtualMachine]:
        """The instances of a Uniform scale set, with power state."""
        pages = self.client.virtual_machine_scale_set_vms.list(
            self.resource_group, scale_set, expand="instanceView"
        )
        return [vm_from_wire(wire(v), scale_set) for v in pages]

    def flexible_vms(self, scale_set: str) -> list[VirtualMachine]:
        """The VMs of a Flexible scale set, with power state."""
        query = f"'virtualMachineScaleSet/id' eq '{self.scale_set_id(scale_set)}'"
        pages = self.client.virtual_machines.list(self.resource_group, filter=query, expand="instanceView")
        return [vm_from_wire(wire(v), scale_set) for v in pages]

    def vm(self, name: str, scale_set: str) -> VirtualMachine | None:
        """One VM by name, or None when it does not exist."""
        try:
            found = self.client.virtual_machines.get(self.resource_group, name, expand="instanceView")
        except HttpResponseError as err:
            if is_not_found(err):
                return None
            raise
        return vm_from_wire(wire(found), scale_set)

    def capacity_reservation_group_id(self, name: str) -> str:
        """The ARM id of a capacity reservation group in the node resource group."""
        return (
            f"/subscriptions/{self.subscription}/resourceGroups/{self.resource_group}"
            f"/providers/Microsoft.Compute/capacityReservationGroups/{name}"
        )

    def capacity_reservation_group(self, name: str) -> dict[str, Any] | None:
        """One capacity reservation group with its instance view (what each reservation has allocated), or
        None when it does not exist."""
        try:
            return wire(
                self.client.capacity_reservation_groups.get(self.resource_group, name, expand="instanceView")
            )
        except HttpResponseError as err:
            if is_not_found(err):
                return None
            raise

    def capacity_reservations(self, group: str) -> list[dict[str, Any]]:
        """The capacity reservations of a group (size, zone, capacity, schedule)."""
        pages = self.client.capacity_reservations.list_by_capacity_reservation_group(
            self.resource_group, group
        )
        return [wire(r) for r in pages]

    # --- writes (long-running: each returns the SDK's poller, which polls in its own thread) -----------

    def update_scale_set(self, name: str, body: dict[str, Any], etag: str | None) -> Any:
        """PATCH a scale set; with ``etag``, only if nobody changed it since it was read."""
        if etag:
            return self.client.virtual_machine_scale_sets.begin_update(
                self.resource_group, name, body, etag=etag, match_condition=MatchConditions.IfNotModified
            )
        return self.client.virtual_machine_scale_sets.begin_update(self.resource_group, name, body)

    def create_scale_set(self, name: str, body: dict[str, Any]) -> Any:
        """PUT a scale set (a template copy)."""
        return self.client.virtual_machine_scale_sets.begin_create_or_update(self.resource_group, name, body)

    def delete_instances(self, scale_set: str, instance_ids: list[str]) -> Any:
        """Delete exactly these instances of a Uniform scale set (its capacity drops with them)."""
        return self.client.virtual_machine_scale_sets.begin_delete_instances(
            self.resource_group, scale_set, {"instanceIds": instance_ids}
        )

    def create_vm(self, name: str, body: dict[str, Any]) -> Any:
        """PUT a VM (into a Flexible scale set)."""
        return self.client.virtual_machines.begin_create_or_update(self.resource_group, name, body)

    def delete_vm(self, name: str) -> Any:
        """DELETE a VM."""
        return self.client.virtual_machines.begin_delete(self.resource_group, name)
