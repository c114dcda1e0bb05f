"""The simulator: its invariants, the kai-day story, determinism, and clear errors for bad input."""

from __future__ import annotations

import itertools
import json
import time
from typing import TYPE_CHECKING

import pytest

from autoscaler.cli.main import main
from autoscaler.config.options import ConfigError
from autoscaler.sim.configuration import build_config
from autoscaler.sim.engine import Simulation
from autoscaler.sim.run import DEFAULT_CATALOG, _provider, simulate
from autoscaler.sim.scenario import ScenarioError, load_scenario, parse_scenario
from autoscaler.sim.trace import load_trace

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

    from autoscaler.core.offering import Instance, LaunchRequest
    from autoscaler.sim.run import Outcome


@pytest.fixture(scope="module")
def kai_day() -> Outcome:
    return simulate(load_scenario("kai-day"), bound=False)


def test_pods_never_run_on_a_node_without_room(kai_day: Outcome) -> None:
    # Replay the record: at every start, the node's running pods must fit its allocatable.
    rec = kai_day.record
    assert rec.pods and all(sp.started is None or sp.started >= sp.submitted for sp in rec.pods)
    starts = sorted(((sp.started, sp) for sp in rec.pods if sp.started is not None), key=lambda x: x[0])
    for t, sp in starts:
        same_node = [
            o
            for o in rec.pods
            if o.pod.node_name == sp.pod.node_name
            and o.started is not None
            and o.started <= t < (o.ended or rec.end)
        ]
        assert sum(o.gpus for o in same_node) <= 1  # every kai-day GPU node is a 1-GPU g4dn.xlarge


def test_the_clock_never_goes_back(kai_day: Outcome) -> None:
    times = [s.t for s in kai_day.record.samples]
    assert times == sorted(times)


def test_queues_never_exceed_their_limits(kai_day: Outcome) -> None:
    rec = kai_day.record
    limits = {"research": 8, "production": 12}
    for s in rec.samples:
        for queue, limit in limits.items():
            running = sum(
                sp.gpus
                for sp in rec.pods
                if sp.queue == queue and sp.started is not None and sp.started <= s.t < (sp.ended or rec.end)
            )
            assert running <= limit


def test_kai_day_never_launches_for_held_pods_nor_above_the_gpu_limit_and_ends_at_zero(
    kai_day: Outcome,
) -> None:
    s = kai_day.summary
    assert s["overLimitLaunches"] == 0
    assert s["gpuLimitViolations"] == 0
    assert s["podsNeverServed"] == 0
    assert s["nodes"]["gpuNodesAtEnd"] == 0
    assert max(sample.gpus_up for sample in kai_day.record.samples) == 16
    held = max(sample.pending.get("queue research at its GPU limit", 0) for sample in kai_day.record.samples)
    assert held == 2  # research's 9th and 10th pods wait over the queue limit


def test_a_queue_blind_baseline_launches_for_held_pods() -> None:
    out = simulate(load_scenario("kai-day"), policy="karpenter-like", bound=False)
    assert out.summary["overLimitLaunches"] >= 1


def test_the_same_scenario_gives_the_same_result() -> None:
    a = simulate(load_scenario("kai-day"), bound=False).summary
    b = simulate(load_scenario("kai-day"), bound=False).summary
    for doc in (a, b):
        doc.pop("wallSeconds")
        doc.pop("cpuSeconds")
    assert a == b


def test_a_slow_first_launch_does_not_reorder_the_instances_the_cloud_creates() -> None:
    # The cloud numbers instances in the order launches reach it, and spot waves reclaim by that order: a
    # launch that happens to be slow must not let thread timing change the run.
    scenario = parse_scenario(
        {
            "name": "slow-cloud",
            "duration": "01:00",
            "config": {"cloud": "aws", "region": "us-east-1", "zones": ["us-east-1a"]},
            "jobs": [{"at": "00:00", "name": "infer", "pods": 4, "gpus": 1, "cpu": "3", "memory": "12Gi"}],
        },
        "slow-cloud.yaml",
    )
    config = build_config(scenario, {}, catalog=str(DEFAULT_CATALOG), cloud="", region="")
    sim = Simulation(scenario, config, _provider)
    reached: list[str] = []
    calls = itertools.count()
    launch: Callable[[LaunchRequest], Instance] = sim.provider.launch

    def slow_first(request: LaunchRequest) -> Instance:
        if next(calls) == 0:
            time.sleep(0.2)
        reached.append(request.token)
        return launch(request)

    sim.provider.launch = slow_first
    sim.cluster.submit(scenario.jobs[0], 0.0)
    sim.cluster.schedule(0.0)
    launched = sim.controller.reconcile_once().launched
    assert len(launched) == 4
    assert reached == [o.token for o in launched]


def test_trace_sampling_is_deterministic_with_a_seed(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    rows = ["pod_id,submit_time_s,duration_s,num_gpu,gpu_milli,cpu_milli,memory_mib,gpu_spec"]
    rows += [
        f"p{i},{i * 60},{600},1,{500 if i % 2 else 1000},4000,16384,{'T4' if i % 3 == 0 else 'G2'}"
        for i in range(200)
    ]
    path.write_text("\n".join(rows) + "\n")
    a = load_trace(path, sample=0.3, seed=7, gpu_sharing="whole")
    assert a == load_trace(path, sample=0.3, seed=7, gpu_sharing="whole")
    assert 30 < len(a) < 90
    fractional = next(j for j in a if j.partial_gpu)
    assert fractional.gpus == 1
    assert {j.gpu_skus for j in a} <= {"T4", ""}  # undisclosed model codes constrain nothing


def test_a_report_is_written(tmp_path: Path) -> None:
    out = simulate(load_scenario("kai-day"), bound=False, report_dir=str(tmp_path))
    assert {"summary.json", "report.md"} <= set(out.files)
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert {
        "policy",
        "cost",
        "gpuHours",
        "utilization",
        "pendingSeconds",
        "nodes",
        "overLimitLaunches",
        "gpuLimitViolations",
        "podsNeverServed",
    } <= set(doc)
    assert "## Timeline" in (tmp_path / "report.md").read_text()


def test_an_unknown_scenario_key_is_one_clear_error() -> None:
    with pytest.raises(ScenarioError, match=r"bad.yaml: unknown key 'jbos'"):
        parse_scenario({"jbos": []}, "bad.yaml")


def test_a_job_in_an_undefined_queue_is_an_error() -> None:
    with pytest.raises(ScenarioError, match="queue 'nope' is not defined"):
        parse_scenario(
            {
                "queues": [{"name": "a", "quota": 1, "limit": 2}],
                "jobs": [{"at": "08:00", "name": "x", "queue": "nope"}],
            },
            "s.yaml",
        )


def test_bad_scenario_and_trace_files_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("jobs:\n  - {at: 'soon', name: x}\n")
    assert main(["simulate", "--scenario", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "jobs[0].at: 'soon' is not a time" in err
    trace = tmp_path / "t.csv"
    trace.write_text("pod_id,submit_time_s\np1,0\n")
    assert main(["simulate", "--scenario", "trace", "--trace", str(trace)]) == 2
    err = capsys.readouterr().err.strip()
    assert "missing columns duration_s, cpu_milli, memory_mib" in err


def test_a_pod_asking_for_a_gpu_model_runs_only_on_nodes_with_that_model() -> None:
    scenario = parse_scenario(
        {
            "name": "models",
            "duration": "03:00",
            "config": {"cloud": "aws", "region": "us-east-1", "zones": ["us-east-1a"]},
            "jobs": [
                {
                    "at": "00:10",
                    "name": "any",
                    "pods": 3,
                    "gpus": 1,
                    "cpu": "3",
                    "memory": "12Gi",
                    "duration": "1h",
                },
                {
                    "at": "00:40",
                    "name": "l4",
                    "pods": 3,
                    "gpus": 1,
                    "cpu": "3",
                    "memory": "12Gi",
                    "duration": "1h",
                    "gpuSkus": "L4",
                },
            ],
        },
        "models.yaml",
    )
    rec = simulate(scenario, bound=False).record
    kinds = {iid: inst.instance_type for iid, (inst, _) in rec.started.items()}
    ran_on = {sp.pod.name: kinds[sp.pod.node_name] for sp in rec.pods if sp.job == "l4"}
    assert len(ran_on) == 3 and all(t.startswith("g6.") for t in ran_on.values())  # g6 = NVIDIA L4


def test_every_pod_of_the_spot_storm_is_served_despite_reclaimed_nodes_and_gang_restarts() -> None:
    out = simulate(load_scenario("spot-storm"), bound=False)
    assert out.summary["podsNeverServed"] == 0
    assert out.record.cut_runs  # interruptions did cut runs short, and those pods ran again
    assert out.summary["gpuLimitViolations"] == 0


def test_non_preemptible_pods_over_their_queue_quota_cause_no_launch() -> None:
    # Quota 1, limit 2: KAI runs one of the five non-preemptible pods, so tidal buys one GPU, not two.
    scenario = parse_scenario(
        {
            "name": "quota",
            "duration": "02:00",
            "config": {"cloud": "aws", "region": "us-east-1", "zones": ["us-east-1a"]},
            "queues": [{"name": "serve", "quota": 1, "limit": 2}],
            "jobs": [
                {
                    "at": "00:00",
                    "name": "llm",
                    "queue": "serve",
                    "pods": 5,
                    "gpus": 1,
                    "cpu": "3",
                    "memory": "12Gi",
                    "duration": "1h",
                    "preemptible": False,
                }
            ],
        },
        "quota.yaml",
    )
    doc = simulate(scenario, bound=False).summary
    assert doc["overLimitLaunches"] == 0
    assert doc["nodes"]["launched"] == 1


def _scenario_error(doc: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(doc, "s.yaml")
    return str(caught.value)


def test_a_jobs_entry_that_is_not_a_list_is_one_clear_error() -> None:
    assert _scenario_error({"jobs": 5}) == "s.yaml: jobs: 5 is not a list"


def test_a_jobs_map_is_not_read_as_a_list_of_its_keys() -> None:
    assert _scenario_error({"jobs": {"at": "08:00", "name": "x"}}).startswith("s.yaml: jobs: {")


def test_a_quoted_false_is_not_read_as_true() -> None:
    err = _scenario_error({"jobs": [{"at": "08:00", "name": "x", "gang": "false"}]})
    assert err == "s.yaml: jobs[0].gang: 'false' is not true or false"


def test_a_negative_gpu_count_is_an_error_not_zero_gpus() -> None:
    err = _scenario_error({"jobs": [{"at": "08:00", "name": "x", "gpus": -1}]})
    assert err == "s.yaml: jobs[0].gpus: -1 is below 0"


def test_a_negative_job_memory_is_an_error() -> None:
    err = _scenario_error({"jobs": [{"at": "08:00", "name": "x", "memory": "-3Gi"}]})
    assert err == "s.yaml: jobs[0].memory: '-3Gi' is below 0"


def test_job_offerings_that_are_not_capacity_types_are_an_error() -> None:
    err = _scenario_error({"jobs": [{"at": "08:00", "name": "x", "offerings": "cheap"}]})
    assert err == "s.yaml: jobs[0].offerings: 'cheap' is not a list of spot, on-demand and reserved"


def test_two_jobs_of_one_name_are_an_error() -> None:
    err = _scenario_error({"jobs": [{"at": "08:00", "name": "x"}, {"at": "09:00", "name": "x"}]})
    assert err == "s.yaml: jobs[1].name: 'x' is already the name of jobs[0]"


def test_two_queues_of_one_name_are_an_error() -> None:
    err = _scenario_error({"queues": [{"name": "q"}, {"name": "q"}]})
    assert err == "s.yaml: queues[1].name: 'q' is already the name of queues[0]"


def test_a_queue_parent_that_is_not_a_queue_of_the_scenario_is_an_error() -> None:
    err = _scenario_error({"queues": [{"name": "q", "parent": "nope"}]})
    assert err == "s.yaml: queues[0].parent: 'nope' is not another queue of the scenario"


def test_a_spot_interruption_fraction_that_is_not_a_number_is_one_clear_error() -> None:
    err = _scenario_error({"spotInterruptions": [{"at": "10:00", "fraction": "half"}]})
    assert err == "s.yaml: spotInterruptions[0].fraction: 'half' is not a number from 0 to 1"


def test_a_spot_interruption_that_is_not_a_map_is_one_clear_error() -> None:
    assert _scenario_error({"spotInterruptions": [5]}) == "s.yaml: spotInterruptions[0]: 5 is not a map"


def test_an_unknown_capacity_outage_key_is_an_error() -> None:
    err = _scenario_error(
        {"capacityOutages": [{"at": "10:00", "until": "11:00", "instancetype": "g5.xlarge"}]}
    )
    assert err.startswith("s.yaml: capacityOutages[0]: unknown key 'instancetype'")


def test_a_capacity_outage_that_ends_before_it_starts_is_an_error() -> None:
    err = _scenario_error({"capacityOutages": [{"at": "10:00", "until": "09:00"}]})
    assert err == "s.yaml: capacityOutages[0].until: '09:00' is not after at ('10:00')"


def test_a_key_given_twice_in_a_scenario_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("jobs: []\njobs: [{at: '08:00', name: x}]\n")
    with pytest.raises(ScenarioError, match=r"s.yaml:2:1: invalid YAML: duplicate key 'jobs'"):
        load_scenario(path)


def test_a_scenario_file_that_is_not_utf8_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(b"\xff\xfe garbage")
    assert main(["simulate", "--scenario", str(path)]) == 2
    assert capsys.readouterr().err.strip() == f"tidal: error: {path}: not a UTF-8 text file"


TRACE_HEADER = "pod_id,submit_time_s,duration_s,num_gpu,gpu_milli,cpu_milli,memory_mib,gpu_spec\n"


def test_a_trace_memory_too_large_for_a_quantity_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(TRACE_HEADER + "p1,0,60,1,1000,4000,1e300,T4\n")
    with pytest.raises(ScenarioError, match=r"t.csv:2: memory_mib: '1e300' is out of range"):
        load_trace(path)


def test_a_trace_value_that_is_not_finite_is_called_that(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(TRACE_HEADER + "p1,0,inf,1,1000,4000,8192,T4\n")
    with pytest.raises(ScenarioError, match=r"t.csv:2: duration_s: 'inf' is not a finite number"):
        load_trace(path)


def test_a_trace_pod_id_on_two_rows_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(TRACE_HEADER + "p1,0,60,1,1000,4000,8192,T4\np1,10,60,1,1000,4000,8192,T4\n")
    with pytest.raises(ScenarioError, match=r"t.csv:3: pod_id 'p1' is already on line 2"):
        load_trace(path)


def test_a_report_path_that_is_a_file_exits_2_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report"
    report.write_text("")
    assert main(["simulate", "--scenario", "kai-day", "--no-bound", "--report", str(report)]) == 2
    out, err = capsys.readouterr()
    assert (out, err.strip()) == ("", f"tidal: error: --report: {report} is a file, not a directory")


def test_a_simulate_config_file_that_is_not_utf8_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"\xff\xfe")
    assert main(["simulate", "--scenario", "kai-day", "--no-bound", "--config", str(path)]) == 2
    assert capsys.readouterr().err.strip() == f"tidal: error: {path}: is not UTF-8 text"


def test_a_compression_that_is_not_a_finite_number_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "--scenario", "kai-day", "--compression", "nan"]) == 2
    assert "argument --compression: 'nan' is not a finite number" in capsys.readouterr().err


def _config_error(config: dict[str, Any], overrides: dict[str, Any], **kwargs: Any) -> str:
    scenario = parse_scenario({"name": "s", "config": config}, "s.yaml")
    with pytest.raises(ConfigError) as caught:
        build_config(
            scenario, overrides, catalog=str(DEFAULT_CATALOG), cloud="aws", region="us-east-1", **kwargs
        )
    return str(caught.value)


def test_a_bad_key_in_a_scenario_config_block_is_named_under_config() -> None:
    assert _config_error({"bogus": 1}, {}) == "scenario s: config.bogus: unknown key"


def test_a_bad_key_in_a_simulate_config_file_names_the_file() -> None:
    err = _config_error({"clusterGPULimit": 8}, {"clusterGPULimit": "lots"}, overrides_source="c.yaml")
    assert err.startswith("c.yaml: clusterGPULimit: ")


def test_bad_keys_in_both_the_scenario_and_the_config_file_each_name_their_place() -> None:
    err = _config_error({"bogus": 1}, {"other": 2}, overrides_source="c.yaml")
    assert err == "scenario s: config.bogus: unknown key; c.yaml: other: unknown key"


def test_simulate_names_the_config_file_that_has_a_bad_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "tuning.yaml"
    config.write_text("bogus: 1\n")
    assert main(["simulate", "--scenario", "kai-day", "--config", str(config)]) == 2
    assert f"{config}: bogus: unknown key" in capsys.readouterr().err
