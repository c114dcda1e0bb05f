"""A disruption that launches first, acted on by the controller: replacements are launched and Ready before
any pod is evicted, a replacement that never becomes Ready leaves the old node untouched, and a disruption
budget of one drains one node at a time."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from autoscaler.config.options import Config
from autoscaler.runtime.controller import Controller
from autoscaler.runtime.drain import DrainJob
from autoscaler.sim.configuration import build_config
from autoscaler.sim.engine import Simulation
from autoscaler.sim.run import DEFAULT_CATALOG, _provider
from autoscaler.sim.scenario import JobSpec, parse_scenario
from providers.simulated import SimulatedProvider
from tests.builders import node, pod, snapshot
from tests.fakes.reconcile import CallRecorder, Clock, StaticCluster

if TYPE_CHECKING:
    from autoscaler.runtime.controller import ReconcileResult

GIB = 1024**3 * 1000
HOUR = 3600.0


def simulation(**config: object) -> Simulation:
    scenario = parse_scenario(
        {
            "name": "lifetime",
            "duration": "48:00",
            "config": {"cloud": "aws", "region": "us-east-1", "zones": ["us-east-1a"], **config},
        },
        "lifetime.yaml",
    )
    cfg = build_config(scenario, {}, catalog=str(DEFAULT_CATALOG), cloud="", region="")
    return Simulation(scenario, cfg, _provider, jobs=[])


def step(sim: Simulation, t: float) -> ReconcileResult:
    """The world moves to ``t`` (the cloud, then the scheduler), then tidal reconciles once."""
    sim.clock.now = t
    sim.provider.advance()
    sim.cluster.schedule(t)
    result = sim.controller.reconcile_once()
    sim.provider.advance()
    sim.cluster.schedule(t)
    return result


def a_node_running_a_day_long_job(sim: Simulation) -> str:
    """One GPU node that runs one long training pod, launched at t=0."""
    sim.cluster.submit(JobSpec(0.0, "train", 1, 1, 3000, 12 * GIB, 30 * HOUR), 0.0)
    sim.cluster.schedule(0.0)
    for t in (0.0, 60.0, 105.0, 135.0, 200.0):
        step(sim, t)
    [running] = [sp for sp in sim.cluster.pods.values() if sp.pod.node_name]
    return running.pod.node_name


def test_an_expired_node_is_drained_only_once_its_replacement_is_ready_with_its_gpus() -> None:
    sim = simulation(disruption={"nodeMaxLifetime": "1h"})
    old = a_node_running_a_day_long_job(sim)
    expired = sim.cluster.nodes[old].created + HOUR
    result = step(sim, expired)
    [replacement] = [o.instance for o in result.launched if o.instance is not None]
    assert sim.cluster.nodes[old].annotations["tidal.dev/disruption"] == "expired"
    # The replacement boots (60s), registers (45s), shows its GPUs (30s): until then nothing is touched.
    for t in (expired + 60, expired + 105):
        step(sim, t)
        assert not sim.cluster.nodes[old].unschedulable
        assert sim.cluster.cut == []
    step(sim, expired + 135)
    assert old not in sim.cluster.nodes
    [moved] = sim.cluster.cut  # the one eviction, after the replacement was Ready
    assert moved.ended == expired + 135
    [now_running] = [sp for sp in sim.cluster.pods.values() if sp.pod.node_name]
    assert now_running.pod.node_name == replacement.id
    assert sim.cluster.nodes[replacement.id].allocatable.gpus == 1


def test_a_replacement_that_never_becomes_ready_leaves_the_old_node_untouched() -> None:
    sim = simulation(disruption={"nodeMaxLifetime": "1h", "replacementTimeout": "15m"})
    old = a_node_running_a_day_long_job(sim)
    # From now on the cloud's GPU nodes never get their GPUs to the device plugin.
    sim.provider.settings = dataclasses.replace(sim.provider.settings, gpu_ready_delay=100 * HOUR)
    t = sim.cluster.nodes[old].created + HOUR
    result = step(sim, t)
    [replacement] = [o.instance for o in result.launched if o.instance is not None]
    end = t + 20 * 60
    while t < end:
        t += 60
        step(sim, t)
    node = sim.cluster.nodes[old]
    assert not node.unschedulable
    assert [t.key for t in node.taints] == ["nvidia.com/gpu"]  # the GPU taint it was launched with, only
    assert sim.cluster.cut == []  # the training pod never restarted
    assert "tidal.dev/disruption" not in node.annotations
    assert node.annotations["tidal.dev/disruption-retry-after"] > "1970-01-01T01:17:00Z"
    states = {i.id: i.state for i in sim.provider.instances()}
    assert states[replacement.id] == "terminated"
    assert [e[2] for e in sim.cluster.events if e[1] == old][-1] == "DisruptionAbandoned"


class HeldDrains:
    """A drain runner whose drains run until the test says they are done."""

    def __init__(self) -> None:
        self.jobs: list[DrainJob] = []
        self.running: set[str] = set()

    def active(self) -> set[str]:
        return set(self.running)

    def submit(self, job: DrainJob) -> bool:
        self.jobs.append(job)
        self.running.add(job.node)
        return True

    def shutdown(self) -> None:
        return None


@pytest.fixture
def cfg(make_config: Callable[..., Config], tmp_path: Path) -> Config:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(
        "cloud,region,instance_type,vcpu,memory_mib,gpu_count,gpu_fraction,gpu_vendor,gpu_model,gpu_memory_mib,"
        "arch,on_demand_usd_per_hour,spot_usd_per_hour,zone\n"
        "aws,us-east-1,m6i.2xlarge,8,32768,0,0,,,,x86_64,0.384,,\n"
    )
    return make_config(
        simulated={"catalog": str(catalog)},
        scaleDown={"nodeUnneededDuration": "0s", "replaceSavings": 1},
        newNodeGracePeriod="0s",
        disruption={"budgets": [{"nodes": 1}]},
    )


def test_a_disruption_budget_of_one_drains_one_node_at_a_time(cfg: Config) -> None:
    big = node("cpu-big", cpu="64", memory="256Gi")  # not tidal's: where the pods can go
    small = [node(f"cpu-{i}", managed=True) for i in range(3)]
    pods = [pod(f"web-{i}", node_name=f"cpu-{i}", phase="Running", message=None) for i in range(3)]
    cluster = StaticCluster(snapshot(big, *small, *pods))
    drains = HeldDrains()
    clock = Clock()
    controller = Controller(
        config=lambda: cfg,
        cluster=cluster,
        provider=SimulatedProvider(cfg, clock=clock),
        actions=CallRecorder(),
        events=CallRecorder(),
        clock=clock,
        drainer=drains,
    )

    assert controller.reconcile_once().drains_started == ["cpu-0"]
    assert controller.reconcile_once().drains_started == []  # cpu-0 still draining: the budget is spent
    assert controller.last is not None and controller.last.plan is not None
    blocked = {b.node: b.reason for b in controller.last.plan.removal.blocked}
    assert "disruption budget 1 allows no more now (1 of 3 nodes being disrupted)" in blocked["cpu-1"]
    # cpu-0's drain ends: its Node and pod are gone.
    drains.running.clear()
    cluster.view = snapshot(big, *small[1:], *pods[1:])
    assert controller.reconcile_once().drains_started == ["cpu-1"]
    assert [j.node for j in drains.jobs] == ["cpu-0", "cpu-1"]


class ImagedCloud(SimulatedProvider):
    """A simulated cloud whose nodes boot from an image the test can change."""

    image = "img-2026-11"

    def node_template(self) -> dict[str, str]:
        return {"image": self.image}


def test_nodes_carry_their_template_and_a_new_image_makes_them_drift_and_be_replaced() -> None:
    scenario = parse_scenario(
        {"name": "image", "duration": "48:00", "config": {"cloud": "aws", "region": "us-east-1"}},
        "image.yaml",
    )
    cfg = build_config(scenario, {}, catalog=str(DEFAULT_CATALOG), cloud="", region="")
    sim = Simulation(scenario, cfg, lambda c, *, clock, kube: ImagedCloud(c, clock=clock, kube=kube), jobs=[])
    old = a_node_running_a_day_long_job(sim)
    launched_from = sim.cluster.nodes[old].labels["tidal.dev/node-template"]
    before = step(sim, 300.0).plan
    assert before is not None
    assert before.removal.removals == ()

    sim.provider.image = "img-2026-12"
    result = step(sim, 360.0)
    assert result.plan is not None
    [removal] = result.plan.removal.removals
    assert (removal.node, removal.method) == (old, "drifted")
    assert f"launched from node template {launched_from}" in removal.reason
    [replacement] = [o.instance for o in result.launched if o.instance is not None]
    for t in (420.0, 465.0, 495.0):  # running, registered, GPUs
        step(sim, t)
    assert old not in sim.cluster.nodes
    assert sim.cluster.nodes[replacement.id].labels["tidal.dev/node-template"] != launched_from
