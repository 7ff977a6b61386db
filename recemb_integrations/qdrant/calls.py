"""How the main job calls a store: serialised (local mode is not thread-safe), transient server errors retried.
Writes go through ``StoreCalls.apply`` (``writes.apply``: every change as data); reads are called as they are."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from recemb_integrations._imports import require
from recemb_integrations.qdrant.writes import Write, apply
from recemb_integrations.stores import Store

_tenacity = require("tenacity", "qdrant")

__all__ = ["StoreCalls", "is_transient"]


def is_transient(error: BaseException) -> bool:
    """Server errors worth retrying: connection problems, 429, 5xx. Local-mode errors never are."""
    if "qdrant_client" in sys.modules:  # only a server's store raises its errors (and an embedded one never loads it)
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

    def apply(self, collection: str, write: Write) -> None:
        """Make one write (``writes.apply``), retried as any call."""
        self(apply, self.store, collection, write)
