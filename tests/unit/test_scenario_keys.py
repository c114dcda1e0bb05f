"""A misspelt scenario key is named with the key it was most likely meant to be."""

from __future__ import annotations

import pytest

from autoscaler.sim.scenario import ScenarioError, parse_scenario


def _error(doc: object) -> str:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(doc, "s.yaml")
    return str(caught.value)


def test_a_misspelt_job_key_is_answered_with_the_key_it_resembles() -> None:
    err = _error({"jobs": [{"at": "08:00", "name": "serve", "gpuSku": "L4"}]})
    assert err == "s.yaml: jobs[0]: unknown key 'gpuSku' (did you mean 'gpuSkus'?)"


def test_a_misspelt_top_level_key_is_answered_with_the_key_it_resembles() -> None:
    assert (
        _error({"capacityOutage": []})
        == "s.yaml: unknown key 'capacityOutage' (did you mean 'capacityOutages'?)"
    )


def test_a_snake_case_key_is_not_taken_for_its_camel_case_spelling() -> None:
    err = _error({"queues": [{"name": "research", "over_quota_weight": 2}]})
    assert err == "s.yaml: queues[0]: unknown key 'over_quota_weight' (did you mean 'overQuotaWeight'?)"


def test_an_unknown_key_unlike_any_lists_the_keys_the_entry_takes() -> None:
    err = _error({"trace": {"file": "t.csv", "zzz": 1}})
    assert err == "s.yaml: trace: unknown key 'zzz' (known: file, gpuSharing, start, window)"
