"""``recemb search``: search a synced collection with the model and settings it was built with."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from contextlib import closing

from recemb_integrations.cli import resources
from recemb_integrations.cli.options import add_model_options, add_qdrant_options, positive_int
from recemb_integrations.cli.output import EXIT_OK, CommandError, emit
from recemb_integrations.evidence import EvidenceReader
from recemb_integrations.terminal import escape, escape_controls

__all__ = ["add_search_command", "cmd_search"]


def add_search_command(commands) -> None:
    p = commands.add_parser("search", help="search a synced collection")
    p.add_argument("query")
    p.add_argument("--limit", type=positive_int, default=10, help="hits to return, at most 10,000 (default 10)")
    p.add_argument("--instruction", help="query instruction or E5 task name (default: web search)")
    p.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                   help="metadata match (repeatable); a JSON list, e.g. tag='[\"a\",\"b\"]', matches any of its values")
    p.add_argument("--granularity", choices=["document", "passage", "any"], default="document")
    p.add_argument("--per-document", type=positive_int, metavar="N",
                   help="with --granularity passage or any: at most N hits of one document (1: each document's "
                        "best passage, each document once)")
    p.add_argument("--mode", choices=["hybrid", "dense", "sparse"],
                   help="hybrid: dense + BM25 fused (the default where the collection has BM25 vectors); dense; "
                        "sparse: BM25 alone")
    p.add_argument("--fusion", choices=["dbsf", "rrf"],
                   help="how hybrid search fuses its two lists: distribution-based score fusion (the default) or "
                        "reciprocal rank fusion")
    add_qdrant_options(p, sync=False)
    add_model_options(p, default="the model the collection was built with")
    p.set_defaults(run=cmd_search)


def cmd_search(args: argparse.Namespace) -> int:
    from recemb_integrations.qdrant import MAX_SEARCH_LIMIT, QdrantSync, SearchNotice, read_record
    from recemb_integrations.qdrant.rebuild import interrupted_rebuild_hint
    from recemb_integrations.qdrant.record import check_collection_name

    check_collection_name(args.collection)
    if not args.query.strip():
        raise CommandError("the query is empty (an unset shell variable?)")
    if args.limit > MAX_SEARCH_LIMIT:
        raise CommandError(f"--limit {args.limit} is more than one search returns (at most {MAX_SEARCH_LIMIT:,}); "
                           "nothing was searched")
    if args.per_document is not None and args.granularity == "document":
        raise CommandError("--per-document caps the passages of one document: give --granularity passage or any "
                           "(a document search returns each document once already)")
    filters = dict(_parse_filter(f) for f in args.filter)
    store, where = resources.open_qdrant(args, create=False, read_only="copy")
    with closing(store):
        record = read_record(store, args.collection)  # read once: the search below is given it
        if record is None:
            hint = interrupted_rebuild_hint(store, args.collection)
            raise CommandError(f"collection {args.collection!r} does not exist in {where}; "
                               + (hint or "run `recemb sync` first"))
        if (refusal := record.search_refusal(args.mode, args.granularity)) is not None:
            raise CommandError(refusal)  # before the model loads
        # The collection's own model unless one is named: search needs no flag the sync had.
        embedder = resources.load_embedder(args, model=record.model, cut=record.data.get("passages_cut"))
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always", SearchNotice)
            hits = QdrantSync.open(store, args.collection, embedder, record=record).search(
                args.query, limit=args.limit, instruction=args.instruction, filter=filters or None,
                granularity=args.granularity, mode=args.mode, per_document=args.per_document,
                **({"fusion": args.fusion} if args.fusion else {}))
    for note in notes:
        if issubclass(note.category, SearchNotice):
            print(f"recemb search: note: {escape_controls(str(note.message))}", file=sys.stderr)
        else:
            warnings.warn_explicit(note.message, note.category, note.filename, note.lineno)
    reader = EvidenceReader()
    evidence = [reader.of(h) for h in hits]
    rows = [{"document_id": h.document_id, "score": h.score, "metadata": h.metadata, "passage": h.passage,
             **{k: v for k, v in (("start", h.start), ("end", h.end), ("best_passage", h.best_passage),
                                  ("best_passage_start", h.best_passage_start),
                                  ("best_passage_end", h.best_passage_end),
                                  ("best_passage_text", h.best_passage_text), ("text", h.text),
                                  ("content_hash", h.content_hash)) if v is not None},
             **e.as_dict()} for h, e in zip(hits, evidence)]
    emit(args, rows, "\n".join(_hit_lines(h, e) for h, e in zip(hits, evidence)) or "no hits")
    return EXIT_OK


def _hit_lines(hit, evidence) -> str:
    """A hit's score, its document and where the match is, and under it the original text there (or why it
    cannot be shown)."""
    where = ", ".join(w for w in (f"passage {hit.passage}" if hit.passage is not None else None, evidence.position)
                      if w)
    lines = [f"{hit.score:.4f}  {escape(hit.document_id)}" + (f"  ({escape_controls(where)})" if where else "")]
    if evidence.excerpt:
        lines.append("        " + escape_controls(evidence.excerpt))
    if evidence.note:
        lines.append("        (" + escape_controls(evidence.note) + ")")
    return "\n".join(lines)


def _parse_filter(spec: str) -> tuple[str, object]:
    """KEY=VALUE: VALUE is read as JSON where it parses (numbers, true/false, lists), as a string otherwise."""
    from recemb_integrations.qdrant.search import metadata_condition

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
