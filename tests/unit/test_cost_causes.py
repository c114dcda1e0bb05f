"""Where the cost above the lower bound went: small runs, laid out by hand, whose causes are known."""

from __future__ import annotations

import itertools
import random
from typing import TYPE_CHECKING, Any

import pytest

from autoscaler.core.model import CapacityType, InstanceState
from autoscaler.core.offering import Instance
from autoscaler.sim.configuration import build_config
from autoscaler.sim.cost_causes import CAUSES, causes, holdings
from autoscaler.sim.lower_bound import Boot, lower_bound
from autoscaler.sim.record import Record, cost_so_far
from autoscaler.sim.run import DEFAULT_CATALOG, _provider, simulate
from autoscaler.sim.scenario import Outage, load_scenario, parse_scenario
from tests.builders import pod, snapshot

if TYPE_CHECKING:
    from pathlib import Path

    from autoscaler.config.options import Config
    from autoscaler.core.offering import Offering

pytest.importorskip("scipy")

BOOT = Boot(cpu=105.0, gpu=135.0)
GPU_POD = {"gpu": 1, "cpu": "3", "memory": "12Gi"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
QUARTER_POD = {
    "cpu": "500m",
    "memory": "1Gi",
    "annotations": {"gpu-fraction": "0.25"},
    "tolerations": [GPU_TOLERATION],
}


def _world(capacity_types: list[str]) -> tuple[Config, list[Offering]]:
    scenario = parse_scenario(
        {
            "name": "by-hand",
            "config": {
                "cloud": "aws",
                "region": "us-east-1",
                "zones": ["us-east-1a"],
                "capacityTypes": capacity_types,
                "instanceFamilyInclusions": ["g4dn", "m6i"],
            },
        },
        "by-hand.yaml",
    )
    config = build_config(scenario, {}, catalog=str(DEFAULT_CATALOG), cloud="", region="")
    offerings = _provider(config, clock=lambda: 0.0, kube=None).offerings()
    return config, [o for o in offerings if o.instance_type.split(".")[0] in ("g4dn", "m6i")]


@pytest.fixture(scope="module")
def world() -> tuple[Config, list[Offering]]:
    return _world(["on-demand"])


@pytest.fixture(scope="module")
def spot_world() -> tuple[Config, list[Offering]]:
    return _world(["spot", "on-demand"])


def _price(offerings: list[Offering], instance_type: str, capacity: str = "on-demand") -> float:
    return min(o.price for o in offerings if o.instance_type == instance_type and o.capacity_type == capacity)


class _Run:
    """A run laid out by hand: instances launched and ended, pods bound to them for a while."""

    def __init__(self, offerings: list[Offering]):
        self.offerings = offerings
        self.rec = Record("by-hand", "by-hand")
        self.n = 0

    def node(self, instance_type: str, launched: float, ended: float, capacity: str = "on-demand") -> str:
        o = min(
            (x for x in self.offerings if x.instance_type == instance_type and x.capacity_type == capacity),
            key=lambda x: x.price,
        )
        iid = f"i-{len(self.rec.started):04d}"
        inst = Instance(
            iid, f"aws:///{o.zone}/{iid}", o.instance_type, o.zone, CapacityType(capacity),
            InstanceState.RUNNING, created=launched, price=o.price, gpu_count=o.gpu_count,
        )  # fmt: skip
        self.rec.started[iid] = (inst, launched)
        self.rec.ended[iid] = ended
        return iid

    def pod(self, node: str, started: float, ended: float, **kwargs: Any) -> None:
        from autoscaler.sim.pods import SimPod

        self.n += 1
        p = snapshot(pod(f"p{self.n}", message=None, node_name=node, phase="Running", **kwargs)).pods[0]
        self.rec.pods.append(SimPod(p, "job", "", "", ended - started, True, started, started, ended))

    def causes(self, config: Config, end: float) -> tuple[dict[str, float], float]:
        self.rec.end = end
        bound = lower_bound(self.rec.pods, self.offerings, config, end, boot=BOOT)
        found = causes(self.rec, self.offerings, config, bound, boot=BOOT)
        above = cost_so_far(self.rec, end) - bound["cost"]
        assert sum(found.values()) == pytest.approx(above, abs=1e-3)  # the causes add up, to the cent
        return found, above


def test_a_node_kept_after_its_pod_is_idle_and_its_boot_is_the_bounds_own(
    world: tuple[Config, list[Offering]],
) -> None:
    config, offerings = world
    run = _Run(offerings)
    node = run.node("g4dn.xlarge", 0.0, 135.0 + 3600.0 + 600.0)
    run.pod(node, 135.0, 3735.0, **GPU_POD)
    found, _ = run.causes(config, 7200.0)
    assert found["idleAfterPods"] == pytest.approx(0.526 * 600 / 3600, abs=1e-4)
    assert found["boot"] == pytest.approx(0.0, abs=1e-4)  # any policy pays to have the node up before
    assert found["packing"] == pytest.approx(0.0, abs=1e-3)
    assert found["oversized"] == pytest.approx(0.0, abs=1e-4)


def test_a_pod_on_a_bigger_node_than_it_needs_pays_the_premium_as_oversized(
    world: tuple[Config, list[Offering]],
) -> None:
    config, offerings = world
    run = _Run(offerings)
    node = run.node("g4dn.2xlarge", 0.0, 3735.0)
    run.pod(node, 135.0, 3735.0, **GPU_POD)
    found, _ = run.causes(config, 7200.0)
    premium = _price(offerings, "g4dn.2xlarge") - 0.526
    assert found["oversized"] == pytest.approx(premium, abs=1e-4)
    assert found["boot"] == pytest.approx(premium * 135 / 3600, abs=1e-4)  # it booted dearer too


def test_quarter_gpu_pods_on_separate_nodes_are_a_packing_loss(world: tuple[Config, list[Offering]]) -> None:
    config, offerings = world
    run = _Run(offerings)
    for _ in range(2):
        node = run.node("g4dn.xlarge", 0.0, 3735.0)
        run.pod(node, 135.0, 3735.0, **QUARTER_POD)
    found, _ = run.causes(config, 3735.0)
    # Both pods fit one g4dn.xlarge: the second node, pods' hour and boot alike, was not needed.
    assert found["packing"] == pytest.approx(0.526, abs=1e-3)
    assert found["boot"] == pytest.approx(0.526 * 135 / 3600, abs=1e-3)
    assert found["oversized"] == pytest.approx(0.0, abs=1e-4)


def test_a_cpu_pod_alone_on_a_gpu_node_is_cpu_waste(world: tuple[Config, list[Offering]]) -> None:
    config, offerings = world
    run = _Run(offerings)
    node = run.node("g4dn.xlarge", 0.0, 3705.0)
    run.pod(node, 105.0, 3705.0, cpu="500m", memory="1Gi")
    found, _ = run.causes(config, 3705.0)
    m6i_large = _price(offerings, "m6i.large")  # the cheapest node of the pod's on-demand choices
    assert found["cpuPodsOnGpuNodes"] == pytest.approx(0.526 - m6i_large, abs=1e-4)
    assert found["oversized"] == 0.0


def test_an_on_demand_node_where_spot_holds_the_pod_pays_the_difference(
    spot_world: tuple[Config, list[Offering]],
) -> None:
    config, offerings = spot_world
    spot = _price(offerings, "g4dn.xlarge", "spot")
    assert spot < 0.526
    run = _Run(offerings)
    node = run.node("g4dn.xlarge", 0.0, 3735.0)
    run.pod(node, 135.0, 3735.0, **GPU_POD)
    found, _ = run.causes(config, 3735.0)
    assert found["onDemandInsteadOfSpot"] == pytest.approx(0.526 - spot, abs=1e-4)
    assert found["boot"] == pytest.approx((0.526 - spot) * 135 / 3600, abs=1e-4)  # it booted dearer too


def test_a_node_that_never_held_a_pod_is_empty_before_use(world: tuple[Config, list[Offering]]) -> None:
    config, offerings = world
    run = _Run(offerings)
    used = run.node("g4dn.xlarge", 0.0, 3735.0)
    run.pod(used, 135.0, 3735.0, **GPU_POD)
    run.node("g4dn.xlarge", 0.0, 735.0)
    found, _ = run.causes(config, 3735.0)
    assert found["emptyBeforeUse"] == pytest.approx(0.526 * 600 / 3600, abs=1e-4)
    assert found["boot"] == pytest.approx(0.526 * 135 / 3600, abs=1e-4)  # its boot is not the bound's


def test_a_bigger_node_bought_while_the_right_one_was_out_is_not_oversized(
    world: tuple[Config, list[Offering]],
) -> None:
    config, offerings = world
    run = _Run(offerings)
    node = run.node("g4dn.2xlarge", 0.0, 3735.0)
    run.pod(node, 135.0, 3735.0, **GPU_POD)
    outage = Outage(at=0.0, until=600.0, instance_type="g4dn.xlarge")
    run.rec.end = 3735.0
    bound = lower_bound(run.rec.pods, offerings, config, 3735.0, [outage], BOOT)
    found = causes(run.rec, offerings, config, bound, boot=BOOT, outages=[outage])
    assert found["oversized"] == pytest.approx(0.0, abs=1e-4)
    assert sum(found.values()) == pytest.approx(cost_so_far(run.rec, 3735.0) - bound["cost"], abs=1e-3)


def test_a_simulated_days_report_says_where_the_cost_above_its_bound_went(tmp_path: Path) -> None:
    doc = simulate(load_scenario("kai-day"), report_dir=str(tmp_path)).summary
    above = doc["costAboveBound"]
    assert set(above) == set(CAUSES)
    assert sum(above.values()) == pytest.approx(doc["cost"]["total"] - doc["lowerBound"]["cost"], abs=0.01)
    bound = doc["lowerBound"]
    assert bound["cost"] == pytest.approx(bound["fractional"] + bound["wholeNodes"] + bound["boot"], abs=1e-3)
    report = (tmp_path / "report.md").read_text()
    assert f"Cost above the bound: ${doc['cost']['total'] - bound['cost']:.2f}." in report
    assert f"| {CAUSES['oversized']} | {above['oversized']:.2f} |" in report


def _holdings_one_piece_at_a_time(
    spans: list[tuple[float, float, int]], first: float, gone: float
) -> list[tuple[float, float, dict[int, int]]]:
    """A node's pieces with every pod checked against every piece."""
    cuts = sorted({t for s, e, _ in spans for t in (s, e) if first <= t <= gone} | {gone})
    out = []
    for lo, hi in itertools.pairwise(cuts):
        count: dict[int, int] = {}
        for s, e, ci in spans:
            if s <= lo and e >= hi:
                count[ci] = count.get(ci, 0) + 1
        out.append((lo, hi, count))
    return out


def test_a_nodes_pieces_hold_the_pods_that_ran_through_each_whole_piece() -> None:
    rng = random.Random(7)
    for _ in range(200):
        spans = []
        for _ in range(rng.randint(0, 12)):
            start = float(rng.randint(0, 40) * 30)
            spans.append((start, start + rng.randint(0, 20) * 30, rng.randint(0, 3)))
        spans.sort()
        first = min((s for s, _, _ in spans), default=1500.0)
        gone = float(rng.choice([900, 1200, 1500, 1800]))
        swept = [(lo, hi, dict(count)) for lo, hi, count in holdings(spans, first, gone)]
        assert swept == _holdings_one_piece_at_a_time(spans, first, gone), spans
