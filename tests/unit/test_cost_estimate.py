"""Pods gated for a cost estimate (tidal.dev/cost-estimate, Luna's nodecostestimate): what tidal would buy for
them is planned and written on the pod, and nothing is ever launched for them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from autoscaler.core.demand import Reason
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.runtime.controller import Controller
from autoscaler.runtime.notices import COST_ESTIMATE
from providers.simulated import SimulatedProvider
from tests.builders import INSUFFICIENT_GPU, aws_offerings, pod, podgroup, snapshot
from tests.fakes.reconcile import CallRecorder, Clock, StaticCluster

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.model import Snapshot

NOW = 1_795_168_800.0  # 2026-11-20T10:00:00Z


def gated(name: str, gate: str = "tidal.dev/cost-estimate", gpus: int = 1, **kw: Any) -> dict[str, Any]:
    """A pod as a Job creates it with a scheduling gate: the scheduler never looked at it (no condition)."""
    return pod(name, cpu="2", memory="8Gi", gpu=gpus, gates=[gate], message=None, **kw)


def waiting(name: str, gpus: int = 1) -> dict[str, Any]:
    return pod(name, cpu="2", memory="8Gi", gpu=gpus, message=INSUFFICIENT_GPU)


@pytest.mark.parametrize(
    "gate", ["tidal.dev/cost-estimate", "nodecostestimate", "node.elotl.co/nodecostestimate"]
)
def test_a_gated_pod_gets_an_estimate_and_no_launch(make_config: Callable[..., Config], gate: str) -> None:
    result = plan(PlanInput(snapshot(gated("llm-0", gate=gate)), aws_offerings(), make_config(), NOW))
    assert result.launch.launches == ()
    assert [(i.pod, i.reason) for i in result.ignored] == [("default/llm-0", Reason.COST_ESTIMATE)]
    (estimate,) = result.estimates
    assert (estimate.pod, estimate.group) == ("default/llm-0", "")
    assert [(o.instance_type, o.capacity_type, o.price) for o in estimate.launches] == [
        ("g4dn.xlarge", "on-demand", 0.526)
    ]
    assert json.loads(estimate.annotation()) == {
        "pricePerHour": 0.526,
        "nodes": [
            {"instanceType": "g4dn.xlarge", "capacityType": "on-demand", "pricePerHour": 0.526, "count": 1}
        ],
    }


def test_a_pod_with_another_gate_is_neither_launched_for_nor_estimated(
    make_config: Callable[..., Config],
) -> None:
    result = plan(
        PlanInput(
            snapshot(gated("llm-0", gate="example.com/dataset-ready")), aws_offerings(), make_config(), NOW
        )
    )
    assert result.estimates == ()
    assert [i.reason for i in result.ignored] == [Reason.GATED]


def test_a_kai_podgroups_estimate_is_one_for_the_whole_group_on_its_first_pod(
    make_config: Callable[..., Config],
) -> None:
    group = {"pod-group-name": "pg-train"}
    pods = [gated(f"train-{i}", gpus=4, annotations=group) for i in (2, 0, 1)]
    result = plan(
        PlanInput(
            snapshot(podgroup("pg-train", min_member=3, queue="research"), *pods),
            aws_offerings(),
            make_config(),
            NOW,
        )
    )
    (estimate,) = result.estimates
    assert estimate.pod == "default/train-0"
    assert (estimate.group, estimate.pods) == (
        "default/pg-train",
        ("default/train-0", "default/train-1", "default/train-2"),
    )
    # Three 4-GPU pods, 2 cpu each: one 4-GPU node each.
    assert [o.instance_type for o in estimate.launches] == ["g6.12xlarge"] * 3
    assert estimate.describe() == (
        "cost estimate for PodGroup default/pg-train (3 pods): 3 x g6.12xlarge (on-demand, $4.6016/h), "
        "$13.8048/h in all; never launched while gated"
    )
    assert json.loads(estimate.annotation())["podGroup"] == "default/pg-train"


def test_estimated_pods_never_count_against_the_gpu_limit(make_config: Callable[..., Config]) -> None:
    objs = [gated("what-if-0", gpus=8), waiting("infer-0")]
    result = plan(PlanInput(snapshot(*objs), aws_offerings(), make_config(clusterGPULimit=1), NOW))
    # The waiting pod gets the only GPU the limit allows; the estimate is of the node the gated pod would need.
    assert [la.pods for la in result.launch.launches] == [("default/infer-0",)]
    assert result.gpus_after == 1
    (estimate,) = result.estimates
    assert estimate.launches == ()
    assert estimate.reason == "clusterGPULimit 1 reached (0 GPUs in use, launching or planned)"


def test_an_estimate_ignores_what_other_pods_take(make_config: Callable[..., Config]) -> None:
    objs = [gated("what-if-0"), *[waiting(f"infer-{i}") for i in range(3)]]
    result = plan(PlanInput(snapshot(*objs), aws_offerings(), make_config(), NOW))
    assert len(result.launch.launches) == 3
    assert [o.instance_type for o in result.estimates[0].launches] == ["g4dn.xlarge"]


def _controller(
    cfg: Config, view: Snapshot, *, dry_run: bool = False
) -> tuple[Controller, CallRecorder, CallRecorder]:
    events, actions = CallRecorder(), CallRecorder()
    clock = Clock()
    controller = Controller(
        config=lambda: cfg,
        cluster=StaticCluster(view),
        provider=SimulatedProvider(cfg, clock=clock),
        actions=actions,
        events=events,
        clock=clock,
        dry_run=dry_run,
    )
    return controller, events, actions


@pytest.fixture
def sim_config(tmp_path: Path, make_config: Callable[..., Config]) -> Config:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(
        "cloud,region,instance_type,vcpu,memory_mib,gpu_count,gpu_fraction,gpu_vendor,gpu_model,gpu_memory_mib,"
        "arch,on_demand_usd_per_hour,spot_usd_per_hour,zone\n"
        "aws,us-east-1,g4dn.xlarge,4,16384,1,1,NVIDIA,T4,16384,x86_64,0.526,,\n"
    )
    return make_config(simulated={"catalog": str(catalog)})


def test_the_daemon_writes_the_estimate_on_the_pod_once_and_says_so_in_an_event(sim_config: Config) -> None:
    controller, events, actions = _controller(sim_config, snapshot(gated("llm-0")))
    result = controller.reconcile_once()
    assert result.launched == []
    value = json.dumps(
        {
            "nodes": [
                {
                    "capacityType": "on-demand",
                    "count": 1,
                    "instanceType": "g4dn.xlarge",
                    "pricePerHour": 0.526,
                }
            ],
            "pricePerHour": 0.526,
        },
        separators=(",", ":"),
    )
    assert actions.named("annotate_pod") == [("default", "llm-0", {"tidal.dev/cost-estimate": value})]
    assert [(a[0].key, a[1], a[2]) for a in events.named("pod")] == [
        (
            "default/llm-0",
            COST_ESTIMATE,
            "cost estimate for this pod: g4dn.xlarge (on-demand, $0.5260/h), $0.5260/h in all; "
            "never launched while gated",
        )
    ]
    # Once the pod carries it, it is not written again.
    assert isinstance(controller.cluster, StaticCluster)
    controller.cluster.view = snapshot(gated("llm-0", annotations={"tidal.dev/cost-estimate": value}))
    controller.reconcile_once()
    assert len(actions.named("annotate_pod")) == 1


def test_a_dry_run_reports_the_estimate_but_writes_nothing_on_the_pod(sim_config: Config) -> None:
    controller, events, actions = _controller(sim_config, snapshot(gated("llm-0")), dry_run=True)
    controller.reconcile_once()
    assert actions.named("annotate_pod") == []
    assert [a[1] for a in events.named("pod")] == [COST_ESTIMATE]
