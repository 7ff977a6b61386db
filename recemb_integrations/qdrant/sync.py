"""``QdrantSync``: one collection kept in step with a set of documents, and searched. A facade: the record, the
plan, the writer, the rebuild and the search each live in their own module; this class holds the store, the
model and the collection's record, and runs the steps in order (read -> check -> scan -> plan -> write)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence, Sized
from dataclasses import replace
from typing import Any

import recemb
from recemb_integrations._imports import require
from recemb_integrations.qdrant.calls import StoreCalls
from recemb_integrations.qdrant.collection import interrupted_rebuild_hint, read_record, scan_documents
from recemb_integrations.qdrant.documents import Document, SearchHit, SyncReport, WriteOutcome, read_entries
from recemb_integrations.qdrant.errors import CollectionMismatchError, NothingReadableError
from recemb_integrations.qdrant.lengths import choose_bm25_settings
from recemb_integrations.qdrant.plan import StoredDocuments, check_empty, plan_sync, sources_root
from recemb_integrations.qdrant.points import (
    KIND_DOCUMENT,
    KIND_PASSAGE,
    PAYLOAD_INDEXES,
    ROOT_KEY,
    match,
    model_fingerprint,
    point_id,
    scope_root,
)
from recemb_integrations.qdrant.rebuild import finish_interrupted_rebuild
from recemb_integrations.qdrant.rebuild import rebuild as rebuild_collection
from recemb_integrations.qdrant.record import (
    LAYOUT_VERSION,
    CollectionRecord,
    SyncSettings,
    check_collection_name,
    choose_passages,
    legacy_hybrid_refusal,
)
from recemb_integrations.qdrant.search import DEFAULT_FUSION, Searchable, check_search, search
from recemb_integrations.qdrant.writer import Executor, LocalExecutor, WriteJob, bm25_encoders
from recemb_integrations.sparse import Bm25
from recemb_integrations.stores import INTEGER, KEYWORD, Store, as_store

models = require("qdrant_client.models", "qdrant")

__all__ = ["DELETE_BATCH", "FIRST_PASS_BAR", "QdrantSync", "STREAM_HINT_SIZE"]

STREAM_HINT_SIZE = 1 << 20  # a document this large shows a progress bar even alone
FIRST_PASS_BAR = 1000  # documents from which a sync's first pass (hashing) shows a progress bar
DELETE_BATCH = 256  # stale documents deleted (or unstamped ones stamped) per request


class QdrantSync:
    """Sync documents into one Qdrant collection and search it.

    Args:
        store: where the collection lives: a ``Store`` (``recemb_integrations.stores.open_store``: Qdrant Edge, a
            server, local mode) or a ``QdrantClient`` (local ``path=``/``":memory:"`` or a server ``url=``). Calls are
            serialised: local mode is not thread-safe.
        collection: collection name; created on first sync (cosine distance, size from the model).
        embedder: the recemb ``Embedder``.
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
        batch_size: documents read, embedded and written together: their points go in one request (a batch also
            closes at ``writer.BATCH_MAX_CHARS`` of text, so large documents do not pile up in memory).
        retries: attempts for a write or read that fails with a transient server error.
        max_tokens: truncate each document to this many tokens (EOS included), with a warning in the report.
        sparse: also give every point a BM25 sparse vector (hybrid search); False builds a dense-only collection.
        sparse_language: the BM25 stemmer and stopword language.
        index_metadata: metadata keys searches filter by, with their type ("keyword" or "integer"), e.g.
            ``{"topic": "keyword"}``: a payload index on each makes filtered searches fast and exact on a server and
            on Qdrant Edge (without one, Edge falls back to ACORN, slow on large collections: docs/benchmarks.md).
        record: the collection's record if the caller read it already (``read_record``), so it is not read again;
            None: read when first needed.

    ``passage_tokens``, ``passage_overlap``, ``passages_above``, ``max_tokens``, ``sparse`` and ``store_text`` are
    recorded in the
    collection: a sync must use the same values (or name none), a search reads them from there
    (``QdrantSync.open`` builds an instance with them;
    ``record.reconcile_settings`` fills in the ones a caller did not name). The BM25 average lengths are chosen
    when the collection is created (see ``lengths``) and recorded too.
    """

    def __init__(
        self,
        store: Store | Any,
        collection: str,
        embedder: Any,
        model_id: str | None = None,
        store_text: bool | None = None,
        passage_tokens: int | None = None,
        passage_overlap: int | None = None,
        passages_above: int | None = None,
        batch_size: int = 64,
        retries: int = 5,
        max_tokens: int | None = None,
        sparse: bool = True,
        sparse_language: str = "english",
        index_metadata: dict[str, str] | None = None,
        record: CollectionRecord | None = None,
    ):
        # Passage settings not named are the collection's (known once its record is read), else the defaults.
        self._named_passages = (passage_tokens, passage_overlap, passages_above)
        self._named_store_text = store_text
        tokens, overlap, above = choose_passages(record.settings if record is not None else None,
                                                 *self._named_passages)
        chosen = SyncSettings(tokens, overlap, max_tokens, sparse, sparse_language, above,  # checks them
                              self._store_text(record))
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
        self._use(chosen)
        if sparse:
            Bm25(language=sparse_language)  # an unknown language fails here, before any model work
        self.calls = StoreCalls(self.store, retries)
        self.record = record  # the collection's record once read (or created), None before
        self._searchable: Searchable | None = None  # what searches use of the record (its BM25 encoder built once)
        self._fingerprint: str | None = None
        self._verified = False  # checked (or created) for syncing; its settings cannot change under us
        self._read_checked = False  # checked for searching (the model only)

    def _use(self, settings: SyncSettings) -> None:
        self.passage_tokens, self.passage_overlap = settings.passage_tokens, settings.passage_overlap
        self.passages_above = settings.passages_above
        self.max_tokens, self.sparse, self.sparse_language = settings.max_tokens, settings.sparse, \
            settings.sparse_language
        self.store_text = settings.store_text

    def _store_text(self, record: CollectionRecord | None) -> bool:
        """store_text as named, else the collection's, else (a new collection) False."""
        if self._named_store_text is not None:
            return self._named_store_text
        return record.settings.store_text if record is not None else False

    @classmethod
    def open(cls, store: Store | Any, collection: str, embedder: Any, record: CollectionRecord | None = None,
             **kwargs) -> QdrantSync:
        """An instance with the settings the collection was built with (passages, truncation, BM25), for searching
        it (or syncing more of the same). The collection must exist. ``record``: its record, if read already."""
        store = as_store(store)
        record = record or read_record(store, check_collection_name(collection))
        if record is None:
            raise CollectionMismatchError(f"collection {collection!r} does not exist; sync documents first")
        return cls(store, collection, embedder, **{**record.settings.as_kwargs(), **kwargs}, record=record)

    def settings(self) -> dict[str, Any]:
        """This instance's keyword arguments (all but the store, collection, embedder and record): what another
        sync with the same settings is built from (a rebuild's staging collection)."""
        return dict(model_id=self.model_id, store_text=self.store_text, passage_tokens=self.passage_tokens or 0,
                    passage_overlap=self.passage_overlap, passages_above=self.passages_above,
                    batch_size=self.batch_size, retries=self.calls.retries,
                    max_tokens=self.max_tokens, sparse=self.sparse, sparse_language=self.sparse_language,
                    index_metadata=dict(self.index_metadata))

    def like(self, collection: str) -> QdrantSync:
        """Another collection's sync with this one's settings (the staging collection of a rebuild)."""
        return QdrantSync(self.store, collection, self.embedder, **self.settings())

    # ------------------------------------------------------------------ collection
    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.embedder)
        return self._fingerprint

    def new_record(self, bm25: dict[str, Any] | None = None) -> CollectionRecord:
        """The record a collection created by this instance gets (``bm25``: its BM25 settings)."""
        return CollectionRecord.new(
            self.collection, model_id=self.model_id, fingerprint=self.fingerprint, dim=self.embedder.dim,
            max_length=self.embedder.max_length, bm25=bm25, version=recemb.__version__,
            settings=self._settings())

    def _settings(self) -> SyncSettings:
        return SyncSettings(self.passage_tokens, self.passage_overlap, self.max_tokens, self.sparse,
                            self.sparse_language, self.passages_above, self.store_text)

    def expected_metadata(self) -> dict[str, Any]:
        """The record of a collection created by this instance, before its BM25 lengths are chosen."""
        return self.new_record().as_dict()

    def choose_bm25(self, documents: Iterable[Any] = ()) -> dict[str, Any]:
        """The BM25 settings of a new collection, average lengths sampled from ``documents`` (see ``lengths``)."""
        return choose_bm25_settings(documents, self.sparse_language, self.embedder.tokenizer, self.passage_tokens)

    def index_payload(self, collection: str) -> None:
        """Payload indexes on the fields every sync filters by (a server and Edge use them; local mode has none)."""
        for key, schema in {**PAYLOAD_INDEXES, **{f"metadata.{k}": v for k, v in self.index_metadata.items()}}.items():
            self.calls(self.store.create_payload_index, collection, key, schema)

    def forget_checks(self) -> None:
        """The collection changed under this instance: read and check its record again when next needed."""
        self.record, self._verified, self._read_checked, self._searchable = None, False, False, None

    def ensure_collection(self, create: bool = True, documents: Sequence[Any] = ()) -> None:
        """Create the collection, or check that it was built with this model, dimension and distance.

        ``documents``: the first sync's documents, from which a new collection's BM25 average lengths are chosen.
        ``create=False`` is the read path: the collection must exist, only the model (and so the dimension) must
        match, and its passage, truncation and BM25 settings are taken from the collection."""
        if self._verified or (not create and self._read_checked):
            return
        record = self.record or read_record(self.store, self.collection, self.calls)
        if record is None:
            if not create:
                raise CollectionMismatchError(f"collection {self.collection!r} does not exist; "
                                              + (self.calls(interrupted_rebuild_hint, self.store, self.collection)
                                                 or "sync documents first"))
            record = self.new_record(self.choose_bm25(documents) if self.sparse else None)
            self.calls(self.store.create_collection, self.collection, self.embedder.dim, self.sparse,
                       record.metadata())
            self.index_payload(self.collection)
            self.record, self._verified = record, True
            return
        if (refusal := record.refusal()) is not None:
            raise CollectionMismatchError(refusal)
        problems = record.model_problems(self.model_id, self.fingerprint, self.embedder.dim, record.dense_size)
        if not create:
            if problems:
                raise CollectionMismatchError(
                    f"collection {self.collection!r} cannot be searched with this model: " + "; ".join(problems)
                    + f". Search it with the model it was built with ({record.model!r}).")
            kept = record.settings
            self._use(SyncSettings(kept.passage_tokens, kept.passage_overlap, kept.max_tokens, kept.sparse,
                                   self.sparse_language, kept.passages_above, kept.store_text))
            self.record, self._read_checked = record, True
            return
        if record.layout == 1 and self.sparse:
            raise CollectionMismatchError(legacy_hybrid_refusal(self.collection))
        tokens, overlap, above = choose_passages(record.settings, *self._named_passages)  # unnamed: the record's
        store_text = self._store_text(record) if record.data.get("store_text") is not None else bool(
            self._named_store_text)  # an empty collection of a recemb that did not record it: as named now
        self._use(SyncSettings(tokens, overlap, self.max_tokens, self.sparse, self.sparse_language, above,
                               store_text))
        if record.layout > LAYOUT_VERSION:
            raise CollectionMismatchError(f"collection {self.collection!r} has layout {record.layout}, newer than "
                                          f"this recemb ({recemb.__version__}) knows; upgrade recemb")
        problems += record.setting_problems(self.new_record(), self.sparse, self.sparse_language)
        if problems:
            raise CollectionMismatchError(
                f"collection {self.collection!r} was built differently: " + "; ".join(problems)
                + ". Nothing was written. Sync with the collection's settings, into a new collection, or rebuild it "
                "with the new ones (`recemb sync --rebuild`).")
        for key, schema in self.index_metadata.items():  # keys named after the collection was created
            self.calls(self.store.create_payload_index, self.collection, f"metadata.{key}", schema)
        if not record.data.get("point_roots"):  # made before points recorded their root: index it once
            self.calls(self.store.create_payload_index, self.collection, ROOT_KEY, KEYWORD)
            record = replace(record.updated(point_roots=True), persisted=False)
        if record.data.get("store_text") is None:  # recorded from now on, as this sync writes its points
            record = replace(record.updated(store_text=self.store_text), persisted=False)
        if not record.persisted:  # what an earlier recemb did not record, read off the points: record it once
            record = replace(record, persisted=True)
            self.calls(self.store.update_metadata, self.collection, record.metadata())
        self.record, self._verified = record, True

    def scan(self) -> StoredDocuments:
        """What the collection's points hold (one pass over them): pass it to ``sync(stored=)`` after looking."""
        return scan_documents(self.calls, self.collection)

    def write_job(self, root: str = "") -> WriteJob:
        """The second pass's settings for this collection (checked first)."""
        return WriteJob(collection=self.collection, layout=self.record.layout, root=root, store_text=self.store_text,
                        passage_tokens=self.passage_tokens, passage_overlap=self.passage_overlap,
                        passages_above=self.passages_above, batch_size=self.batch_size, max_tokens=self.max_tokens,
                        bm25=self.record.bm25,
                        fingerprint=self.fingerprint)

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
        rebuild``).

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

        ``stored``: the collection's ``scan()``, if the caller made one (it is not scanned again).

        ``documents`` may be ``DocumentSource``s: read once to hash them and again only to embed, a batch at a time.
        If every document fails to read, a sync with ``delete_missing`` raises ``NothingReadableError`` before any
        write."""
        if rebuild:
            if not delete_missing:
                raise ValueError("a rebuild builds the collection from `documents` alone; delete_missing=False "
                                 "cannot keep documents that are not among them")
            if scope is not None:
                raise ValueError("a rebuild replaces the whole collection; it cannot be limited to a scope")
            return rebuild_collection(self, list(documents), show_progress_bar, on_document, keep_ids,
                                      allow_mass_delete, skip_empty, executor, stored)
        from tqdm.auto import tqdm

        start = time.perf_counter()
        report = SyncReport()
        # The first pass: ids, hashes and metadata, no text kept (a bar where there are many to read).
        sized = len(documents) if isinstance(documents, Sized) else 0
        shown = show_progress_bar if show_progress_bar is not None else sized > FIRST_PASS_BAR
        entries, bad = read_entries(tqdm(documents, total=sized or None, desc=f"Reading for {self.collection}",
                                         unit="doc", leave=False, disable=not shown))
        # Sources found by folder_sources know their root: the sync is that root's, never another's.
        root = sources_root(scope_root(scope) if scope is not None else None,
                            (scope_root(e.root) if e.root else e.root for e in entries))
        if root:
            bad += [(e.id, f"id is outside this sync's scope {root!r}") for e in entries if not e.id.startswith(root)]
            entries = [e for e in entries if e.id.startswith(root)]
        if delete_missing and bad and not entries:
            raise NothingReadableError(f"none of the {len(bad)} documents could be read ({bad[0][0]}: {bad[0][1]}); "
                                       "nothing was synced or deleted")
        report.failed.extend(bad)
        entries, left_out, blank = check_empty(entries, skip_empty)
        report.warnings.extend(blank)
        if finish_interrupted_rebuild(self):
            stored = None  # the collection was replaced: what the caller scanned is gone
        self.ensure_collection(documents=entries)  # before any write
        plan = plan_sync(self.collection, entries, left_out, bad, stored if stored is not None else self.scan(),
                         root, delete_missing, keep_ids, allow_mass_delete)
        report.failed.extend(plan.failed)
        report.warnings.extend(plan.warnings)
        for entry in plan.metadata_updates:
            self.calls(self.store.set_payload, self.collection, {"metadata": entry.metadata}, ids=[point_id(entry.id)])
            self.calls(self.store.set_payload, self.collection, {"metadata": entry.metadata},
                       filter=models.Filter(must=[match("document_id", entry.id), match("kind", KIND_PASSAGE)]))
        report.metadata_updated, report.unchanged = len(plan.metadata_updates), plan.unchanged
        for i in range(0, len(plan.unstamped), DELETE_BATCH):
            self.calls(self.store.set_payload, self.collection, {ROOT_KEY: root}, filter=models.Filter(must=[
                models.FieldCondition(key="document_id", match=models.MatchAny(any=plan.unstamped[i:i + DELETE_BATCH]))
            ]))

        def on_outcome(outcome: WriteOutcome) -> None:
            report.absorb(outcome)
            for doc_id, action in outcome.finished if on_document is not None else ():
                on_document(doc_id, action)

        show = show_progress_bar if show_progress_bar is not None else (
            len(plan.to_embed) > self.batch_size or any(e.size > STREAM_HINT_SIZE for e, _ in plan.to_embed))
        (executor or LocalExecutor(embed_progress=show_progress_bar)).run(
            self.write_job(root), plan.to_embed, self.embedder, lambda write: self.calls.write(self.collection, write),
            on_outcome, show_progress_bar=show)
        if plan.stale:
            # Only this root's points (or unstamped ones it owns): another root's never match, whatever their id.
            this_root = models.Filter(should=[match(ROOT_KEY, root), models.IsEmptyCondition(
                is_empty=models.PayloadField(key=ROOT_KEY))])
            for i in range(0, len(plan.stale), DELETE_BATCH):
                self.calls(self.store.delete, self.collection, models.Filter(must=[models.FieldCondition(
                    key="document_id", match=models.MatchAny(any=plan.stale[i:i + DELETE_BATCH])), this_root]))
            report.deleted = plan.deleted
        if report.added or report.updated:
            self.calls(self.store.optimize, self.collection, show_progress_bar=show_progress_bar)
        self._warn_if_too_large(report)
        report.seconds = time.perf_counter() - start
        return report

    def _warn_if_too_large(self, report: SyncReport) -> None:
        threshold = self.store.threshold_points
        if threshold is not None and (points := self.calls(self.store.count, self.collection)) > threshold:
            report.warnings.append((f"collection {self.collection}", (
                f"{points:,} points in qdrant-client's local mode, which is made for up to {threshold:,} (exact "
                "search, slow to open); move it to Qdrant Edge or a server with `recemb migrate`")))

    # ------------------------------------------------------------------ search
    def search(self, query: str, limit: int = 10, instruction: str | None = None,
               filter: dict[str, Any] | Any | None = None, granularity: str = KIND_DOCUMENT, mode: str | None = None,
               fusion: str = DEFAULT_FUSION) -> list[SearchHit]:
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
        """
        conditions = check_search(query, limit, filter, granularity, mode, fusion)
        self.ensure_collection(create=False)
        if self._searchable is None or self._searchable.record is not self.record:
            self._searchable = Searchable(self.collection, self.record.layout, bm25_encoders(self.record.bm25)[0],
                                          self.passage_tokens, self.record)
        return search(self.calls, self._searchable, self.embedder, query, limit, instruction, filter, granularity,
                      mode, fusion, conditions)

    def count(self) -> int:
        """Number of documents (document points) in the collection."""
        return self.calls(self.store.count, self.collection, models.Filter(must=[match("kind", KIND_DOCUMENT)]))

