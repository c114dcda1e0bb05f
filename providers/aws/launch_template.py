"""Launch templates: the one named in config, or ones tidal writes from ``aws.managedLaunchTemplate``.

A managed template is named after a digest of its content (AMI, instance profile, security groups, disks,
user data, tags), so the same settings always map to the same template and a change of settings (a new AMI, a
new node label) simply makes a new one. GPU and Arm offerings need their own EKS-optimized AMI, so one launch may
use several templates, one per AMI variant.

A managed template tags what a launch creates besides the instance: its volumes and network interfaces, and
for spot its spot instance request (CreateFleet itself can only tag the fleet, the instance and its volumes).
EC2 refuses a launch whose template tags a spot request when no spot request is made, so spot and on-demand
launches use templates of their own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import botocore.exceptions
import structlog

from autoscaler.cloud import ProviderError
from autoscaler.core.model import LABEL_CLUSTER, LABEL_MANAGED, SPOT, Arch, Taint
from autoscaler.core.offering import Offering
from providers.aws.clients import ClientFactory
from providers.aws.errors import ApiGuard, error_code, provider_error
from providers.aws.settings import BOTTLEROCKET, AwsSettings, BlockDevice, ManagedTemplate
from providers.aws.userdata import ClusterInfo, al2023_user_data, bottlerocket_user_data

__all__ = [
    "LAUNCH_TAGGED_RESOURCES",
    "LaunchTemplates",
    "TemplateRef",
    "default_ami_parameter",
    "static_tags",
]

log = structlog.get_logger("tidal.providers.aws")

_FAILURES = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError, ProviderError)
RETRY_AFTER_FAILURE = 60.0
# What a managed template tags at launch (besides what CreateFleet tags), by capacity type.
LAUNCH_TAGGED_RESOURCES = {
    "on-demand": ("instance", "volume", "network-interface"),
    SPOT: ("instance", "volume", "network-interface", "spot-instances-request"),
}


def static_tags(cluster_name: str, eks_cluster_name: str, node_tags: Mapping[str, str]) -> dict[str, str]:
    """The tags every node of this cluster carries, whatever the launch (no launch token)."""
    tags = {
        **node_tags,
        LABEL_CLUSTER: cluster_name,
        LABEL_MANAGED: "true",
        f"kubernetes.io/cluster/{eks_cluster_name}": "owned",
    }
    tags.setdefault("Name", f"tidal-{cluster_name}")
    return tags


@dataclass(frozen=True, slots=True)
class TemplateRef:
    """How CreateFleet names a launch template."""

    name: str | None = None
    id: str | None = None
    version: str = "$Default"

    def specification(self) -> dict[str, str]:
        """The ``LaunchTemplateSpecification`` of a CreateFleet launch template config."""
        spec = {"LaunchTemplateName": self.name} if self.name else {"LaunchTemplateId": str(self.id)}
        return {**spec, "Version": self.version}


def default_ami_parameter(family: str, kubernetes_version: str, arch: Arch, nvidia: bool) -> str:
    """The public SSM parameter holding the current EKS-optimized AMI for this variant."""
    cpu = "arm64" if arch == Arch.ARM64 else "x86_64"
    if family == BOTTLEROCKET:
        return f"/aws/service/bottlerocket/aws-k8s-{kubernetes_version}{'-nvidia' if nvidia else ''}/{cpu}/latest/image_id"
    flavour = "nvidia" if nvidia else "standard"
    return f"/aws/service/eks/optimized-ami/{kubernetes_version}/amazon-linux-2023/{cpu}/{flavour}/recommended/image_id"


def _variant(o: Offering) -> tuple[Arch, bool]:
    return o.arch, o.gpu_count > 0 and o.gpu_vendor.upper() in ("NVIDIA", "")


def _block_devices(template: ManagedTemplate) -> list[dict[str, Any]]:
    devices = template.block_devices or (
        (BlockDevice("/dev/xvda", 4), BlockDevice("/dev/xvdb", 100))
        if template.ami_family == BOTTLEROCKET
        else (BlockDevice("/dev/xvda", 100),)
    )
    out = []
    for d in devices:
        ebs: dict[str, Any] = {
            "VolumeSize": d.volume_size_gib,
            "VolumeType": d.volume_type,
            "Encrypted": d.encrypted,
            "DeleteOnTermination": True,
        }
        if d.iops is not None:
            ebs["Iops"] = d.iops
        if d.throughput is not None:
            ebs["Throughput"] = d.throughput
        if d.kms_key_id:
            ebs["KmsKeyId"] = d.kms_key_id
        out.append({"DeviceName": d.device_name, "Ebs": ebs})
    return out


def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]


class LaunchTemplates:
    """Chooses (and for managed templates, creates) the launch templates of a launch; thread-safe."""

    def __init__(
        self,
        settings: AwsSettings,
        cluster_name: str,
        clients: ClientFactory,
        guard: ApiGuard,
        *,
        node_tags: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """The AMI (from SSM) and the cluster's details (from EKS) are read again every
        ``aws.priceRefreshInterval``, so a new recommended AMI is used without a restart."""
        self.settings = settings
        self.cluster_name = cluster_name
        self.clients = clients
        self.guard = guard
        self.clock = clock
        self.refresh_interval = settings.price_refresh_interval
        self.tags = static_tags(cluster_name, settings.eks_cluster_name, node_tags or {})
        self._lock = threading.Lock()
        self._amis: dict[str, tuple[str, float]] = {}  # SSM parameter -> (AMI id, when to read it again)
        self._described: tuple[dict[str, Any], float] | None = None  # DescribeCluster, when to read again
        self._created: set[str] = set()

    def for_launch(
        self,
        capacity_type: str,
        offerings: Sequence[Offering],
        labels: Mapping[str, str],
        taints: Sequence[Taint],
    ) -> list[tuple[TemplateRef, list[Offering]]]:
        """The templates to launch ``offerings`` (all of ``capacity_type``) with, each with the offerings it
        serves (order kept)."""
        named = self.settings.launch_template
        if named is not None:
            return [(TemplateRef(named.name, named.id, named.version), list(offerings))]
        groups: dict[tuple[Arch, bool], list[Offering]] = {}
        for o in offerings:
            groups.setdefault(_variant(o), []).append(o)
        with self._lock:
            return [
                (self._managed(capacity_type, arch, nvidia, labels, taints), group)
                for (arch, nvidia), group in groups.items()
            ]

    # -- managed templates -----------------------------------------------------------------------------

    def _managed(
        self,
        capacity_type: str,
        arch: Arch,
        nvidia: bool,
        labels: Mapping[str, str],
        taints: Sequence[Taint],
    ) -> TemplateRef:
        template = self.settings.managed_launch_template
        assert template is not None
        cluster = self._cluster_info(template)
        make = bottlerocket_user_data if template.ami_family == BOTTLEROCKET else al2023_user_data
        user_data = make(cluster, labels, taints, template.user_data)
        profile = template.instance_profile
        data: dict[str, Any] = {
            "ImageId": self._ami(template, arch, nvidia),
            "IamInstanceProfile": {"Arn": profile} if profile.startswith("arn:") else {"Name": profile},
            "SecurityGroupIds": list(self.settings.security_group_ids),
            "BlockDeviceMappings": _block_devices(template),
            "UserData": base64.b64encode(user_data.encode()).decode(),
            # IMDSv2 only, and one hop: pods use IRSA or Pod Identity, not the node's role.
            "MetadataOptions": {
                "HttpTokens": "required",
                "HttpPutResponseHopLimit": 1,
                "HttpEndpoint": "enabled",
            },
            "TagSpecifications": [
                {"ResourceType": resource, "Tags": _tag_list(self.tags)}
                for resource in LAUNCH_TAGGED_RESOURCES[SPOT if capacity_type == SPOT else "on-demand"]
            ],
        }
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
        name = f"tidal-{self.cluster_name}-{digest}"
        if name not in self._created:
            self._create(name, data)
            self._created.add(name)
        return TemplateRef(name=name, version="$Latest")

    def _create(self, name: str, data: Mapping[str, Any]) -> None:
        ec2 = self.clients.client("ec2")
        tags = [{"Key": LABEL_CLUSTER, "Value": self.cluster_name}, {"Key": LABEL_MANAGED, "Value": "true"}]
        try:
            with self.guard.call("CreateLaunchTemplate"):
                ec2.create_launch_template(
                    LaunchTemplateName=name,
                    LaunchTemplateData=dict(data),
                    TagSpecifications=[{"ResourceType": "launch-template", "Tags": tags}],
                )
        except botocore.exceptions.ClientError as err:
            if error_code(err) == "InvalidLaunchTemplateName.AlreadyExistsException":
                return  # another replica, or an earlier run, wrote the same content under the same name
            raise provider_error("ec2:CreateLaunchTemplate", err) from None
        except botocore.exceptions.BotoCoreError as err:
            raise provider_error("ec2:CreateLaunchTemplate", err) from None
        log.info("aws_launch_template_created", name=name)

    def _ami(self, template: ManagedTemplate, arch: Arch, nvidia: bool) -> str:
        if template.ami_id:
            return template.ami_id
        parameter = template.ami_ssm_parameter or default_ami_parameter(
            template.ami_family, self._kubernetes_version(template), arch, nvidia
        )
        now = self.clock()
        cached = self._amis.get(parameter)
        if cached is not None and now < cached[1]:
            return cached[0]
        ssm = self.clients.client("ssm")
        try:
            with self.guard.call("GetParameter"):
                ami = str(ssm.get_parameter(Name=parameter)["Parameter"]["Value"])
        except _FAILURES as err:
            if cached is None:
                raise _as_provider_error(f"ssm:GetParameter {parameter}", err) from None
            log.warning("aws_ami_refresh_failed", parameter=parameter, error=str(err), kept=cached[0])
            self._amis[parameter] = (cached[0], now + min(self.refresh_interval, RETRY_AFTER_FAILURE))
            return cached[0]
        if cached is not None and cached[0] != ami:
            log.info("aws_ami_updated", parameter=parameter, previous=cached[0], ami=ami)
        self._amis[parameter] = (ami, now + self.refresh_interval)
        return ami

    def _kubernetes_version(self, template: ManagedTemplate) -> str:
        if template.kubernetes_version:
            return template.kubernetes_version
        return str(self._describe_cluster().get("version") or "")

    def _cluster_info(self, template: ManagedTemplate) -> ClusterInfo:
        endpoint = template.cluster_endpoint
        authority = template.cluster_certificate_authority
        cidr = template.cluster_service_cidr
        if not (endpoint and authority and cidr):
            found = self._describe_cluster()
            endpoint = endpoint or found.get("endpoint")
            authority = authority or found.get("certificateAuthority", {}).get("data")
            cidr = cidr or found.get("kubernetesNetworkConfig", {}).get("serviceIpv4Cidr")
        if not (endpoint and authority and cidr):
            raise ProviderError(
                f"EKS cluster {self.settings.eks_cluster_name!r} has no endpoint, certificate or service CIDR yet; "
                "set aws.managedLaunchTemplate.clusterEndpoint, clusterCertificateAuthority and clusterServiceCidr"
            )
        return ClusterInfo(self.settings.eks_cluster_name, endpoint, authority, cidr)

    def _describe_cluster(self) -> Mapping[str, Any]:
        """The cluster as EKS describes it, read again every refresh interval (the last answer is kept while
        EKS cannot be asked)."""
        now = self.clock()
        cached = self._described
        if cached is not None and now < cached[1]:
            return cached[0]
        name = self.settings.eks_cluster_name
        eks = self.clients.client("eks")
        try:
            with self.guard.call("DescribeCluster"):
                cluster = dict(eks.describe_cluster(name=name)["cluster"])
        except _FAILURES as err:
            if cached is None:
                raise _as_provider_error(f"eks:DescribeCluster {name}", err) from None
            log.warning("aws_cluster_refresh_failed", cluster=name, error=str(err))
            self._described = (cached[0], now + min(self.refresh_interval, RETRY_AFTER_FAILURE))
            return cached[0]
        if cached is not None and cached[0].get("version") != cluster.get("version"):
            log.info("aws_cluster_version_changed", cluster=name, version=cluster.get("version"))
        self._described = (cluster, now + self.refresh_interval)
        return cluster


def _as_provider_error(action: str, err: BaseException) -> ProviderError:
    return err if isinstance(err, ProviderError) else provider_error(action, err)
