"""The main job on the embedded default: sync the sample documents into a local Qdrant store, then search.

    python3 examples/qdrant_sync.py [--model PATH_OR_ID]

Runs the real `recemb sync` / `recemb search` commands. Without --model it builds a demo model (random weights:
the ranking shows the plumbing, not retrieval quality) until recemb ships its own trained default model.
Run it twice: the second sync embeds nothing, because no document changed.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from demo_model import build_demo_model  # noqa: E402

from recemb_integrations.cli import main as recemb  # noqa: E402

HERE = Path(__file__).resolve().parent
WORK = HERE.parent / ".recemb-demo"  # ignored by git
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", help="a recemb / Mamba2 model folder or Hugging Face id")
args = parser.parse_args()

model = args.model
if model is None:
    model = WORK / "demo-model"
    if not (model / "config.json").exists():
        corpus = " ".join(p.read_text() for p in sorted((HERE / "documents").glob("*.md")))
        build_demo_model(model, corpus * 20, hidden_size=256, layers=4, vocab_size=2000)
common = ["--model", str(model), "--qdrant-path", str(WORK / "qdrant"), "--collection", "examples"]
print("$ recemb sync examples/documents")
code = recemb(["sync", str(HERE / "documents"), "--store-text", *common])
for query in ("how does memory stay constant for long inputs?", "when are tides strongest?"):
    print(f"\n$ recemb search {query!r}")
    code = recemb(["search", query, "--limit", "3", *common]) or code
sys.exit(code)
