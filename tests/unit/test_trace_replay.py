"""Trace replay as the benchmarks run it: --trace alone uses the trace frame, `tidal simulate --scenario
alibaba-week` runs exactly the benchmark's week, and the summary says how many pods ran."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from autoscaler.cli.main import main
from autoscaler.sim import run as sim_run
from autoscaler.sim.cluster import EmulatedCluster
from autoscaler.sim.scenario import ScenarioError, data_directory, parse_scenario
from autoscaler.sim.trace import load_trace

if TYPE_CHECKING:
    from typing import NoReturn

REPO = Path(__file__).resolve().parents[2]
TRACE_HEADER = "pod_id,submit_time_s,duration_s,num_gpu,gpu_milli,cpu_milli,memory_mib,gpu_spec\n"


class Captured(Exception):
    """Raised by the stand-in for the simulation, so a test sees what would have been run."""


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def record(
        scenario: Any, layers: Any, policy: Any, catalog: Any, cloud: Any, region: Any, *rest: Any
    ) -> NoReturn:
        seen.update(scenario=scenario, policy=policy, catalog=catalog, cloud=cloud, region=region)
        raise Captured

    monkeypatch.setattr(sim_run, "_simulate", record)
    return seen


def bench_suite() -> Any:
    spec = importlib.util.spec_from_file_location("bench_suite", REPO / "bench" / "suite.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def small_trace(tmp_path: Path) -> str:
    path = tmp_path / "trace.csv"
    path.write_text(
        TRACE_HEADER
        + "p1,0,3600,1,1000,4000,16384,T4\n"
        + "p2,600,1800,0,0,2000,4096,\n"
        + "p3,7200,0,1,1000,4000,16384,\n"  # never ran in the trace: not replayed
    )
    return str(path)


def test_a_trace_without_a_scenario_is_replayed_in_the_trace_frame(
    tmp_path: Path, captured: dict[str, Any]
) -> None:
    with pytest.raises(Captured):
        main(["simulate", "--trace", small_trace(tmp_path)])
    scenario = captured["scenario"]
    assert scenario.name == "trace"
    assert scenario.config["clusterGPULimit"] == 512  # the frame's configuration
    assert [j.name for j in scenario.jobs] == ["t-p1", "t-p2"]


def test_simulate_without_a_scenario_or_a_trace_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate"]) == 2
    assert "give --scenario NAME|FILE, or --trace CSV" in capsys.readouterr().err


def test_the_trace_frame_alone_has_nothing_to_replay_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--scenario", "trace"]) == 2
    assert "scenario trace has no jobs: give --trace CSV" in capsys.readouterr().err


def test_a_replayed_trace_says_how_many_pods_ran(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--trace", small_trace(tmp_path), "--no-bound"]) == 0
    assert "pods ran 2 of 2, never served 0" in capsys.readouterr().out


def test_a_trace_window_runs_for_the_window_and_an_hour(tmp_path: Path, captured: dict[str, Any]) -> None:
    with pytest.raises(Captured):
        main(["simulate", "--trace", small_trace(tmp_path), "--window", "2h", "--compression", "2"])
    assert captured["scenario"].duration == 2 * 3600 / 2 + 3600


@pytest.mark.skipif(
    not (data_directory() / "traces" / "alibaba_gpu_v2023_openb_pods.csv").is_file(),
    reason="the Alibaba GPU trace is not in the data directory",
)
def test_simulate_alibaba_week_runs_exactly_what_the_benchmark_runs(captured: dict[str, Any]) -> None:
    with pytest.raises(Captured):
        main(["simulate", "--scenario", "alibaba-week"])
    (bench,) = [run for name, run in bench_suite().scenarios() if name == "alibaba-week-kai"]
    assert captured["scenario"] == bench.scenario
    assert (captured["catalog"], captured["cloud"], captured["region"]) == (
        bench.catalog,
        bench.cloud,
        bench.region,
    )
    assert captured["policy"] == "tidal"
    assert len(bench.scenario.jobs) == 1604 and bench.scenario.duration == 7 * 86400 + 3600
    assert sum(1 for j in bench.scenario.jobs if j.gpu_fraction) == 513  # used part of one GPU


@pytest.mark.skipif(
    not (data_directory() / "traces" / "alibaba_gpu_v2023_openb_pods.csv").is_file(),
    reason="the Alibaba GPU trace is not in the data directory",
)
def test_the_benchmarks_whole_gpu_week_is_simulate_with_gpu_sharing_whole(captured: dict[str, Any]) -> None:
    with pytest.raises(Captured):
        main(["simulate", "--scenario", "alibaba-week", "--gpu-sharing", "whole"])
    (bench,) = [run for name, run in bench_suite().scenarios() if name == "alibaba-week-whole"]
    assert captured["scenario"] == bench.scenario
    assert not any(j.gpu_fraction for j in bench.scenario.jobs)


def test_a_built_in_scenario_whose_trace_is_missing_names_where_it_looked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TIDAL_DATA", str(tmp_path))
    assert main(["simulate", "--scenario", "alibaba-week"]) == 2
    err = capsys.readouterr().err
    assert f"alibaba-week: its trace {tmp_path}/traces/alibaba_gpu_v2023_openb_pods.csv is not there" in err
    assert "set TIDAL_DATA" in err


def shared_trace(tmp_path: Path) -> Path:
    path = tmp_path / "shared.csv"
    path.write_text(
        TRACE_HEADER
        + "half,0,3600,1,460,6000,12288,T4\n"  # used 0.46 of a T4
        + "whole,60,3600,1,1000,4000,16384,\n"
        + "eight,120,3600,8,1000,64000,262144,\n"
    )
    return path


def test_a_trace_pod_that_used_part_of_a_gpu_asks_kai_for_that_share_by_default(tmp_path: Path) -> None:
    half, whole, eight = load_trace(shared_trace(tmp_path))
    assert (half.gpus, half.gpu_fraction, half.partial_gpu, half.gpu_skus) == (0, 0.46, False, "T4")
    assert (whole.gpus, whole.gpu_fraction) == (1, 0.0)
    assert (eight.gpus, eight.gpu_fraction) == (8, 0.0)


def test_a_replayed_share_becomes_a_kai_gpu_fraction_pod_in_the_cluster(tmp_path: Path) -> None:
    half = load_trace(shared_trace(tmp_path), gpu_sharing="kai")[0]
    cluster = EmulatedCluster(lambda: 0.0)
    [key] = cluster.submit(half, 0.0)
    pod = cluster.pods[key].pod
    assert pod.annotations["gpu-fraction"] == "0.46" and not pod.requests.gpus
    assert pod.gpu_share is not None and pod.gpu_share.portion == 0.46


def test_whole_gpu_sharing_replays_a_share_as_one_whole_gpu_that_may_be_a_partial_size(
    tmp_path: Path,
) -> None:
    half, whole, _ = load_trace(shared_trace(tmp_path), gpu_sharing="whole")
    assert (half.gpus, half.gpu_fraction, half.partial_gpu) == (1, 0.0, True)
    assert (whole.gpus, whole.partial_gpu) == (1, False)


def test_the_gpu_sharing_flag_reaches_the_replayed_trace(tmp_path: Path, captured: dict[str, Any]) -> None:
    with pytest.raises(Captured):
        main(["simulate", "--trace", str(shared_trace(tmp_path)), "--gpu-sharing", "whole"])
    assert [j.gpus for j in captured["scenario"].jobs] == [1, 1, 8]


def test_an_unknown_gpu_sharing_mode_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--trace", str(shared_trace(tmp_path)), "--gpu-sharing", "mig"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--gpu-sharing: invalid choice: 'mig' (choose from" in err and "\n" not in err


def test_gpu_sharing_without_a_trace_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--scenario", "kai-day", "--gpu-sharing", "kai"]) == 2
    assert "--gpu-sharing only apply to a trace" in capsys.readouterr().err


def test_a_scenario_names_its_trace_gpu_sharing_or_is_told_which_are_known(tmp_path: Path) -> None:
    trace = {"file": "t.csv", "gpuSharing": "halves"}
    with pytest.raises(ScenarioError, match=r"trace.gpuSharing: 'halves' is not kai or whole"):
        parse_scenario({"trace": trace}, "s.yaml")
    spec = parse_scenario({"trace": {**trace, "gpuSharing": "whole"}}, "s.yaml").trace
    assert spec is not None and spec.gpu_sharing == "whole"
