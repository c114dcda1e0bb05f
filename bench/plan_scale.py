"""Planner benchmark: 10,000 pending pods against one region of the shared instance catalog.

Mix: ~60% small CPU pods from 20 deployments, ~30% GPU pods asking for 1–8 GPUs (a third of them pinned to
a GPU model), ~10% in gangs (KAI PodGroups). Prints pods/s and the plan's cost divided by a lower bound
(the LP relaxation of the cheapest capacity that holds the same demand, solved with scipy/HiGHS). Each plan
is timed as ``tidal plan`` runs one: the snapshot and catalog frozen out of the cyclic garbage collector's
walks, and the collector paused for the plan (the plan before it freed first, untimed).

``--topology`` gives half of the CPU deployments placement constraints: five keep their replicas apart with
required hostname anti-affinity, five spread theirs over the zones (maxSkew 1) — 30% of all pods. The result
then checks both constraints in the plan and compares the nodes that hold anti-affine replicas with the
fewest possible (no two replicas of one Deployment on a node: the largest such Deployment's replica count).

``--fractional`` makes 30% of all pods KAI GPU shares (taken from the CPU pods, which drop to 30%): replicas
of 40 inference Deployments, each asking for a ``gpu-fraction`` of 0.1 to 0.75 or a ``gpu-memory`` of 4 to
12 GB, a tenth of them in the ``sm-sharing`` compute mode, a third pinned to a GPU model.
``--share-classes per-pod`` draws those attributes for every pod instead (up to 336 distinct classes, as many
independent notebooks would be). The result then counts the GPUs the plan buys for them against the sum of
their shares.

    python bench/plan_scale.py [--pods N] [--catalog CSV] [--repeat K] [--no-lp] [--topology | --fractional]
    python bench/plan_scale.py --short [--out DIR]   # 200 pods, one plan: a check that it still runs
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoscaler.cli.main import collector_paused  # noqa: E402
from autoscaler.cli.snapshot import SnapshotBuilder  # noqa: E402
from autoscaler.config.options import config_from_mapping  # noqa: E402
from autoscaler.core.planning.offerings import OfferingIndex  # noqa: E402
from autoscaler.core.planning.planner import PlanInput, plan  # noqa: E402
from autoscaler.runtime.catalog import offering_templates, read_catalog_csv  # noqa: E402
from autoscaler.sim.lower_bound import moment_bound  # noqa: E402
from bench import output  # noqa: E402

SHARED_CATALOG = ROOT.parent / "shared" / "data" / "catalog" / "instance_catalog.csv"
MESSAGE = "0/40 nodes are available: 40 Insufficient nvidia.com/gpu, 12 Insufficient cpu."


ANTI_DEPLOYMENTS = range(0, 5)
SPREAD_DEPLOYMENTS = range(5, 10)
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def _pod(
    name: str,
    cpu: str,
    memory: str,
    gpu: int,
    annotations: dict[str, str],
    created: int,
    topology: dict[str, Any] | None = None,
) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory}
    spec: dict[str, Any] = {"schedulerName": "kai-scheduler" if _shares(annotations) else "default-scheduler"}
    if gpu or _shares(annotations):
        requests["nvidia.com/gpu"] = str(gpu)
        # As the ExtendedResourceToleration admission plugin (or the pod's template) gives GPU pods.
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    spec["containers"] = [{"name": "c", "resources": {"requests": requests}}]
    spec.update(topology or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": f"uid-{name}",
            "creationTimestamp": f"2026-11-20T{10 + created // 3600:02d}:{created // 60 % 60:02d}:{created % 60:02d}Z",
            "annotations": annotations,
            "labels": {"app": name.rsplit("-", 1)[0]},
            "ownerReferences": [{"kind": "ReplicaSet", "name": name.rsplit("-", 1)[0], "controller": True}],
        },
        "spec": spec,
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": MESSAGE}
            ],
        },
    }


def _shares(annotations: dict[str, str]) -> bool:
    return "gpu-fraction" in annotations or "gpu-memory" in annotations


def _share_spec(rnd: random.Random, skus: list[str]) -> tuple[dict[str, str], str, str]:
    """What one share pod (or one Deployment's replicas) asks for: KAI annotations, CPU and memory."""
    ann: dict[str, str] = {}
    if rnd.random() < 0.2:
        ann["gpu-memory"] = str(rnd.choice([4000, 8000, 12000]))
    else:
        ann["gpu-fraction"] = rnd.choice(["0.1", "0.25", "0.3", "0.5", "0.75"])
    if rnd.random() < 0.1:
        ann["kai.scheduler/gpu-compute-sharing-mode"] = "sm-sharing"
    if rnd.random() < 0.33:
        ann["tidal.dev/instance-gpu-skus"] = rnd.choice(skus)
    cpu, mem = rnd.choice([("1", "4Gi"), ("2", "8Gi"), ("4", "16Gi")])
    return ann, cpu, mem


def _constraint(d: int) -> dict[str, Any]:
    """The placement constraint of CPU deployment ``d`` in the ``--topology`` variant (none for most)."""
    selector = {"matchLabels": {"app": f"web{d}"}}
    if d in ANTI_DEPLOYMENTS:
        term = {"labelSelector": selector, "topologyKey": HOSTNAME}
        return {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}
    if d in SPREAD_DEPLOYMENTS:
        spread = {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": selector,
        }
        return {"topologySpreadConstraints": [spread]}
    return {}


def workload(
    n: int, seed: int = 7, topology: bool = False, fractional: bool = False, per_pod: bool = False
) -> list[dict[str, Any]]:
    """The benchmark's pending pods and PodGroups, deterministic for a seed."""
    rnd = random.Random(seed)
    objs: list[dict[str, Any]] = []
    deployments = [
        (
            rnd.choice(["100m", "250m", "500m", "1", "1500m"]),
            rnd.choice(["256Mi", "512Mi", "1Gi", "2Gi", "4Gi"]),
        )
        for _ in range(20)
    ]
    skus = ["T4", "L4", "A10G", "A100", "H100", "L40S"]
    n_cpu, n_gpu = int(n * 0.6), int(n * 0.3)
    n_share = int(n * 0.3) if fractional else 0
    services = [_share_spec(rnd, skus) for _ in range(40)] if n_share else []
    for i in range(n_share):
        ann, cpu, mem = _share_spec(rnd, skus) if per_pod else services[i % 40]
        # The template of a share pod tolerates the GPU taint: no admission plugin adds it for it.
        objs.append(_pod(f"share{i % 40}-{i}", cpu, mem, 0, ann, i % 3600))
    n_cpu -= n_share
    for i in range(n_cpu):
        d = i % 20
        cpu, mem = deployments[d]
        objs.append(_pod(f"web{d}-{i}", cpu, mem, 0, {}, i % 3600, _constraint(d) if topology else None))
    for i in range(n_gpu):
        gpus = rnd.choice([1, 1, 1, 1, 2, 2, 4, 8])
        ann: dict[str, str] = {"tidal.dev/instance-offerings": rnd.choice(["spot,on-demand", "on-demand"])}
        if rnd.random() < 0.33:
            ann["tidal.dev/instance-gpu-skus"] = rnd.choice(skus)
        objs.append(_pod(f"gpu{gpus}-{i}", str(4 * gpus), f"{16 * gpus}Gi", gpus, ann, i % 3600))
    made = 0
    g = 0
    while made < n - n_share - n_cpu - n_gpu:
        size = min(rnd.choice([2, 4, 8, 16]), n - n_share - n_cpu - n_gpu - made)
        group = f"pg-{g}"
        objs.append(
            {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "metadata": {"name": group, "namespace": "bench"},
                "spec": {"minMember": size, "queue": "train"},
            }
        )
        ann = {"pod-group-name": group, "tidal.dev/instance-gpu-skus": rnd.choice(["A100", "H100"])}
        for m in range(size):
            objs.append(_pod(f"{group}-{m}", "8", "64Gi", 1, ann, g))
        made += size
        g += 1
    return objs


def lower_bound(result: Any, index: OfferingIndex, pods: dict[str, Any]) -> float | None:
    """The LP relaxation of the cheapest capacity for the launched pods (the simulator's bound, one moment)."""
    try:
        import scipy  # noqa: F401
    except ImportError:
        return None
    classes: dict[tuple[Any, Any], int] = defaultdict(int)
    for key in {k for la in result.launch.launches for k in la.pods}:
        classes[(result.demand.constraints[key], pods[key].requests)] += 1
    return moment_bound(classes, index)


def topology_check(result: Any, snap: Any) -> dict[str, Any]:
    """Whether the plan keeps the variant's constraints, and its anti-affine node count against the fewest."""
    node_of = {p: i for i, la in enumerate(result.launch.launches) for p in la.pods}
    zone_of = {i: la.offering.zone for i, la in enumerate(result.launch.launches)}
    replicas: dict[int, list[str]] = defaultdict(list)
    for p in snap.pods:
        name = p.name
        if name.startswith("web"):
            replicas[int(name[3:].split("-", 1)[0])].append(p.key)
    shared = 0
    anti_nodes: set[int] = set()
    for d in ANTI_DEPLOYMENTS:
        nodes = [node_of[k] for k in replicas[d] if k in node_of]
        shared += len(nodes) - len(set(nodes))
        anti_nodes |= set(nodes)
    worst_skew = 0
    for d in SPREAD_DEPLOYMENTS:
        per_zone: dict[str, int] = defaultdict(int)
        for k in replicas[d]:
            if k in node_of:
                per_zone[zone_of[node_of[k]]] += 1
        counts = list(per_zone.values())
        worst_skew = max(worst_skew, (max(counts) - min(counts)) if counts else 0)
    fewest = max(len(replicas[d]) for d in ANTI_DEPLOYMENTS)
    return {
        "constrainedPods": sum(len(replicas[d]) for d in (*ANTI_DEPLOYMENTS, *SPREAD_DEPLOYMENTS)),
        "antiAffineReplicasSharingANode": shared,
        "spreadWorstZoneSkew": worst_skew,
        "nodesHoldingAntiAffinePods": len(anti_nodes),
        "fewestNodesForAntiAffinePods": fewest,
        "nodesOverFewest": round(len(anti_nodes) / fewest, 4) if fewest else None,
    }


def sharing_check(result: Any, pods: dict[str, Any]) -> dict[str, Any]:
    """How many GPUs the plan buys for the share pods, against the sum of their shares (a memory share as
    its part of the GPU it was planned on)."""
    share_nodes = [la for la in result.launch.launches if any(pods[k].gpu_share for k in la.pods)]
    asked = 0.0
    for la in share_nodes:
        for k in la.pods:
            share = pods[k].gpu_share
            if share is not None:
                device = la.offering.gpu_memory_mib or 1
                asked += share.devices * (
                    share.portion if share.portion is not None else share.memory_mib / device
                )
    shares = sum(1 for p in pods.values() if p.gpu_share is not None)
    return {
        "sharePods": shares,
        "sharePodsPlaced": sum(1 for la in share_nodes for k in la.pods if pods[k].gpu_share is not None),
        "gpusOfNodesWithShares": sum(la.offering.gpu_count for la in share_nodes),
        "sumOfShares": round(asked, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--catalog", default=str(SHARED_CATALOG))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-lp", action="store_true")
    variant = parser.add_mutually_exclusive_group()
    variant.add_argument("--topology", action="store_true", help="the variant with anti-affinity and spread")
    variant.add_argument("--fractional", action="store_true", help="the variant with 30%% KAI GPU-share pods")
    parser.add_argument(
        "--share-classes",
        choices=("deployments", "per-pod"),
        default="deployments",
        help="with --fractional: share pods as replicas of 40 Deployments, or every pod drawn on its own",
    )
    output.add_options(parser)
    args = output.parse_args(parser)
    if args.short:
        args.pods, args.repeat = 200, 1
    per_pod = args.share_classes == "per-pod"
    if not Path(args.catalog).exists():
        print(f"catalog {args.catalog} not found; skipping", file=sys.stderr)
        return 0
    config = config_from_mapping(
        {
            "cloud": "aws",
            "region": "us-east-1",
            "zones": ["us-east-1a", "us-east-1b", "us-east-1c"],
            "capacityTypes": ["spot", "on-demand"],
            "architectures": ["amd64", "arm64"],
        }
    )
    offerings = read_catalog_csv(
        args.catalog, cloud="aws", region="us-east-1", zones=config.zones, template=offering_templates("aws")
    )
    builder = SnapshotBuilder()
    t0 = time.perf_counter()
    for obj in workload(args.pods, topology=args.topology, fractional=args.fractional, per_pod=per_pod):
        builder.add(obj, "bench")
    snap = builder.build()
    decode_s = time.perf_counter() - t0
    # What a plan reads lives on (the daemon's cache, the command's snapshot): as the daemon does once its list
    # is decoded, it is left out of the collector's walks from here on.
    gc.collect()
    gc.freeze()
    walls, cpus = [], []
    result = None
    for _ in range(args.repeat):
        result = None  # the last plan goes before the next is timed
        with collector_paused():
            w0, c0 = time.perf_counter(), time.process_time()
            result = plan(PlanInput(snap, offerings, config, 1_795_168_800.0))
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
    assert result is not None
    wall = statistics.median(walls)
    pods = {p.key: p for p in snap.pods}
    index = OfferingIndex(offerings, config, snap.daemonsets)
    bound = None if args.no_lp else lower_bound(result, index, pods)
    placed = sum(len(la.pods) for la in result.launch.launches)
    name = "plan_scale_topology" if args.topology else "plan_scale"
    if args.fractional:
        name = "plan_scale_fractional_per_pod" if per_pod else "plan_scale_fractional"
    summary: dict[str, Any] = {
        "benchmark": name,
        "pods": len(snap.pods),
        "offerings": len(offerings),
        "launches": len(result.launch.launches),
        "podsPlaced": placed,
        "podsUnplaced": len(result.launch.unplaced),
        "planSecondsMedian": round(wall, 4),
        "planCpuSecondsMedian": round(statistics.median(cpus), 4),
        "planSecondsAll": [round(w, 4) for w in walls],
        "podsPerSecond": round(len(snap.pods) / wall),
        "decodeSeconds": round(decode_s, 3),
        "costPerHour": result.launch.cost_per_hour,
        "lowerBoundPerHour": None if bound is None else round(bound, 4),
        "costOverLowerBound": None if not bound else round(result.launch.cost_per_hour / bound, 4),
        "machine": {"python": platform.python_version(), "processor": platform.machine()},
    }
    if args.topology:
        summary["topology"] = topology_check(result, snap)
    if args.fractional:
        summary["sharing"] = sharing_check(result, pods)
    print(json.dumps(summary, indent=2))
    output.write(args, name, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
