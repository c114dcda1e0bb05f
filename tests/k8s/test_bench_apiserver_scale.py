"""The real-API-server scale benchmark still runs: its short mode completes and writes a whole result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.k8s.control_plane import ControlPlane
from tests.k8s.tidal import ROOT


def test_the_short_apiserver_scale_benchmark_writes_a_well_formed_result(
    tmp_path: Path, control_plane: ControlPlane
) -> None:
    # The benchmark starts a control plane of its own (it fills it with Nodes); asking for the session's
    # makes this skip, or fail under CI, exactly when the binaries are missing.
    out = tmp_path / "apiserver_scale.json"
    done = subprocess.run(
        [sys.executable, "bench/apiserver_scale.py", "--short", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["benchmark"] == "apiserver_scale" and result["commit"]
    assert (result["nodesSeen"], result["podsSeen"], result["podsPlanned"]) == (20, 400, 10)
    for key in ("syncSeconds", "reconcileSecondsMedian", "maxRssMiB"):
        assert isinstance(result[key], float) and result[key] > 0
    assert set(result["targets"]) == {"syncUnder60s", "reconcileUnder1s", "rssUnder1GiB"}
