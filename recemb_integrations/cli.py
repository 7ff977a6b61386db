"""The ``recemb`` command: export models, sync documents into Qdrant, search, embed, inspect.

Exit codes: 0 success; 1 the command ran but some documents failed (listed); 2 nothing was done (bad arguments,
missing model, collection mismatch, storage locked by another process, ...); 130 interrupted (Ctrl-C).

Checks that need no model (paths, flag values, collection name, the store and its lock, the collection's recorded
settings) run before the model loads, so a slip of the keyboard costs no waiting.
"""

from __future__ import annotations

import argparse
import errno
import glob
import json
import os
import re
import stat
import sys
import warnings
from contextlib import closing, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from recemb_integrations.formats import DOCUMENT_SUFFIXES, FORMAT_SUFFIXES
from recemb_integrations.terminal import escape, escape_controls

EXIT_OK, EXIT_PARTIAL, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130
# The kernel's virtual filesystems: their files are the running system, not documents, and walking them never ends.
VIRTUAL_FOLDERS = ("/proc", "/sys", "/dev")
# The metadata a sync gives each file, indexed so `recemb search --filter suffix=.md` is fast on every store.
FILE_METADATA_INDEXES = {"file_name": "keyword", "suffix": "keyword", "bytes": "integer"}


class CommandError(Exception):
    """An error that ends the command with a message and exit code 2."""


# ---------------------------------------------------------------------- shared helpers
def default_qdrant_path() -> Path:
    from platformdirs import user_data_dir

    return Path(os.environ.get("RECEMB_QDRANT_PATH") or Path(user_data_dir("recemb")) / "qdrant")


def chosen_model(args: argparse.Namespace) -> str | None:
    """The model the user named (--model, else $RECEMB_MODEL), or None."""
    return args.model or os.environ.get("RECEMB_MODEL") or None


def load_embedder(args: argparse.Namespace, model: str | None = None):
    """The named model, else ``model`` (a collection's recorded one), else the bundled default. Its ``name`` is
    what a collection records: an absolute path for a local folder, so a search from another folder finds it."""
    from recemb.core import DEFAULT_MODEL, Embedder

    recorded = model is not None and not chosen_model(args)
    model = chosen_model(args) or model or DEFAULT_MODEL
    local = Path(model).expanduser()
    name = str(local.resolve()) if local.is_dir() else model
    try:
        embedder = Embedder.from_pretrained(name, device=args.device, dtype=getattr(args, "dtype", None),
                                            quantize=getattr(args, "quantize", None),
                                            vertical_chunk_size=args.vertical_chunk_size,
                                            context_extension=getattr(args, "context_extension", None) or "auto")
    except (OSError, ValueError) as e:
        if recorded:
            raise CommandError(f"the collection was built with model {model!r}, which cannot be loaded here ({e}); "
                               "pass --model") from e
        raise
    return embedder


def open_qdrant(args: argparse.Namespace, create: bool = True, environment_url: bool = True):
    """(store, where): a server for --qdrant-url / QDRANT_URL, else the embedded store at --qdrant-path (Qdrant Edge
    for a new folder; a folder that holds a qdrant-client local-mode store stays one; --store chooses).

    ``create=False`` (reads) never makes a folder or a store: a path that holds none is an error."""
    from recemb_integrations.stores import StoreError, detect_store_kind, open_store

    if args.qdrant_url and args.qdrant_path:
        raise CommandError("--qdrant-url and --qdrant-path name two different stores; give one")
    kind = getattr(args, "store", None) or "auto"
    # An explicit --qdrant-path beats $QDRANT_URL: the store the user named is the one written to.
    url = args.qdrant_url or (os.environ.get("QDRANT_URL") if args.qdrant_path is None and environment_url
                              else None)
    if url:
        if kind != "auto":
            raise CommandError(f"--store {kind} names an embedded store, but a server was given (--qdrant-url or "
                               "$QDRANT_URL); drop one")
        # The client checks the server's version in a thread and warns in several lines when it cannot reach it;
        # the first call of the command reports an unreachable server in one line instead.
        warnings.filterwarnings("ignore", message="Failed to obtain server version")
        return open_store(url=url, api_key=os.environ.get("QDRANT_API_KEY")), url
    given = args.qdrant_path if args.qdrant_path is not None else os.environ.get("RECEMB_QDRANT_PATH")
    if given is not None and not given.strip():
        raise CommandError("the store path is empty (--qdrant-path or $RECEMB_QDRANT_PATH; an unset shell "
                           "variable?)")
    path = Path(given).expanduser() if given else default_qdrant_path()
    if path.exists() and not path.is_dir():
        raise CommandError(f"--qdrant-path {path} is a file, not a folder; give the folder of an embedded store "
                           "(it is created on the first sync)")
    found = detect_store_kind(path) if path.is_dir() else None
    if not create and found is None:
        where = "--qdrant-path " + str(path) if given else f"the default store {path}"
        raise CommandError(f"there is no embedded Qdrant store at {where}; check the path, or run `recemb sync` "
                           "first")
    if create and found is None and path.is_dir() and any(path.iterdir()):
        raise CommandError(f"{path} holds other files but no Qdrant store; give --qdrant-path a new or empty "
                           "folder (a store writes its own files there)")
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CommandError(f"cannot create the store folder {path}: {e.strerror or e}") from e
    try:
        return open_store(path=path, kind=kind), str(path)
    except StoreError as e:
        raise CommandError(str(e)) from e


@dataclass
class Sources:
    """What the path arguments name: files to read (with their document ids), arguments that name nothing, entries
    that are not documents.

    A document id is the file's path relative to the argument it was found under (the folder given, a glob's fixed
    leading folders, a file's own folder), in / form, after ``id_prefix/`` if one is given: a folder that moves, or
    another checkout of it, keeps its ids. A symbolic link to a file is a document under its own path (the file it
    points to is another, where it is found too); a file reached twice by the same path keeps its first id."""

    files: list[Path] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)  # one per file
    missing: list[tuple[str, str]] = field(default_factory=list)  # (argument, why): the sync refuses to delete
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why): reported, the rest goes on


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


def _real_path(path: Path | str) -> str:
    """The absolute path with every symbolic link and '..' resolved as far as the filesystem lets us read."""
    try:
        return os.path.realpath(path)
    except OSError:  # a link we may not read: judged by the path as written
        return os.path.abspath(path)


def _virtual_folder(real: str) -> str | None:
    return next((v for v in VIRTUAL_FOLDERS if real == v or real.startswith(v + "/")), None)


def _refuse_system_paths(spec: str, path: str) -> None:
    """The filesystem root and the kernel's virtual filesystems are never synced, however they are named (a
    relative path, a link, an unset shell variable before a '/'). ``spec``: the argument, ``path``: what of it is
    judged (the argument, a glob's leading folders, a match)."""
    real = _real_path(path)
    glob_base = glob.has_magic(spec) and not glob.has_magic(path)
    if real == "/":
        raise CommandError(f"{spec} {'starts at' if glob_base else 'is'} the filesystem root (/); refusing to sync "
                           "the whole filesystem (an unset shell variable before a '/'?); nothing was done")
    virtual = _virtual_folder(real)
    if virtual is not None:
        via = "" if real == os.path.abspath(path) else f" ({'it' if path == spec else path} leads to {real})"
        raise CommandError(f"{spec}{via} is under {virtual}, the kernel's view of the running system, not "
                           "documents; refusing to sync it; nothing was done")


def _walk(folder: Path, base: Path, out: Sources, files: dict[Path, str]) -> None:
    """Text files under folder, recursively; hidden entries ignored; links to folders, loops, broken links and
    special files listed as skipped."""
    def unreadable(error: OSError) -> None:  # a folder that cannot be listed is not an empty folder
        out.missing.append((error.filename or str(folder), f"cannot list this folder: {error.strerror or error}"))

    for root, dirs, names in os.walk(folder, followlinks=False, onerror=unreadable):
        root_path = Path(root)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for d in dirs:
            if (root_path / d).is_symlink():
                out.skipped.append((_printable(root_path / d), "symbolic link to a folder (not followed)"))
        for name in sorted(names):
            if name.startswith("."):
                continue
            path = root_path / name
            kind, why = _kind(path)
            virtual = _virtual_folder(_real_path(path)) if kind == "file" and path.is_symlink() else None
            if virtual is not None:
                out.skipped.append((_printable(path), f"symbolic link into {virtual}, the kernel's view of the running "
                                                      "system (never synced)"))
            elif kind == "file":
                if path.suffix.lower() in DOCUMENT_SUFFIXES:
                    files.setdefault(Path(os.path.abspath(path)), _relative_id(path, base))
            elif kind == "dir":  # os.walk lists links to folders among the folders; be safe all the same
                out.skipped.append((_printable(path), "symbolic link to a folder (not followed)"))
            else:
                out.skipped.append((_printable(path), why))


def collect_files(paths: list[str], id_prefix: str | None = None) -> Sources:
    """Files from paths, folders (recursively, document suffixes only) and globs, with their ids (see ``Sources``).

    An empty argument is refused (an unset shell variable must not mean "the current folder"), and so is anything
    that resolves to the filesystem root or into /proc, /sys or /dev: each argument, each glob's leading folders
    and each of its matches, after links and '..'. A path that does not exist, or a glob that matches nothing, is
    ``missing``. Every glob match is judged on its own: a bad one (broken link, loop, FIFO, ...) is ``skipped``
    and the good ones are kept."""
    out = Sources()
    files: dict[Path, str] = {}
    for spec in paths:
        if not spec.strip():
            raise CommandError("an empty path argument was given (an unset shell variable?); nothing was done")
        if glob.has_magic(spec):
            base = _glob_base(spec)
            _refuse_system_paths(spec, str(base))
            matches = sorted(glob.glob(spec, recursive=True))
            for m in matches:
                _refuse_system_paths(f"{m} (matched by {spec})", m)
            if not matches:
                out.missing.append((spec, "no file or folder matches this pattern"))
            for m in matches:
                _add(Path(m), base, out, files, explicit=False)
        else:
            _refuse_system_paths(spec, spec)
            path = Path(spec)
            _add(path, path if _kind(path)[0] == "dir" else path.parent, out, files, explicit=True)
    out.files = list(files)
    prefix = (id_prefix.strip("/") + "/") if id_prefix else ""
    out.ids = [prefix + doc_id for doc_id in files.values()]
    return out


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
    try:
        return Path(os.path.relpath(os.path.abspath(path), os.path.abspath(base))).as_posix()
    except ValueError:  # another drive (Windows): no relative path exists
        return path.resolve().as_posix()


def _utf8_name(path: Path) -> bool:
    try:
        str(path.resolve()).encode("utf-8")  # ids are paths, stored as UTF-8 strings
        return True
    except UnicodeEncodeError:
        return False


def _printable(path: Path) -> str:
    """A path as report text (ids and reports hold valid UTF-8: undecodable bytes become U+FFFD)."""
    return str(path).encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _add(path: Path, base: Path, out: Sources, files: dict[Path, str], explicit: bool) -> None:
    kind, why = _kind(path)
    if kind == "file":
        files.setdefault(Path(os.path.abspath(path)), _relative_id(path, base))
    elif kind == "dir":
        _walk(path, base, out, files)
    elif kind == "missing" or (explicit and path.is_symlink()):  # a named path that leads nowhere: maybe a typo
        out.missing.append((_printable(path), why))
    else:
        out.skipped.append((_printable(path), why))


def read_text(path: Path) -> str:
    """A file's text: extracted for PDF, HTML and DOCX (the 'formats' extra), read as UTF-8 otherwise (any other
    suffix named on the command line is taken for text). ``OSError`` and ``ValueError`` say what failed."""
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


UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _utf8_error(byte: int, offset: int, head: bytes) -> str:
    looks = " (it starts with a UTF-16 byte-order mark)" if head.startswith(UTF16_BOMS) else ""
    return f"not valid UTF-8 (byte 0x{byte:02x} at offset {offset}){looks}; convert it to UTF-8"


def _nul_error(offset: int, head: bytes) -> str:
    """NUL bytes are valid UTF-8 but never text: UTF-16 (every other byte NUL for Latin text) or a binary file."""
    halves = (head[0::2], head[1::2])
    utf16 = len(head) >= 4 and any(h.count(0) >= len(h) * 0.75 for h in halves) and not all(0 in h for h in halves)
    what = "UTF-16 text without a byte-order mark" if utf16 else "a binary file"
    return f"holds NUL bytes (the first at offset {offset}), so it is not UTF-8 text (it looks like {what}); " \
           "convert it to UTF-8"


def text_fingerprint(path: Path, piece: int = 1 << 20) -> tuple[str, bool]:
    """(content hash, blank) of a UTF-8 file, read in pieces: valid UTF-8 bytes are the text's own encoding, so their
    hash is ``content_hash(text)`` without the text in memory."""
    import codecs
    import hashlib

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


def document_sources(files: list[Path], ids: list[str]):
    """One ``DocumentSource`` per file: hashed on the sync's first pass, read again only if it must be embedded."""
    from recemb_integrations.qdrant import DocumentSource

    sources = []
    for f, doc_id in zip(files, ids):
        try:
            size = f.stat().st_size
        except OSError:
            size = 0  # reported when it is read
        metadata = {"file_name": f.name, "suffix": f.suffix.lower(), "bytes": size}
        f = f.absolute()  # read where the process's directory may differ (a Ray actor, `recemb sync --ray`)
        fingerprint = None if f.suffix.lower() in FORMAT_SUFFIXES else (lambda f=f: text_fingerprint(f))
        sources.append(DocumentSource(doc_id, (lambda f=f: read_text(f)), metadata, fingerprint, size))
    return sources


def read_documents(files: list[Path], ids: list[str] | None = None):
    """(documents, failures, ids of files that exist but could not be read), texts in memory: for `recemb embed`."""
    from recemb_integrations.qdrant import Document

    docs, failed, unreadable = [], [], []
    for f, doc_id in zip(files, ids or [f.as_posix() for f in files]):
        try:
            text = read_text(f)
        except OSError as e:
            failed.append((doc_id, f"cannot read: {e.strerror or e}"))
            unreadable.append(doc_id)
            continue
        except ValueError as e:
            failed.append((doc_id, str(e)))
            unreadable.append(doc_id)
            continue
        docs.append(Document(doc_id, text, {"file_name": f.name, "suffix": f.suffix.lower(),
                                            "bytes": f.stat().st_size}))
    return docs, failed, unreadable


def emit(args: argparse.Namespace, data, text: str) -> None:
    print(json.dumps(data, ensure_ascii=False) if args.json else text)


# ---------------------------------------------------------------------- commands
def cmd_export(args: argparse.Namespace) -> int:
    from recemb_integrations.sentence_transformers import export_sentence_transformers

    out = export_sentence_transformers(
        args.source, args.destination, tokenizer=args.tokenizer, dtype=args.dtype, quantize=args.quantize,
        max_seq_length=args.max_seq_length, vertical_chunk_size=args.vertical_chunk_size, model_name=args.name,
    )
    emit(args, {"destination": str(out)}, f"wrote a sentence-transformers model to {out}")
    return EXIT_OK


def cmd_train(args: argparse.Namespace) -> int:
    from recemb.core.files import check_model_destination
    from recemb_integrations.training import train
    from recemb_integrations.training.config import from_cli

    check_model_destination(args.out)  # before the training, not after

    config = from_cli(args)
    summary = train(args.model, args.data, args.out, config, tokenizer=args.tokenizer, model_name=args.name)
    brief = {k: summary[k] for k in ("rows", "steps", "seconds", "train_loss", "final_logged_loss", "lora")}
    emit(args, brief, f"trained {brief['steps']} steps on {brief['rows']} pairs in {brief['seconds']} s "
                      f"(mean loss {brief['train_loss']:.4f}, last logged {brief['final_logged_loss']}); "
                      f"saved to {args.out}")
    return EXIT_OK


def cmd_calibrate(args: argparse.Namespace) -> int:
    from recemb.core import Embedder, resolve_model_path
    from recemb.core.calibration import calibrate

    sources = collect_files(args.texts)
    if sources.missing:
        raise CommandError(f"{sources.missing[0][0]}: {sources.missing[0][1]}")
    if not sources.files:
        raise CommandError(f"no {'/'.join(DOCUMENT_SUFFIXES)} files under {' '.join(args.texts)}")
    texts = []
    for f in sources.files:
        try:
            texts.append(read_text(f))
        except (ValueError, OSError) as e:
            raise CommandError(f"{f}: cannot read its text ({e})") from e
    folder = resolve_model_path(args.model)
    out = folder
    if args.out is not None:  # a calibrated copy: never merged into a folder of someone else's files
        import shutil

        from recemb.core.files import check_model_destination

        out = check_model_destination(args.out)
        shutil.copytree(folder, out, dirs_exist_ok=True)
    embedder = Embedder.from_pretrained(out, device=args.device, context_extension="off")
    ext = calibrate(
        embedder, texts, method=args.method, train_length=args.train_length,
        windows=args.windows, theta=args.theta, clamp_top=args.clamp_top, documents=args.documents,
        document_length=args.document_length, optimizer=args.optimizer, iterations=args.iterations,
        seed=args.seed, save_to=str(out), min_length=args.min_length,
    )
    data = {"folder": str(out), "mode": ext.mode, "delta_scale": ext.delta_scale,
            "global_heads_per_layer": [int(sum(g)) for g in ext.global_heads] if ext.global_heads else None,
            "target_lengths": sorted(ext.thresholds)}
    emit(args, data, f"wrote {out / 'context_extension.json'} ({ext.mode}); it loads with the model "
                     "(switch with --context-extension)")
    return EXIT_OK


def cmd_sync(args: argparse.Namespace) -> int:
    from recemb_integrations.qdrant import NothingReadableError, QdrantSync, RebuildError, check_collection_name, \
        check_passage_settings, collection_settings

    check_collection_name(args.collection)
    if args.rebuild and args.keep_missing:
        raise CommandError("--rebuild builds the collection from PATHS alone; --keep-missing cannot keep documents "
                           "that are not among them")
    prefix = _id_prefix(args)
    if args.rebuild and prefix:
        raise CommandError("--rebuild replaces the whole collection, so it cannot be limited to --id-prefix; rebuild "
                           "it without the prefix, or sync each root into a new collection")
    sources = collect_files(args.paths, prefix)
    if not sources.files and not sources.missing:
        skipped = f" ({len(sources.skipped)} skipped, e.g. {': '.join(sources.skipped[0])})" if sources.skipped else ""
        raise CommandError(f"no {'/'.join(DOCUMENT_SUFFIXES)} files under {' '.join(args.paths)}{skipped}")
    if sources.missing and not args.keep_missing:
        # A mistyped path must not wipe the collection through delete_missing.
        raise CommandError(f"{sources.missing[0][0]}: {sources.missing[0][1]} (nothing synced; pass --keep-missing "
                           "to sync the rest without deleting anything)")
    executor = _ray_executor(args)  # before the store opens: a missing extra or a bad option costs nothing
    store, where = open_qdrant(args)
    with closing(store):
        recorded = collection_settings(store, args.collection)
        settings = _sync_settings(args, recorded)
        if settings["passage_tokens"] is None and args.passage_overlap:
            raise CommandError("--passage-overlap needs --passage-tokens (passages are off for this collection)")
        try:
            check_passage_settings(settings["passage_tokens"], settings["passage_overlap"])
        except ValueError:
            raise CommandError(f"--passage-overlap {settings['passage_overlap']} must be smaller than "
                               f"--passage-tokens {settings['passage_tokens']}") from None
        allow_mass_delete = args.allow_mass_delete
        if recorded is not None:
            allow_mass_delete = _check_id_scheme(store, args, sources) or allow_mass_delete
        # An existing collection's own model unless one is named, as for search.
        embedder = load_embedder(args, model=recorded.get("model") if recorded else None)
        sync = QdrantSync(store, args.collection, embedder, store_text=args.store_text,
                          batch_size=args.batch_size, index_metadata=FILE_METADATA_INDEXES, **settings)
        try:
            report = sync.sync(document_sources(sources.files, sources.ids), delete_missing=not args.keep_missing,
                               allow_mass_delete=allow_mass_delete, skip_empty=args.skip_empty,
                               show_progress_bar=None if not args.json else False, rebuild=args.rebuild,
                               scope=prefix + "/" if prefix else None, executor=executor)
        except NothingReadableError as e:
            raise CommandError(str(e).replace(" documents could be read", " files could be read")) from None
        except RebuildError as e:
            raise CommandError(str(e)) from None
    report.failed = list(sources.missing) + report.failed
    report.skipped = list(sources.skipped) + report.skipped
    data = {"collection": args.collection, "qdrant": where, "store": store.kind, **report.as_dict()}
    lines = [f"{escape(args.collection)} @ {escape(where)} ({store.kind}): {report.added} added, "
             f"{report.updated} updated, {report.metadata_updated} metadata updated, {report.unchanged} unchanged, "
             f"{report.deleted} deleted, {len(report.failed)} failed ({report.embedded_tokens:,} tokens embedded in "
             f"{report.seconds:.1f} s)"]
    # Names escaped (a file name can hold a newline or an escape sequence); --json carries them exactly.
    lines += [f"  failed: {escape(doc_id)}: {escape_controls(err)}" for doc_id, err in report.failed]
    lines += [f"  warning: {escape(doc_id)}: {escape_controls(what)}" for doc_id, what in report.warnings]
    lines += [f"  skipped: {escape(path)}: {escape_controls(why)}" for path, why in report.skipped]
    emit(args, data, "\n".join(lines))
    return EXIT_PARTIAL if report.failed else EXIT_OK


def _id_prefix(args: argparse.Namespace) -> str | None:
    prefix = getattr(args, "id_prefix", None)
    if prefix is None:
        return None
    cleaned = prefix.strip().strip("/")
    if not cleaned:
        raise CommandError("--id-prefix is empty (an unset shell variable?); nothing was done")
    return cleaned


def _looks_absolute(doc_id: str) -> bool:
    return doc_id.startswith("/") or bool(re.match(r"^[A-Za-z]:[\\/]", doc_id))


def _check_id_scheme(store, args: argparse.Namespace, sources: Sources) -> bool:
    """Collections synced before ids became relative hold absolute paths: a plain sync would delete and re-add
    everything, so it is refused with the way on. A --rebuild is the way on; it may then replace every id (True:
    the deletions are the old ids of the same files, when most of them match)."""
    from qdrant_client import models

    from recemb_integrations.qdrant import KIND_DOCUMENT

    only_documents = models.Filter(must=[models.FieldCondition(key="kind",
                                                               match=models.MatchValue(value=KIND_DOCUMENT))])
    sample, _ = store.scroll(args.collection, limit=64, filter=only_documents, with_payload=["document_id"])
    absolute = [p.payload.get("document_id") for p in sample if _looks_absolute(p.payload.get("document_id") or "")]
    if not absolute:
        return False
    if not args.rebuild:
        example = sources.ids[0] if sources.ids else "a.md"
        raise CommandError(
            f"collection {args.collection!r} was synced by an earlier recemb, which used absolute paths as document "
            f"ids (e.g. {absolute[0]!r}); ids are now relative to the folder given (e.g. {example!r}), so a moved "
            "folder or another checkout keeps them. Nothing was written. Rebuild it once with `recemb sync --rebuild "
            "PATHS` (built beside the old one, which it replaces when complete; every document is embedded again), "
            "or sync into a new --collection.")
    old_ids = {Path(_real_path(f)).as_posix() for f in sources.files}  # an earlier recemb's ids: resolved paths
    stored, offset = set(), None
    while True:
        page, offset = store.scroll(args.collection, limit=1024, offset=offset, filter=only_documents,
                                    with_payload=["document_id"])
        stored.update(p.payload.get("document_id") for p in page)
        if offset is None:
            break
    return len(stored & old_ids) >= len(stored) / 2


def _ray_executor(args: argparse.Namespace):
    """``--ray``: the sync's embedding on Ray actors (``recemb_integrations.ray.RayExecutor``); None without it."""
    ray_options = [name for name in ("ray_address", "ray_actors", "ray_gpus_per_actor")
                   if getattr(args, name) is not None]
    if not args.ray:
        if ray_options:
            raise CommandError(f"--{ray_options[0].replace('_', '-')} needs --ray")
        return None
    if args.ray_address is not None and not args.ray_address.strip():
        raise CommandError("--ray-address is empty (an unset shell variable?); nothing was done")
    try:
        from recemb_integrations.ray import RayExecutor
    except ImportError as e:
        raise CommandError(str(e)) from None
    try:
        return RayExecutor(address=args.ray_address, concurrency=args.ray_actors, num_gpus=args.ray_gpus_per_actor)
    except ValueError as e:
        raise CommandError(str(e)) from None


def _sync_settings(args: argparse.Namespace, recorded: dict | None) -> dict:
    """Passage, truncation and BM25 settings: the flags where given, else the existing collection's (so a later sync
    need not repeat them); a flag that contradicts the collection is refused here, before the model loads. A rebuild
    takes the flags, and the collection's passages and truncation where no flag names them."""
    given = {"passage_tokens": args.passage_tokens, "passage_overlap": args.passage_overlap,
             "max_tokens": args.max_tokens}
    flags = {"passage_tokens": "--passage-tokens", "passage_overlap": "--passage-overlap",
             "max_tokens": "--max-tokens"}
    if recorded is None:
        return {**given, "passage_overlap": given["passage_overlap"] or 0, "sparse": not args.dense_only}
    from recemb_integrations.qdrant import layout_version, legacy_hybrid_refusal, recorded_layout

    kept = recorded_layout(recorded)
    if args.rebuild:
        chosen = {key: value if value is not None else kept[key] for key, value in given.items()}
        if args.passage_tokens is not None and args.passage_overlap is None:
            chosen["passage_overlap"] = 0
        return {**chosen, "passage_overlap": chosen["passage_overlap"] or 0, "sparse": not args.dense_only}
    for key, value in given.items():
        if value is not None and value != kept[key] and not (key == "passage_overlap" and value == 0
                                                             and not kept["passage_tokens"]):
            raise CommandError(f"collection {args.collection!r} was built with {flags[key]} "
                               f"{kept[key] if kept[key] is not None else '(none)'}, not {value}; drop the flag to "
                               "use the collection's setting, sync into a new --collection, or --rebuild it")
    if layout_version(recorded) == 1 and not args.dense_only:
        raise CommandError(legacy_hybrid_refusal(args.collection))
    if args.dense_only and kept["sparse"]:
        raise CommandError(f"collection {args.collection!r} was built with BM25 vectors (hybrid); drop --dense-only, "
                           "or --rebuild it dense-only")
    return kept


def cmd_search(args: argparse.Namespace) -> int:
    from recemb_integrations.qdrant import MAX_SEARCH_LIMIT, QdrantSync, SearchNotice, check_collection_name, \
        collection_settings, interrupted_rebuild_hint

    check_collection_name(args.collection)
    if not args.query.strip():
        raise CommandError("the query is empty (an unset shell variable?)")
    if args.limit > MAX_SEARCH_LIMIT:
        raise CommandError(f"--limit {args.limit} is more than one search returns (at most {MAX_SEARCH_LIMIT:,}); "
                           "nothing was searched")
    filters = dict(_parse_filter(f) for f in args.filter)
    store, where = open_qdrant(args, create=False)
    with closing(store):
        recorded = collection_settings(store, args.collection)
        if recorded is None:
            hint = interrupted_rebuild_hint(store, args.collection)
            raise CommandError(f"collection {args.collection!r} does not exist in {where}; "
                               + (hint or "run `recemb sync` first"))
        if args.mode in ("hybrid", "sparse") and recorded.get("sparse") is None:
            raise CommandError(f"collection {args.collection!r} has no BM25 vectors (it was built dense-only); "
                               "search it with --mode dense, or rebuild it with `recemb sync --rebuild`")
        if args.granularity == "passage" and not recorded.get("passage_tokens"):
            raise CommandError(f"collection {args.collection!r} has no passages (it was synced without "
                               "--passage-tokens); search documents instead")
        # The collection's own model unless one is named: search needs no flag the sync had.
        embedder = load_embedder(args, model=recorded.get("model"))
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always", SearchNotice)
            hits = QdrantSync.open(store, args.collection, embedder).search(
                args.query, limit=args.limit, instruction=args.instruction, filter=filters or None,
                granularity=args.granularity, mode=args.mode, **({"fusion": args.fusion} if args.fusion else {}))
    for note in notes:
        if issubclass(note.category, SearchNotice):
            print(f"recemb search: note: {escape_controls(str(note.message))}", file=sys.stderr)
        else:
            warnings.warn_explicit(note.message, note.category, note.filename, note.lineno)
    rows = [{"document_id": h.document_id, "score": h.score, "metadata": h.metadata, "passage": h.passage,
             **({"best_passage": h.best_passage} if h.best_passage is not None else {}),
             **({"best_passage_text": h.best_passage_text} if h.best_passage_text is not None else {}),
             **({"text": h.text} if h.text is not None else {})} for h in hits]
    emit(args, rows, "\n".join(_hit_lines(h) for h in hits) or "no hits")
    return EXIT_OK


def _hit_lines(hit) -> str:
    """A hit's score and document, and under it the passage that matched (its text where the collection keeps it)."""
    line = f"{hit.score:.4f}  {escape(hit.document_id)}" + (f"  (passage {hit.passage})" if hit.passage is not None
                                                             else "")
    if hit.passage is not None and hit.text:
        return line + "\n        " + _excerpt(hit.text)
    if hit.best_passage is not None:
        return line + f"\n        passage {hit.best_passage}" + (
            ": " + _excerpt(hit.best_passage_text) if hit.best_passage_text else "")
    return line


def _excerpt(text: str, width: int = 160) -> str:
    flat = " ".join(text.split())
    return escape_controls(flat if len(flat) <= width else flat[: width - 3] + "...")


def _parse_filter(spec: str) -> tuple[str, object]:
    """KEY=VALUE: VALUE is read as JSON where it parses (numbers, true/false, lists), as a string otherwise."""
    from recemb_integrations.qdrant import metadata_condition

    if "=" not in spec or not spec.split("=", 1)[0]:
        raise CommandError(f"--filter {spec!r}: expected KEY=VALUE")
    key, value = spec.split("=", 1)
    if not value.strip():
        raise CommandError(f"--filter {spec!r}: the value is empty (an unset shell variable?)")
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    try:
        metadata_condition(key, parsed)  # the same check the search makes, before the model loads
    except ValueError as e:
        raise CommandError(f"--filter {spec!r}: {e}") from None
    return key, parsed


def cmd_migrate(args: argparse.Namespace) -> int:
    from recemb_integrations.migrate import MigrationError, migrate_collection
    from recemb_integrations.qdrant import check_collection_name
    from recemb_integrations.stores import StoreError, open_store

    check_collection_name(args.collection)
    if (args.to is None) == (args.to_path is None):
        raise CommandError("give the target: --to URL (a Qdrant server or cluster) or --to-path FOLDER (an embedded "
                           "store)")
    if args.to is not None and not re.match(r"^https?://", args.to.strip()):
        raise CommandError(f"--to {args.to!r} is not a URL (http://... or https://...); for a folder use --to-path")
    if args.to_path is not None and not args.to_path.strip():
        raise CommandError("--to-path is empty (an unset shell variable?); nothing was done")
    # The source is the embedded store unless --qdrant-url names a server: $QDRANT_URL is usually the target.
    source, where = open_qdrant(args, create=False, environment_url=False)
    with closing(source):
        if not source.collection_exists(args.collection):  # before the target store is opened (or created)
            raise CommandError(f"collection {args.collection!r} does not exist in {where}; nothing was done")
        # The source store itself as the target (an embedded store is open in one process at a time): a copy
        # under another name, or the same collection, which migrate_collection refuses.
        same = args.to_path is not None and source.kind != "server" and \
            _real_path(Path(args.to_path).expanduser()) == _real_path(where)
        try:
            target = source if same else (
                open_store(url=args.to.strip(), api_key=os.environ.get("QDRANT_API_KEY")) if args.to
                else open_store(path=Path(args.to_path).expanduser(), kind=args.to_store))
        except StoreError as e:
            raise CommandError(str(e)) from e
        with closing(target) if not same else nullcontext():
            try:
                report = migrate_collection(source, target, args.collection, args.to_collection,
                                            batch_size=args.batch_size, verify=not args.no_verify,
                                            show_progress_bar=None if not args.json else False)
            except MigrationError as e:
                raise CommandError(str(e)) from None
            to = f"{report.target_collection} @ {target.location} ({target.kind})"
    data = {"from": where, "to": target.location, "to_kind": target.kind, **vars(report)}
    verified = (f"verified: {report.points} points, digest {report.target_digest[:16]}"
                + (f" ({report.rounded} dense vectors within float rounding)" if report.rounded else "")
                if report.target_digest else "not verified (--no-verify)")
    emit(args, data, f"{escape(args.collection)} @ {escape(where)} -> {escape(to)}: {report.copied} points copied"
                     f"{' (resumed)' if report.resumed else ''} in {report.seconds:.1f} s; {verified}")
    return EXIT_OK


def cmd_embed(args: argparse.Namespace) -> int:
    if args.files:
        sources = collect_files(args.files)
        if sources.missing:
            raise CommandError(f"{sources.missing[0][0]}: {sources.missing[0][1]}")
        docs, failed, _ = read_documents(sources.files, sources.ids)
        failed += sources.skipped
        ids, texts = [d.id for d in docs], [d.text for d in docs]
        embedder = load_embedder(args)
    else:
        embedder = load_embedder(args)
        failed = []
        lines = [line.rstrip("\n") for line in sys.stdin]
        for i, line in enumerate(lines):
            try:
                line.encode("utf-8")
            except UnicodeEncodeError:  # stdin decodes undecodable bytes to surrogates
                raise CommandError(f"stdin line {i + 1} is not valid UTF-8; convert the input to UTF-8") from None
        ids, texts = [str(i) for i in range(len(lines))], lines
    vectors = (embedder.encode_queries(texts, instruction=args.instruction) if args.query
               else embedder.encode_documents(texts))
    for doc_id, v in zip(ids, vectors):
        print(json.dumps({"id": doc_id, "vector": [round(float(x), 7) for x in v]}))
    for doc_id, err in failed:
        print(f"recemb embed: {escape(doc_id)}: {escape_controls(err)}", file=sys.stderr)
    return EXIT_PARTIAL if failed else EXIT_OK


def cmd_info(args: argparse.Namespace) -> int:
    from recemb.core import Embedder
    from recemb.core.loading import detect_architecture, resolve_model_path

    folder = resolve_model_path(args.model)
    architecture, fmt = detect_architecture(folder)
    emb = Embedder.from_pretrained(folder, device="cpu")
    c = emb.config
    shape = {key: getattr(c, name) for key, name in (("heads", "num_heads"), ("head_dim", "head_dim"),
                                                     ("state_size", "state_size"), ("n_groups", "n_groups"))
             if hasattr(c, name)}  # what the architecture has of these
    data = {
        "model": args.model, "folder": str(folder), "architecture": architecture, "format": fmt, "dim": emb.dim,
        "layers": c.num_hidden_layers, **shape, "vocab_size": c.vocab_size, "chunk_size": c.chunk_size,
        "parameters": sum(p.numel() for p in emb.model.parameters()),
        "tokenizer": emb.tokenizer is not None,
        "eos_token_id": emb.tokenizer.eos_token_id if emb.tokenizer else None,
        "sentence_transformers": (folder / "modules.json").exists(),
    }
    emit(args, data, "\n".join(f"{k:>22}: {v}" for k, v in data.items()))
    return EXIT_OK


# ---------------------------------------------------------------------- parser
def int_at_least(minimum: int):
    """argparse type: an integer >= minimum (argparse then names the flag in its one-line error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}" if minimum else
                                             f"must be 0 or more, got {value}")
        return value

    return parse


positive_int, non_negative_int = int_at_least(1), int_at_least(0)


def build_parser() -> argparse.ArgumentParser:
    from recemb.core.options import CONTEXT_EXTENSION_MODES  # one definition of the modes

    parser = argparse.ArgumentParser(prog="recemb", description="Text embeddings from recurrent models (Mamba2, "
                                     "xLSTM, RWKV-7) with constant memory.")
    commands = parser.add_subparsers(dest="command", required=True)

    def model_options(p, vertical=True, default="the bundled recemb-mamba2-mini"):
        p.add_argument("--model", help="model folder, bundled model name or Hugging Face id (default: $RECEMB_MODEL, "
                                       f"else {default})")
        p.add_argument("--device", help="cpu, cuda, ... (default: cuda when available)")
        p.add_argument("--dtype", help="float32, bfloat16 or auto (bf16 where the CPU multiplies it natively; "
                                       "default: fp32 on the CPU, the checkpoint's on a GPU)")
        p.add_argument("--quantize", choices=["int8"], help="int8 in_proj weights on the CPU (opt-in)")
        if vertical:
            p.add_argument("--vertical-chunk-size", type=positive_int, help="tokens per vertical chunk (memory dial)")
            p.add_argument("--context-extension", choices=CONTEXT_EXTENSION_MODES,
                           help="calibrated MambaExtend / LongMamba (default auto: whatever the model folder has)")
        p.add_argument("--json", action="store_true", help="machine-readable output")

    def qdrant_options(p, sync: bool):
        p.add_argument("--collection", default="recemb", help="collection name (default: recemb)")
        p.add_argument("--qdrant-url", help="Qdrant server or cluster URL (default: $QDRANT_URL; the API key is "
                                            "read from $QDRANT_API_KEY)")
        p.add_argument("--qdrant-path", help="embedded Qdrant folder (default: $RECEMB_QDRANT_PATH or the user data "
                                             "folder)")
        p.add_argument("--store", choices=["auto", "edge", "local"], default="auto",
                       help="the embedded engine: edge (Qdrant Edge, for any size; the default for a new folder) or "
                            "local (qdrant-client's local mode, for small collections); auto: whatever the folder "
                            "holds")
        # A search reads passages from the collection; the flags stay accepted there (and ignored) for old scripts.
        hidden = not sync
        p.add_argument("--passage-tokens", type=positive_int, help=argparse.SUPPRESS if hidden else
                       "also index passages of this many tokens (default: the collection's, else none)")
        p.add_argument("--passage-overlap", type=non_negative_int, help=argparse.SUPPRESS if hidden else
                       "tokens shared by consecutive passages (default: the collection's, else 0)")

    p = commands.add_parser("export", help="write a checkpoint as a sentence-transformers folder",
                            description="Turn a Mamba2 (transformers, mamba_ssm or mistral_inference format), xLSTM "
                            "(transformers) or RWKV-7 (.pth or flash-linear-attention) checkpoint, or a recemb "
                            "folder, into a sentence-transformers folder whose backbone also loads with its own "
                            "library (transformers' Mamba2Model / xLSTMModel, flash-linear-attention's RWKV7Model).")
    p.add_argument("source", help="model folder or Hugging Face id")
    p.add_argument("destination", help="output folder")
    p.add_argument("--tokenizer", help="tokenizer folder or id, when SOURCE has none (mamba_ssm checkpoints)")
    p.add_argument("--dtype", help="weight dtype to write, e.g. bfloat16 (default: fp32)")
    p.add_argument("--quantize", choices=["int8"], help="record that the model loads with int8 in_proj weights "
                   "(the weights are written in fp32; model_kwargs={'quantize': None} loads it unquantised)")
    p.add_argument("--max-seq-length", type=int, help="truncate inputs (default: never)")
    p.add_argument("--vertical-chunk-size", type=int, help="default V for the module (default: automatic)")
    p.add_argument("--name", help="model name used in the model card (default: DESTINATION's name)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=cmd_export)

    # The training options are TrainingConfig's fields (a plain dataclass: no training stack is imported).
    from recemb_integrations.training.config import add_cli_options

    p = commands.add_parser("train", help="fine-tune a Mamba2 embedder (InfoNCE or distillation)",
                            description="The E5-mistral recipe through sentence-transformers' trainer: InfoNCE at "
                            "temperature 0.02 with in-batch and hard negatives, instructions on queries only, EOS "
                            "pooling, LoRA for large backbones. DATA is JSON lines with 'anchor', 'positive', "
                            "optional 'negative' (string or list), 'instruction' and 'label' (teacher embeddings, "
                            "for --loss distill).")
    p.add_argument("model", help="model folder or id to start from")
    p.add_argument("data", help="training pairs, JSON lines")
    p.add_argument("--out", required=True, help="output folder (sentence-transformers format, merged weights)")
    add_cli_options(p)  # --loss ... --dtype
    p.add_argument("--tokenizer", help="tokenizer folder or id, when MODEL has none")
    p.add_argument("--name", help="model name for the model card")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=cmd_train)

    p = commands.add_parser("calibrate", help="calibrate MambaExtend / LongMamba context extension for a model",
                            description="Training-free context extension. LongMamba: global heads and Δ thresholds "
                            "per target length from windows of the training length. MambaExtend: per-layer Δ scales "
                            "(SPSA or gradient) so a long text's embedding agrees with the mean of its "
                            "training-length passages. Writes context_extension.json into the model folder (or "
                            "--out), where it loads automatically.")
    p.add_argument("model", help="model folder or bundled name")
    p.add_argument("texts", nargs="+", help="long calibration texts: files, folders or globs")
    p.add_argument("--method", choices=["longmamba", "mambaextend", "both"], default="both")
    p.add_argument("--train-length", type=int, required=True, help="the length the model was trained at (tokens)")
    p.add_argument("--min-length", type=positive_int, help="both methods act on inputs of at least this many tokens "
                                                           "(default: 1.5 × the train length)")
    p.add_argument("--windows", type=int, default=100, help="LongMamba calibration windows")
    p.add_argument("--theta", type=float, default=0.05, help="LongMamba: global heads keep a decay above this")
    p.add_argument("--clamp-top", type=float, default=0.1, help="LongMamba: Δ outlier quantile clipped")
    p.add_argument("--documents", type=int, default=8, help="MambaExtend calibration documents")
    p.add_argument("--document-length", type=int, help="MambaExtend document tokens (default 8 × train length)")
    p.add_argument("--optimizer", choices=["spsa", "gradient"], default="spsa", help="MambaExtend optimiser")
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write a calibrated copy of the model here instead of into MODEL")
    p.add_argument("--device", help="cpu, cuda, ...")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=cmd_calibrate)

    p = commands.add_parser("sync", help="keep a Qdrant collection in step with text files",
                            description="Embed each file whole (its path relative to the folder given is its id) "
                            "and bring the collection to "
                            "exactly these files: new ones added, changed ones re-embedded, unchanged ones skipped, "
                            "missing ones deleted.")
    p.add_argument("paths", nargs="+", help="files, folders (.txt .md .markdown .rst, and .pdf .html .htm .xhtml "
                                             ".docx with the 'formats' extra; recursively) or globs")
    p.add_argument("--id-prefix", help="put PREFIX/ before every document id: the sync is then one root of the "
                                       "collection and deletes or overwrites only the documents it wrote (several "
                                       "folders in one collection)")
    p.add_argument("--keep-missing", action="store_true", help="do not delete documents absent from PATHS")
    p.add_argument("--allow-mass-delete", action="store_true",
                   help="let this sync delete more than half of the collection's documents (refused otherwise)")
    p.add_argument("--skip-empty", action="store_true",
                   help="leave out empty and whitespace-only files, keeping the stored version of one that was "
                        "emptied since, with a warning (default: synced, with a warning)")
    p.add_argument("--max-tokens", type=positive_int,
                   help="truncate each document to this many tokens, with a warning (default: the collection's, "
                        "else never)")
    p.add_argument("--store-text", action="store_true", help="keep the text in the payload")
    p.add_argument("--batch-size", type=positive_int, default=64,
                   help="documents read, embedded and written together (one write request; default 64)")
    p.add_argument("--dense-only", action="store_true",
                   help="build the collection without BM25 vectors (default: hybrid, dense + BM25; an existing "
                        "collection keeps what it was built with)")
    p.add_argument("--rebuild", action="store_true",
                   help="build the collection anew from PATHS with the given settings (e.g. a recemb 0.1 collection "
                        "to hybrid): the new one is built beside it and replaces it only when complete")
    p.add_argument("--ray", action="store_true",
                   help="embed on Ray actors (the 'ray' extra): the plan and every write stay in this process, "
                        "the model runs on the cluster's GPUs (one actor each) or CPUs; files must be readable at "
                        "the same paths on every node")
    p.add_argument("--ray-address", help="the Ray cluster to join (e.g. auto, ray://head:10001; default: "
                                         "RAY_ADDRESS, else a local cluster on this machine)")
    p.add_argument("--ray-actors", type=positive_int, help="model actors (default: one per GPU, or one per CPU "
                                                           "but one)")
    p.add_argument("--ray-gpus-per-actor", type=float, help="GPUs per actor (default: 1 where the cluster has "
                                                             "GPUs, else 0)")
    qdrant_options(p, sync=True)
    model_options(p)
    p.set_defaults(run=cmd_sync)

    p = commands.add_parser("search", help="search a synced collection")
    p.add_argument("query")
    p.add_argument("--limit", type=positive_int, default=10, help="hits to return, at most 10,000 (default 10)")
    p.add_argument("--instruction", help="query instruction or E5 task name (default: web search)")
    p.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                   help="metadata match (repeatable); a JSON list, e.g. tag='[\"a\",\"b\"]', matches any of its values")
    p.add_argument("--granularity", choices=["document", "passage", "any"], default="document")
    p.add_argument("--mode", choices=["hybrid", "dense", "sparse"],
                   help="hybrid: dense + BM25 fused (the default where the collection has BM25 vectors); dense; "
                        "sparse: BM25 alone")
    p.add_argument("--fusion", choices=["dbsf", "rrf"],
                   help="how hybrid search fuses its two lists: distribution-based score fusion (the default) or "
                        "reciprocal rank fusion")
    qdrant_options(p, sync=False)
    model_options(p, default="the model the collection was built with")
    p.set_defaults(run=cmd_search)

    p = commands.add_parser("migrate", help="copy a collection to a Qdrant server (or another store), verified",
                            description="Copy a collection (vectors, payloads and recemb's metadata, which "
                            "qdrant-client's own migrate drops) from the embedded store to a server or cluster, or "
                            "to another embedded store. Resumable: run it again after an interruption. Verified by "
                            "counts and digests at the end. No model is loaded and nothing is embedded again.")
    p.add_argument("--to", metavar="URL", help="the target Qdrant server or cluster (API key from $QDRANT_API_KEY)")
    p.add_argument("--to-path", metavar="FOLDER", help="or: the target embedded store folder")
    p.add_argument("--to-store", choices=["auto", "edge", "local"], default="auto",
                   help="the engine of a --to-path store (default: what the folder holds, Qdrant Edge if new)")
    p.add_argument("--to-collection", help="the target collection's name (default: the same)")
    p.add_argument("--batch-size", type=positive_int, default=256, help="points per request")
    p.add_argument("--no-verify", action="store_true", help="skip the final count and digest comparison")
    p.add_argument("--collection", default="recemb", help="the collection to copy (default: recemb)")
    p.add_argument("--qdrant-path", help="the source embedded store (default: $RECEMB_QDRANT_PATH or the user data "
                                         "folder)")
    p.add_argument("--qdrant-url", help="or: a source server")
    p.add_argument("--store", choices=["auto", "edge", "local"], default="auto",
                   help="the engine of the source store (default: what the folder holds)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=cmd_migrate)

    p = commands.add_parser("embed", help="print embeddings as JSON lines (one text per stdin line, or files)")
    p.add_argument("files", nargs="*", help="files to embed whole (default: stdin lines)")
    p.add_argument("--query", action="store_true", help="embed as queries (adds the instruction)")
    p.add_argument("--instruction", help="query instruction or E5 task name (with --query)")
    model_options(p)
    p.set_defaults(run=cmd_embed)

    p = commands.add_parser("info", help="describe a model")
    p.add_argument("model", help="model folder or Hugging Face id")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=cmd_info)
    return parser


def _refuse_blank_options(args: argparse.Namespace) -> None:
    """A flag given an empty value (an unset shell variable) must not fall back to a default store or model."""
    positional = {"info": {"model"}, "train": {"model"}, "calibrate": {"model"}}.get(args.command, set())
    for name in ("model", "qdrant_url", "qdrant_path", "collection", "tokenizer", "to", "to_path", "to_collection",
                 "id_prefix", "out"):
        value = getattr(args, name, None)
        if isinstance(value, str) and not value.strip():
            label = name.upper() if name in positional else "--" + name.replace("_", "-")
            raise CommandError(f"{label} is empty (an unset shell variable?); nothing was done")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _refuse_blank_options(args)
        return args.run(args)
    except KeyboardInterrupt:
        # Every write waits for acknowledgement and a document's point is written last, so a sync stopped
        # anywhere leaves a collection that the same command completes.
        tail = "; the collection is consistent — run the same command again" if args.command == "sync" else ""
        print(f"\nrecemb {args.command}: interrupted{tail}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except CommandError as e:
        print(f"recemb {args.command}: error: {escape_controls(str(e))}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as e:
        if type(e).__module__.startswith("qdrant_client") or type(e).__name__ in ("RpcError", "_InactiveRpcError"):
            # A server that cannot be reached or refuses: retries are spent. Writes were acknowledged one by one.
            tail = ("; the collection is consistent — run the same command again once the server answers"
                    if args.command == "sync" else "")
            print(f"recemb {args.command}: error: Qdrant: {_one_line(e)}{tail}", file=sys.stderr)
            return EXIT_ERROR
        # File problems the checks did not foresee, bad values, missing extras: their message, not a traceback.
        if isinstance(e, (OSError, ValueError, ImportError, TypeError, RuntimeError)):
            print(f"recemb {args.command}: error: {escape_controls(_os_error(e))}", file=sys.stderr)
            return EXIT_ERROR
        raise


def _os_error(error: BaseException) -> str:
    """An OSError as 'PATH: permission denied' rather than "[Errno 13] Permission denied: 'PATH'"."""
    if isinstance(error, OSError) and error.strerror and error.filename is not None:
        return f"{os.fsdecode(error.filename)}: {error.strerror.lower()}"
    return str(error)


def _one_line(error: BaseException) -> str:
    text = escape_controls(" ".join(str(error).split()))
    return text[:300] + ("..." if len(text) > 300 else "")


if __name__ == "__main__":
    sys.exit(main())
