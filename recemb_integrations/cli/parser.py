"""The ``recemb`` argument parser: the commands in the order ``recemb --help`` lists them, each declared by its
own module, and --json added to every one."""

from __future__ import annotations

import argparse

from recemb_integrations.cli.embed import add_embed_command, add_info_command
from recemb_integrations.cli.migrate import add_migrate_command
from recemb_integrations.cli.model import add_calibrate_command, add_export_command, add_train_command
from recemb_integrations.cli.options import add_json_option
from recemb_integrations.cli.search import add_search_command
from recemb_integrations.cli.sync import add_sync_command

__all__ = ["build_parser"]

COMMANDS = (add_export_command, add_train_command, add_calibrate_command, add_sync_command, add_search_command,
            add_migrate_command, add_embed_command, add_info_command)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="recemb", description="Text embeddings from recurrent models (Mamba2, "
                                     "xLSTM, RWKV-7) with constant memory.")
    commands = parser.add_subparsers(dest="command", required=True)
    for add_command in COMMANDS:
        add_command(commands)
    for command in commands.choices.values():
        add_json_option(command)
    return parser
