"""TextTokenizer.encode_stream: a text's pieces, joined, are exactly ``encode([text])[0]``, in every pipeline.

Small windows make many cuts; the texts are real books (when ../shared/data/long is there) and synthetic ones
that put whitespace runs, combining marks, CJK, emoji and literal special tokens right next to the cuts.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

import recemb
from recemb.core import TextTokenizer
from tests.utils import SAMPLE_TEXT, build_tokenizer

LONG = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "long"
BUNDLED = Path(recemb.__file__).parent / "models" / "recemb-mamba2-mini"

# What could break a cut: whitespace of every kind, marks after spaces, specials next to spaces.
FRAGMENTS = [
    "a", "b", "word", "HELLO", "World", "Hello World", "é", "e\u0301", " \u0301a", "´", "\u00a8x", "ñ", "ß",
    "İ", " ", " ", " ", "  ", "   ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2002", "\x1c", "\x00",
    "\u200b", "中", "文字", "日本語", "😀", "👍🏽", "1", "23", "4567", ".", ",", "!!", "?!", "'s", "'ll",
    "--", "...", "[SEP]", "[CLS]", "[MASK]", "[sep]", "<s>", "</s>", "<pad>", "<mask>", "<|endoftext|>", "▁",
    "Ġ", "##",
]
PLAIN = ["a", "b", "word", "Text", "the", " ", " ", " ", " ", " "]

NO_SPACE = "x" * 5000  # longer than any window
LATE_CUT = "y" * 3000 + " tail end"  # the first admissible cut lies far past the window
WHITESPACE = "one two  three   four\tfive\nsix\r\nseven \u00a0eight\u3000nine " * 40
MARKS = " \u0301a \u0301b e\u0301 caf\u00e9 na\u00efve \u00c5ngstr\u00f6m \u00b4x \u00a8y " * 40
CJK = "中文 字符 日本語のテキスト 한국어 텍스트 " * 40
SYNTHETIC = [
    "", " ", "   ", "\t\n \r\n \u00a0 ", "a", NO_SPACE, LATE_CUT, WHITESPACE, MARKS, CJK,
    "😀 emoji 👍🏽 thumbs 🇫🇷 flag \u200d joiner " * 40,
    "123 4567 89.0 1,000,000 !!! ??? ... --- ''' \"\"\" ((( ))) 3.14159 2+2=4 " * 40,
    "[SEP] [CLS] a [SEP]b c[CLS] <s> </s> <pad> x<s> y </s>z <mask> m <|endoftext|> e " * 40,
    "HELLO WORLD hello world Hello World HeLLo WoRLD " * 40,
    "word " * 600 + "[SEP]" + " word" * 600,
    "a  b   c    d     e      f " * 60,
]


def pieces_of(tok: TextTokenizer, text: str, window: int) -> list[list[int]]:
    seen = []
    pieces = list(tok.encode_stream(text, window_chars=window, on_chars=seen.append))
    assert len(seen) == len(pieces) and sum(seen) == len(text)
    return pieces


def assert_stream_equal(tok: TextTokenizer, text: str, window: int) -> int:
    """The joined pieces equal the whole-text ids; returns the number of pieces."""
    pieces = pieces_of(tok, text, window)
    got, ref = sum(pieces, []), tok.encode([text])[0]
    if got != ref:
        at = next((i for i, (g, r) in enumerate(zip(got, ref)) if g != r), min(len(got), len(ref)))
        pytest.fail(f"window {window}: {len(pieces)} pieces, first difference at token {at}: "
                    f"{got[max(0, at - 3):at + 3]} != {ref[max(0, at - 3):at + 3]}")
    return len(pieces)


def _corpus() -> list[str]:
    lines = [SAMPLE_TEXT] * 4 + SYNTHETIC[6:] + [" ".join(FRAGMENTS)] * 4
    if (LONG / "moby_dick.txt").is_file():
        lines += (LONG / "moby_dick.txt").read_text(encoding="utf-8")[:60000].split("\n")
    return lines


def _wrap(tok, folder: Path, **special) -> TextTokenizer:
    """Save as transformers does and load back through ``from_folder`` (the path models take)."""
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(tokenizer_object=tok, **special).save_pretrained(str(folder))
    return TextTokenizer.from_folder(folder)


def _byte_level_bpe(normalizer, add_prefix_space: bool):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=["<|endoftext|>", "<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return tok


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> dict[str, TextTokenizer]:
    """Supported pipelines: WordPiece/BERT, byte-level BPE (GPT-NeoX-like), Metaspace Unigram, Whitespace."""
    from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    root = tmp_path_factory.mktemp("tokenizers")
    toks = {"wordpiece": TextTokenizer.from_folder(BUNDLED)}
    build_tokenizer(root / "tiny")
    toks["tiny"] = TextTokenizer.from_folder(root / "tiny")

    # GPT-NeoX: NFC, ByteLevel without prefix space, normalized whitespace-run tokens; EOS appended.
    neox = _byte_level_bpe(normalizers.NFC(), add_prefix_space=False)
    neox.add_tokens([AddedToken("  ", normalized=True), AddedToken("   ", normalized=True)])
    neox.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True)])
    toks["bpe"] = _wrap(neox, root / "bpe", bos_token="<|endoftext|>", eos_token="<|endoftext|>")

    # Prefix space, lowercasing, a normalized added token holding a space, BOS from the post-processor.
    pre = _byte_level_bpe(normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()]), True)
    pre.add_tokens([AddedToken("Hello World", normalized=True), AddedToken("[sep]", normalized=True)])
    pre.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    toks["bpe-prefix"] = _wrap(pre, root / "bpe-prefix", bos_token="<s>", eos_token="</s>", pad_token="<pad>")

    # SentencePiece-like Unigram behind Metaspace(split=True); </s> ends every sequence: no EOS appended.
    uni = Tokenizer(models.Unigram())
    uni.normalizer = normalizers.NFKC()
    uni.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always", split=True)
    uni.train_from_iterator(_corpus(), trainer=trainers.UnigramTrainer(
        vocab_size=800, special_tokens=["<unk>", "<s>", "</s>", "<pad>"], unk_token="<unk>",
        show_progress=False))
    uni.post_processor = processors.TemplateProcessing(single="<s> $A </s>",
                                                       special_tokens=[("<s>", 1), ("</s>", 2)])
    toks["metaspace"] = _wrap(uni, root / "metaspace", bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    uni.normalizer = None
    uni.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=True)
    toks["metaspace-first"] = _wrap(uni, root / "metaspace-first", eos_token="</s>", unk_token="<unk>")

    # WordPiece behind Whitespace (accents stripped, a one-character Replace), then WhitespaceSplit + Bert.
    wp = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wp.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(),
                                          normalizers.Lowercase(), normalizers.Replace("`", "'")])
    wp.pre_tokenizer = pre_tokenizers.Whitespace()
    wp.train_from_iterator(_corpus(), trainer=trainers.WordPieceTrainer(
        vocab_size=1000, special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]"], show_progress=False))
    toks["whitespace"] = _wrap(wp, root / "whitespace", eos_token="[SEP]", unk_token="[UNK]")
    wp.normalizer = normalizers.BertNormalizer(strip_accents=True, lowercase=False)
    wp.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                pre_tokenizers.BertPreTokenizer()])
    wp.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                      special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    toks["whitespace-split"] = _wrap(wp, root / "whitespace-split", eos_token="[SEP]", unk_token="[UNK]")
    return toks


SUPPORTED = ["wordpiece", "tiny", "bpe", "bpe-prefix", "metaspace", "metaspace-first", "whitespace",
             "whitespace-split"]


def test_fixture_pipelines(tokenizers):
    """The fixtures are what they claim: streamable, EOS appended by recemb or ending the template."""
    assert all(tokenizers[name].streamable for name in SUPPORTED)
    assert tokenizers["wordpiece"].appends_eos and tokenizers["metaspace"].appends_eos
    assert not tokenizers["bpe"].appends_eos and not tokenizers["tiny"].appends_eos
    assert tokenizers["tiny"].encode(["a"])[0][0] == 0  # BOS from the post-processor


@pytest.mark.parametrize("name", SUPPORTED)
@pytest.mark.parametrize("book", ["war_and_peace.txt", "moby_dick.txt"])
def test_long_text(tokenizers, name, book):
    if not (LONG / book).is_file():
        pytest.skip(f"{LONG} is absent")
    tok = tokenizers[name]
    chars = 300_000 if name == "wordpiece" else 100_000
    text = (LONG / book).read_text(encoding="utf-8")[:chars]
    window, seen = 2048, []
    pieces = list(tok.encode_stream(text, window_chars=window, on_chars=seen.append))
    assert sum(pieces, []) == tok.encode([text])[0]
    assert len(pieces) >= chars // window
    # Bounded: every window but the last holds between half and all of window_chars.
    assert sum(seen) == len(text) and all(window // 2 <= n <= window for n in seen[:-1])


@pytest.mark.parametrize("name", SUPPORTED)
def test_synthetic_texts(tokenizers, name):
    tok, total = tokenizers[name], 0
    for text in SYNTHETIC:
        counts = [assert_stream_equal(tok, text, window) for window in (7, 64, 333)]
        if " " not in text.strip():
            assert counts == [1, 1, 1]  # nothing to cut at
        total += counts[1]
    assert total > 150  # fewer where added tokens ("  ", a normalized "[sep]") are near every space


def test_stretch_without_cut(tokenizers):
    """A window without an admissible cut grows to the first one after it; no cut at all: one piece."""
    tok, seen = tokenizers["wordpiece"], []
    assert sum(tok.encode_stream(LATE_CUT, 64, on_chars=seen.append), []) == tok.encode([LATE_CUT])[0]
    assert seen == [3000, 9]
    assert list(tok.encode_stream(NO_SPACE, window_chars=64)) == tok.encode([NO_SPACE])


def test_empty_and_blank_texts(tokenizers):
    for tok in tokenizers.values():
        for text in ("", " ", "   ", "\n", "\t \t"):
            assert list(tok.encode_stream(text, window_chars=1)) == [tok.encode([text])[0]]


@pytest.mark.parametrize("name", SUPPORTED)
def test_random_texts(tokenizers, name):
    tok, rng, pieces = tokenizers[name], random.Random(1234), 0
    for _ in range(25):
        parts = (rng.choice(FRAGMENTS if rng.random() < 0.4 else PLAIN) for _ in range(rng.randint(0, 400)))
        text = "".join(parts)
        for window in (1, 2, 5, 13, 40, 97):
            pieces += assert_stream_equal(tok, text, window)
    assert pieces > 25 * 6 * 2  # many cuts happened


def test_specials_next_to_cuts(tokenizers):
    """Literal special tokens, lstrip/rstrip ones too, touching the space a cut would take."""
    for window in range(3, 60, 4):
        assert_stream_equal(tokenizers["bpe"], "x <mask> y <mask>z w<mask> v <|endoftext|> u </s> t  <s> "
                                               "s <pad>" * 30, window)
        assert_stream_equal(tokenizers["wordpiece"], "a [SEP] b [CLS]c d[MASK] e [PAD] f [UNK] " * 30, window)


def _word_level(normalizer, pre_tokenizer, added=()) -> TextTokenizer:
    """A tokenizer that needs no training: every pre-token maps to its id or [UNK]."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["[UNK]", "[SEP]", "a", "b", "▁a", "▁b", "Ġa", "Ġb", "Ġ", "▁"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = normalizer, pre_tokenizer
    tok.add_special_tokens(list(added))
    return TextTokenizer(PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="[SEP]", unk_token="[UNK]"))


def test_rstrip_token_across_space_run():
    """An rstrip token eats a whitespace run of any length: a space after whitespace is never a cut."""
    from tokenizers import AddedToken
    from tokenizers import pre_tokenizers as p

    tok = _word_level(None, p.ByteLevel(add_prefix_space=False), [AddedToken("<mask>", rstrip=True)])
    for window in (8, 16, 30, 50):
        assert assert_stream_equal(tok, ("x<mask>" + " " * 20 + "a b a b a ") * 6, window) > 1
        assert assert_stream_equal(tok, ("x<mask>" + " " * 20 + "ab\n") * 6, window) == 1  # no cut at all


def test_normalized_strip_token_across_dropped_character():
    """BertNormalizer drops the control character before the space, so a normalized rstrip token reaches the
    cut through the tabs (made spaces): the raw text has a non-space before the space, the normalized not."""
    from tokenizers import AddedToken
    from tokenizers import normalizers as n
    from tokenizers import pre_tokenizers as p

    tok = _word_level(n.BertNormalizer(), p.Metaspace(prepend_scheme="first"),
                      [AddedToken("<tok>", rstrip=True, normalized=True)])
    text = "q <tok>" + "\t" * 100 + " " + "\t" * 10 + "\x00" + " a" + " b" * 20
    for window in (8, 16, 40):
        assert assert_stream_equal(tok, text, window) > 1


def _pipelines():
    from tokenizers import Regex
    from tokenizers import normalizers as n
    from tokenizers import pre_tokenizers as p

    return [
        ("bert", n.BertNormalizer(), p.BertPreTokenizer(), True),
        ("nfkc-lower-bytelevel", n.Sequence([n.NFKC(), n.Lowercase()]), p.ByteLevel(), True),
        ("replace-char-whitespace-split", n.Replace("x", "yz"), p.WhitespaceSplit(), True),
        ("metaspace-never", None, p.Metaspace(prepend_scheme="never"), True),
        ("sequence", n.StripAccents(), p.Sequence([p.WhitespaceSplit(), p.Metaspace()]), True),
        ("llama-prepend", n.Sequence([n.Prepend("▁"), n.Replace(" ", "▁")]), None, False),
        ("no-pre-tokenizer", None, None, False),
        ("strip", n.Strip(), p.Whitespace(), False),
        ("bytelevel-normalizer", n.ByteLevel(), p.Whitespace(), False),  # the space becomes 'Ġ'
        ("bytelevel-no-regex", None, p.ByteLevel(use_regex=False), False),
        ("replace-regex", n.Replace(Regex("a+"), "a"), p.Whitespace(), False),
        ("replace-space", n.Replace(" ", "_"), p.Whitespace(), False),
        ("bert-normalizer-bytelevel", n.BertNormalizer(), p.ByteLevel(), False),  # pads CJK, drops controls
        ("strip-accents-bytelevel", n.StripAccents(), p.ByteLevel(), False),
        ("metaspace-no-split", None, p.Metaspace(split=False), False),
        ("digits", None, p.Sequence([p.WhitespaceSplit(), p.Digits()]), False),
        ("split-regex", None, p.Split(Regex(r"\s+"), "removed"), False),
    ]


@pytest.mark.parametrize("case", _pipelines(), ids=lambda c: c[0])
def test_pipeline_support(case):
    """Only provably cuttable pipelines stream; the others get the whole encode in one piece, still equal."""
    _, normalizer, pre_tokenizer, streamable = case
    tok = _word_level(normalizer, pre_tokenizer)
    assert tok.streamable is streamable
    for text in ("a b " * 50, WHITESPACE, MARKS, CJK, "x \u0301 \u0301 " * 50):
        count = assert_stream_equal(tok, text, 16)
        assert count > 1 if streamable else count == 1


def test_unsupported_trained_bpe(tmp_path):
    """A Llama-2-like BPE (Prepend + Replace normalizer, no pre-tokenizer): one piece, exactly encode."""
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers

    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.train_from_iterator([SAMPLE_TEXT] * 4 + SYNTHETIC[7:], trainer=trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False))
    llama = _wrap(tok, tmp_path / "llama", bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    assert not llama.streamable
    for text in SYNTHETIC:
        assert pieces_of(llama, text, 16) == [llama.encode([text])[0]]


def test_window_must_be_positive(tokenizers):
    with pytest.raises(ValueError):
        next(tokenizers["wordpiece"].encode_stream("a b", window_chars=0))


# Text without spaces: behind pair splitters (Bert, Whitespace, WhitespaceSplit) it is cut where the pipeline splits.
PAIR_CUTTERS = ["wordpiece", "whitespace", "whitespace-split"]
GLUED = [
    "".join(SAMPLE_TEXT.split()) * 8,  # English without whitespace: punctuation is the only boundary
    "\n".join(SAMPLE_TEXT.split()) * 3,  # one word a line
    "\t".join("a.b,c;d:e!f?g(h)i" for _ in range(200)),
    "中文字符日本語のテキスト，句読点。" * 60,
    "x©y®z™w" * 300,  # symbols that Bert does not split at
    "e\u0301.\u0301a\u0301,\u00e9" * 300,  # marks next to punctuation
    "word[SEP]word[CLS]x[MASK]" * 100,  # literal specials right at the boundaries
    "ab\x1ccd\x00ef\u200bgh." * 300,  # characters the normalizer drops
]


@pytest.mark.parametrize("name", SUPPORTED)
def test_text_without_spaces(tokenizers, name):
    tok = tokenizers[name]
    for text in GLUED:
        counts = [assert_stream_equal(tok, text, window) for window in (7, 64, 333)]
        if name in PAIR_CUTTERS and text is GLUED[0]:
            assert counts[1] > len(text) // 128  # cut at its punctuation, windows at least half full
    if name == "wordpiece":  # BertNormalizer pads CJK ideographs with spaces: each one is a boundary
        assert assert_stream_equal(tok, "中文字符日本語" * 200, 64) > 1400 // 64


@pytest.mark.parametrize("name", SUPPORTED)
def test_random_texts_without_spaces(tokenizers, name):
    tok, rng, pieces = tokenizers[name], random.Random(99), 0
    fragments = [f for f in FRAGMENTS + PLAIN if f.strip() == f and f]
    for _ in range(20):
        text = "".join(rng.choice(fragments) for _ in range(rng.randint(0, 300)))
        for window in (1, 3, 8, 21, 55):
            pieces += assert_stream_equal(tok, text, window)
    if name in PAIR_CUTTERS:
        assert pieces > 20 * 5 * 2


def test_a_word_longer_than_wordpiece_takes_is_the_unknown_token(tokenizers):
    """WordPiece makes any word over max_input_chars_per_word (100) its [UNK]: such a word past the bound is given
    that id without being tokenized, with a note; the ids stay exactly encode's."""
    tok = tokenizers["wordpiece"]
    texts = ["short words. " * 5 + "x" * 500 + "©" + "y" * 300 + ".end" + " and more" * 30,
             "y" * 3000 + " tail end", "a" * 5000, "lead " + "é" * 400 + "\u0301" + "b" * 300]
    for text in texts:
        for window in (16, 64):
            notes: list[str] = []
            pieces = list(tok.encode_stream(text, window_chars=window, max_piece_chars=200, notes=notes))
            assert sum(pieces, []) == tok.encode([text])[0]
            assert len(notes) == 1 and "1 word of more than 100 characters" in notes[0] and "unknown" in notes[0]
    notes = []
    assert sum(tok.encode_stream("z" * 150 + " q" * 500, window_chars=16, max_piece_chars=1000, notes=notes),
               []) == tok.encode(["z" * 150 + " q" * 500])[0]
    assert notes == []  # within the bound: tokenized as usual, nothing to say


def test_a_stretch_without_any_exact_cut_is_read_no_further(tokenizers):
    """Byte-level BPE cannot be cut inside "xxx...": past the bound the ids are those of the text cut there."""
    for name, text in (("bpe", "x" * 5000), ("metaspace", "▁a" * 3000), ("wordpiece", "[SEP]" * 1000)):
        tok, notes = tokenizers[name], []
        pieces = list(tok.encode_stream(text, window_chars=16, max_piece_chars=100, notes=notes))
        assert sum(pieces, []) == tok.encode([text[:100]])[0], name
        assert len(notes) == 1 and notes[0].startswith(f"only its first 100 of {len(text):,} characters were read")
    tok, seen = tokenizers["bpe"], []
    text = "x" * 300 + " then words" * 20 + " " + "y" * 500
    pieces = list(tok.encode_stream(text, window_chars=16, max_piece_chars=100, on_chars=seen.append))
    assert sum(seen) == len(text)  # progress reaches the end: the rest is not read
    assert sum(pieces, []) == tok.encode([text[:100]])[0]  # read no further, even where later text could be cut


def test_embedding_a_text_read_in_bounded_memory_warns_of_what_it_did():
    """Embedder.encode_stream says when the stream had to bound itself: here a 2.1M-character word."""
    from recemb.core import Embedder

    emb = Embedder.from_pretrained(BUNDLED, device="cpu")
    with pytest.warns(UserWarning, match="1 word of more than 100 characters .* became the unknown token"):
        vector = emb.encode_stream("a" * 2_100_000, show_progress_bar=False)
    whole = emb.tokenize(["a" * 2_100_000])[0]  # one call: the reference, [CLS] [UNK] [SEP]
    assert len(whole) == 3
    expected = emb.embed_token_ids([whole], normalize=True)[0]
    assert torch.allclose(vector, expected, rtol=1e-5, atol=1e-6)
