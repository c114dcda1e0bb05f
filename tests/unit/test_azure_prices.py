"""Which Retail Prices rows price an offering, and how the price book is kept fresh."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from providers.azure.prices import API_SOURCE, PriceBook, Prices, classify_item, prices_from_items
from tests.fakes.azure_catalog import price_items

if TYPE_CHECKING:
    from typing import Any

T4 = "Standard_NC4as_T4_v3"


def row(**overrides: Any) -> dict[str, Any]:
    base = {
        "armSkuName": T4,
        "armRegionName": "eastus",
        "retailPrice": 0.526,
        "unitOfMeasure": "1 Hour",
        "type": "Consumption",
        "skuName": "NC4as T4 v3",
        "meterName": "NC4as T4 v3",
        "productName": "Virtual Machines NCasT4_v3 Series",
    }
    return {**base, **overrides}


def test_a_linux_pay_as_you_go_row_prices_the_on_demand_offering() -> None:
    assert classify_item(row(), "eastus") == (T4, "on-demand", 0.526)


def test_a_spot_row_is_recognised_by_its_suffix() -> None:
    spot = row(skuName="NC4as T4 v3 Spot", meterName="NC4as T4 v3 Spot", retailPrice=0.0627)
    assert classify_item(spot, "eastus") == (T4, "spot", 0.0627)


@pytest.mark.parametrize(
    "other",
    [
        {"skuName": "NC4as T4 v3 Low Priority", "meterName": "NC4as T4 v3 Low Priority"},
        {"productName": "Virtual Machines NCasT4_v3 Series Windows"},
        {"type": "DevTestConsumption"},
        {"type": "Reservation"},
        {"unitOfMeasure": "1/Month"},
        {"armRegionName": "westus2"},
        {"retailPrice": 0},
    ],
)
def test_rows_that_do_not_price_a_linux_hourly_vm_of_the_region_are_left_out(
    other: dict[str, Any],
) -> None:
    assert classify_item(row(**other), "eastus") is None


def test_the_fixture_price_sheet_yields_exactly_the_linux_prices_whatever_the_row_order() -> None:
    items = price_items("eastus")
    expected = {(T4, "on-demand"): 0.526, (T4, "spot"): 0.062699}
    for rows in (items, list(reversed(items))):
        prices = prices_from_items(rows, "eastus")
        assert {k: v for k, v in prices.items() if k[0] == T4} == expected


def test_the_primary_meter_region_wins_over_a_cheaper_secondary_one() -> None:
    rows = [
        row(retailPrice=0.4, isPrimaryMeterRegion=False),
        row(retailPrice=0.526, isPrimaryMeterRegion=True),
    ]
    assert prices_from_items(rows, "eastus") == {(T4, "on-demand"): 0.526}


def test_a_price_book_says_where_each_price_comes_from() -> None:
    book = PriceBook({(T4, "on-demand"): 0.526}, {(T4, "spot"): 0.06}, "azure.csv")
    assert book.price(T4, "on-demand") == (0.526, API_SOURCE)
    assert book.price(T4, "spot") == (0.06, "catalog file azure.csv (not in the Retail Prices API)")
    assert book.price("Standard_D4s_v5", "on-demand") is None


class Sheet:
    def __init__(self) -> None:
        self.calls, self.fail = 0, False

    def __call__(self) -> dict[tuple[str, str], float]:
        self.calls += 1
        if self.fail:
            raise ConnectionError("prices.azure.com unreachable")
        return {(T4, "on-demand"): 0.5 + self.calls / 100}


def test_prices_refresh_after_the_interval_and_keep_the_last_good_ones_through_an_outage() -> None:
    now = [0.0]
    sheet = Sheet()
    prices = Prices(sheet, refresh_interval=3600, clock=lambda: now[0])
    assert prices.book().price(T4, "on-demand") == (0.51, API_SOURCE)
    now[0] = 3599
    assert prices.book().price(T4, "on-demand") == (0.51, API_SOURCE) and sheet.calls == 1
    now[0], sheet.fail = 3600, True
    assert prices.book().price(T4, "on-demand") == (0.51, API_SOURCE) and sheet.calls == 2
    now[0] = 3630  # a failed refresh is retried after a minute, not on every call
    prices.book()
    assert sheet.calls == 2
    now[0], sheet.fail = 3661, False
    assert prices.book().price(T4, "on-demand") == (0.53, API_SOURCE)


def test_before_the_first_good_sheet_the_fallback_says_the_api_is_unavailable() -> None:
    sheet = Sheet()
    sheet.fail = True
    prices = Prices(
        sheet, refresh_interval=3600, fallback={(T4, "on-demand"): 0.6}, fallback_name="azure.csv"
    )
    assert prices.book().price(T4, "on-demand") == (
        0.6,
        "catalog file azure.csv (Retail Prices API unavailable)",
    )
