"""An object the API server accepted is never dropped: what tidal cannot fully read is kept, marked, and left
alone by every decision (never demand, never moved, its node never empty, never removed)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autoscaler.cli.snapshot import SnapshotBuilder
from autoscaler.core.demand import Reason
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.runtime.controller import Controller
from autoscaler.runtime.kube.convert import node_from_api, pod_from_api
from providers.simulated import SimulatedProvider
from tests.builders import aws_offerings, node, pod
from tests.fakes.reconcile import CallRecorder, Clock, StaticCluster

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.model import Snapshot

CATALOG = Path(__file__).resolve().parents[2] / "config" / "catalogs" / "aws-us-east-1.csv"
NOW = 1_795_172_400.0  # 2026-11-20T11:00:00Z
LONG_UNNEEDED = {"tidal.dev/unneeded-since": "2026-11-20T09:00:00Z"}


def newer_toleration(obj: dict[str, Any]) -> dict[str, Any]:
    """A toleration operator a newer API server accepts (Kubernetes 1.35's Lt/Gt, behind a feature gate)."""
    obj["spec"]["tolerations"] = [
        {"key": "example.com/slots", "operator": "Lt", "value": "4", "effect": "NoSchedule"}
    ]
    return obj


def from_api(*objects: dict[str, Any]) -> Snapshot:
    builder = SnapshotBuilder()
    for obj in objects:
        kind = obj["kind"]
        if kind == "Pod":
            builder.parts["pods"][(obj["metadata"]["namespace"], obj["metadata"]["name"])] = pod_from_api(obj)
        elif kind == "Node":
            builder.parts["nodes"][("", obj["metadata"]["name"])] = node_from_api(obj)
    return builder.build()


def test_a_pod_with_a_field_tidal_does_not_know_is_kept_and_marked() -> None:
    running = pod_from_api(newer_toleration(pod("batch-0", node_name="gpu-a", phase="Running", message=None)))
    assert running.key == "default/batch-0"
    assert running.node_name == "gpu-a"
    assert running.unreadable.startswith("spec.tolerations[0].operator: 'Lt'")


def test_a_pending_pod_tidal_cannot_read_is_never_demand_and_says_why(
    make_config: Callable[..., Config],
) -> None:
    snap = from_api(newer_toleration(pod("batch-0")))
    result = plan(PlanInput(snap, aws_offerings(), make_config(), NOW))
    assert result.launch.launches == ()
    [ignored] = result.demand.ignored
    assert ignored.reason == Reason.UNREADABLE
    assert "spec.tolerations[0].operator" in ignored.detail


def test_the_node_of_a_pod_tidal_cannot_read_is_never_taken_for_empty(
    make_config: Callable[..., Config],
) -> None:
    managed = node("gpu-a", managed=True, annotations=LONG_UNNEEDED)
    running = newer_toleration(pod("batch-0", node_name="gpu-a", phase="Running", message=None))
    result = plan(PlanInput(from_api(managed, running), aws_offerings(), make_config(), NOW))
    assert result.removal.removals == ()
    [blocked] = result.removal.blocked
    assert "cannot read all of pod default/batch-0" in blocked.reason


def test_the_same_node_without_that_pod_would_be_removed(make_config: Callable[..., Config]) -> None:
    result = plan(
        PlanInput(
            from_api(node("gpu-a", managed=True, annotations=LONG_UNNEEDED)),
            aws_offerings(),
            make_config(),
            NOW,
        )
    )
    assert [r.node for r in result.removal.removals] == ["gpu-a"]


def test_pending_pods_are_not_planned_onto_a_node_whose_pods_tidal_cannot_read(
    make_config: Callable[..., Config],
) -> None:
    existing = node("cpu-a", cpu="8", memory="32Gi")
    unread = newer_toleration(pod("batch-0", node_name="cpu-a", phase="Running", message=None))
    result = plan(PlanInput(from_api(existing, unread, pod("web-0")), aws_offerings(), make_config(), NOW))
    assert result.launch.absorbed == ()
    assert len(result.launch.launches) == 1


def test_a_node_tidal_cannot_read_is_kept_and_never_removed(make_config: Callable[..., Config]) -> None:
    obj = node("gpu-a", managed=True, annotations=LONG_UNNEEDED)
    obj["spec"]["taints"] = [{"key": "example.com/maintenance", "effect": "Drain"}]
    read = node_from_api(obj)
    assert read.unreadable.startswith("spec.taints[0].effect")
    result = plan(PlanInput(from_api(obj), aws_offerings(), make_config(), NOW))
    assert result.removal.removals == ()
    assert [b.node for b in result.removal.blocked] == ["gpu-a"]


def _reconcile(snap: Snapshot, cfg: Config) -> CallRecorder:
    events = CallRecorder()
    clock = Clock(NOW)
    controller = Controller(
        config=lambda: cfg,
        cluster=StaticCluster(snap),
        provider=SimulatedProvider(cfg, clock=clock),
        actions=CallRecorder(),
        events=events,
        clock=clock,
    )
    assert controller.reconcile_once().error == ""
    return events


def test_a_running_pod_tidal_cannot_read_is_told_that_it_keeps_its_node(
    make_config: Callable[..., Config],
) -> None:
    managed = node("gpu-a", managed=True, annotations=LONG_UNNEEDED)
    running = newer_toleration(pod("batch-0", node_name="gpu-a", phase="Running", message=None))
    events = _reconcile(from_api(managed, running), make_config(simulated={"catalog": str(CATALOG)}))
    [told] = [args for args in events.named("pod") if args[1] == "Unreadable"]
    assert told[0].key == "default/batch-0"
    assert "spec.tolerations[0].operator: 'Lt'" in told[2] and "never removes node gpu-a" in told[2]


def test_a_node_tidal_cannot_read_is_told_that_it_is_kept(make_config: Callable[..., Config]) -> None:
    obj = node("gpu-a", managed=True, annotations=LONG_UNNEEDED)
    obj["spec"]["taints"] = [{"key": "example.com/maintenance", "effect": "Drain"}]
    events = _reconcile(from_api(obj), make_config(simulated={"catalog": str(CATALOG)}))
    [told] = [args for args in events.named("node") if args[1] == "Unreadable"]
    assert told[0] == "gpu-a" and "spec.taints[0].effect" in told[2] and "never removes it" in told[2]
