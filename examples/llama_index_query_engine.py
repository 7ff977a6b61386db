"""LlamaIndex: a folder of files kept in a recemb collection by an ingestion pipeline, asked through a query engine;
each answer cites the document, line and characters of the passages it was given. Offline: a mock LLM answers.

    python3 examples/llama_index_query_engine.py [--model PATH_OR_ID] [--folder FOLDER] [--store PATH]

No splitter: each file is one document, and recemb adds passages (with their character offsets) to the long ones.
With --store, a second run writes nothing (unchanged documents are skipped).
"""

import argparse
import tempfile
from pathlib import Path

from llama_index.core import SimpleDirectoryReader, VectorStoreIndex
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.llms import MockLLM

from recemb.core import DEFAULT_MODEL
from recemb_integrations.llama_index import RecEmbEmbedding, RecembVectorStore

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=DEFAULT_MODEL)
parser.add_argument("--folder", type=Path, default=Path(__file__).resolve().parent / "documents")
parser.add_argument("--store", type=Path, default=None, help="the store's folder (default: a temporary one)")
args = parser.parse_args()
QUESTIONS = ["How does a lighthouse lens make its light carry far?", "Why are spring tides strong?"]

embed_model = RecEmbEmbedding(model_name=args.model, model_kwargs={"device": "cpu"})
with tempfile.TemporaryDirectory() as tmp, RecembVectorStore(
        collection_name="docs", path=args.store or Path(tmp) / "store", embed_model=embed_model) as store:
    documents = SimpleDirectoryReader(str(args.folder), filename_as_id=True, required_exts=[".md", ".txt"],
                                      recursive=True).load_data()
    IngestionPipeline(transformations=[embed_model], vector_store=store).run(documents=documents)
    index = VectorStoreIndex.from_vector_store(store, embed_model=embed_model)
    engine = index.as_query_engine(llm=MockLLM(), similarity_top_k=3, vector_store_kwargs={"granularity": "passage"})
    for question in QUESTIONS:
        answer = engine.query(question)
        print(f"Q: {question}\nA: (a mock LLM's answer from {len(answer.source_nodes)} passages)")
        for hit in answer.source_nodes:  # a passage knows where it is; a short document is its own passage
            node, m = hit.node, hit.node.metadata
            start = node.start_char_idx if node.start_char_idx is not None else 0
            end = node.end_char_idx if node.end_char_idx is not None else len(node.text)
            print(f"   [{m.get('document_id', node.node_id)}, line {m.get('line', 1)}, characters {start:,}-{end:,}] "
                  f"{' '.join(node.text.split())[:60]}...")
