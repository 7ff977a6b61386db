"""Character offsets of tokens: ``encode(..., offsets=True)``, ``encode_stream(..., offsets=True)``, and
``TokenStream(spans=True)``. Every span is the one the tokenizer itself reports on the whole text, streamed or not,
so that a run of tokens gives back the exact characters it came from."""

from __future__ import annotations

import random
import unicodedata
from bisect import bisect_left

import pytest

from recemb.core import TextTokenizer
from recemb.core.streaming import TokenStream
from tests.core.test_tokenizer import BUNDLED, _byte_level_bpe, _corpus, _wrap

ACCENTS = "Herr Müller trinkt einen Café an der Straße in München."
TEXTS = [
    "", " ", "a",
    ACCENTS,
    "Ça va? Oui, très bien: naïve façade, Ångström, e\u0301 a\u0301 \u0301x İstanbul.",
    "中文字符 日本語のテキスト、한국어 텍스트。",
    "emoji 😀 thumbs 👍🏽 flag 🇫🇷 family 👨\u200d👩\u200d👧 end",
    "many    spaces   and\ttabs\u00a0nbsp\u3000ideographic",
    "lines\nof\n\ntext\r\nwith breaks\n",
    "Donaudampfschifffahrtsgesellschaftskapitän " + "x" * 150 + " Rindfleischetikettierungsüberwachungsgesetz",
    "literal specials: [SEP] [CLS] <s> </s> <|endoftext|> <mask> a<mask>b",
    "  leading and trailing  ",
    "".join(ACCENTS.split()) * 3 + "中文字符日本語" * 3,  # no spaces: cut where the pipeline splits, if it can
]
LONG = ("\n".join(TEXTS) + "\n") * 8  # about 4,000 characters: many pieces in small windows
SPECIALS = {"[SEP]", "[CLS]", "<s>", "</s>", "<|endoftext|>", "<mask>"}


@pytest.fixture(scope="module")
def kinds(tmp_path_factory) -> dict[str, TextTokenizer]:
    """One tokenizer of each kind the stream cuts: WordPiece (BERT: lowercase, accents stripped), byte-level BPE
    (GPT-2 style, with and without a prefix space; one with RoBERTa's offset trimming) and Metaspace Unigram
    (SentencePiece style, prepend_scheme always and first)."""
    from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    root = tmp_path_factory.mktemp("offsets")
    toks = {"wordpiece": TextTokenizer.from_folder(BUNDLED)}

    bpe = _byte_level_bpe(normalizers.NFC(), add_prefix_space=False)
    bpe.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True)])
    toks["bpe"] = _wrap(bpe, root / "bpe", bos_token="<|endoftext|>", eos_token="<|endoftext|>")
    bpe.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    bpe.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    toks["bpe-prefix"] = _wrap(bpe, root / "bpe-prefix", bos_token="<s>", eos_token="</s>")
    # RoBERTa trims a token's leading space out of its offsets, but not on a text's first token.
    bpe.normalizer = None
    bpe.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 1), trim_offsets=True,
                                                      add_prefix_space=True)
    toks["bpe-trim"] = _wrap(bpe, root / "bpe-trim", bos_token="<s>", eos_token="</s>")

    uni = Tokenizer(models.Unigram())
    uni.normalizer = normalizers.NFKC()
    uni.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always", split=True)
    uni.train_from_iterator(_corpus() + TEXTS, trainer=trainers.UnigramTrainer(
        vocab_size=600, special_tokens=["<unk>", "<s>", "</s>", "<pad>"], unk_token="<unk>", show_progress=False))
    uni.post_processor = processors.TemplateProcessing(single="<s> $A </s>",
                                                       special_tokens=[("<s>", 1), ("</s>", 2)])
    toks["metaspace"] = _wrap(uni, root / "metaspace", bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    uni.normalizer = None
    uni.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=True)
    uni.post_processor = None
    toks["metaspace-first"] = _wrap(uni, root / "metaspace-first", eos_token="</s>", unk_token="<unk>")
    return toks


KINDS = ["wordpiece", "bpe", "bpe-prefix", "bpe-trim", "metaspace", "metaspace-first"]


def joined(pieces) -> tuple[list[int], list]:
    ids, spans = [], []
    for piece_ids, piece_spans in pieces:
        assert len(piece_ids) == len(piece_spans)
        ids += piece_ids
        spans += piece_spans
    return ids, spans


def reference_spans(tok: TextTokenizer, text: str) -> list:
    """The tokenizer's own offsets on the whole text, None for what its post-processor added and the EOS."""
    enc = tok.tokenizer(text, add_special_tokens=True, return_offsets_mapping=True, return_special_tokens_mask=True)
    spans = [None if special else tuple(span) for span, special in zip(enc["offset_mapping"],
                                                                        enc["special_tokens_mask"])]
    return spans if tok.appends_eos else spans + [None]


def test_fixture_kinds(kinds):
    assert all(kinds[name].streamable for name in KINDS)
    assert kinds["wordpiece"].appends_eos and kinds["metaspace"].appends_eos and not kinds["bpe"].appends_eos


@pytest.mark.parametrize("name", KINDS)
def test_ids_are_those_of_encode(kinds, name):
    tok = kinds[name]
    texts = TEXTS + [LONG]
    assert [ids for ids, _ in tok.encode(texts, offsets=True)] == tok.encode(texts)
    for text, (ids, spans) in zip(texts, tok.encode(texts, offsets=True)):
        assert len(spans) == len(ids) and ids[-1] == tok.eos_token_id and spans[-1] is None
        assert all(span is None or 0 <= span[0] <= span[1] <= len(text) for span in spans)
    assert tok.encode([], offsets=True) == []


@pytest.mark.parametrize("name", KINDS)
def test_spans_are_the_tokenizers_own(kinds, name):
    tok = kinds[name]
    for text in TEXTS + [LONG]:
        ids, spans = tok.encode([text], offsets=True)[0]
        assert spans == reference_spans(tok, text), repr(text)
    # A special token written in the text is text: it keeps its characters (lstrip/rstrip ones their spaces).
    text = TEXTS[10]
    ids, spans = tok.encode([text], offsets=True)[0]
    written = [text[s[0]:s[1]].strip() for i, s in zip(ids, spans) if s is not None
               and tok.tokenizer.convert_ids_to_tokens(i).strip() in SPECIALS]
    assert written and set(written) <= SPECIALS


@pytest.mark.parametrize("name", KINDS)
def test_streamed_pieces_join_to_the_whole_text(kinds, name):
    tok = kinds[name]
    for text in TEXTS + [LONG]:
        whole = tok.encode([text], offsets=True)[0]
        for window in (7, 64, 333):
            seen = []
            pieces = list(tok.encode_stream(text, window_chars=window, on_chars=seen.append, offsets=True))
            assert joined(pieces) == whole, (repr(text[:40]), window)
            # The same pieces as without offsets: only the spans were added.
            assert [ids for ids, _ in pieces] == list(tok.encode_stream(text, window_chars=window))
            assert sum(seen) == len(text)
            if text is LONG and window == 7:
                assert len(pieces) > 100


# Byte-level BPE writes each byte as one printable character: the standard table (bytes that print as themselves
# keep their code point, the others take 256, 257, ... in order).
_PRINTABLE = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
_BYTE_OF = {chr(b): b for b in _PRINTABLE}
_BYTE_OF.update({chr(256 + i): b for i, b in enumerate(b for b in range(256) if b not in _PRINTABLE)})


def _past_marks(text: str, end: int, starts: list[int]) -> int:
    """``end`` moved past the combining marks that follow it, up to where a token starts: NFC and NFKC fold such
    a mark into the letter before it, and the span of that letter's token ends before the mark."""
    at = bisect_left(starts, end)
    limit = starts[at] if at < len(starts) else len(text)
    while end < limit and unicodedata.combining(text[end]):
        end += 1
    return end


def _squeezed(s: str) -> bytes:
    return b"".join(s.encode().split())


def _surface(tok: TextTokenizer, name: str, token_id: int, normalize) -> bytes | None:
    """What the token stands for in the normalized text, ASCII whitespace left out; None for the unknown token."""
    hf = tok.tokenizer
    if token_id == hf.unk_token_id:
        return None
    if token_id in hf.added_tokens_decoder:
        return _squeezed(normalize(hf.added_tokens_decoder[token_id].content))
    piece = hf.convert_ids_to_tokens(token_id)
    if name.startswith("bpe"):
        return b"".join(bytes(_BYTE_OF[c] for c in piece).split())
    if name.startswith("metaspace"):
        return _squeezed(piece.replace("▁", " "))
    return _squeezed(piece.removeprefix("##"))


@pytest.mark.parametrize("name", KINDS)
def test_runs_of_tokens_give_back_their_characters(kinds, name):
    """Each token's span holds what the token stands for (exactly, where no neighbour shares its characters), and
    a run of tokens, from its first start to its last end, holds every one of them in order.

    Without "<mask>", which eats the spaces around it (lstrip, rstrip): the word after it is then glued to an added
    token, ByteLevel's add_prefix_space gives it a space the text lacks, and RoBERTa's offset trimming takes the
    word's first real character out of its span (the tokenizer's own offsets, which the spans follow:
    ``test_spans_are_the_tokenizers_own``)."""
    tok = kinds[name]
    normalizer = tok.tokenizer.backend_tokenizer.normalizer
    normalize = normalizer.normalize_str if normalizer is not None else (lambda s: s)
    rng, text = random.Random(7), LONG.replace("<mask>", "")
    ids, spans = joined(tok.encode_stream(text, window_chars=48, offsets=True))
    body = [(i, s) for i, s in zip(ids, spans) if s is not None]
    surfaces = [_surface(tok, name, i, normalize) for i, _ in body]
    checked = 0
    starts = [s[0] for _, s in body]
    for k, ((_, (start, end)), surface) in enumerate(zip(body, surfaces)):
        if surface is None:
            continue
        covered = _squeezed(normalize(text[start:_past_marks(text, end, starts)]))
        shared = (k > 0 and body[k - 1][1][1] > start) or (k + 1 < len(body) and body[k + 1][1][0] < end)
        assert surface in covered if shared else surface == covered, (k, surface, text[start:end])
        checked += 1
    assert checked > len(body) * 0.8
    for _ in range(200):
        first = rng.randrange(len(body))
        run = range(first, min(len(body), first + rng.randint(1, 40)))
        start, end = min(body[k][1][0] for k in run), max(body[k][1][1] for k in run)
        passage, at = _squeezed(normalize(text[start:_past_marks(text, end, starts)])), 0
        for k in run:
            if surfaces[k] is not None:
                found = passage.find(surfaces[k], at)
                assert found >= 0, (first, k, surfaces[k], text[start:end])
                at = found + len(surfaces[k])


@pytest.mark.parametrize("name", ["wordpiece", "bpe-trim"])
@pytest.mark.parametrize("case", ["fits exactly", "one over", "far over", "one token", "fits"])
def test_token_stream_truncates_spans_with_ids(kinds, name, case):
    tok = kinds[name]
    whole_ids, whole_spans = tok.encode([LONG], offsets=True)[0]
    n = len(whole_ids)
    limit = {"fits exactly": n, "one over": n - 1, "far over": 10, "one token": 1, "fits": n + 1}[case]
    seen: list[int] = []
    stream = TokenStream(tok.encode_stream(LONG, window_chars=64, on_chars=seen.append, offsets=True),
                         tok.eos_token_id, limit, spans=True)
    ids, spans = joined(stream)
    if n <= limit:
        assert (ids, spans) == (whole_ids, whole_spans) and not stream.truncated
    else:
        assert ids == whole_ids[:limit - 1] + [tok.eos_token_id] and stream.truncated
        assert spans == whole_spans[:limit - 1] + [None]
    assert stream.tokens == len(ids)
    plain = TokenStream(tok.encode_stream(LONG, window_chars=64), tok.eos_token_id, limit)
    assert sum(plain, []) == ids and (plain.tokens, plain.truncated) == (stream.tokens, stream.truncated)
    if case == "far over":
        assert sum(seen) < len(LONG) // 2  # the rest of the text was never tokenized


def test_token_stream_passes_spans_through_without_a_limit(kinds):
    tok = kinds["metaspace"]
    stream = TokenStream(tok.encode_stream(LONG, window_chars=64, offsets=True), tok.eos_token_id, spans=True)
    assert joined(stream) == tok.encode([LONG], offsets=True)[0] and not stream.truncated
    with pytest.raises(ValueError, match="2 ids came with 1 spans"):
        list(TokenStream([([5, 6], [(0, 1)])], tok.eos_token_id, 5, spans=True))


def test_embedder_stream_spans_index_prompt_and_text(tiny_embedder):
    emb, prompt = tiny_embedder, "query: "
    text = ACCENTS + " " + TEXTS[5]
    whole_ids, whole_spans = emb.tokenizer.encode([prompt + text], offsets=True)[0]
    ids, spans = joined(emb.tokenize_stream(text, prompt=prompt, offsets=True))
    assert ids == emb.tokenize([text], prompt=prompt)[0] == whole_ids and spans == whole_spans
    # Byte-level tokens without trimming cover every character, the prompt's and then the text's.
    covered = {c for s in spans if s is not None for c in range(*s)}
    assert covered == set(range(len(prompt + text)))
    ids, spans = joined(emb.tokenize_stream(text, prompt=prompt, max_length=6, offsets=True))
    assert ids == emb.tokenize([text], prompt=prompt, max_length=6)[0] and spans == whole_spans[:5] + [None]
    assert sum(emb.tokenize_stream(text, prompt=prompt), []) == whole_ids  # without offsets: ids, as before


def _nfc_wordpiece() -> TextTokenizer:
    """A WordPiece that needs no training, behind NFC (which folds a final combining mark into the letter before
    it): words of more than 8 characters are its [UNK]."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["[UNK]", "[SEP]", "[CLS]", "a", "b", "e", "x", "y", "q", ".", "é",
                                         "##a", "##b", "##e", "##d", "en", "end"])}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=8))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 1)])
    return TextTokenizer(PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="[SEP]", unk_token="[UNK]"))


# (text, the long word's span by the BERT tokenizer, by the NFC one); the word lies past the bound, so it is given
# [UNK] without being tokenized. BERT drops controls and strips marks (a dropped one joins nothing); NFC keeps
# both, as letters of the word, and folds a final mark into the letter before it (the span ends at that letter).
LONG_WORDS = [
    ("short words. " * 5 + "x" * 500 + "©" + "y" * 300 + ".end" + " and more" * 30, (65, 866), (65, 866)),
    ("y" * 3000 + " tail end", (0, 3000), (0, 3000)),
    ("lead " + "é" * 400 + "\u0301" + "b" * 300, (5, 706), (5, 706)),
    ("x.\u0301" + "a" * 300 + " end", (3, 303), (2, 303)),  # "." stays a token of its own
    ("x.\x00" + "a" * 300 + "\x00 y", (3, 303), (2, 304)),
    ("q " * 10 + "\u0301" + "a" * 300 + "\u0301 b", (21, 321), (20, 321)),
    ("x " + "a" * 300 + "e\u0301 b" + " a" * 40, (2, 303), (2, 303)),
]


@pytest.mark.parametrize("name", ["wordpiece", "nfc"])
def test_a_word_made_the_unknown_token_spans_that_word(kinds, name):
    tok = kinds["wordpiece"] if name == "wordpiece" else _nfc_wordpiece()
    limit, unk = (100 if name == "wordpiece" else 8), tok.tokenizer.unk_token_id
    for text, *words in LONG_WORDS:
        whole = tok.encode([text], offsets=True)[0]
        for window in (16, 64):
            notes: list[str] = []
            pieces = list(tok.encode_stream(text, window_chars=window, max_piece_chars=60, notes=notes,
                                            offsets=True))
            assert joined(pieces) == whole, (repr(text[:20]), window)
            assert len(notes) == 1 and f"1 word of more than {limit} characters" in notes[0]
        assert words[name == "nfc"] in [s for i, s in zip(*whole) if i == unk], repr(text[:20])


def test_a_stretch_read_no_further_has_the_spans_of_the_text_cut_there(kinds):
    """Past 100 characters without an exact cut the text is read no further: from the start, or from the last cut
    (the space before the run), where the window's first token is not the text's."""
    cases = [("bpe", "x" * 5000, 100), ("metaspace", "▁a" * 3000, 100), ("wordpiece", "[SEP]" * 1000, 100),
             ("bpe", "x" * 300 + " then words" * 20, 100), ("bpe-trim", "some words first " * 3 + "y" * 500, 150),
             ("metaspace-first", "a few words " * 3 + "z" * 400, 135)]
    for name, text, cut in cases:
        tok, notes = kinds[name], []
        pieces = list(tok.encode_stream(text, window_chars=8, max_piece_chars=100, notes=notes, offsets=True))
        assert joined(pieces) == tok.encode([text[:cut]], offsets=True)[0], name
        assert len(notes) == 1 and notes[0].startswith(f"only its first {cut} of {len(text):,} characters")


class _SlowTokenizer:
    """Stands for a tokenizer that reports no offsets (a transformers slow tokenizer): ids only."""

    is_fast = False
    eos_token_id, sep_token_id, model_max_length = 1, None, 0

    def __call__(self, texts, add_special_tokens=True, **options):
        if options:
            raise NotImplementedError(f"no {', '.join(options)} in a slow tokenizer")
        if isinstance(texts, str):
            return {"input_ids": self._ids(texts)}
        return {"input_ids": [self._ids(t) for t in texts]}

    @staticmethod
    def _ids(text: str) -> list[int]:
        return [2 + ord(c) % 50 for c in text]


def test_a_tokenizer_without_offsets_says_so(tiny_embedder):
    from recemb.core import Embedder

    tok = TextTokenizer(_SlowTokenizer())
    assert tok.encode(["ab"]) == [[2 + ord("a") % 50, 2 + ord("b") % 50, 1]] and not tok.has_offsets
    with pytest.raises(ValueError, match="fast tokenizer"):
        tok.encode(["ab"], offsets=True)
    with pytest.raises(ValueError, match="fast tokenizer"):
        list(tok.encode_stream("ab", offsets=True))
    assert list(tok.encode_stream("ab")) == tok.encode(["ab"])
    emb = Embedder(tiny_embedder.model, tok)
    with pytest.raises(ValueError, match="fast"):  # at once, not as a TokenizationError from inside the stream
        emb.tokenize_stream("ab", offsets=True)
