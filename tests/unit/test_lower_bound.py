"""The lower bound: exact for steady demand, below what any simulated policy paid, and aware of outages."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from autoscaler.core.fit import pod_constraints
from autoscaler.core.gpu.share import GpuShare, ShareSource
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.sim.cluster import SimPod
from autoscaler.sim.configuration import build_config
from autoscaler.sim.lower_bound import (
    GPU,
    Boot,
    Columns,
    lookahead_cost,
    lower_bound,
    moment_bound,
    share_need,
)
from autoscaler.sim.run import DEFAULT_CATALOG, _provider, simulate
from autoscaler.sim.scenario import Outage, load_scenario, parse_scenario
from tests.builders import offering, pod, snapshot

if TYPE_CHECKING:
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.offering import Offering

pytest.importorskip("scipy")
np = pytest.importorskip("numpy")

SCENARIO = parse_scenario(
    {
        "name": "steady",
        "config": {
            "cloud": "aws",
            "region": "us-east-1",
            "zones": ["us-east-1a"],
            "capacityTypes": ["on-demand"],
            "instanceFamilyInclusions": ["g4dn", "m6i"],
        },
    },
    "steady.yaml",
)


@pytest.fixture(scope="module")
def world() -> tuple[Config, list[Offering]]:
    config = build_config(SCENARIO, {}, catalog=str(DEFAULT_CATALOG), cloud="", region="")
    offerings = _provider(config, clock=lambda: 0.0, kube=None).offerings()
    return config, [o for o in offerings if o.instance_type.split(".")[0] in ("g4dn", "m6i")]


def _runs(n: int, start: float, end: float, **kwargs: Any) -> list[SimPod]:
    pods = snapshot(*(pod(f"infer-{i}", message=None, **kwargs) for i in range(n))).pods
    return [SimPod(p, "infer", "", "", end - start, True, start, started=start, ended=end) for p in pods]


def test_steady_demand_costs_exactly_the_cheapest_fractional_packing(
    world: tuple[Config, list[Offering]],
) -> None:
    config, offerings = world
    runs = _runs(6, 0.0, 7200.0, gpu=1, cpu="3", memory="12Gi")
    # A g4dn.xlarge (1 GPU, $0.526/h on demand) holds one such pod; no g4dn is cheaper per GPU.
    per_pod = min(o.price / o.gpu_count for o in offerings if o.gpu_count and o.capacity_type == "on-demand")
    assert per_pod == pytest.approx(0.526)
    bound = lower_bound(runs, offerings, config, end=7200.0)
    assert bound["cost"] == pytest.approx(6 * per_pod * 2, rel=1e-6)


def test_demand_that_changes_is_integrated_between_starts_and_ends(
    world: tuple[Config, list[Offering]],
) -> None:
    config, offerings = world
    one_gpu = {"gpu": 1, "cpu": "3", "memory": "12Gi"}
    runs = _runs(2, 0.0, 3600.0, **one_gpu) + _runs(1, 1800.0, 5400.0, **one_gpu)
    bound = lower_bound(runs, offerings, config, end=7200.0)
    assert bound["cost"] == pytest.approx(0.526 * (2 * 1.0 + 1 * 1.0), rel=1e-6)


def test_a_run_started_during_an_outage_of_the_cheapest_offering_is_bounded_by_the_next(
    world: tuple[Config, list[Offering]],
) -> None:
    config, offerings = world
    runs = _runs(1, 600.0, 4200.0, gpu=1, cpu="3", memory="12Gi")
    free = lower_bound(runs, offerings, config, end=7200.0)["cost"]
    outage = Outage(at=0.0, until=1200.0, instance_type="g4dn.xlarge")
    out = lower_bound(runs, offerings, config, end=7200.0, outages=[outage])["cost"]
    assert free == pytest.approx(0.526)
    assert out == pytest.approx(0.752)  # g4dn.2xlarge, the next cheapest node with a GPU


@pytest.mark.parametrize("name", ["kai-day", "spot-storm"])
@pytest.mark.parametrize("policy", ["tidal", "karpenter-like"])
def test_no_policy_pays_less_than_the_bound(name: str, policy: str) -> None:
    doc = simulate(load_scenario(name), policy=policy).summary
    assert 0 < doc["lowerBound"]["cost"] <= doc["cost"]["total"]


SHARED_CATALOG = Path(__file__).resolve().parents[3] / "shared" / "data" / "catalog" / "instance_catalog.csv"


@pytest.mark.skipif(not SHARED_CATALOG.exists(), reason="needs the shared instance catalog")
def test_memory_in_bytes_beside_cpu_in_cores_still_gives_a_bound() -> None:
    """Six GPU pods from the Alibaba trace over us-east-1's whole catalog: the LP in raw units (bytes next to
    cores) was one that HiGHS called unbounded, which left this moment without a bound."""
    config = build_config(
        load_scenario("trace"), {}, catalog=str(SHARED_CATALOG), cloud="aws", region="us-east-1"
    )
    offerings = _provider(config, clock=lambda: 0.0, kube=None).offerings()
    partial = {"tidal.dev/instance-partial-gpu": "true"}
    mix: list[tuple[int, dict[str, Any]]] = [
        (2, {"gpu": 1, "cpu": "3152m", "memory": "5600Mi", "annotations": partial}),
        (2, {"gpu": 1, "cpu": "11400m", "memory": "47Gi"}),
        (1, {"gpu": 1, "cpu": "4", "memory": "23999807488", "annotations": partial}),
        (1, {"gpu": 1, "cpu": "8", "memory": "16Gi"}),
    ]
    runs = [run for n, kw in mix for run in _runs(n, 0.0, 3600.0, **kw)]
    bound = lower_bound(runs, offerings, config, end=3600.0)
    assert "why" not in bound
    assert bound["samples"] == 1
    # The nodes tidal's planner would buy for the same pods are one feasible answer to the same LP.
    pending = snapshot(*(pod(f"p{i}-{k}", **kw) for i, (n, kw) in enumerate(mix) for k in range(n)))
    planned = sum(
        la.offering.price for la in plan(PlanInput(pending, offerings, config, 0.0)).launch.launches
    )
    assert 0 < bound["cost"] <= planned


def test_a_pod_is_never_split_across_nodes_too_small_to_hold_it(world: tuple[Config, list[Offering]]) -> None:
    config, offerings = world
    # Four g4dn.xlarge would hold four GPUs for $2.104/h, but one pod asking for four needs one node that
    # has them: a g4dn.12xlarge, or half of a g4dn.metal, $3.912/h either way.
    runs = _runs(1, 0.0, 3600.0, gpu=4, cpu="16", memory="64Gi")
    bound = lower_bound(runs, offerings, config, end=3600.0)
    assert bound["cost"] == pytest.approx(3.912)


def test_one_moment_is_bounded_like_a_run_of_an_hour(world: tuple[Config, list[Offering]]) -> None:
    config, offerings = world
    runs = _runs(3, 0.0, 3600.0, gpu=1, cpu="3", memory="12Gi")
    demand = {(pod_constraints(runs[0].pod, config), runs[0].pod.requests): 3}
    hourly = moment_bound(demand, OfferingIndex(offerings, config))
    assert hourly == pytest.approx(lower_bound(runs, offerings, config, end=3600.0)["cost"])
    assert hourly == pytest.approx(3 * 0.526)


QUARTER = {"gpu-fraction": "0.25"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _share_runs(n: int, annotations: dict[str, str]) -> list[SimPod]:
    return _runs(
        n, 0.0, 3600.0, cpu="500m", memory="1Gi", annotations=annotations, tolerations=[GPU_TOLERATION]
    )


def test_four_quarter_gpu_pods_are_bounded_by_one_gpu_not_four(world: tuple[Config, list[Offering]]) -> None:
    config, offerings = world
    runs = _share_runs(4, QUARTER)
    assert runs[0].pod.gpu_share is not None and not runs[0].pod.requests.gpus
    bound = lower_bound(runs, offerings, config, end=3600.0)
    assert bound["cost"] == pytest.approx(0.526)  # one g4dn.xlarge holds all four quarters


def test_a_quarter_gpu_pod_is_worth_a_quarter_of_the_gpu_it_needs_in_fractional_nodes(
    world: tuple[Config, list[Offering]],
) -> None:
    config, offerings = world
    one = lower_bound(_share_runs(1, QUARTER), offerings, config, end=3600.0)
    assert one["fractional"] == pytest.approx(0.526 / 4, rel=1e-6)  # nodes in fractions, so is the GPU


def test_a_lone_quarter_gpu_pod_still_needs_a_whole_node(world: tuple[Config, list[Offering]]) -> None:
    config, offerings = world
    one = lower_bound(_share_runs(1, QUARTER), offerings, config, end=3600.0)
    assert one["cost"] == pytest.approx(0.526, rel=1e-4)  # a whole g4dn.xlarge for the hour
    assert one["wholeNodes"] == pytest.approx(0.526 * 3 / 4, rel=1e-3)


def test_three_half_gpu_pods_need_two_gpus_of_whole_nodes(world: tuple[Config, list[Offering]]) -> None:
    config, offerings = world
    half = {"gpu-fraction": "0.5"}
    bound = lower_bound(_share_runs(3, half), offerings, config, end=3600.0)
    assert bound["fractional"] == pytest.approx(1.5 * 0.526, rel=1e-6)
    assert bound["cost"] == pytest.approx(2 * 0.526, rel=1e-4)  # two g4dn.xlarge: no 1.5-GPU node exists


def test_a_memory_share_needs_its_memory_over_the_gpus(world: tuple[Config, list[Offering]]) -> None:
    config, offerings = world
    t4 = next(o for o in offerings if o.instance_type == "g4dn.xlarge")
    half = {"gpu-memory": str(t4.gpu_memory_mib // 2)}
    bound = lower_bound(_share_runs(2, half), offerings, config, end=3600.0)
    assert bound["cost"] == pytest.approx(0.526)


def test_a_share_on_a_partial_gpu_size_needs_its_part_of_a_whole_gpu_over_the_part_the_size_is() -> None:
    eighth_l4 = offering("g6f.large", 2, 8, 0.202, gpus=1, gpu_model="L4", gpu_memory_gib=3, fraction=0.125)
    assert share_need(GpuShare(ShareSource.FRACTION, "main", portion=0.1), eighth_l4) == pytest.approx(0.8)
    assert share_need(GpuShare(ShareSource.FRACTION, "main", portion=0.25), eighth_l4) is None
    two = GpuShare(ShareSource.FRACTION, "main", devices=2, portion=0.1)
    assert share_need(two, eighth_l4) is None  # one device only


def test_the_whole_node_bound_of_a_slice_holds_only_where_demand_is_at_least_its_least(
    world: tuple[Config, list[Offering]],
) -> None:
    config, offerings = world
    # One quarter-GPU pod for an hour, then none for an hour: the hour without pods costs nothing.
    runs = _runs(1, 0.0, 3600.0, cpu="500m", memory="1Gi", annotations=QUARTER, tolerations=[GPU_TOLERATION])
    runs += _runs(1, 7000.0, 7200.0, gpu=1, cpu="3", memory="12Gi")
    bound = lower_bound(runs, offerings, config, end=7200.0)
    assert bound["cost"] == pytest.approx(0.526 + 0.526 * 200 / 3600, rel=1e-4)


def test_every_run_pays_for_its_capacity_a_boot_time_before_it_starts(
    world: tuple[Config, list[Offering]],
) -> None:
    config, offerings = world
    runs = _runs(2, 600.0, 4200.0, gpu=1, cpu="3", memory="12Gi")
    bound = lower_bound(runs, offerings, config, end=7200.0, boot=Boot(cpu=105.0, gpu=135.0))
    # Two g4dn.xlarge from 135 s before the pods start: GPU pods wait for the GPUs too.
    assert bound["boot"] == pytest.approx(2 * 0.526 * 135 / 3600, abs=1e-4)
    assert bound["cost"] == pytest.approx(2 * 0.526 * (3600 + 135) / 3600, abs=1e-4)
    assert bound["bootSeconds"] == 135.0


def test_capacity_is_up_a_boot_time_before_the_demand_it_holds_but_serves_moments_in_turn() -> None:
    # 1 $/h of pods for the first 100 s, 3 $/h for the next 100 s, 60 s from launch to running pods: the
    # 3 $/h are up from 40 s (60 s before they run), but never 1 + 3 at once: one node may serve both runs.
    times = np.array([0.0, 100.0, 200.0])
    rising = lookahead_cost(times, np.array([1.0, 3.0]), 60.0)
    assert rising == pytest.approx((60 * 1 + 40 * 1 + 160 * 3) / 3600)
    falling = lookahead_cost(times, np.array([3.0, 1.0]), 60.0)
    assert falling == pytest.approx((160 * 3 + 100 * 1) / 3600)  # the first run's capacity from -60 s
    assert lookahead_cost(times, np.array([3.0, 1.0]), 0.0) == pytest.approx(400 / 3600)


def test_pods_that_only_fit_one_to_a_node_are_never_packed_two_to_a_node_in_whole_nodes(
    world: tuple[Config, list[Offering]],
) -> None:
    config, offerings = world
    # Three pods of 0.6 of a GPU: 1.8 GPUs in all, but no T4 holds two of them, so three g4dn.xlarge.
    bound = lower_bound(_share_runs(3, {"gpu-fraction": "0.6"}), offerings, config, end=3600.0)
    assert bound["fractional"] == pytest.approx(1.8 * 0.526, rel=1e-6)
    assert bound["cost"] == pytest.approx(3 * 0.526, rel=1e-4)


def _matrices_one_at_a_time(columns: Columns, demand: dict[int, int], slots: bool) -> tuple[Any, Any]:
    """The LP's constraint matrices built entry by entry, placement column by placement column."""
    from scipy.sparse import coo_matrix

    nx, nr = len(columns.offers), 4
    y = [(ci, j) for ci in sorted(demand) for j in columns.eligible[ci]]
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for v, (ci, j) in enumerate(y):
        for r in range(nr):
            need = columns.req[ci, r] + (columns.share[ci, j] if r == GPU else 0.0)
            if need:
                rows.append(j * nr + r)
                cols.append(nx + v)
                vals.append(need)
    for j in range(nx):
        for r in range(nr):
            rows.append(j * nr + r)
            cols.append(j)
            vals.append(-columns.alloc[j, r])
    height = nx * nr
    if slots:
        for v, (ci, j) in enumerate(y):
            need = columns.req[ci].copy()
            need[GPU] += columns.share[ci, j]
            used = need > 1e-12
            fits = np.floor(np.min(columns.alloc[j, used] / need[used]) + 1e-9) if used.any() else np.inf
            if not np.isfinite(fits):
                continue
            rows += [height, height]
            cols += [nx + v, j]
            vals += [1.0, -float(max(fits, 1.0))]
            height += 1
    a_ub = coo_matrix((vals, (rows, cols)), shape=(height, nx + len(y))).tocsr()
    pos = {ci: i for i, ci in enumerate(sorted(demand))}
    a_eq = coo_matrix(
        ([1.0] * len(y), ([pos[ci] for ci, _ in y], [nx + v for v in range(len(y))])),
        shape=(len(demand), nx + len(y)),
    ).tocsr()
    return a_ub, a_eq


@pytest.mark.parametrize("slots", [False, True])
def test_the_lp_matrices_are_those_built_entry_by_entry(
    world: tuple[Config, list[Offering]], slots: bool
) -> None:
    config, offerings = world
    pods = [
        *_runs(1, 0.0, 60.0, gpu=1, cpu="3", memory="12Gi"),
        *_runs(1, 0.0, 60.0, cpu="250m", memory="512Mi"),
        *_runs(1, 0.0, 60.0, gpu=4, cpu="16", memory="64Gi"),
        *_share_runs(1, QUARTER),
        *_share_runs(1, {"gpu-memory": "4000"}),
    ]
    classes = [(pod_constraints(sp.pod, config), sp.pod.requests, ()) for sp in pods]
    columns = Columns(OfferingIndex(offerings, config), classes)
    demand = {0: 3, 1: 40, 2: 1, 3: 7, 4: 2}
    a_ub, a_eq, b_eq, ny = columns._matrices(demand, slots=slots)
    want_ub, want_eq = _matrices_one_at_a_time(columns, demand, slots)
    assert ny == sum(len(columns.eligible[ci]) for ci in demand)
    assert b_eq == [3.0, 40.0, 1.0, 7.0, 2.0]
    for got, want in ((a_ub, want_ub), (a_eq, want_eq)):
        assert got.shape == want.shape
        assert np.array_equal(got.indptr, want.indptr)
        assert np.array_equal(got.indices, want.indices)
        assert np.array_equal(got.data, want.data)
        assert np.array_equal(np.signbit(got.data), np.signbit(want.data))  # -0.0 entries kept as they were


def test_the_whole_node_programs_stop_on_a_count_of_nodes_never_on_the_clock(
    world: tuple[Config, list[Offering]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import scipy.optimize

    from autoscaler.sim import lower_bound as module

    asked: list[dict[str, Any]] = []
    real = scipy.optimize.milp

    def milp(*args: Any, **kwargs: Any) -> Any:
        asked.append(dict(kwargs["options"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(scipy.optimize, "milp", milp)
    config, offerings = world
    bound = lower_bound(_share_runs(3, {"gpu-fraction": "0.6"}), offerings, config, end=3600.0)
    assert bound["cost"] == pytest.approx(3 * 0.526, rel=1e-4)
    assert asked, "no integer program was solved"
    for options in asked:
        assert "time_limit" not in options  # a busy machine would reach a lower bound in the same seconds
        assert options["node_limit"] == module.MILP_NODES
