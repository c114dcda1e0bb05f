"""A Node that just registered holds the pods it was launched for, whatever labels the cloud gave it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from autoscaler.config import Config
from autoscaler.controller import Controller
from autoscaler.model import Snapshot
from providers.simulated import SimulatedProvider
from tests.builders import INSUFFICIENT_GPU, node, pod, snapshot

CATALOG = (
    "cloud,region,instance_type,vcpu,memory_mib,gpu_count,gpu_fraction,gpu_vendor,gpu_model,gpu_memory_mib,"
    "arch,on_demand_usd_per_hour,spot_usd_per_hour,zone\n"
    "aws,us-east-1,m5.xlarge,4,16384,0,0,,,,x86_64,0.192,,\n"
    "aws,us-east-1,g5.xlarge,4,16384,1,1,NVIDIA,A10G,24576,x86_64,1.006,,\n"
)


class Cluster:
    """The cluster as the controller reads it; the test replaces the view between reconciles."""

    def __init__(self, view: Snapshot) -> None:
        self.view = view

    def snapshot(self) -> Snapshot:
        return self.view


class Recorder:
    """Actions and events, remembered instead of sent to an API server."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self.calls.append((name, args))


class Clock:
    def __init__(self) -> None:
        self.now = 1_795_168_800.0  # builders.T0, when the test Nodes registered

    def __call__(self) -> float:
        return self.now


def test_a_ready_node_whose_gpus_and_offering_labels_have_not_appeared_yet_causes_no_second_launch(
    tmp_path: Path, make_config: Callable[..., Config]
) -> None:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(CATALOG)
    config = make_config(simulated={"catalog": str(catalog), "launchDelay": "0s"})
    clock = Clock()
    provider = SimulatedProvider(config, clock=clock)
    waiting = pod("infer-0", cpu="2", memory="8Gi", gpu=1, message=INSUFFICIENT_GPU)
    cluster = Cluster(snapshot(waiting))
    actions = Recorder()
    controller = Controller(
        config=lambda: config,
        cluster=cluster,
        provider=provider,
        actions=actions,
        events=Recorder(),
        clock=clock,
    )
    [first] = controller.reconcile_once().launched
    assert first.instance is not None and first.launch.offering.instance_type == "g5.xlarge"

    # The kubelet registered: Ready, tidal's ownership labels from the bootstrap, but the device plugin has
    # not advertised the GPU yet and nothing says this node will have one.
    clock.now += 60
    [instance] = provider.instances()
    joined = node(
        "ip-10-0-0-7",
        instance_type="g5.xlarge",
        cpu="4",
        memory="16Gi",
        managed=True,
        labels={"tidal.dev/launch-token": first.token},
    )
    joined["spec"]["providerID"] = instance.provider_id
    cluster.view = snapshot(waiting, joined)

    again = controller.reconcile_once()

    assert again.error == ""
    assert again.launched == []
    assert len(provider.instances()) == 1
    assert again.plan is not None
    assert [(i.pod, i.detail) for i in again.plan.launch.absorbed] == [
        ("default/infer-0", "fits free capacity on launching node ip-10-0-0-7")
    ]
    labelled = dict(args for name, args in actions.calls if name == "label_node")
    assert labelled["ip-10-0-0-7"]["tidal.dev/gpu-count"] == "1"
