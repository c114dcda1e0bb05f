"""Drifted: the node was launched from a template the configuration no longer describes.

Every node tidal launches carries, in the label ``tidal.dev/node-template``, a digest of what shaped it and
cannot be changed on a running node without a new one: ``nodeLabels``, ``nodeTaints`` (the kubelet registers
with them), and whatever the provider says its node template is (an image, a launch template, boot
settings). When the digest of the running configuration differs, the node has drifted and is replaced, a new
node Ready first. A node without the label (launched before tidal wrote it) is never taken for drifted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from autoscaler.config.values import Config
from autoscaler.core.model import Node

__all__ = ["TEMPLATE_LABEL", "drifted", "template_digest"]

TEMPLATE_LABEL = "tidal.dev/node-template"


def template_digest(config: Config, provider_template: Mapping[str, str]) -> str:
    """A short digest (a valid label value) of what a node launched now is made from."""
    shape = {
        "nodeLabels": sorted(config.node_labels.items()),
        "nodeTaints": sorted(str(t) for t in config.node_taints),
        "provider": sorted((str(k), str(v)) for k, v in provider_template.items()),
    }
    # hashlib's OpenSSL bindings are imported only when a digest is made: tidal plan on a snapshot makes none.
    import hashlib

    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]


def drifted(node: Node, current: str) -> str:
    """Why the node has drifted ("" when it has not, or cannot tell)."""
    launched = node.labels.get(TEMPLATE_LABEL)
    if not launched or not current or launched == current:
        return ""
    return (
        f"launched from node template {launched}; the configuration now describes {current} "
        "(nodeLabels, nodeTaints or the provider's node template changed)"
    )
