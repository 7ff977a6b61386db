"""Searching a collection: hybrid (dense + BM25 fused by Qdrant), dense or BM25 alone; documents grouped from
their points and passages, each with its best passage as evidence."""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recemb_integrations.qdrant.calls import StoreCalls
from recemb_integrations.qdrant.errors import SearchNotice
from recemb_integrations.qdrant.points import KIND_DOCUMENT, KIND_PASSAGE, match, point_id
from recemb_integrations.qdrant.record import CollectionRecord, bm25_encoders
from recemb_integrations.sparse import Bm25
from recemb_integrations.stores import DENSE_VECTOR, SearchRequest, filters

__all__ = ["DEFAULT_FUSION", "FUSIONS", "GRANULARITIES", "MAX_SEARCH_LIMIT", "PREFETCH_MIN", "PREFETCH_PER_HIT",
           "RRF_K", "SEARCH_MODES", "SearchHit", "Searchable", "check_search", "metadata_condition", "search"]

SEARCH_MODES = ("hybrid", "dense", "sparse")
FUSIONS = ("dbsf", "rrf")
GRANULARITIES = (KIND_DOCUMENT, KIND_PASSAGE, "any")
# DBSF by default: it keeps how far each side's best scores stand out, where RRF keeps only ranks and lets a weak side
# pull good matches down (docs/quality.md compares the two).
DEFAULT_FUSION = "dbsf"
# Qdrant scores a list's hit at 0-based position p by 1 / (p + k): k = 61 is Cormack et al.'s (2009) 1 / (60 + rank),
# given explicitly because Qdrant's own default differs between engines.
RRF_K = 61
MAX_SEARCH_LIMIT = 10_000  # hits one search returns at most: its candidates and HNSW beam stay in the stores' range
PREFETCH_MIN = 100  # candidates each side of a hybrid search brings to the fusion, at least
PREFETCH_PER_HIT = 5  # ... and per requested hit


@dataclass
class SearchHit:
    """One result of a search. Character offsets (``start``/``end``, ``best_passage_start``/``best_passage_end``) are
    into the document's text as the sync read it (``text[start:end]`` is the passage); None for passages written
    before recemb recorded them (their stored text is then the tokens' decode)."""

    document_id: str
    score: float
    metadata: dict[str, Any]
    text: str | None = None  # the document's text (or, for a passage hit, the passage's), where stored
    passage: int | None = None  # passage index for passage hits, None for whole-document hits
    best_passage: int | None = None  # document hits of a collection with passages: the passage that scored best
    best_passage_text: str | None = None  # ... and its text, where stored
    start: int | None = None  # a passage hit's characters in its document
    end: int | None = None
    best_passage_start: int | None = None  # a document hit's best passage's characters
    best_passage_end: int | None = None
    content_hash: str | None = None  # the hash of the document's text the hit was made from (its own point's)
    # a passage hit's whole document text, where the collection stores it: read with the document's own point for
    # the version check, so a hit's line needs no second fetch
    document_text: str | None = None

    @property
    def span(self) -> tuple[int, int] | None:
        """The characters of the passage that matched (a passage hit's own, a document hit's best), where known."""
        if self.start is not None and self.end is not None:
            return self.start, self.end
        if self.best_passage_start is not None and self.best_passage_end is not None:
            return self.best_passage_start, self.best_passage_end
        return None


@dataclass(frozen=True)
class Searchable:
    """What a search needs to know of a collection: its record and the BM25 encoder of its queries (None:
    dense-only), built once."""

    record: CollectionRecord
    bm25: Bm25 | None

    @classmethod
    def of(cls, record: CollectionRecord) -> Searchable:
        return cls(record, bm25_encoders(record.bm25)[0])

    @property
    def collection(self) -> str:
        return self.record.collection

    @property
    def layout(self) -> int:
        return self.record.layout

    @property
    def passages(self) -> bool:
        return self.record.settings.passages


def metadata_condition(key: str, value: Any):
    """A condition on ``metadata.<key>``: exact for a str, int or bool, any-of for a list of str or of int.
    Anything else (floats, null, objects, mixed lists) is a ValueError that says so, before Qdrant sees it."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"filter key {key!r} must be a non-empty string")

    def int64(v) -> bool:  # Qdrant stores integers as 64-bit
        return isinstance(v, int) and not isinstance(v, bool) and -(2 ** 63) <= v < 2 ** 63

    if isinstance(value, (str, bool)) or int64(value):
        return match(f"metadata.{key}", value)
    if isinstance(value, list) and value and (all(isinstance(v, str) for v in value) or all(map(int64, value))):
        return filters.FieldCondition(key=f"metadata.{key}", match=filters.MatchAny(any=tuple(value)))
    raise ValueError(f"filter {key}={json.dumps(value)}: a value must be a string, a 64-bit integer, true/false, "
                     "or a non-empty list of strings or of integers (any of them matches)")


def check_search(query: Any, limit: Any, filter: Any, granularity: Any, mode: Any, fusion: Any,
                 per_document: Any = None) -> list:
    """The arguments of a search checked before any store or model work; the metadata conditions of a dict
    filter."""
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, got {type(query).__name__}")
    if granularity not in GRANULARITIES:
        raise ValueError("granularity must be 'document', 'passage' or 'any'")
    if mode is not None and mode not in SEARCH_MODES:
        raise ValueError(f"mode must be one of {', '.join(SEARCH_MODES)} (or None for the collection's default), "
                         f"got {mode!r}")
    if fusion not in FUSIONS:
        raise ValueError(f"fusion must be one of {', '.join(FUSIONS)}, got {fusion!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise ValueError(f"limit must be an int from 1 to {MAX_SEARCH_LIMIT:,}, got {limit!r}")
    if per_document is not None and (isinstance(per_document, bool) or not isinstance(per_document, int)
                                     or per_document < 1):
        raise ValueError(f"per_document must be a positive int (or None for no limit), got {per_document!r}")
    return [metadata_condition(k, v) for k, v in filter.items()] if isinstance(filter, Mapping) else []


def search(calls: StoreCalls, target: Searchable, embedder: Any, query: str, limit: int, instruction: str | None,
           filter: Mapping[str, Any] | Any | None, granularity: str, mode: str | None, fusion: str,
           metadata_conditions: list, query_vector: list[float] | None = None,
           per_document: int | None = None) -> list[SearchHit]:
    """The search ``QdrantSync.search`` describes, on a collection whose model was checked, with arguments that
    ``check_search`` passed (``metadata_conditions``: what it made of a dict filter). ``query_vector``: the query's
    dense vector where the caller made it already (a framework's retriever), else the embedder makes it;
    ``per_document``: at most this many hits of one document (passage and "any" granularity)."""
    if (refusal := target.record.search_refusal(mode, granularity)) is not None:
        raise ValueError(refusal)
    mode = _search_mode(target, mode)
    sparse_query = target.bm25.embed_query(query) if mode != "dense" else None
    if sparse_query is not None and not len(sparse_query):
        warnings.warn(SearchNotice(f"the query has no BM25 terms ({target.bm25.why_no_terms(query)}): "
                                   + ("nothing to search by BM25" if mode == "sparse" else
                                      "searched by the dense vector alone")), stacklevel=3)
        if mode == "sparse":
            return []
        mode = "dense"
    if mode == "sparse":
        dense_query = None
    elif query_vector is not None:
        dense_query = list(query_vector)
    else:
        dense_query = embedder.encode_queries([query], instruction=instruction)[0].tolist()

    grouped = granularity == KIND_DOCUMENT and target.passages
    # At most ``per_document`` hits of one document: the best ``limit`` groups of that size hold the best ``limit``
    # hits under that rule (a hit of a later group scores below the best of ``limit`` other documents).
    capped = per_document is not None and not grouped and granularity != KIND_DOCUMENT
    # Documents are found by their own points and by their passages (grouped); passages by theirs and, where a
    # document is too short to have any, by its own point.
    conditions = [] if granularity == "any" or grouped else [_granularity_condition(granularity)]
    if target.record.found_by_passages and (granularity == "any" or grouped):
        # another library's model whose documents have no vector of their own (``document_vector="none"``): a
        # long document is found by its passages, a short one by its own point
        conditions = [_granularity_condition(KIND_PASSAGE)]
    if isinstance(filter, Mapping):
        conditions += metadata_conditions
    elif filter is not None:
        conditions.append(filter)

    def request(candidates: int, excluded: set[tuple[str, str]]) -> SearchRequest:
        must_not = tuple(filters.Filter(must=(match("document_id", document_id), match("document_hash", version)))
                         for document_id, version in sorted(excluded)) or None
        point_filter = (filters.Filter(must=tuple(conditions) or None, must_not=must_not)
                        if conditions or excluded else None)
        return SearchRequest(limit=limit, dense=dense_query if mode != "sparse" else None,
                             sparse=sparse_query if mode != "dense" else None, filter=point_filter,
                             fusion=fusion if mode == "hybrid" else None, candidates=candidates, rrf_k=RRF_K,
                             dense_name=None if target.layout == 1 else DENSE_VECTOR)

    candidates = max(PREFETCH_MIN, PREFETCH_PER_HIT * limit)
    store, collection = calls.store, target.collection
    # Passages of a document whose own point does not hold the hash they were cut from (a sync stopped between
    # them and that point) are left out, and the search is repeated without every passage of that version (not
    # only those it met: a kill inside a long document leaves thousands): a hit is always of a complete document,
    # and each stale version costs one repeat at most. Only a stopped sync leaves such passages.
    excluded: set[tuple[str, str]] = set()

    def full_groups(size: int) -> list:
        # Each group's hits come best first; the store fills the page (``Store.query_groups``: a hybrid search
        # whose candidates hold fewer than ``limit`` documents is widened where more exist).
        return calls(store.query_groups, collection, request(candidates, excluded), "document_id", size)

    while True:
        if grouped:  # two a group: a document whose own point leads still shows its best passage
            hits, incomplete = _document_hits(calls, collection, full_groups(2))
        else:
            points = (calls(store.query, collection, request(candidates, excluded)) if not capped else
                      sorted((p for group in full_groups(per_document) for p in group),
                             key=lambda p: -p.score)[:limit])
            hits, incomplete = _point_hits(calls, collection, points)
        if not incomplete - excluded:
            break
        excluded |= incomplete
    if mode == "hybrid" and len(hits) == 1 < limit:
        # A fusion scores candidates against each other: alone, a hit scores 1.0 (both lists) or 0.5 (one).
        warnings.warn(SearchNotice("only one result matched, so its fused score would compare it with nothing "
                                   "(1.0 or 0.5 whatever its relevance); it is scored by its dense similarity "
                                   "instead"), stacklevel=3)
        return search(calls, target, embedder, query, limit, instruction, filter, granularity, "dense", fusion,
                      metadata_conditions, query_vector, per_document)
    return hits


def _search_mode(target: Searchable, mode: str | None) -> str:
    if target.bm25 is None:  # (a hybrid or sparse mode was refused already)
        if target.layout == 1:
            warnings.warn(SearchNotice(
                f"collection {target.collection!r} was built by recemb 0.1 with dense vectors only: searched "
                "dense-only. Rebuild it with `recemb sync --rebuild PATHS` for hybrid (dense + BM25) search."),
                stacklevel=4)
        return "dense"
    return mode or "hybrid"


def _granularity_condition(granularity: str):
    if granularity == KIND_DOCUMENT:
        return match("kind", KIND_DOCUMENT)
    return filters.Filter(should=(match("kind", KIND_PASSAGE),
                                  filters.Filter(must=(match("kind", KIND_DOCUMENT), match("passages", 0)))))


def _document_points(calls: StoreCalls, collection: str, document_ids: set[str]) -> dict[str, dict[str, Any]]:
    """The payloads of these documents' own points (absent: not written yet)."""
    if not document_ids:
        return {}
    points = calls(calls.store.retrieve, collection, [point_id(d) for d in sorted(document_ids)])
    return {p.payload["document_id"]: p.payload for p in points if p.payload.get("document_id") is not None}


def _complete(passage: dict[str, Any], own: dict[str, Any] | None) -> bool:
    """Whether a passage belongs to its document's stored version. Passages of a recemb that did not record
    the hash they were cut from cannot be told: they are taken as they are."""
    expected = passage.get("document_hash")
    return expected is None or (own is not None and own.get("content_hash") == expected)


def _point_hits(calls: StoreCalls, collection: str, points) -> tuple[list[SearchHit], set[str]]:
    """Hits of an ungrouped search, and the (document id, hash) of passages among them whose document does not
    hold that version."""
    passages = [p for p in points if p.payload.get("kind") == KIND_PASSAGE]
    owners = _document_points(calls, collection, {p.payload["document_id"] for p in passages})
    stale = {p.id for p in passages if not _complete(p.payload, owners.get(p.payload["document_id"]))}
    incomplete = {_version(p.payload) for p in passages if p.id in stale}
    hits = []
    for p in points:
        if p.id in stale:
            continue
        hit = _hit(p.payload, p.score)
        own = p.payload if p.payload.get("kind") == KIND_DOCUMENT else owners.get(hit.document_id) or {}
        hit.content_hash = own.get("content_hash")
        if hit.passage is not None:
            hit.document_text = own.get("text")
        hits.append(hit)
    return hits, incomplete


def _document_hits(calls: StoreCalls, collection: str, groups) -> tuple[list[SearchHit], set[str]]:
    """One hit per group (document): its best score, the document's payload, its best passage; and the (document
    id, hash) of best passages whose document does not hold that version."""
    found = []
    for group in groups:
        own = next((h for h in group if h.payload.get("kind") == KIND_DOCUMENT), None)
        passage = next((h for h in group if h.payload.get("kind") == KIND_PASSAGE), None)
        found.append((group[0], own, passage))
    # Documents whose own point was not among the candidates: their payloads are fetched.
    stored = _document_points(calls, collection, {best.payload["document_id"] for best, own, _ in found if own is None})
    hits, incomplete = [], set()
    for best, own, passage in found:
        own_payload = own.payload if own is not None else stored.get(best.payload["document_id"])
        if passage is not None and not _complete(passage.payload, own_payload):
            incomplete.add(_version(passage.payload))
            continue
        if own_payload is None:  # a legacy passage of a document whose point is gone: nothing to show
            continue
        hit = _hit(own_payload, best.score)
        hit.passage, hit.content_hash = None, own_payload.get("content_hash")
        if passage is not None:
            hit.best_passage, hit.best_passage_text = passage.payload.get("passage"), passage.payload.get("text")
            hit.best_passage_start, hit.best_passage_end = passage.payload.get("start"), passage.payload.get("end")
        hits.append(hit)
    return hits, incomplete


def _version(passage: dict[str, Any]) -> tuple[str, str]:
    return passage["document_id"], passage["document_hash"]


def _hit(payload: dict[str, Any], score: float) -> SearchHit:
    return SearchHit(document_id=payload["document_id"], score=float(score), metadata=payload.get("metadata") or {},
                     text=payload.get("text"), passage=payload.get("passage"), start=payload.get("start"),
                     end=payload.get("end"))
