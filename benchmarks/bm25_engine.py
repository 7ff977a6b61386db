"""recemb's BM25 sparse vectors against Qdrant Edge's built-in ``Bm25``: token ids, values, speed, memory.

    python3 benchmarks/bm25_engine.py                      # about 25 s on 2 cores
    python3 benchmarks/bm25_engine.py --memory-mb ""       # without the peak-RSS runs
    python3 benchmarks/bm25_engine.py --memory-mb 10,50 --repeats 7 --out benchmarks/results/bm25_engine.json

Needs ``qdrant-edge-py`` (0.9), ``mmh3`` and ``py-rust-stemmers`` (``pip install -e ".[qdrant]"``) and the
shared public-domain books (Project Gutenberg). Nothing is downloaded and no server is contacted.

For every input the two encoders get the same settings (language, k = 1.2, b = 0.75, avg_len) and the sparse
vectors are compared as maps token id -> value: ids shared, only recemb's, only the engine's, with the words
behind the differing ids, and the largest absolute difference of the values on shared ids. The inputs:

- whole books, documents and queries, at a book-sized avg_len (3000), again with every "_" made a space
  (Gutenberg's italics), and Moby Dick (200 KB and whole) at a few avg_len values;
- hostile short strings (punctuation, digits, apostrophes, hyphens, underscores, case, stopwords only, empty,
  over-long words, Greek/Cyrillic/Turkish casing, CJK, Arabic with vowel marks, Devanagari, Tamil, Thai,
  emoji...);
- per language of recemb's ``Bm25``: whether the engine accepts it, whether its stopword list is the same
  (each list word asked of the engine), and whether its Snowball stemmer gives the same stems (stopwords off
  on both sides);
- both document vectors of each book and hostile string upserted into an Edge shard and read back (what a
  collection holds: Qdrant keeps sparse values as float32);
- timing (median of ``--repeats`` interleaved runs, one process) on 200 KB and 1 MB of Moby Dick, and peak
  RSS of each encoder on a 10 MB and a 50 MB text in a fresh process.

The engine's own tokens are recovered exactly: which characters it keeps inside a token is asked of the
engine itself (one probe per distinct character: "x" + c + "z" gives one token or two); its tokens are then
lowercased, stopword-filtered and stemmed like recemb's, and that emulation is checked id for id and value
for value against the engine's vectors (the ``emul`` column): where it matches, it names every differing id
and gives the engine's document length.

Writes benchmarks/results/bm25_engine.json (or --out).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOKS = ROOT.parent / "shared" / "data" / "long"
OUT = ROOT / "benchmarks" / "results" / "bm25_engine.json"
sys.path.insert(0, str(ROOT))

import mmh3  # noqa: E402
import py_rust_stemmers  # noqa: E402
import qdrant_edge as E  # noqa: E402

from recemb_integrations.sparse import LANGUAGES, Bm25, load_stopwords  # noqa: E402

K, B = 1.2, 0.75
BOOK_AVG_LEN = 3000.0
AVG_LENS = (17.5, 256.0, 3000.0, 100_000.0)
EXAMPLES = 6

HOSTILE: list[tuple[str, str]] = [
    ("empty", ""),
    ("whitespace only", " \n\t \r\n"),
    ("punctuation only", "...!?;:()[]{} -- '' \"\""),
    ("stopwords only", "the and of to a in it is was he that"),
    ("stopwords, uppercase", "THE And OF To A"),
    ("digits", "12345 3.14 1,000 007 2nd 1990s"),
    ("unicode digits", "١٢٣ ๑๒๓ Ⅻ ½ ²³"),
    ("mixed case", "MiXeD CaSe WoRdS RUNNING Runs whale Whale WHALE"),
    ("apostrophes", "don't won't it's O'Neil's rock'n'roll Ahab’s whale's"),
    ("hyphenated", "state-of-the-art well-known sperm-whale try-works"),
    ("underscores", "__init__ a_b snake_case_name _emphasis_ _whale_"),
    ("accents", "café naïve résumé Ångström façade"),
    ("combining marks", "e\u0301te\u0301 x\u0307 n\u0303o"),
    ("ligature, sharp s", "ﬁnance Straße STRASSE ß"),
    ("Greek final sigma", "ΟΔΟΣ.Α ΟΔΟΣ ΣΑΣ Σ.Α ΑΣ.Σ"),
    ("Turkish dotted I", "İstanbul IŞIK ılık"),
    ("titlecase digraphs", "ǅemal ǈudevit"),
    ("Cyrillic", "Съешь же ещё этих мягких французских булок, да выпей чаю. Ёлка"),
    ("CJK short", "日本語のテキストです 中文文本"),
    ("CJK over 40 chars", "我们今天在这里讨论的是关于信息检索系统中稀疏向量表示的设计问题"
                          "以及它们在大规模文本集合上的表现如何"),
    ("Korean", "안녕하세요 세계 검색 엔진"),
    ("Arabic", "مرحبا بالعالم هذا نص عربي"),
    ("Arabic with vowel marks", "مَرْحَبًا بِالْعَالَمِ"),
    ("Devanagari", "नमस्ते दुनिया यह हिंदी पाठ है"),
    ("Tamil", "வணக்கம் உலகம் தமிழ் உரை"),
    ("Thai", "มาทำงานกันเถอะ ภาษาไทย"),
    ("emoji", "emoji 😀🚀 rocket🚀launch 👍🏽 ❤️"),
    ("40-char word", "c" * 40),
    ("41-char word", "a" * 41),
    ("41-char word, 38-char stem", "b" + "a" * 37 + "ing"),
    ("1000-char word", "x" * 1000),
    ("zero-width characters", "zero\u200dwidth joiner\u200bspace soft\u00adhyphen"),
    ("odd spaces", "a\u00a0b\u2028c\u3000d tabs\tand\nnewlines\r\nhere\x0bform\x0cfeed"),
    ("NUL byte", "null\x00byte"),
    ("lone surrogate", "\ud800 lone surrogate"),
    ("repeated word", "repeat " * 2000),
]

# A few sentences per language, for the stemmer check beyond the stopword lists.
SAMPLES = {
    "danish": "Børnene legede i haven, mens de voksne talte om de gamle huse og skibene i havnen.",
    "dutch": "De kinderen speelden in de tuinen terwijl de ouders over de oude huizen en schepen praatten.",
    "english": ("The whalers were hunting whales while the sailors "
                "talked about the oldest ships and harbours."),
    "finnish": ("Lapset leikkivät puutarhoissa, kun aikuiset puhuivat "
                "vanhoista taloista ja laivoista satamassa."),
    "french": ("Les enfants jouaient dans les jardins pendant que les "
               "parents parlaient des anciennes maisons."),
    "german": ("Die Kinder spielten in den Gärten, während die Eltern "
               "über die alten Häuser und Schiffe sprachen."),
    "greek": "Τα παιδιά έπαιζαν στους κήπους ενώ οι γονείς μιλούσαν για τα παλιά σπίτια και τα πλοία.",
    "hungarian": ("A gyerekek a kertekben játszottak, miközben a szülők a "
                  "régi házakról és hajókról beszéltek."),
    "italian": ("I bambini giocavano nei giardini mentre i genitori "
                "parlavano delle vecchie case e delle navi."),
    "norwegian": "Barna lekte i hagene mens de voksne snakket om de gamle husene og skipene i havnen.",
    "portuguese": ("As crianças brincavam nos jardins enquanto os pais "
                   "falavam das casas antigas e dos navios."),
    "romanian": "Copiii se jucau în grădini în timp ce părinții vorbeau despre casele vechi și corăbii.",
    "russian": "Дети играли в садах, пока родители говорили о старых домах и кораблях в гавани.",
    "spanish": ("Los niños jugaban en los jardines mientras los padres "
                "hablaban de las casas antiguas y los barcos."),
    "swedish": ("Barnen lekte i trädgårdarna medan föräldrarna pratade "
                "om de gamla husen och skeppen i hamnen."),
    "turkish": ("Çocuklar bahçelerde oynarken anne babalar eski evler ve "
                "limandaki gemiler hakkında konuştular."),
    "arabic": "كان الأطفال يلعبون في الحدائق بينما كان الآباء يتحدثون عن البيوت القديمة والسفن.",
    "tamil": "குழந்தைகள் தோட்டங்களில் விளையாடினர் பெற்றோர்கள் பழைய வீடுகளைப் பற்றி பேசினர்.",
}


def token_id(token: str) -> int:
    return abs(mmh3.hash(token))


def f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def engine_model(language: str | None = "english", avg_len: float = 256.0, **extra) -> E.Bm25:
    return E.Bm25(E.Bm25Config(k=K, b=B, avg_len=avg_len, language=language, **extra))


def engine_doc(model: E.Bm25, text: str) -> dict[int, float]:
    v = model.embed_document(text)
    return dict(zip(v.indices, v.values))


def engine_query(model: E.Bm25, text: str) -> dict[int, float]:
    v = model.embed_query(text)
    return dict(zip(v.indices, v.values))


class EngineWords:
    """Which characters the engine's Word tokenizer keeps inside a token, asked of the engine itself, and an
    emulation of its whole pipeline (split, lowercase per token, stopwords, Snowball stem) to name its ids."""

    def __init__(self) -> None:
        self.probe = E.Bm25(E.Bm25Config(stopwords=E.StopwordsSet(custom=set()), stemmer=E.DisabledStemmer()))
        self.word_chars: dict[str, bool] = {}
        self._splitters: dict[frozenset, re.Pattern] = {}

    def is_word_char(self, c: str) -> bool:
        if c not in self.word_chars:
            try:
                self.word_chars[c] = len(self.probe.embed_query("x" + c + "z").indices) == 1
            except UnicodeEncodeError:  # a lone surrogate cannot even be passed to the engine
                self.word_chars[c] = False
        return self.word_chars[c]

    def raw_tokens(self, text: str) -> list[str]:
        separators = frozenset(c for c in set(text) if not self.is_word_char(c))
        if not separators:
            return [text] if text else []
        pattern = self._splitters.get(separators)
        if pattern is None:
            pattern = re.compile("[" + "".join(re.escape(c) for c in sorted(separators)) + "]+")
            if len(self._splitters) < 64:
                self._splitters[separators] = pattern
        return [t for t in pattern.split(text) if t]

    def pipeline(self, text: str, stemmer, stopwords: frozenset[str], max_len: int | None = None
                 ) -> list[tuple[str, str]]:
        """(raw token, final token) for every token the engine keeps, in text order."""
        out, cache = [], {}
        for raw in self.raw_tokens(text):
            final = cache.get(raw)
            if final is None:
                lower = raw.lower()
                final = "" if lower in stopwords else stemmer.stem_word(lower)
                if max_len is not None and len(final) > max_len:  # the engine filters after stemming
                    final = ""
                cache[raw] = final
            if final:
                out.append((raw, final))
        return out


def emulate_engine_doc(tokens: list[tuple[str, str]], avg_len: float) -> tuple[dict[int, float], int]:
    counts: dict[str, int] = {}
    for _, t in tokens:
        counts[t] = counts.get(t, 0) + 1
    doc_len = len(tokens)
    out = {}
    for t, tf in counts.items():
        value = tf * (K + 1) / (tf + K * (1 - B + B * doc_len / avg_len))
        out[token_id(t)] = f32(value)
    return out, doc_len


def compare(ours: dict[int, float], engine: dict[int, float] | None) -> dict:
    if engine is None:
        return {"ours": len(ours), "engine": None}
    shared = ours.keys() & engine.keys()
    diffs = [abs(ours[i] - engine[i]) for i in shared]
    rel = [abs(ours[i] - engine[i]) / abs(ours[i]) for i in shared if ours[i]]
    return {"ours": len(ours), "engine": len(engine), "shared": len(shared),
            "only_ours": len(ours.keys() - engine.keys()), "only_engine": len(engine.keys() - ours.keys()),
            "max_abs_diff": max(diffs, default=0.0), "max_rel_diff": max(rel, default=0.0),
            "identical": ours == engine}


def context(text: str, raw: str, word: str) -> str:
    """Text around the first whole-token occurrence of raw (``word``: the characters a token is made of)."""
    found = re.search(f"(?<!{word}){re.escape(raw)}(?!{word})", text, flags=re.IGNORECASE)
    if found is None:
        return ""
    at = found.start()
    return text[max(0, at - 25): at + len(raw) + 25].replace("\n", " ")


def name_differences(text: str, bm25: Bm25, ours: dict, engine: dict,
                     engine_tokens: list[tuple[str, str]]) -> dict:
    only_ours = ours.keys() - engine.keys()
    only_engine = engine.keys() - ours.keys()
    out = {"only_ours": [], "only_engine": []}
    if not (only_ours or only_engine):
        return out
    if only_ours:
        seen = set()
        for stem in bm25.tokens(text):
            i = token_id(stem)
            if i in only_ours and i not in seen:
                seen.add(i)
                out["only_ours"].append({"token": stem, "context": context(text, stem, r"\w")})
                if len(seen) >= EXAMPLES:
                    break
    if only_engine:
        seen = set()
        for raw, final in engine_tokens:
            i = token_id(final)
            if i in only_engine and i not in seen:
                seen.add(i)
                out["only_engine"].append(
                    {"token": final, "raw": raw, "context": context(text, raw, r"[^\W_]")})
                if len(seen) >= EXAMPLES:
                    break
    return out


def run_input(words: EngineWords, text: str, language: str, avg_len: float, variants: dict[str, dict],
              name_it: bool = True, vectors: list | None = None) -> dict:
    """ours vs each engine variant on one text, documents and queries."""
    bm25 = Bm25(language, k=K, b=B, avg_len=avg_len)
    ours_doc = bm25.embed_document(text).as_dict()
    ours_query = bm25.embed_query(text).as_dict()
    ours_stems = bm25.tokens(text)
    ours_tf: dict[int, int] = {}
    for stem in ours_stems:
        ours_tf[token_id(stem)] = ours_tf.get(token_id(stem), 0) + 1
    row = {"ours_doc_len": len(ours_stems), "variants": {}}
    stemmer = py_rust_stemmers.SnowballStemmer(language)
    for vname, extra in variants.items():
        model = engine_model(language, avg_len, **extra)
        try:
            doc, query = engine_doc(model, text), engine_query(model, text)
        except UnicodeEncodeError as e:
            row["variants"][vname] = {"error": f"{type(e).__name__}: {e}"}
            continue
        tokens = words.pipeline(text, stemmer, bm25.stopwords, extra.get("max_token_len"))
        emulated, engine_len = emulate_engine_doc(tokens, avg_len)
        v = {"doc": compare(ours_doc, doc), "query": compare(ours_query, query),
             "engine_doc_len": engine_len,
             "emulated": emulated.keys() == doc.keys()
             and all(abs(emulated[i] - doc[i]) <= 1e-6 for i in doc)}
        if v["emulated"]:  # shared ids whose term count differs (a stem also counted under another token)
            engine_tf: dict[int, int] = {}
            for _, final in tokens:
                engine_tf[token_id(final)] = engine_tf.get(token_id(final), 0) + 1
            shared = ours_doc.keys() & doc.keys()
            differ = sorted(i for i in shared if ours_tf[i] != engine_tf[i])
            same = [abs(ours_doc[i] - doc[i]) for i in shared if ours_tf[i] == engine_tf[i]]
            v["doc"]["shared_tf_differ"] = len(differ)
            v["doc"]["max_abs_diff_same_tf"] = max(same, default=0.0)
            names = {token_id(t): t for t in ours_stems}
            v["doc"]["tf_differ_examples"] = [
                {"token": names.get(i), "ours_tf": ours_tf[i], "engine_tf": engine_tf[i]}
                for i in sorted(differ, key=lambda i: -abs(ours_doc[i] - doc[i]))[:EXAMPLES]]
        else:
            v["engine_doc_len"] = None
        # what the values would differ by if only the engine's float32 storage differed
        v["doc"]["max_abs_diff_vs_f32_ours"] = max(
            (abs(f32(ours_doc[i]) - doc[i]) for i in ours_doc.keys() & doc.keys()), default=0.0)
        if name_it:
            v["examples"] = name_differences(text, bm25, ours_doc, doc, tokens)
        row["variants"][vname] = v
        if vname == "default" and vectors is not None:
            vectors.append((row, ours_doc, doc))
    return row


def stored_check(vectors: list[tuple[dict, dict, dict]]) -> None:
    """Both document vectors of each input upserted into one temporary Edge shard (a sparse vector with the
    IDF modifier, as recemb's stores make it) and read back: what a collection holds, whoever wrote it."""
    folder = tempfile.mkdtemp(prefix="recemb-bm25-engine-")
    try:
        shard = E.EdgeShard.create(folder, E.EdgeConfig(
            sparse_vectors={"bm25": E.EdgeSparseVectorParams(modifier=E.Modifier.Idf)}))
        points, owners = [], {}
        for row, ours, engine in vectors:
            if not ours or not engine:
                continue
            for vec in (ours, engine):
                indices = sorted(vec)
                points.append(E.Point(id=len(points) + 1, payload={}, vector={
                    "bm25": E.SparseVector(indices=indices, values=[vec[i] for i in indices])}))
                owners.setdefault(id(row), (row, []))[1].append(len(points))
        for start in range(0, len(points), 64):
            shard.update(E.UpdateOperation.upsert_points(points[start:start + 64]))
        records = shard.retrieve(list(range(1, len(points) + 1)), with_payload=False, with_vector=True)
        stored = {r.id: dict(zip(r.vector["bm25"].indices, r.vector["bm25"].values)) for r in records}
        shard.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for row, (a, b) in owners.values():
        ours, engine = stored[a], stored[b]
        shared = ours.keys() & engine.keys()
        row["variants"]["default"]["stored"] = {
            "identical": ours == engine, "shared_values_differ": sum(ours[i] != engine[i] for i in shared),
            "shared_values_differ_same_tf": None}
        doc = row["variants"]["default"]["doc"]
        if "shared_tf_differ" in doc:  # ids whose counts agree: are their stored values the same?
            row["variants"]["default"]["stored"]["shared_values_differ_same_tf"] = (
                sum(ours[i] != engine[i] for i in shared) - doc["shared_tf_differ"])


def books(folder: Path) -> list[tuple[str, str]]:
    paths = sorted(folder.glob("*.txt"))
    if not paths:
        sys.exit(f"no books under {folder}")
    return [(p.stem, p.read_text(encoding="utf-8")) for p in paths]


def timing(text: str, repeats: int) -> dict:
    ours = Bm25(avg_len=BOOK_AVG_LEN)
    engine = engine_model("english", BOOK_AVG_LEN)
    t_ours, t_engine = [], []
    for _ in range(repeats):
        began = time.perf_counter()
        engine.embed_document(text)
        t_engine.append(time.perf_counter() - began)
        began = time.perf_counter()
        ours.embed_document(text)
        t_ours.append(time.perf_counter() - began)
    return {"chars": len(text), "ours_ms": 1e3 * statistics.median(t_ours),
            "engine_ms": 1e3 * statistics.median(t_engine),
            "speedup": statistics.median(t_ours) / statistics.median(t_engine)}


def query_timing(query: str, n: int = 2000) -> dict:
    ours, engine = Bm25(), engine_model()
    began = time.perf_counter()
    for _ in range(n):
        engine.embed_query(query)
    t_engine = (time.perf_counter() - began) / n
    began = time.perf_counter()
    for _ in range(n):
        ours.embed_query(query)
    t_ours = (time.perf_counter() - began) / n
    return {"query": query, "ours_us": 1e6 * t_ours, "engine_us": 1e6 * t_engine}


MEMORY_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
which, mb, book = sys.argv[2], float(sys.argv[3]), sys.argv[4]
if which == "engine":
    import qdrant_edge as E
    model = E.Bm25(E.Bm25Config(avg_len=3000.0))
else:
    from recemb_integrations.sparse import Bm25
    model = Bm25(avg_len=3000.0)
one = open(book, encoding="utf-8").read()
text = one * max(1, round(mb * 1e6 / len(one)))
del one
def status(key):  # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent across fork and exec
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(key)) / 1024
before, peak_before = status("VmRSS:"), status("VmHWM:")
began = time.perf_counter()
v = model.embed_document(text)
seconds = time.perf_counter() - began
peak = status("VmHWM:")
print(json.dumps({"chars": len(text), "rss_before_mib": before, "peak_before_mib": peak_before,
                  "peak_rss_mib": peak,
                  "peak_over_before_mib": peak - before, "seconds": seconds, "ids": len(v.indices)}))
"""


def memory(sizes: list[float], book: Path) -> list[dict]:
    rows = []
    for mb in sizes:
        for which in ("ours", "engine"):
            proc = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(ROOT), which, str(mb), str(book)],
                                  capture_output=True, text=True, timeout=600)
            row = {"encoder": which, "target_mb": mb}
            if proc.returncode == 0:
                row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
            else:
                row["error"] = proc.stderr.strip()[-500:]
            rows.append(row)
    return rows


def languages(words: EngineWords, book_vocabulary: set[str]) -> list[dict]:
    """Per language of recemb's Bm25: does the engine accept it, same stopwords, same stems."""
    all_lists = {lang: load_stopwords(lang) for lang in LANGUAGES}
    union = set().union(*all_lists.values())
    rows = []
    for lang in LANGUAGES:
        row = {"language": lang}
        try:
            engine = engine_model(lang)
            row["engine_accepts"] = True
        except ValueError as e:
            row["engine_accepts"] = False
            row["engine_error"] = str(e)
        ours_list = all_lists[lang]
        row["ours_stopwords"] = len(ours_list)

        def single(word: str) -> bool:  # one token under both tokenizers
            return bool(re.fullmatch(r"[^\W_]+", word)) and all(words.is_word_char(c) for c in word)

        if row["engine_accepts"]:
            ours = Bm25(lang)
            singles = sorted(w for w in ours_list if single(w))
            kept = [w for w in singles if engine.embed_query(w).indices]
            row["stopwords_checked"] = len(singles)
            row["stopwords_not_multi_token"] = len(ours_list) - len(singles)
            row["ours_stopwords_engine_keeps"] = len(kept)
            row["ours_stopwords_engine_keeps_examples"] = kept[:8]
            candidates = sorted(w for w in union | (book_vocabulary if lang == "english" else set())
                                if single(w) and w not in ours_list)
            extra = [w for w in candidates
                     if not engine.embed_query(w).indices and ours.embed_query(w).indices]
            row["engine_only_stopwords_found"] = len(extra)
            row["engine_only_stopwords_examples"] = extra[:8]
            row["engine_only_candidates"] = len(candidates)
        # stemmer: stopwords off on both sides, one word at a time
        stem_words = sorted({w for w in ours_list if single(w)}
                            | {w.lower() for w in re.findall(r"[^\W_]+", SAMPLES.get(lang, "")) if single(w)}
                            | ({w for w in book_vocabulary if single(w)} if lang == "english" else set()))
        ours_nostop = Bm25(lang, stopwords=[])
        try:
            engine_nostop = E.Bm25(E.Bm25Config(
                language=lang if row["engine_accepts"] else None, stopwords=E.StopwordsSet(custom=set()),
                stemmer=E.SnowballParams(getattr(E.SnowballLanguage, lang.capitalize()))))
        except (ValueError, AttributeError) as e:
            row["stemmer_error"] = str(e)
            rows.append(row)
            continue
        differ = [w for w in stem_words
                  if set(ours_nostop.embed_query(w).indices) != set(engine_nostop.embed_query(w).indices)]
        row["stem_words_checked"] = len(stem_words)
        row["stem_words_differ"] = len(differ)
        row["stem_differ_examples"] = [
            {"word": w, "ours": ours_nostop.tokens(w),
             "engine": [f for _, f in words.pipeline(w, py_rust_stemmers.SnowballStemmer(lang), frozenset())]}
            for w in differ[:5]]
        # the sample sentence as a document, each side with its own default settings for the language
        sample = SAMPLES.get(lang)
        if sample and row["engine_accepts"]:
            ours_doc = Bm25(lang, avg_len=20.0).embed_document(sample).as_dict()
            row["sample_doc"] = compare(ours_doc, engine_doc(engine_model(lang, 20.0), sample))
        rows.append(row)
    # languages the engine accepts beyond recemb's
    names = sorted({n.lower() for n in dir(E.Language) + dir(E.SnowballLanguage) if n[0].isupper()})
    accepted = []
    for n in names:
        try:
            engine_model(n)
            accepted.append(n)
        except ValueError:
            pass
    rows.append({"engine_accepted_language_names": accepted,
                 "engine_stopword_languages": sorted(n.lower() for n in dir(E.Language) if n[0].isupper()),
                 "engine_snowball_languages": sorted(
                     n.lower() for n in dir(E.SnowballLanguage) if n[0].isupper())})
    return rows


def fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return "0" if x == 0 else f"{x:.1e}"
    return str(x)


def print_rows(title: str, rows: list[dict], key: str) -> None:
    """One line per input, variant and kind; a max40 line only where it differs from the default one."""
    print(f"\n{title}")
    head = (f"{'input':34} {'variant':7} {'kind':5} {'ours':>6} {'engine':>6} {'shared':>6} {'ours-':>5} "
            f"{'eng-':>5} {'tf!=':>4} {'max|d|':>8} {'sameTF':>8} {'docLen o/e':>13} {'emul':4}  "
            "examples (ours-only | engine-only)")
    print(head)
    print("-" * len(head))
    for r in rows:
        default = r["variants"].get("default", {})
        for vname, v in r["variants"].items():
            if vname != "default" and all(v.get(k) == default.get(k) for k in ("doc", "query", "error")):
                continue
            if "error" in v:
                print(f"{r[key][:34]:34} {vname:7} engine error: {v['error'][:80]}")
                continue
            for kind in ("doc", "query"):
                c = v[kind]
                if kind == "doc":
                    ex = ""
                    if v.get("examples"):
                        a = ", ".join(e["token"][:16] for e in v["examples"]["only_ours"][:3])
                        b = ", ".join(e["token"][:16] for e in v["examples"]["only_engine"][:3])
                        ex = f"{a} | {b}" if a or b else ""
                    emul = "yes" if v["emulated"] else "NO"
                    print(f"{r[key][:34]:34} {vname:7} {kind:5} {c['ours']:6} {c['engine']:6} "
                          f"{c['shared']:6} {c['only_ours']:5} {c['only_engine']:5} "
                          f"{fmt(c.get('shared_tf_differ')):>4} {fmt(c['max_abs_diff']):>8} "
                          f"{fmt(c.get('max_abs_diff_same_tf')):>8} "
                          f"{r['ours_doc_len']:>6}/{fmt(v['engine_doc_len']):<6} {emul:4}  {ex}")
                else:
                    print(f"{'':34} {vname:7} {kind:5} {c['ours']:6} {c['engine']:6} {c['shared']:6} "
                          f"{c['only_ours']:5} {c['only_engine']:5}      {fmt(c['max_abs_diff']):>8}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--books", default=str(BOOKS), help="folder of .txt books (moby_dick.txt among them)")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--repeats", type=int, default=7, help="timing runs per size (median)")
    parser.add_argument("--memory-mb", default="10,50",
                        help='text sizes (MB) for the peak-RSS runs; "" skips them')
    args = parser.parse_args()

    result: dict = {
        "versions": {"python": platform.python_version(), **{
            p: importlib.metadata.version(p) for p in ("qdrant-edge-py", "mmh3", "py-rust-stemmers")}},
        "settings": {"k": K, "b": B, "book_avg_len": BOOK_AVG_LEN, "engine_variants": {
            "default": "Bm25Config(k, b, avg_len, language)", "max40": "the same with max_token_len=40"}},
        "qdrant_server": "not measured: no Qdrant server is reachable here (server-side BM25, "
                         "models.Document(text, model='qdrant/bm25'), needs a server >= 1.15.3)",
        "fastembed": "not run: fastembed's Bm25('Qdrant/bm25') downloads its model folder (the stopword "
                     "files and config.json) from a model hub unless given specific_model_path; recemb's "
                     "tests compare against it offline that way",
    }
    variants = {"default": {}, "max40": {"max_token_len": 40}}
    words = EngineWords()
    all_books = books(Path(args.books))
    moby = dict(all_books).get("moby_dick") or all_books[0][1]
    book_path = Path(args.books) / "moby_dick.txt"
    if not book_path.is_file():
        book_path = sorted(Path(args.books).glob("*.txt"))[0]

    began = time.perf_counter()
    vectors: list = []  # (row, ours, engine) documents, for the stored check
    rows = []
    for name, text in all_books:
        r = run_input(words, text, "english", BOOK_AVG_LEN, variants, vectors=vectors)
        r.update(input=f"{name} ({len(text) / 1e6:.2f}M chars)", chars=len(text))
        rows.append(r)
    result["books"] = rows
    print_rows(f"Whole books, english, avg_len {BOOK_AVG_LEN:g} (documents and queries)", rows, "input")

    plain = []  # the same books with "_" (Gutenberg's italics) made a space: is that the only difference?
    for name, text in all_books:
        r = run_input(words, text.replace("_", " "), "english", BOOK_AVG_LEN, {"default": {}}, name_it=False)
        r.update(input=f"{name}, _ as space")
        plain.append(r)
    result["books_underscore_as_space"] = plain
    print_rows("The same books with every '_' replaced by a space", plain, "input")

    sweep = []
    for label, text in (("moby_dick 200 KB", moby[:200_000]), ("moby_dick whole", moby)):
        for avg_len in AVG_LENS:
            r = run_input(words, text, "english", avg_len, {"default": {}}, name_it=False)
            r.update(input=f"{label}, avg_len {avg_len:g}", avg_len=avg_len)
            sweep.append(r)
    result["avg_len_sweep"] = sweep
    print_rows("Moby Dick at several avg_len (engine default config)", sweep, "input")
    print("(tf!=: shared ids whose term count differs; sameTF: max|d| over shared ids with equal counts, "
          "i.e. the effect of the document length and of the engine's float32 values)")

    hostile = []
    for name, text in HOSTILE:
        r = run_input(words, text, "english", 256.0, variants, vectors=vectors)
        r.update(input=name, text=text if len(text) <= 120 else text[:60] + f"... ({len(text)} chars)")
        hostile.append(r)
    result["hostile"] = hostile
    print_rows("Hostile strings, english, avg_len 256", hostile, "input")

    stored_check(vectors)
    vectors.clear()
    print("\nAs stored: both document vectors upserted into an Edge shard and read back "
          "(default engine config)")
    print(f"{'input':34} {'identical':9} {'shared ids, values differ':>25} {'of which same counts':>20}")
    for r in rows + hostile:
        st = r["variants"]["default"].get("stored")
        if st:
            same = "yes" if st["identical"] else "no"
            print(f"{r['input'][:34]:34} {same:9} {st['shared_values_differ']:25} "
                  f"{fmt(st['shared_values_differ_same_tf']):>20}")

    vocabulary = {w for w in re.findall(r"[^\W_]+", moby.lower())}
    langs = languages(words, vocabulary)
    result["languages"] = langs
    print("\nLanguages of recemb's Bm25 (stopwords: ours; stems: stopwords off on both sides)")
    print(f"{'language':11} {'engine':7} {'stopw.':>6} {'checked':>7} {'eng.keeps':>9} {'eng.extra':>9} "
          f"{'stem words':>10} {'differ':>6}  sample doc shared/ours/engine")
    for r in langs[:-1]:
        sd = r.get("sample_doc")
        sample = f"{sd['shared']}/{sd['ours']}/{sd['engine']}" if sd else "-"
        print(f"{r['language']:11} {'yes' if r['engine_accepts'] else 'NO':7} {r['ours_stopwords']:6} "
              f"{fmt(r.get('stopwords_checked')):>7} {fmt(r.get('ours_stopwords_engine_keeps')):>9} "
              f"{fmt(r.get('engine_only_stopwords_found')):>9} {fmt(r.get('stem_words_checked')):>10} "
              f"{fmt(r.get('stem_words_differ')):>6}  {sample}")
    print("engine accepts as language=:", ", ".join(langs[-1]["engine_accepted_language_names"]))

    t = [timing(moby[:200_000], args.repeats), timing(moby[:1_000_000], args.repeats)]
    q = query_timing("whale hunt in the southern seas, Ahab's revenge")
    result["timing"] = {"documents": t, "query": q, "repeats": args.repeats}
    print(f"\nTiming, documents (median of {args.repeats}, interleaved, one process)")
    print(f"{'chars':>9} {'ours ms':>9} {'engine ms':>9} {'ours/engine':>11}")
    for r in t:
        print(f"{r['chars']:9} {r['ours_ms']:9.1f} {r['engine_ms']:9.1f} {r['speedup']:11.2f}")
    print(f"query '{q['query'][:30]}...': ours {q['ours_us']:.1f} us, engine {q['engine_us']:.1f} us")

    sizes = [float(s) for s in args.memory_mb.split(",") if s.strip()]
    if sizes:
        mem = memory(sizes, book_path)
        result["memory"] = mem
        print(f"\nPeak RSS, one document ({book_path.name} repeated to size), a fresh process per run")
        print(f"{'encoder':8} {'chars':>11} {'RSS before MiB':>14} {'peak MiB':>8} {'peak-before':>11} "
              f"{'seconds':>8}")
        for r in mem:
            if "error" in r:
                print(f"{r['encoder']:8} {r['target_mb']:>9} MB error: {r['error'][-200:]}")
                continue
            print(f"{r['encoder']:8} {r['chars']:11} {r['rss_before_mib']:14.0f} {r['peak_rss_mib']:8.0f} "
                  f"{r['peak_over_before_mib']:11.0f} {r['seconds']:8.2f}")
    else:
        result["memory"] = "skipped (--memory-mb '')"
    result["seconds"] = round(time.perf_counter() - began, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    # a lone surrogate (one hostile input) is written as its JSON escape
    Path(args.out).write_bytes((json.dumps(result, indent=1, ensure_ascii=False, default=str) + "\n").encode(
        "utf-8", "backslashreplace"))
    print(f"\nwrote {args.out} ({result['seconds']} s)")


if __name__ == "__main__":
    main()
