"""Spot interruption notices from an SQS queue fed by EventBridge rules.

The queue receives EC2 Spot Instance Interruption Warnings (two minutes before reclaim), EC2 Instance
Rebalance Recommendations (elevated risk) and EC2 Instance State-change Notifications; each names an
instance that is about to go away, so its node should be cordoned and drained and its pods re-planned at once.
The queue is one per cluster: every message is deleted once read, whatever instance it names.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import botocore.exceptions
import structlog

from providers.aws.clients import ClientFactory
from providers.aws.errors import ApiGuard, provider_error

__all__ = ["Notice", "SpotInterruptionQueue", "parse_notice"]

log = structlog.get_logger("tidal.providers.aws")

SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
STATE_CHANGE = "EC2 Instance State-change Notification"
GOING_AWAY = frozenset({"stopping", "stopped", "shutting-down", "terminated"})
NOTICE_RETENTION = 1800.0  # a reclaimed instance is gone well before this
MAX_BATCHES = 10  # per poll: at most 100 messages, so one poll never stalls a reconcile


@dataclass(frozen=True, slots=True)
class Notice:
    """One instance AWS is about to take away (or advises moving off), and why."""

    instance_id: str
    kind: str  # spot-interruption | rebalance | state-change
    detail: str = ""


def parse_notice(body: str) -> Notice | None:
    """The notice in one message body (an EventBridge event, possibly wrapped by SNS), or None."""
    try:
        event = json.loads(body)
        if isinstance(event, Mapping) and event.get("Type") == "Notification" and "Message" in event:
            event = json.loads(event["Message"])
    except (TypeError, ValueError):
        return None
    if not isinstance(event, Mapping):
        return None
    kind = event.get("detail-type")
    detail = event.get("detail") or {}
    instance_id = str(detail.get("instance-id") or "")
    if not instance_id:
        return None
    if kind == SPOT_WARNING:
        return Notice(instance_id, "spot-interruption", str(detail.get("instance-action") or ""))
    if kind == REBALANCE:
        return Notice(instance_id, "rebalance")
    if kind == STATE_CHANGE and detail.get("state") in GOING_AWAY:
        return Notice(instance_id, "state-change", str(detail["state"]))
    return None


class SpotInterruptionQueue:
    """Reads and deletes notices; remembers the instances they name for :data:`NOTICE_RETENTION`."""

    def __init__(
        self, queue: str, clients: ClientFactory, guard: ApiGuard, *, clock: Callable[[], float] = time.time
    ) -> None:
        """``queue`` is a queue URL, or a queue name looked up once."""
        self.queue = queue
        self.clients = clients
        self.guard = guard
        self.clock = clock
        self._url = queue if queue.startswith(("https://", "http://")) else ""
        self._seen: dict[str, tuple[Notice, float]] = {}
        self._lock = threading.Lock()

    def _queue_url(self, sqs: Any) -> str:
        if not self._url:
            with self.guard.call("GetQueueUrl"):
                self._url = str(sqs.get_queue_url(QueueName=self.queue)["QueueUrl"])
        return self._url

    def poll(self) -> list[Notice]:
        """Receive what is queued now (without waiting), delete it, and return the notices read."""
        sqs = self.clients.client("sqs")
        found: list[Notice] = []
        with self._lock:
            try:
                url = self._queue_url(sqs)
                for _ in range(MAX_BATCHES):
                    with self.guard.call("ReceiveMessage"):
                        messages = sqs.receive_message(
                            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0, VisibilityTimeout=30
                        ).get("Messages", [])
                    for message in messages:
                        notice = parse_notice(str(message.get("Body", "")))
                        if notice is not None:
                            found.append(notice)
                        with self.guard.call("DeleteMessage"):
                            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
                    if len(messages) < 10:
                        break
            except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as err:
                raise provider_error(f"sqs: reading {self.queue}", err) from None
            finally:
                now = self.clock()
                for notice in found:
                    self._seen.setdefault(notice.instance_id, (notice, now))
                self._seen = {k: v for k, v in self._seen.items() if now - v[1] < NOTICE_RETENTION}
        for notice in found:
            log.info(
                "aws_interruption_notice", instance=notice.instance_id, kind=notice.kind, detail=notice.detail
            )
        return found

    def instance_ids(self) -> list[str]:
        """Every instance named by a notice in the last :data:`NOTICE_RETENTION` seconds."""
        with self._lock:
            return sorted(self._seen)
