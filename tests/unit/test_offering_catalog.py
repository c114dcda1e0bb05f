"""The offerings a controller plans with: fetched once per refresh interval, the last good list kept."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from autoscaler.cloud import ProviderError
from autoscaler.runtime.catalog import OfferingCatalog
from tests.builders import aws_offerings

if TYPE_CHECKING:
    from autoscaler.core.offering import Offering

T0 = 1_795_168_800.0


def test_the_offerings_are_fetched_again_only_after_the_refresh_interval() -> None:
    fetched = []

    def fetch() -> list[Offering]:
        fetched.append(1)
        return aws_offerings()

    c = OfferingCatalog(fetch, refresh_interval=300.0)
    first = c.offerings(T0)
    assert c.offerings(T0 + 299) is first
    assert len(fetched) == 1
    c.offerings(T0 + 300)
    assert len(fetched) == 2


def test_a_failed_refresh_keeps_the_last_good_list_and_says_why() -> None:
    answers: list[list[Offering] | ProviderError] = [
        aws_offerings(),
        ProviderError("DescribeInstanceTypes: HTTP 503"),
    ]

    def fetch() -> list[Offering]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    c = OfferingCatalog(fetch, refresh_interval=300.0)
    good = c.offerings(T0)
    assert c.offerings(T0 + 300) is good
    assert c.last_error == "ProviderError: DescribeInstanceTypes: HTTP 503"


def test_the_first_fetch_failing_raises_as_there_is_nothing_to_plan_with() -> None:
    def fetch() -> list[Offering]:
        raise ProviderError("no credentials")

    with pytest.raises(ProviderError):
        OfferingCatalog(fetch, refresh_interval=300.0).offerings(T0)
