"""The simulated cloud provider (``cloud: simulated``): offerings from a catalog CSV, instances in memory.

Registered as ``simulated = "providers.simulated:SimulatedProvider"`` in the ``tidal.providers`` entry-point
group. Used by the demo, the end-to-end tests and ``tidal simulate``; with ``registerNodes`` and a
:class:`NodeRegistrar` it also plays the kubelets that join the cluster.
"""

from providers.simulated.node import NodeRegistrar
from providers.simulated.node_template import node_template as offering_template
from providers.simulated.provider import TERMINATED_RETENTION, SimulatedProvider
from providers.simulated.settings import CapacityRule, Catalog, ProviderConfigError, SimulatedSettings

__all__ = [
    "TERMINATED_RETENTION",
    "CapacityRule",
    "Catalog",
    "NodeRegistrar",
    "ProviderConfigError",
    "SimulatedProvider",
    "SimulatedSettings",
    "offering_template",
]
