"""CapacityBuffers: standby capacity planned as placeholder pods that take only what real pods leave, inside
clusterGPULimit, and keep warm nodes from being taken away."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from autoscaler.config.options import Config
from autoscaler.core import capacity_buffer
from autoscaler.core.model import ScalableRef, StatusCondition
from autoscaler.core.planning.planner import Plan, PlanInput, plan
from tests.autoscaling_objects import capacity_buffer as buffer
from tests.autoscaling_objects import pod_template
from tests.builders import INSUFFICIENT_GPU, aws_offerings, node, pod, queue, snapshot

NOW = 1_795_168_800.0 + 60

WARM = pod_template("inference-chunk", gpu=1, cpu="3", memory="12Gi")


def decide(config: Config, *objects: dict[str, Any], now: float = NOW, **kw: Any) -> Plan:
    return plan(PlanInput(snapshot(*objects), aws_offerings(), config, now, **kw))


def state(conditions: tuple[StatusCondition, ...]) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in conditions}


def status(result: Plan, name: str) -> capacity_buffer.BufferAnswer:
    return next(b for b in result.buffers if b.buffer.name == name)


def test_a_buffer_launches_warm_nodes_for_its_chunks(make_config: Callable[..., Config]) -> None:
    result = decide(make_config(), WARM, buffer("warm-gpus", template="inference-chunk", replicas=2))
    assert sum(len(la.pods) for la in result.launch.launches) == 2
    assert all(la.offering.gpu_count >= 1 for la in result.launch.launches)
    answer = status(result, "warm-gpus")
    assert (answer.replicas, answer.template) == (2, "inference-chunk")
    assert state(answer.conditions) == {
        "ReadyForProvisioning": ("True", "AttributesSetSuccessfully"),
        "Provisioning": ("True", "FakePodsInjected"),
    }


def test_a_buffer_yields_to_real_pods_within_the_gpu_limit(make_config: Callable[..., Config]) -> None:
    real = pod("serve-0", namespace="team-a", gpu=1, cpu="3", memory="12Gi", message=INSUFFICIENT_GPU)
    result = decide(
        make_config(clusterGPULimit=2),
        WARM,
        buffer("warm-gpus", template="inference-chunk", replicas=2),
        real,
    )
    launched = [p for la in result.launch.launches for p in la.pods]
    assert "team-a/serve-0" in launched
    assert sum(1 for p in launched if "capacity-buffer-" in p) == 1
    assert sum(la.offering.gpu_count for la in result.launch.launches) == 2
    provisioning = next(c for c in status(result, "warm-gpus").conditions if c.type == "Provisioning")
    assert provisioning.message.startswith("1 of 2 chunks have room; the others do not:")
    assert "clusterGPULimit" in provisioning.message


def test_a_buffer_held_back_by_the_gpu_limit_does_not_hold_back_replacements(
    make_config: Callable[..., Config],
) -> None:
    result = decide(
        make_config(clusterGPULimit=0), WARM, buffer("warm-gpus", template="inference-chunk", replicas=1)
    )
    assert result.launch.launches == ()
    assert [u.limited for u in result.launch.unplaced] == [True]


def test_a_buffer_keeps_an_idle_warm_node_from_scale_down(make_config: Callable[..., Config]) -> None:
    idle = node("gpu-warm", instance_type="g5.xlarge", cpu="4", memory="16Gi", gpu=1, managed=True)
    cfg = make_config(scaleDown={"nodeUnneededDuration": "1m"})
    later = NOW + 3600  # past newNodeGracePeriod and nodeUnneededDuration
    kept = decide(
        cfg,
        idle,
        WARM,
        buffer("warm-gpus", template="inference-chunk", replicas=1),
        now=later,
        unneeded_since={"gpu-warm": 0.0},
    )
    assert kept.removal.removals == ()
    assert kept.launch.launches == ()
    gone = decide(cfg, idle, WARM, now=later, unneeded_since={"gpu-warm": 0.0})
    assert [r.node for r in gone.removal.removals] == ["gpu-warm"]


def test_a_real_pod_takes_the_warm_node_and_the_buffer_moves_on_to_a_new_one(
    make_config: Callable[..., Config],
) -> None:
    idle = node("gpu-warm", instance_type="g5.xlarge", cpu="4", memory="16Gi", gpu=1, managed=True)
    real = pod("serve-0", namespace="team-a", gpu=1, cpu="3", memory="12Gi", message=INSUFFICIENT_GPU)
    result = decide(
        make_config(), idle, WARM, buffer("warm-gpus", template="inference-chunk", replicas=1), real
    )
    assert {i.pod: i.node for i in result.launch.absorbed}["team-a/serve-0"] == "gpu-warm"
    assert [la.pods for la in result.launch.launches] == [("team-a/capacity-buffer-warm-gpus-1",)]


def test_a_buffer_sized_by_its_limits_gets_as_many_chunks_as_fit(make_config: Callable[..., Config]) -> None:
    result = decide(
        make_config(), WARM, buffer("warm-gpus", template="inference-chunk", limits={"nvidia.com/gpu": "3"})
    )
    assert status(result, "warm-gpus").replicas == 3


def test_a_buffer_without_its_pod_template_is_not_ready(make_config: Callable[..., Config]) -> None:
    result = decide(make_config(), buffer("warm-gpus", template="missing", replicas=2))
    answer = status(result, "warm-gpus")
    assert state(answer.conditions) == {
        "ReadyForProvisioning": ("False", "error"),
        "Provisioning": ("False", "FailedToGetPodTemplate"),
    }
    assert result.launch.launches == ()


def test_a_buffer_of_another_strategy_is_reported_not_planned(make_config: Callable[..., Config]) -> None:
    result = decide(
        make_config(),
        WARM,
        buffer("warm-gpus", template="inference-chunk", replicas=2, strategy="example.com/other"),
    )
    assert "example.com/other" in status(result, "warm-gpus").unsupported
    assert result.launch.launches == ()


def test_a_percentage_of_a_workload_rounds_up_to_whole_chunks(make_config: Callable[..., Config]) -> None:
    snap = snapshot(WARM, buffer("warm-gpus", scalable=("Deployment", "serve"), percentage=25))
    chunk = snap.pod_templates[0].pod
    ref = ScalableRef("Deployment", "serve", "apps", replicas=10, pod=chunk)
    snap = replace(snap, capacity_buffers=(replace(snap.capacity_buffers[0], scalable=ref),))
    resolved = capacity_buffer.standby(snap).resolved[0]
    assert (resolved.replicas, len(resolved.pods)) == (3, 3)


def test_the_buffer_in_the_kueue_guide_plans_two_warm_gpu_chunks(make_config: Callable[..., Config]) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "kueue.md").read_text()
    block = next(
        b for b in re.findall(r"^```yaml\n(.*?)^```", text, flags=re.M | re.S) if "CapacityBuffer" in b
    )
    objects = [d for d in yaml.safe_load_all(block) if d]
    result = decide(make_config(), *objects)
    answer = status(result, "warm-gpus")
    assert (answer.replicas, answer.template) == (2, "inference-chunk")
    assert sum(la.offering.gpu_count for la in result.launch.launches) == 2


def test_a_buffer_of_a_percentage_of_a_deployment_is_shaped_like_its_pods(
    make_config: Callable[..., Config],
) -> None:
    spec = pod("serve-0", namespace="team-a", gpu=1, cpu="3", memory="12Gi")["spec"]
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve", "namespace": "team-a", "creationTimestamp": "2026-11-20T10:00:00Z"},
        "spec": {"replicas": 10, "template": {"metadata": {"labels": {"app": "serve"}}, "spec": spec}},
    }
    result = decide(
        make_config(), deployment, buffer("warm-serve", scalable=("Deployment", "serve"), percentage=25)
    )
    answer = status(result, "warm-serve")
    assert answer.replicas == 3  # 25% of 10, rounded up
    assert sum(la.offering.gpu_count for la in result.launch.launches) == 3


def test_a_buffer_of_a_workload_tidal_cannot_find_is_not_ready(make_config: Callable[..., Config]) -> None:
    result = decide(make_config(), buffer("warm-serve", scalable=("Deployment", "missing"), percentage=25))
    ready = next(c for c in status(result, "warm-serve").conditions if c.type == "ReadyForProvisioning")
    assert (ready.status, ready.reason) == ("False", "error")
    assert "Deployment/missing" in ready.message


def test_a_buffer_stays_inside_its_kai_queues_budget(make_config: Callable[..., Config]) -> None:
    chunk = pod_template(
        "research-chunk", gpu=1, cpu="3", memory="12Gi", labels={"kai.scheduler/queue": "research"}
    )
    cfg = make_config(queueBudgets={"research": 1.2}, capacityTypes=["on-demand"])
    result = decide(
        cfg,
        queue("research", quota=8, limit=8),
        chunk,
        buffer("warm-research", template="research-chunk", replicas=3),
    )
    # g4dn.xlarge at $0.526/h: two fit $1.20/h, the third would not.
    assert [la.offering.instance_type for la in result.launch.launches] == ["g4dn.xlarge", "g4dn.xlarge"]
    provisioning = next(c for c in status(result, "warm-research").conditions if c.type == "Provisioning")
    assert provisioning.message.startswith("2 of 3 chunks have room")
    assert "queueBudgets.research" in provisioning.message
