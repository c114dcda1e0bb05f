"""The configuration with every option at its default, without reading ``defaults.yaml`` or importing pydantic.

``config.built_defaults`` is ``defaults.yaml`` as validation makes it, written as Python when the file changes
(scripts/gen_config_defaults.py; a test holds it equal to validating the file now). A command run without a
configuration file (``tidal plan`` on a snapshot, most of all) starts from it: importing pydantic and building
the models' validators to check defaults that were checked when they were written cost a tenth of a second at
every start. A configuration file, whatever it sets, is validated as a whole as before (``config.options``).
"""

from __future__ import annotations

import functools
from types import MappingProxyType

from autoscaler.config.sections import check_section, section_names
from autoscaler.config.values import Config

__all__ = ["default_config"]


@functools.cache
def default_config() -> Config:
    """The configuration with every option at its documented default."""
    # Imported here: the script that writes the module reads this one's, through config.options.
    from autoscaler.config import built_defaults

    # Every provider section: those defaults.yaml documents, and any a plugin registers (empty: its defaults).
    documented = built_defaults.PROVIDER_SECTIONS
    providers = {name: check_section(name, documented.get(name)) for name in section_names(documented)}
    return Config(**built_defaults.options(), providers=MappingProxyType(providers))
