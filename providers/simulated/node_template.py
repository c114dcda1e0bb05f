"""What a node of the simulated cloud looks like: no labels or taints of its own, tidal's default kubelet
reservation. A simulated cloud standing in for a real one (``cloud: aws`` with the simulated provider, as
the simulator runs it) takes that cloud's provider's templates instead (see :func:`template_builder`)."""

from __future__ import annotations

from autoscaler.core.allocatable import default_reserved
from autoscaler.core.offering import NodeTemplate, Offering
from autoscaler.runtime.catalog import TemplateBuilder, offering_templates

__all__ = ["node_template", "template_builder"]

SIMULATED = "simulated"


def node_template(offering: Offering) -> NodeTemplate:
    """A simulated node: tidal's default reservation, nothing cloud-specific."""
    return NodeTemplate(reserved=default_reserved(offering))


def template_builder(cloud: str) -> TemplateBuilder:
    """The templates of the cloud the simulated provider stands in for: ``cloud``'s provider's, its own when
    it stands for itself or no provider is registered as ``cloud``."""
    if cloud == SIMULATED:
        return node_template
    return offering_templates(cloud) or node_template
