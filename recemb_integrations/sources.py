"""The documents of a folder sync, as a Python API: what ``recemb sync PATHS`` finds, reads and hashes.

    from recemb_integrations.qdrant import QdrantSync
    from recemb_integrations.sources import FILE_METADATA_INDEXES, folder_sources

    found = folder_sources(["docs/"])                  # files, folders (recursively) and globs
    sync = QdrantSync(store, "docs", embedder, index_metadata=FILE_METADATA_INDEXES)
    report = sync.sync(found.sources, scope=found.scope)  # the collection `recemb sync docs/` builds

A document id is the file's path relative to the argument it was found under, in Unicode NFC, so a moved folder or
another checkout keeps its ids (see ``FolderSources``). Files are read only when the sync asks: hashed in pieces on
its first pass, read again only to be embedded. Search reads a file again by the path its metadata records
(``read_recorded``) to show the text around a hit, if the file has not changed since (else it says whether the file
was deleted or changed).

Nothing here loads a model: listing, reading and hashing files needs none. It uses the main job's model-free rooms
(``DocumentSource``, ``content_hash``), whose package loads lazily (tests/integrations/test_imports.py).
"""

from __future__ import annotations

import errno
import glob
import hashlib
import os
import stat
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recemb_integrations.formats import DOCUMENT_SUFFIXES, FORMAT_SUFFIXES
from recemb_integrations.qdrant.documents import DocumentSource
from recemb_integrations.qdrant.points import content_hash as text_hash

__all__ = ["FILE_METADATA_INDEXES", "VIRTUAL_FOLDERS", "FolderSources", "RecordedFile", "clean_id_prefix",
           "document_sources", "file_metadata", "folder_sources", "read_recorded", "read_text", "read_unchanged",
           "real_path", "text_fingerprint"]

# The kernel's virtual filesystems: their files are the running system, not documents, and walking them never ends.
VIRTUAL_FOLDERS = ("/proc", "/sys", "/dev")
# The metadata a sync gives each file (``file_metadata``) that searches filter by, indexed so a filter such as
# suffix=.md is fast on every store: pass it as ``QdrantSync(..., index_metadata=FILE_METADATA_INDEXES)``. Its
# ``path`` is not indexed: it is read back from a hit, not filtered by.
FILE_METADATA_INDEXES = {"file_name": "keyword", "suffix": "keyword", "bytes": "integer"}


@dataclass(frozen=True)
class FolderSources:
    """What the path arguments of a folder sync name: files to read with their document ids, arguments that name
    nothing, entries that are not documents.

    A document id is the file's path relative to the argument it was found under (the folder given, a glob's fixed
    leading folders, a file's own folder), in / form and Unicode NFC, after ``prefix/`` where an id prefix is given:
    a folder that moves, or another checkout of it, keeps its ids, also where the filesystem spells names
    decomposed (NFD, as macOS's HFS+ does). The file itself is read by the path the filesystem gave; two names that
    differ only in their normalisation are one id (the sync keeps the first, and reports the second as a duplicate).
    A symbolic link to a file is a document under its own path (the file it points to is another, where it is found
    too); a file reached twice by the same path keeps its first id.

    A sync that deletes what is gone (``delete_missing``) should not run while ``missing`` is not empty: a mistyped
    path would delete every document under it (``recemb sync`` refuses unless ``--keep-missing``)."""

    files: tuple[Path, ...] = ()  # absolute paths, in the order found
    ids: tuple[str, ...] = ()  # one per file
    missing: tuple[tuple[str, str], ...] = ()  # (argument, why): named nothing, or a folder that cannot be listed
    skipped: tuple[tuple[str, str], ...] = ()  # (path, why): not a document (a FIFO, a link to a folder, ...)
    scope: str | None = None  # "prefix/" with an id prefix, the sync's root (QdrantSync.sync's scope); else None

    @property
    def sources(self) -> list:
        """One ``DocumentSource`` per file (see ``document_sources``). Built on each access: each holds its file's
        size as it is then, so an instance kept for a later sync does not record stale metadata. Each carries this
        sync's root (``scope``, "" without an id prefix): a sync given them uses it, or refuses another."""
        return document_sources(self.files, self.ids, root=self.scope or "")


@dataclass
class _Found:
    """What a walk collects: files (absolute path -> id, first id wins) and what it reports."""

    files: dict[Path, str] = field(default_factory=dict)
    missing: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def folder_sources(paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
                   id_prefix: str | None = None) -> FolderSources:
    """The files that ``paths`` name (files, folders recursively with document suffixes only, and globs), with
    their ids, what named nothing and what was skipped (see ``FolderSources``). A single path may be given as is.

    An argument that names an existing path is that path, even where it holds glob characters (``a[1].md``, a folder
    ``proj[v2]``); it is a pattern only where no such path exists.

    ``id_prefix`` puts ``prefix/`` before every id (cleaned by ``clean_id_prefix``) and makes ``scope`` that root.

    ``ValueError`` before anything is listed, for an empty argument (an unset shell variable must not mean "the
    current folder") or an empty id prefix, and for anything that resolves to the filesystem root or into /proc,
    /sys or /dev: each argument, each glob's leading folders and each of its matches, after links and '..'. A path
    that does not exist, or a glob that matches nothing, is ``missing``. Every glob match is judged on its own: a
    bad one (broken link, loop, FIFO, ...) is ``skipped`` and the good ones are kept."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    prefix = clean_id_prefix(id_prefix) if id_prefix is not None else None
    found = _Found()
    for spec in map(os.fspath, paths):
        if not spec.strip():
            raise ValueError("an empty path argument was given (an unset shell variable?); nothing was done")
        if glob.has_magic(spec) and not os.path.lexists(spec):  # an existing path is itself, not a pattern
            base = _glob_base(spec)
            _refuse_system_paths(spec, str(base))
            matches = sorted(glob.glob(spec, recursive=True))
            for m in matches:
                _refuse_system_paths(f"{m} (matched by {spec})", m)
            if not matches:
                found.missing.append((spec, "no file or folder matches this pattern"))
            for m in matches:
                _add(Path(m), base, found, explicit=False)
        else:
            _refuse_system_paths(spec, spec)
            path = Path(spec)
            _add(path, path if _kind(path)[0] == "dir" else path.parent, found, explicit=True)
    head = prefix + "/" if prefix else ""
    return FolderSources(files=tuple(found.files), ids=tuple(head + doc_id for doc_id in found.files.values()),
                         missing=tuple(found.missing), skipped=tuple(found.skipped), scope=head or None)


def clean_id_prefix(prefix: str) -> str:
    """An id prefix as ids carry it: Unicode NFC, surrounding whitespace removed, its '/'-separated segments without
    empty ones and '.' (``" /wiki/ "``, ``"./wiki"`` -> ``"wiki"``; ``"a//b"`` -> ``"a/b"``), so every spelling of
    one prefix is one root. ``recemb_integrations.qdrant.scope_root`` applies the same rule to an API ``scope``.

    ``ValueError`` when nothing is left (an empty prefix, e.g. an unset shell variable, would make the sync the root
    of the unprefixed documents instead of its own), and for a '..' segment (ids are names, not paths to climb)."""
    if not isinstance(prefix, str):
        raise TypeError(f"the id prefix must be a str, got {type(prefix).__name__}")
    segments = [s for s in unicodedata.normalize("NFC", prefix.strip()).split("/") if s not in ("", ".")]
    if ".." in segments:
        raise ValueError(f"the id prefix {prefix!r} has a '..' segment; give a plain name such as 'wiki' or "
                         "'team/wiki'")
    if not segments:
        raise ValueError(f"the id prefix {prefix!r} is empty once whitespace, slashes and '.' are removed")
    return "/".join(segments)


def real_path(path: Path | str) -> str:
    """The absolute path with every symbolic link and '..' resolved as far as the filesystem lets us read: what the
    system-path refusals judge, and the document id an earlier recemb (before relative ids) gave a file."""
    try:
        return os.path.realpath(path)
    except OSError:  # a link we may not read: judged by the path as written
        return os.path.abspath(path)


def file_metadata(path: Path, size: int) -> dict[str, Any]:
    """The metadata a sync stores with a file of ``size`` bytes: the keys of ``FILE_METADATA_INDEXES`` and ``path``,
    the absolute path the sync reads it by (search reads an unchanged file there again, ``read_unchanged``, where
    the collection stores no texts; a moved folder updates it)."""
    return {"file_name": path.name, "suffix": path.suffix.lower(), "bytes": size, "path": str(path.absolute())}


def document_sources(files: Iterable[Path], ids: Iterable[str], root: str | None = None) -> list:
    """One ``recemb_integrations.qdrant.DocumentSource`` per file, under the id at the same position (as many ids as
    files): hashed on the sync's first pass (``text_fingerprint``, in pieces), read again (``read_text``) only if it
    must be embedded. ``root``: the sync root they belong to ("" or "prefix/"; None: not declared)."""

    sources = []
    for f, doc_id in zip(files, ids, strict=True):
        try:
            size = f.stat().st_size
        except OSError:
            size = 0  # reported when it is read
        metadata = file_metadata(f, size)
        f = f.absolute()  # read where the process's directory may differ (a Ray actor, `recemb sync --ray`)
        fingerprint = None if f.suffix.lower() in FORMAT_SUFFIXES else (lambda f=f: text_fingerprint(f))
        sources.append(DocumentSource(doc_id, (lambda f=f: read_text(f)), metadata, fingerprint, size, root=root))
    return sources


def read_text(path: Path) -> str:
    """A file's text: extracted for PDF, HTML and DOCX (the 'formats' extra), read as UTF-8 otherwise (any other
    suffix named explicitly is taken for text). ``OSError`` and ``ValueError`` say what failed: a file that is not
    UTF-8, or holds NUL bytes (UTF-16 without a byte-order mark, a binary file), is refused with what it looks like."""
    if path.suffix.lower() in FORMAT_SUFFIXES:
        from recemb_integrations.formats import extract_text

        return extract_text(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(_utf8_error(e.object[e.start], e.start, raw[:64])) from None
    if "\x00" in text:  # valid UTF-8, but not text: UTF-16 without a byte-order mark, or a binary file
        raise ValueError(_nul_error(raw.index(b"\x00"), raw[:64]))
    return text


@dataclass(frozen=True)
class RecordedFile:
    """What is at the path a sync recorded for a document now: ``state`` is "unchanged" (``text`` is its text, as
    ``read_text`` reads it), "deleted" (nothing is at the path: deleted, or moved away), "changed" (its text is not
    the one synced) or "unreadable" (not a regular file, or it cannot be read or decoded; ``why`` says which)."""

    state: str
    text: str | None = None
    why: str | None = None


def read_recorded(path: str | os.PathLike[str], content_hash: str) -> RecordedFile:
    """The file at ``path`` compared with ``content_hash`` (the ``content_hash`` a sync stored for it): its text if
    unchanged, else whether it was deleted, changed or cannot be read (``RecordedFile``).

    A large UTF-8 file is hashed in pieces first (``text_fingerprint``) and read whole only if it matches."""
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            return RecordedFile("deleted")
        return RecordedFile("unreadable", why=(e.strerror or str(e)).lower())
    if not stat.S_ISREG(st.st_mode):  # a FIFO put in its place would block the read forever
        return RecordedFile("unreadable", why="not a regular file")
    try:
        if st.st_size > _READ_WHOLE_UP_TO and path.suffix.lower() not in FORMAT_SUFFIXES:
            if text_fingerprint(path)[0] != content_hash:
                return RecordedFile("changed")
        text = read_text(path)
    except OSError as e:
        return RecordedFile("unreadable", why=(e.strerror or str(e)).lower())
    except ValueError as e:  # not UTF-8 (any more), or a document its extractor cannot read
        return RecordedFile("unreadable", why=str(e))
    return RecordedFile("unchanged", text) if text_hash(text) == content_hash else RecordedFile("changed")


def read_unchanged(path: str | os.PathLike[str], content_hash: str) -> str | None:
    """The text of the file at ``path`` (as ``read_text`` reads it) if its hash is still ``content_hash`` (the
    ``content_hash`` a sync stored for it); None if it is gone, not a regular file, cannot be read or has changed
    (``read_recorded`` says which)."""
    return read_recorded(path, content_hash).text


# Up to this size a file is read and hashed at once; above it, hashed in pieces before it is read.
_READ_WHOLE_UP_TO = 1 << 20


def text_fingerprint(path: Path, piece: int = 1 << 20) -> tuple[str, bool]:
    """(content hash, blank) of a UTF-8 file, read in pieces: valid UTF-8 bytes are the text's own encoding, so their
    hash is ``content_hash(text)`` without the text in memory. ``ValueError`` as ``read_text`` says."""
    import codecs

    digest, decoder, blank, offset = hashlib.sha256(), codecs.getincrementaldecoder("utf-8")(), True, 0
    head = b""
    with open(path, "rb") as f:
        while True:
            chunk = f.read(piece)
            head = head or chunk[:64]
            pending = len(decoder.getstate()[0])
            try:
                text = decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as e:
                raise ValueError(_utf8_error(e.object[e.start], offset - pending + e.start, head)) from None
            if b"\x00" in chunk:
                raise ValueError(_nul_error(offset + chunk.index(b"\x00"), head))
            if not chunk:
                return digest.hexdigest(), blank
            digest.update(chunk)
            blank = blank and not text.strip()
            offset += len(chunk)


# ---------------------------------------------------------------------- reading: what a refusal says
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _utf8_error(byte: int, offset: int, head: bytes) -> str:
    looks = " (it starts with a UTF-16 byte-order mark)" if head.startswith(_UTF16_BOMS) else ""
    return f"not valid UTF-8 (byte 0x{byte:02x} at offset {offset}){looks}; convert it to UTF-8"


def _nul_error(offset: int, head: bytes) -> str:
    """NUL bytes are valid UTF-8 but never text: UTF-16 (every other byte NUL for Latin text) or a binary file."""
    halves = (head[0::2], head[1::2])
    utf16 = len(head) >= 4 and any(h.count(0) >= len(h) * 0.75 for h in halves) and not all(0 in h for h in halves)
    what = "UTF-16 text without a byte-order mark" if utf16 else "a binary file"
    return f"holds NUL bytes (the first at offset {offset}), so it is not UTF-8 text (it looks like {what}); " \
           "convert it to UTF-8"


# ---------------------------------------------------------------------- walking
def _kind(path: Path) -> tuple[str, str]:
    """("file" | "dir" | "missing" | "skip", why) for one path, following symbolic links."""
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "skip", "symbolic link loop"
        link = _link_target(path)
        if link is not None and e.errno in (errno.ENOENT, errno.ENOTDIR):
            return "skip", f"broken symbolic link (to {link})"
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            return "missing", "no such file or folder"
        via = f" (a symbolic link to {link})" if link is not None else ""
        return "skip", f"cannot read: {(e.strerror or str(e)).lower()}{via}"
    if stat.S_ISREG(st.st_mode):
        if not _utf8_name(path):
            return "skip", "file name is not valid UTF-8 (rename it to sync it)"
        return "file", ""
    if stat.S_ISDIR(st.st_mode):
        return "dir", ""
    what = ("a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
            else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a special file")
    return "skip", f"{what}, not a regular file"


def _link_target(path: Path) -> str | None:
    """Where a symbolic link points, or None for anything else (or a link that cannot be read)."""
    try:
        return os.readlink(path)
    except OSError:
        return None


def _virtual_folder(real: str) -> str | None:
    return next((v for v in VIRTUAL_FOLDERS if real == v or real.startswith(v + "/")), None)


def _refuse_system_paths(spec: str, path: str) -> None:
    """The filesystem root and the kernel's virtual filesystems are never synced, however they are named (a
    relative path, a link, an unset shell variable before a '/'). ``spec``: the argument, ``path``: what of it is
    judged (the argument, a glob's leading folders, a match)."""
    real = real_path(path)
    glob_base = glob.has_magic(spec) and not glob.has_magic(path)
    if real == "/":
        raise ValueError(f"{spec} {'starts at' if glob_base else 'is'} the filesystem root (/); refusing to sync "
                         "the whole filesystem (an unset shell variable before a '/'?); nothing was done")
    virtual = _virtual_folder(real)
    if virtual is not None:
        via = "" if real == os.path.abspath(path) else f" ({'it' if path == spec else path} leads to {real})"
        raise ValueError(f"{spec}{via} is under {virtual}, the kernel's view of the running system, not "
                         "documents; refusing to sync it; nothing was done")


def _walk(folder: Path, base: Path, found: _Found) -> None:
    """Text files under folder, recursively; hidden entries ignored; links to folders, loops, broken links and
    special files listed as skipped."""
    def unreadable(error: OSError) -> None:  # a folder that cannot be listed is not an empty folder
        found.missing.append((error.filename or str(folder), f"cannot list this folder: {error.strerror or error}"))

    for root, dirs, names in os.walk(folder, followlinks=False, onerror=unreadable):
        root_path = Path(root)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for d in dirs:
            if (root_path / d).is_symlink():
                found.skipped.append((_printable(root_path / d), "symbolic link to a folder (not followed)"))
        for name in sorted(names):
            if name.startswith("."):
                continue
            path = root_path / name
            kind, why = _kind(path)
            virtual = _virtual_folder(real_path(path)) if kind == "file" and path.is_symlink() else None
            if virtual is not None:
                found.skipped.append((_printable(path), f"symbolic link into {virtual}, the kernel's view of the "
                                                        "running system (never synced)"))
            elif kind == "file":
                if path.suffix.lower() in DOCUMENT_SUFFIXES:
                    found.files.setdefault(Path(os.path.abspath(path)), _relative_id(path, base))
            elif kind == "dir":  # os.walk lists links to folders among the folders; be safe all the same
                found.skipped.append((_printable(path), "symbolic link to a folder (not followed)"))
            else:
                found.skipped.append((_printable(path), why))


def _glob_base(pattern: str) -> Path:
    """The folder before a glob's first wildcard: ``docs/**/*.md`` -> ``docs``."""
    parts = Path(pattern).parts
    fixed = []
    for part in parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    return Path(*fixed) if fixed else Path(".")


def _relative_id(path: Path, base: Path) -> str:
    """The id of a file found under ``base``: its relative path in / form, in NFC (one name, one id, however the
    filesystem composes its characters)."""
    try:
        relative = Path(os.path.relpath(os.path.abspath(path), os.path.abspath(base))).as_posix()
    except ValueError:  # another drive (Windows): no relative path exists
        relative = path.resolve().as_posix()
    return unicodedata.normalize("NFC", relative)


def _utf8_name(path: Path) -> bool:
    try:
        str(path.resolve()).encode("utf-8")  # ids are paths, stored as UTF-8 strings
        return True
    except UnicodeEncodeError:
        return False


def _printable(path: Path) -> str:
    """A path as report text (ids and reports hold valid UTF-8: undecodable bytes become U+FFFD)."""
    return str(path).encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _add(path: Path, base: Path, found: _Found, explicit: bool) -> None:
    kind, why = _kind(path)
    if kind == "file":
        found.files.setdefault(Path(os.path.abspath(path)), _relative_id(path, base))
    elif kind == "dir":
        _walk(path, base, found)
    elif kind == "missing" or (explicit and path.is_symlink()):  # a named path that leads nowhere: maybe a typo
        found.missing.append((_printable(path), why))
    else:
        found.skipped.append((_printable(path), why))
