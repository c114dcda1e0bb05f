"""docs/configuration.md is generated from config/default.yaml and never drifts from it."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "config" / "default.yaml"
REFERENCE = REPO / "docs" / "configuration.md"


@functools.cache
def generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_config_docs", REPO / "scripts" / "gen_config_docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def option_paths(mapping: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in mapping.items():
        yield prefix + key
        if isinstance(value, dict) and value and key not in ("simulated", "aws", "gcp", "azure"):
            yield from option_paths(value, f"{prefix}{key}.")


def test_the_reference_is_what_the_generator_writes_from_default_yaml() -> None:
    expected = generator().render(DEFAULT.read_text(encoding="utf-8"))
    assert REFERENCE.read_text(encoding="utf-8") == expected, "run: python scripts/gen_config_docs.py"


def test_every_option_of_default_yaml_has_a_row() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    missing = [p for p in option_paths(yaml.safe_load(DEFAULT.read_text())) if f"| `{p}` |" not in text]
    assert missing == []


def test_a_row_carries_the_default_and_the_comment_of_its_option() -> None:
    rendered = generator().render(
        "# Most GPUs tidal may launch; null means no limit.\nclusterGPULimit: null\n"
    )
    assert "| `clusterGPULimit` | `null` | Most GPUs tidal may launch; null means no limit. |" in rendered


def test_a_pipe_in_a_default_does_not_break_the_table() -> None:
    rendered = generator().render('# Types.\ninstanceTypeRegexp: "(g5|p4d)\\\\..*"\n')
    assert r"| `instanceTypeRegexp` | `" + '"(g5\\|p4d)' in rendered


def test_an_option_without_a_comment_is_refused() -> None:
    module = generator()
    with pytest.raises(module.SourceError, match="maxNodes has no comment"):
        module.render("# Cloud.\ncloud: aws\nmaxNodes: null\n")
