"""The chart's values.schema.json: written by scripts/gen_chart_schema.py with tidal's configuration schema as
its `config` part, so the chart checks configuration exactly as tidal does and the file cannot go stale."""

from __future__ import annotations

import importlib.util
import json
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from autoscaler.config.reference import json_schema
from tests.fakes.helm_chart import CHART, EXAMPLES, REPO

if TYPE_CHECKING:
    from types import ModuleType

SCHEMA = CHART / "values.schema.json"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_chart_schema", REPO / "scripts" / "gen_chart_schema.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shipped() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA.read_text(encoding="utf-8"))
    return schema


def validator() -> Any:
    jsonschema = pytest.importorskip("jsonschema")
    return jsonschema.Draft202012Validator(shipped())


def test_the_committed_schema_is_what_the_generator_writes() -> None:
    assert SCHEMA.read_text(encoding="utf-8") == generator().render(), (
        "run: python scripts/gen_chart_schema.py"
    )


def test_the_generator_check_fails_on_a_stale_file(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = generator()
    stale = tmp_path / "values.schema.json"
    stale.write_text(SCHEMA.read_text(encoding="utf-8").replace('"minimum": 1', '"minimum": 2', 1))
    monkeypatch.setattr(module, "OUTPUT", stale)
    monkeypatch.setattr(module, "REPO", tmp_path)
    assert module.main(["--check"]) == 1
    assert "values.schema.json is out of date" in capsys.readouterr().err


def test_the_schema_is_a_valid_2020_12_json_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(shipped())


def test_the_config_value_is_checked_by_tidals_own_configuration_schema() -> None:
    schema, config = shipped(), json_schema()
    own = {k: v for k, v in config.items() if k not in ("$schema", "$defs", "title", "description")}
    assert {k: v for k, v in schema["properties"]["config"].items() if k != "description"} == own
    assert schema["$defs"] == config["$defs"]


@pytest.mark.parametrize("name", ["values", *EXAMPLES])
def test_the_charts_values_and_examples_satisfy_the_schema(name: str) -> None:
    path = CHART / "values.yaml" if name == "values" else CHART / "examples" / f"{name}.yaml"
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert [error.message for error in validator().iter_errors(document)] == []


def test_every_value_of_values_yaml_is_described_by_the_schema() -> None:
    def undescribed(values: Any, node: dict[str, Any], path: str) -> list[str]:
        if not isinstance(values, dict) or node.get("additionalProperties") is not False:
            return []
        missing = [f"{path}{k}" for k in values if k not in node["properties"]]
        for key, value in values.items():
            if key in node["properties"]:
                missing += undescribed(value, node["properties"][key], f"{path}{key}.")
        return missing

    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert undescribed(values, shipped(), "") == []
