"""Shared fixtures: a configuration built the way users write it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from autoscaler.config.options import Config, config_from_mapping


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
