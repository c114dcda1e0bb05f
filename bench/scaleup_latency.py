"""Scale-up latency: from a pod turning unschedulable to tidal's launch call, with the default batch window.

A real daemon loop (informers, batch window of batchIdleDuration 1s / batchMaxDuration 10s, reconcile) runs
against the in-process fake API server and the simulated cloud. Pods arrive one at a time already carrying
kube-scheduler's ``PodScheduled=False`` condition. The end of each latency is the provider's launch call,
timed by a wrapper around the provider (the seam a cloud sees), and matched to its pods through the launch's
idempotency token, which each reconcile's result names with the pods it launched for. Three runs, each
with a fresh API server and daemon, recorded in bench/results/scaleup_latency.json (p50/p95/p99/max seconds,
nodes launched and their price per hour):

- ``sparse``: a one-GPU pod every 1.2 s, longer than batchIdleDuration: every pod opens its own window;
- ``stream``: a one-GPU pod every 0.3 s, shorter than batchIdleDuration, so the window stays open until
  batchMaxDuration (10 s); each needs a one-GPU node of its own, which no later pod could share;
- ``cpu-stream``: a pod of 2 CPU / 8 GiB every 0.3 s: nodes later pods could share, which wait for company
  at most batchIdleDuration (autoscaler/core/planning/window.py).

    python bench/scaleup_latency.py [--pods 30] [--sparse-interval 1.2] [--stream-interval 0.3]
    python bench/scaleup_latency.py --short [--out DIR]   # 3 pods each, a check that it still runs
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

from bench import output  # noqa: E402

GPU_POD = {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": "1"}
CPU_POD = {"cpu": "2", "memory": "8Gi"}


def _pod(name: str, requests: dict[str, str]) -> dict[str, Any]:
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
            # As the ExtendedResourceToleration admission plugin gives pods that request GPUs.
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "main",
                    "resources": {"requests": requests},
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
                    "message": "0/3 nodes are available: 3 Insufficient "
                    + ("nvidia.com/gpu." if "nvidia.com/gpu" in requests else "cpu."),
                }
            ],
        },
    }


class LaunchClock:
    """The provider, with the time of every launch call by its idempotency token: the end of the latency
    measured, seen from the provider's side of the contract as a cloud would see it."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.calls: dict[str, float] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.provider, name)

    def launch(self, request: Any) -> Any:
        self.calls.setdefault(request.token, time.monotonic())
        return self.provider.launch(request)


class Launches:
    """Which pods each launch was for, by its token, and what was launched, from each reconcile's result."""

    def __init__(self) -> None:
        self.pods: dict[str, str] = {}  # pod key -> the token of the first launch made for it
        self.nodes = 0
        self.usd_per_hour = 0.0

    def wrap(self, reconcile: Any) -> Any:
        def reconcile_once(**kwargs: Any) -> Any:
            result = reconcile(**kwargs)
            for outcome in result.launched:
                if outcome.instance is None:
                    continue
                self.nodes += 1
                self.usd_per_hour += outcome.launch.offering.price
                for key in outcome.launch.pods:
                    self.pods.setdefault(key, outcome.token)
            return result

        return reconcile_once


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return ordered[k]


def measure(pods: int, interval: float, requests: dict[str, str]) -> dict[str, Any]:
    """One run: ``pods`` pods asking for ``requests``, one every ``interval`` seconds, against a fresh API
    server and daemon."""
    from autoscaler.config.options import load_config
    from autoscaler.runtime.daemon import Daemon
    from autoscaler.runtime.kube.client import make_api_client
    from providers.simulated import SimulatedProvider
    from tests.fakes.kube_apiserver import FakeApiServer

    api = FakeApiServer(bookmark_interval=5.0)
    api.start()
    created: dict[str, float] = {}
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
        provider = LaunchClock(SimulatedProvider(cfg))
        client = make_api_client(host=api.url)
        daemon = Daemon(str(path), client, provider, metrics_address="127.0.0.1:0")
        daemon.start(serve=False)
        launches = Launches()
        daemon.controller.reconcile_once = launches.wrap(daemon.controller.reconcile_once)  # type: ignore[method-assign]
        loop = threading.Thread(target=daemon.run_forever, daemon=True)
        loop.start()
        try:
            for i in range(pods):
                name = f"job-{i:03d}"
                created[f"default/{name}"] = time.monotonic()
                api.create(_pod(name, requests))
                time.sleep(interval)
            deadline = time.monotonic() + 30
            while len(launches.pods) < pods and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            daemon.stop()
            loop.join(timeout=30)
            api.stop()
        launched = {k: provider.calls[t] for k, t in launches.pods.items() if t in provider.calls}
    latencies = [launched[k] - created[k] for k in created if k in launched] or [float("nan")]
    return {
        "arrivalIntervalSeconds": interval,
        "pods": pods,
        "launched": len(launched),
        "nodes": launches.nodes,
        "usdPerHour": round(launches.usd_per_hour, 4),
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
    output.add_options(parser)
    args = output.parse_args(parser)
    if args.short:
        args.pods, args.sparse_interval, args.stream_interval = 3, 0.3, 0.1

    from autoscaler.config.options import default_config
    from autoscaler.runtime.observability.logging import configure_logging

    configure_logging("console", "error", stream=sys.stderr)
    defaults = default_config()
    load_before = os.getloadavg()
    runs = {
        "sparse": measure(args.pods, args.sparse_interval, GPU_POD),
        "stream": measure(args.pods, args.stream_interval, GPU_POD),
        "cpu-stream": measure(args.pods, args.stream_interval, CPU_POD),
    }
    summary = {
        "benchmark": "scaleup_latency",
        "batchIdleDuration": defaults.batch_idle_duration,
        "batchMaxDuration": defaults.batch_max_duration,
        "target": "p99 under 2s from unschedulable to the launch call, default batch window",
        "runs": runs,
        "note": (
            "sparse and stream: each pod needs a whole one-GPU node, which no later pod could share: its launch "
            "goes in the reconcile its arrival wakes. cpu-stream: nodes later pods could share wait for company "
            "at most batchIdleDuration after their first pod was planned onto them."
        ),
        "machine": {
            "cpus": os.cpu_count(),
            "loadAverageBefore": [round(x, 2) for x in load_before],
            "loadAverageAfter": [round(x, 2) for x in os.getloadavg()],
        },
    }
    print(json.dumps(summary, indent=2))
    output.write(args, "scaleup_latency", summary)
    return 0 if all(r["launched"] == args.pods for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
