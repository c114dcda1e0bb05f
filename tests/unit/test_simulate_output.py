"""`tidal simulate`'s output: timeline stamps carry the day, a cut timeline says how much it left out, and
Ctrl-C leaves no empty report folder behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from autoscaler.cli.main import main
from autoscaler.sim.report import stamp

REPO = Path(__file__).resolve().parents[2]
EVENT = re.compile(r"^d\d+ \d{2}:\d{2}:\d{2}  ")


def test_a_timeline_stamp_carries_the_day_and_the_second() -> None:
    assert stamp(0) == "d1 00:00:00"
    assert stamp(86_400 + 13 * 3600 + 4 * 60 + 5) == "d2 13:04:05"
    assert stamp(6 * 86_400 + 23 * 3600 + 59 * 60 + 59.9) == "d7 23:59:59"


def test_a_cut_timeline_says_how_many_events_it_left_out_and_the_report_has_them_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report"
    code = main(
        ["simulate", "--scenario", "kai-day", "--no-bound", "--max-lines", "3", "--report", str(report)]
    )
    assert code == 0
    out = capsys.readouterr().out.splitlines()
    events = [line for line in out if EVENT.match(line)]
    assert len(events) == 3
    marker = out[3]
    found = re.fullmatch(
        r"\.\.\. (\d+) more events? not shown \(--max-lines (\d+) shows them all; (.+)/report\.md has every one\)",
        marker,
    )
    assert found is not None, marker
    left, total = int(found[1]), int(found[2])
    assert total == 3 + left and left > 0
    assert found[3] == str(report)
    written = [line for line in (report / "report.md").read_text().splitlines() if EVENT.match(line)]
    assert len(written) == total
    assert written[:3] == events


def test_a_timeline_shorter_than_the_limit_has_no_marker(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--scenario", "kai-day", "--no-bound"]) == 0
    assert "not shown" not in capsys.readouterr().out


def _interrupted(args: list[str], cwd: Path) -> tuple[int, str]:
    """Run `tidal simulate` in a process, Ctrl-C it once the run has started; its exit status and stderr."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "autoscaler", "simulate", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    first = proc.stderr.readline()  # "tidal: configuration: ...", printed as the simulation starts
    assert first.startswith("tidal: configuration:"), first
    proc.send_signal(signal.SIGINT)
    rest = proc.stderr.read()
    return proc.wait(timeout=60), rest


def test_ctrl_c_removes_the_report_folder_the_run_made_and_exits_130_with_one_line(tmp_path: Path) -> None:
    report = tmp_path / "report" / "kai-day"
    code, err = _interrupted(["--scenario", "kai-day", "--report", str(report)], REPO)
    assert code == 130
    assert err.splitlines() == [f"tidal: interrupted; {report} removed"]
    assert not report.exists()


def test_ctrl_c_leaves_a_report_folder_that_was_already_there(tmp_path: Path) -> None:
    report = tmp_path / "report"
    report.mkdir()
    (report / "notes.txt").write_text("mine\n")
    code, err = _interrupted(["--scenario", "kai-day", "--report", str(report)], REPO)
    assert code == 130
    assert err.splitlines() == [f"tidal: interrupted; nothing written to {report}"]
    assert sorted(p.name for p in report.iterdir()) == ["notes.txt"]
