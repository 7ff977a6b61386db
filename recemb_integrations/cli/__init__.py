"""The ``recemb`` command: export models, sync documents into Qdrant, search, embed, inspect.

One module per command or group (``sync``, ``search``, ``migrate``, ``embed`` with ``info``, ``model`` for export,
train and calibrate); the options they share (``options``), what they open (``resources``: the store, the model,
the files of their paths, through ``recemb_integrations.sources``), and what they print and exit with (``output``,
which lists the exit codes). Each command imports what it needs when it runs.

Checks that need no model (paths, flag values, collection name, the store and its lock, the collection's recorded
settings) run before the model loads, so a slip of the keyboard costs no waiting.
"""

from __future__ import annotations

from recemb_integrations.cli.options import refuse_blank_options
from recemb_integrations.cli.output import error_exit, interrupted_exit
from recemb_integrations.cli.parser import build_parser

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    """Run ``recemb ARGV`` (default: the process's arguments) and return its exit code (see ``cli.output``)."""
    args = build_parser().parse_args(argv)
    try:
        refuse_blank_options(args)
        return args.run(args)
    except KeyboardInterrupt:
        return interrupted_exit(args.command)
    except Exception as e:
        code = error_exit(args.command, e)
        if code is None:
            raise
        return code
