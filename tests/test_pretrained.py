"""The bundled tiny models: load by name offline, match transformers, tokenizer formats agree."""
from __future__ import annotations

import json
import platform
import socket
from importlib import resources

import pytest
import tokenizers
import torch
from transformers import AutoModelForCausalLM

from llmcore.hf import llmcore_name, load_pretrained
from llmcore.model import ModelConfig, Transformer
from llmcore.pretrained import (BUNDLED, EOT, Recipe, bundled_dir, lr_at, cross_entropy, hf_name, load, load_model, load_tokenizer,
                                save_pretrained, stdlib_corpus, stdlib_files,
                                training_record)
from llmcore.tokenizer import Tokenizer

DATA = resources.files("llmcore") / "data"


@pytest.fixture(scope="module")
def tiny():
    return load("tiny", device="cpu", dtype=torch.float32)


@pytest.fixture(scope="module")
def heldout_sample():
    return stdlib_corpus()["heldout"][:60_000]


def test_load_by_name_needs_no_network(monkeypatch):
    def no_network(*args, **kwargs):
        raise OSError("network access attempted")
    monkeypatch.setattr(socket.socket, "connect", no_network)
    model, tok = load("tiny", device="cpu", dtype=torch.float32)
    assert isinstance(model, Transformer) and isinstance(tok, Tokenizer)
    assert model.cfg.vocab_size == tok.vocab_size == 4096
    assert model.cfg.n_kv_heads < model.cfg.n_heads  # GQA
    assert EOT in tok.special_tokens


def test_unknown_name_lists_the_bundled_models():
    with pytest.raises(ValueError, match=r"'tiny', 'tiny-draft'"):
        bundled_dir("gpt-5")
    with pytest.raises(FileNotFoundError, match="neither a bundled model"):
        load_model("gpt-5")


@pytest.mark.parametrize("name", BUNDLED)
def test_transformers_loads_the_same_files_and_agrees(name, heldout_sample):
    ours = load_model(name, device="cpu", dtype=torch.float32)
    theirs = AutoModelForCausalLM.from_pretrained(bundled_dir(name), dtype=torch.float32).eval()
    ids = torch.tensor([load_tokenizer(name).encode(heldout_sample[:600], allowed_special="all")[:128]])
    with torch.inference_mode():
        diff = (ours(ids) - theirs(ids).logits).abs().max().item()
    assert diff < 1e-4


def test_tokenizer_formats_and_hf_tokenizers_agree(tiny, heldout_sample):
    _, tok = tiny
    own = Tokenizer.load(DATA / "tokenizer.llmcore.json")
    hf = tokenizers.Tokenizer.from_file(str(DATA / "tiny" / "tokenizer.json"))
    ids = tok.encode(heldout_sample, allowed_special="all")
    assert own.encode(heldout_sample, allowed_special="all") == ids
    assert hf.encode(heldout_sample).ids == ids
    assert tok.decode(ids) == heldout_sample
    assert load_tokenizer("tiny-draft").encode(heldout_sample[:5000]) == tok.encode(heldout_sample[:5000])


def test_recorded_quality_meets_the_targets():
    tiny, draft = training_record("tiny"), training_record("tiny-draft")
    # the model must compress held-out code better than lzma -9e (the target, 1.2 bits/byte,
    # needs a longer training run than this CPU allows: see the appendix)
    assert tiny["heldout_bits_per_byte"] < tiny["corpus"]["lzma_bits_per_byte"]
    assert draft["heldout_bits_per_byte"] > tiny["heldout_bits_per_byte"]
    assert tiny["corpus"]["train_sha256"] == draft["corpus"]["train_sha256"]
    ratio = (load_model("tiny", "cpu", torch.float32).num_parameters()
             / load_model("tiny-draft", "cpu", torch.float32).num_parameters())
    assert 7 <= ratio <= 14, ratio  # the draft is about ten times smaller


def test_shipped_weights_are_small():
    total = sum((DATA / name / "model.safetensors").stat().st_size for name in BUNDLED)
    assert total <= 30e6


@pytest.mark.skipif(platform.python_version() != training_record("tiny")["corpus"]["python"],
                    reason="the corpus is this interpreter's standard library; it matches only the recorded version")
def test_corpus_is_reproducible():
    meta = stdlib_corpus()["meta"]
    assert meta["train_sha256"] == training_record("tiny")["corpus"]["train_sha256"]
    assert meta["heldout_sha256"] == training_record("tiny")["corpus"]["heldout_sha256"]
    assert meta["tests_sha256"] == training_record("tiny")["corpus"]["tests_sha256"]


def test_tests_of_heldout_modules_are_left_out():
    corpus = stdlib_corpus()
    held_out = corpus["meta"]["heldout_modules"]
    dropped = [path for _, path, is_test in stdlib_files()
               if is_test and any(path.stem.removeprefix("test_").startswith(m) for m in held_out)]
    if not corpus["meta"]["tests_files"]:
        pytest.skip("this Python ships without its test suite")
    assert dropped, "expected e.g. Lib/test/test_subprocess.py to be a test of a held-out module"
    for path in dropped:
        assert path.read_text(encoding="utf-8", errors="replace") not in corpus["tests"], path


def _reference_cross_entropy(model, ids, seq_len):
    """Every target predicted from the seq_len tokens before it (or all of them, near the start)."""
    total = 0.0
    for t in range(1, len(ids)):
        context = ids[max(0, t - seq_len):t]
        logits = model(context[None])[0, -1].float()
        total -= torch.log_softmax(logits, -1)[ids[t]].item()
    return total / (len(ids) - 1)


@pytest.fixture(scope="module")
def small_model():
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=48)).eval()


def test_cross_entropy_with_stride_one_matches_a_per_token_reference(small_model):
    ids = torch.randint(0, 64, (41,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = _reference_cross_entropy(small_model, ids, seq_len=8)
    assert cross_entropy(small_model, ids, seq_len=8, stride=1, batch=5) == pytest.approx(expected, rel=1e-5)


def test_cross_entropy_windows_score_every_target_once(small_model):
    ids = torch.randint(0, 64, (50,), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():  # non-overlapping windows of 16 and a last window for the remaining 1 target
        logp = torch.cat([torch.log_softmax(small_model(ids[s:s + 16][None])[0].float(), -1) for s in (0, 16, 32)])
        tail = torch.log_softmax(small_model(ids[33:49][None])[0, -1].float(), -1)[ids[49]]
        expected = -(logp[torch.arange(48), ids[1:49]].sum() + tail).item() / 49
    assert cross_entropy(small_model, ids, seq_len=16) == pytest.approx(expected, rel=1e-5)
    short = ids[:10]  # shorter than one window
    assert cross_entropy(small_model, short, seq_len=16, stride=4) == pytest.approx(
        cross_entropy(small_model, short, seq_len=16), rel=1e-6)


def test_cross_entropy_rejects_bad_arguments(small_model):
    ids = torch.arange(20)
    with pytest.raises(ValueError, match="stride must be in 1..seq_len"):
        cross_entropy(small_model, ids, seq_len=8, stride=9)
    with pytest.raises(ValueError, match="stride must be in 1..seq_len"):
        cross_entropy(small_model, ids, seq_len=8, stride=0)
    with pytest.raises(ValueError, match="at least two tokens"):
        cross_entropy(small_model, ids[:1], seq_len=8)


def test_hf_names_invert_llmcore_names():
    model = Transformer(ModelConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=48))
    for name in model.state_dict():
        assert llmcore_name(hf_name(name)) == name
    with pytest.raises(ValueError, match="no transformers name"):
        hf_name("rotary.inv_freq")


def test_save_pretrained_round_trips_through_both_loaders(tmp_path, tiny):
    _, tok = tiny
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=4096, dim=32, n_layers=2, n_heads=4, n_kv_heads=1, hidden_dim=48,
                      tie_word_embeddings=True)
    model = Transformer(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())  # saved in bf16: make the original exactly representable
    save_pretrained(model, tok, tmp_path, meta={"note": "test"})
    assert json.loads((tmp_path / "training.json").read_text()) == {"note": "test"}
    ids = torch.tensor([[1, 2, 3, 4000, 5]])
    reloaded = load_pretrained(tmp_path, device="cpu", dtype=torch.float32)
    theirs = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    with torch.inference_mode():
        assert torch.equal(model(ids), reloaded(ids))
        assert (model(ids) - theirs(ids).logits).abs().max().item() < 1e-4


def test_save_pretrained_refuses_features_it_cannot_write(tmp_path, tiny):
    cfg = ModelConfig(vocab_size=4096, dim=32, n_layers=1, n_heads=4, hidden_dim=48, qk_norm=True)
    with pytest.raises(ValueError, match="plain Llama"):
        save_pretrained(Transformer(cfg), tiny[1], tmp_path)


def test_learning_rate_warms_up_decays_and_stays_at_the_floor():
    r = Recipe(steps=100, warmup=10, lr=1e-3, min_lr_ratio=0.1)
    assert lr_at(0, r) == pytest.approx(1e-4) and lr_at(9, r) == pytest.approx(1e-3)
    decay = [lr_at(s, r) for s in range(10, 101)]
    assert all(a >= b for a, b in zip(decay, decay[1:]))  # never rises after the warm-up
    assert lr_at(100, r) == pytest.approx(1e-4)
    assert [lr_at(s, r) for s in (101, 150, 10_000)] == [pytest.approx(1e-4)] * 3


def test_train_takes_a_device_name_or_a_device():
    """`train(..., device="cpu")` as well as torch.device("cpu") (it used to need the
    latter: it read `device.type`)."""
    from llmcore.model import ModelConfig
    from llmcore.pretrained import Recipe, train

    cfg = ModelConfig(vocab_size=64, dim=32, n_layers=1, n_heads=2, n_kv_heads=1,
                      hidden_dim=48, max_position_embeddings=64)
    ids = torch.randint(0, 64, (400,), generator=torch.Generator().manual_seed(0))
    curves = []
    for device in ("cpu", torch.device("cpu")):
        model, curve, _ = train(cfg, Recipe(steps=3, batch=2, seq_len=16, warmup=1), ids,
                                device, log=lambda *a, **k: None)
        assert model.device.type == "cpu" and len(curve) >= 1
        curves.append([p["loss"] for p in curve])
    assert curves[0] == curves[1]  # seeded: the same run either way


def _with_post_processor(tmp_path, post_processor, **config):
    """A copy of tiny's tokenizer files whose tokenizer.json has this post_processor
    and whose tokenizer_config.json has these extra entries."""
    source = bundled_dir("tiny")
    spec = json.loads((source / "tokenizer.json").read_text())
    spec["post_processor"] = post_processor
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    settings = json.loads((source / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**settings, **config}))
    return tmp_path


BOS_TEMPLATE = {"type": "TemplateProcessing",  # as Llama 3's tokenizer.json writes it
                "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
                "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>",
                                                    "ids": [4095],
                                                    "tokens": ["<|endoftext|>"]}}}


@pytest.mark.parametrize("post_processor", [
    BOS_TEMPLATE, {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
         "use_regex": True}, BOS_TEMPLATE]}])
def test_prompt_prefix_is_what_transformers_adds_before_a_text(tmp_path,
                                                               post_processor):
    from transformers import PreTrainedTokenizerFast

    from llmcore.pretrained import _hf_prompt_prefix
    path = _with_post_processor(tmp_path, post_processor)
    ours = Tokenizer.from_hf_json(path / "tokenizer.json")
    assert ours.special_tokens["<|endoftext|>"] == 4095
    theirs = PreTrainedTokenizerFast(tokenizer_file=str(path / "tokenizer.json"))
    text = "def f(x):\n    return x"
    prefix = _hf_prompt_prefix(path)
    assert prefix == [4095]
    assert prefix + ours.encode(text) == theirs.encode(text, add_special_tokens=True)


def test_prompt_prefix_from_add_bos_token_or_none(tmp_path):
    from llmcore.pretrained import _hf_prompt_prefix, prompt_prefix
    assert prompt_prefix("tiny") == []  # tiny's tokenizer adds nothing
    path = _with_post_processor(tmp_path, None, add_bos_token=True,
                                bos_token="<|endoftext|>")
    assert _hf_prompt_prefix(path) == [4095]
    path = _with_post_processor(tmp_path, None, add_bos_token=False)
    assert _hf_prompt_prefix(path) == []
