"""The VMs this cluster's tidal owns, found by GCE label across every zone (``instances.aggregatedList``).

A Spot VM that GCE preempts is deleted (tidal launches Spot VMs with ``instanceTerminationAction: DELETE``)
or, when a template asked for STOP, left ``TERMINATED``. Either way the fleet must learn that it ended, so a
VM that was listed before and is now gone is still reported, as ``terminated``, for a while: that is what
lets the controller replace it with a new launch token instead of waiting for a node that will never come.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime

from google.cloud import compute_v1

from autoscaler.core.model import ON_DEMAND, RESERVED, SPOT, InstanceState
from autoscaler.core.offering import Instance
from providers.gcp.bootstrap import LABEL_CLUSTER, LABEL_MANAGED, LABEL_TOKEN, gce_label
from providers.gcp.clients import ClientFactory
from providers.gcp.errors import CALL_ERRORS, api_error
from providers.gcp.gpus import ATTACHABLE, attached_name
from providers.gcp.reservations import reservation_of

__all__ = ["GONE_RETENTION", "Inventory", "instance_from_gce", "provider_id"]

GONE_RETENTION = 600.0  # seconds a vanished VM is still reported as terminated
PAGE_SIZE = 500
_STATES = {
    "PROVISIONING": InstanceState.PENDING,
    "STAGING": InstanceState.PENDING,
    "RUNNING": InstanceState.RUNNING,
    "REPAIRING": InstanceState.RUNNING,
    "STOPPING": InstanceState.STOPPING,
    "SUSPENDING": InstanceState.STOPPING,
    "STOPPED": InstanceState.TERMINATED,
    "SUSPENDED": InstanceState.TERMINATED,
    "TERMINATED": InstanceState.TERMINATED,
}


def provider_id(project: str, zone: str, name: str) -> str:
    """``gce://project/zone/name``: the Node's ``spec.providerID`` on GKE."""
    return f"gce://{project}/{zone}/{name}"


def _last(url: str) -> str:
    return url.rsplit("/", 1)[-1]


def _created(stamp: str) -> float:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def instance_from_gce(
    vm: compute_v1.Instance, project: str, price: Callable[[str, str, str], float]
) -> Instance:
    """A GCE VM as tidal's Instance; ``price(instance_type, zone, capacity_type)`` looks up its price."""
    zone = _last(vm.zone)
    machine_type = _last(vm.machine_type)
    instance_type, gpus = machine_type, 0
    for acc in vm.guest_accelerators:
        gpus += acc.accelerator_count
        accel = _last(acc.accelerator_type)
        if accel in ATTACHABLE:
            instance_type = attached_name(machine_type, accel, acc.accelerator_count)
    scheduling = vm.scheduling
    spot = scheduling.provisioning_model == "SPOT" or bool(scheduling.preemptible)
    capacity_type = SPOT if spot else ON_DEMAND
    reservation = reservation_of(vm)
    if reservation and not spot:
        capacity_type = RESERVED  # tidal names a reservation only when it launches into one
    return Instance(
        id=vm.name,
        provider_id=provider_id(project, zone, vm.name),
        instance_type=instance_type,
        zone=zone,
        capacity_type=capacity_type,
        state=_STATES.get(vm.status, InstanceState.PENDING),
        launch_token=vm.labels.get(LABEL_TOKEN, ""),
        created=_created(vm.creation_timestamp),
        price=price(instance_type, zone, capacity_type),
        gpu_count=gpus,
        tags=dict(vm.labels),
        reservation_id=reservation,
    )


class Inventory:
    """Lists owned VMs and remembers the ones that vanished, for ``GONE_RETENTION`` seconds."""

    def __init__(
        self,
        factory: ClientFactory,
        project: str,
        cluster: str,
        *,
        clock: Callable[[], float],
        price: Callable[[str, str, str], float],
    ) -> None:
        self.factory = factory
        self.project = project
        self.cluster = gce_label(cluster)
        self.clock = clock
        self.price = price
        self._last: dict[str, Instance] = {}
        self._gone: dict[str, tuple[Instance, float]] = {}
        self._lock = threading.Lock()

    def label_filter(self, extra: Mapping[str, str] | None = None) -> str:
        """The aggregatedList filter selecting this cluster's VMs (and ``extra`` labels)."""
        wanted = {LABEL_CLUSTER: self.cluster, LABEL_MANAGED: "true", **(extra or {})}
        return " AND ".join(f'(labels.{k} = "{v}")' for k, v in wanted.items())

    def find(self, extra: Mapping[str, str] | None = None) -> list[Instance]:
        """Every owned VM GCE lists now (all zones, every page), optionally narrowed by more labels."""
        client = self.factory.compute().instances
        request = compute_v1.AggregatedListInstancesRequest(
            project=self.project, filter=self.label_filter(extra), max_results=PAGE_SIZE
        )
        try:
            pages = client.aggregated_list(
                request=request, retry=self.factory.retry(), timeout=self.factory.timeout
            )
            vms = [vm for _, scoped in pages for vm in scoped.instances]
        except CALL_ERRORS as err:
            raise api_error(err, "listing instances") from None
        # The filter is GCE's; check again here so a filter GCE ignored can never hand over another
        # cluster's VMs to be terminated.
        return [
            instance_from_gce(vm, self.project, self.price)
            for vm in vms
            if vm.labels.get(LABEL_CLUSTER) == self.cluster and vm.labels.get(LABEL_MANAGED) == "true"
        ]

    def ended(self, instance: Instance) -> None:
        """Report ``instance`` as terminated for ``GONE_RETENTION`` seconds (unless GCE lists it again): a
        launch that answered ``pending`` and whose insert then failed never gets a VM to vanish."""
        with self._lock:
            self._gone[instance.provider_id] = (
                replace(instance, state=InstanceState.TERMINATED),
                self.clock(),
            )

    def owned(self) -> list[Instance]:
        """Owned VMs in any state, with recently vanished ones reported as terminated."""
        listed = self.find()
        now = self.clock()
        with self._lock:
            current = {i.provider_id: i for i in listed}
            for pid, before in self._last.items():
                if pid not in current and pid not in self._gone:
                    self._gone[pid] = (replace(before, state=InstanceState.TERMINATED), now)
            for pid in list(self._gone):
                if pid in current or now - self._gone[pid][1] >= GONE_RETENTION:
                    del self._gone[pid]
            self._last = current
            gone = [i for i, _ in self._gone.values()]
        return sorted([*listed, *gone], key=lambda i: (i.created, i.id))
