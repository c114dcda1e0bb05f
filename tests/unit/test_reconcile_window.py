"""A reconcile made while the batch window is open launches only what no later pod could share; the one that
closes the window launches the rest, and nothing is launched twice."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from autoscaler.config.options import Config
from autoscaler.core.planning.window import NODE_SETTLES, SCHEDULER_FIRST_RETRY
from autoscaler.runtime.controller import Controller, ReconcileResult
from providers.simulated import SimulatedProvider
from tests.builders import INSUFFICIENT_GPU, pod, snapshot
from tests.fakes.reconcile import CallRecorder, Clock, StaticCluster

CATALOG = (
    "cloud,region,instance_type,vcpu,memory_mib,gpu_count,gpu_fraction,gpu_vendor,gpu_model,gpu_memory_mib,"
    "arch,on_demand_usd_per_hour,spot_usd_per_hour,zone\n"
    "aws,us-east-1,m6i.2xlarge,8,32768,0,0,,,,x86_64,0.384,,\n"
    "aws,us-east-1,g4dn.xlarge,4,16384,1,1,NVIDIA,T4,16384,x86_64,0.526,,\n"
    "aws,us-east-1,g4dn.12xlarge,48,196608,4,4,NVIDIA,T4,16384,x86_64,3.912,,\n"
)


@pytest.fixture
def cfg(tmp_path: Path, make_config: Callable[..., Config]) -> Config:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(CATALOG)
    return make_config(simulated={"catalog": str(catalog)})


def controller(
    cfg: Config, cluster: StaticCluster, clock: Clock | None = None
) -> tuple[Controller, SimulatedProvider]:
    provider = SimulatedProvider(cfg, clock=clock or Clock())
    ctl = Controller(
        config=lambda: cfg,
        cluster=cluster,
        provider=provider,
        actions=CallRecorder(),
        events=CallRecorder(),
        clock=provider.clock,
    )
    return ctl, provider


def launched(result: ReconcileResult) -> list[tuple[str, tuple[str, ...]]]:
    return sorted((o.launch.offering.instance_type, o.launch.pods) for o in result.launched if o.instance)


def gpu_job(name: str) -> dict[str, object]:
    return pod(name, cpu="2", memory="8Gi", gpu=1, message=INSUFFICIENT_GPU, owner_kind="Job")


WEB = [pod(f"web-{i}", cpu="500m", memory="1Gi") for i in range(3)]


def test_with_the_window_open_the_gpu_job_is_launched_and_the_web_pods_wait(cfg: Config) -> None:
    ctl, provider = controller(cfg, StaticCluster(snapshot(gpu_job("train-0"), *WEB)))

    result = ctl.reconcile_once(window_open=True)

    assert launched(result) == [("g4dn.xlarge", ("default/train-0",))]
    assert result.held == 1
    assert [i.instance_type for i in provider.instances()] == ["g4dn.xlarge"]


def test_the_reconcile_that_closes_the_window_launches_the_rest_and_nothing_twice(cfg: Config) -> None:
    ctl, provider = controller(cfg, StaticCluster(snapshot(gpu_job("train-0"), *WEB)))
    ctl.reconcile_once(window_open=True)

    result = ctl.reconcile_once()

    assert launched(result) == [("m6i.2xlarge", ("default/web-0", "default/web-1", "default/web-2"))]
    assert result.held == 0
    assert sorted(i.instance_type for i in provider.instances()) == ["g4dn.xlarge", "m6i.2xlarge"]


def test_a_gpu_job_arriving_later_in_the_window_is_launched_when_it_arrives(cfg: Config) -> None:
    cluster = StaticCluster(snapshot(gpu_job("train-0")))
    ctl, provider = controller(cfg, cluster)
    ctl.reconcile_once(window_open=True)
    cluster.view = snapshot(gpu_job("train-0"), gpu_job("train-1"))

    result = ctl.reconcile_once(window_open=True)

    assert launched(result) == [("g4dn.xlarge", ("default/train-1",))]
    assert len(provider.instances()) == 2


def test_a_window_open_reconcile_never_exceeds_the_cluster_gpu_limit(
    tmp_path: Path, make_config: Callable[..., Config]
) -> None:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(CATALOG)
    limited = make_config(simulated={"catalog": str(catalog)}, clusterGPULimit=2)
    cluster = StaticCluster(snapshot(*(gpu_job(f"train-{i}") for i in range(2))))
    ctl, provider = controller(limited, cluster)
    ctl.reconcile_once(window_open=True)
    cluster.view = snapshot(*(gpu_job(f"train-{i}") for i in range(4)))

    ctl.reconcile_once(window_open=True)
    ctl.reconcile_once()

    assert sum(i.gpu_count for i in provider.instances()) == 2


def test_a_pod_created_in_the_same_second_as_a_launched_one_gets_a_node_of_its_own(cfg: Config) -> None:
    # Both pods carry the same creationTimestamp and the later one has the lower uid, so it sorts first. The
    # node coming up for the first is still the first's: the second gets a launch of its own, not the first's
    # again under the first's idempotency token (which the cloud would answer with the first's instance).
    late, early = gpu_job("train-a"), gpu_job("train-b")
    cluster = StaticCluster(snapshot(early))
    ctl, provider = controller(cfg, cluster)
    [first] = ctl.reconcile_once(window_open=True).launched
    cluster.view = snapshot(early, late)

    result = ctl.reconcile_once(window_open=True)

    assert launched(result) == [("g4dn.xlarge", ("default/train-a",))]
    assert len({i.launch_token for i in provider.instances()}) == 2
    assert result.plan is not None and first.instance is not None
    assert [(a.pod, a.node) for a in result.plan.launch.absorbed] == [
        ("default/train-b", first.instance.provider_id)
    ]


def test_pods_held_for_company_say_when_their_node_is_due(cfg: Config) -> None:
    ctl, _ = controller(cfg, StaticCluster(snapshot(*WEB)))

    result = ctl.reconcile_once(window_open=True)

    assert launched(result) == []
    assert result.held == 1
    assert result.held_due_in == cfg.batch_idle_duration


def test_a_held_node_goes_once_its_first_pod_waited_the_idle_duration_though_pods_keep_arriving(
    cfg: Config,
) -> None:
    cluster, clock = StaticCluster(snapshot(*WEB[:2])), Clock()
    ctl, _ = controller(cfg, cluster, clock)
    ctl.reconcile_once(window_open=True)
    clock.now += cfg.batch_idle_duration
    cluster.view = snapshot(*WEB)

    result = ctl.reconcile_once(window_open=True)

    assert launched(result) == [("m6i.2xlarge", ("default/web-0", "default/web-1", "default/web-2"))]
    assert result.held == 0 and result.held_due_in is None


def test_a_pod_arriving_after_its_node_went_takes_the_room_left_on_it(cfg: Config) -> None:
    cluster, clock = StaticCluster(snapshot(*WEB[:2])), Clock()
    ctl, provider = controller(cfg, cluster, clock)
    ctl.reconcile_once(window_open=True)
    clock.now += cfg.batch_idle_duration
    ctl.reconcile_once(window_open=True)
    cluster.view = snapshot(*WEB)

    result = ctl.reconcile_once()

    assert launched(result) == []
    assert result.plan is not None
    [node] = provider.instances()
    assert {(a.pod, a.node) for a in result.plan.launch.absorbed} == {
        (f"default/web-{i}", node.provider_id) for i in range(3)
    }


@pytest.fixture
def at_once(tmp_path: Path, make_config: Callable[..., Config]) -> Config:
    """A simulated cloud whose nodes register, Ready, the moment they are launched."""
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(CATALOG)
    delays = {"launchDelay": "0s", "registrationDelay": "0s", "gpuReadyDelay": "0s"}
    return make_config(simulated={"catalog": str(catalog), **delays})


def test_where_nodes_take_pods_at_once_a_held_node_goes_in_time_for_the_schedulers_first_retry(
    at_once: Config,
) -> None:
    cluster, clock = StaticCluster(snapshot(*WEB[:2])), Clock()
    ctl, provider = controller(at_once, cluster, clock)

    first = ctl.reconcile_once(window_open=True)
    clock.now += SCHEDULER_FIRST_RETRY - NODE_SETTLES
    second = ctl.reconcile_once(window_open=True)

    assert first.held == 1 and first.held_due_in == pytest.approx(SCHEDULER_FIRST_RETRY - NODE_SETTLES)
    assert at_once.batch_idle_duration > SCHEDULER_FIRST_RETRY - NODE_SETTLES
    assert launched(second) == [("m6i.2xlarge", ("default/web-0", "default/web-1"))]
    assert [i.instance_type for i in provider.instances()] == ["m6i.2xlarge"]


def test_where_nodes_take_pods_at_once_pods_arriving_soon_after_others_still_wait_the_idle_duration(
    at_once: Config,
) -> None:
    cluster, clock = StaticCluster(snapshot(gpu_job("train-0"))), Clock()
    ctl, _ = controller(at_once, cluster, clock)
    ctl.reconcile_once(window_open=True)
    clock.now += 0.5
    cluster.view = snapshot(gpu_job("train-0"), *WEB[:2])

    result = ctl.reconcile_once(window_open=True)

    assert launched(result) == []
    assert result.held == 1 and result.held_due_in == at_once.batch_idle_duration
