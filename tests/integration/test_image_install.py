"""What the image's build stage does, without Docker: install the package from exactly the files the
Dockerfile copies into a fresh virtualenv, plain and then with each cloud's extra, and run ``tidal --version``."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Importable proof that an extra brought its cloud's SDK (and the plain install none of them).
SDKS = {"aws": "boto3", "gcp": "google.cloud.compute_v1", "azure": "azure.mgmt.compute"}


def build_context(target: Path) -> Path:
    """The files the Dockerfile's build stage copies, laid out as it lays them out under /src."""
    dockerfile = (REPO / "Dockerfile").read_text()
    build_stage = dockerfile.split("\nFROM ")[1]  # the first stage: after the global ARGs
    for line in build_stage.splitlines():
        if not line.startswith("COPY "):
            continue
        words = shlex.split(line)
        if words[1].startswith("--from="):
            continue
        sources, destination = words[1:-1], words[-1]
        for source in sources:
            dest = target / (source if destination.endswith("/") else destination)
            if (REPO / source).is_dir():
                ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
                shutil.copytree(REPO / source, dest, ignore=ignore)
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / source, dest)
    return target


def run(*command: str | Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, (
        f"{' '.join(map(str, command))}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    )
    return done


def importable(python: Path, module: str) -> bool:
    done = subprocess.run(
        [str(python), "-c", f"import {module}"], capture_output=True, timeout=60, check=False
    )
    return done.returncode == 0


@pytest.mark.slow
def test_a_fresh_virtualenv_gets_a_working_tidal_plain_and_with_each_cloud_extra(tmp_path: Path) -> None:
    found = re.search(r'__version__ = "(.+)"', (REPO / "autoscaler" / "version.py").read_text())
    assert found is not None
    version = found.group(1)
    context = build_context(tmp_path / "src")
    venv.create(tmp_path / "venv", with_pip=True, symlinks=True)
    python, tidal = tmp_path / "venv" / "bin" / "python", tmp_path / "venv" / "bin" / "tidal"
    pip: list[str | Path] = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]

    run(*pip, context)
    assert run(tidal, "--version").stdout.strip() == f"tidal {version}"
    assert [sdk for sdk in SDKS.values() if importable(python, sdk)] == []

    for extra, sdk in SDKS.items():
        run(*pip, f"{context}[{extra}]")
        assert run(tidal, "--version").stdout.strip() == f"tidal {version}", extra
        assert importable(python, sdk), f"[{extra}] did not install {sdk}"
