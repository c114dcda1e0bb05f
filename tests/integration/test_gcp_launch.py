"""GcpProvider.launch() against the fake Compute Engine: VMs built from a GKE node pool template, candidates
tried in order, failures inside the zone operation, idempotency by requestId."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from autoscaler.cloud import CapacityUnavailable, ProviderError, QuotaExceeded, Refusal, Throttled
from autoscaler.core.model import Taint
from autoscaler.core.offering import LaunchRequest
from providers.gcp.launch import request_id
from tests.fakes.gcp_cloud import FakeGcp, make_provider
from tests.fakes.gcp_fixtures import attachable_gpu_prices

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from typing import Any

    from autoscaler.core.offering import Offering
    from providers.gcp import GcpProvider

ZONE_A, ZONE_B = "us-central1-a", "us-central1-b"


@pytest.fixture
def gcp() -> Iterator[FakeGcp]:
    with FakeGcp() as fake:
        yield fake


def offering(
    provider: GcpProvider, instance_type: str, zone: str = ZONE_A, capacity_type: str = "on-demand"
) -> Offering:
    return next(
        o
        for o in provider.offerings()
        if (o.instance_type, o.zone, o.capacity_type) == (instance_type, zone, capacity_type)
    )


def request(
    *offerings: Offering,
    token: str | None = None,
    taints: Iterable[Taint] = (),
    labels: dict[str, str] | None = None,
) -> LaunchRequest:
    return LaunchRequest(
        token or str(uuid.uuid4()),
        tuple(offerings),
        labels if labels is not None else {"tidal.dev/managed": "true", "team": "ml"},
        tuple(taints),
        {"tidal.dev/cluster": "e2e", "Cost-Center": "R&D 42"},
    )


def metadata(vm: dict[str, Any], key: str) -> str:
    value: str = next(i["value"] for i in vm["metadata"]["items"] if i["key"] == key)
    return value


def kube_labels(vm: dict[str, Any]) -> dict[str, str]:
    return dict(part.split("=", 1) for part in metadata(vm, "kube-labels").split(","))


def test_a_launch_is_a_vm_built_from_the_node_pool_template_with_tidals_labels(gcp: FakeGcp) -> None:
    provider = make_provider(gcp)
    chosen = offering(provider, "n2-standard-4", ZONE_B)
    req = request(chosen, taints=[Taint("dedicated", "batch", "NoSchedule")])

    instance = provider.launch(req)

    [vm] = gcp.instances()
    template = gcp.compute.templates[provider.settings.template.path]["properties"]
    assert (instance.instance_type, instance.zone, instance.capacity_type) == (
        "n2-standard-4",
        ZONE_B,
        "on-demand",
    )
    assert instance.provider_id == f"gce://tidal-test/{ZONE_B}/{vm['name']}" and instance.id == vm["name"]
    assert instance.launch_token == req.token and instance.state == "running"
    assert vm["machineType"].endswith(f"/zones/{ZONE_B}/machineTypes/n2-standard-4")
    assert vm["networkInterfaces"] == template["networkInterfaces"]
    assert vm["serviceAccounts"] == template["serviceAccounts"]
    assert (
        vm["disks"][0]["initializeParams"]["diskType"]
        == f"projects/tidal-test/zones/{ZONE_B}/diskTypes/pd-balanced"
    )
    assert {
        "tidal-cluster": "e2e",
        "tidal-managed": "true",
        "tidal-launch-token": req.token,
        "goog-k8s-node-pool-name": "tidal",
        "cost-center": "r_d_42",
    }.items() <= vm["labels"].items()
    labels = kube_labels(vm)
    assert labels["cloud.google.com/gke-nodepool"] == "tidal"
    assert labels["team"] == "ml" and labels["tidal.dev/capacity-type"] == "on-demand"
    assert labels["cloud.google.com/machine-family"] == "n2"
    assert "node.kubernetes.io/instance-type" not in labels
    assert "--register-with-taints=dedicated=batch:NoSchedule" in metadata(vm, "kube-env")


def test_a_spot_launch_asks_gce_for_spot_deleted_on_preemption(gcp: FakeGcp) -> None:
    provider = make_provider(gcp)
    provider.launch(request(offering(provider, "e2-standard-4", capacity_type="spot")))
    [vm] = gcp.instances()
    assert vm["scheduling"]["provisioningModel"] == "SPOT"
    assert vm["scheduling"]["instanceTerminationAction"] == "DELETE"
    assert kube_labels(vm)["cloud.google.com/gke-spot"] == "true"
    assert kube_labels(vm)["cloud.google.com/gke-provisioning"] == "spot"


@pytest.mark.skipif(not attachable_gpu_prices(), reason="shared GCP attachable-GPU price file not present")
def test_attached_gpus_are_requested_and_the_vm_never_live_migrates(gcp: FakeGcp) -> None:
    provider = make_provider(gcp)
    instance = provider.launch(request(offering(provider, "n1-standard-8_nvidia-tesla-t4x2")))
    [vm] = gcp.instances()
    assert vm["guestAccelerators"] == [
        {
            "acceleratorType": f"https://www.googleapis.com/compute/v1/projects/tidal-test/zones/{ZONE_A}/acceleratorTypes/nvidia-tesla-t4",
            "acceleratorCount": 2,
        }
    ]
    assert vm["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert (instance.instance_type, instance.gpu_count) == ("n1-standard-8_nvidia-tesla-t4x2", 2)
    assert kube_labels(vm)["cloud.google.com/gke-accelerator"] == "nvidia-tesla-t4"
    assert kube_labels(vm)["cloud.google.com/gke-gpu-driver-version"] == "default"


def test_a_cpu_machine_from_a_gpu_pools_template_gets_no_gpu_and_no_gpu_labels(gcp: FakeGcp) -> None:
    provider = make_provider(gcp, template=gcp.add_node_pool("e2e", "gpu", gpu=True))
    provider.launch(request(offering(provider, "e2-standard-4")))
    [vm] = gcp.instances()
    assert not vm.get("guestAccelerators")
    assert "cloud.google.com/gke-accelerator" not in kube_labels(vm)
    assert "gke-accelerator" not in metadata(vm, "kube-env")


def test_a_stockout_inside_the_operation_falls_back_to_the_next_candidate(gcp: FakeGcp) -> None:
    provider = make_provider(gcp)
    first, second = offering(provider, "n2-standard-4", ZONE_A), offering(provider, "n2-standard-4", ZONE_B)
    gcp.stockout(machine_type="n2-standard-4", zone=ZONE_A)

    instance = provider.launch(request(first, second))

    assert instance.zone == ZONE_B
    assert [vm["zone"].rsplit("/", 1)[-1] for vm in gcp.instances()] == [ZONE_B]


@pytest.mark.parametrize(
    "code", ["ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "STOCKOUT"]
)
def test_when_every_candidate_is_stocked_out_capacity_unavailable_names_them_all(
    gcp: FakeGcp, code: str
) -> None:
    provider = make_provider(gcp)
    candidates = [offering(provider, "n2-standard-4", z) for z in (ZONE_A, ZONE_B)]
    gcp.stockout(machine_type="n2-standard-4", code=code)
    with pytest.raises(CapacityUnavailable) as err:
        provider.launch(request(*candidates))
    assert err.value.offerings == tuple(candidates)
    assert gcp.instances() == []


def test_quota_exceeded_inside_the_operation_is_quota_exceeded(gcp: FakeGcp) -> None:
    provider = make_provider(gcp)
    gcp.quota("CPUS", machine_type="n2-standard-8")
    with pytest.raises(QuotaExceeded, match="QUOTA_EXCEEDED"):
        provider.launch(request(offering(provider, "n2-standard-8")))


def test_rate_limiting_is_throttled_with_the_servers_retry_after(gcp: FakeGcp) -> None:
    provider = make_provider(gcp)
    chosen = offering(provider, "n2-standard-4")
    gcp.throttle("compute.instances.insert", retry_after=7)
    with pytest.raises(Throttled) as err:
        provider.launch(request(chosen))
    assert err.value.retry_after == 7


def test_an_insert_whose_answer_was_lost_is_retried_with_the_same_request_id_and_makes_one_vm(
    gcp: FakeGcp,
) -> None:
    provider = make_provider(gcp)
    chosen = offering(provider, "e2-standard-4")
    gcp.lose_answer("compute.instances.insert")

    instance = provider.launch(request(chosen))

    assert gcp.compute_server.methods().count("compute.instances.insert") == 2
    assert gcp.compute.inserts == 1
    assert [vm["name"] for vm in gcp.instances()] == [instance.id]


def test_gce_answers_a_repeated_request_id_with_the_same_operation_and_makes_one_vm(gcp: FakeGcp) -> None:
    client = compute_v1.InstancesClient(
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        transport="rest",
        client_options=ClientOptions(api_endpoint=gcp.compute_server.url),
    )
    body = compute_v1.Instance(name="vm-1", machine_type=f"zones/{ZONE_A}/machineTypes/e2-standard-4")
    rid = str(uuid.uuid4())
    insert = compute_v1.InsertInstanceRequest(
        project="tidal-test", zone=ZONE_A, instance_resource=body, request_id=rid
    )
    first = client.insert_unary(request=insert)
    again = client.insert_unary(request=insert)
    assert again.name == first.name and again.id == first.id
    assert [vm["name"] for vm in gcp.instances()] == ["vm-1"]


def test_launching_the_same_token_twice_makes_one_vm(gcp: FakeGcp) -> None:
    provider = make_provider(gcp)
    req = request(offering(provider, "e2-standard-4"))
    first = provider.launch(req)
    again = provider.launch(req)
    assert again.id == first.id
    assert len(gcp.instances()) == 1 and gcp.compute.inserts == 1


def test_a_launch_retried_with_the_same_token_after_a_stockout_asks_gce_again(gcp: FakeGcp) -> None:
    provider = make_provider(gcp)
    req = request(offering(provider, "n2-standard-4"))
    gcp.stockout(machine_type="n2-standard-4")
    with pytest.raises(CapacityUnavailable):
        provider.launch(req)

    gcp.capacity_back()
    instance = provider.launch(req)

    assert gcp.compute.inserts == 2  # the failed insert, then one new one
    assert [vm["name"] for vm in gcp.instances()] == [instance.id]
    assert instance.launch_token == req.token and instance.state == "running"


def test_a_restarted_tidal_retrying_a_stocked_out_launch_asks_gce_again_once(gcp: FakeGcp) -> None:
    req = request(offering(make_provider(gcp), "n2-standard-4"))
    gcp.stockout(machine_type="n2-standard-4")
    with pytest.raises(CapacityUnavailable):
        make_provider(gcp).launch(req)
    gcp.capacity_back()

    first = make_provider(gcp).launch(req)  # GCE answers the old requestId with the failed operation
    second = make_provider(gcp).launch(req)

    assert first.id == second.id
    assert gcp.compute.inserts == 2
    assert len(gcp.instances()) == 1


def test_the_request_ids_of_one_launch_differ_per_offering_and_per_ended_attempt() -> None:
    token = str(uuid.uuid4())
    first = request_id(token, "n2-standard-4/us-central1-a/on-demand")
    assert first == request_id(token, "n2-standard-4/us-central1-a/on-demand")
    assert first != request_id(token, "n2-standard-4/us-central1-b/on-demand")
    after = request_id(token, "n2-standard-4/us-central1-a/on-demand", after="operation-1-abc")
    assert after not in (first, request_id(token, "n2-standard-4/us-central1-a/on-demand", "operation-2"))
    assert all(str(uuid.UUID(r)) == r for r in (first, after))


def test_an_insert_whose_operation_outlives_the_timeout_returns_a_pending_instance() -> None:
    with FakeGcp(operation_delay=5.0) as gcp:
        provider = make_provider(gcp, gcp={"operationTimeout": "100ms"})
        chosen = offering(provider, "e2-standard-4")
        instance = provider.launch(request(chosen))
        assert instance.state == "pending" and instance.instance_type == "e2-standard-4"
        assert [i.state for i in provider.instances()] == ["pending"]


class SteppedClock:
    """Monotonic time that moves only when the provider sleeps (or a test says so); the fake's operations
    age by it too, so a launch's timing is exact whatever the machine's load."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_operation_timeout_bounds_the_whole_launch_not_each_candidate() -> None:
    clock = SteppedClock()
    with FakeGcp(operation_delay=0.6, clock=clock) as gcp:
        provider = make_provider(gcp, monotonic=clock, sleep=clock.sleep, gcp={"operationTimeout": "1s"})
        candidates = [offering(provider, "n2-standard-4", z) for z in (ZONE_A, ZONE_B)]
        gcp.stockout(machine_type="n2-standard-4", zone=ZONE_A)

        started = clock()
        instance = provider.launch(request(*candidates))

        # A's stockout took 0.6 s; B got the 0.4 s that were left, not another full second.
        assert clock() - started == pytest.approx(1.0)
        assert (instance.zone, instance.state) == (ZONE_B, "pending")


def test_a_stockout_found_after_the_launch_answered_pending_is_reported_once_by_poll_errors() -> None:
    clock = SteppedClock()
    with FakeGcp(operation_delay=0.5, clock=clock) as gcp:
        provider = make_provider(gcp, monotonic=clock, sleep=clock.sleep, gcp={"operationTimeout": "50ms"})
        first, second = (
            offering(provider, "n2-standard-4", ZONE_A),
            offering(provider, "n2-standard-4", ZONE_B),
        )
        gcp.stockout(machine_type="n2-standard-4", zone=ZONE_A)

        started = clock()
        pending = provider.launch(request(first, second))
        assert clock() - started == pytest.approx(0.05)  # the operation timeout, not the operation's 0.5 s
        assert (pending.zone, pending.state) == (ZONE_A, "pending")

        clock.sleep(0.6)
        [ended] = provider.instances()
        assert (ended.id, ended.state, ended.launch_token) == (pending.id, "terminated", pending.launch_token)
        [late] = provider.poll_errors()
        assert (late.token, late.attempt.offering, late.attempt.refusal) == (
            pending.launch_token,
            first,
            Refusal.NO_CAPACITY,
        )
        assert "ZONE_RESOURCE_POOL_EXHAUSTED" in late.attempt.detail
        assert provider.poll_errors() == []  # reported once
        # The provider keeps no bench of its own: the controller's store does, through Offering.available.
        assert next(o for o in provider.offerings() if o.key == first.key).available


def test_a_quota_refusal_inside_the_operation_names_its_scope_from_the_quota_info(gcp: FakeGcp) -> None:
    provider = make_provider(gcp)
    n2 = offering(provider, "n2-standard-8")
    gcp.quota("N2_CPUS", machine_type="n2-standard-8")
    with pytest.raises(QuotaExceeded) as err:
        provider.launch(request(n2))
    [attempt] = err.value.attempts
    assert attempt.refusal == Refusal.QUOTA
    assert attempt.scope is not None
    assert (attempt.scope.kind, attempt.scope.name, attempt.scope.region) == (
        "family",
        "N2_CPUS",
        "us-central1",
    )
    covered = {o.instance_type for o in provider.offerings() if attempt.scope.covers(o)}
    assert covered and all(t.startswith("n2-") for t in covered)


def test_a_gpu_quota_refusal_covers_the_machine_types_with_that_gpu_and_falls_through_to_the_next(
    gcp: FakeGcp,
) -> None:
    provider = make_provider(gcp)
    l4, cpu = offering(provider, "g2-standard-4"), offering(provider, "n2-standard-4")
    gcp.quota("NVIDIA_L4_GPUS", machine_type="g2-standard-4")
    instance = provider.launch(request(l4, cpu))
    assert instance.instance_type == "n2-standard-4"
    with pytest.raises(QuotaExceeded) as err:
        provider.launch(request(l4))
    scope = err.value.scope
    assert scope is not None and (scope.kind, scope.name) == ("gpu", "NVIDIA_L4_GPUS")
    covered = {o for o in provider.offerings() if scope.covers(o)}
    assert {o.instance_type for o in covered} == {"g2-standard-4", "g2-standard-8"}


def test_a_preemptible_quota_covers_spot_offerings_only(gcp: FakeGcp) -> None:
    provider = make_provider(gcp)
    spot = offering(provider, "n2-standard-4", capacity_type="spot")
    gcp.quota("PREEMPTIBLE_CPUS", machine_type="n2-standard-4")
    with pytest.raises(QuotaExceeded) as err:
        provider.launch(request(spot))
    scope = err.value.scope
    assert scope is not None and (scope.kind, scope.capacity_type) == ("region", "spot")
    assert not scope.covers(offering(provider, "n2-standard-4"))


def test_the_node_pools_template_is_found_through_its_managed_instance_group(gcp: FakeGcp) -> None:
    gcp.add_node_pool("e2e", "other")
    gcp.add_node_pool("e2e", "tidal")
    provider = make_provider(gcp, node_pool="tidal")
    provider.launch(request(offering(provider, "e2-standard-4")))
    [vm] = gcp.instances()
    assert kube_labels(vm)["cloud.google.com/gke-nodepool"] == "tidal"
    assert "compute.instanceGroupManagers.list" in gcp.compute_server.methods()


def test_a_regional_template_is_read_through_the_regional_api(gcp: FakeGcp) -> None:
    provider = make_provider(gcp, template=gcp.add_node_pool("e2e", "tidal", regional=True))
    provider.launch(request(offering(provider, "e2-standard-4")))
    assert "compute.regionInstanceTemplates.get" in gcp.compute_server.methods()
    assert len(gcp.instances()) == 1


def test_a_template_without_kube_env_is_refused_as_not_a_gke_template(gcp: FakeGcp) -> None:
    path = gcp.add_node_pool("e2e", "tidal")
    items = gcp.compute.templates[path]["properties"]["metadata"]["items"]
    items[:] = [i for i in items if i["key"] != "kube-env"]
    provider = make_provider(gcp, template=path)
    with pytest.raises(ProviderError, match="no kube-env metadata: it is not a GKE node pool template"):
        provider.launch(request(offering(provider, "e2-standard-4")))
