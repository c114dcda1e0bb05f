"""The state and semantics behind the fake ARM ``Microsoft.Compute`` endpoint (HTTP lives in azure_arm).

Scale sets (Uniform and Flexible), their VMs, Resource SKUs and long-running operations. Writes that take
time in Azure (scale-out, VM create, delete_instances, VM delete) start an operation that finishes after a
number of polls; allocation failures arrive through that operation, as in Azure. Instance ids of a Uniform
scale set only grow, and a Uniform scale-out spreads new VMs over the scale set's zones.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Callable
from typing import Any

from tests.fakes.azure_catalog import SIZES, SIZES_BY_NAME, disk_sku, sku_resource
from tests.fakes.azure_model import (
    AllocationFault,
    ArmError,
    FakeScaleSet,
    FakeVM,
    Operation,
    allocation_message,
    check_tags,
    computer_name_suffix,
    default_profile,
    kubelet_identity,
)
from tests.fakes.azure_reservations import FakeCapacityReservation, FakeGroup, check_group, group_name


class ComputeState:
    """Everything one fake subscription holds, behind one lock."""

    def __init__(self, subscription: str, resource_group: str, location: str = "eastus") -> None:
        self.subscription = subscription
        self.resource_group = resource_group
        self.location = location
        self.lock = threading.RLock()
        self.skus: list[dict[str, Any]] = [sku_resource(s, location) for s in SIZES] + [disk_sku(location)]
        self.scale_sets: dict[str, FakeScaleSet] = {}
        self.vms: dict[str, FakeVM] = {}  # Flexible VMs by name
        self.groups: dict[str, FakeGroup] = {}  # capacity reservation groups by name
        self.operations: dict[str, Operation] = {}
        self.faults: list[AllocationFault] = []
        self.polls_to_finish = 1
        self.hold_operations = False
        self.styles = {"scale": "async", "create": "async", "delete": "location"}
        self._ids = itertools.count(1)

    # --- set-up ----------------------------------------------------------------------------------------

    def add_scale_set(
        self,
        name: str,
        size: str,
        *,
        orchestration: str = "Uniform",
        zones: tuple[str, ...] = ("1",),
        priority: str = "Regular",
        capacity: int = 0,
        pool: str = "",
        tags: dict[str, str] | None = None,
        application_security_groups: bool = False,
    ) -> FakeScaleSet:
        """A scale set as AKS bootstraps a node pool (``capacity`` VMs already running, not tidal's)."""
        with self.lock:
            profile = default_profile(
                priority,
                subscription=self.subscription,
                resource_group=self.resource_group,
                application_security_groups=application_security_groups,
            )
            profile["osProfile"]["computerNamePrefix"] = name
            base_tags = {
                "aks-managed-poolName": pool or name.split("-")[1],
                "aks-managed-orchestrator": "k8s",
            }
            ss = FakeScaleSet(
                name, size, orchestration, zones, priority, 0, {**base_tags, **(tags or {})}, profile
            )
            ss.identity = kubelet_identity(self.subscription, self.resource_group)
            self.scale_sets[name] = ss
            if orchestration == "Uniform":
                for _ in range(capacity):
                    vm = self._new_uniform_vm(ss)
                    vm.provisioning, vm.power = "Succeeded", "running"
                ss.capacity = capacity
            return ss

    def add_capacity_reservation_group(
        self, name: str, *reservations: FakeCapacityReservation, reservation_type: str = "Targeted"
    ) -> FakeGroup:
        """A capacity reservation group holding ``reservations``."""
        with self.lock:
            group = self.groups[name] = FakeGroup(
                name, reservation_type, reservations={r.name: r for r in reservations}
            )
            return group

    def restrict(
        self, size: str, reason: str = "NotAvailableForSubscription", zones: tuple[str, ...] = ()
    ) -> None:
        """Add a Resource SKU restriction: for some zones, or (no zones) the whole location."""
        with self.lock:
            sku = next(s for s in self.skus if s["name"] == size)
            if zones:
                info = {"locations": [self.location], "zones": list(zones)}
                sku["restrictions"].append(
                    {"type": "Zone", "values": [self.location], "restrictionInfo": info, "reasonCode": reason}
                )
            else:
                info = {"locations": [self.location]}
                sku["restrictions"].append(
                    {
                        "type": "Location",
                        "values": [self.location],
                        "restrictionInfo": info,
                        "reasonCode": reason,
                    }
                )

    def fail_allocation(
        self,
        size: str | None = None,
        *,
        code: str = "AllocationFailed",
        zone: str | None = None,
        priority: str | None = None,
        count: int | None = None,
    ) -> None:
        """Make scale-outs and VM creates matching the pattern fail inside their operation."""
        with self.lock:
            self.faults.append(AllocationFault(size, zone, priority, code, count))

    def evict(self, scale_set: str, instance: str, *, deallocate: bool = False) -> None:
        """Reclaim a Spot VM as Azure does: with evictionPolicy Delete the VM and its capacity go; with
        Deallocate it stays, deallocated, still counted in the scale set's capacity."""
        with self.lock:
            ss = self.scale_sets[scale_set]
            if deallocate:
                vm = ss.vms[instance] if ss.orchestration == "Uniform" else self.vms[instance]
                vm.power = "deallocated"
            elif ss.orchestration == "Uniform":
                del ss.vms[instance]
                ss.capacity -= 1
            else:
                del self.vms[instance]

    def release(self) -> None:
        """Let held operations run to completion on their next poll."""
        with self.lock:
            self.hold_operations = False
            for op in self.operations.values():
                op.held = False

    # --- operations ------------------------------------------------------------------------------------

    def start_operation(
        self,
        kind: str,
        on_success: Callable[[], None],
        on_failure: Callable[[], None] = lambda: None,
        error: tuple[str, str] | None = None,
        polls: int | None = None,
    ) -> Operation:
        op = Operation(
            f"op-{next(self._ids)}",
            self.styles[kind],
            self.polls_to_finish if polls is None else polls,
            on_success,
            on_failure,
            error,
            held=self.hold_operations,
        )
        self.operations[op.id] = op
        if op.polls_left <= 0 and not op.held:
            self._finish(op)
        return op

    def poll(self, op_id: str) -> Operation:
        with self.lock:
            op = self.operations.get(op_id)
            if op is None:
                raise ArmError(404, "NotFound", f"operation {op_id} not found")
            if op.status == "InProgress" and not op.held:
                op.polls_left -= 1
                if op.polls_left <= 0:
                    self._finish(op)
            return op

    def _finish(self, op: Operation) -> None:
        if op.error is None:
            op.status = "Succeeded"
            op.on_success()
        else:
            op.status = "Failed"
            op.on_failure()

    def _fault_for(self, size: str, zone: str, priority: str) -> str | None:
        for fault in self.faults:
            if (
                (fault.size is None or fault.size == size)
                and (fault.zone is None or fault.zone == zone)
                and (fault.priority is None or fault.priority == priority)
                and (fault.remaining is None or fault.remaining > 0)
            ):
                if fault.remaining is not None:
                    fault.remaining -= 1
                return fault.code
        return None

    # --- scale sets ------------------------------------------------------------------------------------

    def scale_set(self, name: str) -> FakeScaleSet:
        ss = self.scale_sets.get(name)
        if ss is None:
            raise ArmError(
                404,
                "ResourceNotFound",
                f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/{name}' was not found.",
            )
        return ss

    def _new_uniform_vm(self, ss: FakeScaleSet) -> FakeVM:
        n = ss.next_instance_id
        ss.next_instance_id += 1
        zone = ""
        if ss.zones:  # Azure balances a zonal scale set: the zone with the fewest VMs gets the next one
            counts = {z: 0 for z in ss.zones}
            for vm in ss.vms.values():
                counts[vm.zone] = counts.get(vm.zone, 0) + 1
            zone = min(ss.zones, key=lambda z: (counts[z], z))
        prefix = ss.profile.get("osProfile", {}).get("computerNamePrefix") or ss.name
        vm = FakeVM(
            f"{ss.name}_{n}", ss.name, ss.size, zone, ss.priority, prefix + computer_name_suffix(n), str(n)
        )
        ss.vms[str(n)] = vm
        return vm

    def update_scale_set(
        self, name: str, body: dict[str, Any], if_match: str | None
    ) -> tuple[FakeScaleSet, Operation]:
        """PATCH: tags replace the whole map; a higher capacity creates VMs that finish with the operation."""
        with self.lock:
            ss = self.scale_set(name)
            if if_match and if_match != ss.etag:
                raise ArmError(412, "PreconditionFailed", "The specified precondition 'If-Match' failed.")
            if "tags" in body:
                check_tags(body["tags"])
                ss.tags = dict(body["tags"])
            wanted = (body.get("sku") or {}).get("capacity")
            created: list[FakeVM] = []
            if wanted is not None and ss.orchestration == "Uniform":
                while len(ss.vms) < wanted:
                    created.append(self._new_uniform_vm(ss))
                while len(ss.vms) > wanted:  # the default scale-in policy removes the highest ids
                    del ss.vms[max(ss.vms, key=int)]
                ss.capacity = wanted
            ss.etag_counter += 1
            ss.provisioning = "Updating" if created else "Succeeded"
            error = None
            for vm in created:
                code = self._fault_for(vm.size, vm.zone, vm.priority)
                if code:
                    error = (code, allocation_message(code, vm.size))
                    break

            def done() -> None:
                ss.provisioning = "Succeeded"
                for vm in created:
                    if vm.instance_id in ss.vms:
                        vm.provisioning, vm.power = "Succeeded", "running"

            def failed() -> None:  # Azure leaves the failed instances in the scale set, capacity included
                ss.provisioning = "Succeeded"
                for vm in created:
                    vm.provisioning, vm.power = "Failed", "stopped"

            op = self.start_operation("scale", done, failed, error, polls=None if created else 0)
            return ss, op

    def create_scale_set(self, name: str, body: dict[str, Any]) -> tuple[FakeScaleSet, Operation, bool]:
        """PUT: create (or replace the model of) a scale set; capacity 0 copies need no VMs."""
        with self.lock:
            check_tags(body.get("tags") or {})
            props = body.get("properties") or {}
            profile = copy.deepcopy(props.get("virtualMachineProfile") or {})
            sku = body.get("sku") or {}
            existed = name in self.scale_sets
            if existed:
                ss = self.scale_sets[name]
                ss.tags, ss.profile = dict(body.get("tags") or {}), profile
            else:
                ss = FakeScaleSet(
                    name,
                    sku.get("name", ""),
                    props.get("orchestrationMode", "Uniform"),
                    tuple(body.get("zones") or ()),
                    profile.get("priority", "Regular"),
                    int(sku.get("capacity") or 0),
                    dict(body.get("tags") or {}),
                    profile,
                    identity=copy.deepcopy(body.get("identity") or {}),
                )
                if sku.get("name") not in SIZES_BY_NAME:
                    raise ArmError(
                        409, "SkuNotAvailable", f"The requested size {sku.get('name')} is not available."
                    )
                self.scale_sets[name] = ss
            ss.etag_counter += 1
            return ss, self.start_operation("create", lambda: None, polls=0), not existed

    def delete_instances(self, name: str, instance_ids: list[str]) -> Operation:
        with self.lock:
            ss = self.scale_set(name)
            missing = [i for i in instance_ids if i not in ss.vms]
            if missing:
                raise ArmError(404, "NotFound", f"instance ids {missing} not found in {name}")
            for i in instance_ids:
                ss.vms[i].provisioning = "Deleting"

            def done() -> None:
                for i in instance_ids:
                    if ss.vms.pop(i, None) is not None:
                        ss.capacity -= 1

            return self.start_operation("delete", done)

    # --- Flexible VMs ----------------------------------------------------------------------------------

    def create_vm(self, name: str, body: dict[str, Any]) -> tuple[FakeVM, Operation, bool]:
        with self.lock:
            if name in self.vms:
                return self.vms[name], self.start_operation("create", lambda: None, polls=0), False
            check_tags(body.get("tags") or {})
            props = body.get("properties") or {}
            ss_id = ((props.get("virtualMachineScaleSet") or {}).get("id") or "").rstrip("/")
            ss = self.scale_set(ss_id.rsplit("/", 1)[-1])
            if ss.orchestration != "Flexible":
                raise ArmError(400, "InvalidParameter", "VMs can only be added to a Flexible scale set")
            size = (props.get("hardwareProfile") or {}).get("vmSize", "")
            if size not in SIZES_BY_NAME:
                raise ArmError(409, "SkuNotAvailable", f"The requested size {size} is not available.")
            zones = body.get("zones") or []
            zone = zones[0] if zones else ""
            if ss.zones and zone not in ss.zones:
                raise ArmError(400, "InvalidParameter", f"zone {zone!r} is not one of the scale set's zones")
            priority = props.get("priority", "Regular")
            computer = (props.get("osProfile") or {}).get("computerName") or name
            group = check_group(self.groups, group_name(props)) if group_name(props) else None
            vm = FakeVM(
                name, ss.name, size, zone, priority, computer, tags=dict(body.get("tags") or {}), body=body
            )
            if group is not None:
                group.allocate(name, size, zone)  # over-allocated (no guarantee) when nothing is free
            self.vms[name] = vm
            code = self._fault_for(size, zone, priority)

            def done() -> None:
                vm.provisioning, vm.power = "Succeeded", "running"

            def failed() -> None:
                vm.provisioning, vm.power = "Failed", "stopped"

            error = (code, allocation_message(code, size)) if code else None
            return vm, self.start_operation("create", done, failed, error), True

    def delete_vm(self, name: str) -> Operation | None:
        with self.lock:
            vm = self.vms.get(name)
            if vm is None:
                return None
            vm.provisioning = "Deleting"

            def gone() -> None:
                self.vms.pop(name, None)
                for group in self.groups.values():
                    group.release(name)

            return self.start_operation("delete", gone)

    def flexible_vms(self, scale_set_id: str | None) -> list[FakeVM]:
        with self.lock:
            wanted = scale_set_id.rstrip("/").rsplit("/", 1)[-1].lower() if scale_set_id else None
            return [vm for vm in self.vms.values() if wanted is None or vm.scale_set.lower() == wanted]
