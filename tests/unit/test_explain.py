"""Every launch says why it is the offering it is; `tidal plan --explain POD` tells one pod's whole story; a node
far bigger than its pods is called out."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from autoscaler.cli.main import main
from autoscaler.cli.render import _kinds_of_launch, plan_to_table, plan_warnings
from autoscaler.core.placement.reasons import Filter
from autoscaler.core.planning.planner import PlanInput, plan
from autoscaler.core.planning.why import Compared, Later
from autoscaler.runtime.controller import Controller
from autoscaler.runtime.notices import OVERSIZED_NODE
from providers.simulated import SimulatedProvider
from tests.builders import INSUFFICIENT_GPU, aws_offerings, pod, snapshot
from tests.fakes.reconcile import CallRecorder, Clock, StaticCluster

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from autoscaler.config.options import Config
    from autoscaler.core.planning.decisions import Launch
    from autoscaler.core.planning.planner import Plan
    from autoscaler.core.planning.why import LaunchWhy

NOW = 1_795_168_800.0  # 2026-11-20T10:00:00Z
REPO = Path(__file__).resolve().parents[2]


def gpu_pod(name: str, gpus: int = 1, cpu: str = "2", **kw: Any) -> dict[str, Any]:
    return pod(name, cpu=cpu, memory="8Gi", gpu=gpus, message=INSUFFICIENT_GPU, **kw)


def only_launch(result: Plan) -> tuple[Launch, LaunchWhy]:
    (launch,) = result.launch.launches
    assert launch.why is not None
    return launch, launch.why


def ruled_out(why: LaunchWhy | None) -> dict[tuple[str, str], tuple[int, str]]:
    assert why is not None
    return {(r.rejection.filter, r.rejection.key): (r.count, r.cheapest.key) for r in why.ruled_out}


# --- why a launch is the offering it is -----------------------------------------------------------------


def test_a_launch_names_the_cheaper_offerings_spot_not_allowed_ruled_out(
    make_config: Callable[..., Config],
) -> None:
    result = plan(PlanInput(snapshot(gpu_pod("infer-1")), aws_offerings(), make_config(), NOW))
    launch, why = only_launch(result)
    assert launch.offering.key == "g4dn.xlarge/us-east-1a/on-demand"
    # The pod allows on-demand only (the default): the 9 spot offerings below $0.526/h (6 CPU shapes, and the
    # g4dn, g6 and g5 xlarge) are out for their capacity type; the on-demand CPU shapes for having no GPU.
    assert ruled_out(why)[(Filter.OFFERING, "capacity-type")] == (9, "m6i.large/us-east-1a/spot")
    assert ruled_out(why)[(Filter.OFFERING, "nvidia.com/gpu")] == (5, "m6i.large/us-east-1a/on-demand")
    rejection = next(r.rejection for r in why.ruled_out if r.rejection.key == "capacity-type")
    assert rejection.message == "capacity type not in on-demand"


def test_a_launch_compares_the_nearest_candidates_with_their_prices_and_verdicts(
    make_config: Callable[..., Config],
) -> None:
    result = plan(PlanInput(snapshot(gpu_pod("infer-1")), aws_offerings(), make_config(), NOW))
    _, why = only_launch(result)
    assert [(c.offering.instance_type, c.offering.price, c.verdict) for c in why.compared] == [
        ("g4dn.xlarge", 0.526, "chosen"),
        ("g6.xlarge", 0.8048, "+$0.2788/h"),
        ("g5.xlarge", 1.006, "+$0.4800/h"),
    ]


def test_a_gpu_model_annotation_rules_out_the_cheaper_gpus_by_name(
    make_config: Callable[..., Config],
) -> None:
    annotated = gpu_pod("infer-1", annotations={"tidal.dev/instance-gpu-skus": "L4"})
    _, why = only_launch(plan(PlanInput(snapshot(annotated), aws_offerings(), make_config(), NOW)))
    assert ruled_out(why)[(Filter.OFFERING, "gpu-sku")] == (1, "g4dn.xlarge/us-east-1a/on-demand")
    assert (
        next(r.rejection.message for r in why.ruled_out if r.rejection.key == "gpu-sku") == "GPU model not L4"
    )


def test_configured_family_exclusions_and_zones_are_named_as_what_ruled_offerings_out(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(instanceFamilyExclusions=["g4dn"], zones=["us-east-1b"])
    offerings = aws_offerings(("us-east-1a", "us-east-1b"))
    _, why = only_launch(plan(PlanInput(snapshot(gpu_pod("infer-1")), offerings, config, NOW)))
    assert ruled_out(why)[(Filter.OFFERING, "family")] == (1, "g4dn.xlarge/us-east-1b/on-demand")
    # Every offering in us-east-1a below g6.xlarge/us-east-1b goes to the zones filter, which comes first.
    assert ruled_out(why)[(Filter.CONFIGURATION, "zones")] == (17, "m6i.large/us-east-1a/spot")


def test_a_pod_too_big_for_the_cheaper_shapes_has_them_ruled_out_for_resources(
    make_config: Callable[..., Config],
) -> None:
    _, why = only_launch(
        plan(PlanInput(snapshot(gpu_pod("train-1", cpu="6")), aws_offerings(), make_config(), NOW))
    )
    assert ruled_out(why)[(Filter.NODE_RESOURCES_FIT, "cpu")] == (3, "g4dn.xlarge/us-east-1a/on-demand")
    small = next(c for c in why.compared if c.offering.instance_type == "g4dn.xlarge")
    assert small.verdict == "too small for its pods: Insufficient cpu"


def test_the_mode_says_why_a_pod_got_bin_selection_or_bin_packing(make_config: Callable[..., Config]) -> None:
    web = [pod(f"web-{i}", cpu="500m", memory="1Gi") for i in range(3)]
    result = plan(PlanInput(snapshot(gpu_pod("infer-1"), *web), aws_offerings(), make_config(), NOW))
    assert all(la.why is not None for la in result.launch.launches)
    reasons = {la.mode: la.why.mode_reason for la in result.launch.launches if la.why is not None}
    assert reasons == {
        "bin-selection": "it requests GPUs",
        "bin-packing": "cpu 500m and memory 1Gi are below binSelectPodCpuThreshold 2 and "
        "binSelectPodMemoryThreshold 6Gi, and it asks for no specific node",
    }


def test_the_fallbacks_cap_and_the_cheapest_offering_left_out_above_it_are_recorded(
    make_config: Callable[..., Config],
) -> None:
    config = make_config(zones=["us-east-1a", "us-east-1b"], maxFallbackPriceRatio=1.6)
    offerings = aws_offerings(("us-east-1a", "us-east-1b"))
    _, why = only_launch(plan(PlanInput(snapshot(gpu_pod("infer-1")), offerings, config, NOW)))
    assert why.fallback_cap == pytest.approx(0.526 * 1.6)
    assert why.left_out is not None and why.left_out.key == "g5.xlarge/us-east-1a/on-demand"
    lines = plan_to_table(
        plan(PlanInput(snapshot(gpu_pod("infer-1")), offerings, config, NOW)), config
    ).splitlines()
    assert "  left out above the cap: g5.xlarge/us-east-1a/on-demand $1.0060/h and dearer" in lines
    assert any(line.startswith("  fallbacks (at most $0.8416/h, maxFallbackPriceRatio): ") for line in lines)


def test_the_plan_table_explains_each_kind_of_launch_once(make_config: Callable[..., Config]) -> None:
    config = make_config()
    result = plan(
        PlanInput(snapshot(*[gpu_pod(f"infer-{i}") for i in range(3)]), aws_offerings(), config, NOW)
    )
    lines = plan_to_table(result, config).splitlines()
    start = lines.index("Why these instance types:")
    assert lines[start + 1] == (
        "3 nodes g4dn.xlarge/us-east-1a/on-demand $0.5260/h for default/infer-0, default/infer-1, default/infer-2"
    )
    assert lines[start + 2] == "  mode: bin-selection (a node chosen for its pods), because it requests GPUs"
    assert lines[start + 3].startswith("  compared with: g4dn.xlarge on-demand $0.5260/h (chosen); g6.xlarge")
    assert (
        "  ruled out 9 cheaper: capacity type not in on-demand [Offering capacity-type] "
        "(cheapest m6i.large/us-east-1a/spot $0.0422/h)"
    ) in lines


# --- a node far bigger than its pods ------------------------------------------------------------------------


def test_a_node_with_most_of_its_gpus_idle_is_called_out_with_why_no_smaller_one(
    make_config: Callable[..., Config],
) -> None:
    # 6 cpu: no 1-GPU shape (4 vCPU) holds the pod, and the 4-GPU g6.12xlarge is the cheapest that does.
    result = plan(PlanInput(snapshot(gpu_pod("train-1", cpu="6")), aws_offerings(), make_config(), NOW))
    launch, why = only_launch(result)
    assert (launch.offering.instance_type, why.gpus_used, why.idle_gpus) == ("g6.12xlarge", 1, 3)
    assert plan_warnings(result) == [
        "default/train-1 requests 1 GPU and gets g6.12xlarge (on-demand) with 4 GPUs at $4.6016/h: 3 GPUs idle; "
        "the cheapest with fewer L4 GPUs its pods may get, g6.xlarge (on-demand, 1 GPU, $0.8048/h), is ruled "
        "out: too small for its pods: Insufficient cpu"
    ]


def test_a_node_its_pods_fill_is_not_called_out(make_config: Callable[..., Config]) -> None:
    pods = [gpu_pod(f"train-{i}", annotations={"tidal.dev/instance-gpu-skus": "H100"}) for i in range(8)]
    result = plan(PlanInput(snapshot(*pods), aws_offerings(), make_config(), NOW))
    assert [la.offering.instance_type for la in result.launch.launches] == ["p5.48xlarge"]
    assert plan_warnings(result) == []


def test_a_one_gpu_h100_pod_on_an_eight_gpu_gcp_node_is_a_warning_of_tidal_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = tmp_path / "snap.yaml"
    h100 = gpu_pod("eval-0", cpu="8", node_selector={"tidal.dev/gpu-model": "H100"})
    snap.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [h100]}))
    config = tmp_path / "gcp.yaml"
    config.write_text(yaml.safe_dump({"cloud": "gcp", "region": "us-central1", "capacityTypes": ["spot"]}))
    catalog = str(REPO / "config" / "catalogs" / "gcp-us-central1.csv")
    code = main(["plan", "--snapshot", str(snap), "--catalog", catalog, "--config", str(config)])
    err = capsys.readouterr().err
    assert code == 0
    assert (
        "tidal: warning: default/eval-0 requests 1 GPU and gets a3-highgpu-8g (spot) with 8 GPUs at "
        "$50.6095/h: 7 GPUs idle; no offering with fewer H100 GPUs is in the catalog\n"
    ) in err


def test_the_daemon_warns_on_the_pod_whose_new_node_leaves_most_gpus_idle(
    tmp_path: Path, make_config: Callable[..., Config]
) -> None:
    catalog = tmp_path / "catalog.csv"
    catalog.write_text(
        "cloud,region,instance_type,vcpu,memory_mib,gpu_count,gpu_fraction,gpu_vendor,gpu_model,gpu_memory_mib,"
        "arch,on_demand_usd_per_hour,spot_usd_per_hour,zone\n"
        "aws,us-east-1,g4dn.xlarge,4,16384,1,1,NVIDIA,T4,16384,x86_64,0.526,,\n"
        "aws,us-east-1,g4dn.12xlarge,48,196608,4,4,NVIDIA,T4,16384,x86_64,3.912,,\n"
    )
    cfg = make_config(simulated={"catalog": str(catalog)})
    clock = Clock()
    events = CallRecorder()
    controller = Controller(
        config=lambda: cfg,
        cluster=StaticCluster(snapshot(gpu_pod("train-1", cpu="8"))),
        provider=SimulatedProvider(cfg, clock=clock),
        actions=CallRecorder(),
        events=events,
        clock=clock,
    )
    controller.reconcile_once()
    warned = [(args[0].key, args[2], args[3]) for args in events.named("pod") if args[1] == OVERSIZED_NODE]
    assert warned == [
        (
            "default/train-1",
            "default/train-1 requests 1 GPU and gets g4dn.12xlarge (on-demand) with 4 GPUs at $3.9120/h: 3 GPUs "
            "idle; the cheapest with fewer T4 GPUs its pods may get, g4dn.xlarge (on-demand, 1 GPU, $0.5260/h), "
            "is ruled out: too small for its pods: Insufficient cpu",
            "Warning",
        )
    ]


# --- tidal plan --explain POD -------------------------------------------------------------------------------


@pytest.fixture
def kai_example() -> list[str]:
    return [
        "plan",
        "--snapshot",
        str(REPO / "config/examples/snapshot-kai.yaml"),
        "--catalog",
        str(REPO / "config/catalogs/aws-us-east-1.csv"),
        "--config",
        str(REPO / "config/examples/demo.yaml"),
        "--config",
        str(REPO / "config/examples/kai.yaml"),
        "--now",
        "2026-11-20T10:05:00Z",
    ]


def test_explain_prints_one_pods_filters_candidates_and_where_it_went(
    kai_example: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*kai_example, "--explain", "llm/eval-llama-8b-h100-7wq4d"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:5] == [
        "Pod llm/eval-llama-8b-h100-7wq4d",
        "  requests: 1 nvidia.com/gpu, cpu 8, memory 64Gi",
        "  outcome: launches p5.4xlarge in us-east-1a (on-demand, $6.8800/h), a bin-selection node",
        "  mode: bin-selection (a node chosen for its pods), because it requests GPUs",
        "  capacity types, in order of preference: spot, on-demand",
    ]
    steps = {
        line.split()[0] + " " + line.split()[1] for line in lines if line.startswith("    ") and "/" in line
    }
    assert "NodeAffinity nodeSelector" in steps
    assert any(line.split()[:3] == ["p5.4xlarge/us-east-1a/on-demand", "6.8800", "chosen;"] for line in lines)
    assert any(line.startswith("  fallbacks (at most $13.7600/h): p5.4xlarge/us-east-1b") for line in lines)


def test_explain_tells_why_a_pod_needs_no_node(
    kai_example: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*kai_example, "--explain", "research/sweep-lr-3e-4-q9w8d"]) == 0
    out = capsys.readouterr().out
    assert "  KAI queue: research\n" in out
    assert "  outcome: needs no new node (reason-mismatch): pending message does not match: OverLimit" in out


def test_explain_tells_an_unplaced_pod_the_nearest_offering(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = tmp_path / "snap.yaml"
    huge = gpu_pod("huge-0", gpus=16)
    snap.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [huge]}))
    catalog = str(REPO / "config" / "catalogs" / "aws-us-east-1.csv")
    assert main(["plan", "--snapshot", str(snap), "--catalog", catalog, "--explain", "default/huge-0"]) == 0
    out = capsys.readouterr().out
    assert "  outcome: cannot be placed: no offering fits 16 nvidia.com/gpu" in out
    assert "  nearest offering: g6.48xlarge//on-demand ($13.3504/h): Insufficient nvidia.com/gpu" in out
    assert "  no offering holds it" in out


def test_explain_with_json_output_adds_the_story_to_the_document(
    kai_example: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*kai_example, "--output", "json", "--explain", "llm/eval-llama-8b-h100-7wq4d"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (story,) = doc["explain"]
    assert story["launch"] == "p5.4xlarge/us-east-1a/on-demand"
    assert {f["filter"] for f in story["filters"]} >= {"Configuration", "Offering", "NodeAffinity"}
    launch = next(la for la in doc["launches"] if la["instanceType"] == "p5.4xlarge")
    assert launch["why"]["modeReason"] == "it requests GPUs"
    assert launch["fallbackPricesPerHour"] == [6.88, 6.88]


@pytest.mark.parametrize(
    ("pod_name", "error"),
    [
        (
            "sweep-lr-3e-4-q9w8d",
            "--explain: 'sweep-lr-3e-4-q9w8d' is not namespace/name (e.g. default/infer-0)",
        ),
        (
            "default/sweep-lr-3e-4-q9w8d",
            "--explain: no pod default/sweep-lr-3e-4-q9w8d in the snapshot (pods of that name: "
            "research/sweep-lr-3e-4-q9w8d)",
        ),
    ],
)
def test_explain_names_a_pod_that_is_not_there_in_one_line(
    kai_example: list[str], capsys: pytest.CaptureFixture[str], pod_name: str, error: str
) -> None:
    assert main([*kai_example, "--explain", pod_name]) == 2
    assert capsys.readouterr().err.endswith(f"tidal: error: {error}\n")


def test_a_launch_works_out_its_comparison_when_it_is_first_read_and_only_then(
    make_config: Callable[..., Config],
) -> None:
    # The planner's launches carry their explanation unread: a plan only acted on never compares candidates.
    result = plan(PlanInput(snapshot(gpu_pod("infer-1")), aws_offerings(), make_config(), NOW))
    _, why = only_launch(result)
    read: list[int] = []

    def compare() -> tuple[tuple[Compared, ...], int]:
        read.append(1)
        return why.comparing()

    lazy = replace(why, comparing=Later(compare))
    assert read == []
    assert lazy.compared == why.compared and lazy.cheaper_compared == why.cheaper_compared
    assert read == [1]  # worked out once, then kept


def test_launch_explanations_alike_but_for_their_comparison_are_two_kinds_of_launch(
    make_config: Callable[..., Config],
) -> None:
    result = plan(PlanInput(snapshot(gpu_pod("infer-1")), aws_offerings(), make_config(), NOW))
    _, why = only_launch(result)
    fewer = replace(why, comparing=Later(lambda: (why.compared[:1], why.cheaper_compared)))
    same = replace(why, comparing=Later(why.comparing))
    assert fewer != why and same == why and hash(same) == hash(why)


def test_launches_of_one_kind_made_of_distinct_equal_objects_are_one_kind_in_launch_order(
    make_config: Callable[..., Config],
) -> None:
    result = plan(PlanInput(snapshot(gpu_pod("infer-1")), aws_offerings(), make_config(), NOW))
    launch, why = only_launch(result)
    # Equal copies, not the same objects, interleaved with another kind: the planner shares its objects
    # between the launches of a kind, but nothing says it must.
    copy = replace(launch, pods=("default/b",), offering=replace(launch.offering), why=replace(why))
    other = replace(launch, pods=("default/c",), why=replace(why, mode_reason="another reason"))
    last = replace(launch, pods=("default/d",))
    kinds = _kinds_of_launch([launch, other, copy, last])
    assert [[la.pods for la in kind] for kind in kinds] == [
        [launch.pods, ("default/b",), ("default/d",)],
        [("default/c",)],
    ]
