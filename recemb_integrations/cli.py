"""The ``recemb`` command: export models, sync documents into Qdrant, search, embed, inspect.

Exit codes: 0 success; 1 the command ran but some documents failed (listed); 2 nothing was done (bad arguments,
missing model, collection mismatch, storage locked by another process, ...).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from contextlib import closing
from pathlib import Path

TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".rst")
EXIT_OK, EXIT_PARTIAL, EXIT_ERROR = 0, 1, 2


class CommandError(Exception):
    """An error that ends the command with a message and exit code 2."""


# ---------------------------------------------------------------------- shared helpers
def default_qdrant_path() -> Path:
    from platformdirs import user_data_dir

    return Path(os.environ.get("RECEMB_QDRANT_PATH") or Path(user_data_dir("recemb")) / "qdrant")


def load_embedder(args: argparse.Namespace):
    from recemb.core import Embedder

    model = args.model or os.environ.get("RECEMB_MODEL")
    if not model:
        raise CommandError("no model given: pass --model PATH_OR_ID (or set RECEMB_MODEL)")
    return Embedder.from_pretrained(model, device=args.device, vertical_chunk_size=args.vertical_chunk_size)


def open_qdrant(args: argparse.Namespace):
    """A server client for --qdrant-url / QDRANT_URL, else the embedded local store at --qdrant-path."""
    from qdrant_client import QdrantClient

    url = args.qdrant_url or os.environ.get("QDRANT_URL")
    if url:
        return QdrantClient(url=url, api_key=os.environ.get("QDRANT_API_KEY"), timeout=60), url
    path = Path(args.qdrant_path or default_qdrant_path())
    path.mkdir(parents=True, exist_ok=True)
    try:
        return QdrantClient(path=str(path)), str(path)
    except RuntimeError as e:
        if "already accessed" in str(e):
            raise CommandError(
                f"the embedded Qdrant store {path} is in use by another process (local mode allows one at a "
                "time); wait for it to finish, or run a Qdrant server and pass --qdrant-url"
            ) from e
        raise


def collect_files(paths: list[str]) -> tuple[list[Path], list[tuple[str, str]]]:
    """Files from paths, folders (recursively, text suffixes only) and globs; missing paths are failures."""
    files: dict[Path, None] = {}
    missing = []
    for spec in paths:
        matches = [Path(m) for m in sorted(glob.glob(spec, recursive=True))] if glob.has_magic(spec) else [Path(spec)]
        if not matches or not matches[0].exists():
            missing.append((spec, "no such file or folder"))
            continue
        for m in matches:
            if m.is_dir():
                for f in sorted(m.rglob("*")):
                    if f.is_file() and f.suffix.lower() in TEXT_SUFFIXES and not any(
                        part.startswith(".") for part in f.relative_to(m).parts
                    ):
                        files[f.resolve()] = None
            elif m.is_file():
                files[m.resolve()] = None
    return list(files), missing


def read_documents(files: list[Path]):
    """(documents, failures, ids of files that exist but could not be read)."""
    from recemb_integrations.qdrant import Document

    docs, failed, unreadable = [], [], []
    for f in files:
        doc_id = f.as_posix()
        try:
            text = f.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            failed.append((doc_id, f"not valid UTF-8 (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
                                   "convert it to UTF-8 to sync it"))
            unreadable.append(doc_id)
            continue
        except OSError as e:
            failed.append((doc_id, f"cannot read: {e.strerror or e}"))
            unreadable.append(doc_id)
            continue
        docs.append(Document(doc_id, text, {"file_name": f.name, "suffix": f.suffix.lower(), "bytes": f.stat().st_size}))
    return docs, failed, unreadable


def emit(args: argparse.Namespace, data, text: str) -> None:
    print(json.dumps(data, ensure_ascii=False) if args.json else text)


# ---------------------------------------------------------------------- commands
def cmd_export(args: argparse.Namespace) -> int:
    from recemb_integrations.sentence_transformers import export_sentence_transformers

    out = export_sentence_transformers(
        args.source, args.destination, tokenizer=args.tokenizer, dtype=args.dtype,
        max_seq_length=args.max_seq_length, vertical_chunk_size=args.vertical_chunk_size, model_name=args.name,
    )
    emit(args, {"destination": str(out)}, f"wrote a sentence-transformers model to {out}")
    return EXIT_OK


def cmd_sync(args: argparse.Namespace) -> int:
    from recemb_integrations.qdrant import QdrantSync

    files, missing = collect_files(args.paths)
    if not files and not missing:
        raise CommandError(f"no {'/'.join(TEXT_SUFFIXES)} files under {' '.join(args.paths)}")
    if missing and not args.keep_missing:
        # A mistyped path must not wipe the collection through delete_missing.
        raise CommandError(f"{missing[0][0]}: {missing[0][1]} (nothing synced; pass --keep-missing to sync the rest "
                           "without deleting anything)")
    docs, failed, unreadable = read_documents(files)
    embedder = load_embedder(args)
    client, where = open_qdrant(args)
    with closing(client):
        sync = QdrantSync(client, args.collection, embedder, store_text=args.store_text,
                          passage_tokens=args.passage_tokens, passage_overlap=args.passage_overlap,
                          batch_size=args.batch_size)
        report = sync.sync(docs, delete_missing=not args.keep_missing, keep_ids=unreadable,
                           show_progress_bar=None if not args.json else False)
    report.failed = failed + [(p, e) for p, e in missing] + report.failed
    data = {"collection": args.collection, "qdrant": where, **report.as_dict()}
    lines = [f"{args.collection} @ {where}: {report.added} added, {report.updated} updated, "
             f"{report.metadata_updated} metadata updated, {report.unchanged} unchanged, {report.deleted} deleted, "
             f"{len(report.failed)} failed ({report.embedded_tokens:,} tokens embedded in {report.seconds:.1f} s)"]
    lines += [f"  failed: {doc_id}: {err}" for doc_id, err in report.failed]
    emit(args, data, "\n".join(lines))
    return EXIT_PARTIAL if report.failed else EXIT_OK


def cmd_search(args: argparse.Namespace) -> int:
    from recemb_integrations.qdrant import QdrantSync

    embedder = load_embedder(args)
    client, _ = open_qdrant(args)
    with closing(client):
        if not client.collection_exists(args.collection):
            raise CommandError(f"collection {args.collection!r} does not exist; run `recemb sync` first")
        filters = dict(_parse_filter(f) for f in args.filter)
        hits = QdrantSync(client, args.collection, embedder, passage_tokens=args.passage_tokens,
                          passage_overlap=args.passage_overlap).search(
            args.query, limit=args.limit, instruction=args.instruction, filter=filters or None,
            granularity=args.granularity)
    rows = [{"document_id": h.document_id, "score": h.score, "metadata": h.metadata, "passage": h.passage,
             **({"text": h.text} if h.text is not None else {})} for h in hits]
    text = "\n".join(f"{h.score:.4f}  {h.document_id}" + (f"  (passage {h.passage})" if h.passage is not None else "")
                     for h in hits) or "no hits"
    emit(args, rows, text)
    return EXIT_OK


def _parse_filter(spec: str) -> tuple[str, object]:
    if "=" not in spec:
        raise CommandError(f"--filter {spec!r}: expected KEY=VALUE")
    key, value = spec.split("=", 1)
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def cmd_embed(args: argparse.Namespace) -> int:
    embedder = load_embedder(args)
    if args.files:
        files, missing = collect_files(args.files)
        if missing:
            raise CommandError(f"{missing[0][0]}: {missing[0][1]}")
        docs, failed, _ = read_documents(files)
        ids, texts = [d.id for d in docs], [d.text for d in docs]
    else:
        failed = []
        lines = [line.rstrip("\n") for line in sys.stdin]
        ids, texts = [str(i) for i in range(len(lines))], lines
    vectors = (embedder.encode_queries(texts, instruction=args.instruction) if args.query
               else embedder.encode_documents(texts))
    for doc_id, v in zip(ids, vectors):
        print(json.dumps({"id": doc_id, "vector": [round(float(x), 7) for x in v]}))
    for doc_id, err in failed:
        print(f"recemb embed: {doc_id}: {err}", file=sys.stderr)
    return EXIT_PARTIAL if failed else EXIT_OK


def cmd_info(args: argparse.Namespace) -> int:
    from recemb.core import Embedder
    from recemb.core.loading import detect_format, resolve_model_path

    folder = resolve_model_path(args.model)
    fmt = detect_format(folder)
    emb = Embedder.from_pretrained(folder, device="cpu")
    c = emb.config
    data = {
        "model": args.model, "folder": str(folder), "format": fmt, "dim": emb.dim,
        "layers": c.num_hidden_layers, "heads": c.num_heads, "head_dim": c.head_dim, "state_size": c.state_size,
        "n_groups": c.n_groups, "vocab_size": c.vocab_size, "chunk_size": c.chunk_size,
        "parameters": sum(p.numel() for p in emb.model.parameters()),
        "tokenizer": emb.tokenizer is not None,
        "eos_token_id": emb.tokenizer.eos_token_id if emb.tokenizer else None,
        "sentence_transformers": (folder / "modules.json").exists(),
    }
    emit(args, data, "\n".join(f"{k:>22}: {v}" for k, v in data.items()))
    return EXIT_OK


# ---------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="recemb", description="Mamba2 text embeddings with constant memory.")
    commands = parser.add_subparsers(dest="command", required=True)

    def model_options(p, vertical=True):
        p.add_argument("--model", help="model folder or Hugging Face id (default: $RECEMB_MODEL)")
        p.add_argument("--device", help="cpu, cuda, ... (default: cuda when available)")
        if vertical:
            p.add_argument("--vertical-chunk-size", type=int, help="tokens per vertical chunk (memory dial)")
        p.add_argument("--json", action="store_true", help="machine-readable output")

    def qdrant_options(p):
        p.add_argument("--collection", default="recemb", help="collection name (default: recemb)")
        p.add_argument("--qdrant-url", help="Qdrant server or cluster URL (default: $QDRANT_URL; the API key is "
                                            "read from $QDRANT_API_KEY)")
        p.add_argument("--qdrant-path", help="embedded Qdrant folder (default: $RECEMB_QDRANT_PATH or the user data "
                                             "folder)")
        p.add_argument("--passage-tokens", type=int, help="also index passages of this many tokens")
        p.add_argument("--passage-overlap", type=int, default=0, help="tokens shared by consecutive passages")

    p = commands.add_parser("export", help="write a Mamba2 checkpoint as a sentence-transformers folder",
                            description="Turn a Mamba2 checkpoint (transformers, mamba_ssm or mistral_inference "
                            "format) or a recemb folder into a sentence-transformers folder that also loads with "
                            "transformers' Mamba2Model.")
    p.add_argument("source", help="model folder or Hugging Face id")
    p.add_argument("destination", help="output folder")
    p.add_argument("--tokenizer", help="tokenizer folder or id, when SOURCE has none (mamba_ssm checkpoints)")
    p.add_argument("--dtype", help="weight dtype to write, e.g. bfloat16 (default: fp32)")
    p.add_argument("--max-seq-length", type=int, help="truncate inputs (default: never)")
    p.add_argument("--vertical-chunk-size", type=int, help="default V for the module (default: automatic)")
    p.add_argument("--name", help="model name used in the model card (default: DESTINATION's name)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=cmd_export)

    p = commands.add_parser("sync", help="keep a Qdrant collection in step with text files",
                            description="Embed each file whole (its path is its id) and bring the collection to "
                            "exactly these files: new ones added, changed ones re-embedded, unchanged ones skipped, "
                            "missing ones deleted.")
    p.add_argument("paths", nargs="+", help="files, folders (.txt .md .markdown .rst, recursively) or globs")
    p.add_argument("--keep-missing", action="store_true", help="do not delete documents absent from PATHS")
    p.add_argument("--store-text", action="store_true", help="keep the text in the payload")
    p.add_argument("--batch-size", type=int, default=8, help="documents embedded together")
    qdrant_options(p)
    model_options(p)
    p.set_defaults(run=cmd_sync)

    p = commands.add_parser("search", help="search a synced collection")
    p.add_argument("query")
    p.add_argument("--limit", type=int, default=10)
    p.add_argument("--instruction", help="query instruction or E5 task name (default: web search)")
    p.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE", help="metadata match (repeatable)")
    p.add_argument("--granularity", choices=["document", "passage", "any"], default="document")
    qdrant_options(p)
    model_options(p)
    p.set_defaults(run=cmd_search)

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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except CommandError as e:
        print(f"recemb {args.command}: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except (FileNotFoundError, NotADirectoryError, ValueError, ImportError, TypeError, RuntimeError) as e:
        print(f"recemb {args.command}: error: {e}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
