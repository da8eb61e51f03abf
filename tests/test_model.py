"""Tests for llmcore.model: config validation, forward contract, KV-cache hook, counting helpers."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from llmcore.model import ModelConfig, Transformer

TINY = dict(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=48)


def _model(**overrides):
    torch.manual_seed(0)
    return Transformer(ModelConfig(**{**TINY, **overrides})).eval()


# Configuration

def test_config_defaults():
    cfg = ModelConfig(vocab_size=10, dim=48, n_layers=1, n_heads=6, hidden_dim=64)
    assert cfg.n_kv_heads == 6 and cfg.head_dim == 8


@pytest.mark.parametrize("overrides,message", [
    ({"n_kv_heads": 3}, "n_heads=4 must be a multiple of n_kv_heads=3"),
    ({"n_kv_heads": 0}, "must be a multiple of n_kv_heads=0"),
    ({"dim": 30}, "dim=30 is not divisible by n_heads=4; set head_dim"),
    ({"head_dim": 7}, "head_dim must be a positive even number"),
    ({"vocab_size": 0}, "vocab_size must be a positive int"),
    ({"n_layers": 2.0}, "n_layers must be a positive int"),
    ({"norm_eps": 0.0}, "norm_eps and rope_theta must be > 0"),
    ({"sliding_window": 0}, "sliding_window must be a positive int"),
    ({"attn_impl": "flash"}, "attn_impl='flash'; choose one of"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}, "rope_scaling type 'yarn' is not supported"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "missing \\['low_freq_factor'"),
])
def test_config_validation_errors(overrides, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**{**TINY, **overrides})


def test_explicit_head_dim_may_differ_from_dim_over_heads():
    model = _model(head_dim=16)  # Qwen3 style: n_heads * head_dim = 64 != dim = 32
    assert model.blocks[0].attn.q_proj.weight.shape == (64, 32)
    assert model(torch.randint(0, 64, (1, 5))).shape == (1, 5, 64)


# Forward

def test_forward_shapes_and_hidden_states_for_logit_lens():
    model = _model()
    ids = torch.randint(0, 64, (3, 6))
    logits, hidden = model(ids, return_hidden_states=True)
    assert logits.shape == (3, 6, 64)
    assert len(hidden) == 3 and all(h.shape == (3, 6, 32) for h in hidden)
    assert torch.equal(hidden[0], model.embed.weight[ids])
    torch.testing.assert_close(model.lm_head(model.norm(hidden[-1])), logits)  # lens on the last layer = logits


def test_default_positions_and_1d_positions():
    model = _model()
    ids = torch.randint(0, 64, (2, 5))
    torch.testing.assert_close(model(ids), model(ids, positions=torch.arange(5)))
    torch.testing.assert_close(model(ids), model(ids, positions=torch.arange(5)[None]))
    shifted = model(ids, positions=torch.arange(100, 105).expand(2, 5))
    torch.testing.assert_close(model(ids), shifted, atol=1e-4, rtol=0)  # RoPE: only offsets matter
    with pytest.raises(ValueError, match="positions has shape"):
        model(ids, positions=torch.arange(6))


def test_explicit_and_sdpa_models_agree():
    explicit, fused = _model(attn_impl="explicit"), _model()
    fused.load_state_dict(explicit.state_dict())
    ids = torch.randint(0, 64, (2, 9))
    mask = torch.tensor([[1] * 9, [0] * 4 + [1] * 5])
    torch.testing.assert_close(explicit(ids, attention_mask=mask), fused(ids, attention_mask=mask), atol=1e-5, rtol=0)


def test_left_padding_gives_the_unpadded_logits():
    model = _model()
    ids = torch.randint(1, 64, (2, 8))
    mask = torch.tensor([[1] * 8, [0, 0, 0] + [1] * 5])
    padded = model(ids, attention_mask=mask)
    alone = model(ids[1:, 3:])
    torch.testing.assert_close(padded[1, 3:], alone[0], atol=1e-5, rtol=0)
    assert torch.isfinite(padded).all()


def test_sliding_window_limits_the_receptive_field():
    model = _model(sliding_window=3)  # 2 layers x (window - 1) = 4 tokens back at most
    ids = torch.randint(1, 64, (1, 10))
    changed = ids.clone()
    changed[0, 0] = 0
    out, out_changed = model(ids), model(changed)
    assert not torch.allclose(out[0, 4], out_changed[0, 4])
    torch.testing.assert_close(out[0, 5:], out_changed[0, 5:])


class SlotCache:
    """A simple growing cache: slot j holds position j, for every layer."""

    def __init__(self, n_layers):
        self.k, self.v = [None] * n_layers, [None] * n_layers
        self.passes = []  # the positions of every forward pass, as begin_forward saw them

    def begin_forward(self, positions):
        self.passes.append(positions.tolist())

    def attend(self, layer_idx, positions, q, k, v, window=None):
        return None  # attention is left to the layer, through update()

    def update(self, layer_idx, positions, k, v):
        old_k, old_v = self.k[layer_idx], self.v[layer_idx]
        self.k[layer_idx] = k if old_k is None else torch.cat([old_k, k], dim=2)
        self.v[layer_idx] = v if old_v is None else torch.cat([old_v, v], dim=2)
        return self.k[layer_idx], self.v[layer_idx]


@pytest.mark.parametrize("overrides", [{}, {"qk_norm": True, "sliding_window": 3}, {"attn_impl": "explicit"}])
def test_incremental_decoding_through_the_cache_hook_matches_full_forward(overrides):
    model = _model(**overrides)
    ids = torch.randint(0, 64, (2, 9))
    full = model(ids)
    cache = SlotCache(model.cfg.n_layers)
    steps = [model(ids[:, :5], positions=torch.arange(5), kv_cache=cache)]
    for t in range(5, 9):
        steps.append(model(ids[:, t:t + 1], positions=torch.tensor([t]), kv_cache=cache))
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    # The model announced each pass once, with positions expanded to (batch, seq).
    batch = ids.shape[0]
    assert cache.passes == [[[0, 1, 2, 3, 4]] * batch] + [[[t]] * batch for t in range(5, 9)]


def test_cache_requires_positions():
    with pytest.raises(ValueError, match="pass positions when using a kv_cache"):
        _model()(torch.randint(0, 64, (1, 3)), kv_cache=SlotCache(2))


# Counting

def test_tied_embeddings_share_one_matrix():
    tied, untied = _model(tie_word_embeddings=True), _model()
    assert tied.lm_head.weight is tied.embed.weight
    assert untied.num_parameters() - tied.num_parameters() == 64 * 32


def test_num_parameters_by_hand():
    model = _model()
    d, hd, h, kv, f, v = 32, 8, 4, 2, 48, 64
    per_block = d * h * hd + 2 * d * kv * hd + h * hd * d + 3 * d * f + 2 * d
    assert model.num_parameters() == v * d + 2 * per_block + d + d * v
    assert model.num_parameters(exclude_embeddings=True) == 2 * per_block + d + d * v


@pytest.mark.parametrize("tied", [False, True])
def test_flops_per_token_matches_torch_flop_counter(tied):
    model = _model(attn_impl="explicit", tie_word_embeddings=tied)
    seq = 7
    with FlopCounterMode(display=False) as prefill, torch.no_grad():
        model(torch.randint(0, 64, (1, seq)))
    assert prefill.get_total_flops() == seq * model.flops_per_token(context_len=seq)
    # Decoding one token against `seq` cached tokens attends to seq + 1 keys.
    cache = SlotCache(model.cfg.n_layers)
    with torch.no_grad():
        model(torch.randint(0, 64, (1, seq)), positions=torch.arange(seq), kv_cache=cache)
        with FlopCounterMode(display=False) as decode:
            model(torch.randint(0, 64, (1, 1)), positions=torch.tensor([seq]), kv_cache=cache)
    assert decode.get_total_flops() == model.flops_per_token(context_len=seq + 1)
    assert model.flops_per_token() == 2 * (model.num_parameters(exclude_embeddings=True)
                                           - 2 * 2 * 32 - 32 + (64 * 32 if tied else 0))  # minus norms
