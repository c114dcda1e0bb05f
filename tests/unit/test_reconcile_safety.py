"""One reconcile never overruns a limit, never buys twice, and never loses work to a failed API call."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autoscaler.config.options import Config
from autoscaler.core.offering import Instance, LaunchRequest
from autoscaler.runtime.controller import Controller
from autoscaler.runtime.kube.client import KubeApiError
from providers.simulated import SimulatedProvider
from tests.builders import INSUFFICIENT_GPU, node, pod, snapshot
from tests.fakes.reconcile import CallRecorder, Clock, StaticCluster

CATALOG = (
    "cloud,region,instance_type,vcpu,memory_mib,gpu_count,gpu_fraction,gpu_vendor,gpu_model,gpu_memory_mib,"
    "arch,on_demand_usd_per_hour,spot_usd_per_hour,zone\n"
    "aws,us-east-1,m6i.2xlarge,8,32768,0,0,,,,x86_64,0.384,,\n"
    "aws,us-east-1,g4dn.xlarge,4,16384,1,1,NVIDIA,T4,16384,x86_64,0.526,,\n"
    "aws,us-east-1,g4dn.12xlarge,48,196608,4,4,NVIDIA,T4,16384,x86_64,3.912,,\n"
)


class RunsOutAfter(SimulatedProvider):
    """A simulated cloud that has no more ``instance_type`` capacity after ``n`` launches of it."""

    def __init__(self, config: Config, *, clock: Callable[[], float], instance_type: str, n: int) -> None:
        super().__init__(config, clock=clock)
        self.instance_type, self.left = instance_type, n

    def launch(self, request: LaunchRequest) -> Instance:
        instance = super().launch(request)
        if instance.instance_type == self.instance_type:
            self.left -= 1
            if self.left == 0:
                self.fail_capacity(self.instance_type)
        return instance


@pytest.fixture
def config(tmp_path: Path, make_config: Callable[..., Config]) -> Callable[..., Config]:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(CATALOG)

    def build(**keys: object) -> Config:
        return make_config(simulated={"catalog": str(catalog)}, **keys)

    return build


def controller(cfg: Config, provider: SimulatedProvider, cluster: StaticCluster, **kw: Any) -> Controller:
    return Controller(
        config=lambda: cfg,
        cluster=cluster,
        provider=provider,
        actions=kw.pop("actions", CallRecorder()),
        events=CallRecorder(),
        clock=provider.clock,
        **kw,
    )


def gpu_job(name: str) -> dict[str, object]:
    return pod(name, cpu="2", memory="8Gi", gpu=1, message=INSUFFICIENT_GPU)


def test_the_fallback_plan_after_a_capacity_error_counts_the_launches_that_just_succeeded(
    config: Callable[..., Config],
) -> None:
    cfg = config(clusterGPULimit=4, maxParallelLaunches=1)
    clock = Clock()
    provider = RunsOutAfter(cfg, clock=clock, instance_type="g4dn.xlarge", n=2)
    jobs = [gpu_job(f"job-{i}") for i in range(4)]

    result = controller(cfg, provider, StaticCluster(snapshot(*jobs))).reconcile_once()

    # Two g4dn.xlarge went through; the cloud then ran out, and the only other fit (4 GPUs) would overrun.
    live = [i for i in provider.instances() if i.state != "terminated"]
    assert sorted(i.instance_type for i in live) == ["g4dn.xlarge", "g4dn.xlarge"]
    launched_for = [p for o in result.launched if o.instance is not None for p in o.launch.pods]
    assert sorted(launched_for) == ["default/job-0", "default/job-1"]
    assert result.plan is not None
    assert [(u.pod, u.reason) for u in result.plan.launch.unplaced] == [
        (f"default/job-{i}", "clusterGPULimit 4 reached (2 GPUs in use, launching or planned)")
        for i in (2, 3)
    ]


def test_the_fallback_plan_puts_pods_on_the_room_of_launches_that_just_succeeded(
    config: Callable[..., Config],
) -> None:
    cfg = config(maxParallelLaunches=1)
    clock = Clock()
    provider = RunsOutAfter(cfg, clock=clock, instance_type="g4dn.xlarge", n=2)
    jobs = [gpu_job(f"job-{i}") for i in range(4)]

    result = controller(cfg, provider, StaticCluster(snapshot(*jobs))).reconcile_once()

    launched = [o for o in result.launched if o.instance is not None]
    assert sorted(o.instance.instance_type for o in launched if o.instance) == [
        "g4dn.12xlarge",
        "g4dn.xlarge",
        "g4dn.xlarge",
    ]
    launched_for = sorted(p for o in launched for p in o.launch.pods)
    assert launched_for == [f"default/job-{i}" for i in range(4)]  # every pod bought for exactly once


def test_the_fallback_plan_leaves_out_offerings_benched_while_others_already_were(
    tmp_path: Path, make_config: Callable[..., Config]
) -> None:
    catalog = tmp_path / "two-t4-sizes.csv"
    catalog.write_text(CATALOG + "aws,us-east-1,g4dn.2xlarge,8,32768,1,1,NVIDIA,T4,16384,x86_64,0.752,,\n")
    cfg = make_config(simulated={"catalog": str(catalog)})
    clock = Clock()
    provider = SimulatedProvider(cfg, clock=clock)
    cluster = StaticCluster(snapshot())
    ctl = controller(cfg, provider, cluster)
    # An earlier capacity error benched the CPU type: the store hands out a benched view of the offerings.
    [cpu_type] = [o for o in provider.offerings() if o.instance_type == "m6i.2xlarge"]
    ctl.availability.bench([cpu_type], clock())
    ctl.reconcile_once()

    provider.fail_capacity("g4dn.xlarge")
    provider.fail_capacity("g4dn.2xlarge")
    cluster.view = snapshot(gpu_job("job-0"))
    result = ctl.reconcile_once()

    # Both 1-GPU types failed and were benched; the plan made again at once has only the 4-GPU type left.
    launched = [o.instance.instance_type for o in result.launched if o.instance is not None]
    assert launched == ["g4dn.12xlarge"]


def test_a_failed_label_patch_does_not_stop_the_launches_of_the_same_reconcile(
    config: Callable[..., Config],
) -> None:
    cfg = config()
    clock = Clock()
    provider = SimulatedProvider(cfg, clock=clock)
    first = gpu_job("infer-0")
    cluster = StaticCluster(snapshot(first))
    actions = CallRecorder(
        fail={"label_node": KubeApiError("set labels on node ip-10-0-0-7", 429, "Too Many Requests")}
    )
    ctl = controller(cfg, provider, cluster, actions=actions)
    [launched] = ctl.reconcile_once().launched
    assert launched.instance is not None
    [instance] = provider.instances()
    joined = node("ip-10-0-0-7", instance_type="g4dn.xlarge", cpu="4", memory="16Gi", managed=True)
    joined["spec"]["providerID"] = instance.provider_id
    cluster.view = snapshot(first, joined, gpu_job("infer-1"), gpu_job("infer-2"))
    clock.now += 60

    result = ctl.reconcile_once()

    assert result.error == ""
    assert actions.named("label_node")  # tried, failed, and the reconcile went on
    assert sorted(p for o in result.launched for p in o.launch.pods) == ["default/infer-1", "default/infer-2"]


class BindsAfterSnapshot(StaticCluster):
    """A scheduler that binds a pod to the node between tidal's snapshot and its second look."""

    def __init__(self, first, second) -> None:  # type: ignore[no-untyped-def]
        super().__init__(first)
        self.views = [first, second]

    def snapshot(self):  # type: ignore[no-untyped-def]
        return self.views.pop(0) if len(self.views) > 1 else self.views[0]


def test_an_empty_node_that_got_a_pod_after_the_snapshot_is_uncordoned_not_deleted(
    config: Callable[..., Config],
) -> None:
    cfg = config(scaleDown={"nodeUnneededDuration": "0s"}, newNodeGracePeriod="0s")
    clock = Clock()
    provider = SimulatedProvider(cfg, clock=clock)
    idle = node("ip-10-0-0-9", instance_type="m6i.2xlarge", managed=True)
    latecomer = pod(
        "web-0",
        cpu="1",
        memory="1Gi",
        node_name="ip-10-0-0-9",
        phase="Running",
        message=None,
        annotations={"tidal.dev/do-not-evict": "true"},
    )
    actions = CallRecorder()
    cluster = BindsAfterSnapshot(snapshot(idle), snapshot(idle, latecomer))

    result = controller(cfg, provider, cluster, actions=actions).reconcile_once()

    assert result.removed == []
    assert actions.named("cordon") == [("ip-10-0-0-9",)]
    assert actions.named("uncordon") == [("ip-10-0-0-9",)]
    assert actions.named("delete_node") == []


def test_a_pod_the_api_server_bound_but_the_cache_has_not_seen_keeps_its_node(
    config: Callable[..., Config],
) -> None:
    cfg = config(scaleDown={"nodeUnneededDuration": "0s"}, newNodeGracePeriod="0s")
    provider = SimulatedProvider(cfg, clock=Clock())
    idle = node("ip-10-0-0-9", instance_type="m6i.2xlarge", managed=True)
    # The informer lags: the cache shows the node empty on every look, the API server does not.
    actions = CallRecorder(on_server={"ip-10-0-0-9": ["default/web-0"]})

    result = controller(cfg, provider, StaticCluster(snapshot(idle)), actions=actions).reconcile_once()

    assert result.removed == []
    assert actions.named("workload_on") == [("ip-10-0-0-9",)]
    assert actions.named("delete_node") == []
    assert actions.named("uncordon") == [("ip-10-0-0-9",)]


def test_an_empty_node_is_kept_when_the_api_server_cannot_say_what_runs_on_it(
    config: Callable[..., Config],
) -> None:
    cfg = config(scaleDown={"nodeUnneededDuration": "0s"}, newNodeGracePeriod="0s")
    provider = SimulatedProvider(cfg, clock=Clock())
    idle = node("ip-10-0-0-9", instance_type="m6i.2xlarge", managed=True)
    actions = CallRecorder(
        fail={"workload_on": KubeApiError("list pods on node ip-10-0-0-9", 503, "Service Unavailable")}
    )

    result = controller(cfg, provider, StaticCluster(snapshot(idle)), actions=actions).reconcile_once()

    assert result.error == ""
    assert result.removed == []
    assert actions.named("delete_node") == []
    assert actions.named("uncordon") == [("ip-10-0-0-9",)]


def test_an_empty_node_the_api_server_also_sees_empty_is_removed(config: Callable[..., Config]) -> None:
    cfg = config(scaleDown={"nodeUnneededDuration": "0s"}, newNodeGracePeriod="0s")
    provider = SimulatedProvider(cfg, clock=Clock())
    idle = node("ip-10-0-0-9", instance_type="m6i.2xlarge", managed=True)
    actions = CallRecorder()

    result = controller(cfg, provider, StaticCluster(snapshot(idle)), actions=actions).reconcile_once()

    assert result.removed == ["ip-10-0-0-9"]
    assert actions.named("delete_node") == [("ip-10-0-0-9",)]


def test_an_empty_node_whose_deletion_fails_is_put_back_in_service(config: Callable[..., Config]) -> None:
    cfg = config(scaleDown={"nodeUnneededDuration": "0s"}, newNodeGracePeriod="0s")
    clock = Clock()
    provider = SimulatedProvider(cfg, clock=clock)
    idle = node("ip-10-0-0-9", instance_type="m6i.2xlarge", managed=True)
    actions = CallRecorder(
        fail={"delete_node": KubeApiError("delete node ip-10-0-0-9", 500, "Internal Server Error")}
    )

    result = controller(cfg, provider, StaticCluster(snapshot(idle)), actions=actions).reconcile_once()

    assert result.error == ""
    assert result.removed == []
    assert actions.named("uncordon") == [("ip-10-0-0-9",)]


@pytest.mark.parametrize("mangled", ["yesterday", "2026-11-20 09:00", ""])
def test_a_mangled_unneeded_since_annotation_is_rewritten_so_the_count_can_finish(
    config: Callable[..., Config], mangled: str
) -> None:
    actions = _reconciled(config, mangled, times=1)

    # Left alone, the planner would read "now" again on every reconcile and the node would never go.
    assert actions.named("annotate_node") == [
        ("ip-10-0-0-9", {"tidal.dev/unneeded-since": "2026-11-20T10:00:00Z"})
    ]


def _reconciled(config: Callable[..., Config], unneeded_since: str, *, times: int) -> CallRecorder:
    """``times`` reconciles, ten seconds apart, over the very same idle managed Node carrying
    ``unneeded_since`` (a write made by one has not reached the cache by the next); what the controller did."""
    cfg = config(scaleDown={"nodeUnneededDuration": "5m"})
    clock = Clock()
    provider = SimulatedProvider(cfg, clock=clock)
    idle = node(
        "ip-10-0-0-9",
        instance_type="m6i.2xlarge",
        managed=True,
        annotations={"tidal.dev/unneeded-since": unneeded_since},
    )
    actions = CallRecorder()
    ctl = controller(cfg, provider, StaticCluster(snapshot(idle)), actions=actions)
    for _ in range(times):
        ctl.reconcile_once()
        clock.now += 10
    return actions


def test_a_mangled_unneeded_since_annotation_the_cache_still_shows_is_rewritten_again(
    config: Callable[..., Config],
) -> None:
    actions = _reconciled(config, "yesterday", times=2)

    assert [name for name, _ in actions.named("annotate_node")] == ["ip-10-0-0-9", "ip-10-0-0-9"]


def test_a_well_formed_unneeded_since_annotation_is_never_rewritten(config: Callable[..., Config]) -> None:
    actions = _reconciled(config, "2026-11-20T09:58:00Z", times=2)

    assert actions.named("annotate_node") == []
