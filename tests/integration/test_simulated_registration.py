"""The simulated cloud's kubelets against the fake API server, through the unmodified kubernetes client."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from autoscaler.config.options import Config
from autoscaler.core.allocatable import node_allocatable
from autoscaler.core.model import SPOT, Taint
from autoscaler.core.offering import LaunchRequest
from autoscaler.core.resources import NVIDIA_GPU
from autoscaler.runtime.kube.convert import node_from_dict
from providers.simulated import NodeRegistrar, SimulatedProvider
from tests.fakes.kube_apiserver import FakeApiServer

WELL_KNOWN = {
    "tidal.dev/managed",
    "team",
    "kubernetes.io/hostname",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "kubernetes.io/arch",
    "kubernetes.io/os",
}

HEADER = (
    "cloud,region,instance_type,vcpu,memory_mib,gpu_count,gpu_fraction,gpu_vendor,gpu_model,gpu_memory_mib,"
    "arch,on_demand_usd_per_hour,spot_usd_per_hour,zone"
)
ROWS = [
    "aws,us-east-1,m5.xlarge,4,16384,0,0,,,,x86_64,0.192,0.08,",
    "aws,us-east-1,g5.xlarge,4,16384,1,1,NVIDIA,A10G,24576,x86_64,1.006,0.45,",
    "aws,us-east-1,m7g.large,2,8192,0,0,,,,arm64,0.0816,0.035,",
]
T0 = 1_800_000_000.0
GPU_TAINT = Taint("nvidia.com/gpu", "true", "NoSchedule")


class FakeClock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        yield server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def config(make_config: Callable[..., Config], tmp_path: Path) -> Config:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("\n".join([HEADER, *ROWS]) + "\n", encoding="utf-8")
    return make_config(
        zones=["us-east-1a", "us-east-1b"],
        simulated={
            "catalog": str(catalog),
            "launchDelay": "2s",
            "registrationDelay": "3s",
            "gpuReadyDelay": "5s",
            "stateFile": str(tmp_path / "cloud.json"),
        },
    )


@pytest.fixture
def make_provider(
    api: FakeApiServer, config: Config, clock: FakeClock
) -> Iterator[Callable[[], SimulatedProvider]]:
    clients: list[kubernetes.client.ApiClient] = []

    def build() -> SimulatedProvider:
        client = api.api_client()
        clients.append(client)
        return SimulatedProvider(config, clock=clock, kube=NodeRegistrar(client, request_timeout=5))

    yield build
    for client in clients:
        client.close()


def launch(provider: SimulatedProvider, key: str, **extra: Any) -> str:
    offering = next(o for o in provider.offerings() if o.key == key)
    return provider.launch(LaunchRequest(token=f"tok-{key}", offerings=(offering,), **extra)).id


def node(api: FakeApiServer, name: str) -> dict[str, Any] | None:
    return api.get("nodes", None, name)


def node_creates(api: FakeApiServer) -> int:
    return sum(1 for r in api.requests if r.method == "POST" and r.path == "/api/v1/nodes")


def test_a_gpu_node_registers_like_a_kubelet_and_its_gpus_appear_later(
    api: FakeApiServer, make_provider: Callable[[], SimulatedProvider], clock: FakeClock
) -> None:
    provider = make_provider()
    name = launch(
        provider,
        "g5.xlarge/us-east-1b/spot",
        labels={"tidal.dev/managed": "true", "team": "ml"},
        taints=(GPU_TAINT,),
    )

    clock.now = T0 + 4.9
    provider.advance()
    assert node(api, name) is None

    clock.now = T0 + 5
    provider.advance()
    created = node(api, name)
    assert created is not None
    assert created["spec"]["providerID"] == f"simulated:///us-east-1b/{name}"
    assert created["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    labels = created["metadata"]["labels"]
    # The offering's own labels (capacity type, GPU model) come with the node, as tidal planned them.
    assert labels["tidal.dev/capacity-type"] == "spot"
    assert labels["tidal.dev/gpu-model"] == "A10"
    assert labels["karpenter.sh/capacity-type"] == "spot"
    assert {k: v for k, v in labels.items() if k in WELL_KNOWN} == {
        "tidal.dev/managed": "true",
        "team": "ml",
        "kubernetes.io/hostname": name,
        "node.kubernetes.io/instance-type": "g5.xlarge",
        "topology.kubernetes.io/zone": "us-east-1b",
        "topology.kubernetes.io/region": "us-east-1",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
    }
    status = created["status"]
    assert status["allocatable"]["cpu"] == "3920m"  # EKS reserves 80m of 4 cores
    assert status["capacity"]["cpu"] == "4"
    assert status["capacity"]["memory"] == f"{16384 * 1024}Ki"
    assert status["allocatable"]["memory"] == f"{(16384 - 255 - 11 * 110 - 100) * 1024}Ki"
    assert status["allocatable"]["pods"] == "110"
    assert NVIDIA_GPU not in status["capacity"] and NVIDIA_GPU not in status["allocatable"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    assert ready["lastHeartbeatTime"] == ready["lastTransitionTime"] == "2027-01-15T08:00:05Z"
    assert status["nodeInfo"]["architecture"] == "amd64"

    seen = node_from_dict(created)  # what tidal's own informers make of it
    offering = next(o for o in provider.offerings() if o.key == "g5.xlarge/us-east-1b/spot")
    expected = node_allocatable(offering)
    assert seen.ready and seen.provider_id == f"simulated:///us-east-1b/{name}"
    assert seen.gpus == 0
    assert {k: v for k, v in seen.allocatable.items() if k != NVIDIA_GPU} == {
        k: v for k, v in expected.items() if k != NVIDIA_GPU
    }

    clock.now = T0 + 9.9
    provider.advance()
    assert NVIDIA_GPU not in node(api, name)["status"]["allocatable"]  # type: ignore[index]

    clock.now = T0 + 10
    provider.advance()
    with_gpus = node(api, name)
    assert with_gpus is not None
    assert with_gpus["status"]["capacity"][NVIDIA_GPU] == "1"
    assert with_gpus["status"]["allocatable"][NVIDIA_GPU] == "1"
    assert with_gpus["status"]["allocatable"]["cpu"] == "3920m"  # the patch added, it did not replace
    assert node_from_dict(with_gpus).gpus == 1
    assert node_creates(api) == 1


def test_the_node_reads_back_through_the_typed_client(
    api: FakeApiServer, make_provider: Callable[[], SimulatedProvider], clock: FakeClock
) -> None:
    provider = make_provider()
    name = launch(provider, "m7g.large/us-east-1a/on-demand")
    clock.now = T0 + 5
    provider.advance()

    with api.api_client() as client:
        typed = kubernetes.client.CoreV1Api(client).read_node(name)

    assert typed.status.node_info.architecture == "arm64"
    assert typed.metadata.labels["kubernetes.io/arch"] == "arm64"
    assert typed.spec.taints is None


def test_a_restarted_provider_on_the_same_state_file_does_not_register_twice(
    api: FakeApiServer, make_provider: Callable[[], SimulatedProvider], clock: FakeClock
) -> None:
    first = make_provider()
    name = launch(first, "m5.xlarge/us-east-1a/spot")
    clock.now = T0 + 5
    first.advance()
    assert node_creates(api) == 1

    restarted = make_provider()
    clock.now = T0 + 20
    restarted.advance()
    restarted.instances()

    assert node_creates(api) == 1
    assert [i.id for i in restarted.instances()] == [name]


def test_a_node_that_already_exists_counts_as_registered(
    api: FakeApiServer, make_provider: Callable[[], SimulatedProvider], clock: FakeClock
) -> None:
    provider = make_provider()
    name = launch(provider, "m5.xlarge/us-east-1a/spot")
    api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})

    clock.now = T0 + 5
    provider.advance()
    provider.advance()

    assert node_creates(api) == 1  # the 409 was taken as "already registered", not retried


def test_a_failed_registration_is_retried_on_the_next_advance(
    api: FakeApiServer, make_provider: Callable[[], SimulatedProvider], clock: FakeClock
) -> None:
    provider = make_provider()
    name = launch(provider, "m5.xlarge/us-east-1a/spot")
    fault = api.faults.push(500, verbs=["create"], resource="nodes")

    clock.now = T0 + 5
    provider.advance()
    assert fault.hits == 1 and node(api, name) is None

    provider.advance()
    assert node(api, name) is not None


def test_a_terminated_instance_leaves_its_node_not_ready_for_tidal_to_delete(
    api: FakeApiServer, make_provider: Callable[[], SimulatedProvider], clock: FakeClock
) -> None:
    provider = make_provider()
    name = launch(provider, "g5.xlarge/us-east-1a/spot", taints=(GPU_TAINT,))
    clock.now = T0 + 5
    provider.advance()
    instance = provider.instances()[0]

    clock.now = T0 + 6  # before its GPUs would have appeared at T0 + 10
    provider.terminate(instance)
    clock.now = T0 + 60
    provider.advance()

    gone = node(api, name)
    assert gone is not None  # the cloud does not delete Nodes
    ready = next(c for c in gone["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "Unknown"
    assert not node_from_dict(gone).ready
    assert {(t["key"], t["effect"]) for t in gone["spec"]["taints"]} == {
        ("nvidia.com/gpu", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
    }
    assert NVIDIA_GPU not in gone["status"]["allocatable"]  # a dead node's GPUs never come up

    api.delete("nodes", None, name)  # tidal deletes the Node; the cloud has nothing more to do
    provider.advance()
    assert node(api, name) is None


def test_a_spot_interruption_turns_the_node_not_ready(
    api: FakeApiServer, make_provider: Callable[[], SimulatedProvider], clock: FakeClock
) -> None:
    provider = make_provider()
    name = launch(provider, "m5.xlarge/us-east-1a/spot")
    clock.now = T0 + 5
    provider.advance()

    provider.interrupt(name)
    provider.advance()

    gone = node(api, name)
    assert gone is not None and not node_from_dict(gone).ready
    assert [i.capacity_type for i in provider.instances()] == [SPOT]


def test_an_instance_terminated_before_it_registers_never_registers(
    api: FakeApiServer, make_provider: Callable[[], SimulatedProvider], clock: FakeClock
) -> None:
    provider = make_provider()
    launch(provider, "m5.xlarge/us-east-1a/spot")
    clock.now = T0 + 3
    provider.terminate(provider.instances()[0])

    clock.now = T0 + 30
    provider.advance()

    assert node_creates(api) == 0


def test_register_nodes_false_leaves_the_cluster_alone(
    api: FakeApiServer, make_config: Callable[..., Config], config: Config, clock: FakeClock
) -> None:
    off = make_config(
        zones=list(config.zones), simulated={**config.providers["simulated"], "registerNodes": False}
    )
    with api.api_client() as client:
        provider = SimulatedProvider(off, clock=clock, kube=NodeRegistrar(client))
        launch(provider, "m5.xlarge/us-east-1a/spot")
        clock.now = T0 + 60
        provider.advance()

    assert node_creates(api) == 0
