"""The census of a snapshot's pods: what a reconcile reads of every pod, gathered once and kept with the pods.
Whoever is handed one uses it for the very pods it was taken of and for no others, and decides as it would
have without it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from autoscaler.config.options import Config
from autoscaler.core.census import census
from autoscaler.core.gpu.dra_demand import resolve_claims
from autoscaler.core.model import Snapshot
from autoscaler.core.planning.cluster import pods_by_node
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.core.projection import without_dead_nodes
from tests.builders import INSUFFICIENT_GPU, aws_offerings, node, pod, podgroup, queue, snapshot

NOW = 1_795_168_800.0 + 600  # ten minutes after the builders' creationTimestamp


def _gang_member(i: int) -> dict[str, Any]:
    obj = pod(f"train-{i}", namespace="research", gpu=1, cpu="3", memory="12Gi", message=INSUFFICIENT_GPU)
    obj["metadata"]["annotations"] = {"pod-group-name": "train"}
    return obj


def kai_cluster() -> Snapshot:
    """Two KAI queues: one GPU node running a labelled pod of each, a gang of the research queue waiting by its
    PodGroup, a labelled pod waiting, a finished labelled pod, and workload of no queue (one pod of it bound and
    not started yet)."""
    return snapshot(
        node("gpu-a", instance_type="g4dn.12xlarge", cpu="48", memory="192Gi", gpu=4, managed=True),
        node("cpu-a", cpu="8"),
        queue("research", quota=4, limit=8),
        queue("serving", quota=2, limit=2),
        podgroup("train", namespace="research", min_member=2, queue="research"),
        pod(
            "infer-0",
            gpu=1,
            labels={"kai.scheduler/queue": "serving"},
            node_name="gpu-a",
            phase="Running",
            message=None,
        ),
        pod(
            "notebook-0",
            gpu=1,
            labels={"runai/queue": "research"},
            node_name="gpu-a",
            phase="Running",
            message=None,
        ),
        _gang_member(0),
        _gang_member(1),
        pod("infer-1", gpu=1, labels={"kai.scheduler/queue": "serving"}, message=INSUFFICIENT_GPU),
        pod(
            "report-0",
            labels={"kai.scheduler/queue": "serving"},
            node_name="cpu-a",
            phase="Succeeded",
            message=None,
        ),
        pod("web-0", node_name="cpu-a", phase="Running", message=None),
        pod("web-1"),
        pod("web-2", node_name="cpu-a", phase="Pending", message=None),  # bound, its containers not started
    )


def test_a_census_names_the_nodes_pods_are_bound_to_the_unbound_pods_and_who_a_queue_may_count() -> None:
    snap = kai_cluster()

    found = census(snap.pods)

    assert found.describes(snap.pods)
    assert found.bound_to == {"gpu-a", "cpu-a"}
    assert found.by_node == pods_by_node(snap.pods)
    assert [p.name for p in found.by_node["cpu-a"]] == ["web-0", "web-2"]  # the finished report-0 left out
    assert not found.claims
    assert [p.name for p in found.unbound] == [p.name for p in snap.pods if not p.node_name]
    assert [p.name for p in found.pending_phase] == [p.name for p in snap.pods if p.phase == "Pending"]
    assert "web-2" in [p.name for p in found.pending_phase]
    assert sorted(p.name for p in found.queue_candidates) == [
        "infer-0",
        "infer-1",
        "notebook-0",
        "report-0",
        "train-0",
        "train-1",
    ]


def test_a_census_names_the_nodes_that_run_workload_pods() -> None:
    pods = snapshot(
        pod("agent-a", node_name="cpu-a", phase="Running", owner_kind="DaemonSet", message=None),
        pod("agent-b", node_name="cpu-b", phase="Running", owner_kind="DaemonSet", message=None),
        pod("web-0", node_name="cpu-b", phase="Running", message=None),
        pod("report-0", node_name="cpu-c", phase="Succeeded", message=None),
        pod("web-1"),
    ).pods

    # cpu-a runs only its DaemonSet's agent, cpu-c only a finished pod: neither is busy.
    assert census(pods).busy == {"cpu-b"}


def test_a_census_finds_every_pod_by_key_and_the_bound_pods_tidal_cannot_read() -> None:
    snap = kai_cluster()
    odd = replace(snap.pods[0], name="odd-0", node_name="cpu-a", unreadable="spec.overhead: unknown field")
    pods = (*snap.pods, odd, replace(odd, name="odd-pending", node_name="", phase="Pending"))

    found = census(pods)

    assert found.by_key == {p.key: p for p in pods}
    assert found.bound_unreadable == (odd,)


def test_a_census_describes_only_the_pods_it_was_taken_of() -> None:
    snap = kai_cluster()

    assert not census(snap.pods).describes(tuple(list(snap.pods)))  # equal pods, another sequence


def test_a_census_sees_a_pod_that_names_resource_claims() -> None:
    obj = pod("trainer-0", namespace="research", cpu="8", memory="32Gi", message=INSUFFICIENT_GPU)
    obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]

    assert census(snapshot(obj).pods).claims


def test_a_plan_given_the_census_of_its_pods_is_the_plan_made_without(
    make_config: Callable[..., Config],
) -> None:
    snap = kai_cluster()
    cfg = make_config(queueBudgets={"research": 100})

    given = plan(PlanInput(snap, aws_offerings(), cfg, NOW, census=census(snap.pods)))
    made = plan(PlanInput(snap, aws_offerings(), cfg, NOW))

    assert given.queues == made.queues
    assert {q.queue: q.gpus_allocated for q in given.queues} == {"research": 1.0, "serving": 1.0}
    assert {q.queue: q.gpus_pending for q in given.queues} == {"research": 2.0, "serving": 1.0}
    assert repr(given.launch) == repr(made.launch)
    assert repr(given.removal) == repr(made.removal)


def test_a_census_of_other_pods_is_not_used_for_queues(make_config: Callable[..., Config]) -> None:
    snap = kai_cluster()
    stale = census(snapshot(node("cpu-a", cpu="8")).pods)  # taken before any pod was seen

    given = plan(PlanInput(snap, aws_offerings(), make_config(), NOW, census=stale))

    assert {q.queue: q.gpus_pending for q in given.queues} == {"research": 2.0, "serving": 1.0}


def test_pods_bound_to_a_gone_node_are_found_with_a_census_of_other_pods() -> None:
    orphan = pod("infer-0", gpu=1, node_name="ip-10-0-0-1", phase="Running", message=None)
    snap = snapshot(node("ip-10-0-0-9", cpu="8"), orphan)
    stale = census(replace(snap, pods=()).pods)  # taken before the pod was seen

    after = without_dead_nodes(snap, [], NOW, census=stale)

    assert {p.name: (p.node_name, p.phase) for p in after.pods} == {"infer-0": ("", "Pending")}
    assert without_dead_nodes(snap, [], NOW, census=census(snap.pods)).pods == after.pods


def test_claims_are_resolved_with_a_census_of_other_pods() -> None:
    obj = pod("trainer-0", namespace="research", cpu="8", memory="32Gi", message=INSUFFICIENT_GPU)
    obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]
    snap = snapshot(obj)
    stale = census(())

    assert resolve_claims(snap, [], census=stale) is not snap
    assert resolve_claims(snap, [], census=census(snap.pods)) is not snap


def test_a_census_of_other_pods_is_not_used_for_demand_or_scale_down(
    make_config: Callable[..., Config],
) -> None:
    snap = kai_cluster()
    stale = census(snapshot(node("cpu-a", cpu="8")).pods)  # taken before any pod was seen

    given = plan(PlanInput(snap, aws_offerings(), make_config(), NOW, census=stale))
    made = plan(PlanInput(snap, aws_offerings(), make_config(), NOW))

    assert sorted(p.name for p in given.demand.counted) == ["infer-1", "train-0", "train-1", "web-1"]
    assert repr(given.demand) == repr(made.demand)
    assert repr(given.removal) == repr(made.removal)
