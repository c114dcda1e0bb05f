"""The exact plan: a small batch gets the cheapest nodes that hold it, never dearer than the heuristic's, within
the limits and the pods' constraints, the same every time."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from autoscaler.cli.render import why_lines
from autoscaler.core.demand import select
from autoscaler.core.gpu.share import ComputeMode, GpuShare, ShareSource
from autoscaler.core.planning import exact
from autoscaler.core.planning.classes import pod_mode
from autoscaler.core.planning.exact_solve import solve
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.runtime.catalog import offering_templates, read_catalog_csv
from tests.builders import anti_affinity, pod, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.offering import Offering
    from autoscaler.core.planning.planner import Plan

CATALOG = Path(__file__).resolve().parents[2] / "config" / "catalogs" / "aws-us-east-1.csv"
ZONES = ("us-east-1a", "us-east-1b")
NOW = 1_795_168_800.0
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
KAI_NO_GPU = "No node in the default node-pool has GPU resources"


def catalog() -> list[Offering]:
    """us-east-1 as the shipped catalog prices it, in two zones, with EKS node templates."""
    return read_catalog_csv(
        CATALOG, cloud="aws", region="us-east-1", zones=ZONES, template=offering_templates("aws")
    )


def quarter(name: str, **kw: Any) -> dict[str, Any]:
    """An inference pod asking KAI for a quarter of a GPU, with 1 cpu and 4Gi."""
    return pod(
        name,
        cpu="1",
        memory="4Gi",
        scheduler="kai-scheduler",
        message=KAI_NO_GPU,
        annotations={"gpu-fraction": "0.25", **kw.pop("annotations", {})},
        labels={"app": "infer"},
        tolerations=[GPU_TOLERATION],
        **kw,
    )


def run(make_config: Callable[..., Config], *objs: dict[str, Any], **cfg: Any) -> Plan:
    config = make_config(zones=list(ZONES), **cfg)
    return plan(PlanInput(snapshot(*objs), catalog(), config, NOW))


def launched(result: Plan) -> Counter[str]:
    return Counter(la.offering.instance_type for la in result.launch.launches)


def test_eight_quarter_gpu_pods_get_two_g4dn_2xlarge_not_three_g4dn_xlarge(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, *[quarter(f"infer-{i}") for i in range(8)])
    assert launched(result) == {"g4dn.2xlarge": 2}
    assert result.launch.cost_per_hour == pytest.approx(1.504)
    assert sorted(p for la in result.launch.launches for p in la.pods) == [
        f"default/infer-{i}" for i in range(8)
    ]


def test_the_heuristic_alone_prices_the_batch_whole_and_buys_two_g4dn_2xlarge(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, *[quarter(f"infer-{i}") for i in range(8)], exactPlanMaxPods=0)
    assert launched(result) == {"g4dn.2xlarge": 2}


def memory_shares() -> list[dict[str, Any]]:
    """A model server asking KAI for 12000 MiB of a GPU and an embedder asking for 4000 MiB: both fit one T4
    (16384 MiB), which the heuristic does not see: it gives the embedder a quarter-L4 g6f.2xlarge ($0.475/h)
    and the model server a g4dn.xlarge ($0.526/h)."""
    objs = [quarter("llm-0"), quarter("embed-0")]
    for obj, mib in zip(objs, ("12000", "4000"), strict=True):
        annotations = obj["metadata"]["annotations"]
        del annotations["gpu-fraction"]
        annotations["gpu-memory"] = mib
    return objs


def test_two_memory_shares_that_fit_one_gpu_get_one_node(make_config: Callable[..., Config]) -> None:
    heuristic = run(make_config, *memory_shares(), exactPlanMaxPods=0)
    assert launched(heuristic) == {"g6f.2xlarge": 1, "g4dn.xlarge": 1}
    result = run(make_config, *memory_shares())
    assert [(la.offering.instance_type, la.pods) for la in result.launch.launches] == [
        ("g4dn.xlarge", ("default/embed-0", "default/llm-0"))
    ]
    assert result.launch.cost_per_hour == pytest.approx(0.526)


def test_a_batch_over_exact_plan_max_pods_keeps_the_heuristic_plan(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, *memory_shares(), exactPlanMaxPods=1)
    assert launched(result) == {"g6f.2xlarge": 1, "g4dn.xlarge": 1}


def test_exact_launches_say_what_the_exact_plan_saves(make_config: Callable[..., Config]) -> None:
    result = run(make_config, *memory_shares())
    for la in result.launch.launches:
        assert la.why is not None
        assert la.why.exact_saving == pytest.approx(1.001 - 0.526)
        assert la.alternatives, "an exact node still has fallbacks for a capacity error"


BATCHES: list[list[dict[str, Any]]] = [
    [quarter(f"infer-{i}") for i in range(5)],
    [pod(f"web-{i}", cpu="3", memory="6Gi") for i in range(5)]
    + [pod(f"batch-{i}", cpu="1", memory="2Gi") for i in range(3)],
    [pod(f"train-{i}", cpu="6", memory="24Gi", gpu=1) for i in range(3)]
    + [pod(f"big-{i}", cpu="12", memory="48Gi", gpu=2) for i in range(2)],
    [quarter(f"infer-{i}", annotations={"gpu-fraction": "0.5"}) for i in range(3)]
    + [quarter(f"small-{i}", annotations={"gpu-fraction": "0.1"}) for i in range(7)],
]


@pytest.mark.parametrize("objs", BATCHES, ids=["quarters", "cpu-mix", "whole-gpus", "fractions-mix"])
def test_the_exact_step_never_raises_cost_and_places_the_same_pods(
    make_config: Callable[..., Config], objs: list[dict[str, Any]]
) -> None:
    heuristic = run(make_config, *objs, exactPlanMaxPods=0)
    tidal = run(make_config, *objs)
    assert tidal.launch.cost_per_hour <= heuristic.launch.cost_per_hour + 1e-9
    assert sorted(p for la in tidal.launch.launches for p in la.pods) == sorted(
        p for la in heuristic.launch.launches for p in la.pods
    )
    assert tidal.launch.unplaced == heuristic.launch.unplaced


def test_the_exact_plan_never_exceeds_cluster_gpu_limit(make_config: Callable[..., Config]) -> None:
    objs = [pod(f"train-{i}", cpu="2", memory="8Gi", gpu=1) for i in range(5)]
    result = run(make_config, *objs, clusterGPULimit=3)
    assert result.launch.gpus_after <= 3
    assert sum(la.offering.gpu_count for la in result.launch.launches) <= 3
    assert len(result.launch.unplaced) == 2


def test_the_exact_plan_keeps_pods_in_the_zone_they_select(make_config: Callable[..., Config]) -> None:
    objs = [
        quarter(f"infer-{i}", node_selector={"topology.kubernetes.io/zone": "us-east-1b"}) for i in range(8)
    ]
    result = run(make_config, *objs)
    assert launched(result) == {"g4dn.2xlarge": 2}
    assert {la.offering.zone for la in result.launch.launches} == {"us-east-1b"}


def test_the_exact_plan_keeps_pods_on_the_gpu_model_they_ask_for(make_config: Callable[..., Config]) -> None:
    objs = [quarter(f"infer-{i}", annotations={"tidal.dev/instance-gpu-skus": "L4"}) for i in range(8)]
    result = run(make_config, *objs)
    assert result.launch.launches
    assert {la.offering.gpu_model for la in result.launch.launches} == {"L4"}
    assert all(o.gpu_model == "L4" for la in result.launch.launches for o in la.alternatives)


def test_the_exact_plan_is_the_same_every_time(make_config: Callable[..., Config]) -> None:
    objs = BATCHES[1] + BATCHES[3]
    first, second = run(make_config, *objs), run(make_config, *objs)
    assert first.launch == second.launch
    assert [la.offering.key for la in first.launch.launches] == [
        la.offering.key for la in second.launch.launches
    ]


def test_without_the_solver_the_heuristic_plan_stands(
    make_config: Callable[..., Config], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ortools.sat.python", None)  # as if the exact extra were not installed
    result = run(make_config, *memory_shares())
    assert launched(result) == {"g6f.2xlarge": 1, "g4dn.xlarge": 1}


# -- the model itself ----------------------------------------------------------------------------------


def problem_of(
    make_config: Callable[..., Config], objs: list[dict[str, Any]], **limits: int
) -> exact.Problem:
    config = make_config(zones=list(ZONES))
    snap = snapshot(*objs)
    index = OfferingIndex(catalog(), config, snap.daemonsets)
    demand = select(snap, config, gpu_memory_mib=index.smallest_gpu_memory())
    items = [
        (p, demand.constraints[p.key], pod_mode(p, demand.constraints[p.key], index)) for p in demand.counted
    ]
    return exact.problem(items, index, exact.Limits(**limits))


def test_the_optimum_of_eight_quarters_is_two_g4dn_2xlarge_with_four_shares_on_each_gpu(
    make_config: Callable[..., Config],
) -> None:
    p = problem_of(make_config, [quarter(f"infer-{i}") for i in range(8)])
    outcome = solve(p)
    assert outcome.status == "optimal" and outcome.solution is not None
    assert outcome.solution.cost == pytest.approx(1.504)
    assert [p.types[b.type].offering.instance_type for b in outcome.solution.nodes] == ["g4dn.2xlarge"] * 2
    assert [b.devices for b in outcome.solution.nodes] == [(((0, 4),),)] * 2
    assert exact.verify(p, outcome.solution) == ""


def test_the_model_buys_no_more_gpus_than_the_limit_leaves(make_config: Callable[..., Config]) -> None:
    objs = [quarter(f"infer-{i}") for i in range(8)]
    assert solve(problem_of(make_config, objs, gpus=1)).status == "infeasible"
    outcome = solve(problem_of(make_config, objs, gpus=2))
    assert outcome.solution is not None
    assert (
        sum(problem_of(make_config, objs).types[b.type].offering.gpu_count for b in outcome.solution.nodes)
        <= 2
    )


def test_no_plan_is_cheaper_than_the_optimum(make_config: Callable[..., Config]) -> None:
    p = problem_of(make_config, [quarter(f"infer-{i}") for i in range(8)])
    assert solve(p, cost_bound=1.5).status == "infeasible"


def test_verify_refuses_more_shares_on_a_gpu_than_it_holds(make_config: Callable[..., Config]) -> None:
    p = problem_of(make_config, [quarter(f"infer-{i}") for i in range(8)])
    g4dn = next(i for i, t in enumerate(p.types) if t.offering.instance_type == "g4dn.12xlarge")
    crowded = exact.Solution((exact.Bought(g4dn, ((0, 8),), (((0, 8),),)),), p.types[g4dn].price)
    assert "holds 200 hundredths" in exact.verify(p, crowded)
    spread = exact.Solution((exact.Bought(g4dn, ((0, 8),), (((0, 4),), ((0, 4),))),), p.types[g4dn].price)
    assert exact.verify(p, spread) == ""


def share(portion: float, mode: ComputeMode = ComputeMode.TIME_SLICING) -> GpuShare:
    return GpuShare(ShareSource.FRACTION, "c", portion=portion, compute_mode=mode)


def test_shares_pack_onto_devices_when_some_assignment_holds_them() -> None:
    # First-fit, biggest first, would put 0.5 with 0.4 and find no room for the last 0.25.
    shares = [(0, share(0.5), 1), (1, share(0.4), 1), (2, share(0.3), 2), (3, share(0.25), 2)]
    assert exact.pack(shares, (2, 16384, 1.0)) == (((0, 1), (3, 2)), ((1, 1), (2, 2)))
    assert exact.pack([(0, share(0.6), 3)], (2, 16384, 1.0)) is None


def test_shares_of_two_compute_modes_never_share_a_device() -> None:
    shares = [(0, share(0.25), 1), (1, share(0.25, ComputeMode.SM_SHARING), 1)]
    assert exact.pack(shares, (1, 16384, 1.0)) is None
    assert exact.pack(shares, (2, 16384, 1.0)) == (((0, 1),), ((1, 1),))


def test_tidal_plan_says_the_launches_are_an_exact_plan_and_what_it_saves(
    make_config: Callable[..., Config],
) -> None:
    lines = why_lines(run(make_config, *memory_shares()).launch.launches)
    assert (
        "  exact plan: these launches cost $0.4750/h less than the heuristic's for the same pods"
        " (exactPlanMaxPods)"
    ) in lines
    heuristic = why_lines(run(make_config, *memory_shares(), exactPlanMaxPods=0).launch.launches)
    assert not any("exact plan" in line for line in heuristic)


def test_pods_whose_place_depends_on_other_pods_keep_the_heuristic_plan(
    make_config: Callable[..., Config],
) -> None:
    # The model has no inter-pod terms: with any in the batch the exact step stands aside.
    apart = anti_affinity("kubernetes.io/hostname", {"app": "batch"})
    objs = [
        *memory_shares(),
        pod("batch-0", cpu="1", memory="1Gi", labels={"app": "batch"}, pod_anti_affinity=[apart]),
    ]
    result = run(make_config, *objs)
    assert all(la.why is None or la.why.exact_saving == 0 for la in result.launch.launches)
    assert {"g6f.2xlarge", "g4dn.xlarge"} <= set(launched(result))
