"""A whole cluster in one process: fake API server, scheduler/KAI stand-ins, simulated cloud, tidal daemon."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from autoscaler.core.offering import Instance
from autoscaler.runtime.daemon import Daemon
from autoscaler.runtime.kube.client import make_api_client
from autoscaler.runtime.kube.convert import node_from_dict
from providers.simulated import SimulatedProvider
from providers.simulated.node import NodeRegistrar
from tests.fakes.kube_apiserver import FakeApiServer
from tests.fakes.scheduler import SchedulerStandIn

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "config" / "catalogs" / "aws-us-east-1.csv"
KAI_REGEXP = yaml.safe_load((ROOT / "config" / "examples" / "kai.yaml").read_text())["pendingPodReasonRegexp"]


def base_config(**overrides: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "cloud": "simulated",
        "region": "us-east-1",
        "zones": ["us-east-1a"],
        "clusterName": "e2e",
        "pendingPodReasonRegexp": KAI_REGEXP,
        "capacityTypes": ["on-demand"],
        "instanceTypeRegexp": "(g4dn|m6i|m7i|c6i|p5)\\..*",
        "scanInterval": "1s",
        "batchIdleDuration": "100ms",
        "batchMaxDuration": "1s",
        "scaleDown": {"nodeUnneededDuration": "1s"},
        "newNodeGracePeriod": "0s",  # real seconds here: a scenario's nodes go away within them
        "leaderElection": {"enabled": False},
        "metricsAddress": "127.0.0.1:0",
        "logFormat": "console",
        "logLevel": "warning",
        "simulated": {
            "catalog": str(CATALOG),
            "registerNodes": True,
            "launchDelay": "200ms",
            "registrationDelay": "200ms",
            "gpuReadyDelay": "200ms",
        },
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    return cfg


@dataclass
class Cluster:
    api: FakeApiServer
    scheduler: SchedulerStandIn
    provider: SimulatedProvider
    config_path: Path
    daemons: list[Daemon] = field(default_factory=list)
    launched_gpus_peak: int = 0
    # Daemons no longer stepped (a "crashed" leader) that must still be stopped when the cluster goes.
    retired: list[Daemon] = field(default_factory=list)

    def stop_at_exit(self, daemon: Daemon) -> None:
        self.retired.append(daemon)

    def daemon(self, *, identity: str = "tidal-0", dry_run: bool = False) -> Daemon:
        client = make_api_client(host=self.api.url)
        d = Daemon(
            str(self.config_path),
            client,
            self.provider,
            dry_run=dry_run,
            identity=identity,
            metrics_address="127.0.0.1:0",
        )
        d.start(serve=False, sync_timeout=20)
        self.daemons.append(d)
        return d

    def live_instances(self) -> list[Instance]:
        return [i for i in self.provider.instances() if i.state != "terminated"]

    def gpus_up(self) -> int:
        return sum(i.gpu_count for i in self.live_instances())

    def step(self, daemons: list[Daemon] | None = None) -> None:
        """One round: the cloud moves on, the scheduler binds, every daemon reconciles once."""
        self.provider.advance()
        self.scheduler.step()
        time.sleep(0.05)  # let the informers see the scheduler's writes
        for d in daemons if daemons is not None else self.daemons:
            d.reconcile()
        self.launched_gpus_peak = max(self.launched_gpus_peak, self.gpus_up())

    def run_until(
        self, done: Callable[[], bool], *, timeout: float = 20.0, daemons: list[Daemon] | None = None
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.step(daemons)
            if done():
                return
            time.sleep(0.1)
        raise AssertionError(f"condition not reached in {timeout}s; instances={self.live_instances()}")

    @staticmethod
    def wait_for(done: Callable[[], bool], *, timeout: float = 10.0) -> None:
        """Poll ``done`` without stepping anything: for what the daemon's own threads (drains) do."""
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not reached in {timeout}s")
            time.sleep(0.02)

    def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.api.list("pods", namespace)

    def running(self, namespace: str | None = None) -> int:
        return sum(1 for p in self.pods(namespace) if p["status"].get("phase") == "Running")

    def nodes(self) -> list[Any]:
        return [node_from_dict(n) for n in self.api.list("nodes")]

    def write_config(self, data: dict[str, Any]) -> None:
        self.config_path.write_text(yaml.safe_dump(data))


@contextmanager
def cluster(tmp_path: Path, **config: Any) -> Iterator[Cluster]:
    api = FakeApiServer(bookmark_interval=0.5)
    api.start()
    api.register_crd("scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup", True)
    api.register_crd("scheduling.run.ai", "v2", "queues", "Queue", False)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(base_config(**config)))
    from autoscaler.config.options import load_config

    cfg = load_config(path)
    provider = SimulatedProvider(cfg, kube=NodeRegistrar(make_api_client(host=api.url).api_client))
    c = Cluster(api, SchedulerStandIn(api), provider, path)
    try:
        yield c
    finally:
        for d in [*c.daemons, *c.retired]:
            d.stop()
        api.stop()


def gpu_pod(
    name: str,
    *,
    namespace: str = "default",
    gpus: int = 1,
    queue: str = "",
    group: str = "",
    scheduler: str = "default-scheduler",
) -> dict[str, Any]:
    """A pending pod as a Job or Deployment creates it (no PodScheduled condition yet), with the toleration
    for the GPU taint tidal puts on GPU nodes, as its template carries it where ExtendedResourceToleration
    is off (EKS, AKS)."""
    labels = {"app": name.rsplit("-", 1)[0]}
    if queue:
        labels["kai.scheduler/queue"] = queue
    annotations = {"pod-group-name": group} if group else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": labels["app"],
                    "uid": f"job-{labels['app']}",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "schedulerName": scheduler,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example.com/train:1",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": str(gpus)},
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
        },
        "status": {"phase": "Pending"},
    }


def queue(name: str, quota: int, limit: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"resources": {"gpu": {"quota": quota, "limit": limit, "overQuotaWeight": 1}}},
    }


def podgroup(name: str, min_member: int, queue_name: str, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member, "queue": queue_name},
    }
