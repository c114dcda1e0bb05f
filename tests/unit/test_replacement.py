"""Replacing capacity that went away: a reclaimed node's GPUs and a node other pods took."""

from __future__ import annotations

from collections.abc import Callable

from autoscaler.config.options import Config
from autoscaler.core.model import SPOT, InstanceState
from autoscaler.core.offering import Instance
from autoscaler.core.planning.decisions import Hold
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.core.projection import without_dead_nodes
from autoscaler.runtime.status import status_summary
from autoscaler.sim.configuration import build_config
from autoscaler.sim.engine import Simulation
from autoscaler.sim.run import DEFAULT_CATALOG, _provider
from autoscaler.sim.scenario import JobSpec, parse_scenario
from tests.builders import aws_offerings, node, pod, snapshot

GIB = 1024**3 * 1000


def test_a_node_whose_instance_terminated_holds_no_gpus_and_its_pods_are_pending_again() -> None:
    view = snapshot(
        node("ip-10-0-0-1", instance_type="g4dn.xlarge", cpu="4", memory="16Gi", gpu=1, managed=True),
        node("ip-10-0-0-2", instance_type="g4dn.xlarge", cpu="4", memory="16Gi", gpu=1, managed=True),
        pod("infer-0", gpu=1, cpu="3", memory="12Gi", node_name="ip-10-0-0-1", phase="Running", message=None),
        pod("infer-1", gpu=1, cpu="3", memory="12Gi", node_name="ip-10-0-0-2", phase="Running", message=None),
    )
    reclaimed, alive = view.nodes
    instances = [
        Instance("i-1", reclaimed.provider_id, "g4dn.xlarge", "us-east-1a", SPOT, InstanceState.TERMINATED),
        Instance("i-2", alive.provider_id, "g4dn.xlarge", "us-east-1a", SPOT, InstanceState.RUNNING),
    ]
    after = without_dead_nodes(view, instances, now=100.0)
    assert [n.name for n in after.nodes] == ["ip-10-0-0-2"]
    moved = {p.name: (p.node_name, p.phase) for p in after.pods}
    assert moved == {"infer-0": ("", "Pending"), "infer-1": ("ip-10-0-0-2", "Running")}


def _one_gpu_job(name: str, at: float, priority: int = 0) -> JobSpec:
    return JobSpec(at, name, 1, 1, 3000, 12 * GIB, 3600.0, priority=priority)


def test_a_pod_whose_new_node_another_pod_took_gets_a_new_launch_not_the_same_one_again() -> None:
    scenario = parse_scenario(
        {
            "name": "race",
            "duration": "04:00",
            "config": {"cloud": "aws", "region": "us-east-1", "zones": ["us-east-1a"]},
        },
        "race.yaml",
    )
    config = build_config(scenario, {}, catalog=str(DEFAULT_CATALOG), cloud="", region="")
    sim = Simulation(scenario, config, _provider, jobs=[])
    clock, cluster, controller = sim.clock, sim.cluster, sim.controller

    cluster.submit(_one_gpu_job("infer", 0.0), 0.0)
    cluster.schedule(0.0)
    first = controller.reconcile_once().launched
    assert [len(o.launch.pods) for o in first] == [1]

    # A higher-priority pod arrives while the node boots and the scheduler gives it that node.
    clock.now = 30.0
    cluster.submit(_one_gpu_job("urgent", 30.0, priority=100), 30.0)
    for t in (60.0, 105.0, 135.0, 300.0):  # running, registered, GPUs visible
        clock.now = t
        sim.provider.advance()
    cluster.schedule(300.0)
    assert {sp.job: bool(sp.pod.node_name) for sp in cluster.pods.values()} == {
        "infer": False,
        "urgent": True,
    }

    second = controller.reconcile_once().launched
    assert [o.launch.pods for o in second] == [("default/infer-0",)]
    assert second[0].token != first[0].token
    assert second[0].instance is not None and first[0].instance is not None
    assert second[0].instance.id != first[0].instance.id


BOUND_AT = 1_795_168_800.0  # the builders' creationTimestamp, 2026-11-20T10:00:00Z


def _bound_to_gone_node() -> list[dict[str, object]]:
    """Two pods still bound to a reclaimed spot node that is already deleted from the cluster (pod GC has not
    removed them yet), and the empty node launched to replace it."""
    return [
        node(
            "ip-10-0-0-9",
            instance_type="g4dn.xlarge",
            cpu="4",
            memory="16Gi",
            gpu=1,
            managed=True,
            annotations={"tidal.dev/unneeded-since": "2026-11-20T10:01:00Z"},
        ),
        pod("infer-0", gpu=1, cpu="3", memory="12Gi", node_name="ip-10-0-0-1", phase="Running", message=None),
    ]


def test_pods_bound_to_a_node_gone_from_the_cluster_are_demand_again() -> None:
    after = without_dead_nodes(snapshot(*_bound_to_gone_node()), [], now=BOUND_AT + 120)

    assert {p.name: (p.node_name, p.phase) for p in after.pods} == {"infer-0": ("", "Pending")}


def test_a_pod_bound_moments_ago_to_a_node_tidal_has_not_seen_yet_stays_bound() -> None:
    after = without_dead_nodes(snapshot(*_bound_to_gone_node()), [], now=BOUND_AT + 5)

    assert {p.name: (p.node_name, p.phase) for p in after.pods} == {"infer-0": ("ip-10-0-0-1", "Running")}


def test_the_replacement_of_a_deleted_node_is_not_removed_as_empty_while_its_pods_wait_for_pod_gc(
    make_config: Callable[..., Config],
) -> None:
    now = BOUND_AT + 600
    view = without_dead_nodes(snapshot(*_bound_to_gone_node()), [], now=now)
    cfg = make_config(newNodeGracePeriod="10s", scaleDown={"nodeUnneededDuration": "30s"})

    result = plan(PlanInput(view, aws_offerings(), cfg, now))

    assert result.removal.removals == ()
    assert result.launch.launches == ()
    [kept] = result.removal.blocked
    assert (kept.node, [b.kind for b in kept.blocks]) == ("ip-10-0-0-9", [Hold.PENDING_PODS])


def test_the_status_says_why_an_idle_node_stays(make_config: Callable[..., Config]) -> None:
    now = BOUND_AT + 600
    view = without_dead_nodes(snapshot(*_bound_to_gone_node()), [], now=now)
    cfg = make_config(newNodeGracePeriod="10s", scaleDown={"nodeUnneededDuration": "30s"})

    summary = status_summary(plan(PlanInput(view, aws_offerings(), cfg, now)), {}, cfg, now, [])

    assert summary["nodesKept"] == {"ip-10-0-0-9": "pending pods will run here"}
