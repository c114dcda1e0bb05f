"""The one place tidal's version is written: ``tidal --version`` shows it, and the package's metadata is built
from it (``[tool.setuptools.dynamic]`` in pyproject.toml reads this file without importing anything)."""

__version__ = "0.2.0"
