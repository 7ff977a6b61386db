"""Backend choice shared by every op in ``recemb.kernels``.

``"auto"`` runs our Triton kernels on CUDA tensors when Triton imports, and the torch implementation otherwise.
``"triton"`` always runs the Triton kernels: on CUDA natively, on CPU tensors only under the Triton interpreter
(``TRITON_INTERPRET=1`` set before Triton is imported), which is slow and meant for testing.
"""

from __future__ import annotations

import functools
import importlib
import os

import torch

BACKENDS = ("auto", "torch", "triton")


@functools.lru_cache(maxsize=None)
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@functools.lru_cache(maxsize=None)
def importable(module: str) -> bool:
    """Whether ``module`` imports here (an optional kernel package: not installed, or without a usable Triton)."""
    try:
        importlib.import_module(module)
    except Exception:
        return False
    return True


def triton_interpreter_enabled() -> bool:
    """The values Triton itself accepts for TRITON_INTERPRET."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def resolve_backend(backend: str, device: torch.device) -> str:
    """Return ``"torch"`` or ``"triton"`` for tensors on ``device``; raise a clear error when impossible."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "torch":
        return "torch"
    if backend == "auto":
        return "triton" if device.type == "cuda" and triton_available() else "torch"
    if not triton_available():
        raise ImportError('backend="triton" needs Triton: the triton extra (bash scripts/install.sh triton in '
                          "recemb's clone), or pip install triton")
    if device.type != "cuda" and not triton_interpreter_enabled():
        raise RuntimeError(
            f'backend="triton" got tensors on {device.type}; Triton kernels run on CUDA, or on the CPU only under '
            "the Triton interpreter (set TRITON_INTERPRET=1 before importing triton; slow, for testing). "
            'Use backend="torch" or "auto" on the CPU.'
        )
    return "triton"
