"""``recemb sync``: keep a Qdrant collection in step with text files (on Ray actors with --ray).

Checks that need no model (paths, flag values, collection name, the store and its lock, the collection's recorded
settings) run before the model loads, so a slip of the keyboard costs no waiting.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from contextlib import closing
from pathlib import Path

from recemb_integrations.cli import resources
from recemb_integrations.cli.options import add_model_options, add_qdrant_options, positive_int
from recemb_integrations.cli.output import EXIT_OK, EXIT_PARTIAL, CommandError, emit
from recemb_integrations.formats import DOCUMENT_SUFFIXES
from recemb_integrations.sources import FILE_METADATA_INDEXES, FolderSources, clean_id_prefix, real_path
from recemb_integrations.terminal import escape, escape_controls

__all__ = ["add_sync_command", "cmd_sync"]


def add_sync_command(commands) -> None:
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
    p.add_argument("--keep-missing", action="store_true",
                   help="do not delete documents absent from PATHS (always so when PATHS name only files: naming "
                        "a file syncs that file; name the folder, or a glob, to delete what is gone)")
    p.add_argument("--allow-mass-delete", action="store_true",
                   help="let this sync delete half or more of the documents it manages (refused otherwise, at any "
                        "size: 1 of 2, 4 of 5)")
    p.add_argument("--skip-empty", action="store_true",
                   help="leave out empty and whitespace-only files, keeping the stored version of one that was "
                        "emptied since, with a warning (default: synced, with a warning)")
    p.add_argument("--max-tokens", type=positive_int,
                   help="truncate each document to this many tokens, with a warning (default: the collection's, "
                        "else never)")
    text = p.add_mutually_exclusive_group()
    text.add_argument("--store-text", dest="store_text", action="store_const", const=True,
                      help="keep each text in the collection (search shows it without the files); recorded: later "
                           "syncs keep it (default: the collection's, else off)")
    text.add_argument("--no-store-text", dest="store_text", action="store_const", const=False,
                      help="do not keep the texts (search re-reads unchanged files)")
    p.add_argument("--batch-size", type=positive_int, default=64,
                   help="documents read, embedded and written together (one write request; default 64)")
    p.add_argument("--dense-only", action="store_true",
                   help="build the collection without BM25 vectors (default: hybrid, dense + BM25; an existing "
                        "collection keeps what it was built with)")
    p.add_argument("--rebuild", action="store_true",
                   help="build the collection anew from PATHS with the given settings (e.g. a recemb 0.1 collection "
                        "to hybrid): the new one is built beside it and replaces it only when complete")
    p.add_argument("--passage-characters", type=positive_int, metavar="N",
                   help="with a sentence-transformers --model: passages of at most N characters instead of its "
                        "tokenizer's window (recorded)")
    p.add_argument("--query-prefix", metavar="TEXT",
                   help="with a sentence-transformers --model: what its queries begin with (an E5 model's "
                        "'query: '), recorded for searches")
    p.add_argument("--document-prefix", metavar="TEXT",
                   help="with a sentence-transformers --model: what every text embedded for the collection begins "
                        "with (an E5 model's 'passage: '), recorded")
    p.add_argument("--drop-other-writers", action="store_true",
                   help="with --rebuild of a damaged collection: drop, unread, the documents that a framework's "
                        "store, the Python API or a folder with another --id-prefix wrote into it (refused "
                        "otherwise: no path of the rebuild holds them)")
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
    add_qdrant_options(p, sync=True)
    add_model_options(p)
    p.set_defaults(run=cmd_sync)


def cmd_sync(args: argparse.Namespace) -> int:
    """parse -> sources -> store -> the record, read once -> settings, reconciled once (no model yet) -> one scan
    -> the model -> the sync, given the record and the scan."""
    from recemb_integrations.qdrant import (
        NO_PASSAGES,
        CollectionMismatchError,
        InvalidSetting,
        MassDeletionError,
        NothingReadableError,
        QdrantSync,
        RebuildError,
        RequestedSettings,
        SettingsConflict,
        read_record,
    )
    from recemb_integrations.qdrant.calls import StoreCalls
    from recemb_integrations.qdrant.collection import scan_documents
    from recemb_integrations.qdrant.rebuild import damaged_rebuild_refusal, damaged_roots_refusal
    from recemb_integrations.qdrant.record import check_collection_name, decide_settings
    from recemb_integrations.stores import StoreDamagedError

    check_collection_name(args.collection)
    if args.drop_other_writers and not args.rebuild:  # it drops documents: never a flag that silently does nothing
        raise CommandError("--drop-other-writers applies to a --rebuild of a damaged collection only; nothing was "
                           "synced")
    if args.rebuild and args.keep_missing:
        raise CommandError("--rebuild builds the collection from PATHS alone; --keep-missing cannot keep documents "
                           "that are not among them")
    prefix = _id_prefix(args)
    if args.rebuild and prefix:
        raise CommandError("--rebuild replaces the whole collection, so it cannot be limited to --id-prefix; rebuild "
                           "it without the prefix, or sync each root into a new collection")
    sources = resources.collect_files(args.paths, prefix)
    if not sources.files and not sources.missing:
        skipped = f" ({len(sources.skipped)} skipped, e.g. {': '.join(sources.skipped[0])})" if sources.skipped else ""
        raise CommandError(f"no {'/'.join(DOCUMENT_SUFFIXES)} files under {' '.join(args.paths)}{skipped}")
    if sources.missing and not args.keep_missing:
        # A mistyped path must not wipe the collection through delete_missing.
        raise CommandError(f"{sources.missing[0][0]}: {sources.missing[0][1]} (nothing synced; pass --keep-missing "
                           "to sync the rest without deleting anything)")
    # Naming files syncs those files; only a folder or a glob says "exactly these", so only they delete what is gone.
    files_only = not args.rebuild and all(os.path.isfile(path) for path in args.paths)
    executor = _ray_executor(args)  # before the store opens: a missing extra or a bad option costs nothing
    store, where = resources.open_qdrant(args)
    with closing(store):
        damaged = None  # a rebuild recovers a damaged collection: from PATHS alone, the rest dropped
        try:
            record = read_record(store, args.collection)
        except StoreDamagedError as e:
            if not args.rebuild:
                raise
            record, damaged = None, e
        requested = RequestedSettings(passage_tokens=NO_PASSAGES if args.no_passages else args.passage_tokens,
                                      passage_overlap=args.passage_overlap, passages_above=args.passages_above,
                                      max_tokens=args.max_tokens, sparse=False if args.dense_only else None,
                                      store_text=args.store_text, long_documents=args.long_documents)
        try:  # the one decision, worded here in the command's flags
            settings = decide_settings(record, requested, rebuild=args.rebuild)
        except SettingsConflict as e:
            raise CommandError(_conflict_message(args.collection, e, args)) from None
        except InvalidSetting as e:
            raise CommandError(_invalid_message(e)) from None
        except CollectionMismatchError as e:
            raise CommandError(str(e)) from None
        try:
            stored = scan_documents(StoreCalls(store), args.collection) if record is not None else None
        except StoreDamagedError as e:
            if not args.rebuild:
                raise
            stored, damaged = None, e
        if damaged is not None and not args.allow_mass_delete:  # before the model loads
            raise CommandError(damaged_rebuild_refusal(args.collection, allow="--allow-mass-delete"))
        if damaged is not None and not args.drop_other_writers and (refusal := damaged_roots_refusal(
                args.collection, record, "", drop="--drop-other-writers")) is not None:
            raise CommandError(refusal)
        if damaged is not None:  # said before anything is written
            print(f"recemb sync: note: {escape_controls(damaged.damage)}; --rebuild builds it again from "
                  f"{' '.join(map(escape, args.paths))} and drops what it cannot read", file=sys.stderr)
        allow_mass_delete = args.allow_mass_delete
        if stored is not None:
            allow_mass_delete = _check_id_scheme(args, earlier_absolute_ids(stored), sources) or allow_mass_delete
        # An existing collection's own model unless one is named, as for search.
        embedder = resources.load_embedder(args, model=record.model if record else None,
                                           cut=record.data.get("passages_cut") if record else None)
        if getattr(embedder, "external", False):  # another library's model: passages cut to its window
            embedder, settings = _external_settings(args, record, requested, embedder)
        sync = QdrantSync(store, args.collection, embedder, settings, batch_size=args.batch_size,
                          index_metadata=FILE_METADATA_INDEXES, record=record)
        try:
            report = sync.sync(sources.sources, delete_missing=not (args.keep_missing or files_only),
                               allow_mass_delete=allow_mass_delete, skip_empty=args.skip_empty,
                               show_progress_bar=None if not args.json else False, rebuild=args.rebuild,
                               scope=sources.scope, executor=executor, stored=stored,
                               drop_other_writers=args.drop_other_writers)
        except NothingReadableError as e:
            raise CommandError(str(e).replace(" documents could be read", " files could be read")) from None
        except MassDeletionError as e:
            raise CommandError(_mass_deletion_message(e)) from None
        except RebuildError as e:
            raise CommandError(str(e)) from None
    report.failed = list(sources.missing) + report.failed
    report.skipped = list(sources.skipped) + report.skipped
    # What a folder sync would have deleted, kept because only files were named: said, so it is not a surprise.
    not_named = len(stored.owned(sources.scope or "") - set(sources.ids)) if files_only and stored else 0
    data = {"collection": args.collection, "qdrant": where, "store": store.kind, **report.as_dict(),
            "kept_not_named": not_named}
    lines = [f"{escape(args.collection)} @ {escape(where)} ({store.kind}): {report.added} added, "
             f"{report.updated} updated, {report.metadata_updated} metadata updated, {report.unchanged} unchanged, "
             f"{report.deleted} deleted, {len(report.failed)} failed ({report.embedded_tokens:,} tokens embedded in "
             f"{report.seconds:.1f} s)"]
    # Names escaped (a file name can hold a newline or an escape sequence); --json carries them exactly.
    lines += [f"  failed: {escape(doc_id)}: {escape_controls(err)}" for doc_id, err in report.failed]
    lines += [f"  warning: {escape(doc_id)}: {escape_controls(what)}" for doc_id, what in report.warnings]
    lines += [f"  skipped: {escape(path)}: {escape_controls(why)}" for path, why in report.skipped]
    if not_named:
        lines.append(f"  note: {not_named} stored documents not named here are kept (only files were named; sync "
                     "their folder, or a glob, to delete what is gone)")
    emit(args, data, "\n".join(lines))
    return EXIT_PARTIAL if report.failed else EXIT_OK


def _external_settings(args, record, requested, embedder):
    """(embedder, settings) of a sync with a sentence-transformers model: its passages cut to its window (or to
    --passage-characters; the loader cut them so), a collection it embedded whole before passages kept so
    (``external.external_request``, the one rule); recemb's passage flags refused."""
    from dataclasses import replace

    from recemb_integrations.qdrant import SettingsConflict
    from recemb_integrations.qdrant.external import external_request
    from recemb_integrations.qdrant.record import decide_settings

    given = [FLAGS[k] for k in ("passage_overlap", "passages_above", "long_documents")
             if getattr(args, k, None) is not None]
    if given or args.no_passages:
        raise CommandError(f"{given[0] if given else '--no-passages'} is for recemb's own models; the passages of "
                           f"{embedder.name} are cut to its window (--passage-tokens N for fewer tokens, "
                           "--passage-characters N for a budget of characters instead)")
    embedder, requested = external_request(embedder, replace(requested, passage_tokens=None), record)
    try:
        settings = decide_settings(record, requested, rebuild=args.rebuild)
    except SettingsConflict as e:
        raise CommandError(f"collection {args.collection!r} was built with passages cut otherwise ({e}); sync it "
                           f"with the model and --passage-characters it was built with, or --rebuild it") from None
    return embedder, settings


def _mass_deletion_message(error) -> str:
    """A refused mass deletion in the command's flags (the API's message names its arguments)."""
    from recemb_integrations.qdrant.plan import mass_deletion_summary
    from recemb_integrations.qdrant.rebuild import damaged_rebuild_refusal

    if error.damaged:
        return damaged_rebuild_refusal(error.collection, allow="--allow-mass-delete")
    return (f"{mass_deletion_summary(error.collection, list(error.deleting), error.managed, error.given)}; nothing "
            "was written. Check the paths; if the deletion is intended, pass --allow-mass-delete, or keep them with "
            "--keep-missing; to keep several folders in one collection, sync each with its own --id-prefix.")


def _id_prefix(args: argparse.Namespace) -> str | None:
    prefix = getattr(args, "id_prefix", None)
    if prefix is None:
        return None
    try:
        return clean_id_prefix(prefix)
    except ValueError as e:
        raise CommandError(f"--id-prefix: {e}; nothing was done") from None


def _looks_absolute(doc_id: str) -> bool:
    return doc_id.startswith("/") or bool(re.match(r"^[A-Za-z]:[\\/]", doc_id))


def earlier_absolute_ids(stored) -> list[str]:
    """The documents an earlier recemb synced from files under absolute ids (before ids were relative, and before
    points recorded who wrote them): unstamped, the id an absolute path, the metadata the file's (its name the id's
    last part). A document of the Python API or a framework whose id merely looks like a path is none of them."""
    found = []
    for doc_id, (_, metadata) in stored.documents.items():
        if stored.seen.get(doc_id) is None and _looks_absolute(doc_id or "") and isinstance(metadata, dict) \
                and metadata.get("file_name") == re.split(r"[\\/]", doc_id)[-1]:
            found.append(doc_id)
    return sorted(found)


def _check_id_scheme(args: argparse.Namespace, absolute: list[str], sources: FolderSources) -> bool:
    """Collections synced before ids became relative hold absolute paths: a plain sync would delete and re-add
    everything, so it is refused with the way on. A --rebuild is the way on; it may then replace every id (True:
    the deletions are the old ids of the same files, when most of them match). ``absolute``: the collection's
    documents that an earlier recemb stored under absolute paths (``earlier_absolute_ids``)."""
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
    old_ids = {Path(real_path(f)).as_posix() for f in sources.files}  # an earlier recemb's ids: resolved paths
    return len(set(absolute) & old_ids) >= len(absolute) / 2


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


FLAGS = {"passage_tokens": "--passage-tokens", "passage_overlap": "--passage-overlap",
         "passages_above": "--passages-above", "max_tokens": "--max-tokens", "long_documents": "--long-documents"}


def _invalid_message(invalid) -> str:
    """An impossible setting in the command's words."""
    flag = FLAGS.get(invalid.key, invalid.key)
    if invalid.key in ("passage_overlap", "passages_above") and invalid.passage_tokens is None:
        return f"{flag} needs passages, which are off for this collection"
    if invalid.key == "passage_overlap":
        return f"--passage-overlap {invalid.value} must be smaller than --passage-tokens {invalid.passage_tokens}"
    return f"{flag} {invalid.value}: {invalid}"


def _conflict_message(collection: str, conflict, args: argparse.Namespace) -> str:
    """A settings conflict in the command's words (the flags given)."""
    way_on = "to use the collection's setting, sync into a new --collection, or --rebuild it"
    if conflict.key == "sparse":
        return (f"collection {collection!r} was built with BM25 vectors (hybrid); drop --dense-only, or --rebuild it "
                "dense-only")
    if conflict.key == "store_text":
        built, flag = ("with --store-text", "--no-store-text") if conflict.recorded else ("without --store-text",
                                                                                        "--store-text")
        return f"collection {collection!r} was built {built}; drop {flag} {way_on}"
    if conflict.key == "passage_tokens" and args.no_passages:
        return (f"collection {collection!r} was built with passages (--passage-tokens {conflict.recorded}); drop "
                f"--no-passages {way_on}")
    recorded = conflict.recorded if conflict.recorded is not None else "(none)"
    return (f"collection {collection!r} was built with {FLAGS[conflict.key]} {recorded}, not {conflict.requested}; "
            f"drop the flag {way_on}")
