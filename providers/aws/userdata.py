"""User data that joins a new instance to the EKS cluster with tidal's node labels and taints.

AL2023 reads a nodeadm ``NodeConfig`` from a MIME part (kubelet flags ``--node-labels`` and
``--register-with-taints``); Bottlerocket reads TOML settings. Labels the kubelet may not set on itself
(``kubernetes.io``/``k8s.io`` prefixes outside the allowed ones, which the NodeRestriction admission plugin
refuses and which make the kubelet exit) are left out; tidal labels the Node once it has registered.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import yaml

from autoscaler.core.model import LABEL_LAUNCH_TOKEN, Taint

__all__ = [
    "ClusterInfo",
    "al2023_user_data",
    "bottlerocket_user_data",
    "kubelet_labels",
    "parse_al2023_flags",
]

BOUNDARY = "//tidal//"
NODECONFIG_TYPE = "application/node.eks.aws"
_KUBELET_ALLOWED = (
    "kubernetes.io/hostname",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
)
_KUBELET_ALLOWED_SUFFIXES = ("kubelet.kubernetes.io", "node.kubernetes.io")


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """What a node needs to find and trust the API server."""

    name: str
    endpoint: str
    certificate_authority: str  # base64 PEM, as EKS DescribeCluster returns it
    service_cidr: str

    @property
    def dns_ip(self) -> str:
        """The cluster DNS address EKS uses: the tenth address of the service range."""
        return str(ipaddress.ip_network(self.service_cidr, strict=False)[10])


def _kubelet_may_set(key: str) -> bool:
    prefix, slash, _ = key.rpartition("/")
    if not slash:
        return True
    restricted = prefix in ("kubernetes.io", "k8s.io") or prefix.endswith((".kubernetes.io", ".k8s.io"))
    return not restricted or key in _KUBELET_ALLOWED or prefix.endswith(_KUBELET_ALLOWED_SUFFIXES)


def kubelet_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels the kubelet registers the Node with.

    The launch token is unique per launch; leaving it out lets every launch of the same kind share one launch
    template (the instance carries the token as a tag, and tidal matches Nodes by providerID).
    """
    return {k: v for k, v in sorted(labels.items()) if k != LABEL_LAUNCH_TOKEN and _kubelet_may_set(k)}


def _taint_flag(taints: Iterable[Taint]) -> str:
    return ",".join(str(t) for t in taints)


def al2023_user_data(
    cluster: ClusterInfo, labels: Mapping[str, str], taints: Iterable[Taint], extra: str | None = None
) -> str:
    """A MIME multi-part document: nodeadm's NodeConfig, then the user's own part (a shell script) if any."""
    flags = []
    node_labels = kubelet_labels(labels)
    if node_labels:
        flags.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in node_labels.items()))
    taint_list = list(taints)
    if taint_list:
        flags.append("--register-with-taints=" + _taint_flag(taint_list))
    node_config = {
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {
            "cluster": {
                "name": cluster.name,
                "apiServerEndpoint": cluster.endpoint,
                "certificateAuthority": cluster.certificate_authority,
                "cidr": cluster.service_cidr,
            },
            "kubelet": {"flags": flags},
        },
    }
    parts = [(NODECONFIG_TYPE, "---\n" + yaml.safe_dump(node_config, sort_keys=False))]
    if extra:
        kind = "text/x-shellscript" if extra.startswith("#!") else "text/cloud-config"
        parts.append((f'{kind}; charset="us-ascii"', extra))
    lines = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"', ""]
    for content_type, body in parts:
        lines += [f"--{BOUNDARY}", f"Content-Type: {content_type}", "", body.rstrip("\n"), ""]
    lines.append(f"--{BOUNDARY}--")
    return "\n".join(lines) + "\n"


def parse_al2023_flags(user_data: str) -> list[str]:
    """The kubelet flags of the NodeConfig part in an AL2023 user data document (what nodeadm would apply)."""
    flags: list[str] = []
    for chunk in user_data.split(f"--{BOUNDARY}"):
        head, _, body = chunk.partition("\n\n")
        if NODECONFIG_TYPE in head:
            doc = yaml.safe_load(body) or {}
            flags += list(doc.get("spec", {}).get("kubelet", {}).get("flags") or [])
    return flags


def _toml_string(value: str) -> str:
    return json.dumps(value)  # TOML basic strings share JSON's escapes for everything tidal writes


def bottlerocket_user_data(
    cluster: ClusterInfo, labels: Mapping[str, str], taints: Iterable[Taint], extra: str | None = None
) -> str:
    """Bottlerocket TOML settings: cluster, labels and taints, then the user's own settings if any."""
    lines = [
        "[settings.kubernetes]",
        f"cluster-name = {_toml_string(cluster.name)}",
        f"api-server = {_toml_string(cluster.endpoint)}",
        f"cluster-certificate = {_toml_string(cluster.certificate_authority)}",
        f"cluster-dns-ip = {_toml_string(cluster.dns_ip)}",
        "",
        "[settings.kubernetes.node-labels]",
        *(f"{_toml_string(k)} = {_toml_string(v)}" for k, v in kubelet_labels(labels).items()),
    ]
    grouped: dict[str, list[str]] = {}
    for t in taints:
        grouped.setdefault(t.key, []).append(f"{t.value}:{t.effect}")
    if grouped:
        lines += ["", "[settings.kubernetes.node-taints]"]
        lines += [f"{_toml_string(k)} = [{', '.join(map(_toml_string, v))}]" for k, v in grouped.items()]
    if extra:
        lines += ["", extra.rstrip("\n")]
    return "\n".join(lines) + "\n"
