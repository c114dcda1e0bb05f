"""What a reconcile works out from the cluster's pods (where they run, what it reports about them) follows the
snapshot it was given, reconcile after reconcile, though it is worked out once for as long as the cache hands
over the same pods."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autoscaler.cli.snapshot import SnapshotBuilder
from autoscaler.runtime.controller import Controller
from autoscaler.runtime.kube.convert import pod_from_api
from autoscaler.runtime.observability.metrics import Metrics
from providers.simulated import SimulatedProvider
from tests.builders import node, pod
from tests.fakes.reconcile import CallRecorder, Clock, StaticCluster
from tests.unit.test_metrics import families

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.model import Snapshot
    from autoscaler.runtime.controller import ReconcileResult

CATALOG = Path(__file__).resolve().parents[2] / "config" / "catalogs" / "aws-us-east-1.csv"
NOW = 1_795_172_400.0  # 2026-11-20T11:00:00Z


def snapshot(*objects: dict[str, Any]) -> Snapshot:
    builder = SnapshotBuilder()
    for obj in objects:
        builder.add(obj, "test")
    return builder.build()


def gpu_node(name: str) -> dict[str, Any]:
    return node(name, instance_type="g5.12xlarge", cpu="48", memory="192Gi", gpu=4)


def trainer(name: str, gpus: int, phase: str = "Running") -> dict[str, Any]:
    return pod(name, gpu=gpus, node_name="gpu-a", phase=phase, message=None)


class Reconciles:
    """One controller reconciling whatever snapshot the test shows it next."""

    def __init__(self, cfg: Config, first: Snapshot) -> None:
        self.cluster = StaticCluster(first)
        self.metrics = Metrics()
        self.events = CallRecorder()
        clock = Clock(NOW)
        self.controller = Controller(
            config=lambda: cfg,
            cluster=self.cluster,
            provider=SimulatedProvider(cfg, clock=clock),
            actions=CallRecorder(),
            events=self.events,
            metrics=self.metrics,
            clock=clock,
        )

    def run(self, view: Snapshot | None = None) -> ReconcileResult:
        if view is not None:
            self.cluster.view = view
        result = self.controller.reconcile_once()
        assert result.error == ""
        return result

    def gpus_requested(self) -> float:
        [sample] = families(self.metrics)["tidal_cluster_gpus_requested"]
        return sample.value

    def unreadable_told(self) -> list[str]:
        return [args[0].key for args in self.events.named("pod") if args[1] == "Unreadable"]


def test_gpus_requested_by_bound_pods_follow_a_new_snapshot(make_config: Callable[..., Config]) -> None:
    cfg = make_config(simulated={"catalog": str(CATALOG)})
    first = snapshot(gpu_node("gpu-a"), trainer("train-0", 2), trainer("train-1", 1))
    reconciles = Reconciles(cfg, first)
    reconciles.run()
    assert reconciles.gpus_requested() == 3
    reconciles.run()  # the same pods again
    assert reconciles.gpus_requested() == 3

    finished = trainer("train-1", 1, phase="Succeeded")
    reconciles.run(snapshot(gpu_node("gpu-a"), trainer("train-0", 2), finished, trainer("train-2", 2)))
    assert reconciles.gpus_requested() == 4  # train-1 finished, train-2 arrived


def test_a_pod_tidal_cannot_read_is_told_about_only_while_the_snapshot_holds_it(
    make_config: Callable[..., Config],
) -> None:
    cfg = make_config(simulated={"catalog": str(CATALOG)})
    odd = trainer("batch-0", 1)
    odd["spec"]["tolerations"] = [{"key": "example.com/slots", "operator": "Lt", "value": "4"}]
    builder = SnapshotBuilder()
    builder.add(gpu_node("gpu-a"), "test")
    builder.parts["pods"][("default", "batch-0")] = pod_from_api(odd)
    reconciles = Reconciles(cfg, builder.build())
    reconciles.run()
    reconciles.run()
    assert reconciles.unreadable_told() == ["default/batch-0", "default/batch-0"]

    reconciles.run(snapshot(gpu_node("gpu-a"), trainer("batch-0", 1)))  # fixed: readable now
    assert reconciles.unreadable_told() == ["default/batch-0", "default/batch-0"]


def test_a_plan_sees_the_pods_of_a_new_snapshot_on_their_nodes(make_config: Callable[..., Config]) -> None:
    cfg = make_config(simulated={"catalog": str(CATALOG)})
    room = node("web-a", cpu="8", memory="32Gi")
    waiting = pod("batch-0", cpu="3", memory="4Gi")
    reconciles = Reconciles(cfg, snapshot(room, waiting))
    first = reconciles.run()
    assert first.plan is not None and [a.pod for a in first.plan.launch.absorbed] == ["default/batch-0"]

    full = [
        pod(f"web-{i}", cpu="3", memory="4Gi", node_name="web-a", phase="Running", message=None)
        for i in (0, 1)
    ]
    second = reconciles.run(snapshot(room, *full, waiting))  # the node's room is taken now
    assert second.plan is not None and second.plan.launch.absorbed == ()
    assert [la.pods for la in second.plan.launch.launches] == [("default/batch-0",)]
