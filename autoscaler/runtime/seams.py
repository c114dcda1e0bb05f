"""What the controller reads, acts and reports through: the contracts its collaborators keep.

The cloud's side is :class:`autoscaler.cloud.CloudProvider`, the drains' :class:`autoscaler.runtime.drain.DrainRunner`
(re-exported here), the planner's :class:`autoscaler.core.planning.Planner`.

The daemon wires the Kubernetes API, Prometheus and the Events API into them; the simulator its emulated
cluster; tests their recording fakes. mypy checks every one of them against these Protocols.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ParamSpec, Protocol

import structlog

from autoscaler.core.model import CapacityBuffer, Pod, ProvisioningRequest, Snapshot
from autoscaler.core.planning.queues import QueueView
from autoscaler.runtime.drain import Actions as DrainActions
from autoscaler.runtime.drain import DrainRunner
from autoscaler.runtime.drain import Recorder as NodeEvents

__all__ = [
    "ClusterView",
    "ClusterWrites",
    "DrainRunner",
    "EventRecorder",
    "Metrics",
    "NoMetrics",
    "RequestWrites",
    "attempt",
]

log = structlog.get_logger("tidal.controller")
_P = ParamSpec("_P")


class ClusterView(Protocol):
    """The cluster as last observed (a watch cache in the daemon)."""

    def snapshot(self) -> Snapshot: ...


class ClusterWrites(DrainActions, Protocol):
    """Writes to the API server: what a drain does, and the labels, annotations and status a reconcile
    keeps. Any of them may raise; the controller logs it and tries again next reconcile."""

    def node_for(self, provider_id: str) -> str | None: ...
    def label_node(self, name: str, labels: Mapping[str, str | None]) -> None: ...
    def annotate_node(self, name: str, annotations: Mapping[str, str | None]) -> None: ...
    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None: ...
    def write_status(self, namespace: str, name: str, data: Mapping[str, str]) -> None: ...


class EventRecorder(NodeEvents, Protocol):
    """Kubernetes Events on pods and nodes; recording one never fails the caller."""

    def pod(self, pod: Pod, reason: str, message: str, event_type: str = "Normal") -> object: ...


class RequestWrites(Protocol):
    """Answers to ProvisioningRequests and CapacityBuffers: their status, and Events on them."""

    def request_status(self, request: ProvisioningRequest, status: Mapping[str, Any]) -> None: ...
    def buffer_status(self, buffer: CapacityBuffer, status: Mapping[str, Any]) -> None: ...
    def event(
        self, kind: str, namespace: str, name: str, uid: str, reason: str, message: str, event_type: str = ...
    ) -> None: ...


class Metrics(Protocol):
    """What a reconcile measures. An implementation must never raise: a metric that cannot be recorded is
    logged and dropped (see :class:`autoscaler.runtime.observability.metrics.Metrics`)."""

    def observe_reconcile(self, seconds: float, ok: bool, now: float) -> None: ...
    def set_pending(self, counts: Mapping[tuple[str, str], int]) -> None: ...
    def set_reason_regexp(self, matched: int, unmatched: int) -> None: ...
    def set_queues(self, views: Iterable[QueueView]) -> None: ...
    def set_nodes(self, counts: Mapping[str, int]) -> None: ...
    def set_gpus(self, provisioned: int, requested: int, limit: int | None) -> None: ...
    def set_cost(self, per_hour: float) -> None: ...
    def launch(self, offering_instance_type: str, zone: str, capacity_type: str, outcome: str) -> None: ...
    def termination(self, reason: str, outcome: str) -> None: ...
    def launch_refusal(self, provider: str, refusal: str) -> None: ...
    def transition_refused(self, old: str, new: str) -> None: ...
    def gang_rollback(self) -> None: ...
    def scale_up_latency(self, seconds: float) -> None: ...
    def cloud_error(self, provider: str, operation: str, kind: str) -> None: ...


class NoMetrics:
    """Measures nothing: the controller of a dry run, a simulation or a test that does not look."""

    def observe_reconcile(self, seconds: float, ok: bool, now: float) -> None:
        """Nothing is recorded."""

    def set_pending(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Nothing is recorded."""

    def set_reason_regexp(self, matched: int, unmatched: int) -> None:
        """Nothing is recorded."""

    def set_queues(self, views: Iterable[QueueView]) -> None:
        """Nothing is recorded."""

    def set_nodes(self, counts: Mapping[str, int]) -> None:
        """Nothing is recorded."""

    def set_gpus(self, provisioned: int, requested: int, limit: int | None) -> None:
        """Nothing is recorded."""

    def set_cost(self, per_hour: float) -> None:
        """Nothing is recorded."""

    def launch(self, offering_instance_type: str, zone: str, capacity_type: str, outcome: str) -> None:
        """Nothing is recorded."""

    def termination(self, reason: str, outcome: str) -> None:
        """Nothing is recorded."""

    def launch_refusal(self, provider: str, refusal: str) -> None:
        """Nothing is recorded."""

    def transition_refused(self, old: str, new: str) -> None:
        """Nothing is recorded."""

    def gang_rollback(self) -> None:
        """Nothing is recorded."""

    def scale_up_latency(self, seconds: float) -> None:
        """Nothing is recorded."""

    def cloud_error(self, provider: str, operation: str, kind: str) -> None:
        """Nothing is recorded."""


def attempt(call: Callable[_P, object], *args: _P.args, **kwargs: _P.kwargs) -> bool:
    """Call an API action whose failure must not stop the reconcile; False (logged) when it failed."""
    try:
        call(*args, **kwargs)
    except Exception as err:  # the next reconcile tries again
        log.warning(
            "action_failed",
            action=getattr(call, "__name__", "?"),
            target=args[0] if args else "",
            error=str(err),
        )
        return False
    return True
