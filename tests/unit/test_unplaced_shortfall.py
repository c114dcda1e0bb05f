"""The kind of "no" on each unplaced pod, which the pending-pods metric labels it with: read from the
verdict's structure (the gang, the limit's filter and key), not from the words of its reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autoscaler.config.options import Config
from autoscaler.core.planning.decisions import Shortfall
from autoscaler.core.planning.planner import PlanInput, plan
from tests.builders import INSUFFICIENT_GPU, aws_offerings, pod, podgroup, snapshot

NOW = 1_795_168_800.0  # 2026-11-20T10:00:00Z


def gpu_pod(name: str, gpus: int = 1, **kw: Any) -> dict[str, Any]:
    return pod(name, cpu="2", memory="8Gi", gpu=gpus, message=INSUFFICIENT_GPU, **kw)


def shortfalls(make_config: Callable[..., Config], *objs: dict[str, Any], **cfg: Any) -> dict[str, Shortfall]:
    result = plan(PlanInput(snapshot(*objs), aws_offerings(), make_config(**cfg), NOW))
    return {u.pod: u.shortfall for u in result.launch.unplaced}


def test_a_pod_the_gpu_limit_leaves_out_is_counted_under_the_gpu_limit(
    make_config: Callable[..., Config],
) -> None:
    found = shortfalls(make_config, gpu_pod("infer-0"), gpu_pod("infer-1"), clusterGPULimit=1)
    assert found == {"default/infer-1": Shortfall.CLUSTER_GPU_LIMIT}
    assert found["default/infer-1"] == "clusterGPULimit"


def test_a_pod_max_nodes_leaves_out_is_counted_under_max_nodes(make_config: Callable[..., Config]) -> None:
    found = shortfalls(make_config, gpu_pod("infer-0"), gpu_pod("infer-1"), maxNodes=1)
    assert found == {"default/infer-1": Shortfall.MAX_NODES}


def test_a_gang_refused_by_the_gpu_limit_is_counted_as_a_gang_not_as_the_limit(
    make_config: Callable[..., Config],
) -> None:
    members = [gpu_pod(f"llama-{i}", annotations={"pod-group-name": "pg-llama"}) for i in range(4)]
    found = shortfalls(
        make_config, podgroup("pg-llama", min_member=4, queue="prod"), *members, clusterGPULimit=3
    )
    assert set(found.values()) == {Shortfall.GANG}
    assert len(found) == 4


def test_a_pod_no_offering_can_hold_is_counted_as_no_offering(make_config: Callable[..., Config]) -> None:
    huge = pod("giant-0", cpu="4000", memory="8Gi")
    assert shortfalls(make_config, huge) == {"default/giant-0": Shortfall.NO_OFFERING}


def test_a_pod_whose_node_selector_matches_no_offering_is_counted_as_no_offering(
    make_config: Callable[..., Config],
) -> None:
    arm_only = pod("encoder-0", node_selector={"kubernetes.io/arch": "riscv64"})
    found = shortfalls(make_config, arm_only)
    assert found == {"default/encoder-0": Shortfall.NO_OFFERING}


def test_a_pod_the_configured_zones_leave_without_offerings_is_counted_as_no_offering(
    make_config: Callable[..., Config],
) -> None:
    found = shortfalls(make_config, gpu_pod("infer-0"), zones=["us-east-1z"])
    assert found == {"default/infer-0": Shortfall.NO_OFFERING}


def test_a_pod_a_new_node_would_not_take_for_its_pod_affinity_is_counted_as_other(
    make_config: Callable[..., Config],
) -> None:
    # Required affinity to pods that run nowhere: every offering fits, yet no new node can hold it.
    follower = pod(
        "cache-0",
        pod_affinity=[
            {
                "labelSelector": {"matchLabels": {"app": "db"}},
                "topologyKey": "kubernetes.io/hostname",
            }
        ],
    )
    found = shortfalls(make_config, follower)
    assert found == {"default/cache-0": Shortfall.OTHER}
