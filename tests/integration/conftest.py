"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from tests.fakes.aws_cloud import sqs_client


@pytest.fixture
def sqs() -> Iterator[Any]:
    """SQS in moto, for spot interruption queues."""
    with mock_aws():
        yield sqs_client()
