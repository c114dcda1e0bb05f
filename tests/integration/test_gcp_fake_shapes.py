"""The GCP fakes speak Compute Engine's and Cloud Billing's published shapes: every request tidal sends and
every answer the fakes give, through a launch, a stockout, a quota refusal, a pending insert followed up, a
listing and a delete, is checked against the discovery documents Google publishes (compute.v1 and
cloudbilling.v1, shipped in google-api-python-client). A property the real API does not have, or a value of
the wrong JSON type, fails here instead of passing unnoticed in the fallback tests."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

import pytest

from autoscaler.cloud import CapacityUnavailable, LateFailure, QuotaExceeded
from autoscaler.core.offering import LaunchRequest
from tests.fakes.discovery_shapes import Discovery, load_discovery
from tests.fakes.gcp_cloud import FakeGcp, make_provider

if TYPE_CHECKING:
    from collections.abc import Iterable

    from autoscaler.core.offering import Offering
    from providers.gcp import GcpProvider
    from tests.fakes.gcp_http import Exchange

ZONE_A, ZONE_B = "us-central1-a", "us-central1-b"


def discovery(name: str) -> Discovery:
    found = load_discovery(name)
    if found is None:
        pytest.skip(f"google-api-python-client with the {name} discovery document is not installed")
    return found


def request(*offerings: Offering) -> LaunchRequest:
    return LaunchRequest(
        str(uuid.uuid4()),
        tuple(offerings),
        {"tidal.dev/managed": "true"},
        (),
        {"tidal.dev/cluster": "e2e", "Cost-Center": "R&D 42"},
    )


def offering(
    provider: GcpProvider, instance_type: str, zone: str = ZONE_A, capacity_type: str = "on-demand"
) -> Offering:
    return next(
        o
        for o in provider.offerings()
        if (o.instance_type, o.zone, o.capacity_type) == (instance_type, zone, capacity_type)
    )


def shape_problems(doc: Discovery, exchanges: Iterable[Exchange]) -> list[str]:
    found = []
    for x in exchanges:
        assert x.method in doc.methods, f"{x.method} is not a method of {doc.doc['name']}"
        wanted = doc.request_schema(x.method)
        if wanted is not None:
            found += [f"{x.method} request {p}" for p in doc.problems(wanted, x.request)]
        answer = doc.response_schema(x.method)
        if answer is not None:
            found += [f"{x.method} response {p}" for p in doc.problems(answer, x.response)]
    return sorted(set(found))


def test_every_request_and_answer_of_the_gcp_fakes_has_the_published_shape() -> None:
    compute, billing = discovery("compute.v1"), discovery("cloudbilling.v1")
    with FakeGcp() as gcp:
        gcp.add_reservation("ml", ZONE_A, "n2-standard-4", 1, delete_at="2026-12-01T16:00:00.000-08:00")
        provider = make_provider(gcp, gcp={"reservations": ["ml"]})
        provider.launch(request(offering(provider, "n2-standard-4", ZONE_B)))
        provider.launch(request(offering(provider, "n2-standard-4", capacity_type="reserved")))
        provider.launch(request(offering(provider, "e2-standard-4", capacity_type="spot")))
        gcp.stockout(machine_type="n2-standard-8", zone=ZONE_A)
        with pytest.raises(CapacityUnavailable):
            provider.launch(request(offering(provider, "n2-standard-8")))
        gcp.quota("NVIDIA_L4_GPUS", machine_type="g2-standard-4")
        with pytest.raises(QuotaExceeded):
            provider.launch(request(offering(provider, "g2-standard-4")))
        for instance in provider.instances():
            provider.terminate(instance)
        provider.instances()

        compute_exchanges = list(gcp.compute_server.exchanges)
        billing_exchanges = list(gcp.billing_server.exchanges)

    methods = {x.method for x in compute_exchanges}
    assert {
        "compute.instances.insert",
        "compute.zoneOperations.get",
        "compute.instances.delete",
        "compute.reservations.list",
    } <= methods
    assert any(
        "error" in x.response for x in compute_exchanges if x.method.startswith("compute.zoneOperations")
    )
    assert shape_problems(compute, compute_exchanges) == []
    assert billing_exchanges and shape_problems(billing, billing_exchanges) == []


def test_a_pending_insert_followed_up_and_a_node_pools_group_have_the_published_shape() -> None:
    compute = discovery("compute.v1")
    with FakeGcp(operation_delay=0.3) as gcp:
        gcp.add_node_pool("e2e", "other")
        gcp.add_node_pool("e2e", "tidal")
        provider = make_provider(gcp, node_pool="tidal", gcp={"operationTimeout": "50ms"})
        gcp.stockout(machine_type="n2-standard-4", zone=ZONE_A)
        pending = provider.launch(request(offering(provider, "n2-standard-4")))
        assert pending.state == "pending"
        deadline = time.monotonic() + 5
        late: list[LateFailure] = []
        while not late and time.monotonic() < deadline:
            time.sleep(0.1)
            late = provider.poll_errors()
        assert [f.attempt.refusal.value for f in late] == ["no-capacity"]
        exchanges = list(gcp.compute_server.exchanges)
    assert "compute.instanceGroupManagers.list" in {x.method for x in exchanges}
    assert shape_problems(compute, exchanges) == []


def test_the_shape_check_finds_a_property_compute_engine_does_not_have() -> None:
    """The check can fail: a misspelled property of an Operation is caught."""
    compute = discovery("compute.v1")
    operation = {
        "kind": "compute#operation",
        "name": "operation-1",
        "status": "DONE",
        "httpErrorStatusCod": 503,
    }
    assert compute.problems("Operation", operation) == ["httpErrorStatusCod: not a property of Operation"]
    assert compute.problems("Operation", {"id": "not-a-number"}) == [
        "id: 'not-a-number' is not a uint64 string"
    ]
