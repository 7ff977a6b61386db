"""What a sync is given and what it answers: documents, lazily read sources, the first pass over them, the sync's
report and a search's hits. Pure: nothing here touches a store or a model."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from recemb_integrations.qdrant.points import clean_document_id, content_hash, id_problem

__all__ = ["Document", "DocumentEntry", "DocumentSource", "StoredDocument", "SyncReport", "WriteOutcome",
           "check_document_ids", "metadata_problem", "read_entries"]

# Qdrant keeps a payload's integers as signed 64-bit values; a larger one would come back as a float of another value.
PAYLOAD_INT_RANGE = (-(1 << 63), (1 << 63) - 1)

ACTIONS = ("added", "updated")  # what writing a document's points does to it


@dataclass
class Document:
    """One source document: ``id`` is the stable key (e.g. a file path); ``metadata`` must be JSON-serialisable.
    ``vector``: its dense vector where the caller has it already, made by the collection's own model (a LlamaIndex
    node embedded by ``RecembEmbedding``): the document's own point takes it instead of embedding the text again
    (its passages are still embedded by the sync)."""

    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    vector: Sequence[float] | None = None


@dataclass
class DocumentSource:
    """A document read only when needed, so a sync never holds every text: a file, typically.

    ``read()`` returns the text (an ``OSError`` or ``ValueError`` reports the document as failed and keeps its stored
    version). ``fingerprint()``, if given, returns ``(content_hash(text), text is blank)`` without holding the whole
    text (e.g. by hashing the file in pieces); without it, the first pass reads the text to hash it. A sync reads each
    source once to hash it and again only if it must be embedded."""

    id: str
    read: Callable[[], str]
    metadata: dict[str, Any] = field(default_factory=dict)
    fingerprint: Callable[[], tuple[str, bool]] | None = None
    size: int = 0  # characters or bytes, where known: a hint for the progress bar
    root: str | None = None  # the root its folder sync gives it ("" or "prefix/", ``folder_sources``); None: any


@dataclass(frozen=True)
class DocumentEntry:
    """What the first pass of a sync keeps of a document: its id, metadata, hash, and how to get its text again."""

    id: str
    metadata: dict[str, Any]
    hash: str
    blank: bool
    size: int
    document: Document | None = None
    source: DocumentSource | None = None
    root: str | None = None  # the source's own root, where it declares one (``DocumentSource.root``)

    @property
    def text(self) -> str:
        return self.document.text if self.document is not None else self.source.read()

    def load(self) -> Document:
        if self.document is not None:  # under the entry's id: a stored spelling of it (``plan.respelled``)
            doc = self.document
            return doc if doc.id == self.id else Document(self.id, doc.text, doc.metadata, doc.vector)
        text = self.source.read()
        if not isinstance(text, str):
            raise ValueError(f"read() returned {type(text).__name__}, expected str")
        return Document(self.id, text, self.metadata)

    def describe_blank(self) -> str:
        return "empty document" if self.size == 0 else "document holds only whitespace"


@dataclass
class WriteOutcome:
    """What writing some documents came to: those written (``(id, action)``, action "added" or "updated"), those
    that failed, warnings, tokens embedded, and how many of the documents given are through (for a progress bar)."""

    finished: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    embedded_tokens: int = 0
    documents: int = 0


@dataclass
class SyncReport:
    added: int = 0
    updated: int = 0  # re-embedded because the text changed
    metadata_updated: int = 0  # text unchanged, only metadata rewritten (no embedding)
    unchanged: int = 0
    deleted: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (document id, error)
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (document id, what to know): synced anyway
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why): sources that are not documents
    embedded_tokens: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def absorb(self, outcome: WriteOutcome) -> None:
        """Count a batch's outcome in."""
        for _, action in outcome.finished:
            if action == "added":
                self.added += 1
            elif action == "updated":
                self.updated += 1
            else:
                raise ValueError(f"unknown write action {action!r}")
        self.failed.extend(outcome.failed)
        self.warnings.extend(outcome.warnings)
        self.embedded_tokens += outcome.embedded_tokens


@dataclass(frozen=True)
class StoredDocument:
    """A document as its collection holds it (``QdrantSync.get_documents``): ``text`` where the collection stores
    texts (else None: the file it was synced from, ``metadata["path"]``, holds it while ``content_hash`` matches),
    ``passages`` how many passages it has (0: it is its own)."""

    id: str
    text: str | None
    metadata: dict[str, Any]
    content_hash: str | None
    passages: int = 0


def check_document_ids(document_ids: Any, what: str) -> list[str]:
    """Document ids named one by one, checked: a list (or other collection) of non-empty strings; a single string,
    None or anything else is a TypeError, so a slip never becomes "every document". ``what``: the call, for the
    message."""
    if document_ids is None or isinstance(document_ids, (str, bytes)) or not isinstance(document_ids, Iterable):
        raise TypeError(f"{what} takes a list of document ids, got {type(document_ids).__name__}"
                        + (" (one id: pass [id])" if isinstance(document_ids, str) else ""))
    ids = list(document_ids)
    bad = [d for d in ids if not isinstance(d, str) or not d]
    if bad:
        raise TypeError(f"{what}: document ids are non-empty strings, got {bad[0]!r}; nothing was done")
    for d in ids:  # (a NUL or blank id may name a document stored before they were refused: it can be named here)
        try:
            d.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{what}: {id_problem(d)}; nothing was done") from None
    return list(dict.fromkeys(map(clean_document_id, ids)))


def metadata_problem(metadata: Any) -> str | None:
    """Why ``metadata`` cannot be stored and read back as given, naming the key; None where it can. It must be a dict
    of JSON values (Qdrant's payload): no float that is NaN or infinite (JSON has none), no integer beyond 64 bits,
    no string or key holding a lone surrogate (not Unicode text). Pure."""
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        return f"metadata is a dict of key -> value, got {type(metadata).__name__}"
    return _value_problem(metadata, "metadata")


def _value_problem(value: Any, where: str) -> str | None:
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and _surrogate(key) is not None:
                return f"the key {key!r} of {where} holds a lone surrogate at {_surrogate(key)}, which is not text"
            problem = _value_problem(item, f"{where}[{key!r}]")
            if problem is not None:
                return problem
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            problem = _value_problem(item, f"{where}[{i}]")
            if problem is not None:
                return problem
    elif isinstance(value, float) and not math.isfinite(value):
        return f"{where} is {value!r}: NaN and infinity are not JSON numbers and cannot be stored"
    elif isinstance(value, int) and not isinstance(value, bool) and not (
            PAYLOAD_INT_RANGE[0] <= value <= PAYLOAD_INT_RANGE[1]):
        return (f"{where} is {value}, beyond the 64-bit integers a payload holds (it would come back as a float of "
                "another value); store it as a string")
    elif isinstance(value, str) and _surrogate(value) is not None:
        return f"{where} holds a lone surrogate at {_surrogate(value)}, which is not text and cannot be stored"
    return None


def _surrogate(text: str) -> int | None:
    """Where ``text`` holds a lone surrogate, or None."""
    try:
        text.encode("utf-8")
        return None
    except UnicodeEncodeError as e:
        return e.start



def read_entries(documents: Iterable[Document | DocumentSource | tuple]
                 ) -> tuple[list[DocumentEntry], list[tuple[str, str]]]:
    """The first pass of a sync: each document's id, metadata and content hash (sources are read or fingerprinted
    one at a time, their texts not kept); problems (bad types, duplicate ids, unserialisable metadata, unreadable
    sources) as failures."""
    entries: dict[str, DocumentEntry] = {}
    failed: list[tuple[str, str]] = []
    for i, item in enumerate(documents):
        if isinstance(item, DocumentSource):
            entry = _source_entry(item, i, failed)
        else:
            entry = _document_entry(item, i, failed)
        if entry is None:
            continue
        if entry.id in entries:
            failed.append((entry.id, f"duplicate document id {entry.id!r} (item {i}); the first one is kept"))
            continue
        entries[entry.id] = entry
    return list(entries.values()), failed


def _document_entry(item: Any, i: int, failed: list[tuple[str, str]]) -> DocumentEntry | None:
    if isinstance(item, Document):
        doc = item
    elif isinstance(item, Sequence) and not isinstance(item, str) and len(item) in (2, 3):
        doc = Document(*item)
    else:
        failed.append((f"#{i}", f"item {i} is {type(item).__name__}, expected Document or (id, text[, metadata])"))
        return None
    problem = id_problem(doc.id)
    if problem is not None:
        failed.append((f"#{i}", f"item {i}: {problem}"))
        return None
    doc = Document(clean_document_id(doc.id), doc.text, doc.metadata, doc.vector)
    if not isinstance(doc.text, str):
        hint = " (decode it first, e.g. text.decode('utf-8'))" if isinstance(doc.text, (bytes, bytearray)) else ""
        failed.append((doc.id, f"text is {type(doc.text).__name__}, expected str{hint}"))
        return None
    if (at := _surrogate(doc.text)) is not None:  # neither a tokenizer nor a payload takes it
        failed.append((doc.id, f"the text holds a lone surrogate at character {at}, which is not Unicode text "
                               "(decode its bytes with errors='replace')"))
        return None
    metadata = _stored_metadata(doc.id, doc.metadata, failed)
    if metadata is None:
        return None
    doc = Document(doc.id, doc.text, metadata, doc.vector)
    return DocumentEntry(doc.id, doc.metadata, content_hash(doc.text), not doc.text.strip(), len(doc.text),
                         document=doc)


def _stored_metadata(doc_id: str, metadata: Any, failed: list[tuple[str, str]]) -> dict[str, Any] | None:
    """The metadata as Qdrant will store and return it (tuples become lists), so an unchanged document compares
    equal; None, with the document failed and the key named, where it cannot be stored as given."""
    problem = metadata_problem(metadata)
    if problem is None:
        try:
            return json.loads(json.dumps(metadata or {}, allow_nan=False))
        except (TypeError, ValueError) as e:
            problem = f"metadata is not JSON-serialisable: {e}"
    failed.append((doc_id, problem))
    return None


def _source_entry(source: DocumentSource, i: int, failed: list[tuple[str, str]]) -> DocumentEntry | None:
    problem = id_problem(source.id)
    if problem is not None:
        failed.append((f"#{i}", f"item {i}: {problem}"))
        return None
    metadata = _stored_metadata(source.id, source.metadata, failed)
    if metadata is None:
        return None
    try:
        if source.fingerprint is not None:
            digest, blank = source.fingerprint()
            size = source.size
        else:
            text = source.read()
            if not isinstance(text, str):
                raise ValueError(f"read() returned {type(text).__name__}, expected str")
            digest, blank, size = content_hash(text), not text.strip(), len(text)
    except OSError as e:
        failed.append((source.id, f"cannot read: {e.strerror or e}"))
        return None
    except ValueError as e:
        failed.append((source.id, str(e)))
        return None
    return DocumentEntry(clean_document_id(source.id), metadata, digest, blank, size, source=source, root=source.root)
