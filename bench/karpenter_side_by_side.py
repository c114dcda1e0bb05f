"""tidal and the real Karpenter, side by side on the same real control plane, with the same pods.

Each run gets a fresh control plane (tests/k8s: kube-apiserver, kube-scheduler, kube-controller-manager
v1.36.2), one autoscaler, and one workload:

- ``pair``: two pods of 2 CPU / 8 GiB at once;
- ``burst``: 200 such pods at once;
- ``stream``: one pod every ``--stream-interval`` seconds (a steady stream);
- ``held``: pods KAI holds (schedulerName ``kai-scheduler``, ``PodScheduled=False`` with KAI's
  ``OverLimit`` message), which no autoscaler should buy a node for.

Recorded per run: seconds from the pods' creation to the first Node, to every pod bound by the real
scheduler, each pod's own creation-to-bound time (the stream), and the Nodes launched; median and p99 over
the runs. Karpenter runs its kwok provider (instances are Node objects it makes; the bench reports them
Ready as a kubelet would); tidal runs ``cloud: simulated`` with no launch or registration delay. Both run
with their default batching. Karpenter's kwok catalog is its own, so nodes and seconds are compared, not
dollars. Without the Karpenter binary (``../shared/peers/karpenter-kwok``) its half is skipped, saying so.

    python bench/karpenter_side_by_side.py [--repeat 5] [--short] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import lzma
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes.client
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.provenance import commit  # noqa: E402
from tests.k8s.assets import AssetsMissing, binaries, cache_root  # noqa: E402
from tests.k8s.control_plane import ControlPlane, free_port  # noqa: E402

RESULTS = ROOT / "bench" / "results"
PEER = ROOT.parent / "shared" / "peers" / "karpenter-kwok"
KARPENTER_SHA256 = "5fcac52a0f4508379e3e6b7ed402617d419ae2355d7db760db0eb65b9f442f2c"
NAMESPACE = "bench"
OVER_LIMIT = (
    "OverLimit: research quota has reached the allowable limit of GPUs. Limit is 8 GPUs, currently 8 GPUs "
    "allocated and workload requested 1 GPUs"
)


def karpenter_binary() -> Path | None:
    """The Karpenter binary, unpacked once into the cache outside the tree; None when not shipped."""
    archive = PEER / "karpenter-kwok.xz"
    if not archive.is_file():
        return None
    target = cache_root() / "peers" / "karpenter-kwok"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    with lzma.open(archive) as src, tmp.open("wb") as out:
        shutil.copyfileobj(src, out, 1 << 22)
    digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
    if digest != KARPENTER_SHA256:
        tmp.unlink()
        raise RuntimeError(f"{archive}: unpacked binary's sha256 {digest} is not the documented one")
    tmp.chmod(0o755)
    tmp.replace(target)
    return target


def pod(name: str, *, held: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": "registry.example.com/app:1",
                "resources": {"requests": {"cpu": "2", "memory": "8Gi"}},
            }
        ],
        "terminationGracePeriodSeconds": 0,
    }
    if held:
        spec["schedulerName"] = "kai-scheduler"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


class Watcher:
    """Polls Nodes and pods every 50 ms: when each Node appeared, when each pod was bound; marks new Nodes
    Ready (the kubelet's report) when asked to."""

    def __init__(self, core: kubernetes.client.CoreV1Api, *, mark_ready: bool) -> None:
        self.core = core
        self.mark_ready = mark_ready
        self.nodes: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            now = time.time()
            try:
                for node in self.core.list_node(_request_timeout=5).items:
                    name = node.metadata.name
                    if name not in self.nodes:
                        self.nodes[name] = now
                        if self.mark_ready:
                            self._ready(name)
                for p in self.core.list_namespaced_pod(NAMESPACE, _request_timeout=5).items:
                    if p.spec.node_name and p.metadata.name not in self.bound:
                        self.bound[p.metadata.name] = now
            except Exception:  # the next pass sees it
                continue

    def _ready(self, name: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "ready",
                        "lastHeartbeatTime": stamp,
                        "lastTransitionTime": stamp,
                    }
                ]
            }
        }
        with contextlib.suppress(Exception):
            self.core.patch_node_status(name, status, _request_timeout=5)


def start_karpenter(plane: ControlPlane, binary: Path, folder: Path) -> subprocess.Popen[bytes]:
    from tests.k8s.cluster import Objects, wait_for_crds

    objects = Objects(plane.admin_client())
    crds = [
        doc
        for f in sorted((PEER / "crds").glob("*.yaml"))
        for doc in yaml.safe_load_all(f.read_text())
        if doc
    ]
    for crd in crds:
        objects.apply(crd)
    wait_for_crds(objects, [c["metadata"]["name"] for c in crds])
    for doc in yaml.safe_load_all((PEER / "manifests.yaml").read_text()):
        if doc:
            objects.apply(doc)
    env = {
        **os.environ,
        "KUBECONFIG": str(plane.kubeconfig),
        "SYSTEM_NAMESPACE": "karpenter",
        "CLUSTER_NAME": "local",
        "DISABLE_LEADER_ELECTION": "true",
        "METRICS_PORT": str(free_port()),
        "HEALTH_PROBE_PORT": str(free_port()),
        "KUBERNETES_MIN_VERSION": "1.19.0-0",
        "FEATURE_GATES": "StaticCapacity=false,SpotToSpotConsolidation=false,NodeRepair=false,CapacityBuffer=false",
    }
    with (folder / "karpenter.log").open("wb") as out:
        return subprocess.Popen(
            [str(binary)], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def start_tidal(plane: ControlPlane, folder: Path) -> subprocess.Popen[bytes]:
    kai = yaml.safe_load((ROOT / "config" / "examples" / "kai.yaml").read_text())
    config = {
        "cloud": "simulated",
        "region": "us-east-1",
        "zones": ["us-east-1a"],
        "clusterName": "bench",
        "capacityTypes": ["spot", "on-demand"],
        "leaderElection": {"enabled": False},
        "metricsAddress": f"127.0.0.1:{free_port()}",
        "logFormat": "json",
        "schedulerNames": kai["schedulerNames"],
        "pendingPodReasonRegexp": kai["pendingPodReasonRegexp"],
        "simulated": {
            "catalog": str(ROOT / "config" / "catalogs" / "aws-us-east-1.csv"),
            "registerNodes": True,
            "launchDelay": "0s",
            "registrationDelay": "0s",
            "gpuReadyDelay": "0s",
        },
    }
    (folder / "tidal.yaml").write_text(yaml.safe_dump(config))
    argv = [
        sys.executable,
        "-m",
        "autoscaler",
        "run",
        "--config",
        str(folder / "tidal.yaml"),
        "--kubeconfig",
        str(plane.kubeconfig),
    ]
    with (folder / "tidal.log").open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)


def wait(done: Callable[[], bool], timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if done():
            return True
        time.sleep(0.05)
    return False


def run_once(who: str, workload: str, args: argparse.Namespace, karpenter: Path | None) -> dict[str, Any]:
    """One autoscaler, one workload, on a control plane of its own."""
    with tempfile.TemporaryDirectory(prefix=f"side-{who}-") as tmp:
        folder = Path(tmp)
        plane = ControlPlane(binaries(), folder / "cp")
        plane.start()
        proc: subprocess.Popen[bytes] | None = None
        try:
            api = plane.admin_client()
            core = kubernetes.client.CoreV1Api(api)
            core.create_namespace({"metadata": {"name": NAMESPACE}})
            if who == "tidal":  # its chart installs it in tidal-system, where it writes its status
                core.create_namespace({"metadata": {"name": "tidal-system"}})
            wait(lambda: bool(core.list_namespaced_service_account(NAMESPACE).items), 30)
            proc = (
                start_karpenter(plane, karpenter, folder)
                if who == "karpenter"
                else start_tidal(plane, folder)
            )
            time.sleep(args.warmup)  # both list the cluster and settle before the pods come
            with Watcher(core, mark_ready=who == "karpenter") as watcher:
                created: dict[str, float] = {}
                if workload in ("pair", "burst"):
                    n = 2 if workload == "pair" else args.burst
                    for i in range(n):
                        created[f"p-{i}"] = time.time()
                        core.create_namespaced_pod(NAMESPACE, pod(f"p-{i}"))
                    wait(lambda: len(watcher.bound) >= n, args.timeout)
                elif workload == "stream":
                    for i in range(args.stream):
                        created[f"s-{i}"] = time.time()
                        core.create_namespaced_pod(NAMESPACE, pod(f"s-{i}"))
                        time.sleep(args.stream_interval)
                    wait(lambda: len(watcher.bound) >= args.stream, args.timeout)
                else:  # held
                    for i in range(4):
                        core.create_namespaced_pod(NAMESPACE, pod(f"h-{i}", held=True))
                        created[f"h-{i}"] = time.time()
                        core.patch_namespaced_pod_status(
                            f"h-{i}",
                            NAMESPACE,
                            {
                                "status": {
                                    "conditions": [
                                        {
                                            "type": "PodScheduled",
                                            "status": "False",
                                            "reason": "Unschedulable",
                                            "message": OVER_LIMIT,
                                        }
                                    ]
                                }
                            },
                        )
                    time.sleep(args.held_wait)
                start = min(created.values())
                first_node = min(watcher.nodes.values()) - start if watcher.nodes else None
                per_pod = sorted(watcher.bound[p] - created[p] for p in created if p in watcher.bound)
                return {
                    "firstNodeSeconds": None if first_node is None else round(first_node, 3),
                    "allBoundSeconds": round(max(watcher.bound.values()) - start, 3)
                    if workload != "held" and len(watcher.bound) >= len(created)
                    else None,
                    "podBoundSeconds": [round(x, 3) for x in per_pod],
                    "podsBound": len(watcher.bound),
                    "pods": len(created),
                    "nodesLaunched": len(watcher.nodes),
                }
        finally:
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
            plane.stop()


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def column(key: str) -> list[float]:
        return [r[key] for r in runs if r.get(key) is not None]

    pods = [x for r in runs for x in r["podBoundSeconds"]]
    return {
        "runs": len(runs),
        "firstNode": {
            "median": quantile(column("firstNodeSeconds"), 0.5),
            "p99": quantile(column("firstNodeSeconds"), 0.99),
        },
        "allBound": {
            "median": quantile(column("allBoundSeconds"), 0.5),
            "p99": quantile(column("allBoundSeconds"), 0.99),
        },
        "podBound": {"median": quantile(pods, 0.5), "p99": quantile(pods, 0.99)},
        "nodesLaunched": {
            "median": statistics.median(column("nodesLaunched")) if runs else None,
            "max": max(column("nodesLaunched"), default=None),
        },
        "allRuns": runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per autoscaler and workload")
    parser.add_argument("--burst", type=int, default=200, help="pods in the burst")
    parser.add_argument("--stream", type=int, default=40, help="pods in the stream")
    parser.add_argument("--stream-interval", type=float, default=0.5, help="seconds between streamed pods")
    parser.add_argument(
        "--held-wait", type=float, default=15.0, help="seconds to watch held pods for launches"
    )
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds an autoscaler gets to start")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for every pod bound")
    parser.add_argument("--workloads", default="pair,burst,stream,held", help="comma-separated")
    parser.add_argument("--short", action="store_true", help="one pair each, for the test suite")
    parser.add_argument("--out", type=Path, help="write the result here instead of bench/results/")
    args = parser.parse_args()
    if args.short:
        args.repeat, args.workloads, args.warmup = 1, "pair", 3.0
    out_path = args.out or (None if args.short else RESULTS / "karpenter_side_by_side.json")
    if out_path is None:
        parser.error("--short writes only where --out says")
    try:
        binaries()
    except AssetsMissing as missing:
        print(f"karpenter_side_by_side: skipped: {missing}", file=sys.stderr)
        return 0
    karpenter = karpenter_binary()
    who = ["tidal"] + (["karpenter"] if karpenter else [])
    if karpenter is None:
        print(
            f"karpenter_side_by_side: the Karpenter binary is absent ({PEER}); measuring tidal only",
            file=sys.stderr,
        )
    results: dict[str, Any] = {}
    for workload in args.workloads.split(","):
        for name in who:
            runs = [run_once(name, workload, args, karpenter) for _ in range(args.repeat)]
            results.setdefault(workload, {})[name] = summarise(runs)
            s = results[workload][name]
            print(
                f"{workload:7} {name:9} first node {s['firstNode']} all bound {s['allBound']} "
                f"pod {s['podBound']} nodes {s['nodesLaunched']['median']}",
                file=sys.stderr,
            )
    summary = {
        "benchmark": "karpenter_side_by_side",
        "commit": commit(),
        "karpenter": "kubernetes-sigs/karpenter 2266468 (kwok provider)" if karpenter else None,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "results": results,
        "machine": {"cpus": os.cpu_count(), "loadAverage": [round(x, 2) for x in os.getloadavg()]},
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
