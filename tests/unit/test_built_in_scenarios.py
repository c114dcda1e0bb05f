"""Every scenario shipped with tidal is one `tidal simulate --scenario` knows and its help lists."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources

from autoscaler.sim.built_in import BUILT_IN


def test_every_shipped_scenario_file_is_a_built_in_name() -> None:
    shipped = {
        f.name.removesuffix(".yaml")
        for f in resources.files("autoscaler.sim").joinpath("scenarios").iterdir()
        if f.name.endswith(".yaml")
    }
    assert shipped == set(BUILT_IN)


def test_simulate_help_lists_every_built_in_scenario() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "autoscaler", "simulate", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={"COLUMNS": "400", "PATH": ""},
    ).stdout
    assert all(name in out for name in BUILT_IN)
    assert "spot-risk" in out
