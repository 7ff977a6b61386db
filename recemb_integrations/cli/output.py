"""What a command prints and the code it exits with: one place for both.

Exit codes: 0 success; 1 the command ran but could not complete: some documents failed (listed), or the store
cannot be written or read (its disk is full, its files are damaged; one line names the store and the way on); 2
nothing was done (bad arguments, missing model, collection mismatch, storage locked by another process, ...); 130
interrupted (Ctrl-C); 141 the reader of the output closed the pipe (``recemb search --json | head``: ended quietly,
as a command killed by SIGPIPE).

Human-readable output escapes names and ids (``recemb_integrations.terminal``); ``--json`` prints them exactly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from recemb_integrations.terminal import escape_controls

__all__ = ["EXIT_BROKEN_PIPE", "EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_PARTIAL", "CommandError", "emit",
           "error_exit", "interrupted_exit"]

EXIT_OK, EXIT_PARTIAL, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 0, 1, 2, 130, 141


class CommandError(Exception):
    """An error that ends the command with a message and exit code 2."""


def emit(args: argparse.Namespace, data, text: str) -> None:
    """A command's result: ``data`` as one JSON line with --json, else ``text``."""
    print(json.dumps(data, ensure_ascii=False) if args.json else text)


def interrupted_exit(command: str) -> int:
    """Ctrl-C: one line, and the way on for a sync."""
    # Every write waits for acknowledgement and a document's point is written last, so a sync stopped
    # anywhere leaves a collection that the same command completes.
    tail = "; the collection is consistent — run the same command again" if command == "sync" else ""
    print(f"\nrecemb {command}: interrupted{tail}", file=sys.stderr)
    return EXIT_INTERRUPTED


def error_exit(command: str, error: Exception) -> int | None:
    """A failure as one line on stderr and exit code 2; None for an error that is a bug (its traceback is wanted)."""
    if isinstance(error, CommandError):
        print(f"recemb {command}: error: {escape_controls(_os_error(error))}", file=sys.stderr)
        return EXIT_ERROR
    from recemb_integrations.stores import StoreDamagedError, StoreFullError

    if isinstance(error, (StoreFullError, StoreDamagedError)):
        print(f"recemb {command}: error: {escape_controls(str(error))}", file=sys.stderr)
        return EXIT_PARTIAL
    if type(error).__module__.startswith("qdrant_client") or type(error).__name__ in ("RpcError",
                                                                                      "_InactiveRpcError"):
        # A server that cannot be reached or refuses: retries are spent. Writes were acknowledged one by one.
        tail = ("; the collection is consistent — run the same command again once the server answers"
                if command == "sync" else "")
        print(f"recemb {command}: error: Qdrant: {_one_line(error)}{tail}", file=sys.stderr)
        return EXIT_ERROR
    # File problems the checks did not foresee, bad values, missing extras: their message, not a traceback.
    if isinstance(error, (OSError, ValueError, ImportError, TypeError, RuntimeError)):
        print(f"recemb {command}: error: {escape_controls(_os_error(error))}", file=sys.stderr)
        return EXIT_ERROR
    return None


def _os_error(error: BaseException) -> str:
    """An OSError as 'PATH: permission denied' rather than "[Errno 13] Permission denied: 'PATH'"; any other error
    by its message (an error raised with more than its message, such as a report, prints as a tuple: its message
    alone)."""
    if isinstance(error, OSError) and error.strerror and error.filename is not None:
        return f"{os.fsdecode(error.filename)}: {error.strerror.lower()}"
    if not isinstance(error, OSError) and len(error.args) > 1 and isinstance(error.args[0], str):
        return error.args[0]
    return str(error)


def _one_line(error: BaseException) -> str:
    text = escape_controls(" ".join(str(error).split()))
    return text[:300] + ("..." if len(text) > 300 else "")
