"""The simulated instances' kubelets: each running instance registers its Node, reports its GPUs once they are
ready (on a DRA node, as the ResourceSlice its DRA driver publishes), and its Node goes NotReady when the
instance ends, all through the Kubernetes API (``registerNodes``)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable

import structlog

from autoscaler.config.values import Config
from autoscaler.core.allocatable import node_allocatable
from autoscaler.core.new_nodes import node_labels
from autoscaler.runtime.catalog import TemplateBuilder
from providers.simulated.devices import is_dra_node
from providers.simulated.node import NodeRegistrar, gpu_status, node_manifest
from providers.simulated.state import RUNNING, TERMINATED, CloudState, InstanceRecord

__all__ = ["Kubelets", "describe_error", "record_done"]

log = structlog.get_logger("tidal.providers.simulated")
_REGISTER, _GPUS, _DOWN = "register", "gpus", "down"


class Kubelets:
    """The kubelets of one cluster's simulated instances, writing to its API server."""

    def __init__(self, kube: NodeRegistrar, config: Config, region: str, template: TemplateBuilder) -> None:
        """Write through ``kube`` for the instances of ``config.cluster_name``."""
        self.kube = kube
        self.config = config
        self.region = region
        self._template = template
        self._lock = threading.Lock()  # retry counts
        self._failures: dict[tuple[str, str], int] = {}

    def due(
        self, state: CloudState, now: float, records: Iterable[InstanceRecord] | None = None
    ) -> list[tuple[str, InstanceRecord]]:
        """The API writes due by ``now`` (for ``records`` of the state only, when given), each with a copy of
        its instance's record."""
        work = []
        for record in state.instances.values() if records is None else records:
            if record.cluster != self.config.cluster_name:
                continue  # another cluster's kubelets register with another API server
            registered = record.registered_at
            if record.state == RUNNING and registered is None and now >= record.register_at:
                work.append((_REGISTER, dataclasses.replace(record)))
            elif (
                record.state == RUNNING
                and registered is not None
                and record.offering.gpu_count
                and not record.gpus_reported
                and now >= registered + record.gpu_ready_delay
            ):
                work.append((_GPUS, dataclasses.replace(record)))
            elif record.state == TERMINATED and registered is not None and not record.node_down:
                work.append((_DOWN, dataclasses.replace(record)))
        return work

    def step(self, action: str, record: InstanceRecord, now: float) -> bool:
        """One API write for one node; False (logged, retried on the next advance) when it fails."""
        offering = record.offering
        if offering.template is None:  # read back from a state file, which keeps no templates
            offering = dataclasses.replace(offering, template=self._template(offering))
        capacity = offering.capacity()
        allocatable = node_allocatable(offering, reserved=self.config.kube_reserved)
        labels = {**node_labels(offering, self.config), **record.labels}
        try:
            if action == _REGISTER:
                manifest = node_manifest(
                    name=record.id,
                    provider_id=record.provider_id,
                    instance_type=offering.instance_type,
                    zone=offering.zone,
                    region=offering.region or self.region,
                    arch=offering.arch.value,
                    labels=labels,
                    taints=record.taints,
                    capacity=capacity,
                    allocatable=allocatable,
                    now=now,
                )
                created = self.kube.create(manifest)
                log.info("node_registered" if created else "node_already_registered", node=record.id)
            elif action == _GPUS and is_dra_node(labels):
                # NVIDIA's DRA driver, not the device plugin: the GPUs become devices of a ResourceSlice.
                found = self.kube.publish_devices(record.id, offering)
                log.info("node_devices_published" if found else "node_gone_before_gpus", node=record.id)
            elif action == _GPUS:
                found = self.kube.patch_status(record.id, gpu_status(capacity, allocatable))
                log.info("node_gpus_ready" if found else "node_gone_before_gpus", node=record.id)
            else:
                found = self.kube.mark_unreachable(record.id, now)
                log.info("node_not_ready" if found else "node_already_deleted", node=record.id)
        except Exception as err:  # any API or transport failure: the next advance tries again
            with self._lock:
                attempts = self._failures[(action, record.id)] = (
                    self._failures.get((action, record.id), 0) + 1
                )
            if attempts & (attempts - 1) == 0:  # 1, 2, 4, 8, ... so an outage does not flood the log
                log.warning(
                    "node_update_failed",
                    action=action,
                    node=record.id,
                    attempts=attempts,
                    error=describe_error(err),
                )
            return False
        with self._lock:
            self._failures.pop((action, record.id), None)
        return True


def record_done(record: InstanceRecord, action: str, now: float) -> None:
    """Note in the cloud's state that ``action`` reached the API server, so it is not written again."""
    if action == _REGISTER and record.registered_at is None:
        record.registered_at = now
    elif action == _GPUS:
        record.gpus_reported = True
    elif action == _DOWN:
        record.node_down = True


def describe_error(err: BaseException) -> str:
    """An API or transport failure in one line: its type and HTTP status, or its message."""
    status = getattr(err, "status", None)
    reason = getattr(err, "reason", None)
    if status is not None:
        return f"{type(err).__name__}: HTTP {status} {reason or ''}".strip()
    return f"{type(err).__name__}: {err}"
