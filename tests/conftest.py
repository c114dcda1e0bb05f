"""Shared fixtures: a configuration built the way users write it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from autoscaler.config import Config, config_from_mapping


@pytest.fixture
def make_config() -> Callable[..., Config]:
    """Build a Config from camelCase keys, as a user would write them in the ConfigMap."""

    def build(**keys: Any) -> Config:
        data = {"cloud": "aws", "region": "us-east-1", "zones": ["us-east-1a"], **keys}
        return config_from_mapping(data, source="test")

    return build
