"""Stand-ins for what a Controller reads and acts through, for tests that drive one reconcile at a time."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autoscaler.core.model import TAINT_DISRUPTED, Pod, Snapshot

if TYPE_CHECKING:
    from autoscaler.runtime.seams import ClusterView, ClusterWrites, EventRecorder

T0_EPOCH = 1_795_168_800.0  # builders.T0 (2026-11-20T10:00:00Z), when the test objects were created


class StaticCluster:
    """The cluster as the controller reads it; a test replaces ``view`` between reconciles."""

    def __init__(self, view: Snapshot) -> None:
        self.view = view

    def snapshot(self) -> Snapshot:
        return self.view


class CallRecorder:
    """Actions and events, remembered instead of sent to an API server; ``fail`` makes an action raise.

    ``on_server`` is what the API server holds on each node (pod keys), for the fresh read before a Node
    is deleted (``workload_on``); a node it does not name holds nothing. ``registered`` names the Node of
    each instance (by providerID) the API server has, for ``node_for``."""

    def __init__(
        self,
        fail: dict[str, Exception] | None = None,
        on_server: dict[str, list[str]] | None = None,
        registered: dict[str, str] | None = None,
    ) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.fail = dict(fail or {})
        self.on_server = dict(on_server or {})
        self.registered = dict(registered or {})

    def _call(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        if name in self.fail:
            raise self.fail[name]

    # -- ClusterActions --------------------------------------------------------------------------------

    def cordon(self, node_name: str, *, taint_key: str = TAINT_DISRUPTED) -> None:
        self._call("cordon", node_name)

    def uncordon(self, node_name: str, *, taint_key: str = TAINT_DISRUPTED) -> None:
        self._call("uncordon", node_name)

    def evict(self, namespace: str, name: str, *, grace_period_seconds: int | None = None) -> None:
        self._call("evict", namespace, name)

    def delete_node(self, name: str) -> bool:
        self._call("delete_node", name)
        return False

    def workload_on(self, node_name: str) -> list[str]:
        self._call("workload_on", node_name)
        return list(self.on_server.get(node_name, ()))

    def node_for(self, provider_id: str) -> str | None:
        self._call("node_for", provider_id)
        return self.registered.get(provider_id)

    def label_node(self, name: str, labels: Mapping[str, str | None]) -> None:
        self._call("label_node", name, labels)

    def annotate_node(self, name: str, annotations: Mapping[str, str | None]) -> None:
        self._call("annotate_node", name, annotations)

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        self._call("annotate_pod", namespace, name, annotations)

    def write_status(self, namespace: str, name: str, data: Mapping[str, str]) -> None:
        self._call("write_status", namespace, name, data)

    # -- EventRecorder ---------------------------------------------------------------------------------

    # An event of the default type is remembered without it: (pod, reason, message).

    def pod(self, pod: Pod, reason: str, message: str, event_type: str = "Normal") -> None:
        self._call("pod", pod, reason, message, *_unless_normal(event_type))

    def node(self, node_name: str, reason: str, message: str, event_type: str = "Normal") -> None:
        self._call("node", node_name, reason, message, *_unless_normal(event_type))

    def named(self, name: str) -> list[tuple[Any, ...]]:
        return [args for called, args in self.calls if called == name]


def _unless_normal(event_type: str) -> tuple[str, ...]:
    return () if event_type == "Normal" else (event_type,)


class Clock:
    """Time the test moves by hand."""

    def __init__(self, now: float = T0_EPOCH) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


if TYPE_CHECKING:  # mypy holds the fake to the contracts the controller is typed against
    _writes: ClusterWrites = CallRecorder()
    _events: EventRecorder = CallRecorder()
    _view: ClusterView = StaticCluster(Snapshot())
