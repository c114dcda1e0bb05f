"""Placement agrees with a real kube-scheduler v1.36.2, node by node, on every recorded case.

../shared/data/scheduler/ holds cases recorded from a real kube-scheduler (default profile): the nodes, the pods
already bound, one pending pod, and for every node whether the scheduler bound the pod there — and, when it did
not, its message. Each case runs through tidal's placement engine and through the simulator's emulated
scheduler, which must give the scheduler's verdict on every node. The data is read in place; without it these
tests are skipped.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from autoscaler.core.placement.reasons import Filter
from autoscaler.core.placement.scheduler import ClusterScheduler
from autoscaler.core.resources import PODS
from autoscaler.runtime.kube.convert import node_from_dict, pod_from_dict
from autoscaler.sim.cluster import EmulatedCluster, SimPod

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "scheduler"
CASES_FILE = DATA / "kube-scheduler-v1.36-cases.jsonl"

# Cases that use something the engine deliberately does not model, with why. It must stay empty: every
# filter of the default profile that the cases exercise is modelled.
NOT_MODELLED: dict[str, str] = {}

pytestmark = pytest.mark.skipif(not CASES_FILE.exists(), reason="../shared/data/scheduler is not present")


def _cases() -> list[dict[str, Any]]:
    if not CASES_FILE.exists():
        return []
    return [json.loads(line) for line in CASES_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]


def _namespaces() -> dict[str, dict[str, str]]:
    """The namespaces every case ran in, with their labels, from the table in the data's README."""
    text = (DATA / "README.md").read_text(encoding="utf-8")
    table = text.split("| namespace | labels |", 1)[1].split("\n\n", 1)[0]
    out: dict[str, dict[str, str]] = {}
    for row in table.splitlines()[2:]:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        labels = dict(re.findall(r"([\w./-]+)=([\w.-]+)", cells[1]))
        out[cells[0]] = {**labels, "kubernetes.io/metadata.name": cells[0]}
    return out


CASES = _cases()
IDS = [c["id"] for c in CASES]


@pytest.fixture(scope="module")
def namespaces() -> dict[str, dict[str, str]]:
    return _namespaces()


def _decode(case: dict[str, Any]) -> tuple[list[Any], list[Any], Any]:
    nodes = [node_from_dict(n) for n in case["nodes"]]
    existing = [pod_from_dict(p) for p in case["existingPods"]]
    return nodes, existing, pod_from_dict(case["pod"])


def test_the_cases_and_their_namespaces_are_read() -> None:
    assert len(CASES) >= 400
    assert set(_namespaces()) == {"default", "team-a", "team-b", "batch"}
    assert _namespaces()["team-a"] == {"team": "a", "env": "prod", "kubernetes.io/metadata.name": "team-a"}


def test_no_case_is_left_out_as_not_modelled() -> None:
    assert NOT_MODELLED == {}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_engine_gives_the_real_schedulers_verdict_on_every_node(
    case: dict[str, Any], namespaces: dict[str, dict[str, str]]
) -> None:
    nodes, existing, pod = _decode(case)
    scheduler = ClusterScheduler(nodes, existing, namespaces=namespaces)
    verdicts = {n.name: scheduler.rejection(pod, n.name) is None for n in nodes}
    assert verdicts == case["feasible"]


def _summary(message: str) -> str:
    return message.split(". no new claims", 1)[0].split(" preemption:", 1)[0]


@pytest.mark.parametrize(
    "case", [c for c in CASES if c["messages"]], ids=[c["id"] for c in CASES if c["messages"]]
)
def test_the_engine_names_the_filter_the_real_scheduler_names(
    case: dict[str, Any], namespaces: dict[str, dict[str, str]]
) -> None:
    """For a node the scheduler refused, the engine's reason is among those the scheduler's message counts
    (the message also counts the other nodes, which were cordoned, so only presence is compared)."""
    nodes, existing, pod = _decode(case)
    scheduler = ClusterScheduler(nodes, existing, namespaces=namespaces)
    for name, message in case["messages"].items():
        rejection = scheduler.rejection(pod, name)
        assert rejection is not None
        summary = _summary(message)
        said = {part.split(" ", 1)[1] for part in summary.split(": ", 1)[1].split(", ")}
        if (
            rejection.filter == Filter.NODE_AFFINITY
            and "node(s) didn't satisfy plugin(s) [NodeAffinity]" in said
        ):
            continue  # a metadata.name field requirement turns the node away in PreFilter, with this message
        assert rejection.message in said, (
            f"{name}: engine says {rejection.message!r}, scheduler said {summary!r}"
        )


def _isolated(cluster: EmulatedCluster, case: dict[str, Any], only: str) -> None:
    """Make ``only`` the one node the pod may go to, the way the case was recorded."""
    tolerate_all = "tolerateAll" in case["features"]
    for name, node in list(cluster.nodes.items()):
        if name == only:
            continue
        if tolerate_all:
            alloc = node.allocatable - {PODS: node.allocatable.get(PODS, 0)}
            cluster.nodes[name] = replace(node, allocatable=alloc)
        else:
            cluster.nodes[name] = replace(node, unschedulable=True)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_simulators_scheduler_binds_where_the_real_scheduler_did(
    case: dict[str, Any], namespaces: dict[str, dict[str, str]]
) -> None:
    """The simulator's scheduler, given each case isolated to one node as it was recorded, binds the pod
    exactly where the real scheduler did."""
    nodes, existing, pod = _decode(case)
    bound = {}
    for node in nodes:
        cluster = EmulatedCluster(lambda: 0.0, namespaces=namespaces)
        for n in nodes:
            cluster.nodes[n.name] = n
        for p in existing:
            cluster.pods[p.key] = SimPod(p, "existing", "", "", 1e9, True, 0.0, started=0.0)
        cluster.pods[pod.key] = SimPod(pod, "case", "", "", 1e9, True, 0.0)
        _isolated(cluster, case, node.name)
        cluster.schedule(0.0)
        placed = cluster.pods[pod.key].pod.node_name
        assert placed in ("", node.name)
        bound[node.name] = placed == node.name
    assert bound == case["feasible"]
