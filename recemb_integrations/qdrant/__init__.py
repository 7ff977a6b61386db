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
- a sync that would delete most of a collection stops before its first write unless told it is intended;
- every point records the root (``scope``) whose sync wrote it, and a sync deletes or overwrites only its own root's.

The package's rooms, in the order a sync passes through them: ``record`` (what a collection recorded, checked
without a model), ``documents`` (the first pass), ``collection`` (one scan of the points), ``plan`` (what to add,
re-embed, delete), ``writer`` (embedding and the writes, run by an executor), ``rebuild`` and ``search``;
``QdrantSync`` (``sync``) runs them.

Documents of any length take bounded memory: long ones are tokenized in windows and embedded as a stream, and
their passages come from the same stream (``recemb.core.Embedder.tokenize_stream``).
"""

from recemb_integrations.qdrant.calls import Delete, StoreCalls, Upsert, Write
from recemb_integrations.qdrant.collection import (
                                                   collection_settings,
                                                   interrupted_rebuild_hint,
                                                   read_record,
                                                   scan_documents,
)
from recemb_integrations.qdrant.documents import Document, DocumentSource, SearchHit, SyncReport, WriteOutcome
from recemb_integrations.qdrant.errors import (
                                                   CollectionMismatchError,
                                                   MassDeletionError,
                                                   NothingReadableError,
                                                   RebuildError,
                                                   SearchNotice,
                                                   SettingsConflict,
)
from recemb_integrations.qdrant.plan import MASS_DELETE_FRACTION, StoredDocuments
from recemb_integrations.qdrant.points import (
                                                   KIND_DOCUMENT,
                                                   KIND_PASSAGE,
                                                   PAYLOAD_INDEXES,
                                                   ROOT_KEY,
                                                   PassageWindows,
                                                   content_hash,
                                                   describe_root,
                                                   model_fingerprint,
                                                   owned_ids,
                                                   point_id,
                                                   scope_root,
)
from recemb_integrations.qdrant.record import (
                                                   DEFAULT_PASSAGE_OVERLAP,
                                                   DEFAULT_PASSAGE_TOKENS,
                                                   DEFAULT_PASSAGES_ABOVE,
                                                   LAYOUT_VERSION,
                                                   META_KEY,
                                                   REBUILD_SUFFIX,
                                                   CollectionRecord,
                                                   RequestedSettings,
                                                   SyncSettings,
                                                   check_collection_name,
                                                   check_passage_settings,
                                                   choose_passages,
                                                   layout_version,
                                                   legacy_hybrid_refusal,
                                                   reconcile_settings,
                                                   recorded_layout,
)
from recemb_integrations.qdrant.search import (
                                                   DEFAULT_FUSION,
                                                   FUSIONS,
                                                   MAX_SEARCH_LIMIT,
                                                   RRF_K,
                                                   SEARCH_MODES,
                                                   metadata_condition,
)
from recemb_integrations.qdrant.sync import QdrantSync
from recemb_integrations.qdrant.writer import DocumentWriter, Executor, LocalExecutor, WriteJob

__all__ = [
    "CollectionMismatchError", "CollectionRecord", "DEFAULT_FUSION", "Delete", "Document", "DocumentSource",
    "DocumentWriter", "Executor", "FUSIONS", "KIND_DOCUMENT", "KIND_PASSAGE", "LAYOUT_VERSION", "LocalExecutor",
    "MASS_DELETE_FRACTION", "MAX_SEARCH_LIMIT", "META_KEY", "MassDeletionError", "NothingReadableError",
    "PAYLOAD_INDEXES", "PassageWindows", "QdrantSync", "REBUILD_SUFFIX", "ROOT_KEY", "RRF_K", "RebuildError",
    "RequestedSettings", "DEFAULT_PASSAGE_OVERLAP", "DEFAULT_PASSAGE_TOKENS", "DEFAULT_PASSAGES_ABOVE",
    "choose_passages", "SEARCH_MODES",
    "SearchHit", "SearchNotice", "SettingsConflict", "StoreCalls",
    "StoredDocuments", "SyncReport", "SyncSettings", "Upsert", "Write", "WriteJob", "WriteOutcome",
    "check_collection_name", "check_passage_settings", "collection_settings", "content_hash", "describe_root",
    "interrupted_rebuild_hint", "layout_version", "legacy_hybrid_refusal", "metadata_condition", "model_fingerprint",
    "owned_ids", "point_id", "read_record", "reconcile_settings", "recorded_layout", "scan_documents", "scope_root",
]
