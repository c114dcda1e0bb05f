"""Scale-up latency: from a pod turning unschedulable to tidal's launch call, with the default batch window.

A real daemon loop (informers, batch window of batchIdleDuration 1s / batchMaxDuration 10s, reconcile) runs
against the in-process fake API server and the simulated cloud. Pods arrive one at a time already carrying
kube-scheduler's ``PodScheduled=False`` condition; each needs its own GPU node. Two arrival patterns are
measured, each with a fresh API server and daemon, and recorded in bench/results/scaleup_latency.json
(p50/p95/p99/max seconds):

- ``sparse``: a pod every 1.2 s, longer than batchIdleDuration, so every pod closes its own window after 1 s;
- ``stream``: a pod every 0.3 s, shorter than batchIdleDuration, so the window stays open until
  batchMaxDuration (10 s) and the first pods of each batch wait that long. The issue's "p99 under 2 s with the
  default window" cannot hold for such a stream; the run records what happens, and the defaults stay.

    python bench/scaleup_latency.py [--pods 30] [--sparse-interval 1.2] [--stream-interval 0.3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.provenance import commit  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def _pod(name: str) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"app": name},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": name, "controller": True}
            ],
        },
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [
                {
                    "name": "main",
                    "resources": {"requests": {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": "1"}},
                }
            ],
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "lastTransitionTime": now,
                    "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                }
            ],
        },
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return ordered[k]


def measure(pods: int, interval: float) -> dict[str, Any]:
    """One run: ``pods`` pods, one every ``interval`` seconds, against a fresh API server and daemon."""
    from autoscaler.config.options import load_config
    from autoscaler.runtime.daemon import Daemon
    from autoscaler.runtime.kube.client import make_api_client
    from providers.simulated import SimulatedProvider
    from tests.fakes.kube_apiserver import FakeApiServer

    api = FakeApiServer(bookmark_interval=5.0)
    api.start()
    created: dict[str, float] = {}
    launched: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(
            json.dumps(
                {
                    "cloud": "simulated",
                    "region": "us-east-1",
                    "zones": ["us-east-1a"],
                    "leaderElection": {"enabled": False},
                    "logLevel": "error",
                    "metricsAddress": "127.0.0.1:0",
                    "simulated": {
                        "catalog": str(ROOT / "config" / "catalogs" / "aws-us-east-1.csv"),
                        "registerNodes": False,
                    },
                }
            )
        )
        cfg = load_config(path)
        provider = SimulatedProvider(cfg)
        original = provider.launch

        def timed_launch(request: Any) -> Any:
            at = time.monotonic()
            instance = original(request)
            for key in daemon.controller.last_launch_pods.get(request.token, {}):
                launched.setdefault(key, at)
            return instance

        provider.launch = timed_launch  # type: ignore[method-assign]
        client = make_api_client(host=api.url)
        daemon = Daemon(str(path), client, provider, metrics_address="127.0.0.1:0")
        daemon.controller.last_launch_pods = {}  # type: ignore[attr-defined]
        _wrap_tokens(daemon)
        daemon.start(serve=False)
        loop = threading.Thread(target=daemon.run_forever, daemon=True)
        loop.start()
        try:
            for i in range(pods):
                name = f"job-{i:03d}"
                created[f"default/{name}"] = time.monotonic()
                api.create(_pod(name))
                time.sleep(interval)
            deadline = time.monotonic() + 30
            while len(launched) < pods and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            daemon.stop()
            api.stop()
    latencies = [launched[k] - created[k] for k in created if k in launched]
    return {
        "arrivalIntervalSeconds": interval,
        "pods": pods,
        "launched": len(latencies),
        "p50Seconds": round(statistics.median(latencies), 3),
        "p95Seconds": round(percentile(latencies, 0.95), 3),
        "p99Seconds": round(percentile(latencies, 0.99), 3),
        "maxSeconds": round(max(latencies), 3),
        "p99Under2s": percentile(latencies, 0.99) < 2.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=30)
    parser.add_argument("--sparse-interval", type=float, default=1.2)
    parser.add_argument("--stream-interval", type=float, default=0.3)
    args = parser.parse_args()

    from autoscaler.config.options import default_config

    defaults = default_config()
    load_before = os.getloadavg()
    runs = {
        "sparse": measure(args.pods, args.sparse_interval),
        "stream": measure(args.pods, args.stream_interval),
    }
    summary = {
        "benchmark": "scaleup_latency",
        "batchIdleDuration": defaults.batch_idle_duration,
        "batchMaxDuration": defaults.batch_max_duration,
        "target": "p99 under 2s from unschedulable to the launch call, default batch window",
        "runs": runs,
        "note": (
            "sparse: pods further apart than batchIdleDuration, each waits about one idle period. stream: pods "
            "closer together than batchIdleDuration keep the window open until batchMaxDuration, so a batch's "
            "first pods wait up to 10s; the 2s target does not hold for a steady stream with the defaults."
        ),
        "machine": {
            "cpus": os.cpu_count(),
            "loadAverageBefore": [round(x, 2) for x in load_before],
            "loadAverageAfter": [round(x, 2) for x in os.getloadavg()],
        },
    }
    print(json.dumps(summary, indent=2))
    RESULTS.mkdir(parents=True, exist_ok=True)
    summary["commit"] = commit()
    (RESULTS / "scaleup_latency.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if all(r["launched"] == args.pods for r in runs.values()) else 1


def _wrap_tokens(daemon: Any) -> None:
    """Remember which pods each launch token is for, so the launch call can be matched to its pods."""
    controller = daemon.controller
    original = controller._launch_one

    def launch_one(outcome: Any, cfg: Any) -> None:
        controller.last_launch_pods[outcome.token] = {k: True for k in outcome.launch.pods}
        original(outcome, cfg)

    controller._launch_one = launch_one


if __name__ == "__main__":
    sys.exit(main())
