"""The main job on the embedded default: sync the sample documents into an embedded Qdrant Edge store, then search.

    python3 examples/qdrant_sync.py [--model PATH_OR_ID]

Runs the real `recemb sync` / `recemb search` commands with the bundled default model, recemb-mamba2-mini
(distilled here from all-MiniLM-L6-v2; no download), hybrid (dense + BM25), with passages of the longer documents
(the default): under each hit the search prints the original text that matched and its line. Then the same
folder sync in Python (`folder_sources` + `QdrantSync`) into a second collection, which holds the same documents.
Run it twice: the second run embeds nothing, because no document changed. The store is `.recemb-demo/store` in the
repository (ignored by git; the last lines print the commands that look into it).
"""

import argparse
import os
import sys
from pathlib import Path

from recemb.core import DEFAULT_MODEL, Embedder
from recemb_integrations.cli import main as recemb
from recemb_integrations.qdrant import QdrantSync
from recemb_integrations.sources import FILE_METADATA_INDEXES, folder_sources
from recemb_integrations.stores import open_store

HERE = Path(__file__).resolve().parent
WORK = Path(os.environ.get("RECEMB_DEMO_DIR") or HERE.parent / ".recemb-demo")  # ignored by git
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", help="a recemb / Mamba2 model folder or Hugging Face id (default: recemb-mamba2-mini)")
args = parser.parse_args()


def stored_documents(store, collection: str) -> dict[str, str]:
    """Document id -> content hash, from the documents' own points (passages have points of their own)."""
    points, _ = store.scroll(collection, limit=10_000, with_payload=["document_id", "kind", "content_hash"])
    return {p.payload["document_id"]: p.payload["content_hash"] for p in points if p.payload["kind"] == "document"}


# ---------------------------------------------------------------------- through the command
common = ["--qdrant-path", str(WORK / "store"), "--collection", "examples"]
if args.model:
    common += ["--model", args.model]
print("$ recemb sync examples/documents")
# The default settings: hybrid (dense + BM25), and passages of 128 tokens for documents longer than 512 (here
# lighthouses.md), each recording where it is in its file; the texts stay in the files (no --store-text).
code = recemb(["sync", str(HERE / "documents"), *common])
for query in ("how does memory stay constant for long inputs?", "when are tides strongest?",
              "how can a sailor tell one lighthouse from another?"):
    print(f"\n$ recemb search {query!r}")
    code = recemb(["search", query, "--limit", "3", *common]) or code

# ---------------------------------------------------------------------- the same folder sync in Python
print("\n$ python: folder_sources(['examples/documents']) + QdrantSync(...).sync(found.sources, scope=found.scope)")
found = folder_sources([HERE / "documents"])  # ids relative to the folder, as the command gives them
print(f"found {len(found.files)} files: {', '.join(found.ids)}; missing {len(found.missing)}, skipped "
      f"{len(found.skipped)}")
embedder = Embedder.from_pretrained(args.model or os.environ.get("RECEMB_MODEL") or DEFAULT_MODEL)
with open_store(path=WORK / "store") as store:
    sync = QdrantSync(store, "examples-python", embedder,
                      index_metadata=FILE_METADATA_INDEXES)  # the defaults, as the command above
    report = sync.sync(found.sources, scope=found.scope)
    print(f"examples-python: {report.added} added, {report.updated} updated, {report.unchanged} unchanged, "
          f"{report.deleted} deleted, {len(report.failed)} failed ({report.embedded_tokens:,} tokens embedded)")
    same = stored_documents(store, "examples") == stored_documents(store, "examples-python")
    hits = sync.search("when are tides strongest?", limit=3)
print("the same documents (ids and content hashes) as the command's collection:", same)
print("search 'when are tides strongest?':", ", ".join(f"{h.document_id} {h.score:.4f}" for h in hits))
# The store is a folder of the repository (ignored by git): name it to look at the collections yourself.
where = os.path.relpath(WORK / "store")
print(f"\nthe store: {where} (collections 'examples' and 'examples-python'); look at them with\n"
      f"  recemb info --collection examples --qdrant-path {where}\n"
      f"  recemb search \"how do lighthouses differ?\" --collection examples --qdrant-path {where}")
sys.exit(code or (0 if same and not report.failed else 1))
