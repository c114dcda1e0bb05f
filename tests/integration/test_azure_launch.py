"""Launching and removing AKS nodes through the unmodified Azure SDK against the fake ARM."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import pytest

from autoscaler.cloud import (
    CapacityUnavailable,
    InstanceNotFound,
    ProviderError,
    QuotaExceeded,
    Refusal,
    Throttled,
)
from autoscaler.core.offering import LaunchRequest
from tests.fakes.azure_model import ArmError
from tests.fakes.azure_setup import (
    CPU,
    POOL_CPU,
    POOL_T4,
    POOL_T4_BIG,
    POOL_T4_SPOT,
    T4,
    T4_BIG,
    azure_config,
    azure_provider,
    running_arm,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from autoscaler.core.offering import Offering
    from providers.azure import AzureProvider
    from tests.fakes.azure_arm import FakeArm


@pytest.fixture
def arm(tmp_path: Path) -> Iterator[FakeArm]:
    yield from running_arm(tmp_path)


TAGS = {"tidal.dev/cluster": "aks-test", "tidal.dev/managed": "true"}


def offering(provider: AzureProvider, size: str, capacity_type: str = "on-demand") -> Offering:
    return next(
        o for o in provider.offerings() if o.instance_type == size and o.capacity_type == capacity_type
    )


def request(token: str, *offerings: Offering) -> LaunchRequest:
    return LaunchRequest(token, tuple(offerings), {}, (), {**TAGS, "tidal.dev/launch-token": token})


def eventually(condition: Callable[[], object], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def tidal_vms(arm: FakeArm, pool: str) -> list[int]:
    return sorted(int(i) for i in arm.state.scale_sets[pool].vms)


@pytest.mark.parametrize("style", ["async", "location"])
def test_a_launch_raises_the_node_pool_by_one_and_reports_the_new_instance_running(
    arm: FakeArm, style: str
) -> None:
    arm.state.styles["scale"] = style
    provider = azure_provider(arm)
    instance = provider.launch(request("tok-a", offering(provider, T4)))
    assert arm.state.scale_sets[POOL_T4].capacity == 1
    assert instance.state == "running"
    assert instance.provider_id == (
        f"azure:///subscriptions/{arm.subscription}/resourceGroups/mc_tidal-rg_tidal_eastus/providers/"
        f"Microsoft.Compute/virtualMachineScaleSets/{POOL_T4}/virtualMachines/0"
    )
    assert (instance.instance_type, instance.zone, instance.capacity_type) == (T4, "eastus-1", "on-demand")
    assert arm.state.scale_sets[POOL_T4].tags["tidal.dev.token.tok-a"].startswith("vm:0:")


def test_a_retried_launch_with_the_same_token_never_adds_a_second_node(arm: FakeArm) -> None:
    provider = azure_provider(arm)
    first = provider.launch(request("tok-a", offering(provider, T4)))
    again = provider.launch(request("tok-a", offering(provider, T4)))
    after_restart = azure_provider(arm).launch(request("tok-a", offering(provider, T4)))
    assert again.id == after_restart.id == first.id
    assert arm.state.scale_sets[POOL_T4].capacity == 1
    assert len(arm.calls("PATCH", POOL_T4)) == 2  # the scale-out, then the tag naming instance 0


def test_a_retry_after_a_restart_finds_the_node_on_another_pool_than_its_first_candidate(
    arm: FakeArm,
) -> None:
    provider = azure_provider(arm)
    arm.state.fail_allocation(T4, count=1)
    launched = provider.launch(request("tok-a", offering(provider, T4), offering(provider, T4_BIG)))
    restarted = azure_provider(arm)
    again = restarted.launch(request("tok-a", offering(restarted, T4), offering(restarted, T4_BIG)))
    assert launched.instance_type == again.instance_type == T4_BIG
    assert again.id == launched.id
    assert tidal_vms(arm, POOL_T4) == [] and tidal_vms(arm, POOL_T4_BIG) == [0]


@pytest.mark.parametrize(
    "code", ["AllocationFailed", "ZonalAllocationFailed", "OverconstrainedAllocationRequest"]
)
def test_a_capacity_failure_inside_the_operation_falls_back_to_the_next_candidate(
    arm: FakeArm, code: str
) -> None:
    provider = azure_provider(arm)
    arm.state.fail_allocation(T4, code=code)
    instance = provider.launch(request("tok-a", offering(provider, T4), offering(provider, T4_BIG)))
    assert instance.instance_type == T4_BIG
    assert tidal_vms(arm, POOL_T4) == []  # the failed instance was deleted again
    assert arm.state.scale_sets[POOL_T4].capacity == 0


def test_capacity_failures_on_every_candidate_name_them_all(arm: FakeArm) -> None:
    provider = azure_provider(arm)
    arm.state.fail_allocation(code="AllocationFailed")
    candidates = (offering(provider, T4), offering(provider, T4_BIG))
    with pytest.raises(CapacityUnavailable) as failure:
        provider.launch(request("tok-a", *candidates))
    assert [o.key for o in failure.value.offerings] == [o.key for o in candidates]
    assert {a.refusal for a in failure.value.attempts} == {Refusal.NO_CAPACITY}


def test_a_sku_not_available_answer_is_a_restriction_of_that_size_in_the_zones_named(arm: FakeArm) -> None:
    provider = azure_provider(arm)
    t4 = offering(provider, T4)
    message = (
        f"The requested VM size {T4} is currently not available in location 'eastus' zones '1' for "
        "subscription '00000000-0000-0000-0000-000000000000'. Please try another size or deploy to a "
        "different location or zones."
    )
    arm.fail_request("PATCH", POOL_T4, ArmError(409, "SkuNotAvailable", message))
    instance = provider.launch(request("tok-a", t4, offering(provider, T4_BIG)))
    assert instance.instance_type == T4_BIG
    assert arm.state.scale_sets[POOL_T4].capacity == 0
    arm.fail_request("PATCH", POOL_T4, ArmError(409, "SkuNotAvailable", message))
    with pytest.raises(QuotaExceeded) as failure:
        provider.launch(request("tok-b", t4))
    scope = failure.value.scope
    assert scope is not None and (scope.kind, scope.instance_types, scope.zones) == (
        "instance-type",
        frozenset({T4}),
        frozenset({"eastus-1"}),
    )
    assert scope.covers(t4) and not scope.covers(dataclasses.replace(t4, zone="eastus-2"))


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (
            "OperationNotAllowed",
            "Operation could not be completed as it results in exceeding approved standardNCASv3_T4Family "
            "Cores quota. Current Limit: 0, Current Usage: 0, Additional Required: 4",
        ),
        ("QuotaExceeded", "Quota exceeded for standardNCASv3_T4Family Cores in eastus."),
    ],
)
def test_a_cores_quota_error_is_quota_exceeded(arm: FakeArm, code: str, message: str) -> None:
    provider = azure_provider(arm)
    arm.fail_request("PATCH", POOL_T4, ArmError(409, code, message))
    with pytest.raises(QuotaExceeded, match="standardNCASv3_T4Family Cores"):
        provider.launch(request("tok-a", offering(provider, T4)))


def test_a_family_cores_quota_covers_every_size_of_that_family_and_no_other(arm: FakeArm) -> None:
    provider = azure_provider(arm)
    message = (
        "Operation could not be completed as it results in exceeding approved standardNCASv3_T4Family Cores "
        "quota. Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 0, "
        "Current Usage: 0, Additional Required: 4, (Minimum) New Limit Required: 4."
    )
    arm.fail_request("PATCH", POOL_T4, ArmError(409, "OperationNotAllowed", message))
    with pytest.raises(QuotaExceeded) as failure:
        provider.launch(request("tok-a", offering(provider, T4)))
    scope = failure.value.scope
    assert scope is not None and (scope.kind, scope.name, scope.capacity_type) == (
        "family",
        "standardNCASv3_T4Family",
        "on-demand",
    )
    covered = {o.instance_type for o in provider.offerings() if scope.covers(o)}
    assert covered == {T4, T4_BIG}  # the configured pools of that family; not the spot pool, not the CPUs


def test_a_low_priority_cores_quota_covers_every_spot_offering(arm: FakeArm) -> None:
    provider = azure_provider(arm)
    message = (
        "Operation could not be completed as it results in exceeding approved LowPriorityCores quota. "
        "Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 10, "
        "Current Usage: 8, Additional Required: 4, (Minimum) New Limit Required: 12."
    )
    arm.fail_request("PATCH", POOL_T4_SPOT, ArmError(409, "OperationNotAllowed", message))
    with pytest.raises(QuotaExceeded) as failure:
        provider.launch(request("tok-a", offering(provider, T4, "spot")))
    scope = failure.value.scope
    assert scope is not None and (scope.kind, scope.capacity_type) == ("region", "spot")
    assert {o.capacity_type for o in provider.offerings() if scope.covers(o)} == {"spot"}


def test_an_operation_refused_for_another_reason_is_a_provider_error(arm: FakeArm) -> None:
    provider = azure_provider(arm)
    arm.fail_request(
        "PATCH", POOL_T4, ArmError(409, "OperationNotAllowed", "The scale set is being deleted.")
    )
    with pytest.raises(ProviderError, match="OperationNotAllowed: The scale set is being deleted") as failure:
        provider.launch(request("tok-a", offering(provider, T4)))
    assert type(failure.value) is ProviderError


def test_throttling_is_reported_with_the_retry_after_arm_sent(arm: FakeArm) -> None:
    provider = azure_provider(arm)
    candidate = offering(provider, T4)
    arm.throttle("PATCH", POOL_T4, retry_after=17)
    with pytest.raises(Throttled) as throttled:
        provider.launch(request("tok-a", candidate))
    assert throttled.value.retry_after == 17
    assert arm.state.scale_sets[POOL_T4].capacity == 0


def test_a_launch_still_running_answers_pending_and_the_next_listing_completes_it(arm: FakeArm) -> None:
    provider = azure_provider(arm, azure_config(arm, azure={"operationWait": "200ms"}))
    arm.state.hold_operations = True
    instance = provider.launch(request("tok-a", offering(provider, T4)))
    assert instance.state == "pending"
    arm.state.release()

    def listing_recorded_the_instance() -> bool:
        provider.instances()
        return arm.state.scale_sets[POOL_T4].tags["tidal.dev.token.tok-a"].startswith("vm:0:")

    eventually(listing_recorded_the_instance)
    assert [(i.id, i.state) for i in provider.instances()] == [(instance.id, "running")]
    assert instance.id == f"{POOL_T4}/0"


def test_an_allocation_failure_found_after_a_pending_answer_is_reported_once_by_poll_errors(
    arm: FakeArm,
) -> None:
    provider = azure_provider(arm, azure_config(arm, azure={"operationWait": "200ms"}))
    candidate = offering(provider, T4)
    arm.state.hold_operations = True
    arm.state.fail_allocation(T4)
    pending = provider.launch(request("tok-a", candidate))
    assert pending.state == "pending"
    arm.state.release()
    eventually(lambda: [i.state for i in provider.instances()] == ["terminated"])
    [late] = provider.poll_errors()
    assert (late.token, late.attempt.offering.key, late.attempt.refusal) == (
        "tok-a",
        candidate.key,
        Refusal.NO_CAPACITY,
    )
    assert "AllocationFailed" in late.attempt.detail
    assert provider.poll_errors() == []
    # No private bench: availability is the controller's, read through Offering.available.
    assert next(o for o in provider.offerings() if o.key == candidate.key).available


def test_a_launch_never_waits_longer_than_the_grace_for_its_operation(arm: FakeArm) -> None:
    provider = azure_provider(arm, azure_config(arm, azure={"operationWait": "300ms"}))
    candidate = offering(provider, T4)
    provider.instances()
    arm.state.hold_operations = True

    started = time.monotonic()
    instance = provider.launch(request("tok-a", candidate))
    elapsed = time.monotonic() - started

    assert instance.state == "pending" and instance.instance_type == T4
    # The whole grace, and then an answer: the held operation would otherwise never let it return.
    assert 0.3 <= elapsed < 3.0
    started = time.monotonic()
    assert [i.state for i in provider.instances()] == ["pending"]  # looks at the poller, no waiting
    assert time.monotonic() - started < 3.0


def test_a_failure_reported_after_the_grace_is_a_late_failure_and_the_next_launch_falls_back(
    arm: FakeArm,
) -> None:
    provider = azure_provider(arm, azure_config(arm, azure={"operationWait": "200ms"}))
    cheapest, next_best = offering(provider, T4), offering(provider, T4_BIG)
    arm.state.hold_operations = True
    arm.state.fail_allocation(T4)
    assert provider.launch(request("tok-a", cheapest, next_best)).state == "pending"

    arm.state.release()
    eventually(lambda: [i.state for i in provider.instances()] == ["terminated"])
    assert [f.attempt.offering.key for f in provider.poll_errors()] == [cheapest.key]
    grown = len(arm.calls("PATCH", POOL_T4))
    retry = provider.launch(request("tok-b", next_best))  # the controller's next plan, the cheapest benched
    assert retry.instance_type == T4_BIG
    assert len(arm.calls("PATCH", POOL_T4)) == grown


def test_terminate_sends_the_delete_and_returns_without_waiting_for_it(arm: FakeArm) -> None:
    # The longest grace there is: a terminate that waited on its held delete at all would take 30 s.
    provider = azure_provider(arm, azure_config(arm, azure={"operationWait": "30s"}))
    instance = provider.launch(request("tok-1", offering(provider, T4)))
    arm.state.hold_operations = True

    started = time.monotonic()
    provider.terminate(instance)
    assert time.monotonic() - started < 5.0

    assert [(i.id, i.state) for i in provider.instances()] == [(instance.id, "stopping")]
    arm.state.release()
    eventually(lambda: tidal_vms(arm, POOL_T4) == [])
    assert arm.state.scale_sets[POOL_T4].capacity == 0


def test_spot_launches_go_to_the_spot_pool(arm: FakeArm) -> None:
    provider = azure_provider(arm)
    instance = provider.launch(request("tok-s", offering(provider, T4, "spot")))
    assert (instance.capacity_type, instance.id) == ("spot", f"{POOL_T4_SPOT}/0")
    assert arm.state.scale_sets[POOL_T4].capacity == 0


def test_terminate_deletes_exactly_the_drained_instance(arm: FakeArm) -> None:
    provider = azure_provider(arm)
    first = provider.launch(request("tok-1", offering(provider, T4)))
    provider.launch(request("tok-2", offering(provider, T4)))
    provider.terminate(first)
    assert [r.path.endswith("/delete") for r in arm.calls("POST", POOL_T4)] == [True]
    eventually(lambda: tidal_vms(arm, POOL_T4) == [1])
    assert arm.state.scale_sets[POOL_T4].capacity == 1
    with pytest.raises(InstanceNotFound):  # already gone: nothing more is sent
        provider.terminate(first)
    assert len(arm.calls("POST", POOL_T4)) == 1


def test_terminate_refuses_an_instance_tidal_did_not_launch(arm: FakeArm) -> None:
    provider = azure_provider(arm)
    launched = provider.launch(request("tok-1", offering(provider, CPU)))
    baseline = dataclasses.replace(launched, id=f"{POOL_CPU}/0", launch_token="")
    with pytest.raises(ProviderError, match="no tidal launch tag"):
        provider.terminate(baseline)
    assert tidal_vms(arm, POOL_CPU) == [0, 1, 2]


def test_terminate_refuses_a_scale_set_tidal_does_not_manage(arm: FakeArm) -> None:
    arm.state.add_scale_set("aks-nodepool1-99999999-vmss", CPU, capacity=1)
    provider = azure_provider(arm)
    launched = provider.launch(request("tok-1", offering(provider, T4)))
    with pytest.raises(ProviderError, match="not one tidal manages"):
        provider.terminate(dataclasses.replace(launched, id="aks-nodepool1-99999999-vmss/0"))
    assert tidal_vms(arm, "aks-nodepool1-99999999-vmss") == [0]
