"""A model recemb does not run, as the main job's embedder: texts in, vectors out.

A sentence-transformers model, a LangChain ``Embeddings`` or a LlamaIndex embed model that is not recemb's fills a
recemb collection as recemb's own does: long documents are cut into passages that fit the model's window
(``cutting.TokenCutter`` with the model's own tokenizer where it exposes one, else ``cutting.CharacterCutter``), each
passage is embedded on its own with recemb's BM25 vector beside it, and the document's own point carries the
normalised mean of its passages' vectors, which a search does not read: a long document is found by its passages
(``DOCUMENT_VECTORS``; measured in docs/benchmarks.md). What needs
recemb's own model is off: streaming a long document through a recurrent state, a token count. The collection
records the model by name and dimension (``fingerprint``) and how its passages were cut, so a sync with another
model or another window is refused as with recemb's own.

``external_embedder(model)`` finds what it can of a model: a ``SentenceTransformer`` (its ``tokenizer`` and
``max_seq_length``), and the one held by LangChain's ``HuggingFaceEmbeddings`` or LlamaIndex's
``HuggingFaceEmbedding``. Prefixes (an E5 model's ``"query: "`` and ``"passage: "``) are the model's, given by the
user: ``query_prefix`` goes on queries only, ``document_prefix`` on every text embedded for the collection, and the
passages are cut so that the prefixed text still fits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from recemb_integrations.qdrant.cutting import CharacterCutter, TokenCutter, cutter_for
from recemb_integrations.qdrant.record import (
    DEFAULT_PASSAGE_TOKENS,
    NO_PASSAGES,
    PASSAGES_ONLY,
    CollectionRecord,
    RequestedSettings,
)

__all__ = ["DOCUMENT_VECTORS", "MODEL_OPTIONS", "ExternalEmbedder", "as_embedder", "external_embedder",
           "external_request", "sentence_transformer_of"]

# A long document's own vector: "none" (the default: a search finds it by its passages alone, and its own point holds
# their normalised mean, which no search reads), "mean" (that mean, searched beside the passages) or "first" (its
# first passage's). Chosen by measurement (docs/benchmarks.md, "Any embedding model"): "none" is far ahead where
# documents are longer than a passage and within noise of the others on the IR collections.
DOCUMENT_VECTORS = ("none", "mean", "first")
# What a framework's store passes on to ``external_embedder`` for another library's model.
MODEL_OPTIONS = ("passage_characters", "query_prefix", "document_prefix", "document_vector")


class ExternalEmbedder:
    """``embed_documents(texts) -> vectors`` and ``embed_query(text) -> vector`` of another library's model, named
    ``name`` (what the collection records; two embedders of one name and dimension are taken for the same model),
    ``dim`` its vectors' size. Vectors are L2-normalised here (collections use cosine).

    ``cutter``: how its passages are cut (``cutting``); None: every document is embedded whole, one vector
    truncated wherever the model truncates (the way of recemb before passages for other models).
    ``document_vector``: one of ``DOCUMENT_VECTORS``."""

    external = True  # the writer embeds texts with it, never token ids
    tokenizer = None
    needs_whole_length = False

    def __init__(self, name: str, dim: int, embed_documents: Callable[[list[str]], Sequence[Sequence[float]]],
                 embed_query: Callable[[str], Sequence[float]], cutter: TokenCutter | CharacterCutter | None = None,
                 query_prefix: str = "", document_prefix: str = "", document_vector: str = "none"):
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"an external model needs a name to record, got {name!r}")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        if document_vector not in DOCUMENT_VECTORS:
            raise ValueError(f"document_vector must be one of {', '.join(DOCUMENT_VECTORS)}, got {document_vector!r}")
        for what, prefix in (("query_prefix", query_prefix), ("document_prefix", document_prefix)):
            if not isinstance(prefix, str):
                raise TypeError(f"{what} must be a str, got {prefix!r}")
        self.name, self.dim, self.cutter = name, dim, cutter
        self.query_prefix, self.document_prefix, self.document_vector = query_prefix, document_prefix, document_vector
        self._embed_documents, self._embed_query = embed_documents, embed_query
        self.fingerprint = "external-" + hashlib.sha256(f"{name}\x00{dim}".encode()).hexdigest()[:16]
        # what a collection records as the model's window: a sync with another is refused
        self.max_length = cutter.window if isinstance(cutter, TokenCutter) else None

    def whole(self) -> ExternalEmbedder:
        """This model embedding every document whole, without passages (a collection made so before passages)."""
        return ExternalEmbedder(self.name, self.dim, self._embed_documents, self._embed_query, None,
                                self.query_prefix, self.document_prefix, self.document_vector)

    def resized(self, tokens: int) -> ExternalEmbedder:
        """This model with passages of at most ``tokens`` of its tokens (0: whole documents, no passages)."""
        if tokens == 0:
            return self.whole()
        if not isinstance(self.cutter, TokenCutter):
            how = "is cut by characters (passage_characters)" if self.cutter is not None else \
                "embeds whole documents (external_embedder finds a model's tokenizer)"
            raise ValueError(f"passage_tokens needs the model's tokenizer; {self.name} {how}")
        return ExternalEmbedder(self.name, self.dim, self._embed_documents, self._embed_query,
                                replace(self.cutter, tokens=tokens, overlap=-1), self.query_prefix,
                                self.document_prefix, self.document_vector)

    @property
    def passages(self) -> tuple[int, int] | None:
        """(size, overlap) of its passages in the cutter's unit (tokens or characters), or None (whole texts)."""
        if self.cutter is None:
            return None
        size = self.cutter.body if isinstance(self.cutter, TokenCutter) else self.cutter.budget
        return size, self.cutter.overlap

    def describe_cut(self) -> dict[str, Any] | None:
        """What the collection records of how passages are cut and the document's vector made."""
        if self.cutter is None:
            return None
        return {**self.cutter.describe(), "document_vector": self.document_vector,
                "document_prefix": self.document_prefix, "query_prefix": self.query_prefix}

    def cut_note(self) -> str:
        """Which way its passages are cut, in a line for the user."""
        cut = self.cutter
        if cut is None:
            return f"{self.name}: documents embedded whole (no passages)"
        if isinstance(cut, TokenCutter):
            return (f"{self.name}: passages cut by the model's own tokenizer, at most {cut.body} tokens of text each "
                    f"(its window: {cut.window} tokens), {cut.overlap} shared")
        return (f"{self.name}: passages of at most {cut.budget:,} characters ({cut.overlap} shared): the model "
                "exposes no tokenizer; give passage_characters= (--passage-characters) for another budget")

    def streams(self, text: str) -> bool:
        return False

    def count(self, text: str) -> int:
        """``text``'s length in the unit its passages are cut in."""
        return self.cutter.count(text) if self.cutter is not None else len(text)

    def encode_documents(self, texts: Sequence[str], **_) -> np.ndarray:
        prefix = self.document_prefix
        return self._normalised(self._embed_documents([prefix + t for t in texts] if prefix else list(texts)),
                                len(texts))

    def encode_queries(self, queries: Sequence[str], instruction: str | None = None, **_) -> np.ndarray:
        return self._normalised([self._embed_query(self.query_prefix + q) for q in queries], len(queries))

    def _normalised(self, vectors, count: int) -> np.ndarray:
        array = np.asarray(vectors, dtype=np.float32).reshape(count, -1) if count else np.zeros((0, self.dim),
                                                                                               np.float32)
        if array.shape[1] != self.dim:
            raise ValueError(f"{self.name} gave vectors of {array.shape[1]} dimensions, not {self.dim}")
        norms = np.linalg.norm(array, axis=1, keepdims=True)
        return array / np.where(norms > 0, norms, 1)


def sentence_transformer_of(model: Any) -> Any | None:
    """The ``SentenceTransformer`` a model is or holds (LangChain's ``HuggingFaceEmbeddings`` keeps it as
    ``_client``, LlamaIndex's ``HuggingFaceEmbedding`` as ``_model``), or None. Recognised by what it does (a
    tokenizer, a window, ``encode``), so sentence-transformers itself is never imported here."""
    for candidate in (model, *(getattr(model, a, None) for a in ("_client", "client", "_model", "model"))):
        if (candidate is not None and callable(getattr(candidate, "encode", None))
                and getattr(candidate, "tokenizer", None) is not None
                and isinstance(getattr(candidate, "max_seq_length", None), int)):
            return candidate
    return None


def _model_name(model: Any, fallback: str) -> str:
    """What a model calls itself: a framework embedding's ``model_name``, a sentence-transformers model's card or
    the path its transformer was loaded from."""
    for attr in ("model_name", "model_name_or_path", "model"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value.strip():
            return value
    card = getattr(getattr(model, "model_card_data", None), "base_model", None)
    if isinstance(card, str) and card:
        return card
    try:
        path = model[0].auto_model.config.name_or_path  # a SentenceTransformer's first module, a Transformer
    except Exception:
        path = None
    return path if isinstance(path, str) and path else fallback


def external_embedder(model: Any, name: str | None = None, passage_characters: int | None = None,
                      query_prefix: str = "", document_prefix: str = "", document_vector: str = "none",
                      embed_documents: Callable | None = None, embed_query: Callable | None = None,
                      dim: int | None = None, passage_tokens: int | None = None) -> ExternalEmbedder:
    """``model`` (a ``SentenceTransformer``, or a framework's embedding that holds one, or any other with
    ``embed_documents`` / ``embed_query`` given) as the main job's embedder, its passages cut by its own tokenizer
    to its window where it has one, else to ``passage_characters`` (``cutting.DEFAULT_CHARACTERS``); given, it
    is the budget whatever the model has. ``passage_tokens``: with its tokenizer, passages of at most this many
    text tokens (default: ``record.DEFAULT_PASSAGE_TOKENS``, 128, or as many as its window takes where that is
    fewer). ``name``: what the collection records (default: the model's)."""
    st = sentence_transformer_of(model)
    if st is not None and embed_documents is None:
        def embed_documents(texts: list[str]):
            return st.encode(texts, batch_size=32, show_progress_bar=False, convert_to_numpy=True)

        def embed_query(text: str):
            return st.encode([text], show_progress_bar=False, convert_to_numpy=True)[0]

        dim = dim or (getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension)()
    if embed_documents is None or embed_query is None:
        raise TypeError(f"{type(model).__name__} is not a sentence-transformers model: give embed_documents and "
                        "embed_query")
    name = name or _model_name(st if st is not None else model, type(model).__name__)
    dim = dim or len(embed_query("dimension"))
    tokenizer, window = (st.tokenizer, st.max_seq_length) if st is not None else (None, None)
    if tokenizer is not None and window is not None and document_prefix:  # the prefixed text must still fit
        window -= len(tokenizer(document_prefix, add_special_tokens=False)["input_ids"])
    if passage_tokens is None and tokenizer is not None and window is not None and passage_characters is None:
        # recemb's own passage size where the window takes more: as exact a citation, half the context (measured)
        room = window - tokenizer.num_special_tokens_to_add(pair=False)
        passage_tokens = DEFAULT_PASSAGE_TOKENS if room > DEFAULT_PASSAGE_TOKENS else None
    elif passage_tokens is not None and (tokenizer is None or passage_characters is not None):
        raise ValueError(f"passage_tokens needs the model's tokenizer; {name} is cut by characters "
                         "(passage_characters)")
    cutter = cutter_for(tokenizer, window, passage_characters, name=getattr(tokenizer, "name_or_path", "") or "",
                        tokens=passage_tokens)
    return ExternalEmbedder(name, dim, embed_documents, embed_query, cutter, query_prefix, document_prefix,
                            document_vector)


def as_embedder(model: Any) -> Any:
    """``model`` as the main job's embedder: recemb's own ``Embedder`` and an ``ExternalEmbedder`` as they are, a
    sentence-transformers model (or a framework's embedding that holds one) through ``external_embedder``."""
    if getattr(model, "external", False) or hasattr(model, "embed_token_ids") or sentence_transformer_of(model) is None:
        return model
    return external_embedder(model)


def external_request(embedder: ExternalEmbedder, requested: RequestedSettings,
                     record: CollectionRecord | None = None) -> tuple[ExternalEmbedder, RequestedSettings]:
    """The one decision of how another library's model cuts a sync's documents: its passages fit its own window
    (``requested.passage_tokens``: fewer of its tokens; 0: whole documents), and a collection it embedded whole
    before its passages were cut (``record`` without passages) stays whole. recemb's own passage settings are
    refused (ValueError). Returns the embedder cut so and the request that says it (what the collection records)."""
    given = [k for k in ("passage_overlap", "passages_above", "long_documents")
             if getattr(requested, k) not in (None, 0)]
    if given:
        raise ValueError(f"{given[0]} is a setting of recemb's own models; {embedder.name}'s passages are cut to its "
                         "own window (passage_tokens= for fewer of its tokens, passage_characters= to "
                         "external_embedder for a budget of characters)")
    if record is not None and not record.settings.passages:
        embedder = embedder.whole()
    elif requested.passage_tokens is not None:
        embedder = embedder.resized(requested.passage_tokens)
    cut = embedder.passages
    if cut is None:
        return embedder, replace(requested, passage_tokens=NO_PASSAGES, passage_overlap=None, passages_above=None,
                                 long_documents=None)
    return embedder, replace(requested, passage_tokens=cut[0], passage_overlap=cut[1], passages_above=cut[0],
                             long_documents=PASSAGES_ONLY)
