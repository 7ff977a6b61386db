"""``recemb migrate``: copy a collection to a Qdrant server or another store, verified. No model is loaded."""

from __future__ import annotations

import argparse
import os
import re
from contextlib import closing, nullcontext
from pathlib import Path

from recemb_integrations.cli import resources
from recemb_integrations.cli.options import positive_int
from recemb_integrations.cli.output import EXIT_OK, CommandError, emit
from recemb_integrations.sources import real_path
from recemb_integrations.terminal import escape

__all__ = ["add_migrate_command", "cmd_migrate"]


def add_migrate_command(commands) -> None:
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
    p.set_defaults(run=cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    from recemb_integrations.migrate import MigrationError, migrate_collection
    from recemb_integrations.qdrant.record import check_collection_name
    from recemb_integrations.stores import StoreDamagedError, StoreError, StoreFullError, open_store

    check_collection_name(args.collection)
    if (args.to is None) == (args.to_path is None):
        raise CommandError("give the target: --to URL (a Qdrant server or cluster) or --to-path FOLDER (an embedded "
                           "store)")
    if args.to is not None and not re.match(r"^https?://", args.to.strip()):
        raise CommandError(f"--to {args.to!r} is not a URL (http://... or https://...); for a folder use --to-path")
    if args.to_path is not None and not args.to_path.strip():
        raise CommandError("--to-path is empty (an unset shell variable?); nothing was done")
    # The source is the embedded store unless --qdrant-url names a server: $QDRANT_URL is usually the target.
    source, where = resources.open_qdrant(args, create=False, environment_url=False)
    with closing(source):
        if not source.collection_exists(args.collection):  # before the target store is opened (or created)
            raise CommandError(f"collection {args.collection!r} does not exist in {where}; nothing was done")
        # The source store itself as the target (an embedded store is open in one process at a time): a copy
        # under another name, or the same collection, which migrate_collection refuses.
        same = args.to_path is not None and source.kind != "server" and \
            real_path(Path(args.to_path).expanduser()) == real_path(where)
        try:
            target = source if same else (
                open_store(url=args.to.strip(), api_key=os.environ.get("QDRANT_API_KEY")) if args.to
                else open_store(path=Path(args.to_path).expanduser(), kind=args.to_store))
        except (StoreDamagedError, StoreFullError):
            raise  # the store is there but cannot be used: one line and exit code 1 (cli.output)
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
