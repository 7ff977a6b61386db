"""Scale-out on Ray Data: embed a dataset on a pool of model actors, and run a sync's embedding on them.

    import ray
    from recemb_integrations.ray import RayExecutor, embed_dataset

    ds = ray.data.read_parquet("s3://corpus/")                       # a column of texts
    ds = embed_dataset(ds, "recemb/codestral-mamba2", text_column="text")  # + an "embedding" column

    sync = QdrantSync(open_store(url="http://qdrant:6333"), "docs", Embedder.from_pretrained(name, device="cpu"))
    sync.sync(documents, executor=RayExecutor(name))               # the same guarantees as a local sync

Both run a Ray Data ``map_batches`` over an actor pool: each actor loads the model once (one GPU per actor where
the cluster has GPUs, CPU actors otherwise) and embeds batch after batch. Ray restarts an actor that dies and
retries its batch, so a lost actor costs time, not vectors.

The sync (``RayExecutor``): the plan (which documents are new, changed, unchanged, gone) is made on the driver from
ids and content hashes only, as in a local sync. The documents to embed go to the actors, which read their texts
(a ``DocumentSource`` is read where the actor runs: files must be on a shared filesystem), tokenize, embed the
documents and their passages, and build the points with their BM25 vectors, exactly as the local sync's second
pass does: it is the same code (``recemb_integrations.qdrant.DocumentWriter``), whose writes are data (upserts
and deletes) that the actor returns instead of sending. The driver sends each batch's writes in their order, so
each document's passages still land before the document point that carries its hash, point ids are the same
uuid5s, and the deletes of gone documents run on the driver at the end: a driver killed at any point and run
again converges, nothing lost and nothing duplicated. The driver is the single writer, whatever the store (an
embedded store can have no other).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, Callable, Sequence

from recemb_integrations._imports import require

__all__ = ["DEFAULT_BATCH_SIZE", "KINDS", "MAX_BLOCKS", "RayExecutor", "embed_dataset"]

ray = require("ray", "ray")
require("ray.data", "ray")

KINDS = ("document", "query")
DEFAULT_BATCH_SIZE = 32  # texts per actor call (embed_dataset); a sync sends its own batch_size documents
MAX_BLOCKS = 20_000  # a distributed sync's blocks at most (one per actor call below that)


# --------------------------------------------------------------------------------------------- cluster
def _ensure_ray(address: str | None = None) -> None:
    """Connect to the cluster at ``address`` (or RAY_ADDRESS, or start a local one) unless connected already."""
    if not ray.is_initialized():
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)


def _check_pool(num_gpus: float | None, num_cpus: float | None, concurrency: int | None) -> None:
    for name, value in (("num_gpus", num_gpus), ("num_cpus", num_cpus)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or concurrency < 1):
        raise ValueError(f"concurrency must be a positive int, got {concurrency!r}")


def _actor_resources(num_gpus: float | None, num_cpus: float | None, concurrency: int | None) -> dict[str, Any]:
    """map_batches' resources for the actor pool: one GPU per actor where the cluster has GPUs (``num_gpus=None``),
    else CPU actors; by default as many actors as GPUs, or (CPU) one per ``num_cpus`` CPUs leaving one CPU for
    Ray Data's own tasks."""
    _check_pool(num_gpus, num_cpus, concurrency)
    resources = ray.cluster_resources()
    if num_gpus is None:
        num_gpus = 1 if resources.get("GPU", 0) >= 1 else 0
    if num_cpus is None:
        num_cpus = 1
    if concurrency is None:
        if num_gpus > 0:
            concurrency = max(1, int(resources.get("GPU", 0) // num_gpus))
        else:
            concurrency = max(1, int((resources.get("CPU", 1) - 1) // max(num_cpus, 1e-9)))
    return {"num_gpus": num_gpus, "num_cpus": num_cpus, "compute": ray.data.ActorPoolStrategy(size=concurrency)}


def _load(model: str, model_kwargs: dict[str, Any]):
    from recemb.core import Embedder

    return Embedder.from_pretrained(model, **model_kwargs)


# --------------------------------------------------------------------------------------------- embed_dataset
def _sort_by_length(batch, text_column: str):
    """One block's rows sorted by text length, so each actor batch holds texts of similar lengths."""
    import numpy as np

    order = np.argsort([len(t) for t in batch[text_column]], kind="stable")
    return {k: v[order] for k, v in batch.items()}


class _EmbedActor:
    """One model per actor; each call embeds one batch of texts into ``output_column``."""

    def __init__(self, model: str, model_kwargs: dict[str, Any], kind: str, instruction: str | None,
                 text_column: str, output_column: str, normalize: bool, encode_batch_size: int):
        self.embedder = _load(model, model_kwargs)
        self.kind, self.instruction, self.normalize = kind, instruction, normalize
        self.text_column, self.output_column, self.encode_batch_size = text_column, output_column, encode_batch_size

    def __call__(self, batch):
        texts = [str(t) for t in batch[self.text_column]]
        options = dict(batch_size=self.encode_batch_size, normalize=self.normalize, show_progress_bar=False)
        if self.kind == "query":
            vectors = self.embedder.encode_queries(texts, instruction=self.instruction, **options)
        else:
            vectors = self.embedder.encode_documents(texts, **options)
        batch[self.output_column] = vectors
        return batch


def embed_dataset(
    ds,
    model: str,
    text_column: str = "text",
    kind: str = "document",
    *,
    instruction: str | None = None,
    output_column: str = "embedding",
    batch_size: int = DEFAULT_BATCH_SIZE,
    encode_batch_size: int = 8,
    concurrency: int | None = None,
    num_gpus: float | None = None,
    num_cpus: float | None = None,
    model_kwargs: dict[str, Any] | None = None,
    normalize: bool = True,
    address: str | None = None,
):
    """``ds`` with an ``output_column`` of embeddings (float32, the model's dim), computed on a pool of actors that
    each hold one loaded ``model`` (a folder every node can read, or a hub id).

    ``kind="document"`` embeds the texts as ``Embedder.encode_documents`` does (no prompt); ``kind="query"`` as
    ``encode_queries`` (with ``instruction``, an E5 task name or any text; None: the web-search default).
    ``batch_size`` texts go to an actor per call, ``encode_batch_size`` of them through the model at once; rows are
    sorted by length inside each block first (the output's row order is not the input's). ``num_gpus`` per actor
    (default: 1 where the cluster has GPUs, else CPU actors with ``num_cpus`` each), ``concurrency`` actors
    (default: one per GPU, or one per ``num_cpus`` CPUs but one). ``model_kwargs`` go to
    ``Embedder.from_pretrained`` on each actor (``dtype``, ``quantize``, ``vertical_chunk_size``, ...).

    Lazy, as Ray Data is: nothing runs until the result is consumed (``take``, ``write_parquet``, ...)."""
    from recemb.core.options import MODEL_OPTIONS, check_options

    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind == "document" and instruction is not None:
        raise ValueError("documents never get an instruction (one index serves every task); pass kind='query' to "
                         "embed queries with it")
    for name, value in (("batch_size", batch_size), ("encode_batch_size", encode_batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    model_kwargs = dict(model_kwargs or {})
    check_options("model_kwargs", model_kwargs, MODEL_OPTIONS)
    columns = ds.columns(fetch_if_missing=False) if hasattr(ds, "columns") else None
    if columns is not None and text_column not in columns:
        raise ValueError(f"the dataset has no column {text_column!r} (its columns: {columns})")
    _ensure_ray(address)
    resources = _actor_resources(num_gpus, num_cpus, concurrency)
    ds = ds.map_batches(_sort_by_length, batch_size=None, batch_format="numpy",
                        fn_kwargs={"text_column": text_column}, udf_modifying_row_count=False)
    return ds.map_batches(
        _EmbedActor, batch_size=batch_size, batch_format="numpy", udf_modifying_row_count=False,
        fn_constructor_args=(str(model), model_kwargs, kind, instruction, text_column, output_column, normalize,
                             encode_batch_size),
        **resources)


# --------------------------------------------------------------------------------------------- sync
class _SyncActor:
    """An actor of a distributed sync: its own model and a ``DocumentWriter`` for the driver's ``WriteJob``; each
    call returns the batch's writes, in the order they were made, and its outcome."""

    def __init__(self, model: str, model_kwargs: dict[str, Any], job):
        from recemb_integrations.qdrant import CollectionMismatchError, DocumentWriter
        from recemb_integrations.qdrant.points import model_fingerprint

        embedder = _load(model, model_kwargs)
        fingerprint = model_fingerprint(embedder)
        if fingerprint != job.fingerprint:
            raise CollectionMismatchError(
                f"the Ray actors loaded {model!r} (fingerprint {fingerprint}), which is not the driver's "
                f"model (fingerprint {job.fingerprint}); give RayExecutor the same model")
        self.writes: list = []
        self.writer = DocumentWriter(embedder, job, self.writes.append)

    def __call__(self, batch):
        from recemb_integrations.qdrant import WriteOutcome

        tasks = [pickle.loads(t) for t in batch["task"]]
        self.writes.clear()
        total = WriteOutcome()

        def merge(outcome: WriteOutcome) -> None:
            total.finished.extend(outcome.finished)
            total.failed.extend(outcome.failed)
            total.warnings.extend(outcome.warnings)
            total.embedded_tokens += outcome.embedded_tokens
            total.documents += outcome.documents

        self.writer.write(tasks, merge)
        return {"result": [ray.cloudpickle.dumps((list(self.writes), total))]}


class RayExecutor:
    """Runs a sync's embedding on Ray actors (``QdrantSync.sync(..., executor=RayExecutor(...))``,
    ``recemb sync --ray``): an executor in the sense of ``recemb_integrations.qdrant.Executor``.

    Args:
        model: what the actors load (a folder every node can read, or a hub id); default: the sync's embedder's name.
            It must be the driver's model (checked by fingerprint on each actor); dtype and device may differ, e.g.
            bf16 on GPUs for a collection built in fp32 on a CPU.
        model_kwargs: ``Embedder.from_pretrained`` options for the actors (``device``, ``dtype``, ``quantize``...);
            the embedding options that the collection records (``max_length``) and the run options
            (``vertical_chunk_size``, ``max_memory``, ``backend``, ``chunk_size``, ``context_extension``, a fixed
            ``threads``) default to the driver embedder's.
        address: the Ray cluster (``ray.init(address=...)``: "auto", "ray://head:10001"); default: the cluster this
            process is connected to, else RAY_ADDRESS, else a new local one.
        concurrency, num_gpus, num_cpus: the actor pool, as in ``embed_dataset``.
        batch_size: documents per actor call (default: the sync's batch_size).
    """

    def __init__(self, model: str | None = None, *, model_kwargs: dict[str, Any] | None = None,
                 address: str | None = None, concurrency: int | None = None, num_gpus: float | None = None,
                 num_cpus: float | None = None, batch_size: int | None = None):
        from recemb.core.options import MODEL_OPTIONS, check_options

        self.model = None if model is None else str(model)
        self.model_kwargs = dict(model_kwargs or {})
        check_options("model_kwargs", self.model_kwargs, MODEL_OPTIONS)
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size < 1):
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        _check_pool(num_gpus, num_cpus, concurrency)  # here, not after the sync has made its plan
        if address is not None and (not isinstance(address, str) or not address.strip()):
            # an empty address (an unset shell variable) must not quietly start a local cluster instead
            raise ValueError(f"address must name a Ray cluster (e.g. 'auto', 'ray://head:10001'), got {address!r}")
        self.address, self.concurrency, self.num_gpus, self.num_cpus = address, concurrency, num_gpus, num_cpus
        self.batch_size = batch_size

    def _actor_model(self, embedder) -> tuple[str, dict[str, Any]]:
        model = self.model or embedder.name
        if not model:
            raise ValueError("RayExecutor needs the model the actors load: pass model= (the embedder has no name)")
        kwargs = {"max_length": embedder.max_length, "vertical_chunk_size": embedder.vertical_chunk_size,
                  "backend": embedder.backend, "chunk_size": embedder.chunk_size,
                  "context_extension": embedder.context_extension, "max_memory": embedder.max_memory,
                  "threads": embedder.threads}
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        if Path(model).exists():  # a folder here: the actors' working directory may be another
            model = str(Path(model).absolute())
        return str(model), {**kwargs, **self.model_kwargs}

    def run(self, job, tasks: Sequence[tuple[Any, str]], embedder, emit: Callable[[Any], None],
            on_outcome: Callable[[Any], None], show_progress_bar: bool = False) -> None:
        """Embed ``tasks`` ((entry, action) pairs of the sync's plan) on the actors; pass each batch's writes to
        ``emit`` here, in the order the actor made them, then its outcome to ``on_outcome``."""
        from tqdm.auto import tqdm

        if not tasks:
            return
        model, model_kwargs = self._actor_model(embedder)
        _ensure_ray(self.address)
        resources = _actor_resources(self.num_gpus, self.num_cpus, self.concurrency)
        # Similar lengths travel together (the actors' batches pad less); the order of writes across documents
        # does not matter, only the order within one, which each actor keeps.
        ordered = sorted(tasks, key=lambda task: task[0].size)
        items = [{"task": ray.cloudpickle.dumps(task)} for task in ordered]
        batch_size = self.batch_size or job.batch_size
        # One block per actor call: Ray Data hands results back a block at a time, so the driver writes (and the
        # bar moves) after every batch rather than after a quarter of the corpus.
        blocks = min(-(-len(items) // batch_size), MAX_BLOCKS)
        ds = ray.data.from_items(items, override_num_blocks=blocks)
        ds = ds.map_batches(_SyncActor, batch_size=batch_size, batch_format="numpy",
                            fn_constructor_args=(model, model_kwargs, job), **resources)
        with tqdm(total=None, disable=not show_progress_bar, desc=f"Syncing {job.collection} on Ray",
                  unit="tok", unit_scale=True) as bar:
            documents = 0
            for row in ds.iter_rows():
                writes, outcome = pickle.loads(row["result"])
                for write in writes:  # in the actor's order: passages, stale passages, then the document points
                    emit(write)
                on_outcome(outcome)
                documents += outcome.documents
                bar.update(outcome.embedded_tokens)
                bar.set_postfix(documents=f"{documents}/{len(ordered)}")
