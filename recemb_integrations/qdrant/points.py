"""Points as data: their ids, the hashes that tell a changed document, the model's fingerprint, passage windows,
roots, and each point's payload and vectors. Pure: nothing here touches a store.

Point ids are deterministic (uuid5 of the document id, and of (id, passage index) for passages), so writing a
document twice overwrites it instead of duplicating it.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from recemb_integrations.sparse import SparseVector
from recemb_integrations.stores import DENSE_VECTOR, INTEGER, KEYWORD, SPARSE_VECTOR, filters

__all__ = ["API_ROOT", "FRAMEWORK_ROOT", "ID_NAMESPACE", "KIND_DOCUMENT", "KIND_PASSAGE", "PAYLOAD_INDEXES",
           "PassageWindows", "ROOT_KEY", "Span", "WRITER_ROOTS", "claimable_ids", "clean_document_id", "content_hash",
           "describe_root", "document_payload", "foreign_id_message", "from_a_file", "id_problem", "id_spellings",
           "match", "model_fingerprint", "owned_among", "owned_ids", "passage_payload", "point_id", "point_vectors",
           "scope_root"]

ID_NAMESPACE = uuid.UUID("6f1c2a7e-5b0d-4c8e-9a51-3d2f7c0e4b19")  # recemb's namespace for uuid5 point ids
KIND_DOCUMENT, KIND_PASSAGE = "document", "passage"
# The root whose sync wrote a point: "" for a sync without a scope, else the scope ("wiki/"). A sync deletes and
# overwrites only its own root's documents, so an unprefixed folder's "wiki/x.md" is not the "wiki/" root's.
ROOT_KEY = "root"
# The owner of what a framework's vector store (LangChain, LlamaIndex) writes: beside the folder roots, never one of
# them (theirs are "" or end in "/"), so no folder sync deletes a framework's documents and no framework delete
# touches a folder's.
FRAMEWORK_ROOT = "framework"
# The owner of what ``QdrantSync.sync`` writes through the Python API without a scope and from sources that declare
# no folder root: its own, so that neither a folder's sync nor a framework's store deletes it, nor it theirs.
API_ROOT = "api"
WRITER_ROOTS = (FRAMEWORK_ROOT, API_ROOT)  # the owners that are not folder roots (those are "" or end in "/")
# Filtered by: "passages" is a document point's passage count (0: the document is its own passage).
PAYLOAD_INDEXES = {"document_id": KEYWORD, "kind": KEYWORD, "passage": INTEGER, "passages": INTEGER, ROOT_KEY: KEYWORD}


def clean_document_id(document_id: str) -> str:
    """A document id as the collection keeps it: in Unicode NFC, as folder ids are (a name typed on one system and
    read from another's filesystem is one id). Nothing else is changed: an id given through the API need not be a
    path (a URL's "//" stays)."""
    import unicodedata  # only the id functions need it

    return unicodedata.normalize("NFC", document_id)


def id_spellings(document_id: str) -> tuple[str, ...]:
    """The spellings a collection may hold an id under: NFC (what recemb writes) and, for collections written before
    API ids were normalised, NFD."""
    import unicodedata

    nfc = unicodedata.normalize("NFC", document_id)
    nfd = unicodedata.normalize("NFD", document_id)
    return tuple(dict.fromkeys((nfc, document_id, nfd)))


def id_problem(document_id: object) -> str | None:
    """Why ``document_id`` cannot be a new document's id, or None where it can. An id is a non-blank string of
    Unicode text: no NUL character (the point keys put NUL between a document's id and its passage's number, so an id
    without NUL can never spell another document's key, ``point_id``) and no lone surrogate (an id is stored as
    UTF-8). Other characters, control characters included, are a file name's own and stay."""
    if not isinstance(document_id, str):
        return f"a document id is a string, got {type(document_id).__name__}"
    if not document_id.strip():
        return f"a document id cannot be {'empty' if not document_id else 'blank (only whitespace)'}"
    if "\x00" in document_id:
        return (f"the document id {document_id!r} holds a NUL character, which recemb's point keys reserve (it "
                "separates a document's id from its passages' numbers)")
    try:
        document_id.encode("utf-8")
    except UnicodeEncodeError as e:
        return (f"the document id {document_id!r} holds a lone surrogate ({document_id[e.start]!r} at {e.start}), "
                "which is not Unicode text and cannot be stored")
    return None


def point_id(document_id: str, passage: int | None = None) -> str:
    """A point's id: uuid5 of its document's id, and of "<id> NUL passage NUL <n>" for passage n. Unambiguous for
    every id that ``id_problem`` accepts (no NUL): a document's key holds no NUL, a passage's exactly two, the id
    before the first."""
    key = document_id if passage is None else f"{document_id}\x00passage\x00{passage}"
    return str(uuid.uuid5(ID_NAMESPACE, key))


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def model_fingerprint(embedder: Any) -> str:
    """A short hash of the architecture and a sample of every weight (``RecurrentEncoder.weight_samples``): the
    same model under another path or name matches, and so does the same checkpoint run in bf16 or int8 on the CPU
    (its vectors stay close to fp32's: docs/benchmarks.md, low precision); a different model does not. A model
    recemb does not run (``external.ExternalEmbedder``) brings its own, from its name and dimension."""
    if getattr(embedder, "external", False):
        return embedder.fingerprint
    h = hashlib.sha256(json.dumps(embedder.config.to_dict(), sort_keys=True, default=str).encode())
    for name, sample, total in embedder.model.weight_samples():
        h.update(name.encode())
        h.update(sample)
        h.update(total.encode())
    return h.hexdigest()[:16]


def match(key: str, value: Any):
    """The condition ``key == value`` on a payload field."""
    return filters.FieldCondition(key=key, match=filters.MatchValue(value=value))


def point_vectors(layout: int, dense, sparse: SparseVector | None):
    """A point's vectors in the collection's layout; an empty BM25 vector is left out (the point is found by its
    dense vector alone)."""
    if layout == 1:
        return dense.tolist()
    vectors: dict[str, Any] = {DENSE_VECTOR: dense.tolist()}
    if sparse is not None and len(sparse):
        vectors[SPARSE_VECTOR] = sparse
    return vectors


def document_payload(document_id: str, text: str, metadata: Mapping[str, Any], tokens: int, root: str,
                     store_text: bool, passages: int, text_hash: str | None = None) -> dict[str, Any]:
    """A document's own point: the content hash marks the document as complete; ``passages``: how many it has
    (``text_hash``: ``content_hash(text)`` if known already)."""
    payload = {"document_id": document_id, "kind": KIND_DOCUMENT, "content_hash": text_hash or content_hash(text),
               "metadata": metadata, "tokens": tokens, "passages": passages, ROOT_KEY: root}
    if store_text:
        payload["text"] = text
    return payload


def passage_payload(document_id: str, index: int, metadata: Mapping[str, Any], tokens: int, root: str,
                    span: tuple[int, int], document_hash: str, text: str | None) -> dict[str, Any]:
    """A passage's point: ``span`` its (start, end) characters in the document's text, ``document_hash`` the content
    hash of the text it was cut from (a search shows it only while the document's own point has that hash: the
    document is complete), ``text`` the span's text where the collection keeps texts."""
    payload = {"document_id": document_id, "kind": KIND_PASSAGE, "passage": index, "metadata": metadata,
               "tokens": tokens, "start": span[0], "end": span[1], "document_hash": document_hash, ROOT_KEY: root}
    if text is not None:
        payload["text"] = text
    return payload


Span = tuple[int, int] | None  # a token's characters in its text; None: a token that covers none (BOS, EOS)


class PassageWindows:
    """Cuts one document's ids (EOS last), fed piece by piece, into passages: windows of ``size`` body tokens
    starting every ``size - overlap`` tokens, each followed by the EOS; the last starts before the body's final
    ``overlap`` tokens, and an empty body gives one passage of EOS alone. Holds at most a window plus a piece.

    Given each id's span (``feed(ids, spans)``), a window comes with its characters: from its first token's start to
    its last token's end (``(ids, (start, end))``; a window of tokens that cover no text: an empty span where the
    text so far ends). Without spans, windows are bare id lists."""

    def __init__(self, size: int, overlap: int, eos_token_id: int):
        # What SyncSettings guarantees (record.check_passage_settings); asked again here because windows are cut
        # from these two numbers alone.
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= overlap < size:
            raise ValueError(f"passage windows need 0 <= overlap < size, got size {size!r}, overlap {overlap!r}")
        self.size, self.overlap, self.step, self.eos = size, overlap, size - overlap, eos_token_id
        self._buffer: list[int] = []  # ids from absolute position self._base on
        self._spans: list[Span] | None = None  # their spans, when given
        self._base = 0
        self._seen = 0  # ids fed so far
        self._last: int | None = None
        self._next = 0  # start of the next window
        self._text_end = 0  # the furthest character a dropped token reached
        self.count = 0  # windows returned so far

    def feed(self, ids: Sequence[int], spans: Sequence[Span] | None = None) -> list:
        """Windows that are complete now. The newest id may be the EOS that ends the body, so no window takes it."""
        ids = list(ids)
        if not ids:
            return []
        if self._seen and (spans is None) != (self._spans is None):
            raise ValueError("give spans with every piece of a document or with none")
        if spans is not None:
            if len(spans) != len(ids):
                raise ValueError(f"{len(ids)} ids with {len(spans)} spans")
            if self._spans is None:
                self._spans = []
            self._spans.extend(spans)  # in place: the buffer is rebuilt per piece otherwise
        self._buffer += ids
        self._seen += len(ids)
        self._last = ids[-1]
        out = []
        while self._next + self.size <= self._seen - 1:
            out.append(self._window(self._next, self._next + self.size))
            self._next += self.step
        return self._emit(out)

    def finish(self) -> list:
        """The remaining windows, once the last id (the EOS) has been fed."""
        if self._last != self.eos:
            raise ValueError("a document's ids must end with its EOS token")
        body_end = self._seen - 1
        out = []
        while self._next < max(body_end - self.overlap, 1):
            if self._next < body_end:
                out.append(self._window(self._next, min(self._next + self.size, body_end)))
            self._next += self.step
        if not out and not self.count:
            out.append([self.eos] if self._spans is None else ([self.eos], (0, 0)))
        return self._emit(out)

    def _window(self, start: int, end: int):
        ids = self._buffer[start - self._base : end - self._base] + [self.eos]
        if self._spans is None:
            return ids
        covered = [s for s in self._spans[start - self._base : end - self._base] if s is not None]
        if not covered:
            return ids, (self._text_end, self._text_end)
        return ids, (min(s[0] for s in covered), max(s[1] for s in covered))

    def _emit(self, windows: list) -> list:
        drop = min(self._next, self._seen) - self._base
        if drop > 0:  # ids before the next window's start are never needed again
            del self._buffer[:drop]
            if self._spans is not None:
                self._text_end = max([self._text_end] + [s[1] for s in self._spans[:drop] if s is not None])
                del self._spans[:drop]
            self._base += drop
        self.count += len(windows)
        return windows


# ---------------------------------------------------------------------- roots
def scope_root(scope: str | None) -> str:
    """The root a sync with this scope writes under: "" without one, else the prefix as whole path components
    ending in "/" ("wiki" and "wiki/" are "wiki/"), so "wiki/" never claims "wikipedia/x". Every spelling of one
    prefix is one root: Unicode NFC, surrounding whitespace removed, empty and '.' segments dropped ("./wiki",
    "a//b/", and a decomposed "café" give "wiki/", "a/b/", the composed "café/"), as ``sources.clean_id_prefix``
    cleans ``--id-prefix``. A '..' segment is refused (ids are names, not paths to climb)."""
    import unicodedata  # only this function of the module needs it

    if scope is None:
        return ""
    segments = ([s for s in unicodedata.normalize("NFC", scope.strip()).split("/") if s not in ("", ".")]
                if isinstance(scope, str) else [])
    if ".." in segments:
        raise ValueError(f"scope {scope!r} has a '..' segment; give a plain id prefix such as 'wiki/'")
    if not segments:
        raise ValueError(f"scope must be a non-empty id prefix such as 'wiki/', got {scope!r}")
    return "/".join(segments) + "/"


def owned_ids(seen: Mapping[str, str | None], root: str, from_files: Collection[str] = ()) -> set[str]:
    """The stored document ids that belong to ``root``: what a sync of that root may overwrite, delete and count for
    the mass-deletion guard, and what a framework's delete may delete. Nobody's guess: a point says who wrote it.

    - A writer that is not a folder root (``FRAMEWORK_ROOT``, ``API_ROOT``) owns the documents stamped with it.
    - A prefixed root ("wiki/") owns the documents stamped with it, written by a folder sync or a sync with that
      ``scope``.
    - The unprefixed folder root ``""`` owns the documents stamped ``""`` that record the file they were read from
      (``from_files``: ``from_a_file``). An unprefixed document without a file was written by the Python API or a
      framework's store before each had an owner of its own: no sync deletes it (``claimable_ids``).
    - Unstamped documents (a recemb that did not record roots) go by the id rule: a folder root owns those under it
      and not under a longer root another sync recorded, the unprefixed root only those read from a file."""
    if root in WRITER_ROOTS:
        return {doc_id for doc_id, r in seen.items() if r == root}
    from_files = set(from_files)
    stamped = {r for r in seen.values() if r is not None and r not in WRITER_ROOTS}
    longer = [r for r in stamped if len(r) > len(root) and r.startswith(root)]
    return {doc_id for doc_id, r in seen.items()
            if (root or doc_id in from_files) and (
                r == root or (r is None and doc_id.startswith(root) and not any(map(doc_id.startswith, longer))))}


def claimable_ids(seen: Mapping[str, str | None], from_files: Collection[str] = ()) -> set[str]:
    """Documents that no writer owns for deletion but any writer may take over by writing their id again: unprefixed
    or unstamped and recording no file, that is written through the Python API or a framework's store before recemb
    recorded those writers (nobody can tell which). Writing a document of that id is an explicit claim on it (it is
    then stamped with the writer's root); a delete never is."""
    from_files = set(from_files)
    return {doc_id for doc_id, r in seen.items() if r in ("", None) and doc_id not in from_files}


def owned_among(payloads: Mapping[str, Mapping[str, Any]], root: str) -> set[str]:
    """The ids among these documents (document id -> its own point's payload) that belong to ``root``
    (``owned_ids``)."""
    return owned_ids({d: p.get(ROOT_KEY) for d, p in payloads.items()}, root,
                     {d for d, p in payloads.items() if from_a_file(p.get("metadata"))})


# What a folder sync recorded of a file before it recorded the file's path (recemb before #32).
EARLIER_FILE_KEYS = ("file_name", "suffix", "bytes")


def from_a_file(metadata: Any) -> bool:
    """Whether a document's stored metadata records the file a folder sync read it from (``sources.file_metadata``'s
    ``path``, or the file keys an earlier recemb recorded before the path)."""
    return isinstance(metadata, Mapping) and (isinstance(metadata.get("path"), str)
                                              or all(k in metadata for k in EARLIER_FILE_KEYS))


def describe_root(root: str | None) -> str:
    """A root as the user named it."""
    if root is None:
        return "a root that recemb could not tell (written before roots were recorded)"
    if root == FRAMEWORK_ROOT:
        return "a framework's vector store (LangChain, LlamaIndex)"
    if root == API_ROOT:
        return "the Python API (QdrantSync.sync without a scope)"
    return ("the folder sync without an id prefix" if not root else
            f"the sync with id prefix {root.rstrip('/')!r} (scope {root!r})")


def foreign_id_message(owner: str | None, root: str) -> str:
    """Why a document whose id another root stored is not synced."""
    way = ("Use another id for it, or give each writer's documents a collection of their own"
           if owner in WRITER_ROOTS or root in WRITER_ROOTS else
           "Give each folder its own --id-prefix (scope=) so that their ids cannot meet")
    return (f"this id is stored by {describe_root(owner)} of this collection, not by {describe_root(root)}; its "
            f"stored version is kept. {way}")
