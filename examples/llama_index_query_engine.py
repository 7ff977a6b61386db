"""LlamaIndex RAG over a folder of files kept in a recemb collection by an ingestion pipeline, asked through a query
engine with the defaults: the engine answers from each document's best passage (a node whose start_char_idx /
end_char_idx slice its file and whose ref_doc_id names it), each document once, never whole files. Offline: a mock
LLM answers.

    python3 examples/llama_index_query_engine.py [--model PATH_OR_ID] [--folder FOLDER] [--store PATH] [--k K]

For each question it prints the context the LLM is given: each node's file, line and characters, and the context's
size against the whole files'. No splitter: each file is one document, and recemb adds passages (with their
character offsets) to the long ones. ``EmbedInStore()`` leaves the embedding to the store, which embeds each new or
changed file once (a long one as its passages): with --store, a second run embeds and writes nothing.
"""

import argparse
import tempfile
from pathlib import Path

from llama_index.core import SimpleDirectoryReader, VectorStoreIndex
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
from llama_index.core.llms import MockLLM
from llama_index.core.schema import MetadataMode
from llama_index.core.storage.docstore import SimpleDocumentStore

from recemb.core import DEFAULT_MODEL
from recemb_integrations.llama_index import EmbedInStore, RecembEmbedding, RecembVectorStore

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default=DEFAULT_MODEL)
parser.add_argument("--folder", type=Path, default=Path(__file__).resolve().parent / "documents")
parser.add_argument("--store", type=Path, default=None, help="the store's folder (default: a temporary one)")
parser.add_argument("--k", type=int, default=3, help="passages the query engine answers from")
parser.add_argument("--question", action="append", help="a question to ask (repeatable; default: two about the "
                                                           "sample documents)")
args = parser.parse_args()
QUESTIONS = args.question or ["How does a lighthouse lens make its light carry far?", "Why are spring tides strong?"]

embed_model = RecembEmbedding(model_name=args.model, model_kwargs={"device": "cpu"})
with tempfile.TemporaryDirectory() as tmp, RecembVectorStore(
        collection_name="docs", path=args.store or Path(tmp) / "store", embed_model=embed_model) as store:
    documents = SimpleDirectoryReader(str(args.folder), filename_as_id=True, required_exts=[".md", ".txt"],
                                      recursive=True).load_data()
    # EmbedInStore, not embed_model: LlamaIndex would embed every file whole first, on every run
    IngestionPipeline(transformations=[EmbedInStore()], vector_store=store, docstore=SimpleDocumentStore(),
                      docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE).run(documents=documents)
    engine = VectorStoreIndex.from_vector_store(store, embed_model=embed_model).as_query_engine(
        llm=MockLLM(), similarity_top_k=args.k)  # the defaults: passages, each document once
    whole = sum(len(d.text) for d in documents)
    for question in QUESTIONS:
        answer = engine.query(question)
        nodes = [hit.node for hit in answer.source_nodes]
        context = sum(len(n.get_content(metadata_mode=MetadataMode.LLM)) for n in nodes)  # what the LLM reads
        print(f"Q: {question}\nA: (a mock LLM's answer from {len(nodes)} passages)")
        print(f"   context: {context:,} characters from {len(nodes)} passages "
              f"(the whole files: {whole:,} characters in {len(documents)} files)")
        for node in nodes:  # a passage knows its document and where it is in it
            print(f"   [{node.ref_doc_id}, line {node.metadata.get('line', 1)}, characters "
                  f"{node.start_char_idx:,}-{node.end_char_idx:,}] {' '.join(node.text.split())[:60]}")
