"""Interruption notices from EventBridge (through SQS, optionally wrapped by SNS)."""

from __future__ import annotations

import json

from providers.aws.interruptions import Notice, parse_notice


def event(detail_type: str, **detail: str) -> str:
    return json.dumps(
        {
            "version": "0",
            "id": "7bf73129-1428-4cd3-a780-95db273d1602",
            "detail-type": detail_type,
            "source": "aws.ec2",
            "region": "us-east-1",
            "resources": ["arn:aws:ec2:us-east-1b:instance/i-1234567890abcdef0"],
            "detail": detail,
        }
    )


def test_a_spot_interruption_warning_names_the_instance() -> None:
    body = event(
        "EC2 Spot Instance Interruption Warning",
        **{"instance-id": "i-1234567890abcdef0", "instance-action": "terminate"},
    )
    assert parse_notice(body) == Notice("i-1234567890abcdef0", "spot-interruption", "terminate")


def test_a_rebalance_recommendation_names_the_instance() -> None:
    body = event("EC2 Instance Rebalance Recommendation", **{"instance-id": "i-1234567890abcdef0"})
    assert parse_notice(body) == Notice("i-1234567890abcdef0", "rebalance")


def test_only_state_changes_towards_stopping_or_terminating_count() -> None:
    going = event(
        "EC2 Instance State-change Notification", **{"instance-id": "i-1", "state": "shutting-down"}
    )
    coming = event("EC2 Instance State-change Notification", **{"instance-id": "i-1", "state": "running"})
    assert parse_notice(going) == Notice("i-1", "state-change", "shutting-down")
    assert parse_notice(coming) is None


def test_an_sns_envelope_is_unwrapped_and_junk_is_ignored() -> None:
    wrapped = json.dumps(
        {
            "Type": "Notification",
            "Message": event("EC2 Instance Rebalance Recommendation", **{"instance-id": "i-9"}),
        }
    )
    assert parse_notice(wrapped) == Notice("i-9", "rebalance")
    assert parse_notice("not json") is None
    assert parse_notice(event("AWS API Call via CloudTrail")) is None
