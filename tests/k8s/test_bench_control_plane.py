"""The benchmarks that start real control planes of their own still run: each short mode writes a whole result.

They ask for the session's control plane only so that they skip, or fail under CI, exactly when the
binaries are missing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.k8s.control_plane import ControlPlane
from tests.k8s.tidal import ROOT


def short_run(script: str, out: Path) -> dict[str, Any]:
    """``bench/<script> --short --out <out>``, which must exit 0; the result it wrote."""
    done = subprocess.run(
        [sys.executable, f"bench/{script}", "--short", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["commit"]
    return result


def test_the_short_apiserver_scale_benchmark_writes_a_well_formed_result(
    tmp_path: Path, control_plane: ControlPlane
) -> None:
    result = short_run("apiserver_scale.py", tmp_path / "apiserver_scale.json")
    assert result["benchmark"] == "apiserver_scale"
    assert (result["nodesSeen"], result["podsSeen"], result["podsPlanned"]) == (20, 400, 10)
    for key in ("syncSeconds", "reconcileSecondsMedian", "maxRssMiB"):
        assert isinstance(result[key], float) and result[key] > 0
    assert set(result["targets"]) == {"syncUnder60s", "reconcileUnder1s", "rssUnder1GiB"}


def test_the_short_side_by_side_benchmark_writes_a_well_formed_result(
    tmp_path: Path, control_plane: ControlPlane
) -> None:
    result = short_run("karpenter_side_by_side.py", tmp_path / "side.json")
    assert result["benchmark"] == "karpenter_side_by_side"
    for who, summary in result["results"]["pair"].items():
        assert who in ("tidal", "karpenter")
        assert summary["runs"] == 1
        [run] = summary["allRuns"]
        assert run["pods"] == 2 and run["podsBound"] == 2, (who, run)
        assert isinstance(summary["allBound"]["median"], float)
