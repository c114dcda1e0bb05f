"""Rendering the manifests under deploy/ with ``kubectl kustomize`` (kubectl >= 1.27 bundles kustomize v5;
it needs no network for local directories), cached per directory for the test session.

``render("deploy/overlays/eks+kai")`` renders an overlay combined with components next to it, as a user's own
kustomization does (``resources: [../eks]``, ``components: [../kai]``).
"""

from __future__ import annotations

import copy
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

__all__ = ["KUBECTL", "REPO", "KustomizeError", "find", "render"]

REPO = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")


class KustomizeError(Exception):
    """kubectl is missing or the kustomization does not render; the message names the directory."""


def _combined(directory: str) -> str:
    """A kustomization (in a temporary directory) of ``base+component+...``; kustomize wants relative paths."""
    base, *components = directory.split("+")
    where = tempfile.mkdtemp(prefix="tidal-kustomize-")
    source = REPO / base
    lines = ["apiVersion: kustomize.config.k8s.io/v1beta1", "kind: Kustomization", "resources:"]
    lines.append(f"  - {os.path.relpath(source, where)}")
    lines.append("components:")
    lines += [f"  - {os.path.relpath(source.parent / c, where)}" for c in components]
    with open(os.path.join(where, "kustomization.yaml"), "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    return where


@functools.cache
def _render(directory: str) -> tuple[dict[str, Any], ...]:
    if KUBECTL is None:
        raise KustomizeError("kubectl is not on PATH")
    path = _combined(directory) if "+" in directory else str(REPO / directory)
    done = subprocess.run(
        [KUBECTL, "kustomize", path], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise KustomizeError(f"kubectl kustomize {directory}: {done.stderr.strip()}")
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def render(directory: str) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize REPO/directory`` prints, as a fresh copy the caller may change."""
    return copy.deepcopy(list(_render(directory)))


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The one object of ``kind`` named ``name``; AssertionError naming what is there otherwise."""
    found = [o for o in objects if o.get("kind") == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found among {[o['kind'] for o in objects]}"
    return found[0]
