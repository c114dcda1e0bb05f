"""The GCP provider (``cloud: gcp``): GKE nodes from Compute Engine Spot and on-demand offerings.

Registered as ``gcp = "providers.gcp:GcpProvider"`` in the ``tidal.providers`` entry-point group. How to set
it up (node pool template, IAM role, Workload Identity, GPU drivers) is in docs/gcp.md.
"""

from providers.gcp.clients import ClientFactory
from providers.gcp.provider import GcpProvider
from providers.gcp.settings import GcpSettings, NodePoolRef, ProviderConfigError, TemplateRef, parse_settings

__all__ = [
    "ClientFactory",
    "GcpProvider",
    "GcpSettings",
    "NodePoolRef",
    "ProviderConfigError",
    "TemplateRef",
    "parse_settings",
]
