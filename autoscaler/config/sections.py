"""Configuration sections that providers register: ``aws:``, ``gcp:``, or a third party's own.

A provider is found by name through the ``tidal.providers`` entry points (see :mod:`autoscaler.cloud`), and its
name is a top-level section of the configuration. A provider class that has a ``settings_model`` (a pydantic
model) has that section validated by it whenever the configuration is loaded, with the same one-line errors as
every other option; a provider without one checks its section, a plain map here, when it starts. So a cloud
added as a plugin brings its configuration with it, and core keeps no list of clouds.

tidal's own providers check their sections when they start (they need the cluster's zones and read the files
named there): loading one only to look for a model would import its cloud SDK into ``tidal plan``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable, Mapping
from importlib.metadata import EntryPoint
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from autoscaler.cloud import registered
from autoscaler.config.schema import ConfigError, raw_map

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["ConfiguredProvider", "check_section", "section_model", "section_names"]


class ConfiguredProvider(Protocol):
    """A provider class that validates its configuration section with its own model."""

    settings_model: ClassVar[type[BaseModel]]


@functools.lru_cache(maxsize=8)
def _registered(search_path: tuple[str, ...]) -> Mapping[str, EntryPoint]:
    # Keyed on sys.path: a plugin installed where Python looks is seen without a restart of the interpreter.
    return MappingProxyType({ep.name: ep for ep in registered()})


def section_names(documented: Iterable[str] = ()) -> tuple[str, ...]:
    """Every provider section a document may have: the registered providers, and ``documented`` ones."""
    return tuple(sorted({*_registered(tuple(sys.path)), *documented}))


DISTRIBUTION = "tidal-autoscaler"


def _model_of(entry_point: EntryPoint, own: bool) -> type[BaseModel] | None:
    if not own and entry_point.dist is not None and entry_point.dist.name == DISTRIBUTION:
        return None
    try:
        provider = entry_point.load()
    except ImportError:  # its cloud SDK is not installed: load_provider says which extra, when it is used
        return None
    # Here, not with this module: the defaults' empty sections load no provider, and so no pydantic.
    from pydantic import BaseModel

    model = getattr(provider, "settings_model", None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def section_model(name: str, *, own: bool = False) -> type[BaseModel] | None:
    """The model the provider registered as ``name`` validates its section with, if it has one; tidal's own
    providers' models only with ``own`` (the JSON Schema has them; loading the configuration does not)."""
    entry_point = _registered(tuple(sys.path)).get(name)
    return None if entry_point is None else _model_of(entry_point, own)


def check_section(name: str, value: Any) -> Mapping[str, Any]:
    """The section ``name`` as written, once its provider's model (if any) accepts it; ConfigError otherwise.

    Only a section with something in it loads its provider: an empty one is every default, and loading a
    provider imports its cloud SDK."""
    section = raw_map(value, name)
    model = section_model(name) if section else None
    if model is not None:
        from pydantic import ValidationError

        from autoscaler.config.fields import error_lines

        try:
            model.model_validate(dict(section))
        except ValidationError as err:
            raise ConfigError(error_lines(err, model, prefix=name)) from None
    return section
