"""Shared fixtures: a configuration built the way users write it, and the real control plane."""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from autoscaler.config.options import Config, config_from_mapping
from tests.k8s.assets import AssetsMissing, binaries
from tests.k8s.control_plane import ControlPlane


@pytest.fixture
def make_config() -> Callable[..., Config]:
    """Build a Config from camelCase keys, as a user would write them in the ConfigMap."""

    def build(**keys: Any) -> Config:
        data = {"cloud": "aws", "region": "us-east-1", "zones": ["us-east-1a"], **keys}
        return config_from_mapping(data, source="test")

    return build


@pytest.fixture(autouse=True)
def _tidal_log_handler_ends_with_its_test() -> Iterator[None]:
    """A test that configures logging binds tidal's handler to pytest's capture stream, which closes when the
    test ends; a thread still logging afterwards would then write to a closed file."""
    yield
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == "tidal"]:
        root.removeHandler(handler)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A real etcd, kube-apiserver, kube-scheduler and kube-controller-manager for the whole session.

    Without binaries the tests that use it skip with one line saying what to set; under ``CI=true`` they
    must run, so a missing binary fails them instead.
    """
    try:
        found = binaries()
    except AssetsMissing as missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {missing}", pytrace=False)
        pytest.skip(str(missing))
    plane = ControlPlane(found, tmp_path_factory.mktemp("control-plane"))
    # Stopped even when the session ends abnormally (an interrupted run), never left behind.
    atexit.register(plane.stop)
    plane.start()
    yield plane
    plane.stop()


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the mark it adds
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test on the session's real control plane is marked ``control_plane`` (``make test`` runs them in
    one process beside another that runs the rest); the least-privilege checks read the audit log of every
    scenario that ran tidal there, so they run last."""
    for item in items:
        # The contract suite asks for the control plane only for its "real" half, at run time.
        if "control_plane" in getattr(item, "fixturenames", ()) or "test_kube_contract.py" in item.nodeid:
            item.add_marker(pytest.mark.control_plane)
    last = [i for i in items if i.nodeid.startswith("tests/e2e/control_plane/test_least_privilege.py")]
    items[:] = [i for i in items if i not in last] + last
