"""GPU model names as clouds and users spell them, reduced to one name per kind of silicon.

``"A100-80GB"``, ``"nvidia-a100-80gb"`` and ``"NVIDIA A100"`` all name an A100; the node label
``tidal.dev/gpu-model``, the ``gpuSKUs`` setting and the GPU-SKU annotation compare these reduced names.
"""

from __future__ import annotations

import re

__all__ = ["gpu_model_name", "parse_gpu_sku"]

# Names that are the same silicon for scheduling purposes (A10G is AWS's A10; T4g the Graviton-host T4).
_GPU_ALIASES = {"A10G": "A10", "T4G": "T4", "RTXPROSERVER6000": "RTXPRO6000", "TESLAT4": "T4"}
_MEM_SUFFIX = re.compile(r"^(?P<model>.+?)[-_ ]?(?P<mem>\d+)\s*G[B]?$", re.IGNORECASE)
_M_SUFFIX = re.compile(r"^(?P<model>[A-Z]+\d+)M(?P<mem>\d+)$", re.IGNORECASE)
_SEPARATORS = re.compile(r"[\s\-_]")
_DIGIT = re.compile(r"\d")


def _squash(name: str) -> str:
    text = name.upper().replace("NVIDIA", "").replace("TESLA", "")
    text = _SEPARATORS.sub("", text)
    return _GPU_ALIASES.get(text, text)


def parse_gpu_sku(sku: str) -> tuple[str, int | None]:
    """``"A100-80GB"`` → ``("A100", 80)``; ``"V100M32"`` → ``("V100", 32)``; ``"L4"`` → ``("L4", None)``."""
    text = sku.strip()
    for pattern in (_M_SUFFIX, _MEM_SUFFIX):
        m = pattern.match(text)
        if m and _DIGIT.search(m.group("model")):
            return _squash(m.group("model")), int(m.group("mem"))
    return _squash(text), None


def gpu_model_name(model: str) -> str:
    """The normalised model name used in node labels (``A10G`` → ``A10``, ``H100 NVL`` → ``H100NVL``)."""
    return parse_gpu_sku(model)[0] if model else ""
