"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from tests.fakes.aws_cloud import (
    Network,
    ec2_client,
    make_network,
    moto_server_url,
    reset_moto_server,
    sqs_client,
)


@pytest.fixture
def sqs() -> Iterator[Any]:
    """SQS in moto, for spot interruption queues."""
    with mock_aws():
        yield sqs_client()


@pytest.fixture(scope="session")
def server() -> str:
    """A moto server shared by the tests that drive AWS over HTTP."""
    return moto_server_url()


@pytest.fixture
def network(server: str) -> Network:
    """A VPC with subnets in a freshly reset moto server."""
    reset_moto_server(server)
    return make_network(ec2_client(server))
