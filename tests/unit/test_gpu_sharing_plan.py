"""KAI GPU sharing in plans: a pod asking for part of a GPU gets part of a GPU, planned as KAI's binpack
places shares (shares of one device add up to at most a whole one; compute modes never mix)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import pytest

from autoscaler.core.demand import Reason
from autoscaler.core.placement.reasons import Filter
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.runtime.controller import Controller
from providers.simulated import SimulatedProvider
from tests.builders import aws_offerings, node, offering, pod, snapshot
from tests.fakes.reconcile import CallRecorder, Clock, StaticCluster

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.offering import Offering
    from autoscaler.core.planning.planner import Plan

NOW = 1_795_168_800.0
KAI_NO_GPU = "No node in the default node-pool has GPU resources"


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def share(
    name: str,
    fraction: str = "0.25",
    *,
    node_name: str | None = None,
    group: str = "",
    mode: str = "",
    **kw: Any,
) -> dict[str, Any]:
    """A pod asking KAI for part of a GPU. It requests no nvidia.com/gpu, so no admission plugin gives it the
    GPU taint's toleration: its template carries one, as it must to run on tainted GPU nodes."""
    annotations = {"gpu-fraction": fraction}
    if mode:
        annotations["kai.scheduler/gpu-compute-sharing-mode"] = mode
    labels = {"app": name.rsplit("-", 1)[0], **({"runai-gpu-group": group} if group else {})}
    return pod(
        name,
        cpu="500m",
        memory="2Gi",
        scheduler="kai-scheduler",
        message=None if node_name else KAI_NO_GPU,
        node_name=node_name,
        phase="Running" if node_name else "Pending",
        annotations=annotations,
        labels=labels,
        tolerations=[GPU_TOLERATION],
        **kw,
    )


def reservation(node_name: str, group: str) -> dict[str, Any]:
    """KAI's reservation pod, holding the GPU that the pods of ``group`` share."""
    obj = pod(
        f"gpu-reservation-{group}",
        namespace="kai-resource-reservation",
        cpu=None,
        memory=None,
        gpu=1,
        node_name=node_name,
        phase="Running",
        message=None,
        labels={"app": "kai-resource-reservation", "runai-gpu-group": group},
        annotations={"karpenter.sh/do-not-disrupt": "true"},
        owner_kind=None,
    )
    return obj


def gpu_node(name: str, gpus: int = 1) -> dict[str, Any]:
    return node(
        name,
        instance_type="g4dn.xlarge",
        cpu="4",
        memory="16Gi",
        gpu=gpus,
        labels={"nvidia.com/gpu.memory": "15360"},
    )


def run(
    make_config: Callable[..., Config],
    *objs: dict[str, Any],
    offerings: list[Offering] | None = None,
    **cfg: Any,
) -> Plan:
    return plan(PlanInput(snapshot(*objs), offerings or aws_offerings(), make_config(**cfg), NOW))


def test_eight_quarter_gpu_pods_get_two_gpus_not_eight(make_config: Callable[..., Config]) -> None:
    result = run(make_config, *[share(f"infer-{i}") for i in range(8)])
    assert sum(la.offering.gpu_count for la in result.launch.launches) == 2
    assert sum(len(la.pods) for la in result.launch.launches) == 8
    assert result.launch.unplaced == ()


def test_a_half_gpu_pod_takes_the_free_half_of_a_shared_gpu_instead_of_a_new_node(
    make_config: Callable[..., Config],
) -> None:
    objs = [
        gpu_node("gpu-a"),
        reservation("gpu-a", "g1"),
        share("train-0", "0.5", node_name="gpu-a", group="g1"),
    ]
    result = run(make_config, *objs, share("train-1", "0.5"))
    assert result.launch.launches == ()
    assert [(a.pod, a.node) for a in result.launch.absorbed] == [("default/train-1", "gpu-a")]


def test_a_share_that_does_not_fit_the_rest_of_a_shared_gpu_gets_a_new_node(
    make_config: Callable[..., Config],
) -> None:
    objs = [
        gpu_node("gpu-a"),
        reservation("gpu-a", "g1"),
        share("train-0", "0.75", node_name="gpu-a", group="g1"),
    ]
    result = run(make_config, *objs, share("train-1", "0.5"))
    assert result.launch.absorbed == ()
    assert len(result.launch.launches) == 1


def test_pods_of_different_compute_modes_never_share_a_gpu(make_config: Callable[..., Config]) -> None:
    objs = [
        gpu_node("gpu-a"),
        reservation("gpu-a", "g1"),
        share("sim-0", "0.25", node_name="gpu-a", group="g1", mode="sm-sharing"),
    ]
    result = run(make_config, *objs, share("train-1", "0.25"))
    assert result.launch.absorbed == ()
    assert len(result.launch.launches) == 1


def test_a_shared_gpu_is_no_longer_a_whole_gpu_for_a_whole_gpu_pod(
    make_config: Callable[..., Config],
) -> None:
    objs = [
        gpu_node("gpu-a"),
        reservation("gpu-a", "g1"),
        share("train-0", "0.25", node_name="gpu-a", group="g1"),
    ]
    whole = pod("big-0", cpu="1", memory="2Gi", gpu=1, scheduler="kai-scheduler", message=KAI_NO_GPU)
    result = run(make_config, *objs, whole)
    assert result.launch.absorbed == ()


def test_a_share_on_two_devices_needs_two_gpus_with_room(make_config: Callable[..., Config]) -> None:
    two = share("dist-0", "0.5")
    two["metadata"]["annotations"]["gpu-fraction-num-devices"] = "2"
    result = run(make_config, two)
    [launch] = result.launch.launches
    assert launch.offering.gpu_count >= 2


def test_a_memory_share_gets_a_gpu_with_that_much_memory(make_config: Callable[..., Config]) -> None:
    big = share("llm-0")
    big["metadata"]["annotations"] = {"gpu-memory": "20000"}
    [launch] = run(make_config, big).launch.launches
    assert launch.offering.gpu_memory_mib >= 20000  # a T4's 16 GiB would not hold it


def test_a_small_share_goes_to_a_partial_gpu_size_that_covers_it(make_config: Callable[..., Config]) -> None:
    partial = offering("g6f.large", 2, 8, 0.2, gpus=1, gpu_model="L4", gpu_memory_gib=3, fraction=0.125)
    result = run(make_config, share("tiny-0", "0.1"), offerings=[*aws_offerings(), partial])
    assert [la.offering.instance_type for la in result.launch.launches] == ["g6f.large"]


def test_a_share_larger_than_a_partial_gpu_size_is_not_put_there(make_config: Callable[..., Config]) -> None:
    partial = offering("g6f.large", 2, 8, 0.2, gpus=1, gpu_model="L4", gpu_memory_gib=3, fraction=0.125)
    result = run(make_config, share("half-0", "0.5"), offerings=[*aws_offerings(), partial])
    assert [la.offering.instance_type for la in result.launch.launches] == ["g4dn.xlarge"]


def test_background_pods_never_cause_a_launch(make_config: Callable[..., Config]) -> None:
    background = share("filler-0")
    background["metadata"]["labels"]["kai.scheduler/background"] = "true"
    result = run(make_config, background)
    assert result.launch.launches == ()
    assert [i.reason for i in result.demand.ignored] == [Reason.BACKGROUND]


def test_a_scale_adjuster_pod_is_not_counted_beside_the_pod_it_stands_for(
    make_config: Callable[..., Config],
) -> None:
    proxy = pod(
        "scaling-pod-abc",
        namespace="kai-scale-adjust",
        gpu=1,
        message="0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
        labels={
            "app": "scaling-pod",
            "shared-gpu-pod-name": "infer-0",
            "shared-gpu-pod-namespace": "default",
        },
    )
    result = run(make_config, proxy, share("infer-0"))
    assert sum(la.offering.gpu_count for la in result.launch.launches) == 1
    assert [(i.pod, i.reason) for i in result.demand.ignored] == [
        ("kai-scale-adjust/scaling-pod-abc", Reason.SCALE_ADJUSTER)
    ]


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({"gpu-fraction": "1.5"}, "annotation gpu-fraction: '1.5' is not above 0 and below 1"),
        ({"gpu-fraction": "abc"}, "annotation gpu-fraction: 'abc' is not a decimal number"),
        ({"gpu-memory": "-100"}, "annotation gpu-memory: '-100' is not a whole number of MiB above 0"),
    ],
    ids=["fraction-above-one", "fraction-not-a-number", "negative-memory"],
)
def test_a_bad_share_annotation_is_one_reason_and_never_a_launch(
    make_config: Callable[..., Config], annotations: dict[str, str], message: str
) -> None:
    bad = pod("bad-0", scheduler="kai-scheduler", message=KAI_NO_GPU, annotations=annotations)
    result = run(make_config, bad)
    assert result.launch.launches == ()
    [ignored] = result.demand.ignored
    assert ignored.reason == Reason.BAD_ANNOTATION
    assert ignored.detail.startswith(message)


def test_the_daemon_tells_the_pod_with_a_bad_share_annotation_why_it_gets_no_node(
    tmp_path: Path, make_config: Callable[..., Config]
) -> None:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(
        "cloud,region,instance_type,vcpu,memory_mib,gpu_count,gpu_vendor,gpu_model,gpu_memory_mib,arch,"
        "on_demand_usd_per_hour\naws,us-east-1,g4dn.xlarge,4,16384,1,NVIDIA,T4,16384,x86_64,0.526\n"
    )
    cfg = make_config(simulated={"catalog": str(catalog)})
    clock = Clock(NOW)
    events = CallRecorder()
    bad = pod("bad-0", scheduler="kai-scheduler", message=KAI_NO_GPU, annotations={"gpu-fraction": "1.5"})
    controller = Controller(
        config=lambda: cfg,
        cluster=StaticCluster(snapshot(bad)),
        provider=SimulatedProvider(cfg, clock=clock),
        actions=CallRecorder(),
        events=events,
        clock=clock,
    )
    result = controller.reconcile_once()
    assert result.error == "" and result.launched == []
    said = Counter(args[1] for args in events.named("pod"))
    assert said == {"NotTriggerScaleUp": 1}
    assert "gpu-fraction: '1.5'" in events.named("pod")[0][2]


def test_a_whole_gpu_pod_and_a_share_pod_share_nothing_on_a_new_node_they_do_not_both_fit(
    make_config: Callable[..., Config],
) -> None:
    result = run(
        make_config, pod("big-0", cpu="1", memory="2Gi", gpu=1, message=KAI_NO_GPU), share("infer-0", "0.5")
    )
    per_launch = [(la.offering.gpu_count, len(la.pods)) for la in result.launch.launches]
    assert sum(g for g, _ in per_launch) == 2


def test_the_filter_that_removes_every_gpu_for_a_share_is_named(make_config: Callable[..., Config]) -> None:
    huge = share("llm-0")
    huge["metadata"]["annotations"] = {"gpu-memory": "900000"}
    [unplaced] = run(make_config, huge).launch.unplaced
    assert unplaced.rejection is not None and unplaced.rejection.filter == Filter.OFFERING
    assert unplaced.reason == "no offering's GPU holds this GPU share"


def test_a_memory_share_is_held_to_the_gpu_memory_kai_counts_in_whole_hundreds_of_mib(
    make_config: Callable[..., Config],
) -> None:
    # The label says 15,360 MiB; KAI counts 15,300, so a 15,330 MiB share does not fit this T4.
    pending = share("embed-0")
    pending["metadata"]["annotations"] = {"gpu-memory": "15330"}
    result = run(make_config, gpu_node("gpu-a"), pending)
    assert result.launch.absorbed == ()
