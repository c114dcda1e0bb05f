"""Which offerings a pod may get: node-affinity operators, architectures, limits, instance annotations, regexps,
and the reason a pod waits when none is left."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from autoscaler.core.fit import node_labels, pod_constraints
from autoscaler.core.model import Arch, Requirement
from autoscaler.core.placement.labels import requirement_matches
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.core.resources import Resources
from autoscaler.runtime.kube.convert import pod_from_dict
from tests.builders import INSUFFICIENT_GPU, aws_offerings, node, offering, pod, podgroup, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.offering import Offering
    from autoscaler.core.planning.planner import Plan

NOW = 1_795_168_800.0  # 2026-11-20T10:00:00Z
GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def gpu_pod(name: str, gpus: int = 1, **kw: Any) -> dict[str, Any]:
    return pod(name, cpu="2", memory="8Gi", gpu=gpus, message=INSUFFICIENT_GPU, **kw)


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    e: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        e["values"] = list(values)
    return e


def run(
    make_config: Callable[..., Config],
    *objs: dict[str, Any],
    offerings: list[Offering] | None = None,
    **cfg: Any,
) -> Plan:
    return plan(PlanInput(snapshot(*objs), offerings or aws_offerings(), make_config(**cfg), NOW))


def launched(result: Plan) -> list[str]:
    return sorted(f"{la.offering.instance_type}/{la.offering.capacity_type}" for la in result.launch.launches)


def unplaced(result: Plan) -> dict[str, str]:
    return {u.pod: u.reason for u in result.launch.unplaced}


# --- requirement_matches: Kubernetes node-selector semantics ------------------------------------------------


@pytest.fixture
def g5_12xlarge_labels(make_config: Callable[..., Config]) -> dict[str, str]:
    o = next(o for o in aws_offerings(spot=False) if o.instance_type == "g5.12xlarge")
    return node_labels(o, make_config())


@pytest.mark.parametrize(
    ("requirement", "matches"),
    [
        (Requirement("node.kubernetes.io/instance-type", "In", ("g5.12xlarge", "g6.12xlarge")), True),
        (Requirement("node.kubernetes.io/instance-type", "NotIn", ("g5.12xlarge",)), False),
        (Requirement("node.kubernetes.io/instance-type", "NotIn", ("p5.48xlarge", "p4d.24xlarge")), True),
        (Requirement("example.com/pool", "NotIn", ("batch",)), True),  # an absent label is never "in" a set
        (Requirement("nvidia.com/gpu.present", "Exists"), True),
        (Requirement("example.com/pool", "Exists"), False),
        (Requirement("example.com/pool", "DoesNotExist"), True),
        (Requirement("tidal.dev/gpu-model", "DoesNotExist"), False),
        (Requirement("tidal.dev/gpu-count", "Gt", ("3",)), True),
        (Requirement("tidal.dev/gpu-count", "Gt", ("4",)), False),  # strictly greater
        (Requirement("tidal.dev/gpu-count", "Lt", ("8",)), True),
        (Requirement("tidal.dev/gpu-count", "Lt", ("4",)), False),  # strictly less
        (Requirement("example.com/pool", "Gt", ("1",)), False),  # Gt/Lt on an absent label never match
        (Requirement("tidal.dev/gpu-model", "Gt", ("1",)), False),  # nor on a value that is not an integer
        (Requirement("tidal.dev/gpu-count", "Lt", ("many",)), False),
    ],
    ids=lambda v: f"{v.key} {v.operator} {','.join(v.values)}" if isinstance(v, Requirement) else str(v),
)
def test_each_node_selector_operator_has_kubernetes_semantics(
    g5_12xlarge_labels: dict[str, str], requirement: Requirement, matches: bool
) -> None:
    assert requirement_matches(requirement, g5_12xlarge_labels) is matches


# --- planning with required node affinity -------------------------------------------------------------------


def test_not_in_steers_a_pod_away_from_the_cheapest_type(make_config: Callable[..., Config]) -> None:
    avoid_t4 = gpu_pod(
        "infer-1", affinity_terms=[[expr("node.kubernetes.io/instance-type", "NotIn", "g4dn.xlarge")]]
    )
    assert launched(run(make_config, avoid_t4)) == ["g6.xlarge/on-demand"]


def test_exists_sends_a_pod_to_a_gpu_node_and_does_not_exist_keeps_it_off(
    make_config: Callable[..., Config],
) -> None:
    # A GPU-debugging pod that needs the driver but no device, and a CPU pod that must not land on GPU nodes.
    debug = pod(
        "gpu-debug-1",
        cpu="1",
        memory="2Gi",
        tolerations=GPU_TOLERATION,
        affinity_terms=[[expr("nvidia.com/gpu.present", "Exists")]],
    )
    web = pod(
        "web-1",
        cpu="3",
        memory="4Gi",
        tolerations=GPU_TOLERATION,
        affinity_terms=[[expr("tidal.dev/gpu-model", "DoesNotExist")]],
    )
    result = run(make_config, debug, web)
    by_pod = {p: la.offering.instance_type for la in result.launch.launches for p in la.pods}
    assert by_pod == {"default/gpu-debug-1": "g4dn.xlarge", "default/web-1": "m6i.xlarge"}


def test_gt_and_lt_compare_the_gpu_count_label_as_integers(make_config: Callable[..., Config]) -> None:
    big = gpu_pod("train-1", affinity_terms=[[expr("tidal.dev/gpu-count", "Gt", "3")]])
    small = gpu_pod("infer-1", affinity_terms=[[expr("tidal.dev/gpu-count", "Lt", "2")]])
    result = run(make_config, big, small)
    by_pod = {p: la.offering.instance_type for la in result.launch.launches for p in la.pods}
    assert by_pod == {"default/train-1": "g6.12xlarge", "default/infer-1": "g4dn.xlarge"}


def test_affinity_terms_are_ored_and_expressions_anded(make_config: Callable[..., Config]) -> None:
    either = gpu_pod(
        "infer-1",
        affinity_terms=[
            [expr("tidal.dev/gpu-model", "In", "L4"), expr("tidal.dev/gpu-count", "Gt", "1")],
            [expr("tidal.dev/gpu-model", "In", "A10")],
        ],
    )
    # g6.12xlarge (4 L4) matches the first term, g5.xlarge (1 A10) the second and is cheaper.
    assert launched(run(make_config, either)) == ["g5.xlarge/on-demand"]


# --- architectures ------------------------------------------------------------------------------------------

GRAVITON = [
    offering("m7g.xlarge", 4, 16, 0.1632, arch=Arch.ARM64),
    offering("m7g.2xlarge", 8, 32, 0.3264, arch=Arch.ARM64),
]


def test_an_arm64_pod_gets_a_graviton_node_when_architectures_allows_arm64(
    make_config: Callable[..., Config],
) -> None:
    arm = pod("api-1", cpu="3", memory="4Gi", node_selector={"kubernetes.io/arch": "arm64"})
    result = run(make_config, arm, offerings=aws_offerings() + GRAVITON, architectures=["amd64", "arm64"])
    assert launched(result) == ["m7g.xlarge/on-demand"]


def test_an_arm64_pod_waits_naming_architectures_when_only_amd64_is_allowed(
    make_config: Callable[..., Config],
) -> None:
    arm = pod("api-1", cpu="3", memory="4Gi", node_selector={"kubernetes.io/arch": "arm64"})
    result = run(make_config, arm, offerings=aws_offerings() + GRAVITON)
    assert result.launch.launches == ()
    assert unplaced(result) == {"default/api-1": "architectures [amd64] excludes arm64 offerings"}


def test_pods_without_an_arch_selector_never_get_arm64_unless_allowed(
    make_config: Callable[..., Config],
) -> None:
    web = pod("web-1", cpu="3", memory="4Gi")
    assert launched(run(make_config, web, offerings=aws_offerings() + GRAVITON)) == ["m6i.xlarge/on-demand"]


# --- clusterCPULimit ------------------------------------------------------------------------------------------


def test_cluster_cpu_limit_counts_every_node_and_stops_launches_at_the_limit(
    make_config: Callable[..., Config],
) -> None:
    # An 8-cpu node outside tidal (cordoned, so no pod can use its room) already counts toward the limit:
    # 8 cpu are left, one c6i.2xlarge, which holds two of the four pods.
    existing = node("ng-old", cpu="8", memory="32Gi", unschedulable=True)
    pods = [pod(f"batch-{i}", cpu="3", memory="4Gi") for i in range(4)]
    result = run(make_config, existing, *pods, clusterCPULimit="16")
    assert launched(result) == ["c6i.2xlarge/on-demand"]
    assert list(unplaced(result).values()) == ["clusterCPULimit 16 reached"] * 2


# --- instance annotations in planning -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "instance_type"),
    [
        ({"tidal.dev/instance-max-cost": "0.6"}, "g4dn.xlarge"),
        ({"tidal.dev/instance-family-exclusions": "g4dn"}, "g6.xlarge"),
        ({"node.elotl.co/instance-family-exclusions": "g4dn,g6"}, "g5.xlarge"),
        ({"tidal.dev/instance-type-regexp": r"^g5\."}, "g5.xlarge"),
        # Searched for, as in Luna: "12xlarge" picks the cheapest GPU type whose name contains it.
        ({"tidal.dev/instance-type-regexp": "12xlarge"}, "g6.12xlarge"),
        ({"node.elotl.co/instance-type-regexp": "^g5"}, "g5.xlarge"),
    ],
)
def test_instance_annotations_narrow_the_offerings_a_pod_gets(
    make_config: Callable[..., Config], annotations: dict[str, str], instance_type: str
) -> None:
    result = run(make_config, gpu_pod("infer-1", annotations=annotations))
    assert launched(result) == [f"{instance_type}/on-demand"]


@pytest.mark.parametrize(
    ("annotations", "reason"),
    [
        ({"tidal.dev/instance-max-cost": "0.5"}, "no offering at or below 0.5/h"),
        ({"tidal.dev/instance-type-regexp": "^g5$"}, "no instance type matches '^g5$'"),
        ({"tidal.dev/instance-family-exclusions": "g4dn,g5,g6,p4d,p5"}, "every fitting family is excluded"),
    ],
)
def test_an_annotation_that_excludes_everything_is_the_reason_given(
    make_config: Callable[..., Config], annotations: dict[str, str], reason: str
) -> None:
    result = run(make_config, gpu_pod("infer-1", annotations=annotations))
    assert unplaced(result) == {"default/infer-1": reason}


def test_constraint_sets_asked_about_one_after_another_get_what_each_gets_alone(
    make_config: Callable[..., Config],
) -> None:
    # One index answers for every class of a plan, sharing the passes of the filters those classes have in
    # common (all GPU pods: the GPU one): each answer, and each reason for none, is still the pod's own.
    config = make_config(capacityTypes=["spot", "on-demand"])
    kinds = [
        {"tidal.dev/instance-gpu-skus": "T4"},
        {"tidal.dev/instance-gpu-skus": "A10G"},
        {},
        {"tidal.dev/instance-gpu-skus": "A10G", "tidal.dev/instance-max-cost": "0.05"},
        {"tidal.dev/instance-gpu-skus": "B200"},
        {"tidal.dev/instance-offerings": "spot,on-demand", "tidal.dev/instance-gpu-skus": "T4"},
        {"tidal.dev/instance-type-regexp": "^g5$"},
        # Another set (its interruption cost) with the same filters as one asked about before, none left.
        {"tidal.dev/instance-gpu-skus": "B200", "tidal.dev/interruption-cost": "2h"},
    ]
    sets = [
        pod_constraints(pod_from_dict(gpu_pod(f"p{i}", annotations=a, tolerations=GPU_TOLERATION)), config)
        for i, a in enumerate(kinds)
    ]
    shared = OfferingIndex(aws_offerings(), config)
    together = [shared.eligible(c) for c in sets]
    alone = [OfferingIndex(aws_offerings(), config).eligible(c) for c in sets]
    assert together == alone
    assert sets[7] != sets[4] and together[7] == together[4]
    assert [len(found) for found, _ in together][:3] == [len(found) for found, _ in alone][:3] != [0, 0, 0]
    assert [why.message if why else "" for _, why in together][3:5] == [
        "no offering at or below 0.05/h",
        "no offering with GPU model B200",
    ]


# --- config regexps search as Luna's do ---------------------------------------------------------------------


def test_instance_type_regexp_is_searched_for_in_the_name(make_config: Callable[..., Config]) -> None:
    # "g6" alone admits g6.xlarge and g6.12xlarge; only an anchored pattern would need ".*" around it.
    result = run(make_config, gpu_pod("infer-1"), instanceTypeRegexp="g6")
    assert launched(result) == ["g6.xlarge/on-demand"]


def test_an_anchored_instance_type_regexp_must_match_the_whole_name(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, gpu_pod("infer-1"), instanceTypeRegexp=r"^g5\.12xlarge$")
    assert launched(result) == ["g5.12xlarge/on-demand"]


def test_the_eks_example_regexp_keeps_excluding_burstable_types_only(
    make_config: Callable[..., Config],
) -> None:
    burstable = [offering("t3.xlarge", 4, 16, 0.1664), offering("t4g.xlarge", 4, 16, 0.1344, arch=Arch.ARM64)]
    pattern = r"^(?!(t2|t3|t3a|t4g)\.).*$"  # charts/tidal/examples/eks.yaml
    result = run(
        make_config,
        pod("web-1", cpu="3", memory="4Gi"),
        offerings=aws_offerings() + burstable,
        instanceTypeRegexp=pattern,
        architectures=["amd64", "arm64"],
    )
    assert launched(result) == ["m6i.xlarge/on-demand"]


def test_bin_packing_node_type_regexp_is_searched_for_in_the_name(make_config: Callable[..., Config]) -> None:
    small = [pod(f"web-{i}", cpu="250m", memory="512Mi") for i in range(3)]
    # c6i.2xlarge would be the cheapest packing node; "r6i" (not "r6i.*") restricts packing to r6i types.
    result = run(make_config, *small, binPackingNodeTypeRegexp="r6i", binPackingNodeMemory="16Gi")
    assert launched(result) == ["r6i.2xlarge/on-demand"]


# --- a configuration filter is named when it removed what would have fit ------------------------------------

P5_4XLARGE = offering("p5.4xlarge", 16, 256, 6.88, gpus=1, gpu_model="H100", gpu_memory_gib=80)


def test_a_cost_cap_that_removed_the_only_fitting_type_is_named_not_the_node_selector(
    make_config: Callable[..., Config],
) -> None:
    h100 = gpu_pod("llm-1", node_selector={"tidal.dev/gpu-model": "H100"})
    result = run(make_config, h100, offerings=[*aws_offerings(), P5_4XLARGE], maxNodeCostPerHour=1.0)
    assert unplaced(result) == {
        "default/llm-1": "maxNodeCostPerHour 1.0 excludes every offering that fits (cheapest p5.4xlarge at $6.88/h)"
    }


def test_the_instance_type_regexp_is_named_when_it_removed_every_gpu_type(
    make_config: Callable[..., Config],
) -> None:
    result = run(make_config, gpu_pod("infer-1"), instanceTypeRegexp=r"^(m6i|c6i)\.")
    assert unplaced(result) == {
        "default/infer-1": r"instanceTypeRegexp '^(m6i|c6i)\\.' excludes every offering that fits "
        "(cheapest g4dn.xlarge)"
    }


def test_zones_are_named_when_the_only_fitting_type_is_elsewhere(make_config: Callable[..., Config]) -> None:
    offerings = [o for o in aws_offerings() if o.gpu_model != "H100"]
    offerings.append(offering("p5.4xlarge", 16, 256, 6.88, gpus=1, gpu_model="H100", zone="us-east-1b"))
    h100 = gpu_pod("llm-1", annotations={"tidal.dev/instance-gpu-skus": "H100"})
    result = run(make_config, h100, offerings=offerings)
    assert unplaced(result) == {
        "default/llm-1": "zones [us-east-1a] exclude every offering that fits "
        "(cheapest p5.4xlarge/us-east-1b/on-demand)"
    }


def test_the_pod_constraint_is_named_when_no_configuration_filter_is_to_blame(
    make_config: Callable[..., Config],
) -> None:
    # No H200 anywhere in the catalog: relaxing the cost cap would not help, so the selector is the reason.
    h200 = gpu_pod("llm-1", node_selector={"tidal.dev/gpu-model": "H200"})
    result = run(make_config, h200, offerings=[*aws_offerings(), P5_4XLARGE], maxNodeCostPerHour=1.0)
    assert unplaced(result) == {"default/llm-1": "nodeSelector matches no offering"}


def test_offerings_benched_after_capacity_errors_are_named(make_config: Callable[..., Config]) -> None:
    from dataclasses import replace

    offerings = [replace(o, available=not o.gpu_count) for o in aws_offerings()]
    result = run(make_config, gpu_pod("infer-1"), offerings=offerings)
    assert unplaced(result) == {
        "default/infer-1": "every offering that fits is unavailable after capacity errors "
        "(cheapest g4dn.xlarge/us-east-1a/on-demand); tidal tries them again after offeringUnavailableDuration"
    }


def test_a_cost_cap_is_named_when_it_removed_the_only_type_big_enough_for_a_gang_member(
    make_config: Callable[..., Config],
) -> None:
    """The planner's "no offering fits cpu 8" verdict asks the index which filter removed a type that fits."""
    offerings = [
        offering("g4dn.xlarge", 4, 16, 0.526, gpus=1, gpu_model="T4", gpu_memory_gib=16),
        offering("g4dn.12xlarge", 48, 192, 3.912, gpus=4, gpu_model="T4", gpu_memory_gib=16),
    ]
    config = make_config(maxNodeCostPerHour=1.0)
    member = pod_from_dict(
        pod(
            "train-0",
            cpu="8",
            memory="16Gi",
            gpu=1,
            message=INSUFFICIENT_GPU,
            annotations={"pod-group-name": "train"},
        )
    )
    index = OfferingIndex(offerings, config)
    c = pod_constraints(member, config)
    assert [o.instance_type for o in index.eligible(c)[0]] == ["g4dn.xlarge"]
    request = member.requests + Resources({"pods": 1000})
    assert str(index.excluded_fit_reason(c, request, packing=False)) == (
        "maxNodeCostPerHour 1.0 excludes every offering that fits (cheapest g4dn.12xlarge at $3.91/h)"
    )
    # A request nothing in the catalog could hold is no filter's doing.
    assert index.excluded_fit_reason(c, member.requests + Resources({"nvidia.com/gpu": 8000}), False) is None
    # The gang is still all-or-nothing.
    members = [podgroup("train", min_member=2, queue="research")] + [
        pod(
            f"train-{i}",
            cpu="8",
            memory="16Gi",
            gpu=1,
            message=INSUFFICIENT_GPU,
            annotations={"pod-group-name": "train"},
        )
        for i in range(2)
    ]
    result = plan(PlanInput(snapshot(*members), offerings, config, NOW))
    assert result.launch.launches == ()
    assert set(unplaced(result)) == {"default/train-0", "default/train-1"}
    assert set(unplaced(result).values()) == {
        "gang default/train (2 pods) cannot be placed whole: "
        "maxNodeCostPerHour 1.0 excludes every offering that fits (cheapest g4dn.12xlarge at $3.91/h)"
    }
