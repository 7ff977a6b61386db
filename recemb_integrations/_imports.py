"""Optional-dependency guard shared by the adapters."""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, extra: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"this recemb integration needs {module.split('.')[0]!r}: pip install \"recemb[{extra}]\""
        ) from e
