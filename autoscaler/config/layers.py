"""Configuration files laid over each other: every subcommand's repeated ``--config`` reads them this way.

Files are read in order; a later file's top-level option replaces the earlier value, and the sections in
``LAYERED_SECTIONS`` and the providers' sections merge option by option (``scaleDown: {maxParallelDrains: 2}`` keeps the other scaleDown
options of the files before). An option written in two files is worth a warning: the earlier value has no
effect, and whoever edits that file later will wonder why (a preset laid over a cloud's ``config.yaml`` that
also sets ``clusterGPULimit`` made raising the limit in ``config.yaml`` do nothing).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.config.defaults import default_config
from autoscaler.config.schema import ConfigError
from autoscaler.config.values import Config

__all__ = ["LAYERED_SECTIONS", "Layers", "Override", "load_layers", "read_layers"]

LAYERED_SECTIONS = ("scaleDown", "leaderElection", "kubeClient")
"""Sections a later file merges into option by option, as it does each provider's section (``aws``, ``gcp``…);
every other key it sets replaces the earlier value."""

PathLike = str | os.PathLike[str]


@dataclass(frozen=True, slots=True)
class Override:
    """An option (``clusterGPULimit``, ``scaleDown.nodeUnneededDuration``) set in two files; ``later`` wins."""

    key: str
    earlier: str
    later: str
    same_value: bool

    def describe(self) -> str:
        """One line for a person: which option, which files, which one is used."""
        if self.same_value:
            return f"{self.key} is set in {self.earlier} and again, to the same value, in {self.later}"
        return f"{self.key} is set in {self.earlier} and again in {self.later}; the value in {self.later} is used"


@dataclass(frozen=True, slots=True)
class Layers:
    """The files read, in order, the document they make together, and the options set more than once."""

    files: tuple[str, ...]
    document: Mapping[str, Any]
    overrides: tuple[Override, ...] = ()

    @property
    def source(self) -> str:
        """How errors name the configuration: the file, or the files joined by ``+``."""
        return " + ".join(self.files) if self.files else "the defaults"

    def describe(self) -> str:
        """Which files were read, for a person: ``a.yaml, then b.yaml (later files win)``."""
        if not self.files:
            return "the defaults (no --config given)"
        if len(self.files) == 1:
            return self.files[0]
        return ", then ".join(self.files) + " (later files win)"


def read_layers(paths: Sequence[PathLike]) -> Layers:
    """Read and lay ``paths`` over each other; not yet validated. A file given twice is an error: every one of
    its options would be reported as set twice, and the order it was meant to have is unknown."""
    names = [os.fspath(p) for p in paths]
    if not names:
        return Layers((), {})
    # The validator's module, only for files: without one, a command starts from the defaults without it.
    from autoscaler.config.options import provider_sections, read_document

    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError([f"{name} is given twice"], "--config")
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}  # option path -> the file that set it last
    overrides: list[Override] = []
    layered = {*LAYERED_SECTIONS, *provider_sections()}

    def set_by(path: str, name: str, same: bool) -> None:
        if path in origin:
            overrides.append(Override(path, origin[path], name, same))
        origin[path] = name

    for name in names:
        for raw_key, value in read_document(name).items():
            key = str(raw_key)
            before = merged.get(key)
            if key in layered and isinstance(value, Mapping) and isinstance(before, Mapping | None):
                earlier = dict(before or {})
                for sub, sub_value in value.items():
                    path = f"{key}.{sub}"
                    set_by(path, name, sub in earlier and earlier[sub] == sub_value)
                merged[key] = {**earlier, **value}
            else:
                set_by(key, name, key in merged and before == value)
                merged[key] = value
    return Layers(tuple(names), merged, tuple(overrides))


def load_layers(paths: Sequence[PathLike]) -> tuple[Config, Layers]:
    """The validated configuration of ``paths`` laid over each other (none: the defaults), and the layers.

    One file is exactly :func:`autoscaler.config.options.load_config`; with several, errors name them all
    (``a.yaml + b.yaml``), since a key may be wrong in one only in combination with another.
    """
    layers = read_layers(paths)
    if not layers.files:
        return default_config(), layers
    from autoscaler.config.options import config_from_mapping

    return config_from_mapping(layers.document, source=layers.source), layers
