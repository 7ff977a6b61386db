"""The ``recemb`` command: export models, sync documents into Qdrant, search, embed, inspect.

One module per command or group (``sync``, ``search``, ``migrate``, ``embed`` with ``info``, ``model`` for export,
train and calibrate); the options they share (``options``), what they open (``resources``: the store, the model,
the files of their paths, through ``recemb_integrations.sources``), and what they print and exit with (``output``,
which lists the exit codes). Each command imports what it needs when it runs.

Checks that need no model (paths, flag values, collection name, the store and its lock, the collection's recorded
settings) run before the model loads, so a slip of the keyboard costs no waiting.

A reader that closes the pipe early (``recemb search --json | head``) ends the command quietly, as it ends ``ls``:
no message, exit code 141 (128 + SIGPIPE, what a shell reports for a command killed by it).
"""

from __future__ import annotations

import os
import sys

from recemb_integrations.cli.options import check_option_values, flag_error, refuse_blank_options
from recemb_integrations.cli.output import EXIT_BROKEN_PIPE, error_exit, interrupted_exit
from recemb_integrations.cli.parser import build_parser

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    """Run ``recemb ARGV`` (default: the process's arguments) and return its exit code (see ``cli.output``)."""
    args = build_parser().parse_args(argv)
    try:
        refuse_blank_options(args)
        check_option_values(args)
        code = args.run(args)
        sys.stdout.flush()  # here, not at exit: a closed pipe is then seen below
        return code
    except KeyboardInterrupt:
        return interrupted_exit(args.command)
    except Exception as e:
        if isinstance(e, BrokenPipeError) and _stdout_closed():
            _silence_stdout()
            return EXIT_BROKEN_PIPE
        code = error_exit(args.command, flag_error(e))
        if code is None:
            raise
        return code


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (a BrokenPipeError from elsewhere, a socket, is an error)."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # POLLERR is reported whatever is asked for
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or stdout is not a file
        return True


def _silence_stdout() -> None:
    """Point stdout at os.devnull, so the interpreter's last flush of what is still buffered does not fail again
    ("Exception ignored ... BrokenPipeError")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # stdout replaced by an object without a file (tests)
        pass
