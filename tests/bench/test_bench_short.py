"""Every benchmark under bench/ still runs: its --short mode finishes and writes a well-formed result (the keys
the recorded results carry, numbers of the right type, the commit it ran on), and none of them touches
bench/results. The figures of a short run mean nothing and are not checked.

The six runs start together, as separate processes (the way the scripts are run), so the whole module takes
about as long as its slowest run on a machine with two cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
SAMPLE_CATALOG = ROOT / "config" / "catalogs" / "aws-us-east-1.csv"
# Script, its extra arguments: plan_scale plans against the catalog in the repository, not the shared one.
RUNS: Mapping[str, tuple[str, ...]] = {
    "plan_scale": ("--catalog", str(SAMPLE_CATALOG)),
    "plan_snapshot": (),
    "reconcile_scale": (),
    "scaleup_latency": (),
    "suite": (),
    "chaos": (),
}


def _recorded() -> dict[str, float]:
    return {p.name: p.stat().st_mtime for p in RESULTS.iterdir()} if RESULTS.exists() else {}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[int, str, Path]]]:
    """Each script's exit status, stderr and output directory, all run at once."""
    before = _recorded()
    base = tmp_path_factory.mktemp("bench")
    procs = {}
    for name, extra in RUNS.items():
        out = base / name
        procs[name] = (
            subprocess.Popen(
                [sys.executable, str(ROOT / "bench" / f"{name}.py"), "--short", "--out", str(out), *extra],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            ),
            out,
        )
    done = {}
    for name, (proc, out) in procs.items():
        _, err = proc.communicate(timeout=300)
        done[name] = (proc.returncode, err, out)
    yield done
    assert _recorded() == before, "a short benchmark run wrote to bench/results"


def result(
    finished: dict[str, tuple[int, str, Path]], script: str, name: str | None = None
) -> dict[str, Any]:
    code, err, out = finished[script]
    assert code == 0, err[-2000:]
    doc: dict[str, Any] = json.loads((out / f"{name or script}.json").read_text())
    assert doc["short"] is True
    assert isinstance(doc["commit"], str) and doc["commit"]
    return doc


def numbers(doc: Mapping[str, Any], kinds: Mapping[str, type | tuple[type, ...]]) -> None:
    for key, kind in kinds.items():
        assert isinstance(doc[key], kind) and not isinstance(doc[key], bool), (key, doc[key])


NUMBER = (int, float)


def test_plan_scale_runs_short(finished: dict[str, tuple[int, str, Path]]) -> None:
    doc = result(finished, "plan_scale")
    assert doc["benchmark"] == "plan_scale"
    numbers(
        doc,
        {
            "pods": int,
            "launches": int,
            "podsPlaced": int,
            "planSecondsMedian": NUMBER,
            "podsPerSecond": int,
            "costPerHour": NUMBER,
        },
    )
    assert doc["podsPlaced"] + doc["podsUnplaced"] == doc["pods"]


def test_plan_snapshot_runs_short(finished: dict[str, tuple[int, str, Path]]) -> None:
    doc = result(finished, "plan_snapshot")
    assert doc["benchmark"] == "plan_snapshot"
    for part in ("cluster", "pending"):
        numbers(
            doc[part],
            {
                "snapshotBytes": int,
                "parseSecondsMedian": NUMBER,
                "planSecondsMedian": NUMBER,
                "launches": int,
            },
        )


def test_reconcile_scale_runs_short(finished: dict[str, tuple[int, str, Path]]) -> None:
    doc = result(finished, "reconcile_scale")
    assert doc["benchmark"] == "reconcile_scale"
    numbers(
        doc,
        {
            "nodes": int,
            "pods": int,
            "decodeSeconds": NUMBER,
            "decodeFromReplayedPagesSeconds": NUMBER,
            "reconcileSecondsMedian": NUMBER,
            "maxRssMiB": NUMBER,
            "launchesPlanned": int,
        },
    )
    decisions = doc["decisions"]
    assert decisions["launches"] == doc["launchesPlanned"] > 0
    assert decisions["sameEveryReconcile"] is True
    assert len(decisions["digest"]) == len(decisions["statusDigest"]) == 16


def test_scaleup_latency_runs_short_and_times_every_pod(finished: dict[str, tuple[int, str, Path]]) -> None:
    doc = result(finished, "scaleup_latency")
    assert doc["benchmark"] == "scaleup_latency"
    assert set(doc["runs"]) == {"sparse", "stream", "cpu-stream"}
    for run in doc["runs"].values():
        assert run["launched"] == run["pods"] > 0 and run["nodes"] > 0
        numbers(
            run,
            {
                "p50Seconds": NUMBER,
                "p95Seconds": NUMBER,
                "p99Seconds": NUMBER,
                "maxSeconds": NUMBER,
                "usdPerHour": NUMBER,
            },
        )


def test_suite_runs_short_and_writes_its_table(finished: dict[str, tuple[int, str, Path]]) -> None:
    doc = result(finished, "suite", "kai-day--tidal")
    assert (doc["scenario"], doc["policy"]) == ("kai-day", "tidal")
    numbers(doc["cost"], {"total": NUMBER})
    numbers(doc, {"gpuHoursIdle": NUMBER, "overLimitLaunches": int, "wallSeconds": NUMBER})
    table = (finished["suite"][2] / "README.md").read_text()
    assert "| kai-day | tidal |" in table


def test_chaos_runs_short(finished: dict[str, tuple[int, str, Path]]) -> None:
    doc = result(finished, "chaos")
    assert doc["benchmark"] == "chaos"
    numbers(doc, {"seeds": int, "launches": int, "reconciles": int, "wallSeconds": NUMBER})
    assert all(isinstance(n, int) for n in doc["violations"].values())


def test_a_short_run_refuses_to_write_into_bench_results() -> None:
    before = _recorded()
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "chaos.py"), "--short", "--out", str(RESULTS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith(
        "is inside bench/results, which a --short run never writes to"
    )
    assert _recorded() == before
