"""``recemb embed`` (vectors as JSON lines) and ``recemb info`` (what a model is)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from recemb_integrations.cli import resources
from recemb_integrations.cli.options import add_model_options, add_qdrant_options
from recemb_integrations.cli.output import EXIT_OK, EXIT_PARTIAL, CommandError, emit
from recemb_integrations.sources import file_metadata, read_text
from recemb_integrations.terminal import escape, escape_controls

__all__ = ["add_embed_command", "add_info_command", "cmd_embed", "cmd_info"]


def add_embed_command(commands) -> None:
    p = commands.add_parser("embed", help="print embeddings as JSON lines (one text per stdin line, or files)")
    p.add_argument("files", nargs="*", help="files to embed whole (default: stdin lines)")
    p.add_argument("--query", action="store_true", help="embed as queries (adds the instruction)")
    p.add_argument("--instruction", help="query instruction or E5 task name (with --query)")
    add_model_options(p)
    p.set_defaults(run=cmd_embed)


def add_info_command(commands) -> None:
    p = commands.add_parser("info", help="describe a model, or what a synced collection takes (--collection)")
    p.add_argument("model", nargs="?", help="model folder or Hugging Face id")
    add_qdrant_options(p, sync=False)
    p.add_argument("--stats", action="store_true",
                   help="with --collection: also its points by kind, documents by owner, every part on disk and "
                        "resident, and the settings it recorded")
    # a collection is described only when named: `recemb info MODEL` opens no store
    p.set_defaults(run=cmd_info, collection=None)


def cmd_embed(args: argparse.Namespace) -> int:
    if args.files:
        sources = resources.collect_files(args.files)
        if sources.missing:
            raise CommandError(f"{sources.missing[0][0]}: {sources.missing[0][1]}")
        docs, failed = _read_documents(sources.files, sources.ids)
        failed += sources.skipped
        ids, texts = [d.id for d in docs], [d.text for d in docs]
        embedder = resources.load_embedder(args)
    else:
        embedder = resources.load_embedder(args)
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


def _read_documents(files: tuple[Path, ...], ids: tuple[str, ...]):
    """(documents, (id, why) of each file that could not be read): the texts in memory, as embed needs them."""
    from recemb_integrations.qdrant import Document

    docs, failed = [], []
    for f, doc_id in zip(files, ids):
        try:
            text = read_text(f)
        except OSError as e:
            failed.append((doc_id, f"cannot read: {e.strerror or e}"))
            continue
        except ValueError as e:
            failed.append((doc_id, str(e)))
            continue
        docs.append(Document(doc_id, text, file_metadata(f, f.stat().st_size)))
    return docs, failed


def cmd_info(args: argparse.Namespace) -> int:
    if args.collection is not None:
        if args.model is not None:
            raise CommandError("give a model or --collection, not both")
        from recemb_integrations.cli.footprint import cmd_collection_info

        return cmd_collection_info(args)
    if args.model is None:
        raise CommandError("name a model to describe, or a collection with --collection")
    if args.stats:
        raise CommandError("--stats describes a collection: give --collection NAME")
    from recemb.core import Embedder, architecture
    from recemb.core.autodtype import auto_choice
    from recemb.core.loading import detect_architecture, resolve_model_path
    from recemb.core.precision import projection_shapes

    folder = resolve_model_path(args.model)
    name, fmt = detect_architecture(folder)
    emb = Embedder.from_pretrained(folder, device="cpu")
    c = emb.config
    shape = architecture(name).describe(c)  # what the architecture has of heads, head_dim, state_size, n_groups
    data = {
        "model": args.model, "folder": str(folder), "architecture": name, "format": fmt, "dim": emb.dim,
        "layers": c.num_hidden_layers, **shape, "vocab_size": c.vocab_size, "chunk_size": c.chunk_size,
        "parameters": sum(p.numel() for p in emb.model.parameters()),
        "tokenizer": emb.tokenizer is not None,
        "eos_token_id": emb.tokenizer.eos_token_id if emb.tokenizer else None,
        "sentence_transformers": (folder / "modules.json").exists(),
    }
    # What --dtype auto loads on this CPU: measured once per machine on this model's projection shapes.
    auto = auto_choice(projection_shapes(emb.model), supports_mixed=architecture(name).cpu_mixed_precision)
    text = "\n".join([*(f"{k:>22}: {v}" for k, v in data.items()), f"{'dtype auto':>22}: {auto.describe()}"])
    emit(args, {**data, "dtype_auto": auto.to_dict()}, text)
    return EXIT_OK
