"""How ProvisioningRequests and CapacityBuffers are read from the API server's JSON and answered: every field
error named in one line, an atomic request Provisioned only once each launch for it was accepted, and
nothing written when nothing changed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import pytest

from autoscaler.cli.snapshot import SnapshotError
from autoscaler.config.options import Config
from autoscaler.core.model import CapacityBuffer, CapacityType, InstanceState, ProvisioningRequest
from autoscaler.core.offering import Instance
from autoscaler.core.planning.planner import Plan, PlanInput, plan
from autoscaler.runtime.answering import Answers
from autoscaler.runtime.kube.convert_requests import (
    capacitybuffer_from_api,
    podtemplate_from_api,
    provisioningrequest_from_api,
)
from autoscaler.runtime.launching import LaunchOutcome
from tests.autoscaling_objects import ATOMIC, capacity_buffer, pod_template, provisioning_request
from tests.builders import aws_offerings, snapshot

NOW = 1_795_168_800.0 + 60


class RecordingWrites:
    """What the controller would write on the API server."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, Mapping[str, Any]]] = []
        self.buffers: list[tuple[str, Mapping[str, Any]]] = []
        self.events: list[tuple[str, str, str]] = []

    def request_status(self, request: ProvisioningRequest, status: Mapping[str, Any]) -> None:
        self.requests.append((request.key, status))

    def buffer_status(self, buffer: CapacityBuffer, status: Mapping[str, Any]) -> None:
        self.buffers.append((buffer.key, status))

    def event(
        self,
        kind: str,
        namespace: str,
        name: str,
        uid: str,
        reason: str,
        message: str,
        event_type: str = "Normal",
    ) -> None:
        self.events.append((f"{kind}/{namespace}/{name}", reason, event_type))


def test_a_pod_set_with_no_pods_is_refused_naming_the_field() -> None:
    bad = provisioning_request("job-a-prov-1", ATOMIC, [("trainer", 0)])
    with pytest.raises(SnapshotError, match=r"spec\.podSets\[0\]\.count: 0 is not between 1"):
        snapshot(bad)


def test_an_unreadable_request_from_the_api_server_is_kept_and_answered_failed(
    make_config: Callable[..., Config],
) -> None:
    bad = provisioning_request("job-a-prov-1", ATOMIC, [("trainer", 2)])
    bad["spec"]["podSets"][0]["count"] = "two"
    read = provisioningrequest_from_api(bad)
    assert read.unreadable == "spec.podSets[0].count: expected an integer, got 'two'"
    result = plan(
        PlanInput(
            replace(snapshot(pod_template("trainer")), provisioning_requests=(read,)),
            aws_offerings(),
            make_config(),
            NOW,
        )
    )
    failed = next(c for c in result.provisioning[0].conditions if c.type == "Failed")
    assert (failed.status, failed.reason) == ("True", "InvalidProvisioningRequest")
    assert "spec.podSets[0].count" in failed.message


def test_a_pod_template_with_a_bad_quantity_says_which_field() -> None:
    template = pod_template("trainer")
    template["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = "lots"
    read = podtemplate_from_api(template)
    assert read.pod is None
    assert "memory" in read.error and "lots" in read.error


def test_a_buffer_reads_its_last_written_status() -> None:
    obj = capacity_buffer("warm-gpus", template="chunk", replicas=2)
    obj["status"] = {"replicas": 2, "podTemplateRef": {"name": "chunk"}}
    read = capacitybuffer_from_api(obj)
    assert (read.replicas, read.status_replicas, read.status_template) == (2, 2, "chunk")


def decided(make_config: Callable[..., Config]) -> Plan:
    objs = [pod_template("trainer", gpu=1), provisioning_request("job-a-prov-1", ATOMIC, [("trainer", 2)])]
    return plan(PlanInput(snapshot(*objs), aws_offerings(), make_config(), NOW))


def outcomes(result: Plan, accepted: int) -> list[LaunchOutcome]:
    out = []
    for i, la in enumerate(result.launch.launches):
        instance = None
        if i < accepted:
            o = la.offering
            instance = Instance(
                f"i-{i}",
                f"aws:///{o.zone}/i-{i}",
                o.instance_type,
                o.zone,
                CapacityType.ON_DEMAND,
                InstanceState.PENDING,
            )
        out.append(LaunchOutcome(la, f"token-{i}", instance))
    return out


def test_an_atomic_request_is_provisioned_only_when_every_launch_was_accepted(
    make_config: Callable[..., Config],
) -> None:
    result = decided(make_config)
    planned = len(result.launch.launches)
    assert planned >= 1
    writes = RecordingWrites()
    Answers(writes).write(result, outcomes(result, accepted=planned), NOW)
    conditions = {c["type"]: (c["status"], c["reason"]) for c in writes.requests[0][1]["conditions"]}
    assert conditions["Provisioned"] == ("True", "CapacityIsProvisioned")

    refused = RecordingWrites()
    Answers(refused).write(result, outcomes(result, accepted=planned - 1), NOW)
    conditions = {c["type"]: (c["status"], c["reason"]) for c in refused.requests[0][1]["conditions"]}
    assert conditions["Provisioned"] == ("False", "CapacityIsNotFound")


def test_a_dry_run_writes_nothing(make_config: Callable[..., Config]) -> None:
    result = decided(make_config)
    writes = RecordingWrites()
    assert Answers(writes, dry_run=True).write(result, outcomes(result, accepted=2), NOW) == 1
    assert writes.requests == []


def test_an_unsupported_class_is_warned_about_once(make_config: Callable[..., Config]) -> None:
    objs = [
        pod_template("trainer"),
        provisioning_request("job-c-1", "queued-provisioning.gke.io", [("trainer", 1)]),
    ]
    writes = RecordingWrites()
    answers = Answers(writes)
    for _ in range(3):
        answers.write(plan(PlanInput(snapshot(*objs), aws_offerings(), make_config(), NOW)), [], NOW)
    assert writes.events == [
        ("ProvisioningRequest/team-a/job-c-1", "UnsupportedProvisioningClass", "Warning")
    ]
    assert writes.requests == []
