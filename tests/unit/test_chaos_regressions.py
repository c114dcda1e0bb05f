"""What the chaos benchmark found, each kept from coming back: a cache that lags never makes tidal kill a
node in use or replace a node twice, what the cloud said to one launch of a round holds for the rest, a
gang's rolled-back node that runs pods stays, and a node the cloud reclaims keeps the pods tidal never evicts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from autoscaler.cloud import Throttled
from autoscaler.config.options import Config
from autoscaler.core.disruption.interrupted import interrupted
from autoscaler.core.offering import Instance
from autoscaler.core.planning.decisions import BIN_SELECTION, Launch
from autoscaler.runtime.availability import Availability
from autoscaler.runtime.controller import Controller
from autoscaler.runtime.drain import DrainJob
from autoscaler.runtime.fleet import Fleet
from autoscaler.runtime.gangs import GangLaunch, Gangs
from autoscaler.runtime.launching import Launcher
from autoscaler.runtime.seams import NoMetrics
from autoscaler.sim.cluster import EmulatedCluster
from autoscaler.sim.engine import SyncDrainer
from autoscaler.sim.scenario import JobSpec
from providers.simulated import SimulatedProvider
from tests.builders import INSUFFICIENT_GPU, node, pod, snapshot
from tests.fakes.reconcile import CallRecorder, Clock, StaticCluster

CATALOG = (
    "cloud,region,instance_type,vcpu,memory_mib,gpu_count,gpu_fraction,gpu_vendor,gpu_model,gpu_memory_mib,"
    "arch,on_demand_usd_per_hour,spot_usd_per_hour,zone\n"
    "aws,us-east-1,m6i.2xlarge,8,32768,0,0,,,,x86_64,0.384,,\n"
    "aws,us-east-1,g5.xlarge,4,16384,1,1,NVIDIA,A10G,24576,x86_64,1.006,,\n"
)


@pytest.fixture
def config(tmp_path: Path, make_config: Callable[..., Config]) -> Callable[..., Config]:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(CATALOG)

    def build(**keys: object) -> Config:
        simulated = {"catalog": str(catalog), "launchDelay": "0s", **keys.pop("simulated", {})}  # type: ignore[dict-item]
        return make_config(simulated=simulated, **keys)

    return build


def controller(
    cfg: Config, provider: SimulatedProvider, cluster: StaticCluster, actions: CallRecorder
) -> Controller:
    return Controller(
        config=lambda: cfg,
        cluster=cluster,
        provider=provider,
        actions=actions,
        events=CallRecorder(),
        clock=provider.clock,
    )


def test_an_instance_the_cache_shows_without_a_node_is_not_terminated_while_the_api_server_has_one(
    config: Callable[..., Config],
) -> None:
    cfg = config(registrationTimeout="10m")
    clock = Clock()
    provider = SimulatedProvider(cfg, clock=clock)
    waiting = pod("infer-0", cpu="2", memory="8Gi", gpu=1, message=INSUFFICIENT_GPU)
    cluster = StaticCluster(snapshot(waiting))  # a broken watch: the Node never reaches the cache
    [launched] = controller(cfg, provider, cluster, CallRecorder()).reconcile_once().launched
    assert launched.instance is not None
    actions = CallRecorder(registered={launched.instance.provider_id: "ip-10-0-0-7"})
    tidal = controller(cfg, provider, cluster, actions)
    clock.now += 11 * 60  # past registrationTimeout

    tidal.reconcile_once()

    assert [i.state for i in provider.instances()] == ["running"]
    assert actions.named("node_for") == [(launched.instance.provider_id,)]


def test_a_disruption_started_is_not_started_again_while_the_cache_lags(
    config: Callable[..., Config],
) -> None:
    cfg = config(disruption={"nodeMaxLifetime": "1h", "budgets": []})
    clock = Clock()
    provider = SimulatedProvider(cfg, clock=clock)
    old = node("gpu-a", instance_type="g5.xlarge", cpu="4", memory="16Gi", gpu=1, managed=True)
    job = pod("train-0", node_name="gpu-a", phase="Running", message=None, gpu=1, cpu="3", memory="12Gi")
    cluster = StaticCluster(snapshot(old, job))  # never shows the annotations tidal writes
    clock.now += 2 * 3600
    tidal = controller(cfg, provider, cluster, CallRecorder())

    first = tidal.reconcile_once()
    clock.now += 30
    second = tidal.reconcile_once()

    assert len([o for o in first.launched if o.instance is not None]) == 1
    assert second.launched == []
    assert len(provider.instances()) == 1
    assert second.plan is not None
    blocked = {b.node: b.reason for b in second.plan.removal.blocked}
    assert blocked["gpu-a"].startswith("being disrupted (expired): waiting for 1 replacement node(s)")


def gpu_launches(cfg: Config, provider: SimulatedProvider, n: int) -> list[Launch]:
    g5 = next(o for o in provider.offerings() if o.instance_type == "g5.xlarge")
    return [Launch(g5, (f"default/infer-{i}",), BIN_SELECTION) for i in range(n)]


def test_after_a_throttle_the_rest_of_the_round_is_held_back(config: Callable[..., Config]) -> None:
    cfg = config(maxParallelLaunches=1)
    provider = SimulatedProvider(cfg, clock=Clock())
    provider.inject_error("launch", Throttled(30.0))
    launcher = Launcher(provider, Availability(unavailable_for=180.0), Fleet(cfg), NoMetrics())

    outcomes = launcher.launch_all(gpu_launches(cfg, provider, 3), cfg, [], 0.0)

    assert [c for c, _ in provider.calls if c == "launch"] == ["launch"]
    assert [o.deferred for o in outcomes] == [False, True, True]
    assert "throttled launches a moment ago" in outcomes[1].error


def test_after_a_quota_refusal_the_rest_of_the_round_skips_what_it_covers(
    config: Callable[..., Config],
) -> None:
    cfg = config(maxParallelLaunches=1, simulated={"quotaGPUs": 0})
    provider = SimulatedProvider(cfg, clock=Clock())
    launcher = Launcher(provider, Availability(unavailable_for=180.0), Fleet(cfg), NoMetrics())

    outcomes = launcher.launch_all(gpu_launches(cfg, provider, 3), cfg, [], 0.0)

    assert [c for c, _ in provider.calls if c == "launch"] == ["launch"]
    assert outcomes[0].refusals and outcomes[0].refusals[0].refusal.value == "quota"
    assert [o.deferred for o in outcomes[1:]] == [True, True]


def test_a_rolled_back_gang_node_the_api_server_shows_running_pods_is_kept(
    config: Callable[..., Config],
) -> None:
    cfg = config()
    provider = SimulatedProvider(cfg, clock=Clock())
    [g5] = gpu_launches(cfg, provider, 1)
    from autoscaler.core.offering import LaunchRequest

    instance = provider.launch(LaunchRequest("tok-1", (g5.offering,)))
    terminated: list[str] = []

    def terminate(inst: Instance, reason: str) -> bool:
        terminated.append(inst.id)
        return True

    gang = GangLaunch("default/pg-train", 0.0, {"tok-1": instance})
    Gangs.roll_back(
        [gang],
        Fleet(cfg),
        Launcher(provider, Availability(unavailable_for=180.0), Fleet(cfg), NoMetrics()),
        terminate,
        NoMetrics(),
        in_use=lambda inst: "pod default/web-0 runs on its Node ip-10-0-0-7",
    )
    assert terminated == []


def test_a_reclaimed_node_keeps_the_pods_tidal_never_evicts_and_is_left_to_the_cloud() -> None:
    clock = Clock()
    cluster = EmulatedCluster(clock)
    cluster.create(node("gpu-a", instance_type="g5.xlarge", cpu="4", memory="16Gi", gpu=1, managed=True))
    keys = cluster.submit(JobSpec(0.0, "web", 2, 0, 500, 10**12, 3600.0), clock.now)
    cluster.schedule(clock.now)
    from dataclasses import replace

    protected = cluster.pods[keys[0]]
    protected.pod = replace(protected.pod, annotations={"tidal.dev/do-not-evict": "true"})
    [removal] = interrupted(cluster.snapshot(), {cluster.nodes["gpu-a"].provider_id})
    assert removal.pods == (keys[1],)  # the protected pod is not asked to leave

    provider = CallRecorder()
    pods = tuple(cluster.pods[k].pod for k in removal.pods)
    SyncDrainer(cluster, provider, lambda _: None).submit(
        DrainJob("gpu-a", pods, None, removal.reason, reclaimed=True)
    )

    assert "gpu-a" in cluster.nodes and cluster.nodes["gpu-a"].unschedulable  # cordoned, for the cloud
    assert cluster.pods[keys[0]].pod.node_name == "gpu-a"
    assert keys[1] not in cluster.pods  # evicted (its Job recreated it, pending)
