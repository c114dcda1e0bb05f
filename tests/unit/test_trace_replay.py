"""Trace replay as the benchmarks run it: --trace alone uses the trace frame, `tidal simulate --scenario
alibaba-week` runs exactly the benchmark's week, and the summary says how many pods ran."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from autoscaler.cli import main
from autoscaler.sim import run as sim_run
from autoscaler.sim.scenario import data_directory

REPO = Path(__file__).resolve().parents[2]
TRACE_HEADER = "pod_id,submit_time_s,duration_s,num_gpu,gpu_milli,cpu_milli,memory_mib,gpu_spec\n"


class Captured(Exception):
    """Raised by the stand-in for the simulation, so a test sees what would have been run."""


@pytest.fixture
def captured(monkeypatch) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def record(scenario, layers, policy, catalog, cloud, region, *rest):
        seen.update(scenario=scenario, policy=policy, catalog=catalog, cloud=cloud, region=region)
        raise Captured

    monkeypatch.setattr(sim_run, "_simulate", record)
    return seen


def bench_suite():
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


def test_a_trace_without_a_scenario_is_replayed_in_the_trace_frame(tmp_path, captured):
    with pytest.raises(Captured):
        main(["simulate", "--trace", small_trace(tmp_path)])
    scenario = captured["scenario"]
    assert scenario.name == "trace"
    assert scenario.config["clusterGPULimit"] == 512  # the frame's configuration
    assert [j.name for j in scenario.jobs] == ["t-p1", "t-p2"]


def test_simulate_without_a_scenario_or_a_trace_is_a_usage_error(capsys):
    assert main(["simulate"]) == 2
    assert "give --scenario NAME|FILE, or --trace CSV" in capsys.readouterr().err


def test_the_trace_frame_alone_has_nothing_to_replay_and_says_so(capsys):
    assert main(["simulate", "--scenario", "trace"]) == 2
    assert "scenario trace has no jobs: give --trace CSV" in capsys.readouterr().err


def test_a_replayed_trace_says_how_many_pods_ran(tmp_path, capsys):
    assert main(["simulate", "--trace", small_trace(tmp_path), "--no-bound"]) == 0
    assert "pods ran 2 of 2, never served 0" in capsys.readouterr().out


def test_a_trace_window_runs_for_the_window_and_an_hour(tmp_path, captured):
    with pytest.raises(Captured):
        main(["simulate", "--trace", small_trace(tmp_path), "--window", "2h", "--compression", "2"])
    assert captured["scenario"].duration == 2 * 3600 / 2 + 3600


@pytest.mark.skipif(
    not (data_directory() / "traces" / "alibaba_gpu_v2023_openb_pods.csv").is_file(),
    reason="the Alibaba GPU trace is not in the data directory",
)
def test_simulate_alibaba_week_runs_exactly_what_the_benchmark_runs(captured):
    with pytest.raises(Captured):
        main(["simulate", "--scenario", "alibaba-week"])
    (bench,) = [run for name, run in bench_suite().scenarios() if name == "alibaba-week"]
    assert captured["scenario"] == bench.scenario
    assert (captured["catalog"], captured["cloud"], captured["region"]) == (
        bench.catalog,
        bench.cloud,
        bench.region,
    )
    assert captured["policy"] == "tidal"
    assert len(bench.scenario.jobs) == 1604 and bench.scenario.duration == 7 * 86400 + 3600


def test_a_built_in_scenario_whose_trace_is_missing_names_where_it_looked(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("TIDAL_DATA", str(tmp_path))
    assert main(["simulate", "--scenario", "alibaba-week"]) == 2
    err = capsys.readouterr().err
    assert f"alibaba-week: its trace {tmp_path}/traces/alibaba_gpu_v2023_openb_pods.csv is not there" in err
    assert "set TIDAL_DATA" in err
