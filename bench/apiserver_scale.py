"""tidal against a real kube-apiserver holding a big cluster: cache sync, reconcile and memory.

The real control plane (tests/k8s: etcd, kube-apiserver, kube-scheduler, kube-controller-manager
v1.36.2) is filled with ``--nodes`` Ready Nodes and ``--pods`` pods bound to them, plus ``--pending`` pods
that ask for a GPU no node has, which the real scheduler marks ``PodScheduled=False`` with its own message.
Then a separate process (so its RSS is tidal's alone) starts tidal's watch caches against the server and
reconciles (dry run: decisions made, nothing launched):

- syncSeconds: from starting the caches to every kind listed (the pods' paged list dominates);
- reconcileSeconds: ``Controller.reconcile_once`` (snapshot, demand, plan for the pending pods), median;
- maxRssMiB: that process's peak resident set with the caches full.

Goals: sync < 60 s, reconcile < 1 s, RSS < 1 GiB. Results go to bench/results/apiserver_scale.json with
the commit; ``--short`` runs a small cluster in seconds and writes to ``--out`` (never to bench/results).

    python bench/apiserver_scale.py [--nodes 5000] [--pods 100000] [--pending 1000] [--short] [--out FILE]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.provenance import commit  # noqa: E402

RESULTS = ROOT / "bench" / "results"
NAMESPACES = 50
WRITERS = 8


def node(i: int) -> dict[str, Any]:
    zone = f"us-east-1{'abc'[i % 3]}"
    name = f"node-{i:05d}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/instance-type": "m6i.8xlarge",
                "topology.kubernetes.io/zone": zone,
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
            },
        },
        "spec": {"providerID": f"aws:///{zone}/i-{i:017x}"},
    }


def node_status() -> dict[str, Any]:
    return {
        "status": {
            "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
            "allocatable": {"cpu": "31850m", "memory": "124Gi", "pods": "110"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is ready",
                    "lastHeartbeatTime": "2026-11-27T00:00:00Z",
                    "lastTransitionTime": "2026-11-27T00:00:00Z",
                }
            ],
        }
    }


def pod(i: int, node_name: str | None) -> dict[str, Any]:
    app = f"svc-{i % 200}"
    requests = (
        {"cpu": "250m", "memory": "1Gi"}
        if node_name
        else {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}
    )
    container: dict[str, Any] = {
        "name": "app",
        "image": f"registry.example.com/{app}:1",
        "resources": {"requests": requests},
    }
    if not node_name:
        container["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 0}
    if node_name:
        spec["nodeName"] = node_name
    else:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{app}-{i:06d}", "namespace": f"ns-{i % NAMESPACES}", "labels": {"app": app}},
        "spec": spec,
    }


class Writer:
    """Raw HTTPS writes with the admin client certificate: bulk creation without the client's overhead."""

    def __init__(self, url: str, pki: Any) -> None:
        parsed = urlparse(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 443
        self.ctx = ssl.create_default_context(cafile=str(pki.ca[0].cert))
        self.ctx.load_cert_chain(str(pki.admin.cert), str(pki.admin.key))
        self.local = threading.local()

    def _conn(self) -> http.client.HTTPSConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPSConnection(
                self.host, self.port, context=self.ctx, timeout=60
            )
        return conn

    def send(
        self, method: str, path: str, body: dict[str, Any], content_type: str = "application/json"
    ) -> None:
        data = json.dumps(body).encode()
        for attempt in range(5):
            conn = self._conn()
            try:
                conn.request(method, path, data, {"Content-Type": content_type})
                answer = conn.getresponse()
                text = answer.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                time.sleep(0.5 * (attempt + 1))
                continue
            if answer.status in (200, 201, 409):
                return
            if answer.status in (429, 500, 503):
                time.sleep(0.5 * (attempt + 1))
                continue
            raise RuntimeError(f"{method} {path}: HTTP {answer.status}: {text[:300]!r}")
        raise RuntimeError(f"{method} {path}: gave up after retries")


def fill(url: str, pki: Any, nodes: int, pods: int, pending: int) -> dict[str, float]:
    """Create the cluster's objects; seconds per phase."""
    writer = Writer(url, pki)
    took: dict[str, float] = {}
    with ThreadPoolExecutor(WRITERS) as pool:
        t0 = time.perf_counter()
        list(
            pool.map(
                lambda n: writer.send("POST", "/api/v1/namespaces", {"metadata": {"name": f"ns-{n}"}}),
                range(NAMESPACES),
            )
        )
        list(pool.map(lambda i: writer.send("POST", "/api/v1/nodes", node(i)), range(nodes)))
        status = node_status()
        list(
            pool.map(
                lambda i: writer.send(
                    "PATCH",
                    f"/api/v1/nodes/node-{i:05d}/status",
                    status,
                    "application/strategic-merge-patch+json",
                ),
                range(nodes),
            )
        )
        took["nodesSeconds"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        bound = pods - pending

        def create(i: int) -> None:
            body = pod(i, f"node-{i % nodes:05d}" if i < bound else None)
            writer.send("POST", f"/api/v1/namespaces/{body['metadata']['namespace']}/pods", body)

        list(pool.map(create, range(pods), chunksize=64))
        took["podsSeconds"] = time.perf_counter() - t0
    return took


def wait_unschedulable(kubeconfig: Path, pending: int, timeout: float = 900.0) -> float:
    """Until the real scheduler has marked every pending pod Unschedulable; seconds waited."""
    import kubernetes.client
    import kubernetes.config

    t0 = time.perf_counter()
    with kubernetes.config.new_client_from_config(config_file=str(kubeconfig)) as api:
        core = kubernetes.client.CoreV1Api(api)
        while time.perf_counter() - t0 < timeout:
            listed = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=", _preload_content=False)
            items = json.loads(listed.data)["items"]
            marked = sum(
                1
                for p in items
                if any(
                    c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                    for c in p.get("status", {}).get("conditions", [])
                )
            )
            if marked >= pending:
                return time.perf_counter() - t0
            time.sleep(1.0)
    raise RuntimeError(f"the scheduler did not mark {pending} pods Unschedulable within {timeout:.0f}s")


def measure(kubeconfig: str, repeat: int) -> dict[str, Any]:
    """In its own process: tidal's caches against the server, then reconciles; JSON on stdout."""
    from autoscaler.config.options import config_from_mapping
    from autoscaler.runtime.controller import Controller
    from autoscaler.runtime.kube.actions import ClusterActions
    from autoscaler.runtime.kube.client import make_api_client
    from autoscaler.runtime.kube.cluster_cache import ClusterCache
    from autoscaler.runtime.observability.events import EventRecorder
    from autoscaler.runtime.observability.metrics import Metrics
    from providers.simulated import SimulatedProvider

    client = make_api_client(kubeconfig=kubeconfig, qps=1000, burst=1000)
    cache = ClusterCache(client)
    t0 = time.perf_counter()
    cache.start()
    if not cache.wait_for_sync(600):
        raise RuntimeError(f"caches did not sync: {cache.unsynced()}")
    sync_s = time.perf_counter() - t0
    cfg = config_from_mapping(
        {
            "cloud": "simulated",
            "region": "us-east-1",
            "zones": ["us-east-1a", "us-east-1b", "us-east-1c"],
            "leaderElection": {"enabled": False},
            "simulated": {
                "catalog": str(ROOT / "config" / "catalogs" / "aws-us-east-1.csv"),
                "registerNodes": False,
            },
        },
        source="bench",
    )
    controller = Controller(
        config=lambda: cfg,
        cluster=cache,
        provider=SimulatedProvider(cfg),
        actions=ClusterActions(client, dry_run=True),
        events=EventRecorder(lambda pod, reason, message, event_type: None),
        metrics=Metrics(),
        dry_run=True,
    )
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = controller.reconcile_once()
        times.append(time.perf_counter() - t0)
    assert result is not None and not result.error, result.error if result else "no result"
    snap = cache.snapshot()
    counted = sum(len(la.pods) for la in result.plan.launch.launches) if result.plan else 0
    out = {
        "syncSeconds": round(sync_s, 2),
        "reconcileSecondsMedian": round(statistics.median(times), 4),
        "reconcileSecondsAll": [round(t, 4) for t in times],
        "nodesSeen": len(snap.nodes),
        "podsSeen": len(snap.pods),
        "podsPlanned": counted,
        "launchesPlanned": len(result.plan.launch.launches) if result.plan else 0,
        "maxRssMiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    cache.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--pending", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--short", action="store_true", help="a small cluster, in seconds (for the test suite)"
    )
    parser.add_argument("--out", type=Path, help="write the result here instead of bench/results/")
    parser.add_argument("--measure", metavar="KUBECONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.repeat)))
        return 0
    if args.short:
        args.nodes, args.pods, args.pending, args.repeat = 20, 400, 10, 2
    out_path = args.out or (None if args.short else RESULTS / "apiserver_scale.json")
    if out_path is None:
        parser.error("--short writes only where --out says")

    from tests.k8s.assets import AssetsMissing, binaries
    from tests.k8s.control_plane import ControlPlane

    try:
        found = binaries()
    except AssetsMissing as missing:
        print(f"apiserver_scale: skipped: {missing}", file=sys.stderr)
        return 0
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="apiserver-scale-") as tmp:
        plane = ControlPlane(found, Path(tmp))
        plane.start()
        try:
            took = fill(plane.url, plane.pki, args.nodes, args.pods, args.pending)
            took["schedulerSeconds"] = wait_unschedulable(plane.kubeconfig, args.pending)
            child = subprocess.run(
                [sys.executable, __file__, "--measure", str(plane.kubeconfig), "--repeat", str(args.repeat)],
                capture_output=True,
                text=True,
                cwd=ROOT,
                check=False,
            )
            if child.returncode != 0:
                print(child.stderr[-3000:], file=sys.stderr)
                return 1
            measured = json.loads(child.stdout.strip().splitlines()[-1])
        finally:
            plane.stop()
    summary = {
        "benchmark": "apiserver_scale",
        "commit": commit(),
        "server": "kube-apiserver v1.36.2, etcd 3.6 (tests/k8s), scheduler and controller manager running",
        "nodes": args.nodes,
        "pods": args.pods,
        "pendingPods": args.pending,
        "fillSeconds": {k: round(v, 1) for k, v in took.items()},
        **measured,
        "targets": {
            "syncUnder60s": measured["syncSeconds"] < 60,
            "reconcileUnder1s": measured["reconcileSecondsMedian"] < 1.0,
            "rssUnder1GiB": measured["maxRssMiB"] < 1024,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "loadAverageBefore": [round(x, 2) for x in load_before],
            "loadAverageAfter": [round(x, 2) for x in os.getloadavg()],
        },
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
