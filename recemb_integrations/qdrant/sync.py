"""``QdrantSync``: one collection kept in step with a set of documents, and searched. A facade: the record, the
plan, the writer, the rebuild and the search each live in their own module; this class holds the store, the
model and the collection's record, and runs the steps in order (read -> prepare -> scan -> plan -> write), every
change going through ``StoreCalls.apply``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from typing import Any

import recemb
from recemb_integrations.qdrant import by_id
from recemb_integrations.qdrant.calls import StoreCalls
from recemb_integrations.qdrant.collection import (
    prepare_collection,
    read_record,
    record_root,
    scan_documents,
    too_large_warnings,
)
from recemb_integrations.qdrant.documents import (
    Document,
    DocumentEntry,
    StoredDocument,
    SyncReport,
    WriteOutcome,
    check_document_ids,
    read_entries,
)
from recemb_integrations.qdrant.errors import (
    CollectionMismatchError,
    NothingReadableError,
)
from recemb_integrations.qdrant.external import as_embedder, external_request
from recemb_integrations.qdrant.plan import (
    StoredDocuments,
    check_empty,
    check_sync_options,
    plan_sync,
    sync_root,
    within_root,
)
from recemb_integrations.qdrant.points import (
    KIND_DOCUMENT,
    match,
    model_fingerprint,
)
from recemb_integrations.qdrant.rebuild import (
    finish_interrupted_rebuild,
    interrupted_rebuild_hint,
    rebuild_collection,
)
from recemb_integrations.qdrant.record import (
    CollectionRecord,
    ModelFacts,
    RequestedSettings,
    SyncSettings,
    check_collection_name,
    decide_settings,
)
from recemb_integrations.qdrant.search import (
    DEFAULT_FUSION,
    Searchable,
    SearchHit,
    check_search,
    search,
)
from recemb_integrations.qdrant.vectors import check_vector
from recemb_integrations.qdrant.writer import Executor, LocalExecutor, WriteJob
from recemb_integrations.qdrant.writes import Optimize
from recemb_integrations.sparse import Bm25
from recemb_integrations.stores import INTEGER, KEYWORD, Store, as_store, filters

__all__ = ["FIRST_PASS_BAR", "QdrantSync", "STREAM_HINT_SIZE"]

STREAM_HINT_SIZE = 1 << 20  # a document this large shows a progress bar even alone
FIRST_PASS_BAR = 1000  # documents from which a sync's first pass (hashing) shows a progress bar


class QdrantSync:
    """Sync documents into one Qdrant collection and search it.

    Args:
        store: where the collection lives: a ``Store`` (``recemb_integrations.stores.open_store``: Qdrant Edge, a
            server, local mode) or a ``QdrantClient`` (local ``path=``/``":memory:"`` or a server ``url=``). Calls are
            serialised: local mode is not thread-safe.
        collection: collection name; created on first sync (cosine distance, size from the model).
        embedder: the recemb ``Embedder``.
        settings: the ``SyncSettings`` to sync with, all of them (e.g. decided by ``record.decide_settings`` from the
            collection's record and a caller's request); or name some with the keywords below (not both), the rest
            being the collection's, or for a new collection the defaults.
        model_id: the name recorded in the collection (default: the embedder's name).
        store_text: keep each document's text in its payload (returned by ``search``); None: the collection's
            setting, or for a new collection False. Recorded in the collection like the passage settings: a sync
            that names the other value is refused (a sync without it would drop the texts of what it re-embeds).
        passage_tokens: also store one point per passage of this many tokens (documents stay whole); 0: no
            passages; None: the collection's setting, or for a new collection ``DEFAULT_PASSAGE_TOKENS`` (128, with
            an overlap of 16, for documents longer than 512 tokens: docs/quality.md measured what they are worth).
        passage_overlap: tokens shared by consecutive passages (None: the collection's, or the default).
        passages_above: only documents of more than this many tokens get passages (None: the collection's, for a
            new collection 512 with the default passages, else ``passage_tokens``: a document that fits in one
            passage is found by its own point).
        long_documents: how a document with passages gets its vectors: "whole+passages" (the document whole, and
            each passage on its own: two passes), "passages" (each passage on its own, the document's vector their
            normalised mean) or "one-pass" (one pass over the document; each passage's vector is the EOS run from
            the state at its end, so it has read the document up to there). None: the collection's, or for a new
            collection ``record.DEFAULT_LONG_DOCUMENTS`` (docs/quality.md measures the three).
        batch_size: documents read, embedded and written together: their points go in one request (a batch also
            closes at ``writer.BATCH_MAX_CHARS`` of text, so large documents do not pile up in memory).
        retries: attempts for a write or read that fails with a transient server error.
        max_tokens: truncate each document to this many tokens (EOS included), with a warning in the report.
        sparse: also give every point a BM25 sparse vector (hybrid search); False builds a dense-only collection
            (None: the collection's, for a new one True).
        sparse_language: the BM25 stemmer and stopword language (None: the collection's, for a new one English).
        index_metadata: metadata keys searches filter by, with their type ("keyword" or "integer"), e.g.
            ``{"topic": "keyword"}``: a payload index on each makes filtered searches fast and exact on a server and
            on Qdrant Edge (without one, Edge falls back to ACORN, slow on large collections: docs/benchmarks.md).
        record: the collection's record if the caller read it already (``read_record``), so it is not read again;
            None: read when first needed.

    The settings are recorded in the collection: a sync must use the same values (or name none), and a search reads
    them from there. ``record.decide_settings`` is the one rule (a contradiction is a ``SettingsConflict``, an
    impossible value an ``InvalidSetting``); ``settings`` is None until the collection's record is known. The BM25
    average lengths are chosen when the collection is created (see ``lengths``) and recorded too.
    """

    def __init__(
        self,
        store: Store | Any,
        collection: str,
        embedder: Any,
        settings: SyncSettings | None = None,
        *,
        model_id: str | None = None,
        store_text: bool | None = None,
        passage_tokens: int | None = None,
        passage_overlap: int | None = None,
        passages_above: int | None = None,
        long_documents: str | None = None,
        batch_size: int = 64,
        retries: int = 5,
        max_tokens: int | None = None,
        sparse: bool | None = None,
        sparse_language: str | None = None,
        index_metadata: dict[str, str] | None = None,
        record: CollectionRecord | None = None,
    ):
        embedder = as_embedder(embedder)
        named = dict(passage_tokens=passage_tokens, passage_overlap=passage_overlap, passages_above=passages_above,
                     max_tokens=max_tokens, sparse=sparse, sparse_language=sparse_language, store_text=store_text,
                     long_documents=long_documents)
        self._given = settings  # settings named whole: a new collection takes them as they are
        self._asked: RequestedSettings | None = None  # another library's model: what the caller asked
        if settings is not None:
            if any(v is not None for v in named.values()):
                raise TypeError("give settings= or setting keywords, not both")
            self.requested = settings.as_requested()
        else:  # impossible values fail now, before any model or store work; whether the collection agrees is
            # decided when its record is read (a rebuild may change what it recorded)
            self.requested = RequestedSettings(**named)
            if getattr(embedder, "external", False):  # another library's model: passages cut to its window
                self._asked = self.requested  # decided again once the collection's record is read
                embedder, self.requested = external_request(embedder, self.requested, record)
            settings = decide_settings(None, self.requested)
        if settings.sparse:
            Bm25(language=settings.sparse_language)  # an unknown language fails here, before any model work
        for key, schema in (index_metadata or {}).items():
            if not isinstance(key, str) or not key or schema not in (KEYWORD, INTEGER):
                raise ValueError(f"index_metadata maps metadata keys to {KEYWORD!r} or {INTEGER!r}, got "
                                 f"{key!r}: {schema!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.store = as_store(store)
        self.collection = check_collection_name(collection)
        self.embedder = embedder
        self.model_id = model_id or embedder.name or "unnamed"
        self.batch_size = batch_size
        self.index_metadata = dict(index_metadata or {})
        self.calls = StoreCalls(self.store, retries)
        self.record = record  # the collection's record once read (or created), None before
        self.settings: SyncSettings | None = None  # decided once the collection's record is read
        self._searchable: Searchable | None = None  # what searches use of the record (its BM25 encoder built once)
        self._fingerprint: str | None = None
        self._prepared = False  # prepared for syncing; its settings cannot change under us
        self._read_checked = False  # checked for searching (the model only)

    @classmethod
    def open(cls, store: Store | Any, collection: str, embedder: Any, record: CollectionRecord | None = None,
             **kwargs) -> QdrantSync:
        """An instance with the settings the collection was built with (passages, truncation, BM25, stored
        texts), for searching it (or syncing more of the same). The collection must exist. ``record``: its record,
        if read already."""
        store = as_store(store)
        record = record or read_record(store, check_collection_name(collection))
        if record is None:
            raise CollectionMismatchError(f"collection {collection!r} does not exist; sync documents first")
        opened = cls(store, collection, embedder, record.settings, **kwargs, record=record)
        opened.settings = record.settings
        return opened

    def like(self, collection: str, settings: SyncSettings | None = None) -> QdrantSync:
        """Another collection's sync with this one's options and ``settings`` (default: this one's): the staging
        collection of a rebuild."""
        return QdrantSync(self.store, collection, self.embedder, settings or self.settings, model_id=self.model_id,
                          batch_size=self.batch_size, retries=self.calls.retries, index_metadata=self.index_metadata)

    # ------------------------------------------------------------------ collection
    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.embedder)
        return self._fingerprint

    @property
    def model(self) -> ModelFacts:
        """What the collection records of this instance's model, and checks."""
        cut = self.embedder.describe_cut() if getattr(self.embedder, "external", False) else None
        return ModelFacts(self.model_id, self.fingerprint, self.embedder.dim, self.embedder.max_length, cut)

    def expected_metadata(self) -> dict[str, Any]:
        """The record of a collection created by this instance, before its BM25 lengths are chosen."""
        return CollectionRecord.new(self.collection, self.model, decide_settings(None, self.requested), None,
                                    recemb.__version__).as_dict()

    def forget_checks(self) -> None:
        """The collection changed under this instance: read and check its record again when next needed."""
        self.record, self.settings, self._prepared, self._read_checked, self._searchable = None, None, False, \
            False, None

    def ensure_collection(self, create: bool = True, documents: Iterable[Any] = (), root: str | None = None) -> None:
        """Create the collection, or check that it was built with this model, dimension and distance and decide the
        settings of a sync (``collection.prepare_collection``).

        ``documents``: the first sync's documents, from which a new collection's BM25 average lengths are chosen;
        ``root``: the writer about to write, recorded as a new collection's first (``record.roots``).
        ``create=False`` is the read path: the collection must exist, only the model (and so the dimension) must
        match, and its settings are the collection's own."""
        if self._prepared or (not create and self._read_checked):
            return
        record = self.record or read_record(self.store, self.collection, self.calls)
        if record is not None and self._asked is not None:  # another library's model: the record may keep it whole
            self.embedder, self.requested = external_request(self.embedder, self._asked, record)
        if not create:
            if record is None:
                raise CollectionMismatchError(f"collection {self.collection!r} does not exist; "
                                              + (self.calls(interrupted_rebuild_hint, self.store, self.collection)
                                                 or "sync documents first"))
            record.check_model(self.model, for_sync=False)
            self.record, self.settings, self._read_checked = record, record.settings, True
            return
        external = getattr(self.embedder, "external", False)
        prepared = prepare_collection(self.calls, self.collection, record, self.requested, self.model,
                                      self.index_metadata, recemb.__version__, documents, self.embedder.tokenizer,
                                      self.embedder.count if external else None, settings=self._given, root=root,
                                      found_by_passages=external and self.embedder.cutter is not None
                                      and self.embedder.document_vector == "none")
        self.record, self.settings, self._prepared = prepared.record, prepared.settings, True

    def scan(self) -> StoredDocuments:
        """What the collection's points hold (one pass over them): pass it to ``sync(stored=)`` after looking."""
        return scan_documents(self.calls, self.collection)

    def write_job(self, root: str = "") -> WriteJob:
        """The second pass's settings for this collection (prepared first)."""
        return WriteJob(collection=self.collection, layout=self.record.layout, root=root, settings=self.settings,
                        batch_size=self.batch_size, bm25=self.record.bm25, fingerprint=self.fingerprint)

    # ------------------------------------------------------------------ sync
    def sync(
        self,
        documents: Iterable[Document | tuple],
        delete_missing: bool = True,
        show_progress_bar: bool | None = None,
        on_document: Callable[[str, str], None] | None = None,
        keep_ids: Iterable[str] = (),
        allow_mass_delete: bool = False,
        skip_empty: bool = False,
        rebuild: bool = False,
        scope: str | None = None,
        executor: Executor | None = None,
        stored: StoredDocuments | None = None,
        framework: bool = False,
        drop_other_writers: bool = False,
    ) -> SyncReport:
        """Bring the collection to exactly ``documents``: add new, re-embed changed, skip unchanged, and with
        ``delete_missing`` delete documents no longer present. Bad documents are reported in ``failed`` and do not
        stop the others; their stored versions are kept, as are those of ``keep_ids`` (sources that exist but could
        not be read). ``on_document(id, action)`` is called after each document is written.

        A sync that would delete half or more of the documents it manages (1 of 2, 4 of 5; ``plan.stale_ids``) raises
        ``MassDeletionError`` before any write unless ``allow_mass_delete``; one in which every document given failed
        (unreadable, or another root's) deletes nothing, with a warning.
        Empty and whitespace-only documents are synced with a warning, or left out with ``skip_empty``: a new one is
        not stored, and one that is stored already (a file emptied since) keeps its stored version, with a warning.
        Documents cut by ``max_tokens`` are synced with a warning.

        ``rebuild``: build the collection anew with this instance's settings (layout, model, passages, BM25) from
        ``documents`` into a staging collection, then replace the old one with it (``recemb_integrations.qdrant.
        rebuild``). A collection whose files are damaged is rebuilt from ``documents`` without reading it: what it
        held beyond them is dropped, and the report's warnings say so; as what it holds cannot be counted, this
        needs ``allow_mass_delete`` (``MassDeletionError`` otherwise, before any write). Where its record names
        another writer (a framework's store, the Python API, a folder with another id prefix), whose documents no
        source of the rebuild holds, it is a ``RebuildError`` before any write unless ``drop_other_writers`` too.

        ``scope``: an id prefix (e.g. ``"wiki/"``, one path component or more; a missing final "/" is added): this
        sync's root. Every point records the root whose sync wrote it (``""`` without a scope), and a sync deletes,
        overwrites and counts for the mass-deletion guard only its own root's documents: several roots share one
        collection, an unprefixed folder's ``wiki/x.md`` included. A document whose id is another root's is
        reported as failed and the other root's version kept; with a scope, every id must start with it. Sources that
        declare their root (``DocumentSource.root``, set by ``folder_sources``) make the sync that root's without a
        scope, and a scope other than theirs is a ValueError before anything is written. Points of
        a recemb that did not record roots are judged by their ids (under the scope, and not under a longer root
        that others have recorded) and take this root when this sync finds them among its documents.

        ``executor``: where the embedding runs (``writer.Executor``), e.g. ``recemb_integrations.ray.RayExecutor``
        (Ray actors); default ``LocalExecutor``. The plan (new, changed, unchanged, gone) is made here from ids and
        hashes; the executor embeds the documents to (re-)embed and hands back their writes, which this process
        sends in the order they were made (passages, then the document point that carries the hash), then deletes
        what is gone.

        ``stored``: the collection's ``scan()``, if the caller made one (it is not scanned again). Every change the
        sync makes is a ``writes`` value, applied in order through ``StoreCalls.apply``.

        ``framework``: the documents are a framework's vector store's (LangChain, LlamaIndex: ``framework_collection``):
        they belong to the framework owner (``points.FRAMEWORK_ROOT``), beside the folder roots, so no folder sync
        deletes them and they never overwrite a folder's document of the same id (it fails, the folder's version
        kept). Not with ``scope``, ``rebuild`` or sources that declare a folder root.

        ``documents`` may be ``DocumentSource``s: read once to hash them and again only to embed, a batch at a time.
        If every document fails to read, a sync with ``delete_missing`` raises ``NothingReadableError`` before any
        write."""
        check_sync_options(rebuild, delete_missing, scope, framework)
        from tqdm.auto import tqdm

        start = time.perf_counter()
        # The first pass: ids, hashes and metadata, no text kept (a bar where there are many to read). A rebuild
        # uses the same pass for its staging collection: every document is read and hashed once.
        sized = len(documents) if isinstance(documents, Sized) else 0
        shown = show_progress_bar if show_progress_bar is not None else sized > FIRST_PASS_BAR
        entries, bad = read_entries(tqdm(documents, total=sized or None, desc=f"Reading for {self.collection}",
                                         unit="doc", leave=False, disable=not shown))
        root = sync_root(scope, entries, framework, rebuild)
        entries, outside = within_root(entries, root)
        bad += outside
        if delete_missing and bad and not entries:
            raise NothingReadableError(f"none of the {len(bad)} documents could be read ({bad[0][0]}: {bad[0][1]}); "
                                       "nothing was synced or deleted")
        options = dict(show_progress_bar=show_progress_bar, on_document=on_document, keep_ids=keep_ids,
                       allow_mass_delete=allow_mass_delete, skip_empty=skip_empty, executor=executor)
        if finish_interrupted_rebuild(self.calls, self.collection, self.index_metadata):
            self.forget_checks()  # the collection was replaced: what the caller read and scanned is gone
            stored = None
            if rebuild:  # ... by the rebuild that was asked for: bring it up to date
                rebuild = False
        if rebuild:
            report = rebuild_collection(self, entries, bad, stored, root, drop_other_writers=drop_other_writers,
                                        **options)
            self.forget_checks()  # the collection changed under this instance
            report.seconds = time.perf_counter() - start
            return report
        report = self.sync_entries(entries, bad, root, delete_missing, stored, **options)
        report.seconds = time.perf_counter() - start
        return report

    def sync_entries(self, entries: list[DocumentEntry], bad: list[tuple[str, str]], root: str,
                     delete_missing: bool, stored: StoredDocuments | None, show_progress_bar: bool | None,
                     on_document: Callable[[str, str], None] | None, keep_ids: Iterable[str], allow_mass_delete: bool,
                     skip_empty: bool, executor: Executor | None) -> SyncReport:
        """A sync after its first pass (``entries``, and ``bad``: documents that could not be read) as ``root``:
        what ``sync`` and a rebuild's staging collection run (``sync`` says what each option does)."""
        report = SyncReport()
        report.failed.extend(bad)
        entries, left_out, blank = check_empty(entries, skip_empty)
        report.warnings.extend(blank)
        self.ensure_collection(documents=entries, root=root)  # before any write
        stored = stored if stored is not None else self.scan()
        plan = plan_sync(self.collection, entries, left_out, bad, stored, root, delete_missing, keep_ids,
                         allow_mass_delete)
        self.record = record_root(self.calls, self.collection, self.record, root, stored)
        report.failed.extend(plan.failed)
        report.warnings.extend(plan.warnings)
        report.metadata_updated, report.unchanged = plan.metadata_updated, plan.unchanged
        for write in plan.before:
            self.calls.apply(self.collection, write)

        def on_outcome(outcome: WriteOutcome) -> None:
            report.absorb(outcome)
            for doc_id, action in outcome.finished if on_document is not None else ():
                on_document(doc_id, action)

        show = show_progress_bar if show_progress_bar is not None else (
            len(plan.to_embed) > self.batch_size or any(e.size > STREAM_HINT_SIZE for e, _ in plan.to_embed))
        (executor or LocalExecutor(embed_progress=show_progress_bar)).run(
            self.write_job(root), plan.to_embed, self.embedder, lambda write: self.calls.apply(self.collection, write),
            on_outcome, show_progress_bar=show)
        for write in plan.after:
            self.calls.apply(self.collection, write)
        report.deleted = plan.deleted
        if report.added or report.updated:
            self.calls.apply(self.collection, Optimize(show_progress_bar=show_progress_bar))
        report.warnings.extend(too_large_warnings(self.calls, self.collection))
        return report

    # ------------------------------------------------------------------ search
    def search(self, query: str, limit: int = 10, instruction: str | None = None,
               filter: dict[str, Any] | Any | None = None, granularity: str = KIND_DOCUMENT, mode: str | None = None,
               fusion: str = DEFAULT_FUSION, query_vector: Sequence[float] | None = None,
               per_document: int | None = None) -> list[SearchHit]:
        """The documents (or passages) that best match ``query``.

        ``mode``: "hybrid" (the default where the collection has BM25 vectors: Qdrant prefetches the nearest points
        by the dense vector and by BM25, each under the filter, and fuses the two lists with ``fusion``, "dbsf"
        (distribution-based score fusion: each list's scores scaled by its mean +- 3 standard deviations, then
        summed; the default) or "rrf" (reciprocal rank fusion, 1 / (60 + rank) as Cormack et al.)), "dense" (the
        default of a dense-only collection) or "sparse" (BM25 alone). A fused score ranks the hits of one search
        against each other (DBSF: about 0 to 2); it is neither a similarity nor comparable between searches. When a
        hybrid search finds a single result (a narrow filter), its fused score would compare it with nothing (1.0
        or 0.5), so it is scored by its dense similarity, with a ``SearchNotice``. A query without BM25 terms (empty,
        only stopwords and punctuation, or words over 40 characters such as CJK text without spaces) is searched
        dense-only, with a ``SearchNotice`` that says which. ``limit``: 1 to ``MAX_SEARCH_LIMIT``.
        ``filter``: a qdrant ``models.Filter``, or a dict of metadata key -> value (all must match): a string,
        integer or boolean matches exactly, a list of strings or of integers matches any of them.
        ``granularity``: "document", "passage" or "any". Where the collection has passages, a document search
        returns each document once, scored by the best of its own point and its passages, with the best passage
        (index, and text where stored) as evidence. The collection's own settings are used, whatever this instance
        was built with; only the model must match.
        ``query_vector``: the query's dense vector, made by the collection's model, where the caller has it already
        (a framework's retriever embeds its query itself); the BM25 side still uses ``query``. It is checked
        (``vectors.check_vector``: the model's dimension, finite, not all zeros, of unit length where the model
        makes unit vectors) and refused with a ``VectorError`` before the search.
        ``per_document``: at most this many hits of one document (passage and "any" granularity; None: no limit).
        The hits are the best ``limit`` under that rule: with 1, each document's best passage (or, too short for
        passages, the document itself), each document once.
        """
        conditions = check_search(query, limit, filter, granularity, mode, fusion, per_document)
        if query_vector is not None:
            query_vector = check_vector(query_vector, self.embedder.dim, unit=self.unit_vectors,
                                        what="the query vector")
        self.ensure_collection(create=False)
        if self._searchable is None or self._searchable.record is not self.record:
            self._searchable = Searchable.of(self.record)
        return search(self.calls, self._searchable, self.embedder, query, limit, instruction, filter, granularity,
                      mode, fusion, conditions, query_vector, per_document)

    @property
    def unit_vectors(self) -> bool:
        """Whether the model's vectors are of unit length as it gives them (recemb's own; another library's are
        normalised here, so any length of theirs is taken)."""
        return not getattr(self.embedder, "external", False)

    # ------------------------------------------------------------------ documents by id (``by_id``)
    def get_documents(self, document_ids: Iterable[str]) -> list[StoredDocument]:
        """The documents of these ids as the collection holds them, in the order asked (missing ones left out)."""
        ids = check_document_ids(document_ids, "get_documents")
        if not ids or not self.calls(self.store.collection_exists, self.collection):
            return []
        self.ensure_collection(create=False)
        return by_id.get_documents(self.calls, self.collection, ids)

    def delete_documents(self, document_ids: Iterable[str], framework: bool = False,
                         keep_foreign: bool = False) -> int:
        """Delete these documents and all their passages, whichever root wrote them; returns how many of them the
        collection held (and, with ``framework``, deleted). An empty list deletes nothing; None or a single string
        is a TypeError (never "all"). This is the maintainer's delete by id: it answers to no owner, so a writer's
        own deletes go through ``sync`` (what is gone from its documents) or, for a framework's store, ``framework``.

        ``framework``: the delete of a framework's store: only the framework owner's documents (``points.
        FRAMEWORK_ROOT``, stamped on everything a framework store writes) may be named; naming another writer's (a
        folder's, the Python API's, or one written before recemb recorded its writer) is a ``NotOwnedError`` before
        anything is deleted, or with ``keep_foreign`` leaves those alone (LlamaIndex's delete of a source document's
        nodes)."""
        ids = check_document_ids(document_ids, "delete_documents")
        if not ids or not self.calls(self.store.collection_exists, self.collection):
            return 0
        return by_id.delete_documents(self.calls, self.collection, ids, framework, keep_foreign)

    def document_ids(self, filter: dict[str, Any] | None = None, framework: bool = False) -> list[str]:
        """The ids of the collection's documents (sorted), or of those whose metadata matches ``filter`` (a dict
        of key -> value as ``search`` takes it); [] where the collection does not exist. ``framework``: only the
        framework owner's (what ``delete_documents(..., framework=True)`` may delete)."""
        if filter is not None and not isinstance(filter, Mapping):
            raise TypeError(f"filter is a dict of metadata key -> value, got {type(filter).__name__}")
        if not self.calls(self.store.collection_exists, self.collection):
            return []
        return by_id.document_ids(self.calls, self.collection, filter, framework)

    def count(self) -> int:
        """Number of documents (document points) in the collection."""
        return self.calls(self.store.count, self.collection, filters.Filter(must=(match("kind", KIND_DOCUMENT),)))
