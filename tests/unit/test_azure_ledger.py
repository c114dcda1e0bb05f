"""Launch tokens in scale-set tags: which instance each token owns, and which tags are kept."""

from providers.azure.ledger import PENDING, VM, TokenRecord, parse_records, prune, resolve, token_key


def pending(token: str, highest_before: int, since: float) -> TokenRecord:
    return TokenRecord.pending(token, highest_before, since)


def test_a_uuid_token_is_the_tag_name_and_unsafe_tokens_are_hashed() -> None:
    assert (
        token_key("6f1c0a52-9a43-4b8e-8e0a-2c5e8d5b1a11")
        == "tidal.dev.token.6f1c0a52-9a43-4b8e-8e0a-2c5e8d5b1a11"
    )
    hashed = token_key("pods/default/train-0?")
    assert hashed.startswith("tidal.dev.token.") and "/" not in hashed and "?" not in hashed


def test_records_round_trip_through_tag_values_and_foreign_tags_are_ignored() -> None:
    record = pending("tok-a", 4, 1_800_000_000.9)
    tags = {record.key: record.value(), "aks-managed-poolName": "gpu", "tidal.dev.token.bad": "garbage"}
    assert parse_records(tags) == [TokenRecord(record.key, PENDING, 4, 1_800_000_000.0)]


def test_pending_launches_own_the_lowest_new_ids_in_launch_order() -> None:
    records = [pending("late", 2, 20), pending("early", 2, 10), TokenRecord(token_key("old"), VM, 1, 5)]
    assert resolve(records, [0, 1, 2, 3, 4]) == {
        token_key("early"): 3,
        token_key("late"): 4,
        token_key("old"): 1,
    }


def test_a_pending_launch_whose_instance_is_not_listed_yet_owns_nothing() -> None:
    assert resolve([pending("tok", 2, 10)], [0, 1, 2]) == {token_key("tok"): None}


def test_pruning_writes_down_found_instances_and_drops_what_ended_long_ago() -> None:
    records = [
        pending("found", 2, 100),
        pending("never", 2, 100),
        TokenRecord(token_key("evicted-long-ago"), VM, 1, 50),
        TokenRecord(token_key("evicted-just-now"), VM, 0, 50),
    ]
    missing = {token_key("evicted-long-ago"): 100.0, token_key("evicted-just-now"): 1000.0}
    kept = prune(records, [3], 1001.0, retention=600, pending_timeout=900, missing_since=missing)
    assert kept == [
        TokenRecord(token_key("found"), VM, 3, 100),
        TokenRecord(token_key("evicted-just-now"), VM, 0, 50),
    ]
