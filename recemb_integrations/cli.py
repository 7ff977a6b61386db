"""The ``recemb`` command."""

from __future__ import annotations

import argparse
import sys


def _export(args: argparse.Namespace) -> int:
    from recemb_integrations.sentence_transformers import export_sentence_transformers

    out = export_sentence_transformers(
        args.source, args.destination, tokenizer=args.tokenizer, dtype=args.dtype,
        max_seq_length=args.max_seq_length, vertical_chunk_size=args.vertical_chunk_size, model_name=args.name,
    )
    print(f"wrote a sentence-transformers model to {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="recemb", description="Mamba2 text embeddings with constant memory.")
    commands = parser.add_subparsers(dest="command", required=True)

    export = commands.add_parser(
        "export", help="write a Mamba2 checkpoint as a sentence-transformers folder",
        description="Turn a Mamba2 checkpoint (transformers, mamba_ssm or mistral_inference format) or a recemb "
        "folder into a sentence-transformers folder that also loads with transformers' Mamba2Model.",
    )
    export.add_argument("source", help="model folder or Hugging Face id")
    export.add_argument("destination", help="output folder")
    export.add_argument("--tokenizer", help="tokenizer folder or id, when SOURCE has none (mamba_ssm checkpoints)")
    export.add_argument("--dtype", help="weight dtype to write, e.g. bfloat16 (default: fp32)")
    export.add_argument("--max-seq-length", type=int, help="truncate inputs (default: never)")
    export.add_argument("--vertical-chunk-size", type=int, help="default V for the module (default: automatic)")
    export.add_argument("--name", help="model name used in the model card (default: DESTINATION's name)")
    export.set_defaults(run=_export)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (FileNotFoundError, ValueError, ImportError, TypeError) as e:
        print(f"recemb {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
