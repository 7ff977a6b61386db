"""The options several commands share, each declared once: --json, the model options, the Qdrant options, the
argparse types of whole numbers, the checks of flag values that run before anything is opened or loaded, and the
API's errors about an option worded with its flag."""

from __future__ import annotations

import argparse
import sys

from recemb_integrations.cli.output import CommandError

__all__ = ["add_json_option", "add_model_options", "add_qdrant_options", "check_option_values", "flag_error",
           "int_at_least", "memory_size", "non_negative_int", "positive_int", "refuse_blank_options", "thread_count",
           "vertical_chunk_size"]


def int_at_least(minimum: int):
    """argparse type: an integer >= minimum (argparse then names the flag in its one-line error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}" if minimum else
                                             f"must be 0 or more, got {value}")
        return value

    return parse


positive_int, non_negative_int = int_at_least(1), int_at_least(0)


def vertical_chunk_size(text: str) -> int | str:
    """argparse type of --vertical-chunk-size: a whole number >= 1, or "auto" (V from --max-memory)."""
    from recemb.core.options import AUTO

    return AUTO if text.strip().lower() == AUTO else positive_int(text)


def thread_count(text: str) -> int | str:
    """argparse type of --threads: a whole number >= 1, or "auto" (recemb's thread policy)."""
    return "auto" if text.strip().lower() == "auto" else positive_int(text)


def memory_size(text: str) -> int:
    """argparse type of --max-memory: bytes, as recemb.core.memory.parse_bytes reads them ("2GiB", "512MB")."""
    from recemb.core.memory import parse_bytes

    try:
        return parse_bytes(text, name="")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """--json: every command's result as JSON (added last, so it ends each command's help)."""
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def add_model_options(parser: argparse.ArgumentParser, vertical: bool = True,
                      default: str = "the bundled recemb-mamba2-mini") -> None:
    """The model to load and how: --model, --device, --dtype, --quantize, and with ``vertical`` the options of the
    vertical engine. ``default``: what --model's help names as the model without it."""
    from recemb.core.options import CONTEXT_EXTENSION_MODES  # one definition of the modes

    parser.add_argument("--model", help="model folder, bundled model name or Hugging Face id (default: "
                                        f"$RECEMB_MODEL, else {default})")
    parser.add_argument("--device", help="cpu, cuda, ... (default: cuda when available)")
    parser.add_argument("--dtype", help="float32, bfloat16 or auto (measured once per machine: bf16 where its "
                                        "projections ran >= 1.2x faster than fp32; `recemb info` shows it; "
                                        "default: fp32 on the CPU, the checkpoint's on a GPU); int8 weights are "
                                        "--quantize int8")
    parser.add_argument("--quantize", choices=["int8"], help="int8 in_proj on the CPU, per-token scales "
                                                             "(opt-in; independent of the batch)")
    if vertical:
        parser.add_argument("--vertical-chunk-size", type=vertical_chunk_size,
                            help="tokens per vertical chunk (memory dial); auto: from --max-memory")
        parser.add_argument("--max-memory", type=memory_size, metavar="SIZE",
                            help="memory budget for encoding, beyond the loaded weights: the activations and "
                                 "states (e.g. 2GiB, 512MB); V and the rows per forward are picked to fit")
        parser.add_argument("--threads", type=thread_count, metavar="N",
                            help="CPU threads, at most the cores this process may use (more is capped, with a "
                                 "warning; default auto: per chunk, from its size and the cores other processes leave "
                                 "free; OMP_NUM_THREADS or RECEMB_NUM_THREADS are honoured)")
        parser.add_argument("--context-extension", choices=CONTEXT_EXTENSION_MODES,
                            help="calibrated MambaExtend / LongMamba (default auto: whatever the model folder has)")


def add_qdrant_options(parser: argparse.ArgumentParser, sync: bool) -> None:
    """The collection and the store (--collection, --qdrant-url, --qdrant-path, --store), and the passage settings,
    which only a sync sets (``sync``)."""
    parser.add_argument("--collection", default="recemb", help="collection name (default: recemb)")
    parser.add_argument("--qdrant-url", help="Qdrant server or cluster URL (default: $QDRANT_URL; the API key is "
                                             "read from $QDRANT_API_KEY)")
    parser.add_argument("--qdrant-path", help="embedded Qdrant folder (default: $RECEMB_QDRANT_PATH or the user "
                                              "data folder)")
    parser.add_argument("--store", choices=["auto", "edge", "local"], default="auto",
                        help="the embedded engine: edge (Qdrant Edge, for any size; the default for a new folder) or "
                             "local (qdrant-client's local mode, for small collections); auto: whatever the folder "
                             "holds")
    # A search reads passages from the collection; the flags stay accepted there (and ignored) for old scripts.
    hidden = not sync
    from recemb_integrations.qdrant.record import (
        DEFAULT_LONG_DOCUMENTS,
        DEFAULT_PASSAGE_OVERLAP,
        DEFAULT_PASSAGE_TOKENS,
        DEFAULT_PASSAGES_ABOVE,
        LONG_DOCUMENT_MODES,
    )

    # Only a sync shows the passage flags; a search keeps them hidden and outside any group (argparse's usage
    # formatter fails on a mutually exclusive group whose every member is hidden).
    passages = parser.add_mutually_exclusive_group() if sync else parser
    passages.add_argument("--passage-tokens", type=non_negative_int, help=argparse.SUPPRESS if hidden else
                          "also index passages of this many tokens, each searchable and shown as evidence (0: "
                          f"none; default: the collection's, else {DEFAULT_PASSAGE_TOKENS})")
    parser.add_argument("--passage-overlap", type=non_negative_int, help=argparse.SUPPRESS if hidden else
                        "tokens shared by consecutive passages (default: the collection's, else "
                        f"{DEFAULT_PASSAGE_OVERLAP} with the default passages, 0 with --passage-tokens)")
    if sync:
        passages.add_argument("--no-passages", action="store_true",
                              help="index whole documents only (the same as --passage-tokens 0)")
        parser.add_argument("--passages-above", type=non_negative_int, metavar="TOKENS",
                            help="cut only documents longer than this many tokens into passages (default: the "
                                 f"collection's, else {DEFAULT_PASSAGES_ABOVE} with the default passages and the "
                                 "passage length with --passage-tokens)")
        parser.add_argument("--long-documents", choices=LONG_DOCUMENT_MODES,
                            help="how a document with passages is embedded: whole+passages (the document whole "
                                 "and each passage on its own), passages (the passages only; the document's vector "
                                 "is their mean) or one-pass (the passages' vectors read from the document's own "
                                 f"pass). Default: the collection's, else {DEFAULT_LONG_DOCUMENTS}")


def refuse_blank_options(args: argparse.Namespace) -> None:
    """A flag given an empty value (an unset shell variable) must not fall back to a default store or model."""
    positional = {"info": {"model"}, "train": {"model"}, "calibrate": {"model"}}.get(args.command, set())
    for name in ("model", "qdrant_url", "qdrant_path", "collection", "tokenizer", "to", "to_path", "to_collection",
                 "id_prefix", "out"):
        value = getattr(args, name, None)
        if isinstance(value, str) and not value.strip():
            label = name.upper() if name in positional else "--" + name.replace("_", "-")
            raise CommandError(f"{label} is empty (an unset shell variable?); nothing was done")


# The commands whose --dtype is the weights' dtype as the model loads (train's is its own training option).
_DTYPE_COMMANDS = ("sync", "search", "embed", "export")


def check_option_values(args: argparse.Namespace) -> None:
    """Flag values that argparse's types do not check, checked before anything is opened or loaded: --dtype (a
    floating-point dtype for the weights; int8 weights are --quantize int8) and --id-prefix (cleaned as
    ``sources.clean_id_prefix`` cleans it: a '..' segment, or nothing left, is refused in its own words)."""
    dtype = getattr(args, "dtype", None)
    if isinstance(dtype, str) and dtype.strip() and args.command in _DTYPE_COMMANDS:
        import torch

        from recemb.core.loading import DTYPE_NAMES, resolve_dtype

        try:
            resolve_dtype(dtype)
        except ValueError:
            expected = ", ".join(DTYPE_NAMES[:-1]) + " or " + DTYPE_NAMES[-1]
            if not isinstance(getattr(torch, dtype.replace("torch.", ""), None), torch.dtype):
                raise CommandError(f"unknown dtype {dtype!r} for --dtype: expected {expected}") from None
            raise CommandError(f"--dtype {dtype} is not a dtype for the weights: expected {expected}; for int8 "
                               "weights pass --quantize int8 (int8 in_proj on the CPU; --dtype then stays float32 "
                               "or bfloat16)") from None
    prefix = getattr(args, "id_prefix", None)
    if isinstance(prefix, str) and prefix.strip():  # an empty one is refuse_blank_options'
        from recemb_integrations.sources import clean_id_prefix

        try:
            clean_id_prefix(prefix)
        except ValueError as e:
            raise CommandError(str(e).replace("the id prefix", "--id-prefix", 1) + "; nothing was done") from None


def flag_error(error: Exception) -> Exception:
    """An error of the API about an option, worded with the command's flag (a ``CommandError``); any other error
    as it is. The API's modules are looked up only where already imported: this runs on every failure."""
    memory = sys.modules.get("recemb.core.memory")
    if memory is not None and isinstance(error, memory.MemoryBudgetError):
        least = memory.format_bytes(error.needed, round_up=True)  # "1.3 MiB"; the flag takes "1.3MiB"
        V = error.vertical_chunk_size
        chunk = f"{memory.MIN_CHUNK} tokens" if V is None else f"{V} tokens (--vertical-chunk-size {V})"
        ids = f", {memory.format_bytes(error.ids)} of them the input's ids" if error.ids >= 1 << 20 else ""
        advice = "" if V is None else ", or --vertical-chunk-size auto to pick V from the budget"
        return CommandError(f"--max-memory {memory.format_bytes(error.budget)} is below the smallest budget this "
                            f"model runs in: one chunk of {chunk} needs {least} (its layers' states included{ids}); "
                            f"give --max-memory {least.replace(' ', '')} or more{advice}")
    return error
