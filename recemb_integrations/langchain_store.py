"""A recemb collection as a LangChain vector store and retriever: whole documents in, passages with their original
text and place out (made for an LLM's context: each document's best passage, each document once), one point per
document id (never a duplicate), on the main job's own path.

    from recemb_integrations.langchain import RecembEmbeddings, RecembVectorStore
    store = RecembVectorStore(embedding=RecembEmbeddings(model_name="recemb/recemb-mamba2-mini"),
                              collection_name="notes", path="./store")
    store.add_documents(docs)   # ids: ids=, else each Document's id, else one made from its content
    retriever = store.as_retriever(search_kwargs={"k": 4})   # passages: page_content == text[start:end]
    store.similarity_search("...", granularity="document")    # whole documents

With ``RecembEmbeddings`` each document is embedded as ``recemb sync`` embeds it: whole, plus passages by the
collection's settings, with BM25 beside the dense vector. Any other LangChain ``Embeddings`` gives one dense vector
per document (BM25 beside it). A collection written by ``recemb sync`` opens with the settings it recorded.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Sequence
from typing import Any

from recemb_integrations._imports import require

_documents = require("langchain_core.documents", "langchain")
_vectorstores = require("langchain_core.vectorstores", "langchain")
_embeddings = require("langchain_core.embeddings", "langchain")

from recemb_integrations.framework_collection import (  # noqa: E402
    PER_DOCUMENT,
    RAG_GRANULARITY,
    STORE_DEFAULT,
    Found,
    FrameworkCollection,
    check_granularity,
    recemb_fields,
)
from recemb_integrations.langchain_embeddings import RecembEmbeddings  # noqa: E402
from recemb_integrations.qdrant.documents import Document as RecembDocument  # noqa: E402
from recemb_integrations.qdrant.external import MODEL_OPTIONS, ExternalEmbedder  # noqa: E402
from recemb_integrations.qdrant.external import external_embedder as other_model  # noqa: E402
from recemb_integrations.qdrant.points import content_hash  # noqa: E402

__all__ = ["RecembRetriever", "RecembVectorStore", "content_id"]

LCDocument = _documents.Document
SEARCH_OPTIONS = ("filter", "mode", "granularity", "per_document")  # a search's own options, beside k


def content_id(text: str, metadata: dict[str, Any] | None = None) -> str:
    """The id of a document given without one: made from its text and metadata, so adding it again overwrites it."""
    import json

    return "sha256-" + content_hash(text + "\x00" + json.dumps(metadata or {}, sort_keys=True, default=str))[:32]


def external_embedder(embedding: Any, **cut: Any) -> ExternalEmbedder:
    """Another LangChain ``Embeddings`` as the main job's embedder: its passages cut by the tokenizer of the
    sentence-transformers model it holds (``HuggingFaceEmbeddings``), else to a budget of characters; ``cut``:
    ``MODEL_OPTIONS`` (``qdrant.external.external_embedder``)."""
    name = getattr(embedding, "model_name", None) or getattr(embedding, "model", None)
    label = f"langchain:{type(embedding).__name__}" + (f":{name}" if isinstance(name, str) and name else "")
    return other_model(embedding, name=label, embed_documents=embedding.embed_documents,
                       embed_query=embedding.embed_query, **cut)


class RecembVectorStore(_vectorstores.VectorStore):
    """A recemb collection as a LangChain ``VectorStore``.

    Args:
        embedding: ``RecembEmbeddings`` (documents embedded whole and as passages, by the collection's settings) or
            any LangChain ``Embeddings`` (one dense vector per document).
        collection_name: the collection, created on the first add.
        path / url / client: Qdrant Edge's folder (``store_kind="local"``: qdrant-client's local mode), a Qdrant
            server (``api_key``), or a ``QdrantClient`` you opened and close; one of them.
        granularity: what a search returns by default: None (made for an LLM's context: each document's best
            passage, its own characters with ``start``/``end`` and line or page; a document too short for passages,
            or in a collection without them, whole), "document" (each document whole, its best passage's place as
            evidence), "passage" or "any".
        per_document: at most this many hits of one document among a search's k (default 1: each document once);
            more, or None for no limit, gives several passages of one document, those that overlap merged into
            one span.
        options: the main job's settings for a new collection: passage_tokens, passage_overlap, passages_above,
            store_text (default True here), sparse, sparse_language, max_tokens, batch_size, index_metadata,
            model_id, retries. An existing collection keeps what it recorded; a contradicting option is refused.

    Hits: ``page_content`` is a passage hit's original characters (``text[start:end]``, stored or re-read from its
    unchanged file; never a token decode), or a document hit's whole text. ``metadata`` is the user's; a hit that is a
    passage, or that a passage led to, or whose text is not at hand, also carries ``document_id``, ``kind``,
    ``passage``, ``start``, ``end``, ``line`` or ``page``, ``content_hash`` and ``note`` (recemb's keys win over the
    user's of the same name). ``id`` is the document id. Scores: ``similarity_search_with_score``.

    Documents added here belong to the framework owner of the collection: a ``recemb sync`` of a folder into the
    same collection never deletes them, and ``delete`` refuses a folder's documents (``NotOwnedError``).
    """

    def __init__(self, embedding: Any, collection_name: str, *, path: str | os.PathLike | None = None,
                 url: str | None = None, api_key: str | None = None, client: Any = None, store_kind: str = "auto",
                 granularity: str | None = RAG_GRANULARITY, per_document: int | None = PER_DOCUMENT,
                 **options: Any):
        if not isinstance(embedding, _embeddings.Embeddings):
            raise TypeError(f"embedding must be a LangChain Embeddings, got {type(embedding).__name__}")
        self._embedding = embedding
        self.granularity, self.per_document = check_granularity(granularity), per_document
        cut = {k: options.pop(k) for k in MODEL_OPTIONS if k in options}
        if not isinstance(embedding, RecembEmbeddings) and "passage_tokens" in options:  # cut by its tokenizer
            cut["passage_tokens"] = options.pop("passage_tokens")
        if isinstance(embedding, RecembEmbeddings):
            if cut:
                raise TypeError(f"{next(iter(cut))} is for another library's model; recemb's own cuts its passages "
                                "by passage_tokens")
            make, instruction = (lambda: embedding.embedder), embedding.query_instruction
        else:
            make, instruction = (lambda: external_embedder(embedding, **cut)), None
        self.collection = FrameworkCollection(collection_name, make, path=path, url=url, api_key=api_key,
                                              client=client, store_kind=store_kind, instruction=instruction,
                                              **options)

    @property
    def embeddings(self) -> Any:
        return self._embedding

    def close(self) -> None:
        """Release the store where this instance opened it (Qdrant Edge holds its folder while open)."""
        self.collection.close()

    def __enter__(self) -> RecembVectorStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ writes
    def add_texts(self, texts: Iterable[str], metadatas: list[dict] | None = None, *, ids: list[str] | None = None,
                  **kwargs: Any) -> list[str]:
        texts = list(texts)
        metadatas = list(metadatas) if metadatas is not None else [{} for _ in texts]
        if len(metadatas) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(metadatas)} metadatas")
        return self.add_documents([LCDocument(page_content=t, metadata=m or {}) for t, m in zip(texts, metadatas)],
                                  ids=ids, **kwargs)

    def add_documents(self, documents: list[LCDocument], **kwargs: Any) -> list[str]:
        """Write ``documents`` (whole; passages too where the collection has them), overwriting those of the same
        id and deleting nothing else. Ids: ``ids=``, else each document's ``id``, else one from its content."""
        ids = kwargs.pop("ids", None)
        show_progress_bar = kwargs.pop("show_progress_bar", None)
        kwargs.pop("batch_size", None)  # the indexing API's; the main job batches by the collection's batch_size
        if kwargs:
            raise TypeError(f"add_documents got unexpected options {sorted(kwargs)}")
        documents = list(documents)
        if ids is not None:
            ids = list(ids)
            if len(ids) != len(documents):
                raise ValueError(f"{len(documents)} documents but {len(ids)} ids")
        # An id given (even "" or blank, which the sync refuses by name) is the id; only a missing one is made.
        given = [ids[i] if ids is not None and ids[i] is not None else d.id for i, d in enumerate(documents)]
        chosen = [g if g is not None else content_id(d.page_content, d.metadata) for g, d in zip(given, documents)]
        self.collection.add([RecembDocument(i, d.page_content, dict(d.metadata or {})) for i, d in
                             zip(chosen, documents)], show_progress_bar=show_progress_bar)
        return chosen

    async def aadd_documents(self, documents: list[LCDocument], **kwargs: Any) -> list[str]:
        return await asyncio.to_thread(self.add_documents, documents, **kwargs)

    async def aadd_texts(self, texts: Iterable[str], metadatas: list[dict] | None = None, *,
                         ids: list[str] | None = None, **kwargs: Any) -> list[str]:
        return await asyncio.to_thread(self.add_texts, list(texts), metadatas, ids=ids, **kwargs)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete these documents and all their passages. ``ids`` None is refused (LangChain's "delete all" is
        not taken from a missing argument); an empty list deletes nothing; an id of a folder's document (written by
        ``recemb sync``) is a ``NotOwnedError`` before anything is deleted."""
        if ids is None:
            raise ValueError("delete needs the ids to delete; None would mean every document, which this store "
                             "never takes from a missing argument (delete the collection to empty it)")
        self.collection.delete(ids)
        return True

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        return await asyncio.to_thread(self.delete, ids, **kwargs)

    def get_by_ids(self, ids: Sequence[str], /) -> list[LCDocument]:
        return [LCDocument(page_content=d.text or "", metadata=dict(d.metadata), id=d.id)
                for d in self.collection.get(list(ids))]

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[LCDocument]:
        return await asyncio.to_thread(self.get_by_ids, ids)

    # ------------------------------------------------------------------ reads
    def similarity_search_with_score(self, query: str, k: int = 4, *, filter: dict[str, Any] | Any | None = None,
                                     mode: str | None = None, granularity: str | None = STORE_DEFAULT,
                                     per_document: int | None = STORE_DEFAULT, **kwargs: Any
                                     ) -> list[tuple[LCDocument, float]]:
        """The ``k`` best hits with their scores.

        Args:
            filter: metadata key -> value (all must match; a list matches any of its values) or a qdrant
                ``models.Filter``.
            mode: "hybrid" (the collection's default with BM25), "dense" or "sparse". A hybrid score ranks one
                search's hits against each other; "dense" scores are cosine similarities.
            granularity: "document", "passage", "any", or None (passages where the collection has them); not
                given: the store's (see the class docstring).
            per_document: at most this many hits of one document (None: no limit); not given: the store's."""
        return [(as_document(f), f.score) for f in self._search(query, k, filter, mode, granularity, per_document,
                                                                 kwargs)]

    def similarity_search(self, query: str, k: int = 4, *, filter: dict[str, Any] | Any | None = None,
                          mode: str | None = None, granularity: str | None = STORE_DEFAULT,
                          per_document: int | None = STORE_DEFAULT, **kwargs: Any) -> list[LCDocument]:
        """The ``k`` best hits (``similarity_search_with_score`` says what each option does)."""
        return [as_document(f) for f in self._search(query, k, filter, mode, granularity, per_document, kwargs)]

    def similarity_search_by_vector(self, embedding: list[float], k: int = 4, *,
                                    filter: dict[str, Any] | Any | None = None,
                                    granularity: str | None = STORE_DEFAULT, per_document: int | None = STORE_DEFAULT,
                                    **kwargs: Any) -> list[LCDocument]:
        """Dense search by a query vector made by the collection's model (checked: its dimension, finite, not all
        zeros, of unit length for recemb's models; ``VectorError`` otherwise)."""
        if embedding is None:  # never the empty query's search
            raise TypeError("similarity_search_by_vector needs the query's vector, got None; nothing was searched")
        if kwargs.get("mode", "dense") != "dense":
            raise ValueError(f"a search by vector is dense, got mode={kwargs['mode']!r}")
        kwargs.pop("mode", None)
        return [as_document(f) for f in self._search("", k, filter, "dense", granularity, per_document, kwargs,
                                                     query_vector=embedding)]

    async def asimilarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any
                                            ) -> list[tuple[LCDocument, float]]:
        return await asyncio.to_thread(self.similarity_search_with_score, query, k, **kwargs)

    async def asimilarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[LCDocument]:
        return await asyncio.to_thread(self.similarity_search, query, k, **kwargs)

    def _search(self, query: str, k: int, filter: Any, mode: str | None, granularity: Any, per_document: Any,
                unknown: dict[str, Any], query_vector: list[float] | None = None) -> list[Found]:
        if unknown:  # LangChain's interface passes options as keywords; a misspelt one must not be ignored
            raise TypeError(f"unknown search option {sorted(unknown)[0]!r}; this store takes k, "
                            f"{', '.join(SEARCH_OPTIONS)}")
        return self.collection.search(
            query, k=k, filter=filter, mode=mode, query_vector=query_vector,
            granularity=self.granularity if granularity is STORE_DEFAULT else granularity,
            per_document=self.per_document if per_document is STORE_DEFAULT else per_document)

    def as_retriever(self, **kwargs: Any) -> RecembRetriever:
        """A retriever: ``search_kwargs`` {"k", "filter", "mode", "granularity", "per_document"}; only
        ``search_type="similarity"`` (hybrid scores are not similarities, so no threshold, and MMR would need the
        points' vectors)."""
        tags = kwargs.pop("tags", None) or [*self._get_retriever_tags()]
        return RecembRetriever(vectorstore=self, tags=tags, **kwargs)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_texts(cls, texts: list[str], embedding: Any, metadatas: list[dict] | None = None, *,
                   ids: list[str] | None = None, collection_name: str = "langchain", **kwargs: Any
                   ) -> RecembVectorStore:
        store = cls(embedding, collection_name, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    @classmethod
    def from_documents(cls, documents: list[LCDocument], embedding: Any, *, ids: list[str] | None = None,
                       collection_name: str = "langchain", **kwargs: Any) -> RecembVectorStore:
        store = cls(embedding, collection_name, **kwargs)
        store.add_documents(documents, ids=ids)
        return store

    @classmethod
    async def afrom_texts(cls, texts: list[str], embedding: Any, metadatas: list[dict] | None = None, *,
                          ids: list[str] | None = None, **kwargs: Any) -> RecembVectorStore:
        return await asyncio.to_thread(cls.from_texts, texts, embedding, metadatas, ids=ids, **kwargs)


def as_document(found: Found) -> LCDocument:
    """A hit as a LangChain ``Document``: the user's metadata alone for a whole document that no passage led to,
    with recemb's keys (``recemb_fields``) otherwise."""
    metadata = dict(found.metadata) if found.whole_document else {**found.metadata, **recemb_fields(found)}
    return LCDocument(page_content=found.text or "", metadata=metadata, id=found.document_id)


class RecembRetriever(_vectorstores.VectorStoreRetriever):
    """``RecembVectorStore.as_retriever()``: LangChain's vector store retriever with ``k`` (and the search options)
    also settable directly, e.g. ``RecembRetriever(vectorstore=store, k=3, per_document=2)``; ``invoke(query,
    k=...)`` overrides them for one call. A field left None is the store's (``search_kwargs={"per_document":
    None}`` asks for no limit)."""

    k: int | None = None
    filter: Any = None
    mode: str | None = None
    granularity: str | None = None
    per_document: int | None = None

    def model_post_init(self, __context: Any) -> None:
        if self.search_type != "similarity":
            raise ValueError(f"search_type {self.search_type!r}: a recemb collection is searched by similarity "
                             "(hybrid scores are not similarities, and MMR needs the points' vectors)")
        given = {"k": self.k, "filter": self.filter, "mode": self.mode, "granularity": self.granularity,
                 "per_document": self.per_document}
        self.search_kwargs = {**self.search_kwargs, **{k: v for k, v in given.items() if v is not None}}
