"""User data that joins EKS: nodeadm NodeConfig for AL2023, TOML for Bottlerocket, with tidal's labels/taints."""

from __future__ import annotations

from typing import TYPE_CHECKING

import yaml

from autoscaler.core.model import Taint
from providers.aws.userdata import (
    BOUNDARY,
    ClusterInfo,
    al2023_user_data,
    bottlerocket_user_data,
    parse_al2023_flags,
)

if TYPE_CHECKING:
    from typing import Any

CLUSTER = ClusterInfo("prod", "https://ABC.gr7.us-east-1.eks.amazonaws.com", "Q0VSVA==", "10.100.0.0/16")
LABELS = {
    "tidal.dev/managed": "true",
    "tidal.dev/cluster": "prod",
    "tidal.dev/launch-token": "6f1c9d3e-0000-4000-8000-000000000000",
    "tidal.dev/node-mode": "bin-selection",
    "node.kubernetes.io/lifecycle": "tidal",
    "kubernetes.io/role": "worker",
    "team": "ml",
}
TAINTS = (Taint("nvidia.com/gpu", "true", "NoSchedule"), Taint("dedicated", "", "NoExecute"))


def node_config(user_data: str) -> dict[str, Any]:
    part = next(p for p in user_data.split(f"--{BOUNDARY}") if "application/node.eks.aws" in p)
    config: dict[str, Any] = yaml.safe_load(part.partition("\n\n")[2])
    return config


def test_al2023_user_data_is_a_nodeconfig_that_joins_the_cluster() -> None:
    spec = node_config(al2023_user_data(CLUSTER, LABELS, TAINTS))["spec"]
    assert spec["cluster"] == {
        "name": "prod",
        "apiServerEndpoint": "https://ABC.gr7.us-east-1.eks.amazonaws.com",
        "certificateAuthority": "Q0VSVA==",
        "cidr": "10.100.0.0/16",
    }


def test_the_kubelet_registers_with_tidals_labels_and_taints() -> None:
    flags = parse_al2023_flags(al2023_user_data(CLUSTER, LABELS, TAINTS))
    assert flags == [
        "--node-labels=node.kubernetes.io/lifecycle=tidal,team=ml,tidal.dev/cluster=prod,"
        "tidal.dev/managed=true,tidal.dev/node-mode=bin-selection",
        "--register-with-taints=nvidia.com/gpu=true:NoSchedule,dedicated:NoExecute",
    ]


def test_labels_the_kubelet_may_not_set_and_the_per_launch_token_are_left_out() -> None:
    flags = " ".join(parse_al2023_flags(al2023_user_data(CLUSTER, LABELS, ())))
    assert "kubernetes.io/role" not in flags  # NodeRestriction refuses it and the kubelet would exit
    assert "launch-token" not in flags  # unique per launch; one template serves every launch of a kind
    assert "--register-with-taints" not in flags


def test_the_users_own_script_runs_as_a_second_part() -> None:
    user_data = al2023_user_data(CLUSTER, LABELS, TAINTS, extra="#!/bin/bash\necho hello\n")
    assert user_data.startswith("MIME-Version: 1.0\nContent-Type: multipart/mixed")
    assert 'Content-Type: text/x-shellscript; charset="us-ascii"\n\n#!/bin/bash\necho hello' in user_data
    assert user_data.rstrip().endswith(f"--{BOUNDARY}--")


def test_bottlerocket_settings_carry_cluster_labels_and_taints() -> None:
    toml = bottlerocket_user_data(CLUSTER, LABELS, TAINTS)
    assert 'cluster-name = "prod"' in toml
    assert 'api-server = "https://ABC.gr7.us-east-1.eks.amazonaws.com"' in toml
    assert 'cluster-dns-ip = "10.100.0.10"' in toml
    assert '"team" = "ml"' in toml
    assert '"nvidia.com/gpu" = ["true:NoSchedule"]' in toml
    assert '"dedicated" = [":NoExecute"]' in toml
    assert "launch-token" not in toml
