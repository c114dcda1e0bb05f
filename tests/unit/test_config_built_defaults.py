"""The defaults a command starts from without a configuration file: ``defaults.yaml`` validated when it
changes and written as Python (autoscaler/config/built_defaults.py, by scripts/gen_config_defaults.py), so
that they are the validated defaults exactly, and reading them takes neither YAML nor pydantic."""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from autoscaler.config import built_defaults
from autoscaler.config.options import default_config, load_config, validated_defaults

REPO = Path(__file__).resolve().parents[2]
BUILT = REPO / "autoscaler" / "config" / "built_defaults.py"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_config_defaults", REPO / "scripts" / "gen_config_defaults.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_built_defaults_are_what_the_generator_writes_from_defaults_yaml() -> None:
    assert BUILT.read_text(encoding="utf-8") == generator().render(), (
        "run: python scripts/gen_config_defaults.py"
    )


def test_the_generator_check_fails_on_a_stale_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = generator()
    stale = tmp_path / "built_defaults.py"
    stale.write_text(
        BUILT.read_text(encoding="utf-8").replace('"max_pods_per_node": 110', '"max_pods_per_node": 11')
    )
    monkeypatch.setattr(module, "OUTPUT", stale)
    monkeypatch.setattr(module, "REPO", tmp_path)
    assert module.main(["--check"]) == 1
    assert "built_defaults.py is out of date" in capsys.readouterr().err


def test_the_built_defaults_are_the_validated_defaults_value_for_value_and_type_for_type() -> None:
    built, validated = default_config(), validated_defaults()
    assert built == validated
    # repr tells 2 from 2.0 and a tuple from a list, which == does not.
    for field in dataclasses.fields(built):
        assert repr(getattr(built, field.name)) == repr(getattr(validated, field.name)), field.name


def test_no_configuration_file_gives_the_built_defaults() -> None:
    assert load_config(None) is default_config()


def test_every_option_of_the_configuration_has_a_built_default() -> None:
    attributes = {f.name for f in dataclasses.fields(default_config())}
    assert set(built_defaults.options()) == attributes - {"providers"}


def test_the_defaults_are_read_without_pydantic() -> None:
    probe = (
        "import sys\n"
        "from autoscaler.config.layers import load_layers\n"
        "config, layers = load_layers([])\n"
        "assert config.cloud == 'aws' and not layers.files\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pydantic', 'pydantic_core'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout == "[]\n"
