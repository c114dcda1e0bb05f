"""The Azure provider (``cloud: azure``): AKS nodes from node-pool scale sets, priced by Azure Retail Prices.

Registered as ``azure = "providers.azure:AzureProvider"`` in the ``tidal.providers`` entry-point group.
docs/azure.md explains the node pools it grows, the tags it writes and the role it needs.
``offering_template`` (what an AKS node of an offering looks like) needs no Azure SDK, so importing this
package loads it only when a name that needs it is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.cloud import lazy_exports
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


__getattr__ = lazy_exports(__name__, _LAZY)
