"""Rendering the manifests under deploy/ with ``kubectl kustomize`` (kubectl >= 1.27 bundles kustomize v5;
it needs no network for local directories), cached per directory for the test session."""

from __future__ import annotations

import copy
import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

__all__ = ["KUBECTL", "REPO", "KustomizeError", "find", "render"]

REPO = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")


class KustomizeError(Exception):
    """kubectl is missing or the kustomization does not render; the message names the directory."""


@functools.cache
def _render(directory: str) -> tuple[dict[str, Any], ...]:
    if KUBECTL is None:
        raise KustomizeError("kubectl is not on PATH")
    done = subprocess.run(
        [KUBECTL, "kustomize", str(REPO / directory)], capture_output=True, text=True, timeout=60, check=False
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
