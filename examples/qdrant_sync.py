"""The main job on the embedded default: sync the sample documents into an embedded Qdrant Edge store, then search.

    python3 examples/qdrant_sync.py [--model PATH_OR_ID]

Runs the real `recemb sync` / `recemb search` commands with the bundled default model, recemb-mamba2-mini
(distilled here from all-MiniLM-L6-v2; no download), hybrid (dense + BM25) with passages as evidence. Run it twice: the second sync embeds nothing, because no
document changed.
"""

import argparse
import sys
from pathlib import Path

from recemb_integrations.cli import main as recemb

HERE = Path(__file__).resolve().parent
WORK = HERE.parent / ".recemb-demo"  # ignored by git
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", help="a recemb / Mamba2 model folder or Hugging Face id (default: recemb-mamba2-mini)")
args = parser.parse_args()

common = ["--qdrant-path", str(WORK / "store"), "--collection", "examples"]
if args.model:
    common += ["--model", args.model]
print("$ recemb sync examples/documents")
# Passages of 64 tokens: a search shows the passage that matched under each document (hybrid: dense + BM25).
code = recemb(["sync", str(HERE / "documents"), "--store-text", "--passage-tokens", "64", "--passage-overlap", "16",
               *common])
for query in ("how does memory stay constant for long inputs?", "when are tides strongest?"):
    print(f"\n$ recemb search {query!r}")
    code = recemb(["search", query, "--limit", "3", *common]) or code
sys.exit(code)
