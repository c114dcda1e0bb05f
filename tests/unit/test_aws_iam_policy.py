"""deploy/aws/iam-policy.json grants exactly the AWS actions the provider's code calls, scoped by tag where
AWS allows it.

The calls are found in the source: every SDK call is made on a client variable named after its service
(``ec2.create_fleet(...)``, ``pricing.get_paginator("get_products")``), so the test reads them with ``ast``
and checks each against the service's own API model.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import botocore.session
import pytest
from botocore import xform_name

if TYPE_CHECKING:
    from typing import TypeGuard

    class _ClientAttribute(ast.Attribute):
        """An attribute of a name bound to a client: ``ec2.describe_instances``."""

        value: ast.Name


ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "deploy" / "aws" / "iam-policy.json"
CODE = ROOT / "providers" / "aws"
CLIENTS = {"ec2": "ec2", "pricing": "pricing", "ssm": "ssm", "sqs": "sqs", "eks": "eks"}
NOT_OPERATIONS = {"get_paginator", "can_paginate", "meta", "exceptions", "close", "get_waiter"}
# Actions AWS checks on the caller's behalf for a call the code makes (documented by EC2 and IAM).
IMPLIED = {
    "ec2:CreateFleet": {"ec2:RunInstances", "ec2:CreateTags", "iam:PassRole"},
    "ec2:RunInstances": {"ec2:CreateTags", "iam:PassRole"},
    "ec2:CreateLaunchTemplate": {"ec2:CreateTags"},
}


def calls_in_source() -> Iterator[tuple[str, str, str]]:
    """(service, method, where) for every SDK call on a client variable in providers/aws."""
    for path in sorted(CODE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and _on_client(node.func) and node.func.attr == "get_paginator":
                argument = node.args[0]
                assert isinstance(argument, ast.Constant), (
                    f"{path.name}:{node.lineno}: name the paginator literally"
                )
                yield CLIENTS[node.func.value.id], str(argument.value), f"{path.name}:{node.lineno}"
            elif isinstance(node, ast.Attribute) and _on_client(node) and node.attr not in NOT_OPERATIONS:
                yield CLIENTS[node.value.id], node.attr, f"{path.name}:{node.lineno}"


def _on_client(node: ast.expr) -> TypeGuard[_ClientAttribute]:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in CLIENTS


def code_actions() -> set[str]:
    session = botocore.session.get_session()
    actions = set()
    for service, method, where in calls_in_source():
        names = {xform_name(op): op for op in session.get_service_model(service).operation_names}
        assert method in names, f"{where}: {service}.{method} is not a {service} API operation"
        actions.add(f"{service}:{names[method]}")
    return actions


def statements() -> list[dict[str, Any]]:
    statements: list[dict[str, Any]] = json.loads(POLICY.read_text())["Statement"]
    return statements


def listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def policy_actions() -> set[str]:
    return {a for s in statements() if s["Effect"] == "Allow" for a in listed(s["Action"])}


def test_the_source_calls_the_apis_the_provider_needs() -> None:
    called = code_actions()
    assert {
        "ec2:CreateFleet",
        "ec2:DescribeInstances",
        "ec2:TerminateInstances",
        "pricing:GetProducts",
    } <= called


def test_the_policy_grants_exactly_the_actions_the_code_calls() -> None:
    called = code_actions()
    needed = called | {a for action in called for a in IMPLIED.get(action, ())}
    granted = policy_actions()
    assert sorted(needed - granted) == [], "the code calls actions the policy does not grant"
    assert sorted(granted - needed) == [], "the policy grants actions the code never calls"


def resources_for(action: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (resource, s.get("Condition", {}))
        for s in statements()
        if action in listed(s["Action"])
        for resource in listed(s["Resource"])
    ]


def resource_type(arn: str) -> str:
    return arn.rsplit(":", 1)[-1].split("/")[0]


@pytest.mark.parametrize("action", ["ec2:CreateFleet", "ec2:RunInstances"])
def test_instances_volumes_and_fleets_are_created_only_with_this_clusters_tag(action: str) -> None:
    tagged = {
        resource_type(resource)
        for resource, condition in resources_for(action)
        if condition.get("StringEquals", {}).get("aws:RequestTag/tidal.dev/cluster") == "${CLUSTER_NAME}"
    }
    assert tagged == {"fleet", "instance", "volume"}


@pytest.mark.parametrize("action", ["ec2:CreateFleet", "ec2:RunInstances"])
def test_interfaces_and_spot_requests_need_no_tag_since_a_named_template_may_not_tag_them(
    action: str,
) -> None:
    untagged = {resource_type(r) for r, condition in resources_for(action) if not condition}
    assert {"network-interface", "spot-instances-request"} <= untagged
    # Only launch actions reach them: creating a bare interface is another action the policy does not grant.
    for s in statements():
        if any(resource_type(r) == "network-interface" for r in listed(s["Resource"])):
            assert set(listed(s["Action"])) <= {"ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateTags"}


def test_only_this_clusters_instances_can_be_terminated() -> None:
    [(resource, condition)] = resources_for("ec2:TerminateInstances")
    assert resource.endswith(":instance/*")
    assert condition == {"StringEquals": {"aws:ResourceTag/tidal.dev/cluster": "${CLUSTER_NAME}"}}


def test_tags_can_only_be_written_while_creating_tidals_resources() -> None:
    for resource, condition in resources_for("ec2:CreateTags"):
        assert set(condition["StringEquals"]["ec2:CreateAction"]) <= {
            "CreateFleet",
            "RunInstances",
            "CreateLaunchTemplate",
        }
        if resource_type(resource) in ("fleet", "instance", "volume", "launch-template"):
            assert condition["StringEquals"]["aws:RequestTag/tidal.dev/cluster"] == "${CLUSTER_NAME}"


def test_nodes_can_be_launched_into_capacity_reservations_and_nothing_else_is_done_to_them() -> None:
    granted = {resource_type(r) for r, _ in resources_for("ec2:RunInstances")}
    assert "capacity-reservation" in granted
    for s in statements():
        if any(resource_type(r) == "capacity-reservation" for r in listed(s["Resource"])):
            assert listed(s["Action"]) == ["ec2:RunInstances"]


def test_the_node_role_can_only_be_passed_to_ec2() -> None:
    [(resource, condition)] = resources_for("iam:PassRole")
    assert resource.endswith(":role/${NODE_ROLE_NAME}")
    assert condition == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
