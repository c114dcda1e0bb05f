"""A pod's optional sections: each is read when present, each absent one is its empty value, and a malformed
one is still an error naming it (the decoder skips only what is not there)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from autoscaler.core.model import Pod
from autoscaler.runtime.kube.convert import ConversionError, pod_from_dict
from tests.builders import pod

if TYPE_CHECKING:
    from typing import Any


def every_section() -> dict[str, Any]:
    obj = pod(
        "train-0",
        labels={"app": "train"},
        node_selector={"tidal.dev/gpu-model": "L40S"},
        affinity_terms=[[{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}]],
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        gates=["example.com/quota"],
        volumes=[{"name": "scratch", "emptyDir": {}}],
        pod_affinity=[
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
        ],
        pod_anti_affinity=[
            {"labelSelector": {"matchLabels": {"app": "train"}}, "topologyKey": "kubernetes.io/hostname"}
        ],
        spread=[
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "train"}},
            }
        ],
        host_ports=[9100],
    )
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "train-gpu"}]
    return obj


def test_every_optional_section_present_is_read() -> None:
    read = pod_from_dict(every_section())
    assert dict(read.node_selector) == {"tidal.dev/gpu-model": "L40S"}
    assert [r.key for term in read.affinity for r in term.expressions] == ["topology.kubernetes.io/zone"]
    assert any(t.key == "nvidia.com/gpu" for t in read.tolerations)
    assert read.scheduling_gates == ("example.com/quota",)
    assert read.local_storage
    assert [t.topology_key for t in read.pod_affinity] == ["kubernetes.io/hostname"]
    assert [t.topology_key for t in read.pod_anti_affinity] == ["kubernetes.io/hostname"]
    assert [c.topology_key for c in read.spread] == ["topology.kubernetes.io/zone"]
    assert [p.port for p in read.host_ports] == [9100]
    assert [(c.name, c.claim_name) for c in read.claims] == [("gpu", "train-gpu")]


def test_every_optional_section_absent_is_its_empty_value() -> None:
    obj = pod("web-0", message=None)
    for section in (
        "nodeSelector",
        "affinity",
        "tolerations",
        "schedulingGates",
        "volumes",
        "resourceClaims",
    ):
        obj["spec"].pop(section, None)
    read = pod_from_dict(obj)
    bare = Pod(read.namespace, read.name)
    for name in (
        "node_selector",
        "affinity",
        "tolerations",
        "scheduling_gates",
        "local_storage",
        "pod_affinity",
        "pod_anti_affinity",
        "spread",
        "host_ports",
        "claims",
    ):
        assert getattr(read, name) == getattr(bare, name), name


@pytest.mark.parametrize(
    ("section", "value", "named"),
    [
        ("nodeSelector", ["gpu"], "spec.nodeSelector"),
        ("tolerations", {"key": "a"}, "spec.tolerations"),
        ("schedulingGates", "quota", "spec.schedulingGates"),
        ("volumes", "scratch", "spec.volumes"),
        (
            "topologySpreadConstraints",
            [{"topologyKey": "zone"}],
            r"spec.topologySpreadConstraints\[0\].maxSkew",
        ),
        ("resourceClaims", [{"name": "gpu"}], r"spec.resourceClaims\[0\]"),
    ],
)
def test_a_malformed_optional_section_is_an_error_naming_it(section: str, value: Any, named: str) -> None:
    obj = pod("web-0")
    obj["spec"][section] = value
    with pytest.raises(ConversionError, match=rf"Pod default/web-0: {named}"):
        pod_from_dict(obj)


def test_a_container_whose_ports_are_not_a_list_is_an_error_naming_them() -> None:
    obj = pod("web-0")
    obj["spec"]["containers"][0]["ports"] = "8080"
    with pytest.raises(ConversionError, match=r"spec.containers\[0\].ports: expected a list"):
        pod_from_dict(obj)
