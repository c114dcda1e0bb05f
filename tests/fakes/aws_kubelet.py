"""A kubelet stand-in for instances in a moto EC2: each running tidal instance joins the fake API server.

It does what nodeadm and the kubelet do on a real EKS node: read the instance's user data for the kubelet
flags (``--node-labels``, ``--register-with-taints``), register a Node named after the private DNS name with
``spec.providerID = aws:///<zone>/<instance id>``, report allocatable from the instance type (GPUs included,
as the NVIDIA device plugin would) and Ready. When the instance is gone its Node goes NotReady, as the node
lifecycle controller would mark it.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping
from typing import Any

from autoscaler.core.allocatable import node_allocatable
from autoscaler.core.model import LABEL_CLUSTER, Taint
from providers.aws import provider_id
from providers.aws.instance_types import parse_instance_type
from providers.aws.userdata import parse_al2023_flags
from providers.simulated.node import NodeRegistrar, node_manifest

__all__ = ["AwsKubelet"]


def _labels_and_taints(flags: list[str]) -> tuple[dict[str, str], tuple[Taint, ...]]:
    labels: dict[str, str] = {}
    taints: list[Taint] = []
    for flag in flags:
        name, _, value = flag.partition("=")
        if name == "--node-labels":
            labels.update(dict(pair.split("=", 1) for pair in value.split(",") if pair))
        elif name == "--register-with-taints":
            for text in filter(None, value.split(",")):
                head, _, effect = text.rpartition(":")
                key, _, val = head.partition("=")
                taints.append(Taint(key, val, effect))
    return labels, tuple(taints)


class AwsKubelet:
    """Registers a Node for every running instance tagged for ``cluster`` (call :meth:`step` to act)."""

    def __init__(self, ec2: Any, api_client: Any, *, cluster: str, region: str = "us-east-1") -> None:
        self.ec2 = ec2
        self.registrar = NodeRegistrar(api_client)
        self.cluster = cluster
        self.region = region
        self.registered: dict[str, str] = {}  # instance id -> node name
        self.user_data: dict[str, str] = {}
        self._shapes: dict[str, Any] = {}

    def step(self) -> list[str]:
        """One pass over the cloud; returns the names of the Nodes registered in it."""
        joined = []
        for instance in self._instances():
            instance_id = instance["InstanceId"]
            state = instance["State"]["Name"]
            if state == "running" and instance_id not in self.registered:
                name = self._register(instance)
                self.registered[instance_id] = name
                joined.append(name)
            elif state in ("shutting-down", "terminated") and instance_id in self.registered:
                self.registrar.mark_unreachable(self.registered.pop(instance_id), time.time())
        return joined

    def _instances(self) -> list[Mapping[str, Any]]:
        pages = self.ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": f"tag:{LABEL_CLUSTER}", "Values": [self.cluster]}]
        )
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]

    def _shape(self, instance_type: str) -> Any:
        if instance_type not in self._shapes:
            data = self.ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"][0]
            self._shapes[instance_type] = parse_instance_type(data)
        return self._shapes[instance_type]

    def _register(self, instance: Mapping[str, Any]) -> str:
        instance_id = instance["InstanceId"]
        raw = self.ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        user_data = base64.b64decode(raw.get("UserData", {}).get("Value", "") or "").decode()
        self.user_data[instance_id] = user_data
        labels, taints = _labels_and_taints(parse_al2023_flags(user_data))
        zone = instance["Placement"]["AvailabilityZone"]
        spec = self._shape(instance["InstanceType"])
        offering = spec.offering(zone, "on-demand", 0.0, self.region, "")
        name = instance.get("PrivateDnsName") or instance_id
        manifest = node_manifest(
            name=name,
            provider_id=provider_id(zone, instance_id),
            instance_type=spec.instance_type,
            zone=zone,
            region=self.region,
            arch=spec.arch.value,
            labels=labels,
            taints=taints,
            capacity=offering.capacity(),
            allocatable=node_allocatable(offering),
            now=time.time(),
        )
        # The device plugin's GPUs are reported straight away here; node_manifest leaves them out.
        for resource in ("capacity", "allocatable"):
            source = offering.capacity() if resource == "capacity" else node_allocatable(offering)
            for key, milli in source.items():
                if key.endswith("/gpu"):
                    manifest["status"][resource][key] = str(milli // 1000)
        self.registrar.create(manifest)
        return str(name)
