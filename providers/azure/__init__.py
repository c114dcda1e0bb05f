"""The Azure provider (``cloud: azure``): AKS nodes from node-pool scale sets, priced by Azure Retail Prices.

Registered as ``azure = "providers.azure:AzureProvider"`` in the ``tidal.providers`` entry-point group.
docs/azure.md explains the node pools it grows, the tags it writes and the role it needs.
"""

from providers.azure.provider import AzureProvider
from providers.azure.settings import AzureSettings, ProviderConfigError, parse_settings

__all__ = ["AzureProvider", "AzureSettings", "ProviderConfigError", "parse_settings"]
