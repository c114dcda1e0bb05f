"""This cluster's EC2 instances as the provider contract's :class:`Instance`: listed by ownership tag, found by
launch token, and made from what a launch answered (priced and counted from the offerings last listed)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import botocore.exceptions

from autoscaler.config.values import Config
from autoscaler.core.model import (
    LABEL_CLUSTER,
    LABEL_LAUNCH_TOKEN,
    LABEL_MANAGED,
    ON_DEMAND,
    RESERVED,
    SPOT,
    CapacityType,
    InstanceState,
)
from autoscaler.core.offering import Instance
from providers.aws.clients import ClientFactory
from providers.aws.errors import ApiGuard, provider_error
from providers.aws.offerings import OfferingSource

__all__ = ["Ec2Instances", "provider_id"]

_STATES = {
    "pending": "pending",
    "running": "running",
    "stopping": "stopping",
    "stopped": "stopping",
    # An instance shutting down never comes back; treating it as ended lets tidal replace it at once.
    "shutting-down": "terminated",
    "terminated": "terminated",
}
_BOTOCORE_ERRORS = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError)


def provider_id(zone: str, instance_id: str) -> str:
    """The Node ``spec.providerID`` EKS sets: ``aws:///us-east-1a/i-0123…``."""
    return f"aws:///{zone}/{instance_id}"


class Ec2Instances:
    """DescribeInstances over the instances tagged for this cluster, read into contract instances."""

    def __init__(
        self,
        config: Config,
        clients: ClientFactory,
        guard: ApiGuard,
        source: OfferingSource,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.clients = clients
        self.guard = guard
        self.source = source
        self.clock = clock

    def owned(self, filters: Sequence[Mapping[str, Any]] = ()) -> list[Instance]:
        """Every instance of this cluster's tidal that also matches ``filters``, in any state."""
        ec2 = self.clients.client("ec2")
        try:
            with self.guard.call("DescribeInstances"):
                return list(self._pages(ec2, [*self._owned_filters(), *filters]))
        except _BOTOCORE_ERRORS as err:
            raise provider_error("ec2:DescribeInstances", err) from None

    def by_token(self, token: str) -> Instance | None:
        """The live (pending or running) instance launched under ``token``, if there is one."""
        filters = [
            {"Name": f"tag:{LABEL_LAUNCH_TOKEN}", "Values": [token]},
            {"Name": "instance-state-name", "Values": ["pending", "running"]},
        ]
        found = self.owned(filters)
        return found[0] if found else None

    def make(
        self,
        instance_id: str,
        instance_type: str,
        zone: str,
        capacity_type: str,
        state: str,
        tags: Mapping[str, str],
        created: float,
        reservation: str = "",
    ) -> Instance:
        """A contract instance, priced and with the GPU count of its offering as last listed."""
        known = self.source.known(instance_type, zone, capacity_type)
        spec = self.source.spec(instance_type)
        gpus = known.gpu_count if known else (spec.gpu_count if spec else 0)
        return Instance(
            id=instance_id,
            provider_id=provider_id(zone, instance_id),
            instance_type=instance_type,
            zone=zone,
            capacity_type=CapacityType(capacity_type),
            state=InstanceState(state),
            launch_token=tags.get(LABEL_LAUNCH_TOKEN, ""),
            created=created,
            price=known.price if known else 0.0,
            gpu_count=gpus,
            tags=dict(tags),
            reservation_id=reservation,
        )

    def _owned_filters(self) -> list[dict[str, Any]]:
        return [
            {"Name": f"tag:{LABEL_CLUSTER}", "Values": [self.config.cluster_name]},
            {"Name": f"tag:{LABEL_MANAGED}", "Values": ["true"]},
        ]

    def _pages(self, ec2: Any, filters: list[Mapping[str, Any]]) -> Iterator[Instance]:
        for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page.get("Reservations", []):
                for data in reservation.get("Instances", []):
                    yield self._instance(data)

    def _instance(self, data: Mapping[str, Any]) -> Instance:
        tags = {str(t["Key"]): str(t.get("Value", "")) for t in data.get("Tags") or []}
        zone = str(data.get("Placement", {}).get("AvailabilityZone", ""))
        instance_type = str(data.get("InstanceType", ""))
        capacity_type = SPOT if data.get("InstanceLifecycle") == "spot" else ON_DEMAND
        reservation = str(data.get("CapacityReservationId") or "")
        if reservation and reservation in self.source.reservation_ids:
            # In a reservation tidal launches into. (EC2 also runs on-demand launches in any matching open
            # reservation: those stay on-demand nodes, in a reservation tidal does not count on.)
            capacity_type = RESERVED
        launched = data.get("LaunchTime")
        created = launched.timestamp() if isinstance(launched, datetime) else self.clock()
        return self.make(
            str(data["InstanceId"]),
            instance_type,
            zone,
            capacity_type,
            _STATES.get(str(data.get("State", {}).get("Name", "")), "pending"),
            tags,
            created,
            reservation,
        )
