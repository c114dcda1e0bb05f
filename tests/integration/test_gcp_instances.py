"""GcpProvider.instances() and terminate(): ownership by GCE label across zones and pages, restarts,
preemption, idempotent deletes."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest

from autoscaler.cloud import InstanceNotFound, ProviderError, Throttled
from autoscaler.core.model import SPOT, InstanceState
from autoscaler.core.offering import Instance, LaunchRequest
from providers.gcp.inventory import GONE_RETENTION
from tests.fakes.gcp_cloud import FakeGcp, make_provider

if TYPE_CHECKING:
    from collections.abc import Iterator

    from providers.gcp import GcpProvider

ZONE_A, ZONE_B = "us-central1-a", "us-central1-b"


@pytest.fixture
def gcp() -> Iterator[FakeGcp]:
    with FakeGcp() as fake:
        yield fake


def launch(
    provider: GcpProvider,
    instance_type: str = "e2-standard-2",
    zone: str = ZONE_A,
    capacity_type: str = "on-demand",
) -> Instance:
    chosen = next(
        o
        for o in provider.offerings()
        if (o.instance_type, o.zone, o.capacity_type) == (instance_type, zone, capacity_type)
    )
    return provider.launch(LaunchRequest(str(uuid.uuid4()), (chosen,), {}, (), {}))


def test_a_restarted_provider_finds_every_owned_vm_with_its_token_and_provider_id(gcp: FakeGcp) -> None:
    first = make_provider(gcp)
    launched = [launch(first, zone=ZONE_A), launch(first, "n2-standard-4", ZONE_B, "spot")]

    found = make_provider(gcp).instances()

    assert sorted((i.provider_id, i.launch_token) for i in found) == sorted(
        (i.provider_id, i.launch_token) for i in launched
    )
    spot = next(i for i in found if i.zone == ZONE_B)
    assert (spot.instance_type, spot.capacity_type, spot.state) == ("n2-standard-4", "spot", "running")
    assert spot.provider_id == f"gce://tidal-test/{ZONE_B}/{spot.id}"
    assert spot.price > 0 and spot.created > 0


def test_owned_vms_are_found_on_every_page_of_the_aggregated_list(gcp: FakeGcp) -> None:
    gcp.compute.page_cap = 2
    provider = make_provider(gcp)
    for zone in (ZONE_A, ZONE_B, ZONE_A, ZONE_B, ZONE_A):
        launch(provider, zone=zone)
    assert len(provider.instances()) == 5
    assert gcp.compute_server.methods().count("compute.instances.aggregatedList") >= 3 + 5  # 3 pages


def test_vms_of_other_clusters_and_unlabelled_vms_are_not_owned(gcp: FakeGcp) -> None:
    launch(make_provider(gcp, clusterName="other"))
    with gcp.compute.lock:
        gcp.compute.instances[(ZONE_A, "hand-made")] = {
            "name": "hand-made",
            "zone": ZONE_A,
            "status": "RUNNING",
        }
    assert make_provider(gcp).instances() == []


def test_a_preempted_spot_vm_is_reported_terminated_until_the_retention_ends(gcp: FakeGcp) -> None:
    now = [1000.0]
    provider = make_provider(gcp, clock=lambda: now[0])
    spot = launch(provider, capacity_type="spot")
    assert [i.state for i in provider.instances()] == ["running"]

    gcp.preempt(spot.id)

    [gone] = provider.instances()
    assert (gone.provider_id, gone.launch_token, gone.state) == (
        spot.provider_id,
        spot.launch_token,
        "terminated",
    )
    now[0] += GONE_RETENTION
    assert provider.instances() == []


def test_a_vm_stopped_by_preemption_is_reported_terminated(gcp: FakeGcp) -> None:
    provider = make_provider(gcp)
    spot = launch(provider, capacity_type="spot")
    with gcp.compute.lock:
        vm = next(v for v in gcp.compute.instances.values() if v["name"] == spot.id)
        vm["scheduling"]["instanceTerminationAction"] = "STOP"
    gcp.preempt(spot.id)
    assert [i.state for i in provider.instances()] == ["terminated"]


def test_terminate_deletes_the_vm_and_terminating_it_again_is_a_typed_not_found(gcp: FakeGcp) -> None:
    provider = make_provider(gcp)
    instance = launch(provider)
    provider.terminate(instance)
    assert [i.state for i in provider.instances()] == ["stopping"]
    gcp.compute.operation_delay = 0
    gcp.instances()
    with pytest.raises(InstanceNotFound):  # 404 now: already gone
        provider.terminate(instance)
    assert gcp.instances() == []


def test_terminate_refuses_a_vm_of_another_cluster(gcp: FakeGcp) -> None:
    provider = make_provider(gcp)
    other = Instance(
        "vm",
        "gce://tidal-test/us-central1-a/vm",
        "e2-standard-2",
        ZONE_A,
        SPOT,
        InstanceState.RUNNING,
        tags={"tidal-cluster": "other"},
    )
    with pytest.raises(ProviderError, match="belongs to cluster 'other'"):
        provider.terminate(other)


def test_rate_limited_listing_is_throttled_so_the_controller_backs_off(gcp: FakeGcp) -> None:
    provider = make_provider(gcp)
    gcp.throttle("compute.instances.aggregatedList", retry_after=3)
    with pytest.raises(Throttled) as err:
        provider.instances()
    assert err.value.retry_after == 3
