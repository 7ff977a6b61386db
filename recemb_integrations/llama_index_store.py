"""A recemb collection as a LlamaIndex vector store: nodes in, whole documents and passages with their original text
and place out, on the main job's own path (``FrameworkCollection``: every write a ``QdrantSync.sync`` that deletes
nothing it was not asked to, every search ``QdrantSync.search``).

    from llama_index.core import SimpleDirectoryReader, VectorStoreIndex
    from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
    from llama_index.core.storage.docstore import SimpleDocumentStore
    from recemb_integrations.llama_index import EmbedInStore, RecembEmbedding, RecembVectorStore

    embed_model = RecembEmbedding(model_name="recemb-mamba2-mini")
    store = RecembVectorStore(collection_name="docs", path="./store", embed_model=embed_model)
    pipeline = IngestionPipeline(transformations=[EmbedInStore()], vector_store=store, docstore=SimpleDocumentStore(),
                                 docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)  # no splitter needed
    pipeline.run(documents=SimpleDirectoryReader("./docs", filename_as_id=True).load_data())
    retriever = VectorStoreIndex.from_vector_store(store, embed_model=embed_model).as_retriever(similarity_top_k=4)
    retriever.retrieve("...")   # passages: start_char_idx/end_char_idx slice their document, ref_doc_id names it
    store.close()  # Qdrant Edge holds its folder while open

Each node is one recemb document (its id the node's id). In an ``IngestionPipeline``, ``EmbedInStore()`` (the last
transformation, in the embed model's place) leaves the embedding to the store: each text reaches the model once, in
the main job's sync, and only where it is new or changed, so the script run again over unchanged files (a new
pipeline and docstore) embeds nothing. ``transformations=[embed_model]`` works too, but LlamaIndex then embeds every
file it is given, whole and with its metadata prepended, before the store sees it: that vector is the document's own
point, and a long document's passages are embedded besides. The main job adds passages where the text is longer
than the collection's passage threshold, so whole files need no splitter; a splitter's chunks are stored as the
chunks they are. Any other LlamaIndex embed model gives one dense vector per node (recemb's BM25 beside it), no
passages. Without an embed model, nodes and queries bring their own vectors (nodes ``EmbedInStore`` marked are
refused). A collection written by ``recemb sync`` opens with the settings it recorded; another model is refused
(``CollectionMismatchError``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import Any

from recemb_integrations._imports import require

_types = require("llama_index.core.vector_stores.types", "llama-index")
_schema = require("llama_index.core.schema", "llama-index")
_pydantic = require("llama_index.core.bridge.pydantic", "llama-index")
_embeddings = require("llama_index.core.base.embeddings.base", "llama-index")

from recemb_integrations.framework_collection import (  # noqa: E402
    PER_DOCUMENT,
    RAG_GRANULARITY,
    STORE_DEFAULT,
    Found,
    FrameworkCollection,
    check_granularity,
    recemb_fields,
)
from recemb_integrations.llama_index_embed_in_store import EmbedInStore, marked_for_the_store  # noqa: E402
from recemb_integrations.llama_index_embedding import RecembEmbedding  # noqa: E402
from recemb_integrations.llama_index_filters import REF_DOC_KEY, dict_filter, query_filter  # noqa: E402
from recemb_integrations.qdrant.documents import Document as RecembDocument  # noqa: E402
from recemb_integrations.qdrant.documents import StoredDocument, check_document_ids  # noqa: E402
from recemb_integrations.qdrant.external import MODEL_OPTIONS, ExternalEmbedder, external_embedder  # noqa: E402
from recemb_integrations.qdrant.points import KIND_PASSAGE  # noqa: E402

__all__ = ["EmbedInStore", "GIVEN_VECTORS", "NODE_KEY", "REF_DOC_KEY", "RecembVectorStore"]

NODE_KEY = "_node"  # metadata key: what LlamaIndex needs back of a node (class, relationships, ...), stripped on return
# recemb's bookkeeping keys on a hit, kept out of what LlamaIndex embeds and shows an LLM (document_id, line, page
# and note stay in)
HIDDEN_KEYS = ("kind", "passage", "start", "end", "content_hash")
GIVEN_VECTORS = "llama-index:given-vectors"  # the model name a store without an embed_model records
Mode = _types.VectorStoreQueryMode
MODES = {Mode.DEFAULT: None, Mode.HYBRID: "hybrid", Mode.SPARSE: "sparse", Mode.TEXT_SEARCH: "sparse"}


class RecembVectorStore(_types.BasePydanticVectorStore):
    """A recemb collection as a LlamaIndex vector store.

    Args:
        collection_name: the collection, created on the first add.
        path / url / client: Qdrant Edge's folder (``store_kind="local"``: qdrant-client's local mode), a Qdrant
            server (``api_key``), or a ``QdrantClient`` / recemb ``Store`` you opened and close; one of them.
        embed_model: ``RecembEmbedding`` (documents whole plus passages, by the collection's settings), any other
            LlamaIndex embed model (one dense vector per node), or None (nodes carry their embeddings and queries
            their ``query_embedding``; the collection records the model as ``GIVEN_VECTORS``). It embeds the nodes
            ``EmbedInStore`` marked, and those without an embedding.
        granularity: what a query returns by default: None (made for an LLM's context: each document's best
            passage, a node whose ``start_char_idx``/``end_char_idx`` slice its document and whose ``ref_doc_id``
            names it; a document too short for passages, or in a collection without them, whole), "document" (each
            document whole, its best passage as evidence in the metadata), "passage" or "any"; a retriever's
            ``vector_store_kwargs={"granularity": ...}`` overrides it.
        per_document: at most this many nodes of one document among a query's top k (default 1: each document
            once); more, or None for no limit, gives several passages of one document, those that overlap merged
            into one node; ``vector_store_kwargs={"per_document": ...}`` overrides it.
        options: the main job's settings for a new collection (``FrameworkCollection``'s ``SYNC_OPTIONS``):
            passage_tokens, passage_overlap, passages_above, store_text (default True), sparse, sparse_language,
            max_tokens, batch_size, index_metadata (``ref_doc_id`` is always indexed), model_id, retries. An
            existing collection keeps what it recorded; a contradicting option is refused.

    Query modes: ``DEFAULT`` is the collection's default, hybrid (dense + BM25 fused in Qdrant) where it has BM25,
    else dense; ``HYBRID`` hybrid; ``SPARSE`` and ``TEXT_SEARCH`` BM25 alone. The retriever's query embedding is the
    dense side (made by the index's embed model, which must be the collection's); the BM25 side uses the query text.
    A hybrid score ranks one query's hits against each other; it is not a similarity. ``alpha`` is not taken (Qdrant
    fuses by DBSF, without a weight).

    Hits are ``TextNode``s: a passage hit's id is ``"<document id>#passage-<n>"``, its text the passage's own
    characters and ``start_char_idx`` / ``end_char_idx`` their place in the stored document's text; a document
    hit's id is the node's id and its text the whole stored text (its ``start_char_idx`` / ``end_char_idx`` those
    the node was added with, else 0 and its length where it is its own source document). The SOURCE relationship is
    the node's source document (a whole document is its own). Metadata is the user's; a passage hit, a document hit
    a passage led to, or one whose text is not at hand also carries recemb's ``document_id``, ``kind``,
    ``passage``, ``start``, ``end``, ``line`` or ``page``, ``content_hash`` and ``note`` (recemb's keys win over the
    user's of the same name).
    The metadata keys ``_node`` and ``ref_doc_id`` are the store's own.

    Nodes added here belong to the framework owner of the collection: a ``recemb sync`` of a folder into the same
    collection never deletes them, and no delete here touches a folder's documents (``delete_nodes`` refuses one by
    id, ``NotOwnedError``; ``delete`` and ``clear`` leave them).
    """

    stores_text: bool = True
    is_embedding_query: bool = True
    collection_name: str
    path: str | None = None
    url: str | None = None
    store_kind: str = "auto"
    granularity: str | None = RAG_GRANULARITY
    per_document: int | None = PER_DOCUMENT

    _collection: Any = _pydantic.PrivateAttr()
    _embed_model: Any = _pydantic.PrivateAttr(default=None)
    _vector_dim: int | None = _pydantic.PrivateAttr(default=None)
    _cut: dict = _pydantic.PrivateAttr(default_factory=dict)

    def __init__(self, collection_name: str, *, path: str | os.PathLike | None = None, url: str | None = None,
                 api_key: str | None = None, client: Any = None, embed_model: Any = None, store_kind: str = "auto",
                 granularity: str | None = RAG_GRANULARITY, per_document: int | None = PER_DOCUMENT,
                 **options: Any):
        if embed_model is not None and not isinstance(embed_model, _embeddings.BaseEmbedding):
            raise TypeError(f"embed_model must be a LlamaIndex BaseEmbedding or None, got {type(embed_model).__name__}")
        check_granularity(granularity)
        # ref_doc_id indexed: delete(ref_doc_id) filters by it (exact and fast on Qdrant Edge and a server)
        options["index_metadata"] = {REF_DOC_KEY: "keyword", **(options.get("index_metadata") or {})}
        super().__init__(collection_name=collection_name, path=os.fspath(path) if path is not None else None, url=url,
                         store_kind=store_kind, granularity=granularity, per_document=per_document)
        self._embed_model = embed_model
        self._cut = {k: options.pop(k) for k in MODEL_OPTIONS if k in options}
        if embed_model is not None and not isinstance(embed_model, RecembEmbedding) and "passage_tokens" in options:
            self._cut["passage_tokens"] = options.pop("passage_tokens")  # cut by its tokenizer
        if self._cut and (embed_model is None or isinstance(embed_model, RecembEmbedding)):
            raise TypeError(f"{next(iter(self._cut))} is for another library's embed_model; recemb's own cuts its "
                            "passages by passage_tokens")
        instruction = embed_model.query_instruction if isinstance(embed_model, RecembEmbedding) else None
        self._collection = FrameworkCollection(collection_name, self._make_embedder, path=path, url=url,
                                               api_key=api_key, client=client, store_kind=store_kind,
                                               instruction=instruction, **options)

    @classmethod
    def class_name(cls) -> str:
        return "RecembVectorStore"

    @property
    def client(self) -> Any:
        """The recemb ``Store`` the collection lives in (opened on first use)."""
        return self._collection.store

    @property
    def collection(self) -> FrameworkCollection:
        return self._collection

    @property
    def embed_model(self) -> Any:
        return self._embed_model

    def close(self) -> None:
        """Release the store where this instance opened it (Qdrant Edge holds its folder while open)."""
        self._collection.close()

    def __enter__(self) -> RecembVectorStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ the main job's embedder
    def _make_embedder(self) -> Any:
        """What ``FrameworkCollection`` embeds with, made on its first use."""
        model = self._embed_model
        if isinstance(model, RecembEmbedding):
            return model.embedder
        if model is not None:
            return external_embedder(model, name=f"llama-index:{type(model).__name__}:{model.model_name}",
                                     embed_documents=model.get_text_embedding_batch,
                                     embed_query=model.get_query_embedding, **self._cut)
        dim = self._vector_dim or self._recorded_dim()
        if dim is None:
            raise ValueError("this RecembVectorStore was built without an embed_model and has seen no vector yet: "
                             "add nodes with embeddings (or query with a query_embedding) first")
        return ExternalEmbedder(GIVEN_VECTORS, dim, _no_model, _no_model)

    def _recorded_dim(self) -> int | None:
        return self._collection.recorded_dim()

    def _nothing_stored(self) -> bool:
        """A store without an embed_model that has seen no vector, over a collection that does not exist: nothing to
        read or delete (and no vector size to open it with)."""
        if self._embed_model is not None or self._vector_dim is not None:
            return False
        self._vector_dim = self._recorded_dim()
        return self._vector_dim is None

    # ------------------------------------------------------------------ writes
    def add(self, nodes: Sequence[Any], **kwargs: Any) -> list[str]:
        """Write each node as one recemb document (new ones added, changed ones re-embedded with their passages,
        unchanged ones left), deleting nothing else; returns the node ids. Raises ``AddError`` where some could not
        be written (after the others were)."""
        show_progress_bar = kwargs.pop("show_progress_bar", None)
        if kwargs:
            raise TypeError(f"add got unexpected options {sorted(kwargs)}")
        nodes = list(nodes)
        if self._embed_model is None and any(marked_for_the_store(n) for n in nodes):
            raise ValueError("these nodes were marked by EmbedInStore for the store to embed, but this "
                             "RecembVectorStore has no embed_model: give it one (RecembEmbedding), or embed the "
                             "nodes first; nothing was written")
        if self._embed_model is None and self._vector_dim is None:
            self._vector_dim = next((len(n.embedding) for n in nodes if n.embedding), None)
        self._collection.add([as_document(n) for n in nodes], show_progress_bar=show_progress_bar)
        return [n.node_id for n in nodes]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every node of this source document (and a node whose own id it is), with their passages. None or
        an empty string is a ValueError, anything but a string a TypeError: nothing is deleted. A folder's document
        of that id (written by ``recemb sync``) is not this store's node and is left alone."""
        if delete_kwargs:
            raise TypeError(f"delete got unexpected options {sorted(delete_kwargs)}")
        if ref_doc_id is None or ref_doc_id == "":
            raise ValueError(f"delete needs a ref_doc_id, got {ref_doc_id!r}; nothing was deleted (clear() deletes "
                             "every node)")
        if not isinstance(ref_doc_id, str):
            raise TypeError(f"ref_doc_id is a string, got {type(ref_doc_id).__name__}; nothing was deleted")
        if self._nothing_stored():
            return
        self._collection.delete([ref_doc_id, *self._collection.document_ids({REF_DOC_KEY: ref_doc_id})],
                                keep_foreign=True)

    def delete_nodes(self, node_ids: list[str] | None = None, filters: Any = None, **delete_kwargs: Any) -> None:
        """Delete these nodes (by id), or those whose metadata matches ``filters``, or those of ``node_ids`` that
        match them. Both None is a ValueError (it would delete everything: ``clear()`` does that); [] deletes
        nothing. ``filters``: exact matches (EQ) and IN joined by AND, over the nodes written through a framework;
        a folder's document named by id is a ``NotOwnedError`` before anything is deleted."""
        if delete_kwargs:
            raise TypeError(f"delete_nodes got unexpected options {sorted(delete_kwargs)}")
        if node_ids is None and filters is None:
            raise ValueError("delete_nodes without node_ids or filters would delete everything; use clear()")
        ids = self._ids(node_ids, filters, "delete_nodes", owned=True)
        if ids:
            self._collection.delete(ids)

    def clear(self) -> None:
        """Delete every node written through a framework's store (the collection itself, its settings and a
        folder's documents synced into it stay)."""
        if self._nothing_stored():
            return
        ids = self._collection.document_ids(owned=True)
        if ids:
            self._collection.delete(ids)

    def get_nodes(self, node_ids: list[str] | None = None, filters: Any = None) -> list[Any]:
        """The stored nodes of these ids (in that order, missing ones left out), or those whose metadata matches
        ``filters`` (exact matches and IN, joined by AND), or every node where neither is given."""
        ids = self._ids(node_ids, filters, "get_nodes")
        return [stored_node(d) for d in self._collection.get(ids)] if ids else []

    def _ids(self, node_ids: Any, filters: Any, what: str, owned: bool = False) -> list[str]:
        """The ids ``node_ids`` and ``filters`` select (``owned``: where filters select, only those written through
        a framework's store)."""
        if node_ids is not None:
            node_ids = check_document_ids(node_ids, what)
            if not node_ids or filters is None:
                return node_ids
        if self._nothing_stored():
            return []
        if filters is None:
            return self._collection.document_ids(owned=owned)
        condition = dict_filter(filters, what)
        if not condition and node_ids is None and what == "delete_nodes":
            raise ValueError("delete_nodes with empty filters would delete everything; use clear()")
        matching = self._collection.document_ids(condition, owned=owned and node_ids is None)
        if node_ids is None:
            return matching
        kept = set(matching)
        return [i for i in node_ids if i in kept]

    # ------------------------------------------------------------------ reads
    def query(self, query: Any, *, granularity: str | None = STORE_DEFAULT, per_document: int | None = STORE_DEFAULT,
              **kwargs: Any) -> Any:
        """The best documents (or passages) for ``query`` (a ``VectorStoreQuery``; see the class docstring).

        Args:
            granularity: "document", "passage", "any", or None (passages where the collection has them); not
                given: the store's.
            per_document: at most this many hits of one document (None: no limit); not given: the store's."""
        granularity = self.granularity if granularity is STORE_DEFAULT else granularity
        per_document = self.per_document if per_document is STORE_DEFAULT else per_document
        if kwargs:
            raise TypeError(f"query got unexpected options {sorted(kwargs)}; this store takes granularity and "
                            "per_document")
        query_mode = Mode(query.mode)
        if query_mode not in MODES:
            raise NotImplementedError(f"query mode {query_mode.value!r}: a recemb collection is searched in default "
                                      "(the collection's: hybrid where it has BM25), hybrid, sparse or text_search "
                                      "mode")
        if query.alpha is not None:
            raise NotImplementedError("alpha: recemb fuses the dense and BM25 lists in Qdrant (DBSF), without a "
                                      "weight; leave alpha unset")
        mode, text = MODES[query_mode], query.query_str or ""
        if mode is None and not text.strip():
            mode = "dense"  # a query by its vector alone
        if mode in ("hybrid", "sparse") and not text.strip():
            raise ValueError(f"a {query_mode.value} query needs query_str (BM25 searches by its words)")
        vector = query.query_embedding if mode != "sparse" else None
        if self._embed_model is None and mode != "sparse":
            if vector is None:
                raise ValueError("this RecembVectorStore was built without an embed_model: a query needs its "
                                 "query_embedding (or query in sparse mode)")
            self._vector_dim = self._vector_dim or len(vector)
        k = {Mode.SPARSE: query.sparse_top_k, Mode.TEXT_SEARCH: query.sparse_top_k,
             Mode.HYBRID: query.hybrid_top_k}.get(query_mode) or query.similarity_top_k
        # (a query that restricts nothing has no filter to translate: llama_index_filters is left off its way)
        restricted = query.filters is not None or query.doc_ids or query.node_ids
        found = [] if self._nothing_stored() else self._collection.search(
            text, k=k, filter=query_filter(query) if restricted else None, mode=mode, granularity=granularity,
            query_vector=vector, per_document=per_document)
        nodes = [found_node(f) for f in found]
        return _types.VectorStoreQueryResult(nodes=nodes, similarities=[f.score for f in found],
                                             ids=[n.node_id for n in nodes])

    # ------------------------------------------------------------------ async
    async def async_add(self, nodes: Sequence[Any], **kwargs: Any) -> list[str]:
        return await asyncio.to_thread(self.add, nodes, **kwargs)

    async def adelete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        await asyncio.to_thread(self.delete, ref_doc_id, **delete_kwargs)

    async def adelete_nodes(self, node_ids: list[str] | None = None, filters: Any = None,
                            **delete_kwargs: Any) -> None:
        await asyncio.to_thread(self.delete_nodes, node_ids, filters, **delete_kwargs)

    async def aget_nodes(self, node_ids: list[str] | None = None, filters: Any = None) -> list[Any]:
        return await asyncio.to_thread(self.get_nodes, node_ids, filters)

    async def aclear(self) -> None:
        await asyncio.to_thread(self.clear)

    async def aquery(self, query: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self.query, query, **kwargs)


def _no_model(*_: Any) -> Any:
    raise ValueError("this RecembVectorStore was built without an embed_model: nodes must carry their embeddings "
                     "and queries their query_embedding (or give the store an embed_model)")


# ---------------------------------------------------------------------- nodes <-> recemb documents
def as_document(node: Any) -> RecembDocument:
    """A node as the main job's document: its text without metadata, the user's metadata as given plus ``_node``
    (what LlamaIndex needs back) and ``ref_doc_id`` (where it has a source document), its embedding as the
    document's own vector."""
    metadata = dict(node.metadata or {})
    if NODE_KEY in metadata:
        raise ValueError(f"node {node.node_id!r}: the metadata key {NODE_KEY!r} is the store's own; rename it")
    source = node.source_node
    ref = source.node_id if source is not None else None
    if ref is not None:
        if metadata.get(REF_DOC_KEY, ref) != ref:
            raise ValueError(f"node {node.node_id!r}: the metadata key {REF_DOC_KEY!r} is the store's own (the "
                             f"node's source document, {ref!r}); rename it")
        metadata[REF_DOC_KEY] = ref
    relationships = {rel.value: ([r.node_id for r in info] if isinstance(info, list) else info.node_id)
                     for rel, info in node.relationships.items()}
    own = {"class": node.class_name(), "ref_doc_id": ref, "relationships": relationships,
           "excluded_embed_metadata_keys": list(node.excluded_embed_metadata_keys),
           "excluded_llm_metadata_keys": list(node.excluded_llm_metadata_keys),
           "start_char_idx": getattr(node, "start_char_idx", None), "end_char_idx": getattr(node, "end_char_idx", None)}
    metadata[NODE_KEY] = {k: v for k, v in own.items() if v not in (None, [], {})}
    vector = None if marked_for_the_store(node) else node.embedding  # (EmbedInStore: the sync embeds it)
    return RecembDocument(node.node_id, node.get_content(metadata_mode=_schema.MetadataMode.NONE), metadata,
                          vector)


def _user_metadata(stored: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the user's metadata, the store's ``_node`` record) of a stored document's metadata."""
    metadata = dict(stored)
    own = metadata.pop(NODE_KEY, None)
    own = own if isinstance(own, dict) else {}
    if own and own.get("ref_doc_id") is not None and metadata.get(REF_DOC_KEY) == own["ref_doc_id"]:
        del metadata[REF_DOC_KEY]
    return metadata, own


def _relationships(own: Mapping[str, Any], document_id: str) -> dict[Any, Any]:
    """A stored node's relationships (ids only); SOURCE is its source document, or itself."""
    related = {}
    for key, value in (own.get("relationships") or {}).items():
        try:
            rel = _schema.NodeRelationship(key)
        except ValueError:
            continue
        related[rel] = ([_schema.RelatedNodeInfo(node_id=v) for v in value] if isinstance(value, list)
                        else _schema.RelatedNodeInfo(node_id=value))
    related.setdefault(_schema.NodeRelationship.SOURCE, _schema.RelatedNodeInfo(node_id=own.get("ref_doc_id")
                                                                                or document_id))
    return related


def _node(node_id: str, text: str, metadata: dict[str, Any], own: Mapping[str, Any], relationships: dict,
          start: int | None, end: int | None, hidden: Sequence[str] = ()) -> Any:
    hidden = list(hidden)
    return _schema.TextNode(id_=node_id, text=text, metadata=metadata, relationships=relationships,
                            start_char_idx=start, end_char_idx=end,
                            excluded_embed_metadata_keys=list(own.get("excluded_embed_metadata_keys") or []) + hidden,
                            excluded_llm_metadata_keys=list(own.get("excluded_llm_metadata_keys") or []) + hidden)


def found_node(found: Found) -> Any:
    """A hit as a ``TextNode`` (the class docstring says what it holds)."""
    metadata, own = _user_metadata(found.metadata)
    fields = {} if found.whole_document else recemb_fields(found)
    metadata.update(fields)
    hidden = [k for k in HIDDEN_KEYS if k in fields]
    if found.kind == KIND_PASSAGE:
        ref = own.get("ref_doc_id") or found.document_id
        return _node(f"{found.document_id}#passage-{found.passage}", found.text or "", metadata, own,
                     {_schema.NodeRelationship.SOURCE: _schema.RelatedNodeInfo(node_id=ref)}, found.start, found.end,
                     hidden)
    start, end = own.get("start_char_idx"), own.get("end_char_idx")
    if start is None and end is None and found.text is not None and own.get("ref_doc_id") in (None, found.document_id):
        start, end = 0, len(found.text)  # its own source document, whole: citable as its every character
    return _node(found.document_id, found.text or "", metadata, own, _relationships(own, found.document_id),
                 start, end, hidden)


def stored_node(document: StoredDocument) -> Any:
    """A stored document as the node it was added as (without its embedding)."""
    metadata, own = _user_metadata(document.metadata)
    if document.text is None:
        metadata["note"] = "the text is not stored in the collection"
    return _node(document.id, document.text or "", metadata, own, _relationships(own, document.id),
                 own.get("start_char_idx"), own.get("end_char_idx"))
