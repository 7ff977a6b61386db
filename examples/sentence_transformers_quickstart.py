"""sentence-transformers quickstart, offline: export a tiny demo model, load it by folder, embed and score.

    python3 examples/sentence_transformers_quickstart.py
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from demo_model import build_demo_model  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

from recemb_integrations.sentence_transformers import export_sentence_transformers  # noqa: E402

corpus = [
    "Mamba2 is a state space model whose recurrent state has a fixed size.",
    "Vertical chunking runs each chunk through all layers before the next one.",
    "The whale surfaced near the ship at dawn.",
]
with tempfile.TemporaryDirectory() as tmp:
    demo = build_demo_model(Path(tmp) / "demo", " ".join(corpus) * 50, hidden_size=64, layers=2, vocab_size=400)
    folder = export_sentence_transformers(demo, Path(tmp) / "demo-st")
    # The flag is required by sentence-transformers 6 for any module class outside its package; the class
    # ships in recemb, nothing is downloaded.
    model = SentenceTransformer(str(folder), trust_remote_code=True, device="cpu")
    queries = model.encode_query(["how does the model keep memory constant?"])  # instruction added
    documents = model.encode_document(corpus, vertical_chunk_size=8)  # no instruction; V only changes memory
    print(model)
    print("scores:", model.similarity(queries, documents).numpy().round(3))
    print("(a random demo model: the scores show the plumbing, not retrieval quality)")
