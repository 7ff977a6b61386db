"""What the commands open from their arguments: the Qdrant store, the model, and the files their paths name.

Commands call these through the module (``resources.open_qdrant(args)``), so a test replaces each in one place
(e.g. a ``load_embedder`` that fails the test: the check under test must come before the model loads).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

from recemb_integrations.cli.output import CommandError
from recemb_integrations.sources import FolderSources, folder_sources
from recemb_integrations.terminal import escape_controls

__all__ = ["chosen_model", "collect_files", "default_qdrant_path", "load_embedder", "open_qdrant"]


def default_qdrant_path() -> Path:
    from platformdirs import user_data_dir

    return Path(os.environ.get("RECEMB_QDRANT_PATH") or Path(user_data_dir("recemb")) / "qdrant")


def chosen_model(args: argparse.Namespace) -> str | None:
    """The model the user named (--model, else $RECEMB_MODEL), or None."""
    return args.model or os.environ.get("RECEMB_MODEL") or None


def load_embedder(args: argparse.Namespace, model: str | None = None, cut: dict | None = None):
    """The named model, else ``model`` (a collection's recorded one), else the bundled default. Its ``name`` is
    what a collection records: an absolute path for a local folder, so a search from another folder finds it. A
    sentence-transformers model recemb does not run (a folder with ``modules.json`` whose architecture is not
    recemb's, or a hub id) is loaded by sentence-transformers, its passages cut to its window (``cut``: what the
    collection recorded of them, its prefixes and character budget, where no flag says otherwise)."""
    from recemb.core import DEFAULT_MODEL, DamagedCheckpointError, Embedder
    from recemb.core.errors import ConfigError
    from recemb.core.memory import MemoryBudgetError
    from recemb.core.threads import ThreadsCappedWarning

    recorded = model is not None and not chosen_model(args)
    model = chosen_model(args) or model or DEFAULT_MODEL
    local = Path(model).expanduser()
    name = str(local.resolve()) if local.is_dir() else model
    if local.is_dir() and (local / "modules.json").is_file() and not runs_in_recemb(local):
        return load_other_model(args, name, cut)
    try:
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always", ThreadsCappedWarning)
            embedder = Embedder.from_pretrained(name, device=args.device, dtype=getattr(args, "dtype", None),
                                                quantize=getattr(args, "quantize", None),
                                                vertical_chunk_size=args.vertical_chunk_size,
                                                max_memory=getattr(args, "max_memory", None),
                                                threads=getattr(args, "threads", None),
                                                context_extension=getattr(args, "context_extension", None) or "auto")
    except (MemoryBudgetError, DamagedCheckpointError):
        raise  # the budget, or the file, is what to fix: their own message, not "pass --model"
    except ConfigError as e:  # a hub id of an architecture recemb does not run: sentence-transformers may
        if not local.is_dir() and (cut is not None or "is not an architecture recemb runs" in str(e)):
            return load_other_model(args, name, cut)
        raise
    except (OSError, ValueError) as e:
        if recorded:
            raise CommandError(f"the collection was built with model {model!r}, which cannot be loaded here ({e}); "
                               "pass --model") from e
        raise
    for note in notes:
        if isinstance(note.message, ThreadsCappedWarning):
            capped = note.message
            print(f"recemb {args.command}: warning: --threads {capped.asked} is more than the {capped.cores} cores "
                  f"this process may use; using {capped.cores} threads", file=sys.stderr)
        else:
            warnings.warn_explicit(note.message, note.category, note.filename, note.lineno)
    return embedder


def runs_in_recemb(folder: Path) -> bool:
    """Whether a model folder is of an architecture recemb runs (its ``config.json``'s ``model_type``)."""
    from recemb.core.architectures.registry import detect

    try:
        detect(folder)
    except (OSError, ValueError):  # (a ConfigError is a ValueError)
        return False
    return True


def load_other_model(args: argparse.Namespace, name: str, cut: dict | None):
    """A sentence-transformers model as the main job's embedder (``qdrant.external.external_embedder``)."""
    from recemb_integrations._imports import extra_hint
    from recemb_integrations.qdrant.external import external_embedder

    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        raise CommandError(f"{name} is a sentence-transformers model, which needs the sentence-transformers "
                           f"package ({extra_hint('sentence-transformers')})") from e
    cut = cut or {}
    characters = getattr(args, "passage_characters", None)
    if characters is None and cut.get("by") == "characters":
        characters = cut.get("characters")
    tokens = getattr(args, "passage_tokens", None) or (cut.get("tokens") if cut.get("by") == "tokenizer" else None)
    query_prefix = getattr(args, "query_prefix", None)
    document_prefix = getattr(args, "document_prefix", None)
    try:
        model = SentenceTransformer(name, device=args.device or None)
    except (OSError, ValueError) as e:
        raise CommandError(f"cannot load the sentence-transformers model {name}: {e}") from e
    try:
        return external_embedder(model, name=name, passage_characters=characters, passage_tokens=tokens,
                                 query_prefix=cut.get("query_prefix", "") if query_prefix is None else query_prefix,
                                 document_prefix=cut.get("document_prefix", "") if document_prefix is None
                                 else document_prefix)
    except ValueError as e:  # a passage size the model cannot take
        raise CommandError(f"--passage-tokens / --passage-characters: {e}") from e


def open_qdrant(args: argparse.Namespace, create: bool = True, environment_url: bool = True,
                before_open: Callable[[str], None] | None = None, read_only: str = "refuse"):
    """(store, where): a server for --qdrant-url / QDRANT_URL, else the embedded store at --qdrant-path (Qdrant Edge
    for a new folder; a folder that holds a qdrant-client local-mode store stays one; --store chooses).

    ``create=False`` (reads) never makes a folder or a store: a path that holds none is an error. ``before_open`` is
    called with the store's kind ("server", "local" or "edge") just before it is opened. ``read_only="copy"`` (a
    search): a Qdrant Edge store on a read-only mount is searched in a temporary copy, with a note on stderr."""
    from recemb_integrations.stores import StoreDamagedError, StoreError, StoreFullError, detect_store_kind, open_store
    from recemb_integrations.stores.edge_files import holds_other_files

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
        if before_open:
            before_open("server")
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
    if create and found is None and path.is_dir() and holds_other_files(path):
        raise CommandError(f"{path} holds other files but no Qdrant store; give --qdrant-path a new or empty "
                           "folder (a store writes its own files there)")
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CommandError(f"cannot create the store folder {path}: {e.strerror or e}") from e
    if before_open:
        before_open(kind if kind != "auto" else found or "edge")
    try:
        store = open_store(path=path, kind=kind, read_only=read_only)
    except (StoreDamagedError, StoreFullError):
        raise  # the store is there but cannot be used: one line and exit code 1 (cli.output)
    except StoreError as e:
        raise CommandError(str(e)) from e
    if getattr(store, "note", None):
        print(f"recemb {args.command}: note: {escape_controls(store.note)}", file=sys.stderr)
    return store, str(path)


def collect_files(paths: list[str], id_prefix: str | None = None) -> FolderSources:
    """The files the path arguments name (``folder_sources``); a refused argument ends the command."""
    try:
        return folder_sources(paths, id_prefix)
    except ValueError as e:
        raise CommandError(str(e)) from None
