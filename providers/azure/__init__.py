"""The Azure provider (``cloud: azure``): AKS nodes from node-pool scale sets, priced by Azure Retail Prices.

Registered as ``azure = "providers.azure:AzureProvider"`` in the ``tidal.providers`` entry-point group.
docs/azure.md explains the node pools it grows, the tags it writes and the role it needs.
``offering_template`` (what an AKS node of an offering looks like) needs no Azure SDK, so importing this
package loads it only when a name that needs it is first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from providers.azure.node_template import node_template as offering_template

if TYPE_CHECKING:
    from providers.azure.provider import AzureProvider
    from providers.azure.settings import AzureSettings, ProviderConfigError, parse_settings

__all__ = ["AzureProvider", "AzureSettings", "ProviderConfigError", "offering_template", "parse_settings"]

_LAZY = {
    "AzureProvider": "providers.azure.provider",
    "AzureSettings": "providers.azure.settings",
    "ProviderConfigError": "providers.azure.settings",
    "parse_settings": "providers.azure.settings",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # All of them, in this order, as an eager import would: a missing SDK is then named as it always was.
    for each in dict.fromkeys(_LAZY.values()):
        importlib.import_module(each)
    return getattr(importlib.import_module(module), name)
