"""Answers for the chapter 05 checkers: one correct, several wrong (used by
tests/test_exercises.py)."""
import math

from llmcore.profile import kv_bytes_per_token, matmul_weights


def _intensity(cfg, context, batch, b, mode="ok"):
    weights = matmul_weights(cfg)
    visible = context if mode == "no_plus_one" else context + 1
    attention = 4 * cfg.n_layers * cfg.n_heads * cfg.head_dim * visible
    if mode == "no_attention":
        attention = 0
    flops = batch * (2 * weights + attention)
    kv = visible * kv_bytes_per_token(cfg, b)
    if mode == "weights_only":  # n_params cancels: 2 * batch / bytes per weight
        kv = 0
    elif mode != "shared_cache":  # every sequence reads its own cache
        kv *= batch
    return flops / (weights * b + kv)


def _to_ridge(cfg, context, b, ridge, mode="ok"):
    f = 2 * matmul_weights(cfg) + 4 * cfg.n_layers * cfg.n_heads * cfg.head_dim * (
        context + 1)
    k = 0 if mode == "weights_only" else (context + 1) * kv_bytes_per_token(cfg, b)
    w = matmul_weights(cfg) * b
    if mode == "scan_4096":
        return next((n for n in range(1, 4097)
                     if n * f / (w + n * k) >= ridge), None)
    if f <= ridge * k:
        return None
    exact = ridge * w / (f - ridge * k)
    return int(exact) if mode == "floor" else math.ceil(exact)


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "ch05.check_decode_intensity": (
        _intensity,
        [lambda c, x, n, b, mode=mode: _intensity(c, x, n, b, mode)
         for mode in ("weights_only", "shared_cache", "no_plus_one", "no_attention")]),
    "ch05.check_batch_to_ridge": (
        _to_ridge,
        [lambda c, x, b, r, mode=mode: _to_ridge(c, x, b, r, mode)
         for mode in ("weights_only", "scan_4096", "floor")]),
    "ch05.check_latency_floors": (
        lambda n, b, s, peak, bw: (2 * n * s / peak, n * b / bw),
        [lambda n, b, s, peak, bw: (n * b / bw, 2 * n * s / peak),      # swapped
         lambda n, b, s, peak, bw: (n * s / peak, n * b / bw),          # 1 FLOP/weight
         lambda n, b, s, peak, bw: (2 * n * s / peak, n * b * s / bw),  # per token
         lambda n, b, s, peak, bw: (n * b * s / bw, n * b / bw)]),      # memory-bound
    # intensity = batch in bf16; the A100's ridge is 312e12 / 2.039e12 FLOP/byte
    "ch05.check_q_batch_to_ridge": (
        312e12 / 2.039e12,
        [312e12 / 2.039e12 / 2,   # bytes per weight forgotten: intensity 2B
         312e12 / 2.039e12 * 2,   # 1 FLOP per weight, or float32's 4 bytes
         989e12 / 3.35e12,        # the H100's ridge
         2.039e12 / 312e12]),     # the ratio upside down
}
