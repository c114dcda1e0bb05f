"""Scale-up's shortcuts change no decision: a node whose shared GPUs have no room for a share is not asked,
a node opened like the one before reuses its fit (a batch of them opened at once), only nodes pods joined are
checked for room left, and a node's join floor is remembered. Planning without them gives the very same plan,
node for node; and a share of one GPU is still placed as KAI's binpack places it."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.config.options import config_from_mapping
from autoscaler.core.fit import Constraints
from autoscaler.core.gpu.share import ComputeMode, GpuShare, ShareSource
from autoscaler.core.placement.engine import Engine
from autoscaler.core.placement.gpus import GpuSlots, SharedGpu
from autoscaler.core.planning import newnodes
from autoscaler.core.planning.classes import choices
from autoscaler.core.planning.planner import Plan, PlanInput, plan
from autoscaler.core.planning.scaleup import _Planner
from tests.builders import INSUFFICIENT_GPU, aws_offerings, pod, podgroup, snapshot

NOW = 1_795_168_800.0
OFFERINGS = aws_offerings(("us-east-1a", "us-east-1b"))
SETTINGS = {
    "cloud": "aws",
    "region": "us-east-1",
    "zones": ["us-east-1a", "us-east-1b"],
    "capacityTypes": ["spot", "on-demand"],
}
CONFIG = config_from_mapping(SETTINGS)
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
HOSTNAME = "kubernetes.io/hostname"

workload = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["fraction", "fraction", "memory", "gpu", "cpu"]),
        "fraction": st.sampled_from(["0.1", "0.25", "0.3", "0.5", "0.75"]),
        "memory": st.sampled_from(["4000", "8000", "12000", "20000"]),
        "mode": st.sampled_from(["", "", "sm-sharing"]),
        "sku": st.sampled_from(["", "", "T4", "L4", "A10G"]),
        "devices": st.sampled_from(["", "", "", "2"]),
        "apart": st.sampled_from([False, False, False, True]),
        "gang": st.sampled_from([False, False, False, True]),
        "cpu": st.sampled_from(["250m", "1", "2", "4"]),
        "count": st.integers(min_value=1, max_value=9),
    }
)


def objects(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Deployments of share pods (by fraction or by memory, either compute mode, some pinned to a GPU model,
    some on two devices, some kept one per node), whole-GPU pods and CPU pods."""
    objs: list[dict[str, Any]] = []
    for i, s in enumerate(specs):
        annotations: dict[str, str] = {}
        gpu, scheduler = 0, "default-scheduler"
        tolerations: list[dict[str, str]] | None = None
        if s["kind"] in ("fraction", "memory"):
            annotations["gpu-fraction" if s["kind"] == "fraction" else "gpu-memory"] = s[s["kind"]]
            if s["mode"]:
                annotations["kai.scheduler/gpu-compute-sharing-mode"] = s["mode"]
            if s["devices"]:
                annotations["gpu-fraction-num-devices"] = s["devices"]
            scheduler, tolerations = "kai-scheduler", [GPU_TOLERATION]
        elif s["kind"] == "gpu":
            gpu = 1
        if s["sku"] and s["kind"] != "cpu":
            annotations["tidal.dev/instance-gpu-skus"] = s["sku"]
        app = f"app{i}"
        if s.get("gang"):
            annotations["pod-group-name"] = f"pg-{app}"
            objs.append(podgroup(f"pg-{app}", min_member=s["count"], queue="prod"))
        apart = None
        if s["apart"]:
            apart = [{"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": HOSTNAME}]
        for j in range(s["count"]):
            objs.append(
                pod(
                    f"{app}-{j}",
                    cpu=s["cpu"],
                    memory="2Gi",
                    gpu=gpu,
                    scheduler=scheduler,
                    message=INSUFFICIENT_GPU,
                    labels={"app": app},
                    annotations=annotations,
                    tolerations=tolerations,
                    pod_anti_affinity=apart,
                    created=f"2026-11-20T10:{i % 60:02d}:00Z",
                )
            )
    return objs


def decisions(result: Plan) -> tuple[list[Any], Any, Any]:
    launches = [
        (la.offering.key, la.pods, la.mode, la.alternatives, la.gang) for la in result.launch.launches
    ]
    return launches, result.launch.unplaced, result.launch.absorbed


def without_shortcuts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planner as it is without its shortcuts: every node asked, every fit worked out, every list of
    nodes checked whole for room, every join floor counted again."""

    def asks_every_node(self: _Planner, devices: Any, share: Any) -> bool:
        return True

    def prunes_every_node(self: _Planner, bins: list[Any]) -> None:
        bins[:] = [b for b in bins if newnodes.has_room(b)]

    def counts_every_time(self: _Planner, b: Any, c: Any, mine: Any) -> bool:
        return c in b.classes or all(mine <= choices(self.index, other) for other in b.classes)

    monkeypatch.setattr(_Planner, "_takes", asks_every_node)
    monkeypatch.setattr(_Planner, "_prune", prunes_every_node)
    monkeypatch.setattr(_Planner, "_may_join", counts_every_time)
    monkeypatch.setattr(_Planner, "_open_alike", lambda self, *args: (0, 0))  # each node opened on its own
    monkeypatch.setattr(Engine, "independent", lambda self, pod: False)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(workload, min_size=1, max_size=7), st.sampled_from([None, None, 3, 8]))
def test_planning_without_the_shortcuts_gives_the_same_plan(
    specs: list[dict[str, Any]], gpu_limit: int | None
) -> None:
    # Under a GPU limit some gangs cannot be placed whole, and what was placed for them is taken back.
    config = config_from_mapping({**SETTINGS, **({"clusterGPULimit": gpu_limit} if gpu_limit else {})})
    snap = snapshot(*objects(specs))
    fast = plan(PlanInput(snap, OFFERINGS, config, NOW))
    with pytest.MonkeyPatch.context() as monkeypatch:
        without_shortcuts(monkeypatch)
        slow = plan(PlanInput(snap, OFFERINGS, config, NOW))
    assert decisions(fast) == decisions(slow)


def test_a_share_passes_over_nodes_whose_shared_gpus_are_full_to_the_first_with_room() -> None:
    # 0.75 shares open one T4 node each; 0.25 shares then fill each of them; the 0.5 shares that come after
    # find every one of those full and open nodes of their own, which later 0.5 shares join first-fit.
    specs: list[dict[str, Any]] = [
        {"kind": "fraction", "fraction": "0.75", "count": 3},
        {"kind": "fraction", "fraction": "0.25", "count": 3},
        {"kind": "fraction", "fraction": "0.5", "count": 4},
    ]
    defaults: dict[str, Any] = {
        "memory": "",
        "mode": "",
        "sku": "T4",
        "devices": "",
        "apart": False,
        "cpu": "250m",
    }
    snap = snapshot(*objects([{**defaults, **s} for s in specs]))
    result = plan(PlanInput(snap, OFFERINGS, CONFIG, NOW))
    with pytest.MonkeyPatch.context() as monkeypatch:
        without_shortcuts(monkeypatch)
        slow = plan(PlanInput(snap, OFFERINGS, CONFIG, NOW))
    assert decisions(result) == decisions(slow)
    by_app = sorted(
        sorted({key.split("/")[1].split("-")[0] for key in la.pods}) for la in result.launch.launches
    )
    assert by_app == [["app0", "app1"]] * 3 + [["app2"]] * 2


devices = st.lists(
    st.tuples(st.integers(min_value=0, max_value=100), st.sampled_from(list(ComputeMode))), max_size=6
)


@settings(max_examples=200, deadline=None)
@given(
    devices,
    st.integers(min_value=0, max_value=3),
    st.sampled_from([0.1, 0.25, 0.3, 0.5, 0.75]),
    st.sampled_from(list(ComputeMode)),
)
def test_a_share_of_one_gpu_goes_to_the_fullest_device_of_its_mode_with_room_else_a_whole_one(
    shared: list[tuple[int, ComputeMode]], whole: int, portion: float, mode: ComputeMode
) -> None:
    slots = GpuSlots(whole, tuple(SharedGpu(free, m) for free, m in shared), memory_mib=24576)
    share = GpuShare(ShareSource.FRACTION, "main", portion=portion, compute_mode=mode)
    need = share.hundredths
    assert need is not None
    fits = [i for i, (free, m) in enumerate(shared) if m == mode and free >= need]
    got = slots.take(share)
    if fits:
        fullest = min(fits, key=lambda i: (shared[i][0], i))
        after = list(slots.shared)
        after[fullest] = SharedGpu(shared[fullest][0] - need, mode)
        assert got == (GpuSlots(whole, tuple(after), memory_mib=24576), 0)
    elif whole:
        opened = (*slots.shared, SharedGpu(100 - need, mode))
        assert got == (GpuSlots(whole - 1, opened, memory_mib=24576), 1)
    else:
        assert got is None


def test_a_pickled_share_and_devices_carry_no_hash_worked_out_in_this_process() -> None:
    # String hashes are salted per process: a hash kept from this one would not find them in a dict there.
    share = GpuShare(ShareSource.FRACTION, "main", portion=0.5, compute_mode=ComputeMode.SM_SHARING)
    slots = GpuSlots(1, (SharedGpu(50, ComputeMode.SM_SHARING),), memory_mib=24576)
    hash(share), hash(slots)
    copies = pickle.loads(pickle.dumps((share, slots)))
    assert copies == (share, slots)
    assert [c._hash for c in copies] == [None, None]


def test_a_pickled_offering_and_constraint_set_carry_no_hash_worked_out_in_this_process() -> None:
    offering = OFFERINGS[0]
    constraints = Constraints(gpu_skus=("A100",), capacity_types=("spot", "on-demand"))
    hash(offering), hash(constraints)
    copies = pickle.loads(pickle.dumps((offering, constraints)))
    assert copies == (offering, constraints)
    assert [c._hash for c in copies] == [None, None]
    assert [hash(c) for c in copies] == [hash(offering), hash(constraints)]
