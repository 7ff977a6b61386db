"""Where a ``QdrantSync`` keeps its collections: a small interface and its two implementations.

- ``ClientStore`` (``stores/client.py``): qdrant-client, for a Qdrant server or cluster (``url=``) and for
  qdrant-client's local mode (``path=``; brute-force search, every point pickled into SQLite: small collections).
- ``EdgeStore`` (``stores/edge.py``): Qdrant Edge, Qdrant's engine in-process (HNSW, a write-ahead log, segments
  on disk): the embedded store for collections of millions of points.

The interface speaks in recemb's terms (``StoredPoint``, ``SearchRequest``, named vectors "dense" and "bm25") and
takes filters in Qdrant's filter language: recemb's own as plain values (``stores/filters.py``, so that the embedded
store's sync and search never import qdrant-client), a user's as ``qdrant_client.models.Filter``, or the two nested;
each store translates them to its own. It is deliberately small: what ``QdrantSync`` needs to sync crash-safely,
rebuild, search and migrate, and nothing else. A new store implements ``Store`` and passes
``tests/integrations/test_stores.py`` (every sync and search test of ``test_qdrant.py`` then runs on it too).

Errors: ``StoreError`` when a store cannot be opened or used as asked (in use, not a store, read-only), and two
kinds of it that a command reports in one line with exit code 1: ``StoreFullError`` (the disk is too full for a
step; Qdrant Edge checks before it writes, and nothing written before is lost) and ``StoreDamagedError`` (its
files are damaged; the message names the file and the way to recover).

    from recemb_integrations.stores import open_store
    store = open_store(path="./recemb-store")        # Qdrant Edge (or a local-mode folder it finds there)
    store = open_store(url="http://localhost:6333")  # a server
"""

from __future__ import annotations

import os
from pathlib import Path

from recemb_integrations._imports import require
from recemb_integrations.stores.interface import (
    COMPACT_LAYOUTS,
    DEFAULT_LAYOUT,
    DENSE_VECTOR,
    INT8_QUANTILE,
    INTEGER,
    KEYWORD,
    LAYOUT_COMPACT,
    LAYOUT_LEAN,
    LAYOUT_RAM,
    SPARSE_VECTOR,
    STORE_KINDS,
    STORE_LAYOUTS,
    CollectionInfo,
    SearchRequest,
    Store,
    StoreDamagedError,
    StoredPoint,
    StoreError,
    StoreFullError,
)


def as_store(client_or_store) -> Store:
    """A ``Store`` (or an object that acts like one, e.g. a wrapper) as is; anything else is taken for a
    ``QdrantClient``."""
    if isinstance(client_or_store, Store) or hasattr(client_or_store, "collection_info"):
        return client_or_store
    from recemb_integrations.stores.client import ClientStore

    return ClientStore(client_or_store)


LOCAL_MARKER = "meta.json"  # qdrant-client's local mode keeps this file at the top of its folder


def detect_store_kind(path: str | os.PathLike) -> str | None:
    """"local" or "edge" for a folder that holds that kind of store, None for a new or empty folder."""
    from recemb_integrations.stores.edge import EDGE_MARKER

    folder = Path(path)
    if (folder / LOCAL_MARKER).is_file():
        return "local"
    if (folder / EDGE_MARKER).is_file():
        return "edge"
    return None


def open_store(url: str | None = None, path: str | os.PathLike | None = None, kind: str = "auto",
               api_key: str | None = None, timeout: int = 60, read_only: str = "refuse") -> Store:
    """A server's store (``url``), or the embedded store in folder ``path``: ``kind`` "edge" or "local", or "auto"
    for whatever the folder holds (Qdrant Edge for a new folder). ``read_only``: what a Qdrant Edge store that
    cannot be written (a read-only mount) does, as Edge writes to its files even to search: "refuse" (a
    ``StoreError`` that says so) or "copy" (for reading: it is opened from a private temporary copy, removed on
    close; ``store.note`` says so).

    A store in use by another process, or one that is not a store, raises ``StoreError``; one whose files are
    damaged, or whose disk is too full to open it, raises ``StoreDamagedError`` / ``StoreFullError``."""
    if (url is None) == (path is None):
        raise ValueError("give a url (a Qdrant server) or a path (an embedded store), not both or neither")
    if url is not None:
        from recemb_integrations.stores.client import ClientStore

        QdrantClient = require("qdrant_client", "qdrant").QdrantClient
        return ClientStore(QdrantClient(url=url, api_key=api_key, timeout=timeout), location=url)
    if kind not in ("auto", "edge", "local"):
        raise ValueError(f"kind must be 'auto', 'edge' or 'local', got {kind!r}")
    found = detect_store_kind(path)
    if kind == "auto":
        kind = found or "edge"
    elif found is not None and found != kind:
        raise StoreError(f"{path} holds a {_describe(found)}, not a {_describe(kind)}; give another folder, or "
                         f"open it as {found!r} (move its collections with `recemb migrate`)")
    if kind == "local":
        from recemb_integrations.stores.client import open_local

        return open_local(path)
    from recemb_integrations.stores.edge import EdgeStore

    return EdgeStore(path, read_only=read_only)


def _describe(kind: str) -> str:
    return {"edge": "Qdrant Edge store", "local": "qdrant-client local-mode store"}.get(kind, kind)


__all__ = ["COMPACT_LAYOUTS", "CollectionInfo", "DEFAULT_LAYOUT", "DENSE_VECTOR", "INT8_QUANTILE", "INTEGER",
           "KEYWORD", "LAYOUT_COMPACT", "LAYOUT_LEAN", "LAYOUT_RAM", "SPARSE_VECTOR", "STORE_KINDS", "STORE_LAYOUTS",
           "SearchRequest", "Store",
           "StoreDamagedError", "StoreError", "StoreFullError", "StoredPoint", "as_store", "detect_store_kind",
           "open_store"]
