from fractions import Fraction

import pytest

from autoscaler.core.quantity import (
    QuantityError,
    QuantityMemo,
    format_memory,
    format_quantity,
    parse_quantity,
    to_milli,
)
from autoscaler.core.resources import Resources


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        ("16Gi", Fraction(16 * 2**30)),
        ("1e3", Fraction(1000)),
        ("2k", Fraction(2000)),
        ("100M", Fraction(100_000_000)),
        ("0.1", Fraction(1, 10)),
        ("250u", Fraction(250, 10**6)),
        ("5n", Fraction(5, 10**9)),
        ("1.5Ki", Fraction(1536)),
        ("12E-1", Fraction(6, 5)),
        (".5", Fraction(1, 2)),
        ("+3", Fraction(3)),
        (2, Fraction(2)),
        (0.25, Fraction(1, 4)),
    ],
)
def test_every_kubernetes_quantity_form_parses_exactly(text: str | float, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


def test_decimal_quantities_do_not_drift_like_floats() -> None:
    assert to_milli("0.1") + to_milli("0.2") == to_milli("0.3") == 300


@pytest.mark.parametrize("garbage", ["", "abc", "1.2.3", "5 Gi", "Gi", "1GiB", "--1", "1e", "nan", "0x10"])
def test_garbage_is_rejected_with_the_value_in_the_message(garbage: str) -> None:
    with pytest.raises(QuantityError, match="is not a quantity"):
        parse_quantity(garbage)


def test_a_quantity_larger_than_the_api_server_can_store_is_out_of_range() -> None:
    with pytest.raises(QuantityError, match=r"resources.requests.cpu: '1e30' is out of range"):
        to_milli("1e30", field="resources.requests.cpu")


def test_sub_milli_amounts_round_up_like_the_api_server() -> None:
    assert to_milli("1u") == 1
    assert to_milli("1500u") == 2


def test_booleans_are_not_quantities() -> None:
    with pytest.raises(QuantityError):
        parse_quantity(True)


def test_formatting_round_trips_whole_and_milli_values() -> None:
    assert format_quantity(1500) == "1500m"
    assert format_quantity(2000) == "2"
    assert format_memory(to_milli("16Gi")) == "16Gi"
    assert format_memory(to_milli("1536Mi")) == "1536Mi"


@pytest.mark.parametrize("spaced", [" 1", "1 ", "500m\n", "\t2Gi"])
def test_spaces_around_a_quantity_are_rejected_as_kubernetes_parse_quantity_does(spaced: str) -> None:
    with pytest.raises(QuantityError, match=r"is not a quantity \(remove the spaces\)"):
        to_milli(spaced, field="resources.requests.cpu")


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("1E", 10**18),
        ("10Pi", 10 * 2**50),  # memory above 8 PiB
        ("7Ei", 7 * 2**60),
        ("9223372036854775807", 2**63 - 1),  # the largest quantity Kubernetes represents
    ],
)
def test_quantities_up_to_the_kubernetes_maximum_are_held_exactly(text: str, units: int) -> None:
    assert to_milli(text) == units * 1000


@pytest.mark.parametrize("too_big", ["8Ei", "9223372036854775808", "1e19"])
def test_beyond_two_to_the_63_is_out_of_range_naming_the_field(too_big: str) -> None:
    with pytest.raises(QuantityError, match=rf"^status.capacity.memory: '{too_big}' is out of range"):
        to_milli(too_big, field="status.capacity.memory")


def test_a_decoders_memo_reads_every_quantity_as_parsing_does_past_its_bound_and_after_an_error() -> None:
    memo = QuantityMemo(max_entries=2)
    values: list[str | int | float] = ["500m", "1Gi", "500m", 2, 2.5, "1Gi", "100Mi"]

    with pytest.raises(QuantityError, match=r"resources.requests.cpu: '1e30' is out of range"):
        to_milli("1e30", field="resources.requests.cpu", memo=memo)
    with pytest.raises(QuantityError, match=r"cpu: \[1\] is not a quantity"):
        to_milli([1], field="cpu", memo=memo)  # type: ignore[arg-type]

    assert [to_milli(v, memo=memo) for v in values] == [to_milli(v) for v in values]


def test_a_decoders_memo_gives_a_resource_map_read_before_the_same_bag() -> None:
    memo = QuantityMemo()
    first = Resources.parse({"cpu": "500m", "memory": "1Gi"}, memo=memo)
    again = Resources.parse({"cpu": "500m", "memory": "1Gi"}, memo=memo)

    assert again is first
    assert again == Resources.parse({"cpu": "500m", "memory": "1Gi"})
    assert Resources.parse({"cpu": "1", "memory": "1Gi"}, memo=memo) == Resources.of(cpu=1, memory_mib=1024)


def test_a_decoders_memo_still_refuses_a_map_it_refused_naming_the_field_of_each_reading() -> None:
    memo = QuantityMemo()
    bad = {"cpu": "500m", "nvidia.com/gpu": "500m"}
    with pytest.raises(
        QuantityError, match=r"^spec.containers\[0\].resources.requests.nvidia.com/gpu: '500m'"
    ):
        Resources.parse(bad, field="spec.containers[0].resources.requests", memo=memo)
    with pytest.raises(
        QuantityError, match=r"^spec.containers\[1\].resources.requests.nvidia.com/gpu: '500m'"
    ):
        Resources.parse(bad, field="spec.containers[1].resources.requests", memo=memo)


def test_a_decoders_memo_refuses_a_boolean_after_the_number_it_equals() -> None:
    memo = QuantityMemo()
    assert Resources.parse({"nvidia.com/gpu": 1}, memo=memo) == Resources({"nvidia.com/gpu": 1000})
    with pytest.raises(QuantityError, match=r"requests.nvidia.com/gpu: True is not a quantity"):
        Resources.parse({"nvidia.com/gpu": True}, field="requests", memo=memo)
    assert Resources.parse({"nvidia.com/gpu": "1"}, memo=memo) == Resources.parse({"nvidia.com/gpu": "1"})
    with pytest.raises(QuantityError, match=r"requests.nvidia.com/gpu: True is not a quantity"):
        Resources.parse({"nvidia.com/gpu": True}, field="requests", memo=memo)


def test_a_decoders_memo_starts_again_past_its_bound_and_reads_maps_as_parsing_does() -> None:
    memo = QuantityMemo(max_entries=2)
    maps = [{"cpu": "1"}, {"cpu": "2"}, {"cpu": "3"}, {"cpu": "1"}, {"memory": "1Gi", "cpu": "1"}]

    assert [Resources.parse(m, memo=memo) for m in maps] == [Resources.parse(m) for m in maps]
    assert len(memo.maps) <= 2
