"""recemb_integrations.ray on a real local Ray cluster (started here, 2 CPUs): embed_dataset and the distributed
sync against the single-process results, a killed actor, a killed driver, mismatches refused before any write."""

import os
import signal
import textwrap
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")
pytest.importorskip("qdrant_client")


from recemb.core import Embedder  # noqa: E402
from recemb.core.embedder import STREAM_MIN_CHARS  # noqa: E402
from recemb_integrations.qdrant import CollectionMismatchError, Document, DocumentSource, QdrantSync, content_hash  # noqa: E402
from recemb_integrations.ray import RayExecutor, embed_dataset  # noqa: E402
from recemb_integrations.stores import open_store  # noqa: E402
from tests.utils import (  # noqa: E402
    SAMPLE_TEXT,
    save_transformers_checkpoint,
    sigkill_after_progress,
    stored_points,
    transformers_model,
)

SETTINGS = dict(batch_size=3, passage_tokens=48, passage_overlap=8, store_text=True)


@pytest.fixture(scope="module")
def cluster():
    """One local cluster for the module (2 CPUs, as CI has); its address lets a subprocess join it."""
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray.get_runtime_context().gcs_address
    if started:
        ray.shutdown()


def corpus(n=14, long_doc=True):
    docs = [Document(f"doc{i:02d}.txt", f"document {i}: " + SAMPLE_TEXT[: 40 + 37 * i], {"i": i}) for i in range(n)]
    if long_doc:  # streamed (tokenized in windows) on the actor, passages cut from the same stream
        docs.append(Document("long.txt", (SAMPLE_TEXT + " ") * (STREAM_MIN_CHARS // len(SAMPLE_TEXT) + 2), {"i": -1}))
    return docs


def snapshot(store, collection="docs"):
    return stored_points(store, collection)


def assert_same_state(got, want):
    assert sorted(got) == sorted(want)
    for pid, (payload, dense, sparse) in want.items():
        assert got[pid][0] == payload
        np.testing.assert_allclose(got[pid][1], dense, rtol=1e-5, atol=1e-5)
        assert got[pid][2] == sparse


def counts(report):
    return (report.added, report.updated, report.metadata_updated, report.unchanged, report.deleted,
            sorted(report.failed), report.embedded_tokens)


# --------------------------------------------------------------------------------------------- embed_dataset
def test_embed_dataset_gives_the_embedders_vectors(cluster, tiny_folder):
    emb = Embedder.from_pretrained(tiny_folder, device="cpu")
    texts = [f"text {i} " + SAMPLE_TEXT[: 10 + 53 * (i * 7 % 11)] for i in range(11)]
    ds = ray.data.from_items([{"i": i, "text": t} for i, t in enumerate(texts)], override_num_blocks=2)
    rows = embed_dataset(ds, str(tiny_folder), batch_size=3, concurrency=1).take_all()
    got = {r["i"]: np.asarray(r["embedding"]) for r in rows}
    assert sorted(got) == list(range(11)) and got[0].dtype == np.float32
    np.testing.assert_allclose(np.stack([got[i] for i in range(11)]), emb.encode_documents(texts),
                               rtol=1e-5, atol=1e-6)
    # Queries get the instruction, in another column name
    rows = embed_dataset(ds, str(tiny_folder), kind="query", instruction="SciFact", output_column="q",
                         batch_size=4, concurrency=1).take_all()
    got = np.stack([np.asarray(r["q"]) for r in sorted(rows, key=lambda r: r["i"])])
    np.testing.assert_allclose(got, emb.encode_queries(texts, instruction="SciFact"), rtol=1e-5, atol=1e-6)
    assert np.abs(got - emb.encode_documents(texts)).max() > 1e-3  # the instruction did change them


def test_embed_dataset_refuses_bad_arguments_before_running(cluster, tiny_folder):
    ds = ray.data.from_items([{"text": "a"}])
    with pytest.raises(ValueError, match="kind"):
        embed_dataset(ds, str(tiny_folder), kind="passage")
    with pytest.raises(ValueError, match="documents never get an instruction"):
        embed_dataset(ds, str(tiny_folder), instruction="SciFact")
    with pytest.raises(ValueError, match="no column 'body'"):
        embed_dataset(ds, str(tiny_folder), text_column="body")
    with pytest.raises(ValueError, match="unknown model_kwargs: \\['dtpye'\\]"):
        embed_dataset(ds, str(tiny_folder), model_kwargs={"dtpye": "bfloat16"})
    with pytest.raises(ValueError, match="concurrency"):
        embed_dataset(ds, str(tiny_folder), concurrency=0)


# --------------------------------------------------------------------------------------------- sync
def test_distributed_sync_ends_in_the_single_process_state(cluster, tiny_folder, tmp_path):
    emb = Embedder.from_pretrained(tiny_folder, device="cpu")
    docs = corpus()
    with open_store(path=tmp_path / "ray", kind="edge") as on_ray, \
            open_store(path=tmp_path / "local", kind="edge") as local:
        seen = []
        distributed = QdrantSync(on_ray, "docs", emb, **SETTINGS).sync(
            docs, executor=RayExecutor(concurrency=2), on_document=lambda d, a: seen.append((d, a)))
        single = QdrantSync(local, "docs", emb, **SETTINGS).sync(docs)
        assert counts(distributed) == counts(single) and distributed.added == len(docs)
        assert sorted(seen) == sorted((d.id, "added") for d in docs)
        want = snapshot(local)
        assert len(want) > 2 * len(docs)  # passages are there too
        assert_same_state(snapshot(on_ray), want)

        # A second round: one edited, one gone, one new, one with new metadata only.
        edited = [d for d in docs if d.id not in ("doc03.txt",)]
        edited[0] = Document(edited[0].id, edited[0].text + " (edited)", edited[0].metadata)
        edited[1] = Document(edited[1].id, edited[1].text, {"i": 100})
        edited.append(Document("new.txt", "a new document " * 30, {"i": 99}))
        distributed = QdrantSync(on_ray, "docs", emb, **SETTINGS).sync(edited, executor=RayExecutor(concurrency=1))
        single = QdrantSync(local, "docs", emb, **SETTINGS).sync(edited)
        assert counts(distributed) == counts(single)
        assert (single.added, single.updated, single.metadata_updated, single.deleted) == (1, 1, 1, 1)
        assert_same_state(snapshot(on_ray), snapshot(local))


def test_a_rebuild_on_ray_equals_the_local_rebuild(cluster, tiny_folder, tmp_path):
    emb = Embedder.from_pretrained(tiny_folder, device="cpu")
    docs = corpus(6, long_doc=False)
    rebuilt = {**SETTINGS, "passage_tokens": 32, "passage_overlap": 0}
    with open_store(path=tmp_path / "ray", kind="edge") as on_ray, \
            open_store(path=tmp_path / "local", kind="edge") as local:
        for store in (on_ray, local):
            QdrantSync(store, "docs", emb, **SETTINGS).sync(docs)
        report = QdrantSync(on_ray, "docs", emb, **rebuilt).sync(docs, rebuild=True,
                                                                 executor=RayExecutor(concurrency=1))
        single = QdrantSync(local, "docs", emb, **rebuilt).sync(docs, rebuild=True)
        assert counts(report) == counts(single) and report.added == len(docs)
        assert on_ray.list_collections() == local.list_collections() == ["docs"]
        assert_same_state(snapshot(on_ray), snapshot(local))

def read_or_die_once(text: str, marker: str):
    """A document source's ``read`` that SIGKILLs the process reading it (a Ray actor) the first time, and records
    each reader's pid: the actor dies mid-batch, as one lost with its machine would."""

    def read() -> str:
        marker_path = Path(marker)
        first = not marker_path.exists()
        with open(marker_path, "a") as f:
            f.write(f"{os.getpid()}\n")
        if first:
            os.kill(os.getpid(), signal.SIGKILL)
        return text

    return read


def test_a_killed_actor_is_restarted_and_the_result_is_exact(cluster, tiny_folder, tmp_path):
    emb = Embedder.from_pretrained(tiny_folder, device="cpu")
    docs = corpus(12, long_doc=False)
    marker = tmp_path / "readers"
    victim = docs[7]
    # The plan hashes through fingerprint(): only the actors read the texts.
    sources = [DocumentSource(d.id, read_or_die_once(d.text, str(marker)) if d is victim else (lambda d=d: d.text),
                              d.metadata, fingerprint=lambda d=d: (content_hash(d.text), not d.text.strip()))
               for d in docs]
    with open_store(path=tmp_path / "ray", kind="edge") as on_ray, \
            open_store(path=tmp_path / "local", kind="edge") as local:
        for store in (on_ray, local):  # the collection first (creating it reads a sample for BM25's lengths)
            QdrantSync(store, "docs", emb, **SETTINGS).sync(docs[:4])
        report = QdrantSync(on_ray, "docs", emb, **SETTINGS).sync(sources, executor=RayExecutor(concurrency=1))
        single = QdrantSync(local, "docs", emb, **SETTINGS).sync(docs)
        readers = marker.read_text().split()
        # read by the first actor, which died of it, then by the actor Ray started in its place
        assert len(readers) == 2 and len(set(readers)) == 2 and str(os.getpid()) not in readers
        assert counts(report) == counts(single) and report.added == len(docs) - 4 and not report.failed
        assert_same_state(snapshot(on_ray), snapshot(local))


DRIVER = textwrap.dedent("""
    import sys
    import ray
    from recemb.core import Embedder
    from recemb_integrations.qdrant import Document, QdrantSync
    from recemb_integrations.ray import RayExecutor
    from recemb_integrations.stores import open_store
    from tests.integrations.test_ray import SETTINGS, corpus
    address, model, folder, progress = sys.argv[1:5]
    ray.init(address=address, log_to_driver=False, configure_logging=False)
    emb = Embedder.from_pretrained(model, device="cpu")
    def mark(doc_id, action):
        with open(progress, "a") as f:
            f.write(doc_id + "\\n")
    with open_store(path=folder, kind="edge") as store:
        QdrantSync(store, "docs", emb, **{**SETTINGS, "batch_size": 1}).sync(
            corpus(30, long_doc=False), executor=RayExecutor(concurrency=1), on_document=mark)
""")


def test_a_driver_killed_midway_converges_on_rerun(cluster, tiny_folder, tmp_path):
    pytest.importorskip("qdrant_edge")
    script, folder, progress = tmp_path / "driver.py", tmp_path / "store", tmp_path / "progress"
    script.write_text(DRIVER)
    written_before_kill = sigkill_after_progress(
        [str(script), cluster, str(tiny_folder), str(folder), str(progress)], progress, at_least=5)
    assert 5 <= written_before_kill < 30

    emb = Embedder.from_pretrained(tiny_folder, device="cpu")
    docs = corpus(30, long_doc=False)
    with open_store(path=folder, kind="edge") as store, \
            open_store(path=tmp_path / "local", kind="edge") as local:
        report = QdrantSync(store, "docs", emb, **{**SETTINGS, "batch_size": 1}).sync(
            docs, executor=RayExecutor(concurrency=1))
        assert report.unchanged >= written_before_kill and report.added + report.unchanged == 30
        QdrantSync(local, "docs", emb, **{**SETTINGS, "batch_size": 1}).sync(docs)
        assert_same_state(snapshot(store), snapshot(local))  # nothing duplicated, nothing missing


class NeverRuns(RayExecutor):
    def run(self, *args, **kwargs):
        raise AssertionError("the executor started although the collection was refused")


def test_model_or_dimension_mismatch_is_refused_before_any_actor_starts(cluster, tiny_folder, tmp_path):
    emb = Embedder.from_pretrained(tiny_folder, device="cpu")
    other = Embedder.from_pretrained(
        save_transformers_checkpoint(transformers_model("g1", seed=7), tmp_path / "other"), device="cpu")
    wider = Embedder.from_pretrained(save_transformers_checkpoint(transformers_model("g3"), tmp_path / "g3"),
                                     device="cpu")
    with open_store(path=tmp_path / "store", kind="edge") as store:
        QdrantSync(store, "docs", emb, **SETTINGS).sync(corpus(4, long_doc=False))
        before = snapshot(store)
        with pytest.raises(CollectionMismatchError, match="model"):
            QdrantSync(store, "docs", other, **SETTINGS).sync(corpus(5, long_doc=False), executor=NeverRuns())
        with pytest.raises(CollectionMismatchError, match="dimension"):
            QdrantSync(store, "docs", wider, **SETTINGS).sync(corpus(5, long_doc=False), executor=NeverRuns())
        # Actors told to load another model than the driver's refuse it on their side too, before any write.
        with pytest.raises(Exception, match="not the driver's model"):
            QdrantSync(store, "docs", emb, **SETTINGS).sync(
                corpus(5, long_doc=False), executor=RayExecutor(str(tmp_path / "other"), concurrency=1))
        assert_same_state(snapshot(store), before)


def test_ray_executor_checks_its_options():
    with pytest.raises(ValueError, match="unknown model_kwargs"):
        RayExecutor(model_kwargs={"devcie": "cuda"})
    with pytest.raises(ValueError, match="batch_size"):
        RayExecutor(batch_size=0)
    with pytest.raises(ValueError, match="concurrency"):
        RayExecutor(concurrency=0)
    with pytest.raises(ValueError, match="num_gpus"):
        RayExecutor(num_gpus=-1)
    with pytest.raises(ValueError, match="address must name a Ray cluster"):
        RayExecutor(address=" ")


def test_cli_sync_on_ray_equals_the_plain_sync(cluster, tiny_folder, tmp_path, capsys):
    import json

    from recemb_integrations.cli import main

    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(5):
        (folder / f"f{i}.txt").write_text(f"file {i}: " + SAMPLE_TEXT[: 60 * (i + 1)])
    reports = []
    for name, extra in (("ray", ["--ray", "--ray-address", cluster, "--ray-actors", "1"]), ("plain", [])):
        code = main(["sync", str(folder), "--model", str(tiny_folder), "--qdrant-path", str(tmp_path / name),
                     "--passage-tokens", "32", "--json", *extra])
        assert code == 0
        reports.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
    keys = ("added", "updated", "unchanged", "deleted", "failed", "embedded_tokens")
    assert {k: reports[0][k] for k in keys} == {k: reports[1][k] for k in keys}
    assert reports[0]["added"] == 5
    with open_store(path=tmp_path / "ray") as a, open_store(path=tmp_path / "plain") as b:
        assert_same_state(snapshot(a, reports[0]["collection"]), snapshot(b, reports[1]["collection"]))


def test_cli_ray_options_need_ray(tiny_folder, tmp_path, capsys):
    from recemb_integrations.cli import main

    (tmp_path / "a.txt").write_text("text")
    assert main(["sync", str(tmp_path / "a.txt"), "--model", str(tiny_folder), "--qdrant-path", str(tmp_path / "s"),
                 "--ray-address", "auto"]) == 2
    assert "--ray-address needs --ray" in capsys.readouterr().err
    assert main(["sync", str(tmp_path / "a.txt"), "--model", str(tiny_folder), "--qdrant-path", str(tmp_path / "s"),
                 "--ray", "--ray-address", ""]) == 2
    assert "--ray-address is empty" in capsys.readouterr().err
    assert main(["sync", str(tmp_path / "a.txt"), "--model", str(tiny_folder), "--qdrant-path", str(tmp_path / "s"),
                 "--ray", "--ray-gpus-per-actor", "-1"]) == 2
    assert "num_gpus must be a number >= 0" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
