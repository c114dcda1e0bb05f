"""A Node that just registered holds the pods it was launched for, whatever labels the cloud gave it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

from autoscaler.config.options import Config
from autoscaler.runtime.controller import Controller
from autoscaler.runtime.launching import LaunchOutcome
from providers.simulated import SimulatedProvider
from tests.builders import INSUFFICIENT_GPU, node, pod, snapshot
from tests.fakes.reconcile import CallRecorder, Clock, StaticCluster

CATALOG = (
    "cloud,region,instance_type,vcpu,memory_mib,gpu_count,gpu_fraction,gpu_vendor,gpu_model,gpu_memory_mib,"
    "arch,on_demand_usd_per_hour,spot_usd_per_hour,zone\n"
    "aws,us-east-1,m5.xlarge,4,16384,0,0,,,,x86_64,0.192,,\n"
    "aws,us-east-1,g5.xlarge,4,16384,1,1,NVIDIA,A10G,24576,x86_64,1.006,,\n"
)


class Launched(NamedTuple):
    """A controller over a simulated cloud that has launched one node for a waiting pod."""

    controller: Controller
    provider: SimulatedProvider
    cluster: StaticCluster
    actions: CallRecorder
    clock: Clock
    first: LaunchOutcome


def launched_for(tmp_path: Path, make_config: Callable[..., Config], waiting: dict[str, Any]) -> Launched:
    """Plan and launch the node ``waiting`` asks for, from the two-row catalog above."""
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(CATALOG)
    config = make_config(simulated={"catalog": str(catalog), "launchDelay": "0s"})
    clock = Clock()
    provider = SimulatedProvider(config, clock=clock)
    cluster = StaticCluster(snapshot(waiting))
    actions = CallRecorder()
    controller = Controller(
        config=lambda: config,
        cluster=cluster,
        provider=provider,
        actions=actions,
        events=CallRecorder(),
        clock=clock,
    )
    [first] = controller.reconcile_once().launched
    return Launched(controller, provider, cluster, actions, clock, first)


def test_a_ready_node_whose_gpus_and_offering_labels_have_not_appeared_yet_causes_no_second_launch(
    tmp_path: Path, make_config: Callable[..., Config]
) -> None:
    waiting = pod("infer-0", cpu="2", memory="8Gi", gpu=1, message=INSUFFICIENT_GPU)
    controller, provider, cluster, actions, clock, first = launched_for(tmp_path, make_config, waiting)
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
    labelled = dict(actions.named("label_node"))
    assert labelled["ip-10-0-0-7"]["tidal.dev/gpu-count"] == "1"


def test_a_node_is_labelled_at_every_reconcile_while_it_lacks_its_offering_labels_and_never_after(
    tmp_path: Path, make_config: Callable[..., Config]
) -> None:
    waiting = pod("infer-0", cpu="2", memory="8Gi", gpu=1, message=INSUFFICIENT_GPU)
    controller, provider, cluster, actions, clock, first = launched_for(tmp_path, make_config, waiting)
    clock.now += 60
    [instance] = provider.instances()

    def registered(labels: dict[str, str]) -> dict[str, Any]:
        made = node(
            "ip-10-0-0-7", instance_type="g5.xlarge", cpu="4", memory="16Gi", managed=True, labels=labels
        )
        made["spec"]["providerID"] = instance.provider_id
        return made

    joined = registered({"tidal.dev/launch-token": first.token})
    cluster.view = snapshot(waiting, joined)

    controller.reconcile_once()
    controller.reconcile_once()  # the very same Node: it lacks the same labels
    asked = [labels for name, labels in actions.named("label_node") if name == "ip-10-0-0-7"]
    assert len(asked) == 2 and asked[0] == asked[1] and asked[0]["tidal.dev/gpu-count"] == "1"

    cluster.view = snapshot(waiting, registered({"tidal.dev/launch-token": first.token, **asked[0]}))
    controller.reconcile_once()
    assert len([1 for name, _ in actions.named("label_node") if name == "ip-10-0-0-7"]) == 2


def test_the_taints_kubernetes_puts_on_a_joining_node_do_not_buy_a_second_node(
    tmp_path: Path, make_config: Callable[..., Config]
) -> None:
    """TaintNodesByCondition gives every new Node ``node.kubernetes.io/not-ready:NoSchedule``; the node
    lifecycle controller lifts it seconds after the kubelet reports Ready. Pods do not tolerate it, and they
    need not: the node is coming up for them."""
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(CATALOG)
    config = make_config(simulated={"catalog": str(catalog), "launchDelay": "0s"})
    clock = Clock()
    provider = SimulatedProvider(config, clock=clock)
    waiting = pod("web-0", cpu="2", memory="8Gi", message="0/0 nodes are available")
    cluster = StaticCluster(snapshot(waiting))
    controller = Controller(
        config=lambda: config,
        cluster=cluster,
        provider=provider,
        actions=CallRecorder(),
        events=CallRecorder(),
        clock=clock,
    )
    [first] = controller.reconcile_once().launched
    [instance] = provider.instances()
    for ready in (False, True):  # registered, then Ready before the controller lifted the taint
        clock.now += 5
        joined = node(
            "ip-10-0-0-8",
            instance_type="m5.xlarge",
            cpu="4",
            memory="16Gi",
            managed=True,
            ready=ready,
            labels={"tidal.dev/launch-token": first.token},
            taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}],
        )
        joined["spec"]["providerID"] = instance.provider_id
        cluster.view = snapshot(waiting, joined)

        again = controller.reconcile_once()

        assert again.error == "" and again.launched == []
        assert len(provider.instances()) == 1


def test_a_labelled_node_is_labelled_again_when_the_configuration_adds_node_labels(
    tmp_path: Path, make_config: Callable[..., Config]
) -> None:
    waiting = pod("infer-0", cpu="2", memory="8Gi", gpu=1, message=INSUFFICIENT_GPU)
    controller, provider, cluster, actions, clock, _ = launched_for(tmp_path, make_config, waiting)
    clock.now += 60
    [instance] = provider.instances()
    joined = node("ip-10-0-0-7", instance_type="g5.xlarge", cpu="4", memory="16Gi", managed=True)
    joined["spec"]["providerID"] = instance.provider_id
    cluster.view = snapshot(waiting, joined)
    controller.reconcile_once()
    [(_, asked)] = actions.named("label_node")
    labelled = node(
        "ip-10-0-0-7", instance_type="g5.xlarge", cpu="4", memory="16Gi", managed=True, labels=dict(asked)
    )
    labelled["spec"]["providerID"] = instance.provider_id
    cluster.view = snapshot(waiting, labelled)
    controller.reconcile_once()
    assert len(actions.named("label_node")) == 1  # it has them all now

    team = replace(controller.config(), node_labels={"example.com/team": "vision"})
    controller.config = lambda: team
    controller.reconcile_once()
    assert actions.named("label_node")[1] == ("ip-10-0-0-7", {"example.com/team": "vision"})
