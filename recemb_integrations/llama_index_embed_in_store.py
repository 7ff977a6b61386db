"""``EmbedInStore``: the last transformation of a LlamaIndex ``IngestionPipeline`` whose vector store is a
``RecembVectorStore``, leaving the embedding to the store's sync (each text embedded once, and only where new or
changed). It marks nodes; ``marked_for_the_store`` tells the store which nodes carry the mark.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from recemb_integrations._imports import require

_schema = require("llama_index.core.schema", "llama-index")

__all__ = ["EmbedInStore", "marked_for_the_store"]


class EmbedInStore(_schema.TransformComponent):
    """An ``IngestionPipeline`` transformation for a ``RecembVectorStore``, its last: it embeds nothing, and marks
    each node without an embedding as one the store embeds (a copy whose ``embedding`` is the empty list: LlamaIndex
    hands a vector store only nodes whose embedding is set, and no real vector is empty).

        pipeline = IngestionPipeline(transformations=[EmbedInStore()], vector_store=store, docstore=...,
                                     docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)

    The store then embeds what its sync finds new or changed, each text once (a long document as its passages),
    and a rerun over unchanged files embeds nothing; with ``transformations=[embed_model]`` instead, LlamaIndex
    embeds every file it is given (the whole file, with its metadata prepended) before the store can tell it is
    unchanged; that vector is the document's own point, and a long document's passages are embedded besides (here
    a long document's own vector is the mean of its passages'). A node that has an embedding keeps it (the store
    checks it as any node's). The nodes given are left as they are (so is what a docstore keeps of them).

    For a ``RecembVectorStore`` with an embed model only. Any other vector store asks a marked ``Document`` or
    ``TextNode`` for its vector (``get_embedding()``) and gets a ``ValueError`` that says why it has none; a node
    an ``IngestionCache`` gives back, or of another class, is only marked by its empty embedding, which such a
    store takes as a vector of size 0."""

    @classmethod
    def class_name(cls) -> str:
        return "RecembEmbedInStore"

    def __call__(self, nodes: Sequence[Any], **kwargs: Any) -> Sequence[Any]:
        return [_marked(node) if node.embedding is None else node for node in nodes]


def marked_for_the_store(node: Any) -> bool:
    """Whether ``node`` carries ``EmbedInStore``'s mark (its embedding empty) rather than a vector."""
    return node.embedding is not None and len(node.embedding) == 0


def _no_vector(node: Any) -> list[float]:
    raise ValueError(f"node {node.node_id!r} was marked by EmbedInStore for a RecembVectorStore to embed when it "
                     "adds it, so it has no vector for this vector store: make a RecembVectorStore the pipeline's "
                     "vector_store, or put an embed model in EmbedInStore's place")


class _MarkedDocument(_schema.Document):
    get_embedding = _no_vector  # what other vector stores read a node's vector by


class _MarkedTextNode(_schema.TextNode):
    get_embedding = _no_vector


# The classes readers and splitters make; module-level, so marked nodes pickle (num_workers) and their class_name()
# is their own class's, so a docstore or cache keeps them as that class.
_MARKED = {_schema.Document: _MarkedDocument, _schema.TextNode: _MarkedTextNode}


def _marked(node: Any) -> Any:
    copy = node.model_copy()  # the caller's node (what a docstore keeps) is left without the mark
    copy.embedding = []
    if type(node) in _MARKED:
        object.__setattr__(copy, "__class__", _MARKED[type(node)])  # pydantic's __setattr__ sets fields only
    return copy
