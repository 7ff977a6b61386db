"""How the main job calls a store: serialised (local mode is not thread-safe), transient server errors retried,
and the writes of a sync's second pass as data (``Upsert``, ``Delete``), so they can be made on one machine and
sent from another (``recemb_integrations.ray``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from recemb_integrations._imports import require
from recemb_integrations.stores import Store, StoredPoint

_tenacity = require("tenacity", "qdrant")

__all__ = ["Delete", "StoreCalls", "Upsert", "Write", "is_transient"]


@dataclass(frozen=True)
class Upsert:
    """Write these points (each overwrites the point of its id)."""

    points: tuple[StoredPoint, ...]


@dataclass(frozen=True)
class Delete:
    """Delete the points that match this qdrant-client ``Filter``."""

    filter: Any


Write = Upsert | Delete


def is_transient(error: BaseException) -> bool:
    """Server errors worth retrying: connection problems, 429, 5xx. Local-mode errors never are."""
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    if isinstance(error, ResponseHandlingException):
        return True
    if isinstance(error, UnexpectedResponse):
        return error.status_code is not None and (error.status_code == 429 or error.status_code >= 500)
    return type(error).__name__ in ("RpcError", "_InactiveRpcError") or isinstance(error, (ConnectionError,
                                                                                            TimeoutError))


class StoreCalls:
    """Calls to one store, one at a time, each retried ``retries`` times on a transient error."""

    def __init__(self, store: Store, retries: int = 5):
        self.store = store
        self.retries = retries
        self._lock = threading.RLock()
        self.retrying = _tenacity.Retrying(
            retry=_tenacity.retry_if_exception(is_transient),
            stop=_tenacity.stop_after_attempt(retries),
            wait=_tenacity.wait_exponential(multiplier=0.5, max=10),
            reraise=True,
        )

    def __call__(self, fn: Callable, *args, **kwargs):
        with self._lock:
            return self.retrying(fn, *args, **kwargs)

    def write(self, collection: str, write: Write) -> None:
        """Send one write of a sync's second pass."""
        if isinstance(write, Upsert):
            self(self.store.upsert, collection, list(write.points))
        elif isinstance(write, Delete):
            self(self.store.delete, collection, write.filter)
        else:
            raise TypeError(f"not a write: {write!r}")
