"""The shape checks that both paths of the gated RMSNorm (torch and Triton) make before they run."""

from __future__ import annotations

__all__ = ["check_group_size"]


def check_group_size(d: int, group_size: int) -> None:
    """A clear error where ``d`` channels do not split into groups of ``group_size``."""
    if d % group_size != 0:
        raise ValueError(f"channels {d} are not a multiple of group_size {group_size}")
