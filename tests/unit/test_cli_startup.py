"""The command line starts fast and stops quietly: one version source, no Kubernetes client or cloud SDK
imported by `tidal --version` or `tidal plan`, nor by `tidal plan` a logging library, an event loop or a
solver it does not use, and a reader that closes the pipe early gets no traceback."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from autoscaler.cli import main as cli
from autoscaler.version import __version__
from tests.builders import pending_replica

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


def imported_by(argv: list[str], watched: tuple[str, ...] = HEAVY, *, whole: bool = False) -> set[str]:
    """The top-level packages among ``watched`` (``whole``: the modules, by their full names) that running
    ``tidal argv`` imported, in a fresh interpreter."""
    names = "set(sys.modules)" if whole else "{m.split('.')[0] for m in sys.modules}"
    probe = (
        "import sys\n"
        "from autoscaler.cli.main import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stdout.flush()\n"
        f"print('IMPORTED', sorted({names} & {set(watched)!r}))\n"
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


# What a plan of many pending pods does without: the exact step's model and solvers (only for batches of at
# most exactPlanMaxPods pods on new nodes), multi-node consolidation (only for a cluster with none pending),
# and the DRA devices and their CEL selectors (only for pods that name ResourceClaims).
UNUSED_BY_A_BIG_PLAN = (
    "autoscaler.core.planning.exact",
    "autoscaler.core.planning.exact_model",
    "autoscaler.core.planning.exact_patterns",
    "autoscaler.core.planning.exact_solve",
    "autoscaler.core.disruption.multinode",
    "autoscaler.core.dra_devices",
    "autoscaler.core.dra_selectors",
    "autoscaler.core.cel",
)


def _pending_pods(tmp_path: Path, n: int) -> str:
    """A ``kubectl get pods -o json`` list of ``n`` pending replicas of one Deployment, as the scheduler left
    them."""
    pods = [pending_replica(i) for i in range(n)]
    path = tmp_path / "pending.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}), encoding="utf-8")
    return str(path)


def test_tidal_plan_of_more_pods_than_the_exact_step_takes_imports_neither_it_nor_consolidation_nor_dra_devices(
    tmp_path: Path,
) -> None:
    argv = ["plan", "--snapshot", _pending_pods(tmp_path, 60), "--catalog", PLAN[4], "--now", PLAN[6]]
    assert imported_by(argv, UNUSED_BY_A_BIG_PLAN, whole=True) == set()


def test_tidal_plan_of_a_batch_the_exact_step_takes_loads_its_model(tmp_path: Path) -> None:
    argv = ["plan", "--snapshot", _pending_pods(tmp_path, 6), "--catalog", PLAN[4], "--now", PLAN[6]]
    assert "autoscaler.core.planning.exact" in imported_by(argv, UNUSED_BY_A_BIG_PLAN, whole=True)


# What only a configuration file or a YAML snapshot takes: without --config a plan starts from the built
# defaults, and a JSON snapshot is read without a YAML reader.
VALIDATOR_AND_YAML = ("pydantic", "pydantic_core", "yaml")


def test_tidal_plan_of_a_json_snapshot_without_a_configuration_file_imports_no_validator_or_yaml_reader(
    tmp_path: Path,
) -> None:
    argv = ["plan", "--snapshot", _pending_pods(tmp_path, 60), "--catalog", PLAN[4], "--now", PLAN[6]]
    assert imported_by(argv, VALIDATOR_AND_YAML) == set()


def test_the_command_ends_its_process_with_all_of_its_output_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Run as the command, tidal plan ends its process without freeing what it built: what it wrote must all
    # be out first, on both streams, with the exit status main() gives in-process. A small plan: a large one
    # goes past the stream's buffer as it is written.
    argv = ["plan", "--snapshot", _pending_pods(tmp_path, 3), "--catalog", PLAN[4], "--now", PLAN[6]]
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # as a user's shell runs it
    for output in ("json", "table"):
        assert cli.main([*argv, "--output", output]) == 0
        wanted = capsys.readouterr()
        done = subprocess.run(
            [sys.executable, "-m", "autoscaler.cli.main", *argv, "--output", output],
            cwd=REPO,
            env=buffered,
            capture_output=True,
            text=True,
        )
        assert (done.returncode, done.stdout, done.stderr) == (0, wanted.out, wanted.err)


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
