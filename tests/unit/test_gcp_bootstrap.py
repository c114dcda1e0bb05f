"""How a launched VM gets tidal's node labels and taints through kube-env, and GCE labels that GCE accepts."""

import re

from autoscaler.core.model import Taint
from providers.gcp.bootstrap import gce_label, kubelet_labels, rewrite_kube_env, template_node_labels
from tests.fakes.gcp_cloud import kube_env, pool_labels

LABELS = {"cloud.google.com/gke-nodepool": "tidal", "tidal.dev/managed": "true"}
TAINTS = (Taint("dedicated", "gpu", "NoSchedule"), Taint("tidal.dev/new", "", "NoExecute"))


def entries(text: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


def test_gce_labels_are_lowercase_letters_digits_dashes_and_underscores_of_at_most_63() -> None:
    assert gce_label("tidal.dev/Team") == "tidal_dev_team"
    assert gce_label("x" * 80) == "x" * 63
    assert gce_label("9lives", key=True) == "k9lives"
    assert re.fullmatch(r"[a-z0-9_-]+", gce_label("0b1f8a3c-1111-4222-8333-444455556666"))


def test_every_label_and_taint_carrier_in_kube_env_is_rewritten() -> None:
    template = kube_env("prod", pool_labels("tidal"), taints="old=yes:NoSchedule")

    out = entries(rewrite_kube_env(template, LABELS, TAINTS, "us-central1-b"))

    want_labels = "cloud.google.com/gke-nodepool=tidal,tidal.dev/managed=true"
    want_taints = "dedicated=gpu:NoSchedule,tidal.dev/new:NoExecute"
    assert out["NODE_LABELS"] == want_labels
    assert out["NODE_TAINTS"] == want_taints
    assert f"--node-labels={want_labels}" in out["KUBELET_ARGS"].split()
    assert f"--register-with-taints={want_taints}" in out["KUBELET_ARGS"].split()
    assert "old=yes" not in out["KUBELET_ARGS"]
    assert f"node_labels={want_labels};node_taints={want_taints};" in out["AUTOSCALER_ENV_VARS"]
    assert out["ZONE"] == "us-central1-b"


def test_everything_else_in_kube_env_is_left_byte_for_byte() -> None:
    template = kube_env("prod", pool_labels("tidal"))
    rewritten = rewrite_kube_env(template, LABELS, (), "us-central1-a")
    keep = (
        "CA_CERT",
        "KUBERNETES_MASTER_NAME",
        "SERVER_BINARY_TAR_URL",
        "SERVER_BINARY_TAR_HASH",
        "ALLOCATE_NODE_CIDRS",
    )
    assert {k: entries(rewritten)[k] for k in keep} == {k: entries(template)[k] for k in keep}
    assert "--max-pods=110" in entries(rewritten)["KUBELET_ARGS"]


def test_no_taints_removes_the_register_with_taints_flag() -> None:
    template = kube_env("prod", pool_labels("tidal"), taints="old=yes:NoSchedule")
    assert "--register-with-taints" not in rewrite_kube_env(template, LABELS, (), "us-central1-a")


def test_quoted_kube_env_values_keep_their_quotes() -> None:
    rewritten = rewrite_kube_env("NODE_LABELS: 'a=b'\nOTHER: x", {"c": "d"}, (), "z")
    assert rewritten.splitlines() == ["NODE_LABELS: 'c=d'", "OTHER: x"]


def test_a_kube_env_without_label_lines_gets_them() -> None:
    assert rewrite_kube_env("CA_CERT: x", {"a": "1"}, TAINTS[:1], "z").splitlines()[1:] == [
        "NODE_LABELS: a=1",
        "NODE_TAINTS: dedicated=gpu:NoSchedule",
    ]


def test_the_templates_node_labels_come_from_kube_labels_then_kube_env() -> None:
    env = kube_env("prod", {"from": "kube-env"})
    assert template_node_labels(env, "from=kube-labels") == {"from": "kube-labels"}
    assert template_node_labels(env, None) == {"from": "kube-env"}
    assert template_node_labels("KUBELET_ARGS: --v=2 --node-labels=a=1,b=2", None) == {"a": "1", "b": "2"}


def test_a_kubelet_may_not_set_labels_in_the_kubernetes_io_domains() -> None:
    labels = {
        "node.kubernetes.io/instance-type": "n1-standard-8",
        "topology.kubernetes.io/zone": "us-central1-a",
        "kubernetes.io/arch": "amd64",
        "k8s.io/x": "y",
        "cloud.google.com/gke-spot": "true",
        "tidal.dev/gpu-model": "T4",
    }
    assert kubelet_labels(labels) == {"cloud.google.com/gke-spot": "true", "tidal.dev/gpu-model": "T4"}
