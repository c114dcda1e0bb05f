"""Daemon benchmark: decode 100,000 pods, reconcile over a cache of 5,000 nodes and 100,000 pods, RSS.

The API server is the in-process fake from tests/fakes, run in a *separate process* so that the measured
RSS is tidal's own. Recorded in bench/results/reconcile_scale.json:

- decodeSeconds: the informer's initial paged list of every pod (HTTP + json + conversion) from the fake
  API server; decodeFromReplayedPagesSeconds: the same list from a server that replays the recorded pages from
  memory, as an API server answers from its watch cache (the fake encodes every page in Python, on one of
  this machine's two cores, which a real API server does elsewhere); decodeOnlySeconds: the pages' json +
  conversion alone, without HTTP;
- reconcileSeconds: ``Controller.reconcile_once`` (snapshot → demand → plan → act), median of several;
  reconcileCpuSeconds: the CPU time of the thread that reconciles, over the same runs (on a machine shared
  with other work the wall time stretches with the load, this much less);
- maxRssMiB: the benchmark process's peak resident set, with the full cache loaded;
- decisions: what the reconciles decided (nodes launched, the pods launched for, removals, nodes unneeded)
  and the status ConfigMap they wrote (its ``time`` aside), each as a digest, to compare with another
  commit's run; ``sameEveryReconcile`` says every reconcile decided alike, as nothing changed in between.

``targets`` checks each decode number against 5 s, the reconcile against 1 s and RSS against 1 GiB. The
machine's load average before and after is recorded, since a busy machine slows every number here.

    python bench/reconcile_scale.py [--nodes 5000] [--pods 100000] [--pending 1000]
    python bench/reconcile_scale.py --short [--out DIR]   # 10 nodes, 200 pods: a check that it still runs
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import multiprocessing as mp
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import output  # noqa: E402

T0 = "2026-11-20T10:00:00Z"


def _node(i: int) -> dict[str, Any]:
    zone = f"us-east-1{'abc'[i % 3]}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"node-{i:05d}",
            "creationTimestamp": T0,
            "labels": {
                "kubernetes.io/hostname": f"node-{i:05d}",
                "node.kubernetes.io/instance-type": "m6i.8xlarge",
                "topology.kubernetes.io/zone": zone,
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
            },
        },
        "spec": {"providerID": f"aws:///{zone}/i-{i:017x}"},
        "status": {
            "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
            "allocatable": {"cpu": "31850m", "memory": "124Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": T0}],
        },
    }


def _pod(i: int, node: str | None) -> dict[str, Any]:
    app = f"svc-{i % 200}"
    status: dict[str, Any] = {"phase": "Running" if node else "Pending"}
    if not node:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/5000 nodes are available: 5000 Insufficient cpu.",
                "lastTransitionTime": T0,
            }
        ]
    spec: dict[str, Any] = {
        "schedulerName": "default-scheduler",
        "containers": [
            {
                "name": "app",
                "image": f"registry.example.com/{app}:1",
                "resources": {"requests": {"cpu": "1500m" if node else "4", "memory": "6Gi"}},
            }
        ],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{app}-{i:06d}",
            "namespace": f"ns-{i % 50}",
            "creationTimestamp": T0,
            "labels": {"app": app},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": app,
                    "uid": f"rs-{app}",
                    "controller": True,
                }
            ],
        },
        "spec": spec,
        "status": status,
    }


def _serve(nodes: int, pods: int, pending: int, url_q: Any, stop: Any) -> None:
    from tests.fakes.kube_apiserver import FakeApiServer

    api = FakeApiServer(bookmark_interval=30.0, history_limit=1000)
    api.start()
    for i in range(nodes):
        api.create(_node(i))
    bound = pods - pending
    for i in range(pods):
        api.create(_pod(i, f"node-{i % nodes:05d}" if i < bound else None))
    url_q.put(api.url)
    stop.wait()
    api.stop()


def _replay(pages_dir: str, url_q: Any, stop: Any) -> None:
    """Serve the pod list's pages as recorded, by continue token, as an API server's watch cache would."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, urlparse

    pages: dict[str, bytes] = {}
    for path in sorted(Path(pages_dir).iterdir()):
        body = path.read_bytes()
        pages[path.stem.split("-", 1)[1]] = body

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = parse_qs(urlparse(self.path).query)
            body = pages.get((query.get("continue") or ["start"])[0])
            if body is None:
                self.send_error(410)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url_q.put(f"http://127.0.0.1:{server.server_address[1]}")
    stop.wait()
    server.shutdown()


def _informer_list_seconds(url: str) -> float:
    """Seconds for a pod informer to list and decode every page from ``url``."""
    from autoscaler.core.quantity import QuantityMemo
    from autoscaler.runtime.kube.client import make_api_client
    from autoscaler.runtime.kube.convert import pod_from_dict
    from autoscaler.runtime.kube.informer import Informer

    client = make_api_client(host=url, qps=1000, burst=1000)
    decode = functools.partial(pod_from_dict, memo=QuantityMemo())  # as the cluster cache decodes
    informer = Informer("pods", client, client.core.list_pod_for_all_namespaces, decode)
    t0 = time.perf_counter()
    informer.start()
    synced = informer.wait_for_sync(600)  # the initial list alone: the watch that follows is not timed
    elapsed = time.perf_counter() - t0
    informer.stop()
    assert synced and len(informer.items()) > 0
    client.close()
    return elapsed


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _decisions(result: Any) -> dict[str, Any]:
    """What one reconcile decided, comparable between runs and commits: the nodes launched (offering and how
    many pods each), the pods launched for, the removals and the nodes found unneeded. Which pod goes with
    which of two alike launches is left out: pods alike are ordered by uid, which the API server draws at
    random in each run."""
    launched = result.plan.launch.launches
    launches = sorted(f"{la.offering.key} {len(la.pods)}" for la in launched)
    pods = sorted(k for la in launched for k in la.pods)
    removal = result.plan.removal
    removals = sorted(f"{r.node} {r.reason}" for r in removal.removals)
    unneeded = sorted(removal.unneeded_since)
    return {
        "launches": len(launches),
        "launchedPods": len(pods),
        "removals": len(removals),
        "unneededNodes": len(unneeded),
        "digest": _digest([launches, pods, removals, unneeded]),
    }


def _status_digest(client: Any, namespace: str) -> str:
    """The status ConfigMap the reconciles wrote (dry-run writes it too), its ``time`` aside."""
    from autoscaler.runtime.status import STATUS_CONFIGMAP

    data = client.core.read_namespaced_config_map(STATUS_CONFIGMAP, namespace).data
    status = json.loads(data["status"])
    status.pop("time", None)
    return _digest(status)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--pending", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    output.add_options(parser)
    args = output.parse_args(parser)
    if args.short:
        args.nodes, args.pods, args.pending, args.repeat = 10, 200, 20, 1

    from autoscaler.config.options import load_config
    from autoscaler.core.quantity import QuantityMemo
    from autoscaler.runtime.controller import Controller
    from autoscaler.runtime.kube.actions import ClusterActions
    from autoscaler.runtime.kube.client import make_api_client
    from autoscaler.runtime.kube.cluster_cache import ClusterCache
    from autoscaler.runtime.kube.convert import pod_from_dict
    from autoscaler.runtime.kube.informer import collector_paused
    from autoscaler.runtime.observability.events import EventRecorder
    from autoscaler.runtime.observability.metrics import Metrics
    from providers.simulated import SimulatedProvider

    load_before = os.getloadavg()
    ctx = mp.get_context("spawn")
    url_q, stop = ctx.Queue(), ctx.Event()
    server = ctx.Process(target=_serve, args=(args.nodes, args.pods, args.pending, url_q, stop), daemon=True)
    t_fill = time.perf_counter()
    server.start()
    url = url_q.get(timeout=1800)
    fill_s = time.perf_counter() - t_fill
    try:
        client = make_api_client(host=url, qps=1000, burst=1000)
        # Decode alone: the same pages the informer reads, json + conversion.
        core = client.core
        t0 = time.perf_counter()
        raw_pages = []
        token = None
        while True:
            kw: dict[str, Any] = {"limit": 500, "_preload_content": False}
            if token:
                kw["_continue"] = token
            resp = core.list_pod_for_all_namespaces(**kw)
            raw_pages.append(resp.data)
            token = json.loads(resp.data)["metadata"].get("continue")
            if not token:
                break
        fetch_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        with collector_paused():  # as the informer decodes
            memo = QuantityMemo()
            decoded = [pod_from_dict(o, memo) for page in raw_pages for o in orjson.loads(page)["items"]]
        decode_only_s = time.perf_counter() - t0
        n_decoded = len(decoded)
        del decoded
        # The same pages replayed from memory by a server that does no work per request: the informer's own
        # time (HTTP client, JSON, conversion), as it is against an API server answering from its watch cache.
        with tempfile.TemporaryDirectory() as pages_dir:
            tokens = ["start"] + [orjson.loads(p)["metadata"]["continue"] for p in raw_pages[:-1]]
            for i, (token, page) in enumerate(zip(tokens, raw_pages, strict=True)):
                (Path(pages_dir) / f"{i:05d}-{token}").write_bytes(page)
            del raw_pages  # RSS below is the cache's, not this check's
            replay_q, replay_stop = ctx.Queue(), ctx.Event()
            replay = ctx.Process(target=_replay, args=(pages_dir, replay_q, replay_stop), daemon=True)
            replay.start()
            try:
                replay_url = replay_q.get(timeout=600)
                replay_list_s = min(_informer_list_seconds(replay_url) for _ in range(3))
            finally:
                replay_stop.set()
                replay.join(timeout=30)

        cache = ClusterCache(client, custom_kinds=())
        t0 = time.perf_counter()
        cache.start()
        assert cache.wait_for_sync(1800)
        informer_list_s = time.perf_counter() - t0

        with tempfile.TemporaryDirectory() as tmp:
            cfg_path = Path(tmp) / "config.yaml"
            cfg_path.write_text(
                json.dumps(
                    {
                        "cloud": "simulated",
                        "region": "us-east-1",
                        "zones": ["us-east-1a", "us-east-1b", "us-east-1c"],
                        "leaderElection": {"enabled": False},
                        "simulated": {
                            "catalog": str(ROOT / "config" / "catalogs" / "aws-us-east-1.csv"),
                            "registerNodes": False,
                        },
                    }
                )
            )
            cfg = load_config(cfg_path)
        provider = SimulatedProvider(cfg)
        actions = ClusterActions(client, dry_run=True)
        events = EventRecorder(lambda pod, reason, message, event_type: None)
        controller = Controller(
            config=lambda: cfg,
            cluster=cache,
            provider=provider,
            actions=actions,
            events=events,
            metrics=Metrics(),
            dry_run=True,
        )
        times, cpu = [], []
        result = None
        decided = []
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.thread_time()
            result = controller.reconcile_once()
            times.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
            assert not result.error, result.error
            decided.append(_decisions(result))
        assert result is not None, "no result"
        decisions = {
            **decided[-1],
            "statusDigest": _status_digest(client, cfg.leader_election.namespace),
            "sameEveryReconcile": all(d == decided[0] for d in decided),
        }
        snap_t0 = time.perf_counter()
        snap = cache.snapshot()
        snapshot_s = time.perf_counter() - snap_t0
        rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        summary = {
            "benchmark": "reconcile_scale",
            "nodes": len(snap.nodes),
            "pods": len(snap.pods),
            "pendingPods": args.pending,
            "serverFillSeconds": round(fill_s, 1),
            "listFetchSeconds": round(fetch_s, 3),
            "decodeOnlySeconds": round(decode_only_s, 3),
            "decodeSeconds": round(informer_list_s, 3),
            "decodeFromReplayedPagesSeconds": round(replay_list_s, 3),
            "decodedPods": n_decoded,
            "reconcileSecondsMedian": round(statistics.median(times), 4),
            "reconcileSecondsAll": [round(t, 4) for t in times],
            "reconcileCpuSecondsMedian": round(statistics.median(cpu), 4),
            "reconcileCpuSecondsAll": [round(t, 4) for t in cpu],
            "snapshotSeconds": round(snapshot_s, 4),
            "launchesPlanned": len(result.plan.launch.launches) if result.plan else 0,
            "decisions": decisions,
            "maxRssMiB": round(rss_mib, 1),
            "targets": {
                "decode100kPodsUnder5s": {
                    "informerListAndDecode": informer_list_s < 5.0,
                    "informerListFromReplayedPages": replay_list_s < 5.0,
                    "decodeOnly": decode_only_s < 5.0,
                },
                "reconcileUnder1s": statistics.median(times) < 1.0,
                "sameDecisionsEveryReconcile": decisions["sameEveryReconcile"],
                "rssUnder1GiB": rss_mib < 1024,
            },
            "machine": {
                "cpus": os.cpu_count(),
                "loadAverageBefore": [round(x, 2) for x in load_before],
                "loadAverageAfter": [round(x, 2) for x in os.getloadavg()],
            },
        }
        cache.stop()
    finally:
        stop.set()
        server.join(timeout=30)
    print(json.dumps(summary, indent=2))
    output.write(args, "reconcile_scale", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
