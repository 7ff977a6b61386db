"""The architectures recemb runs, in one list: each package under ``recemb/core/architectures/`` exports its
``ARCHITECTURE`` (an ``Architecture``), registered here.

Detection asks each architecture in the list's order and takes the first that claims the folder. Each claims only
its own formats (a config.json's model_type, or files no other format has: mamba_ssm's ``ssm_cfg``,
``params.json``, a ``.pth``, the xlstm package's ``config.yaml``), so a saved model of one architecture is claimed
by no other (``tests/core/test_registry.py``). A folder none claims gets ``unrecognised``'s error.
"""

from __future__ import annotations

import os
from pathlib import Path

from recemb.core.architectures.descriptor import Architecture
from recemb.core.architectures.mamba2 import ARCHITECTURE as MAMBA2
from recemb.core.architectures.rwkv7 import ARCHITECTURE as RWKV7
from recemb.core.architectures.xlstm import ARCHITECTURE as XLSTM
from recemb.core.errors import ConfigError
from recemb.core.files import read_json

__all__ = ["ARCHITECTURES", "FORMATS_HELP", "architecture", "detect", "unrecognised"]

ARCHITECTURES: dict[str, Architecture] = {a.name: a for a in (MAMBA2, XLSTM, RWKV7)}  # model_type -> descriptor

_DISPLAY = [a.display_name for a in ARCHITECTURES.values()]
FORMATS_HELP = (f"recemb reads {', '.join(_DISPLAY[:-1])} and {_DISPLAY[-1]}: "
                + "; ".join(a.formats for a in ARCHITECTURES.values()))


def architecture(name: str) -> Architecture:
    """The descriptor of model_type ``name``; a ``ConfigError`` naming it and the known ones otherwise."""
    try:
        return ARCHITECTURES[name]
    except (KeyError, TypeError):
        raise ConfigError(f"model_type {name!r} is not an architecture recemb runs (known: "
                          f"{', '.join(ARCHITECTURES)})") from None


def detect(folder: str | os.PathLike) -> tuple[Architecture, str]:
    """(architecture, format) of a model folder: the first registered architecture whose ``detect`` claims it; the
    error of ``unrecognised`` when none does."""
    folder = Path(folder)
    for arch in ARCHITECTURES.values():
        fmt = arch.detect(folder)
        if fmt is not None:
            return arch, fmt
    raise unrecognised(folder)


def unrecognised(folder: Path) -> Exception:
    """The error for a folder no architecture claims: its config.json's model_type named (a ConfigError; one that
    is not JSON raises its own), or the files a model folder has (a FileNotFoundError)."""
    config_path = folder / "config.json"
    if config_path.is_file():
        d = read_json(config_path, FORMATS_HELP)
        model_type = d.get("model_type") if isinstance(d, dict) else None
        return ConfigError(
            f"{config_path}: model_type {model_type!r} is not an architecture recemb runs "
            f"({', '.join(ARCHITECTURES)}; or a mamba_ssm config with ssm_cfg). {FORMATS_HELP}"
        )
    return FileNotFoundError(f"{folder} has no config.json or params.json. {FORMATS_HELP}")
