"""Optional-dependency guard shared by the adapters."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["extra_hint", "require"]


def extra_hint(extra: str) -> str:
    """How to install an extra: recemb is installed from its clone (README, "Installing from a clone")."""
    return f"bash scripts/install.sh {extra} in recemb's clone, or pip install -e \".[{extra}]\" there"


def require(module: str, extra: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"this recemb integration needs {module.split('.')[0]!r}, of the {extra!r} extra: {extra_hint(extra)}"
        ) from e
