"""llmcore vs transformers: tiny random checkpoints of every supported family must give the same logits.

Each model is built by transformers, saved with save_pretrained (safetensors) into a temporary
directory, loaded with llmcore.hf.load_pretrained, and run on the same token ids.
"""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from llmcore.hf import config_from_hf, load_pretrained
from llmcore.model import Transformer

TOL = 1e-4
BASE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=256)
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
FAMILIES = {
    "llama": (LlamaConfig, LlamaForCausalLM, {}),
    "llama3": (LlamaConfig, LlamaForCausalLM,
               dict(rope_theta=500000.0, rope_scaling=LLAMA3_ROPE, max_position_embeddings=131072)),
    "mistral": (MistralConfig, MistralForCausalLM, dict(sliding_window=4)),  # window < test sequences
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, dict(rope_theta=1000000.0)),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, dict(head_dim=32, rope_theta=1000000.0)),  # 4 * 32 != 64
    "smollm2": (LlamaConfig, LlamaForCausalLM,  # tied embeddings, 3 layers, multi-query attention
                dict(tie_word_embeddings=True, num_hidden_layers=3, num_key_value_heads=1, rope_theta=100000.0)),
}


def _build(family):
    config_cls, model_cls, extra = FAMILIES[family]
    torch.manual_seed(0)
    model = model_cls(config_cls(**{**BASE, **extra})).eval()
    # HF's init leaves norms at 1 and biases at 0, which would hide mix-ups; make every tensor distinct.
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0, 0.2) if "norm" in name else p.normal_(0.0, 0.1)
    return model


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """family -> (transformers model, directory it was saved to), built once per test module."""
    built = {}
    for family in FAMILIES:
        model = _build(family)
        directory = tmp_path_factory.mktemp(family)
        model.save_pretrained(directory, safe_serialization=True)
        built[family] = (model, directory)
    return built


def _ids(batch, seq, seed=1):
    return torch.randint(0, 256, (batch, seq), generator=torch.Generator().manual_seed(seed))


def _max_diff(a, b):
    return (a - b).abs().max().item()


# Logit parity

@pytest.mark.parametrize("family", FAMILIES)
def test_logits_match_transformers(checkpoints, family):
    hf, directory = checkpoints[family]
    ours = load_pretrained(directory, device="cpu", dtype=torch.float32)
    ids = _ids(3, 11)
    far = torch.arange(3000, 3011).expand(3, 11)  # beyond 2048: where llama3 scaling matters
    with torch.no_grad():
        assert _max_diff(ours(ids), hf(ids).logits) < TOL
        assert _max_diff(ours(ids, positions=far), hf(ids, position_ids=far).logits) < TOL


@pytest.mark.parametrize("family", ["llama", "qwen3", "mistral"])
def test_explicit_attention_path_matches_transformers(checkpoints, family):
    hf, directory = checkpoints[family]
    ours = load_pretrained(directory, device="cpu", dtype=torch.float32, attn_impl="explicit")
    ids = _ids(2, 10)
    with torch.no_grad():
        assert _max_diff(ours(ids), hf(ids).logits) < TOL


def test_llama3_long_sequence_past_2048(checkpoints):
    hf, directory = checkpoints["llama3"]
    ours = load_pretrained(directory, device="cpu", dtype=torch.float32)
    ids = _ids(1, 2100)
    with torch.no_grad():
        assert _max_diff(ours(ids), hf(ids).logits) < TOL


def test_llama3_scaling_without_original_context_defaults_to_max_positions(checkpoints, tmp_path):
    """A Llama-3 rope_scaling may omit original_max_position_embeddings; transformers then uses
    max_position_embeddings, and so must we (a different value changes every scaled frequency)."""
    hf, directory = checkpoints["llama3"]
    shutil.copytree(directory, tmp_path, dirs_exist_ok=True)
    cfg = json.loads((tmp_path / "config.json").read_text())
    for layout in ("rope_parameters", "rope_scaling"):  # transformers 5.x and 4.x
        if cfg.get(layout):
            cfg[layout].pop("original_max_position_embeddings", None)
    cfg["max_position_embeddings"] = 4096
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ours = load_pretrained(tmp_path, device="cpu", dtype=torch.float32)
    assert ours.cfg.rope_scaling["original_max_position_embeddings"] == 4096
    reference = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    ids, far = _ids(1, 11), torch.arange(3000, 3011)[None]
    with torch.no_grad():
        ours_logits = ours(ids, positions=far)
        assert _max_diff(ours_logits, reference(ids, position_ids=far).logits) < TOL
        # ... and the default matters: the checkpoint's own 8192 gives different logits.
        assert _max_diff(ours_logits, hf(ids, position_ids=far).logits) > 10 * TOL


def test_wrong_rope_scaling_is_detected(checkpoints, tmp_path):
    """Negative control: the same weights with plain RoPE must *not* pass the parity check."""
    hf, directory = checkpoints["llama3"]
    shutil.copytree(directory, tmp_path, dirs_exist_ok=True)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["rope_parameters"] = {"rope_theta": 500000.0, "rope_type": "default"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ours = load_pretrained(tmp_path, device="cpu", dtype=torch.float32)
    ids = _ids(1, 2100)
    with torch.no_grad():
        short, long = _max_diff(ours(ids[:, :11]), hf(ids[:, :11]).logits), _max_diff(ours(ids), hf(ids).logits)
    # RoPE is relative: the change shows most when tokens are far apart, but even 11 tokens exceed TOL.
    assert short > 10 * TOL and long > 100 * TOL


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "smollm2"])
def test_hidden_states_match_transformers(checkpoints, family):
    hf, directory = checkpoints[family]
    ours = load_pretrained(directory, device="cpu", dtype=torch.float32)
    ids = _ids(2, 8)
    with torch.no_grad():
        _, hidden = ours(ids, return_hidden_states=True)
        hf_hidden = hf(ids, output_hidden_states=True).hidden_states
    assert len(hidden) == len(hf_hidden)
    for h, ref in zip(hidden[:-1], hf_hidden[:-1]):
        assert _max_diff(h, ref) < TOL
    assert _max_diff(ours.norm(hidden[-1]), hf_hidden[-1]) < TOL  # HF's last entry is after the final norm


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("hf_style_positions", [False, True])
def test_left_padded_batch_matches_transformers(checkpoints, family, hf_style_positions):
    hf, directory = checkpoints[family]
    ours = load_pretrained(directory, device="cpu", dtype=torch.float32)
    ids = _ids(3, 9)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, :3] = 0
    mask[2, :7] = 0
    kwargs, hf_kwargs = {"attention_mask": mask}, {"attention_mask": mask}
    if hf_style_positions:  # what HF's generate() passes: each row counts from its first real token
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        kwargs["positions"], hf_kwargs["position_ids"] = positions, positions
    with torch.no_grad():
        logits, ref = ours(ids, **kwargs), hf(ids, **hf_kwargs).logits
    real = mask.bool()
    assert torch.isfinite(logits).all()
    assert _max_diff(logits[real], ref[real]) < TOL


# Checkpoint formats

def _to_transformers4_layout(cfg):
    """The same config as transformers 4.x wrote it: top-level rope_theta and rope_scaling."""
    cfg = dict(cfg)
    params = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = params.pop("rope_theta")
    cfg["rope_scaling"] = None if params.get("rope_type") == "default" else params
    return cfg


def test_transformers5_writes_rope_parameters(checkpoints):
    cfg = json.loads((checkpoints["llama3"][1] / "config.json").read_text())
    assert "rope_scaling" not in cfg and "rope_theta" not in cfg
    assert cfg["rope_parameters"] == {"rope_theta": 500000.0, **LLAMA3_ROPE}


@pytest.mark.parametrize("family", ["llama3", "qwen3"])
def test_both_rope_config_layouts_give_the_same_model(checkpoints, family, tmp_path):
    hf, directory = checkpoints[family]
    new_layout = json.loads((directory / "config.json").read_text())
    old_layout = _to_transformers4_layout(new_layout)
    assert config_from_hf(old_layout) == config_from_hf(new_layout)
    shutil.copytree(directory, tmp_path, dirs_exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(old_layout))
    ids, far = _ids(2, 7), torch.arange(3000, 3007)
    with torch.no_grad():
        ours = load_pretrained(tmp_path, device="cpu", dtype=torch.float32)(ids, positions=far)
        hf_reloaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()(ids, position_ids=far.expand(2, 7)).logits
        assert _max_diff(ours, hf(ids, position_ids=far.expand(2, 7)).logits) < TOL
    assert _max_diff(hf_reloaded, ours) < TOL  # transformers itself reads the old layout the same way


def test_sharded_checkpoint(checkpoints, tmp_path):
    hf, _ = checkpoints["qwen2"]
    hf.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="100KB")
    assert (tmp_path / "model.safetensors.index.json").exists() and len(list(tmp_path.glob("*.safetensors"))) > 1
    ours = load_pretrained(tmp_path, device="cpu", dtype=torch.float32)
    with torch.no_grad():
        assert _max_diff(ours(_ids(2, 6)), hf(_ids(2, 6)).logits) < TOL


def test_tied_checkpoint_has_no_lm_head_and_loads_tied(checkpoints):
    _, directory = checkpoints["smollm2"]
    assert "lm_head.weight" not in load_file(directory / "model.safetensors")
    ours = load_pretrained(directory, device="cpu", dtype=torch.float32)
    assert ours.lm_head.weight is ours.embed.weight
    assert not ours.lm_head.weight.is_meta


def test_bfloat16_loading(checkpoints):
    hf, directory = checkpoints["qwen3"]
    ours = load_pretrained(directory, device="cpu", dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in ours.parameters())
    ids = _ids(2, 8)
    with torch.no_grad():
        logits, ref = ours(ids), hf(ids).logits
    assert logits.dtype == torch.bfloat16
    assert _max_diff(logits.float(), ref) < 0.1 * ref.abs().max().item()  # bf16 keeps ~3 significant digits


def test_default_device_and_dtype_come_from_llmcore_device(checkpoints, monkeypatch):
    from llmcore.device import default_dtype, pick_device

    monkeypatch.delenv("LLMCORE_DEVICE", raising=False)
    monkeypatch.delenv("LLMCORE_DTYPE", raising=False)
    ours = load_pretrained(checkpoints["llama"][1])
    param = next(ours.parameters())
    assert param.device.type == pick_device().type and param.dtype == default_dtype(pick_device())


# Published configs (no weights): the mapping builds models of the published sizes

PUBLISHED = {  # name -> (config.json fields, parameter count on the model card / safetensors metadata)
    "Llama-3.2-1B": (dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=2048,
                          intermediate_size=8192, num_attention_heads=32, num_hidden_layers=16,
                          num_key_value_heads=8, head_dim=64, rms_norm_eps=1e-5, rope_theta=500000.0,
                          rope_scaling={**LLAMA3_ROPE, "factor": 32.0}, max_position_embeddings=131072,
                          tie_word_embeddings=True, vocab_size=128256, hidden_act="silu"), 1_235_814_400),
    "Mistral-7B-v0.1": (dict(architectures=["MistralForCausalLM"], model_type="mistral", hidden_size=4096,
                             intermediate_size=14336, num_attention_heads=32, num_hidden_layers=32,
                             num_key_value_heads=8, rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=4096,
                             max_position_embeddings=32768, tie_word_embeddings=False, vocab_size=32000),
                        7_241_732_096),
    "Qwen2.5-0.5B": (dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_size=896,
                          intermediate_size=4864, num_attention_heads=14, num_hidden_layers=24,
                          num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1000000.0, sliding_window=32768,
                          use_sliding_window=False, max_position_embeddings=32768, tie_word_embeddings=True,
                          vocab_size=151936), 494_032_768),
}


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_configs_give_published_parameter_counts(name):
    hf_config, expected = PUBLISHED[name]
    cfg = config_from_hf(hf_config)
    with torch.device("meta"):
        model = Transformer(cfg)
    assert model.num_parameters() == expected
    assert cfg.sliding_window == (4096 if name == "Mistral-7B-v0.1" else None)


# Clear errors

def _save_tiny_llama(directory):
    _build("llama").save_pretrained(directory, safe_serialization=True)


def test_unsupported_architecture(tmp_path):
    _save_tiny_llama(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.update(architectures=["GPT2LMHeadModel"], model_type="gpt2")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"unsupported model \['GPT2LMHeadModel'\].*LlamaForCausalLM.*Qwen3"):
        load_pretrained(tmp_path, device="cpu", dtype=torch.float32)
    with pytest.raises(ValueError, match="unsupported model 'gemma'.*model_type"):
        config_from_hf({"model_type": "gemma"})


@pytest.mark.parametrize("change,message", [
    ({"hidden_act": "gelu"}, "needs 'silu'"),
    ({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "use_sliding_window": True},
     "use_sliding_window=true is not supported"),
    ({"rope_parameters": {"rope_theta": 1e4, "rope_type": "yarn", "factor": 4.0}}, "'yarn' is not supported"),
    ({"rope_parameters": {"rope_theta": 1e4, "rope_type": "default", "partial_rotary_factor": 0.5}},
     "partial_rotary_factor"),
])
def test_unsupported_config_options(change, message):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **BASE, **change}
    with pytest.raises(ValueError, match=message):
        config_from_hf(cfg)


def test_missing_safetensors(tmp_path):
    _save_tiny_llama(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="no model.safetensors or model.safetensors.index.json"):
        load_pretrained(tmp_path, device="cpu", dtype=torch.float32)


def test_pickle_only_checkpoint_is_refused(tmp_path):
    _save_tiny_llama(tmp_path)
    torch.save(load_file(tmp_path / "model.safetensors"), tmp_path / "pytorch_model.bin")
    (tmp_path / "model.safetensors").unlink()
    message = r"only PyTorch pickle weights \['pytorch_model.bin'\].*safe_serialization"
    with pytest.raises(FileNotFoundError, match=message):
        load_pretrained(tmp_path, device="cpu", dtype=torch.float32)


def test_missing_config_and_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_pretrained(tmp_path, device="cpu", dtype=torch.float32)
    with pytest.raises(FileNotFoundError, match="no checkpoint directory"):
        load_pretrained(tmp_path / "absent", device="cpu", dtype=torch.float32)


def test_unknown_and_missing_tensors(tmp_path):
    _save_tiny_llama(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(8)  # old, harmless: ignored
    save_file(weights, tmp_path / "model.safetensors")
    load_pretrained(tmp_path, device="cpu", dtype=torch.float32)
    save_file({**weights, "model.vision_tower.weight": torch.ones(2)}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="tensors llmcore does not know: \\['model.vision_tower.weight'\\]"):
        load_pretrained(tmp_path, device="cpu", dtype=torch.float32)
    del weights["model.layers.1.mlp.up_proj.weight"]
    save_file(weights, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="missing \\['blocks.1.mlp.up_proj.weight'\\]"):
        load_pretrained(tmp_path, device="cpu", dtype=torch.float32)


def test_untied_config_without_lm_head_suggests_tying(checkpoints, tmp_path):
    shutil.copytree(checkpoints["smollm2"][1], tmp_path, dirs_exist_ok=True)
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "tie_word_embeddings": False}))
    with pytest.raises(ValueError, match="missing \\['lm_head.weight'\\].*tie_word_embeddings: true"):
        load_pretrained(tmp_path, device="cpu", dtype=torch.float32)


# Hub ids (snapshot_download is replaced: tests never touch the network)

def test_hub_id_is_downloaded_with_safetensors_patterns(checkpoints, monkeypatch):
    import huggingface_hub

    calls = []

    def fake_snapshot_download(repo_id, allow_patterns):
        calls.append((repo_id, allow_patterns))
        return str(checkpoints["llama"][1])

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    model = load_pretrained("llmcore-test/tiny-llama", device="cpu", dtype=torch.float32)
    assert calls == [("llmcore-test/tiny-llama", ["*.json", "*.safetensors", "*.jinja"])]
    assert isinstance(model, Transformer)


def test_hub_download_failure_says_what_to_do(monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    def offline(repo_id, allow_patterns):
        raise LocalEntryNotFoundError("cannot reach the Hub and nothing is cached")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(OSError, match="not a local directory and downloading it .* failed .*If you are offline"):
        load_pretrained("llmcore-test/tiny-llama", device="cpu", dtype=torch.float32)


def test_config_missing_required_keys():
    cfg = {"architectures": ["Qwen3ForCausalLM"], **BASE}
    del cfg["intermediate_size"]
    with pytest.raises(ValueError, match=r"config.json lacks \['intermediate_size'\]; is it a qwen3"):
        config_from_hf(cfg)


@pytest.mark.cuda
def test_cuda_loading_matches_transformers(checkpoints):
    hf, directory = checkpoints["qwen3"]
    ids = _ids(2, 16)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, :5] = 0
    fp32 = load_pretrained(directory, device="cuda", dtype=torch.float32)
    bf16 = load_pretrained(directory, device="cuda", dtype=torch.bfloat16)
    assert next(fp32.parameters()).is_cuda and next(bf16.parameters()).dtype == torch.bfloat16
    with torch.no_grad():
        ref, ref_padded = hf(ids).logits, hf(ids, attention_mask=mask).logits
        assert _max_diff(fp32(ids.cuda()).cpu(), ref) < TOL
        padded = fp32(ids.cuda(), attention_mask=mask.cuda()).cpu()
        assert _max_diff(padded[mask.bool()], ref_padded[mask.bool()]) < TOL
        assert _max_diff(bf16(ids.cuda()).float().cpu(), ref) < 0.1 * ref.abs().max().item()
