"""recemb's BM25 gives fastembed's Bm25 vectors bit for bit; windows, settings and arguments behave."""

import json
import re
import shutil
import socket
import tracemalloc
from pathlib import Path
from unittest import mock

import pytest

from recemb_integrations import sparse
from recemb_integrations.sparse import DEFAULT_AVG_LEN, LANGUAGES, Bm25, SparseVector, load_stopwords, stopwords_path

DATA = Path(__file__).parents[3] / "shared" / "data"
IR_SETS = ("adi", "cacm", "cisi", "cranfield", "scifact")
DOCS_PER_SET, QUERIES_PER_SET = 60, 40

HARD = [
    "", " ", "\n\t \r\n", "...!?;:()[]{}", "the and of to a in", "_", "__init__", "a_b _x_ __", "12345 3.14 1,000 007",
    "MiXeD CaSe WoRdS RUNNING Runs", "café naïve résumé Ångström", "ΟΔΟΣ.Α ΟΔΟΣ", "ΟΔΟΣ ΣΑΣ Σ.Α ΑΣ.Σ", "İstanbul IŞIK",
    "ǅemal ǈudevit", "日本語のテキストです 中文文本", "emoji 😀🚀 rocket🚀launch 👍🏽", "a" * 40, "a" * 41,
    "b" * 40 + " " + "c" * 41 + " " + "d" * 39, "don't won't it's O'Neil's rock'n'roll", "state-of-the-art well-known",
    "tabs\tand\nnewlines\r\nhere\x0bform\x0cfeed", "repeat " * 2000, "whale whale Whale WHALE whales whaling",
    "ﬁnance Straße STRASSE ß", "e\u0301 x\u0307 n\u0303o", "zero\u200dwidth joiner\u200bspace",
    "a\u00a0b\u2028c\u3000d",
    "١٢٣ ๑๒๓ Ⅻ ½ ²³", "tie‿bar wavy﹏low", "¿Qué? ¡Sí! «guillemets» “quotes” — dash",
    "x" + "\u0301" * 45, "\ud800 lone surrogate", "null\x00byte",
]
OTHER_LANGUAGES = {
    "german": ["Die Straße ist schön, über den Fluß gehen wir. Häuser und Bäume STRASSE Mädchen",
               "Ich habe es nicht gewusst, aber sie haben es gewusst: Überraschungen überraschen."],
    "russian": ["Съешь же ещё этих мягких французских булок, да выпей чаю. Ёлка ЁЛКА ёлки",
                "Я не знаю, что он хотел сказать, но мы были там и видели всё."],
    "french": ["L'été dernier, nous sommes allés à la plage ; c'était très agréable ! Œuvres, cœur",
               "Je ne sais pas ce qu'il voulait dire, mais nous étions là-bas."],
}


def ir_texts(kind: str, per_set: int) -> list[str]:
    texts = []
    for name in IR_SETS:
        path = DATA / "ir" / name / f"{kind}.jsonl"
        if not path.is_file():
            continue
        with path.open(encoding="utf-8") as f:
            for line, _ in zip(f, range(per_set)):
                row = json.loads(line)
                texts.append(f"{row.get('title', '')}\n{row['text']}".strip())
    return texts


DOCUMENTS = ir_texts("corpus", DOCS_PER_SET)
QUERIES = ir_texts("queries", QUERIES_PER_SET)


class FastembedBm25:
    """fastembed's Bm25 models reading our shipped stopword files from a local folder: no hub, no network."""

    def __init__(self, folder: Path) -> None:
        self.module = pytest.importorskip("fastembed.sparse.bm25")
        self.folder = folder
        self.models: dict[tuple[str, float], object] = {}

    def model(self, language: str, avg_len: float):
        if (language, avg_len) not in self.models:
            shutil.copy(stopwords_path(language), self.folder / f"{language}.txt")
            # specific_model_path is returned before any download is considered (a connection attempt would fail
            # here); cache_dir keeps fastembed's cache folder out of the shared temp directory.
            with mock.patch.object(socket.socket, "connect", side_effect=OSError("test_sparse: no network")):
                self.models[language, avg_len] = self.module.Bm25(
                    "Qdrant/bm25", cache_dir=str(self.folder / "cache"), specific_model_path=str(self.folder),
                    language=language, avg_len=avg_len)
        return self.models[language, avg_len]

    def document(self, language: str, avg_len: float, text: str) -> dict[int, float]:
        return self.model(language, avg_len).raw_embed([text])[0].as_dict()

    def query(self, language: str, text: str) -> dict[int, float]:
        return next(iter(self.model(language, DEFAULT_AVG_LEN).query_embed(text))).as_dict()


@pytest.fixture(scope="module")
def fastembed(tmp_path_factory) -> FastembedBm25:
    return FastembedBm25(tmp_path_factory.mktemp("fastembed-bm25"))


def check_vector(vector: SparseVector) -> None:
    assert list(vector.indices) == sorted(set(vector.indices))
    assert all(0 <= i <= 2**31 for i in vector.indices)
    assert all(type(v) is float for v in vector.values)


def from_data(texts: list[str]) -> list[str]:
    if not texts:
        pytest.skip(f"no IR data under {DATA}")
    return texts


@pytest.mark.parametrize("avg_len", [DEFAULT_AVG_LEN, 3000.0, 17.5])
@pytest.mark.parametrize("source", ["hard", "ir"])
def test_documents_equal_fastembed(fastembed, source, avg_len):
    bm25 = Bm25(avg_len=avg_len)
    for text in HARD if source == "hard" else from_data(DOCUMENTS):
        vector = bm25.embed_document(text)
        check_vector(vector)
        assert vector.as_dict() == fastembed.document("english", avg_len, text), text[:80]


@pytest.mark.parametrize("book", ["moby_dick.txt", "war_and_peace.txt"])
def test_whole_book_equals_fastembed(fastembed, book):
    path = DATA / "long" / book
    if not path.is_file():
        pytest.skip(f"{path} absent")
    text = path.read_text(encoding="utf-8")
    vector = Bm25(avg_len=3000.0).embed_document(text)
    assert len(vector) > 10_000
    assert vector.as_dict() == fastembed.document("english", 3000.0, text)


@pytest.mark.parametrize("source", ["hard", "ir"])
def test_queries_equal_fastembed(fastembed, source):
    bm25 = Bm25()
    for text in HARD if source == "hard" else from_data(QUERIES):
        vector = bm25.embed_query(text)
        check_vector(vector)
        assert set(vector.values) <= {1.0}
        assert vector.as_dict() == fastembed.query("english", text), text[:80]


@pytest.mark.parametrize("language", sorted(OTHER_LANGUAGES))
def test_other_languages_equal_fastembed(fastembed, language):
    bm25 = Bm25(language, avg_len=20.0)
    for text in OTHER_LANGUAGES[language] + HARD[:12]:
        assert bm25.embed_document(text).as_dict() == fastembed.document(language, 20.0, text), text
        assert bm25.embed_query(text).as_dict() == fastembed.query(language, text), text
    assert len(bm25.embed_document(OTHER_LANGUAGES[language][1])) < len(OTHER_LANGUAGES[language][1].split())


def test_empty_vectors():
    bm25 = Bm25()
    for text in ["", "  \n\t", "...!?, ;", "_ _", "The and OF to", "!the! (and) _"]:
        assert len(bm25.embed_document(text)) == 0, text
        assert len(bm25.embed_query(text)) == 0, text
        assert bm25.tokens(text) == [] and bm25.length(text) == 0, text
    assert bm25.embed_documents(["", "whale"])[0] == SparseVector((), ())


def test_tokens_and_length():
    bm25 = Bm25()
    # "_" alone is punctuation, "__init__" a word; "don't" gives the stopwords "don" and "t"
    assert bm25.tokens("The whales, WHALING _ and __init__ don't-stop!") == ["whale", "whale", "__init__", "stop"]
    for text in HARD + DOCUMENTS[:50]:
        assert bm25.length(text) == len(bm25.tokens(text)), text[:80]


def text_with_sigmas() -> str:
    # final sigmas just before a " " or "\n", capital sigmas between letters, a sigma before "." and one alone
    return "ΟΔΟΣ ΟΔΟΣΑ ΟΔΟΣ\nΟΔΟΣ.Α ΣΑΣ Σ ΑΣ\tΣΑ ΟΔΟΣ\n\nΟΔΟΣ" * 3


# Text without spaces: punctuation (and sigmas right before it) is where windows are cut.
GLUED = ["no.spaces,here;at-all!" * 10, "ΟΔΟΣ.ΑΣ,Σ;ΟΔΟΣ…ΣΑ'Σ" * 8, "\u0130\u0130.\u0130x\u00e9\u0301-" * 10]
WINDOW_TEXTS = [
    text_with_sigmas(), "nospacesatallinthistext_" * 10, "tab\tseparated\tonly\ttext", "\n\nlead and trail  ",
    *GLUED]
# Long runs of \w: cut inside only where the token there is dropped (longer than 40 characters) on both sides.
LONG_RUNS = ["x" * 300 + ".y" + "\u0130" * 100 + "z" * 200 + "ΣΑΣ" * 50 + "a" * 39 + "." + "b" * 41,
             "w" * 100 + "\u0130" + "v" * 90 + "ΟΔΟΣ" * 30]


def test_windows_cut_before_space_or_newline(monkeypatch):
    monkeypatch.setattr(sparse, "TEXT_WINDOW_CHARS", 7)
    for text in WINDOW_TEXTS + HARD:
        windows = list(sparse._windows(text))
        assert "".join(windows) == text
        # before a space or newline where the window has one, else before another character that is not \w
        assert all(re.match(r"\W", w[0]) for w in windows[1:])
        assert all(len(w) <= 7 or not (set(w[1:8]) & {" ", "\n"}) and not re.search(r"\W", w[7 - 7 // 2 : 8])
                   for w in windows)
        # a cut before punctuation only where the window before it had no space or newline to cut at
        assert all(w[0] in " \n" or not (set(prev[1:8]) & {" ", "\n"}) for prev, w in zip(windows, windows[1:]))
    assert len(list(sparse._windows(text_with_sigmas()))) > 10
    assert all(len(list(sparse._windows(text))) > 10 for text in GLUED)
    assert list(sparse._windows(WINDOW_TEXTS[1])) == [WINDOW_TEXTS[1]]  # no cut point: one window
    monkeypatch.setattr(sparse, "TEXT_WINDOW_CHARS", 100)
    for text in LONG_RUNS:  # with the longest token kept, long runs are cut too, each side over 40 characters
        windows = list(sparse._windows(text, 40))
        assert "".join(windows) == text and len(windows) > 2
        assert all(len(w) > 41 for w in windows)


@pytest.mark.parametrize("window", [1, 2, 3, 5, 7, 11, 60, 97])
def test_windows_change_nothing(monkeypatch, window):
    texts = WINDOW_TEXTS + LONG_RUNS + HARD + DOCUMENTS[:40]
    bm25 = Bm25(avg_len=10.0)
    greek = Bm25("greek", avg_len=10.0)
    whole = [(b.tokens(t), b.embed_document(t), b.embed_query(t), b.length(t)) for t in texts for b in (bm25, greek)]
    monkeypatch.setattr(sparse, "TEXT_WINDOW_CHARS", window)
    windowed = [(b.tokens(t), b.embed_document(t), b.embed_query(t), b.length(t)) for t in texts for b in (bm25, greek)]
    assert windowed == whole
    assert len(list(sparse._windows(texts[0]))) > (10 if window <= 11 else 1)


def test_memory_does_not_grow_with_the_text(monkeypatch):
    monkeypatch.setattr(sparse, "TEXT_WINDOW_CHARS", 1 << 16)
    text = " ".join(f"word{i % 1000}" for i in range(300_000))  # 2.6 M characters; all its tokens: ~20 MiB
    bm25 = Bm25()
    tracemalloc.start()
    try:
        vector = bm25.embed_document(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(vector) == 1000
    assert peak < 4 << 20, f"embed_document peaked at {peak / 2**20:.1f} MiB"


def test_final_sigma_depends_on_the_space():
    greek = Bm25("greek", stopwords=[])
    assert greek.tokens("ΟΔΟΣ.Α") != greek.tokens("ΟΔΟΣΑ")
    assert sparse._raw_tokens("ΟΔΟΣ.Α ΣΑΣ").__next__() == ["οδος", "α", "σας"]


def test_settings_round_trip():
    text = " ".join(OTHER_LANGUAGES["german"] + DOCUMENTS[:1])
    for language in LANGUAGES:
        bm25 = Bm25(language, k=0.9, b=0.4, avg_len=1234.5, token_max_length=30)
        settings = json.loads(json.dumps(bm25.settings()))
        assert settings == bm25.settings()
        assert settings["algorithm"] == "bm25" and len(settings["stopwords"]) == 16
        again = Bm25.from_settings(settings)
        assert again.settings() == settings
        assert again.stopwords == bm25.stopwords
        assert again.embed_document(text) == bm25.embed_document(text)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"stopwords": "0123456789abcdef"}, "stopwords digest '0123456789abcdef' is not that of the english list"),
        ({"algorithm": "splade"}, "not BM25 settings"),
        ({"extra": 1}, "exactly the keys"),
        ({"language": "klingon"}, "unsupported BM25 language 'klingon'"),
        ({"avg_len": -1.0}, "avg_len must be a finite number > 0"),
    ],
)
def test_from_settings_refuses(change, message):
    settings = {**Bm25().settings(), **change}
    with pytest.raises(ValueError, match=message):
        Bm25.from_settings(settings)


def test_from_settings_refuses_custom_stopwords_and_missing_keys():
    with pytest.raises(ValueError, match="stopwords digest"):
        Bm25.from_settings(Bm25(stopwords=["whale"]).settings())
    settings = Bm25().settings()
    del settings["k"]
    with pytest.raises(ValueError, match=r"exactly the keys .* got \['algorithm', 'avg_len', 'b', 'language'"):
        Bm25.from_settings(settings)


def test_with_avg_len_shares_the_rest():
    bm25 = Bm25("german", k=1.5, b=0.5)
    other = bm25.with_avg_len(999.0)
    assert other._stemmer is bm25._stemmer and other.stopwords is bm25.stopwords
    assert other.settings() == {**bm25.settings(), "avg_len": 999.0}
    assert bm25.avg_len == DEFAULT_AVG_LEN
    text = OTHER_LANGUAGES["german"][0]
    assert other.embed_document(text) == Bm25("german", k=1.5, b=0.5, avg_len=999.0).embed_document(text)
    assert other.embed_document(text) != bm25.embed_document(text)
    with pytest.raises(ValueError, match="avg_len must be a finite number > 0, got 0.0"):
        bm25.with_avg_len(0)


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({"language": "klingon"}, ValueError, "unsupported BM25 language 'klingon'; supported: arabic, danish, "),
        ({"k": 0}, ValueError, "k must be a finite number > 0, got 0.0"),
        ({"k": float("nan")}, ValueError, "k must be a finite number > 0, got nan"),
        ({"k": "1.2"}, TypeError, "k must be a number, got str"),
        ({"b": -0.1}, ValueError, r"b must be in \[0, 1\], got -0.1"),
        ({"b": 1.5}, ValueError, r"b must be in \[0, 1\], got 1.5"),
        ({"avg_len": 0.0}, ValueError, "avg_len must be a finite number > 0, got 0.0"),
        ({"avg_len": float("inf")}, ValueError, "avg_len must be a finite number > 0, got inf"),
        ({"avg_len": None}, TypeError, "avg_len must be a number, got NoneType"),
        ({"token_max_length": 0}, ValueError, "token_max_length must be >= 1, got 0"),
        ({"token_max_length": 40.0}, TypeError, "token_max_length must be an int, got float"),
        ({"stopwords": "the"}, TypeError, "stopwords must be an iterable of words, not a str"),
        ({"stopwords": ["the", 1]}, TypeError, "expects text as str, got int"),
    ],
)
def test_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        Bm25(**kwargs)


@pytest.mark.parametrize("method", ["tokens", "length", "embed_document", "embed_query"])
@pytest.mark.parametrize("value", [None, b"bytes", 3, ["a list"]])
def test_non_str_text(method, value):
    with pytest.raises(TypeError, match="expects text as str"):
        getattr(Bm25(), method)(value)


def test_embed_documents():
    bm25 = Bm25()
    texts = ["a whale", "the sea and the whale", ""]
    assert bm25.embed_documents(texts) == [bm25.embed_document(t) for t in texts]
    assert bm25.embed_documents(iter(texts)) == bm25.embed_documents(texts)
    with pytest.raises(TypeError, match="not a str; use embed_document"):
        bm25.embed_documents("a whale")


def test_custom_stopwords_are_lowercased_and_replace_the_list():
    bm25 = Bm25(stopwords=["The", "WHALE"])
    assert bm25.tokens("The whale and a Whale of the sea") == ["and", "a", "of", "sea"]
    assert Bm25(stopwords=[]).tokens("the whale") == ["the", "whale"]
    assert Bm25(stopwords=["whale"]).settings()["stopwords"] != Bm25().settings()["stopwords"]


def test_token_length_limit_applies_before_stemming():
    assert Bm25(token_max_length=5).tokens("whale whales whaling") == ["whale"]
    assert Bm25().tokens("a" * 40 + " " + "b" * 41) == ["a" * 40]


def test_shipped_stopwords():
    for language in LANGUAGES:
        path = stopwords_path(language)
        if language == "tamil":
            assert path is None and load_stopwords(language) == frozenset()
            assert Bm25("tamil").tokens("ஒரு ஊரில்") != []
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        comments = [line for line in lines if line.startswith("#")]
        assert lines[: len(comments)] == comments and all(line.startswith("# ") for line in comments)
        words = lines[len(comments):]
        assert words and all(word and word == word.strip() for word in words)
        assert load_stopwords(language) == frozenset(words)
    assert len(load_stopwords("english")) == 179
    assert {"the", "and", "don", "t", "wouldn't"} <= load_stopwords("english")
    with pytest.raises(ValueError, match="unsupported BM25 language 'latin'"):
        stopwords_path("latin")


def test_sparse_vector():
    vector = SparseVector((3, 7), (0.5, 1.0))
    assert len(vector) == 2 and vector.as_dict() == {3: 0.5, 7: 1.0}
    with pytest.raises(ValueError, match="2 indices but 1 values"):
        SparseVector((3, 7), (0.5,))


@pytest.mark.parametrize("text, reason", [
    ("", "it is empty"),
    ("   \n", "it is empty"),
    ("?! ...", "no words, only punctuation"),
    ("the and of", "3 english stopwords"),
    ("混合検索で長い文書を見つける方法について説明してくださいこれは四十文字を超える日本語のクエリです",
     "1 longer than 40 characters (text without spaces between words, such as Chinese or Japanese"),
    ("the " + "x" * 41, "1 english stopword, 1 longer than 40 characters"),
])
def test_why_a_query_has_no_terms(text, reason):
    bm25 = Bm25()
    assert len(bm25.embed_query(text)) == 0
    assert reason in bm25.why_no_terms(text)
