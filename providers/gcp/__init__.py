"""The GCP provider (``cloud: gcp``): GKE nodes from Compute Engine Spot and on-demand offerings.

Registered as ``gcp = "providers.gcp:GcpProvider"`` in the ``tidal.providers`` entry-point group. How to set
it up (node pool template, IAM role, Workload Identity, GPU drivers) is in docs/gcp.md. ``offering_template``
(what a GKE node of an offering looks like) needs no Google SDK, so importing this package loads it only when
a name that needs it is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.cloud import lazy_exports
from providers.gcp.node_template import node_template as offering_template

if TYPE_CHECKING:
    from providers.gcp.clients import ClientFactory
    from providers.gcp.provider import GcpProvider
    from providers.gcp.settings import (
        GcpSettings,
        NodePoolRef,
        ProviderConfigError,
        TemplateRef,
        parse_settings,
    )

__all__ = [
    "ClientFactory",
    "GcpProvider",
    "GcpSettings",
    "NodePoolRef",
    "ProviderConfigError",
    "TemplateRef",
    "offering_template",
    "parse_settings",
]

_LAZY = {
    "ClientFactory": "providers.gcp.clients",
    "GcpProvider": "providers.gcp.provider",
    "GcpSettings": "providers.gcp.settings",
    "NodePoolRef": "providers.gcp.settings",
    "ProviderConfigError": "providers.gcp.settings",
    "TemplateRef": "providers.gcp.settings",
    "parse_settings": "providers.gcp.settings",
}


__getattr__ = lazy_exports(__name__, _LAZY)
