"""Keep a Qdrant collection in step with a set of long documents, each embedded whole.

    from recemb.core import Embedder
    from recemb_integrations.qdrant import Document, QdrantSync
    from recemb_integrations.stores import open_store

    with open_store(path="./store") as store:  # embedded (Qdrant Edge); open_store(url=...) for a server
        sync = QdrantSync(store, "books", Embedder.from_pretrained("..."))
        report = sync.sync([Document("moby", text, {"author": "Melville"})])
        hits = sync.search("a whale hunt", limit=5)  # hybrid: dense + BM25, fused by Qdrant

Every point carries a named dense vector ("dense") and, unless the collection is dense-only, a BM25 sparse vector
("bm25", IDF applied by Qdrant) from ``recemb_integrations.sparse``; a search prefetches both and fuses them (RRF or
DBSF) in Qdrant's Query API. Where passages are stored, a document search groups points by document: each document
once, scored by its best point, with its best passage as evidence.

Invariants that make a killed sync safe to re-run:
- point ids are deterministic (uuid5 of the document id, and of (id, passage index) for passages), so writing a
  document twice overwrites it instead of duplicating it;
- a document's own point, which carries its content hash, is written last, after its passages: a crash leaves the
  old hash (or no point), and the next run redoes that document (the points of a batch's documents go in one request,
  after all of the batch's passages);
- every write waits for acknowledgement (``wait=True``) and transient server errors are retried;
- the collection's model, dimension and distance are checked before the first write;
- a sync that would delete half or more of what it manages stops before its first write unless told it is intended;
- every point records the root (``scope``) whose sync wrote it, and a sync deletes or overwrites only its own root's.

The package's rooms, in the order a sync passes through them: ``record`` (what a collection recorded and the one
decision of a sync's settings; pure), ``documents`` (the first pass), ``collection`` (the record read, the
collection prepared, one scan of its points), ``plan`` (what to add, re-embed, delete; pure), ``writer``
(embedding, run by an executor), ``writes`` (every change as data, and the one step that applies it), ``rebuild``
and ``search``; ``QdrantSync`` (``sync``) runs them. The package loads lazily: ``record``, ``plan``, ``points``,
``documents`` and ``writes`` import neither the model nor qdrant-client (tests/integrations/test_imports.py).

Documents of any length take bounded memory: long ones are tokenized in windows and embedded as a stream, and
their passages come from the same stream (``recemb.core.Embedder.tokenize_stream``).
"""

from __future__ import annotations

import importlib
from typing import Any

# What users call, and the module each lives in: loaded when first asked for, so importing a model-free room (or
# this package) loads neither torch nor qdrant-client. Everything else is its room's (``qdrant.record``, ...).
_EXPORTS = {
    "QdrantSync": "sync",
    "Document": "documents", "DocumentSource": "documents", "SyncReport": "documents", "SearchHit": "search",
    "WriteOutcome": "documents", "StoredDocument": "documents", "ExternalEmbedder": "external",
    "SyncSettings": "record", "RequestedSettings": "record", "CollectionRecord": "record", "NO_PASSAGES": "record",
    "DEFAULT_PASSAGE_TOKENS": "record", "DEFAULT_PASSAGE_OVERLAP": "record", "DEFAULT_PASSAGES_ABOVE": "record",
    "read_record": "collection", "collection_settings": "collection",
    "CollectionMismatchError": "errors", "SettingsConflict": "errors", "InvalidSetting": "errors",
    "MassDeletionError": "errors", "NothingReadableError": "errors", "RebuildError": "errors",
    "SearchNotice": "errors", "NotOwnedError": "errors", "VectorError": "errors",
    "Executor": "writer", "LocalExecutor": "writer", "WriteJob": "writer", "DocumentWriter": "writer",
    "content_hash": "points", "point_id": "points",
    "DEFAULT_FUSION": "search", "MAX_SEARCH_LIMIT": "search",
}
_ROOMS = ("by_id", "calls", "collection", "cutting", "documents", "errors", "external", "lengths", "passage_writer",
          "plan", "points", "rebuild", "record", "search", "sync", "vectors", "writer", "writes")

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    if name in _ROOMS:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*__all__, *_ROOMS])
