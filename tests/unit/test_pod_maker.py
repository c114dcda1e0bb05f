"""The decoder makes its pods with make_pod: the same Pod, field for field, as ``Pod(...)`` of the same values."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from autoscaler.core.model import Pod
from autoscaler.core.pod_maker import make_pod
from autoscaler.runtime.kube.convert import pod_from_dict
from tests.builders import pod

SPREAD = {
    "maxSkew": 1,
    "topologyKey": "topology.kubernetes.io/zone",
    "whenUnsatisfiable": "DoNotSchedule",
    "labelSelector": {"matchLabels": {"app": "train"}},
}
ZONE_TERM = [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}]
PODS = {
    "pending": pod("web-1"),
    "gpu, constrained": pod(
        "train-0",
        namespace="ml",
        gpu=2,
        labels={"app": "train"},
        annotations={"kai.scheduler/queue": "research"},
        node_selector={"karpenter.sh/capacity-type": "spot"},
        affinity_terms=[ZONE_TERM],
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        spread=[SPREAD],
        host_ports=[8443],
        gates=["example.com/quota"],
        priority=1000,
        volumes=[{"name": "scratch", "emptyDir": {}}],
    ),
    "running": pod("web-2", node_name="ip-10-0-1-23.ec2.internal", phase="Running", message=None),
    "bound, pending": pod("web-3", node_name="ip-10-0-1-23.ec2.internal", message=None),
    "daemonset": pod("node-exporter-x", owner_kind="DaemonSet", node_name="n1", phase="Running"),
    "succeeded": pod("job-1", owner_kind="Job", node_name="n1", phase="Succeeded", message=None),
    "failed, no owner": pod("job-2", owner_kind=None, phase="Failed", message=None),
    "shares a GPU": pod("infer-0", annotations={"gpu-fraction": "0.5"}, cpu="1", memory=None),
}


def every_field(p: Pod) -> dict[str, Any]:
    return {f.name: getattr(p, f.name) for f in dataclasses.fields(Pod)}


@pytest.mark.parametrize("obj", list(PODS.values()), ids=list(PODS))
def test_a_decoded_pod_is_the_pod_its_values_make_with_every_derived_field(obj: dict[str, Any]) -> None:
    decoded = pod_from_dict(obj)
    made = Pod(**{f.name: getattr(decoded, f.name) for f in dataclasses.fields(Pod) if f.init})

    assert type(decoded) is Pod
    assert decoded == made
    assert every_field(decoded) == every_field(made)
    assert repr(decoded) == repr(made)


def test_make_pod_sets_every_field_of_pod_a_decoder_reads_and_defaults_the_others() -> None:
    given = set(inspect.signature(make_pod).parameters)
    defaulted = {
        "unreadable",
        "dra_types",
        "dra_error",
    }  # a decoder that reads a pod in full sets none of them
    derived = {f.name for f in dataclasses.fields(Pod) if not f.init}

    assert given | defaulted | derived == {f.name for f in dataclasses.fields(Pod)}
    assert not given & defaulted
    decoded = pod_from_dict(PODS["pending"])
    assert (decoded.unreadable, decoded.dra_types, decoded.dra_error) == (
        Pod("default", "x").unreadable,
        Pod("default", "x").dra_types,
        Pod("default", "x").dra_error,
    )


def test_a_made_pod_stays_frozen() -> None:
    decoded = pod_from_dict(PODS["pending"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        decoded.phase = "Running"  # type: ignore[misc]
