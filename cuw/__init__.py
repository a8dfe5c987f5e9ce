"""cuda-wheels-forge: split one CUDA wheel build across N compile shards and a link job."""

import os as _os

__version__ = "0.1.0"

FORGE_ROOT = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
"""The checkout holding ``cuw/`` (and ``recipes/``, ``docs/``, ``pyproject.toml``); a string, so the
seat's per-call runtime, which imports this package, needs no pathlib."""
