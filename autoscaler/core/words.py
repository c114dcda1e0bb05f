"""Counts in words, as every line tidal prints them: ``1 pod``, ``2 pods``, ``1 GPU``, ``0 nodes``."""

from __future__ import annotations

__all__ = ["count"]


def count(n: float, word: str, plural: str = "") -> str:
    """``n`` and ``word``, in the plural unless ``n`` is one (``plural`` when the word does not take an s)."""
    return f"{n:g} {word if n == 1 else plural or word + 's'}"
