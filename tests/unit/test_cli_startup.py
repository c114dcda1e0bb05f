"""The command line starts fast and stops quietly: one version source, no Kubernetes client or cloud SDK
imported by `tidal --version` or `tidal plan`, nor by `tidal plan` a logging library, an event loop or a
solver it does not use, and a reader that closes the pipe early gets no traceback."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from autoscaler.cli import main as cli
from autoscaler.version import __version__

REPO = Path(__file__).resolve().parents[2]
PLAN = [
    "plan",
    "--snapshot",
    "config/examples/snapshot-kai.yaml",
    "--catalog",
    "config/catalogs/aws-us-east-1.csv",
    "--now",
    "2026-11-20T10:05:00Z",
]
HEAVY = ("kubernetes", "boto3", "botocore", "google", "azure")
# What only the daemon (logging, the event loop) or a small batch's exact packing needs: each would add to
# every `tidal plan`'s start-up (structlog alone loads rich and pygments).
UNUSED_BY_PLAN = ("structlog", "rich", "pygments", "asyncio", "ortools")


def imported_by(argv: list[str], watched: tuple[str, ...] = HEAVY) -> set[str]:
    """The top-level packages among ``watched`` that running ``tidal argv`` imported, in a fresh
    interpreter."""
    probe = (
        "import sys\n"
        "from autoscaler.cli.main import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stdout.flush()\n"
        f"print('IMPORTED', sorted({{m.split('.')[0] for m in sys.modules}} & {set(watched)!r}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    line = next(x for x in out.splitlines() if x.startswith("IMPORTED "))
    return set(eval(line.removeprefix("IMPORTED ")))


def test_tidal_version_shows_the_version_written_in_autoscaler_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"tidal {__version__}\n"


def test_the_installed_package_carries_the_same_version_and_pyproject_does_not_repeat_it() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "autoscaler.version.__version__"}
    assert importlib.metadata.version("tidal-autoscaler") == __version__


def test_tidal_version_imports_neither_the_kubernetes_client_nor_a_cloud_sdk() -> None:
    assert imported_by(["--version"]) == set()


def test_tidal_plan_imports_neither_the_kubernetes_client_nor_a_cloud_sdk() -> None:
    assert imported_by(PLAN) == set()


def test_tidal_plan_imports_no_logging_library_event_loop_or_solver() -> None:
    assert imported_by(PLAN, UNUSED_BY_PLAN) == set()


def test_tidal_plan_as_json_imports_no_logging_library_event_loop_or_solver() -> None:
    assert imported_by([*PLAN, "--output", "json"], UNUSED_BY_PLAN) == set()


def test_a_plan_whose_reader_closed_the_pipe_stops_quietly() -> None:
    read, write = os.pipe()
    os.close(read)  # `tidal plan ... | head` once head has what it wanted
    try:
        done = subprocess.run(
            [sys.executable, "-m", "autoscaler.cli.main", *PLAN],
            cwd=REPO,
            stdout=write,
            stderr=subprocess.PIPE,
        )
    finally:
        os.close(write)
    stderr = done.stderr.decode()
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr
    assert done.returncode == cli.EXIT_BROKEN_PIPE
