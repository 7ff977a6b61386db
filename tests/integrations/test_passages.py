"""Passages a user can read and trust: each records its characters in the document's own text, its stored text and
its BM25 vector are that original span, long documents get passages by default, and a search shows passages only of
complete documents."""

import pytest

pytest.importorskip("qdrant_client")

from recemb.core import Embedder  # noqa: E402
from recemb.core.tokenizer import TextTokenizer  # noqa: E402
from recemb_integrations.qdrant import (  # noqa: E402
    DEFAULT_PASSAGE_OVERLAP,
    DEFAULT_PASSAGE_TOKENS,
    DEFAULT_PASSAGES_ABOVE,
    Document,
    QdrantSync,
    collection_settings,
    content_hash,
    point_id,
)
from tests.integrations.test_qdrant import make_store  # noqa: E402
from tests.utils import SAMPLE_TEXT, assert_stored_dense, transformers_model  # noqa: E402

ACCENTED = "Herr Müller trinkt einen Café an der Straße in München."
TEXTS = [
    SAMPLE_TEXT * 3,
    "Ünïcödé  text,\twith   runs of  spaces\nand lines;\r\nCJK 状态空间模型 and emoji 🙂 too. " * 4,
    ACCENTED + " " + SAMPLE_TEXT,
    "short one",
]


def _wordpiece(folder):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=300, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"],
                                        show_progress=False)
    tok.train_from_iterator(TEXTS * 4, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2),
                                                                                              ("[SEP]", 3)])
    return tok, {"unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]"}


def _metaspace(folder):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tok.train_from_iterator(TEXTS * 4, trainer=trainer)
    return tok, {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}


def _byte_level(folder):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>", "<pad>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TEXTS * 4, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    return tok, {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}


BUILDERS = {"wordpiece": _wordpiece, "metaspace": _metaspace, "byte-level": _byte_level}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def kind_embedder(request, tmp_path_factory):
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp(request.param) / "model"
    transformers_model("g1", vocab_size=320).save_pretrained(str(folder))
    tok, special = BUILDERS[request.param](folder)
    assert tok.get_vocab_size() <= 320
    PreTrainedTokenizerFast(tokenizer_object=tok, **special).save_pretrained(str(folder))
    return request.param, Embedder.from_pretrained(folder, device="cpu", backend="torch")


def passages_of(store, collection, doc_id):
    from qdrant_client import models as qm

    points, _ = store.scroll(collection, limit=10_000, with_vectors=True, filter=qm.Filter(must=[
        qm.FieldCondition(key="document_id", match=qm.MatchValue(value=doc_id)),
        qm.FieldCondition(key="kind", match=qm.MatchValue(value="passage"))]))
    return sorted(points, key=lambda p: p.payload["passage"])


def stream_every_text(monkeypatch):
    """Every text goes through the windowed stream, in many pieces of 40 characters."""
    import recemb.core.embedder as embedder_module

    monkeypatch.setattr(embedder_module, "STREAM_MIN_CHARS", 8)
    real = TextTokenizer.encode_stream
    monkeypatch.setattr(TextTokenizer, "encode_stream",
                        lambda self, text, window_chars=40, **k: real(self, text, window_chars=40, **k))


def whole_offsets(embedder, text):
    """The tokenizer's own offsets of every token of the text (the independent reference)."""
    enc = embedder.tokenizer.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return enc["input_ids"], enc["offset_mapping"]


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_each_passage_is_its_tokens_original_characters(kind_embedder, tmp_path, monkeypatch, streamed):
    kind, emb = kind_embedder
    if streamed:  # every text goes through the windowed stream, in many pieces
        if not emb.tokenizer.streamable:
            pytest.skip(f"{kind} is not streamable")
        stream_every_text(monkeypatch)
    size, overlap = 12, 3
    docs = [Document(f"d{i}", t) for i, t in enumerate(TEXTS)]
    with make_store("edge", tmp_path / "store") as store:
        QdrantSync(store, "p", emb, store_text=True, passage_tokens=size, passage_overlap=overlap,
                   passages_above=0).sync(docs)
        for doc in docs:
            ids = emb.tokenize([doc.text])[0]
            body = ids[:-1]
            _, offsets = whole_offsets(emb, doc.text)
            lead = len(body) - len(offsets)  # the tokens the post-processor puts before the text (BOS, CLS)
            passages = passages_of(store, "p", doc.id)
            starts = list(range(0, max(len(body) - overlap, 1), size - overlap))
            assert [p.payload["passage"] for p in passages] == list(range(len(starts)))
            windows = [body[s:s + size] + [emb.tokenizer.eos_token_id] for s in starts]
            vectors = emb.embed_token_ids(windows, normalize=True).numpy()
            for p, s, window, vector in zip(passages, starts, windows, vectors):
                start, end = p.payload["start"], p.payload["end"]
                assert p.payload["text"] == doc.text[start:end]
                assert p.payload["document_hash"] == content_hash(doc.text)
                assert p.payload["tokens"] == len(window)
                covered = [offsets[i - lead] for i in range(s, min(s + size, len(body))) if i >= lead]
                assert (start, end) == (covered[0][0], max(e for _, e in covered))
                # the same ids as before offsets: the same vector
                assert_stored_dense(p.vector["dense"], vector, rtol=1e-5, atol=1e-6)


def test_passage_bm25_counts_the_original_words(tiny_embedder, tmp_path):
    kind_texts = [Document("m.txt", ACCENTED), Document("other.txt", SAMPLE_TEXT)]
    with make_store("edge", tmp_path / "store") as store:
        # Passages long enough to hold a whole word of this tiny tokenizer, which cuts words into pieces.
        sync = QdrantSync(store, "p", tiny_embedder, passage_tokens=12, passage_overlap=6, passages_above=0)
        sync.sync(kind_texts)
        hits = sync.search("Müller", mode="sparse", granularity="passage")
        assert hits and hits[0].document_id == "m.txt"
        assert "Müller" in ACCENTED[hits[0].start:hits[0].end]  # the passage found holds the word, as written
        assert sync.search("München", mode="sparse", granularity="passage")[0].document_id == "m.txt"


@pytest.fixture
def wordpiece_embedder(tmp_path_factory):
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("wp") / "model"
    transformers_model("g1", vocab_size=320).save_pretrained(str(folder))
    tok, special = _wordpiece(folder)
    PreTrainedTokenizerFast(tokenizer_object=tok, **special).save_pretrained(str(folder))
    return Embedder.from_pretrained(folder, device="cpu", backend="torch")


def test_an_accent_stripping_tokenizer_still_finds_the_accented_word(wordpiece_embedder, tmp_path):
    # The case: the decode of "Müller" by a BERT tokenizer is "muller", which BM25 never matched.
    with make_store("edge", tmp_path / "store") as store:
        sync = QdrantSync(store, "p", wordpiece_embedder, store_text=True, passage_tokens=4, passage_overlap=0,
                          passages_above=0)
        sync.sync([Document("m.txt", ACCENTED), Document("other.txt", SAMPLE_TEXT)])
        hits = sync.search("Müller", mode="sparse", granularity="passage")
        assert hits and hits[0].document_id == "m.txt" and "Müller" in hits[0].text
        assert hits[0].text == ACCENTED[hits[0].start:hits[0].end]


@pytest.mark.parametrize("kind", ["edge", "local"])
def test_long_documents_get_passages_by_default_and_short_ones_stand_alone(tiny_embedder, tmp_path, kind):
    long_text, middling = SAMPLE_TEXT * 12, SAMPLE_TEXT * 2
    ids = tiny_embedder.tokenize([long_text, middling])
    assert len(ids[0]) - 1 > DEFAULT_PASSAGES_ABOVE >= len(ids[1]) - 1 > DEFAULT_PASSAGE_TOKENS
    with make_store(kind, tmp_path / "store") as store:
        sync = QdrantSync(store, "p", tiny_embedder, store_text=True)
        sync.sync([Document("long.txt", long_text), Document("short.txt", middling)])
        recorded = collection_settings(store, "p")
        assert (recorded["passage_tokens"], recorded["passage_overlap"], recorded["passages_above"]) == (
            DEFAULT_PASSAGE_TOKENS, DEFAULT_PASSAGE_OVERLAP, DEFAULT_PASSAGES_ABOVE)
        assert len(passages_of(store, "p", "long.txt")) > 1
        assert passages_of(store, "p", "short.txt") == []
        assert store.retrieve("p", [point_id("short.txt")])[0].payload["passages"] == 0
        # At passage granularity a document too short for passages is its own passage.
        found = {h.document_id for h in sync.search("state space", granularity="passage", limit=50)}
        assert found == {"long.txt", "short.txt"}
        # Another sync that names nothing keeps what the collection recorded; opting out is a conflict.
        again = QdrantSync(store, "p", tiny_embedder, store_text=True)
        assert again.sync([Document("long.txt", long_text), Document("short.txt", middling)]).unchanged == 2
        from recemb_integrations.qdrant import CollectionMismatchError

        with pytest.raises(CollectionMismatchError, match="passage_tokens"):
            QdrantSync(store, "p", tiny_embedder, passage_tokens=0).sync([Document("long.txt", long_text)])


def test_no_passages_is_recorded_and_kept(tiny_embedder, tmp_path):
    with make_store("edge", tmp_path / "store") as store:
        QdrantSync(store, "p", tiny_embedder, passage_tokens=0).sync([Document("long.txt", SAMPLE_TEXT * 12)])
        assert collection_settings(store, "p")["passage_tokens"] is None
        report = QdrantSync(store, "p", tiny_embedder).sync([Document("long.txt", SAMPLE_TEXT * 13)])
        assert report.updated == 1 and passages_of(store, "p", "long.txt") == []
        assert store.count("p") == 1


def test_a_collection_recorded_before_the_threshold_keeps_giving_every_document_passages(tiny_embedder, tmp_path):
    with make_store("edge", tmp_path / "store") as store:
        QdrantSync(store, "p", tiny_embedder, passage_tokens=6, passages_above=0).sync([Document("a", "x y")])
        info = store.collection_info("p")
        record = dict(info.metadata["recemb"])
        del record["passages_above"]  # what an earlier recemb wrote
        store.update_metadata("p", {"recemb": record})
        sync = QdrantSync(store, "p", tiny_embedder)
        sync.sync([Document("a", "x y"), Document("b", "one two")])
        assert sync.settings.passages_above == 0 and len(passages_of(store, "p", "b")) == 1


def _write_incomplete(store, emb, doc_id, text):
    """What a sync stopped after a document's passages and before its own point leaves behind: its passages, cut
    from ``text``, and its own point as it was (absent, or an older version)."""
    from recemb_integrations.qdrant.calls import StoreCalls
    from recemb_integrations.qdrant.writer import DocumentWriter

    sync = QdrantSync(store, "p", emb, store_text=True)
    sync.ensure_collection()
    writes = []
    writer = DocumentWriter(emb, sync.write_job(), writes.append)
    writer.write([(_entry(doc_id, text), "added")], lambda outcome: None)
    document_points = writes.pop()  # the document's own point is the last write: it never lands
    assert all(p.payload["kind"] == "document" for p in document_points.points)
    calls = StoreCalls(store)
    for write in writes:
        calls.apply("p", write)


def _entry(doc_id, text):
    from recemb_integrations.qdrant import documents

    return documents.read_entries([Document(doc_id, text)])[0][0]


@pytest.mark.parametrize("kind", ["edge", "local"])
@pytest.mark.parametrize("granularity", ["passage", "any", "document"])
def test_a_search_never_shows_passages_of_an_incomplete_document(tiny_embedder, tmp_path, kind, granularity):
    old, new = SAMPLE_TEXT * 4, "Completely rewritten: tides follow the moon. " * 30
    with make_store(kind, tmp_path / "store") as store:
        sync = QdrantSync(store, "p", tiny_embedder, store_text=True, passage_tokens=6, passage_overlap=0,
                          passages_above=0)
        sync.sync([Document("kept.txt", old), Document("changed.txt", old)])
        _write_incomplete(store, tiny_embedder, "changed.txt", new)  # stopped mid-update
        _write_incomplete(store, tiny_embedder, "new.txt", new)  # stopped mid-add
        hashes = {"kept.txt": content_hash(old), "changed.txt": content_hash(old)}
        searcher = QdrantSync.open(store, "p", tiny_embedder)
        for mode in ("sparse", "dense", "hybrid"):  # BM25 finds only the incomplete passages: none may show
            hits = searcher.search("tides follow the moon", limit=50, granularity=granularity, mode=mode)
            assert hits or mode == "sparse"
            assert "new.txt" not in {h.document_id for h in hits}
            for hit in hits:
                assert hit.content_hash == hashes[hit.document_id]
                text = hit.text if hit.passage is not None else hit.best_passage_text
                if hit.span is not None:  # only the complete (old) version's passages: its text, its span
                    assert text == old[hit.span[0]:hit.span[1]]


def collection_settings_of(path, collection):
    from recemb_integrations.stores import open_store

    with open_store(path=path) as store:
        return collection_settings(store, collection)


def test_opting_out_of_a_collections_passages_is_refused_and_changes_nothing(tmp_path, tiny_folder, capsys):
    from recemb_integrations.cli import main
    from recemb_integrations.stores import open_store

    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "long.txt").write_text(SAMPLE_TEXT * 12)
    opts = ["--model", str(tiny_folder), "--qdrant-path", str(tmp_path / "store"), "--collection", "c"]
    assert main(["sync", str(corpus), *opts]) == 0
    with open_store(path=tmp_path / "store") as store:
        before = store.count("c")
    assert before > 1  # the default gave the long document passages
    capsys.readouterr()
    built = collection_settings_of(tmp_path / "store", "c")["long_documents"]
    other = "one-pass" if built != "one-pass" else "passages"
    for flags in (["--no-passages"], ["--passage-tokens", "0"], ["--passages-above", "0"], ["--long-documents", other]):
        assert main(["sync", str(corpus), *flags, *opts]) == 2
        err = capsys.readouterr().err
        assert "was built with" in err and "--rebuild" in err, err
    with open_store(path=tmp_path / "store") as store:
        assert store.count("c") == before


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("mode", ["passages", "one-pass", "whole+passages"])
def test_each_way_of_embedding_long_documents_gives_the_vectors_it_promises(tiny_embedder, tmp_path, monkeypatch,
                                                                             streamed, mode):
    """Each ``long_documents`` way against vectors computed independently: "whole+passages" embeds the document
    and each window alone; "passages" embeds each window alone and gives the document their normalised mean;
    "one-pass" gives each passage the vector of the document's first tokens up to the passage's end plus the EOS
    (its last passage: the document's own vector). The report counts the tokens each way embeds; the collection
    records the way, and a sync that names another is refused."""
    import numpy as np

    from recemb_integrations.qdrant import SettingsConflict

    emb = tiny_embedder
    if streamed:
        stream_every_text(monkeypatch)
    size, overlap = 12, 3
    docs = [Document(f"d{i}", t) for i, t in enumerate(TEXTS)]
    eos = emb.tokenizer.eos_token_id
    with make_store("edge", tmp_path / "store") as store:
        sync = QdrantSync(store, "p", emb, passage_tokens=size, passage_overlap=overlap, passages_above=0,
                          long_documents=mode)
        report = sync.sync(docs)
        assert collection_settings(store, "p")["long_documents"] == mode
        expected_tokens = 0
        for doc in docs:
            ids = emb.tokenize([doc.text])[0]
            body = ids[:-1]
            starts = list(range(0, max(len(body) - overlap, 1), size - overlap))
            windows = [body[s:s + size] + [eos] for s in starts]
            own = store.retrieve("p", [point_id(doc.id)], with_vectors=True)[0].vector["dense"]
            stored = [p.vector["dense"] for p in passages_of(store, "p", doc.id)]
            assert len(stored) == len(windows) and store.retrieve("p", [point_id(doc.id)])[0].payload[
                "passages"] == len(windows)
            whole = emb.embed_token_ids([ids], normalize=True).numpy()[0]
            if mode == "one-pass":
                prefixes = [body[:min(s + size, len(body))] + [eos] for s in starts]
                expected = emb.embed_token_ids(prefixes, normalize=True).numpy()
                assert_stored_dense(own, whole, rtol=1e-5, atol=1e-6)
                expected_tokens += len(ids) + len(windows) - 1
            else:
                expected = emb.embed_token_ids(windows, normalize=True).numpy()
                expected_tokens += sum(map(len, windows))
                if mode == "passages":
                    mean = expected.astype(np.float64).sum(axis=0)
                    assert_stored_dense(own, mean / np.linalg.norm(mean), rtol=1e-5, atol=1e-6)
                else:
                    assert_stored_dense(own, whole, rtol=1e-5, atol=1e-6)
                    expected_tokens += len(ids)
            for got, vector in zip(stored, expected):
                assert_stored_dense(got, vector, rtol=1e-5, atol=1e-6)
        assert report.embedded_tokens == expected_tokens
        other = "one-pass" if mode != "one-pass" else "passages"
        with pytest.raises(SettingsConflict, match="long_documents"):
            QdrantSync(store, "p", emb, long_documents=other).sync(docs)


def test_a_collection_that_does_not_record_how_it_embedded_long_documents_keeps_both_passes(tiny_embedder, tmp_path):
    with make_store("edge", tmp_path / "store") as store:
        QdrantSync(store, "p", tiny_embedder, passage_tokens=6, passages_above=0).sync([Document("a", "x y")])
        record = dict(store.collection_info("p").metadata["recemb"])
        del record["long_documents"]  # what an earlier recemb wrote
        store.update_metadata("p", {"recemb": record})
        sync = QdrantSync(store, "p", tiny_embedder)
        sync.sync([Document("a", "x y"), Document("b", "one two three four five six seven eight nine")])
        assert sync.settings.long_documents == "whole+passages"


def test_the_command_caps_the_passages_of_one_document(tmp_path, opts, capsys, no_model):
    from tests.integrations.cli_cases import run

    # the cap names passages: with document granularity it is refused before the model loads
    code, _, err = run(capsys, ["search", "tide", "--per-document", "1", *opts])
    assert code == 2 and "--per-document caps the passages of one document" in err


def test_the_commands_per_document_gives_each_documents_best_passages(tmp_path, opts, capsys):
    from tests.integrations.cli_cases import run, write

    for i in range(3):
        write(tmp_path / "docs" / f"d{i}.md", " ".join(f"tide {i} moon {j} harbour." for j in range(60)))
    assert run(capsys, ["sync", str(tmp_path / "docs"), "--passage-tokens", "12", "--passages-above", "24",
                        *opts])[0] == 0
    code, hits, _ = run(capsys, ["search", "tide moon harbour", "--granularity", "passage", "--limit", "6", *opts])
    assert code == 0 and len(hits) == 6 and len({h["document_id"] for h in hits}) < 6  # uncapped: repeats
    for cap in (1, 2):
        code, hits, _ = run(capsys, ["search", "tide moon harbour", "--granularity", "passage", "--limit", "6",
                                     "--per-document", str(cap), *opts])
        ids = [h["document_id"] for h in hits]
        assert code == 0 and len(ids) == 3 * cap and all(ids.count(d) == cap for d in set(ids))
        assert all(h["excerpt"] for h in hits)
