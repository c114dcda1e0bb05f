"""Reserved capacity through whole reconciles: a reservation's free count holds across reconciles while the
provider's listing is not read again, and a Capacity Block's nodes are drained before it ends, their pods
planned again at once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from autoscaler.config.options import Config
from autoscaler.core.fit import node_labels
from autoscaler.core.offering import Instance
from autoscaler.runtime.controller import Controller
from autoscaler.runtime.drain import DrainJob
from providers.simulated import SimulatedProvider
from tests.builders import INSUFFICIENT_GPU, node, pod, snapshot
from tests.fakes.reconcile import CallRecorder, Clock, StaticCluster

CATALOG = (
    "cloud,region,instance_type,vcpu,memory_mib,gpu_count,gpu_fraction,gpu_vendor,gpu_model,gpu_memory_mib,"
    "arch,on_demand_usd_per_hour,spot_usd_per_hour,zone\n"
    "aws,us-east-1,g4dn.xlarge,4,16384,1,1,NVIDIA,T4,16384,x86_64,0.526,,\n"
    "aws,us-east-1,g5.xlarge,4,16384,1,1,NVIDIA,A10G,24576,x86_64,1.006,,\n"
)
HOUR = 3600.0
START = 1_795_168_800.0  # the clock when the test starts
BLOCK = "cb-training"


class RecordingDrainer:
    """Remembers the drains the controller starts (and keeps them active, as a drain in progress is)."""

    def __init__(self) -> None:
        self.jobs: list[DrainJob] = []

    def active(self) -> set[str]:
        return {j.node for j in self.jobs}

    def submit(self, job: DrainJob) -> bool:
        self.jobs.append(job)
        return True

    def shutdown(self) -> None:
        return None


@pytest.fixture
def config(tmp_path: Path, make_config: Callable[..., Config]) -> Callable[..., Config]:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(CATALOG)

    def build(*reservations: dict[str, object], **keys: object) -> Config:
        simulated = {"catalog": str(catalog), "launchDelay": "0s", "reservations": list(reservations)}
        return make_config(simulated=simulated, capacityTypes=["reserved", "on-demand"], **keys)

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


def gpu_job(name: str, **kw: object) -> dict[str, object]:
    return pod(name, cpu="2", memory="8Gi", gpu=1, message=INSUFFICIENT_GPU, **kw)  # type: ignore[arg-type]


def launched(ctl: Controller) -> list[str]:
    result = ctl.last
    assert result is not None
    return sorted(o.launch.offering.key for o in result.launched if o.instance is not None)


def node_of(instance: Instance, ctl: Controller, cfg: Config) -> dict[str, object]:
    """The Node the instance registers as, Ready, with the labels of the offering it was launched as."""
    member = next(
        m for m in ctl.fleet.members.values() if m.instance is not None and m.instance.id == instance.id
    )
    assert member.offering is not None
    found = node(
        instance.id,
        instance_type=instance.instance_type,
        zone=instance.zone,
        cpu="4",
        memory="16Gi",
        gpu=1,
        managed=True,
        labels=node_labels(member.offering, cfg),
    )
    found["spec"]["providerID"] = instance.provider_id
    return found


def test_a_reservation_is_not_launched_into_past_its_count_while_its_listing_is_not_read_again(
    config: Callable[..., Config],
) -> None:
    cfg = config({"id": "cr-ml", "instanceType": "g5.xlarge", "zone": "us-east-1a", "count": 1})
    clock = Clock(START)
    provider = SimulatedProvider(cfg, clock=clock)
    cluster = StaticCluster(snapshot(gpu_job("infer-0")))
    ctl = controller(cfg, provider, cluster)
    ctl.reconcile_once()
    assert launched(ctl) == ["g5.xlarge/us-east-1a/reserved/cr-ml"]

    clock.now += 60  # the offerings (read every 5 minutes) still say the reservation has one free
    cluster.view = snapshot(gpu_job("infer-0"), gpu_job("infer-1"))
    ctl.reconcile_once()

    assert launched(ctl) == ["g4dn.xlarge/us-east-1a/on-demand"]
    assert ctl.last is not None and not [o for o in ctl.last.launched if o.refusals]


def test_a_capacity_blocks_nodes_are_drained_before_it_ends_and_their_pods_planned_again_at_once(
    config: Callable[..., Config],
) -> None:
    block = {
        "id": BLOCK,
        "instanceType": "g5.xlarge",
        "zone": "us-east-1a",
        "count": 2,
        "kind": "capacity-block",
        "start": START - 20 * HOUR,
        "end": START + 4 * HOUR,
    }
    cfg = config(block)
    clock = Clock(START)
    provider = SimulatedProvider(cfg, clock=clock)
    job = gpu_job("train-0")
    cluster = StaticCluster(snapshot(job))
    drainer = RecordingDrainer()
    ctl = controller(cfg, provider, cluster, drainer=drainer)
    ctl.reconcile_once()
    assert launched(ctl) == [f"g5.xlarge/us-east-1a/reserved/{BLOCK}"]
    [instance] = provider.instances()
    running = gpu_job("train-0", node_name=instance.id, phase="Running")

    # 41 minutes before the end: nothing yet.
    clock.now = START + 4 * HOUR - 41 * 60
    cluster.view = snapshot(node_of(instance, ctl, cfg), running)
    ctl.reconcile_once()
    assert drainer.jobs == []

    # 40 minutes before the end (reservations.drainBeforeBlockEnd), ten before EC2 starts terminating.
    clock.now = START + 4 * HOUR - 40 * 60
    ctl.reconcile_once()
    [drain] = drainer.jobs
    assert (drain.node, drain.instance) == (instance.id, instance)
    assert drain.reason == f"Capacity Block {BLOCK} ends at 2026-11-20T14:00:00Z"
    assert [p.key for p in drain.pods] == ["default/train-0"]
    # The pod's replacement is launched in the same reconcile, on-demand: the block takes no new node now.
    assert launched(ctl) == ["g5.xlarge/us-east-1a/on-demand"] or launched(ctl) == [
        "g4dn.xlarge/us-east-1a/on-demand"
    ]
    assert ctl.last is not None and ctl.last.drains_started == [instance.id]


def test_no_drain_is_started_for_a_block_in_a_dry_run(config: Callable[..., Config]) -> None:
    block = {
        "id": BLOCK,
        "instanceType": "g5.xlarge",
        "zone": "us-east-1a",
        "count": 1,
        "kind": "capacity-block",
        "start": START - HOUR,
        "end": START + 30 * 60,
    }
    cfg = config(block)
    clock = Clock(START)
    provider = SimulatedProvider(cfg, clock=clock)
    labels = node_labels(next(o for o in provider.offerings() if o.reservation is not None), cfg)
    cluster = StaticCluster(
        snapshot(node("gpu-1", instance_type="g5.xlarge", gpu=1, managed=True, labels=labels))
    )
    drainer = RecordingDrainer()
    controller(cfg, provider, cluster, drainer=drainer, dry_run=True).reconcile_once()
    assert drainer.jobs == []


def test_a_reservation_that_disappears_mid_run_is_no_longer_planned_into_nor_kept(
    config: Callable[..., Config],
) -> None:
    cfg = config(
        {"id": "cr-ml", "instanceType": "g5.xlarge", "zone": "us-east-1a", "count": 2, "end": START + HOUR}
    )
    clock = Clock(START)
    provider = SimulatedProvider(cfg, clock=clock)
    cluster = StaticCluster(snapshot(gpu_job("infer-0")))
    ctl = controller(cfg, provider, cluster)
    ctl.reconcile_once()
    assert launched(ctl) == ["g5.xlarge/us-east-1a/reserved/cr-ml"]
    [instance] = provider.instances()
    registered = node_of(instance, ctl, cfg)

    clock.now = START + 2 * HOUR  # the reservation ended (it is no longer listed); its node runs on
    running = gpu_job("infer-0", node_name=instance.id, phase="Running")
    cluster.view = snapshot(registered, running, gpu_job("infer-1"))
    ctl.reconcile_once()

    assert launched(ctl) == ["g4dn.xlarge/us-east-1a/on-demand"]
    assert ctl.last is not None and ctl.last.plan is not None
    kept = {b.node: b.reason for b in ctl.last.plan.removal.blocked}.get(instance.id, "")
    assert "paid for whether used or not" not in kept
