"""An object the API server accepted is never dropped: what tidal cannot fully read is kept, marked, and left
alone by every decision (never demand, never moved, its node never empty, never removed)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from autoscaler.cli.snapshot import SnapshotBuilder
from autoscaler.core.demand import Reason
from autoscaler.core.disruption.protection import pod_blocker
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.runtime.controller import Controller
from autoscaler.runtime.kube.convert import (
    node_from_api,
    pdb_from_api,
    pod_from_api,
    podgroup_from_api,
    queue_from_api,
)
from providers.simulated import SimulatedProvider
from tests.builders import KAI_NO_CAPACITY, aws_offerings, node, pod
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


def kai_queue(name: str, gpu_limit: object, parent: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": {"gpu": {"quota": -1, "limit": gpu_limit, "overQuotaWeight": 1}}}
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def kai_pod(name: str, queue: str = "", group: str = "") -> dict[str, Any]:
    return pod(
        name,
        cpu="1",
        memory="4Gi",
        gpu=1,
        scheduler="kai-scheduler",
        message=KAI_NO_CAPACITY,
        labels={"kai.scheduler/queue": queue} if queue else None,
        annotations={"pod-group-name": group} if group else None,
        owner_kind="Job",
    )


def kai_config(make_config: Callable[..., Config]) -> Config:
    return make_config(schedulerNames=["default-scheduler", "kai-scheduler"])


def test_a_queue_tidal_cannot_read_is_kept_with_the_field_that_stopped_it() -> None:
    found = queue_from_api(kai_queue("research", -2, parent="org"))

    assert (found.name, found.parent) == ("research", "org")
    assert found.unreadable.startswith("spec.resources.gpu.limit: -2 is below 0 and not -1")


def test_no_gpu_pod_of_a_queue_tidal_cannot_read_is_demand(make_config: Callable[..., Config]) -> None:
    snap = dataclasses.replace(
        from_api(kai_pod("sweep-0", queue="research")),
        queues=(queue_from_api(kai_queue("research", "lots")),),
    )

    result = plan(PlanInput(snap, aws_offerings(), kai_config(make_config), NOW))

    assert result.launch.launches == ()
    [held] = result.demand.ignored
    assert held.reason == Reason.UNREADABLE
    assert held.detail.startswith("queue research cannot be read (spec.resources.gpu.limit:")


def test_the_pods_of_a_queue_under_one_tidal_cannot_read_get_no_node_either(
    make_config: Callable[..., Config],
) -> None:
    queues = (queue_from_api(kai_queue("org", -2)), queue_from_api(kai_queue("research", 4, parent="org")))
    snap = dataclasses.replace(from_api(kai_pod("sweep-0", queue="research")), queues=queues)

    result = plan(PlanInput(snap, aws_offerings(), kai_config(make_config), NOW))

    assert result.launch.launches == ()
    assert [i.detail.split(" (")[0] for i in result.demand.ignored] == ["queue org cannot be read"]


def test_the_pods_of_a_pod_group_tidal_cannot_read_get_no_node_and_say_why(
    make_config: Callable[..., Config],
) -> None:
    group = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "pg-train", "namespace": "default"},
        "spec": {"minMember": "three", "queue": "research"},
    }
    found = podgroup_from_api(group)
    snap = dataclasses.replace(
        from_api(kai_pod("train-0", group="pg-train"), kai_pod("train-1", group="pg-train")),
        podgroups=(found,),
    )

    result = plan(PlanInput(snap, aws_offerings(), kai_config(make_config), NOW))

    assert found.unreadable.startswith("spec.minMember")
    assert result.launch.launches == ()
    assert {(i.pod, i.reason) for i in result.demand.ignored} == {
        ("default/train-0", Reason.UNREADABLE),
        ("default/train-1", Reason.UNREADABLE),
    }


def test_a_disruption_budget_tidal_cannot_read_protects_every_pod_of_its_namespace() -> None:
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"minAvailable": "most", "selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 3},
    }
    found = pdb_from_api(budget)
    other = pod_from_api(
        pod("cart-0", namespace="shop", labels={"app": "cart"}, node_name="n1", phase="Running")
    )

    assert (found.selector, found.disruptions_allowed) == ((), 0)
    assert pod_blocker(other, [found], {}).startswith(
        "pod shop/cart-0 may be protected by PodDisruptionBudget shop/web, which tidal cannot read (spec.minAvailable"
    )
