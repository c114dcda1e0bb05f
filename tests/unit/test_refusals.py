"""What one reconcile does with every kind of refusal: fall back at once, honour retry_after, bench what the
cloud says failed later, and never leave a gang half launched (against the simulated cloud)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from autoscaler.cloud import (
    Attempt,
    Instance,
    LateFailure,
    LaunchRequest,
    QuotaExceeded,
    QuotaScope,
    Refusal,
    Throttled,
)
from autoscaler.config.options import Config
from autoscaler.runtime.controller import Controller
from autoscaler.runtime.observability.metrics import Metrics
from providers.simulated import SimulatedProvider
from tests.builders import INSUFFICIENT_GPU, pod, podgroup, snapshot
from tests.fakes.reconcile import CallRecorder, Clock, StaticCluster

CATALOG = (
    "cloud,region,instance_type,vcpu,memory_mib,gpu_count,gpu_fraction,gpu_vendor,gpu_model,gpu_memory_mib,"
    "arch,on_demand_usd_per_hour,spot_usd_per_hour,zone\n"
    "aws,us-east-1,m6i.2xlarge,8,32768,0,0,,,,x86_64,0.384,,\n"
    "aws,us-east-1,g4dn.xlarge,4,16384,1,1,NVIDIA,T4,16384,x86_64,0.526,,\n"
    "aws,us-east-1,g4dn.12xlarge,48,196608,4,4,NVIDIA,T4,16384,x86_64,3.912,,\n"
    "aws,us-east-1,g5.xlarge,4,16384,1,1,NVIDIA,A10G,24576,x86_64,1.006,,\n"
    "aws,us-east-1,g5.12xlarge,48,196608,4,4,NVIDIA,A10G,24576,x86_64,5.672,,\n"
)


class FamilyQuota(SimulatedProvider):
    """A cloud whose vCPU quota for one instance family is used up, as EC2 answers VcpuLimitExceeded: every
    candidate of that family is refused with the family's scope, whatever else the request offers."""

    def __init__(self, config: Config, *, clock: Callable[[], float], family: str) -> None:
        super().__init__(config, clock=clock)
        self.family = family

    def launch(self, request: LaunchRequest) -> Instance:
        refused = [o for o in request.offerings if o.family == self.family]
        if refused:
            scope = QuotaScope(
                "family", self.family, "us-east-1", "on-demand", families=frozenset({self.family})
            )
            detail = "VcpuLimitExceeded: You have requested more vCPU capacity than your current vCPU limit"
            # Like an instant fleet whose cheapest override hit the quota: the request ends there.
            raise QuotaExceeded(detail, [Attempt(refused[0], Refusal.QUOTA, detail, scope)])
        return super().launch(request)


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


class FailsLater(SimulatedProvider):
    """A cloud whose launches answer pending and whose operation for ``instance_type`` fails afterwards
    (as a GCE zone operation ends in ZONE_RESOURCE_POOL_EXHAUSTED): reported once by poll_errors()."""

    def __init__(self, config: Config, *, clock: Callable[[], float], instance_type: str) -> None:
        super().__init__(config, clock=clock)
        self.instance_type = instance_type
        self.late: list[LateFailure] = []

    def launch(self, request: LaunchRequest) -> Instance:
        instance = super().launch(request)
        if instance.instance_type == self.instance_type:
            offering = next(o for o in request.offerings if o.instance_type == self.instance_type)
            attempt = Attempt(offering, Refusal.NO_CAPACITY, "ZONE_RESOURCE_POOL_EXHAUSTED")
            self.late.append(LateFailure(request.token, attempt, instance))
            self.terminate(instance)
        return instance

    def poll_errors(self) -> list[LateFailure]:
        late, self.late = self.late, []
        return late


@pytest.fixture
def config(tmp_path: Path, make_config: Callable[..., Config]) -> Callable[..., Config]:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(CATALOG)

    def build(**keys: object) -> Config:
        return make_config(simulated={"catalog": str(catalog)}, capacityTypes=["on-demand"], **keys)

    return build


def controller(cfg: Config, provider: SimulatedProvider, cluster: StaticCluster, **kw: object) -> Controller:
    return Controller(
        config=lambda: cfg,
        cluster=cluster,
        provider=provider,
        actions=CallRecorder(),
        events=CallRecorder(),
        clock=provider.clock,
        **kw,  # type: ignore[arg-type]
    )


def gpu_job(name: str, gpus: int = 1, **kw: object) -> dict[str, object]:
    return pod(name, cpu="2", memory="8Gi", gpu=gpus, message=INSUFFICIENT_GPU, **kw)  # type: ignore[arg-type]


def launched_types(provider: SimulatedProvider) -> list[str]:
    return sorted(i.instance_type for i in provider.instances() if i.state != "terminated")


def launch_calls(provider: SimulatedProvider) -> int:
    return sum(1 for method, _ in provider.calls if method == "launch")


def test_a_family_quota_refusal_falls_back_to_another_family_in_the_same_reconcile(
    config: Callable[..., Config],
) -> None:
    """The reproduction: a g4dn VcpuLimitExceeded was only logged, and retried reconcile after reconcile."""
    cfg = config()
    clock = Clock()
    provider = FamilyQuota(cfg, clock=clock, family="g4dn")

    result = controller(cfg, provider, StaticCluster(snapshot(gpu_job("infer-0")))).reconcile_once()

    assert result.error == ""
    assert [(o.launch.offering.instance_type, o.instance is not None) for o in result.launched] == [
        ("g4dn.xlarge", False),
        ("g5.xlarge", True),
    ]
    assert launched_types(provider) == ["g5.xlarge"]


def test_a_quota_scope_keeps_its_whole_family_out_of_the_next_reconciles(
    config: Callable[..., Config],
) -> None:
    cfg = config()
    clock = Clock()
    provider = FamilyQuota(cfg, clock=clock, family="g4dn")
    cluster = StaticCluster(snapshot(gpu_job("infer-0")))
    ctl = controller(cfg, provider, cluster)
    ctl.reconcile_once()
    assert ctl.availability.benched(clock()) == ["quota family/g4dn/us-east-1/on-demand"]

    clock.now += 60
    cluster.view = snapshot(gpu_job("infer-0"), gpu_job("train-0", gpus=4))
    calls = launch_calls(provider)
    result = ctl.reconcile_once()

    # The 4-GPU pod goes straight to g5.12xlarge: g4dn.12xlarge is in the benched family, never asked for.
    assert [o.launch.offering.instance_type for o in result.launched] == ["g5.12xlarge"]
    assert launch_calls(provider) == calls + 1


def test_throttling_holds_every_launch_back_until_the_clouds_retry_after(
    config: Callable[..., Config],
) -> None:
    cfg = config()
    clock = Clock()
    provider = SimulatedProvider(cfg, clock=clock)
    provider.inject_error("launch", Throttled(30.0, "RequestLimitExceeded"))
    cluster = StaticCluster(snapshot(gpu_job("infer-0")))
    ctl = controller(cfg, provider, cluster)

    first = ctl.reconcile_once()
    assert [o.refusals[0].refusal for o in first.launched] == [Refusal.THROTTLED]
    assert launch_calls(provider) == 1  # no fallback round: another offering would be throttled as well

    clock.now += 29
    cluster.view = snapshot(gpu_job("infer-0"), gpu_job("infer-1"))
    held = ctl.reconcile_once()
    assert launch_calls(provider) == 1
    assert all(o.deferred for o in held.launched) and len(held.launched) == 2

    clock.now += 30 * 1.2  # the longest the jitter can stretch it
    ctl.reconcile_once()
    assert launch_calls(provider) == 3
    assert launched_types(provider) == ["g4dn.xlarge", "g4dn.xlarge"]


def test_a_failure_reported_after_the_launch_benches_the_offering_before_the_next_plan(
    config: Callable[..., Config],
) -> None:
    cfg = config()
    clock = Clock()
    provider = FailsLater(cfg, clock=clock, instance_type="g4dn.xlarge")
    cluster = StaticCluster(snapshot(gpu_job("infer-0")))
    metrics = Metrics()
    ctl = controller(cfg, provider, cluster, metrics=metrics)

    [first] = ctl.reconcile_once().launched
    assert first.instance is not None and first.instance.instance_type == "g4dn.xlarge"

    clock.now += 30
    [second] = ctl.reconcile_once().launched
    assert second.launch.offering.instance_type == "g5.xlarge"
    assert ctl.availability.benched(clock()) == ["g4dn.xlarge/us-east-1a/on-demand"]
    assert (
        'tidal_launch_refusals_total{provider="simulated",refusal="no-capacity"} 1.0'
        in metrics.render().decode()
    )


def gang(name: str, members: int, gpus: int) -> list[dict[str, object]]:
    return [podgroup(name, min_member=members, queue="research")] + [
        gpu_job(f"{name}-{i}", gpus=gpus, annotations={"pod-group-name": name}) for i in range(members)
    ]


def test_a_gang_with_one_members_offering_out_of_capacity_is_rolled_back_after_the_gang_launch_timeout(
    config: Callable[..., Config],
) -> None:
    cfg = config(maxParallelLaunches=1, gangLaunchTimeout="5m")
    clock = Clock()
    # One g4dn.12xlarge is left; nothing else has four T4s, and the gang asks for T4s.
    provider = RunsOutAfter(cfg, clock=clock, instance_type="g4dn.12xlarge", n=1)
    members = gang("train", 2, 4)
    for m in members[1:]:
        m["spec"]["nodeSelector"] = {"tidal.dev/gpu-model": "T4"}  # type: ignore[index]
    metrics = Metrics()
    ctl = controller(cfg, provider, StaticCluster(snapshot(*members)), metrics=metrics)

    first = ctl.reconcile_once()
    [member] = [o.instance for o in first.launched if o.instance is not None]
    assert [o.launch.gang for o in first.launched] == ["default/train"] * len(first.launched)
    assert first.rolled_back == []
    assert launched_types(provider) == ["g4dn.12xlarge"]

    clock.now += 4 * 60
    assert ctl.reconcile_once().rolled_back == []  # still within gangLaunchTimeout
    assert launched_types(provider) == ["g4dn.12xlarge"]

    clock.now += 60
    done = ctl.reconcile_once()
    assert done.rolled_back == ["default/train"]
    assert launched_types(provider) == []
    assert {i.id: i.state for i in provider.instances()} == {member.id: "terminated"}
    assert "tidal_gang_rollbacks_total 1.0" in metrics.render().decode()


def test_a_gang_whose_refused_member_falls_back_in_the_same_reconcile_is_complete_and_kept(
    config: Callable[..., Config],
) -> None:
    cfg = config(maxParallelLaunches=1, gangLaunchTimeout="5m")
    clock = Clock()
    provider = RunsOutAfter(cfg, clock=clock, instance_type="g4dn.12xlarge", n=1)
    ctl = controller(cfg, provider, StaticCluster(snapshot(*gang("train", 2, 4))))

    first = ctl.reconcile_once()
    assert launched_types(provider) == ["g4dn.12xlarge", "g5.12xlarge"]
    assert first.rolled_back == [] and ctl.gangs.active == {}

    clock.now += 10 * 60
    assert ctl.reconcile_once().rolled_back == []
    assert launched_types(provider) == ["g4dn.12xlarge", "g5.12xlarge"]


def test_the_status_configmap_names_the_benched_quota_scope(config: Callable[..., Config]) -> None:
    cfg = config()
    clock = Clock()
    provider = FamilyQuota(cfg, clock=clock, family="g4dn")
    ctl = controller(cfg, provider, StaticCluster(snapshot(gpu_job("infer-0"))))
    ctl.reconcile_once()
    recorder = ctl.actions
    assert isinstance(recorder, CallRecorder)
    [(_, _, data)] = recorder.named("write_status")
    assert '"quota family/g4dn/us-east-1/on-demand"' in data["status"]


def test_a_launch_refused_without_per_offering_detail_still_benches_its_candidates(
    config: Callable[..., Config],
) -> None:
    """A provider that raises the contract's errors without attempts is read by their type."""
    cfg = config()
    clock = Clock()
    provider = SimulatedProvider(cfg, clock=clock)
    provider.inject_error("launch", QuotaExceeded("quota"))
    ctl = controller(cfg, provider, StaticCluster(snapshot(gpu_job("infer-0"))))
    result = ctl.reconcile_once()
    refused = result.launched[0]
    assert {a.refusal for a in refused.refusals} == {Refusal.QUOTA}
    # Every candidate it was asked to try (g4dn.xlarge and its one-GPU alternatives) is benched: the plan
    # made again falls back to what is left, the four-GPU type.
    assert {a.offering.instance_type for a in refused.refusals} == {"g4dn.xlarge", "g5.xlarge"}
    assert launched_types(provider) == ["g4dn.12xlarge"]
