"""sentence-transformers quickstart, offline: load the bundled recemb-mamba2-mini by folder, embed and score.

    python3 examples/sentence_transformers_quickstart.py
"""

from sentence_transformers import SentenceTransformer

from recemb.core.loading import DEFAULT_MODEL, bundled_model_path

corpus = [
    "Mamba2 is a state space model whose recurrent state has a fixed size.",
    "Vertical chunking runs each chunk through all layers before the next one.",
    "The whale surfaced near the ship at dawn.",
]
# The bundled model folder is a sentence-transformers folder. The flag is required by sentence-transformers 6 for
# any module class outside its package; the class ships in recemb, nothing is downloaded.
model = SentenceTransformer(str(bundled_model_path(DEFAULT_MODEL)), trust_remote_code=True, device="cpu")
queries = model.encode_query(["how does the model keep memory constant?"])  # instruction added
documents = model.encode_document(corpus, vertical_chunk_size=8)  # no instruction; V only changes memory
print(model)
print("scores:", model.similarity(queries, documents).numpy().round(3))
