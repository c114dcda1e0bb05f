"""The side-by-side benchmark against the real Karpenter still runs: its short mode writes a whole result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.k8s.control_plane import ControlPlane
from tests.k8s.tidal import ROOT


def test_the_short_side_by_side_benchmark_writes_a_well_formed_result(
    tmp_path: Path, control_plane: ControlPlane
) -> None:
    out = tmp_path / "side.json"
    done = subprocess.run(
        [sys.executable, "bench/karpenter_side_by_side.py", "--short", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["benchmark"] == "karpenter_side_by_side" and result["commit"]
    pair = result["results"]["pair"]
    for who, summary in pair.items():
        assert who in ("tidal", "karpenter")
        assert summary["runs"] == 1
        [run] = summary["allRuns"]
        assert run["pods"] == 2 and run["podsBound"] == 2, (who, run)
        assert isinstance(summary["allBound"]["median"], float)
