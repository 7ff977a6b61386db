"""The one check of a vector handed in from outside the main job: a framework retriever's query vector, a node's
own embedding. A vector of the wrong size, with a NaN or an infinity, or all zeros (cosine has no direction for it)
is refused with the reason; so is one whose length is not 1 where the collection's model makes unit vectors
(recemb's own: a vector of another length was made by another model, or not normalised). Pure: numpy only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from recemb_integrations.qdrant.errors import VectorError

__all__ = ["UNIT_TOLERANCE", "check_vector"]

# How far from 1 a unit vector's length may be: a model's fp32 normalisation lands within 1e-6, a half-precision
# export within about 1e-3; an unnormalised model's vectors are typically far longer or shorter.
UNIT_TOLERANCE = 1e-2


def check_vector(vector: Sequence[float], dim: int, unit: bool, what: str) -> list[float]:
    """``vector`` as a list of floats, or a ``VectorError`` that names ``what`` it is and why it cannot be searched
    or stored: not ``dim`` values, not finite, all zeros, or (``unit``) not of length 1."""
    try:
        array = np.asarray(vector, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise VectorError(f"{what} is not a vector of numbers ({e})") from None
    if array.ndim != 1 or array.shape[0] != dim:
        size = array.shape[0] if array.ndim == 1 else f"an array of shape {array.shape}"
        raise VectorError(f"{what} has {size} values; the collection's model makes vectors of {dim}")
    if not np.isfinite(array).all():
        raise VectorError(f"{what} holds NaN or infinite values")
    length = float(np.linalg.norm(array))
    if length == 0.0:
        raise VectorError(f"{what} is all zeros: cosine similarity has no direction for it")
    if unit and abs(length - 1.0) > UNIT_TOLERANCE:
        raise VectorError(f"{what} has length {length:.4g}, but the collection's model makes unit vectors: it was "
                          "made by another model, or not normalised")
    return array.tolist()
