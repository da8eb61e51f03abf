"""Answers for the appendix D checkers: one correct, several wrong (tests/test_exercises.py)."""
import torch.nn.functional as F


def _shard(w_up, w_down, x, world, check=True, interleave=False, act=True,
           act_after=False, whole=False, split_inputs=False):
    hidden = w_up.shape[0]
    if check and hidden % world:
        raise ValueError(f"{world} ranks cannot share {hidden} hidden units")
    size = max(1, hidden // world)
    parts = []
    for r in range(world):
        block = slice(r, None, world) if interleave else slice(r * size, (r + 1) * size)
        if whole:
            block = slice(None)
        if split_inputs:  # the first layer split by its inputs: silu of a partial sum
            cols = slice(r * (x.shape[1] // world), (r + 1) * (x.shape[1] // world))
            parts.append(F.silu(x[:, cols] @ w_up[:, cols].T) @ w_down.T / world)
            continue
        h = x @ w_up[block].T
        h = F.silu(h) if act and not act_after else h
        y = h @ w_down[:, block].T
        parts.append(F.silu(y) if act_after else y)
    return parts


def _allreduce(n_layers, dim, dtype_bytes, batch, per_block=2, embedding=1,
               use_batch=True, bits=False):
    total = (per_block * n_layers + embedding) * dim * dtype_bytes
    total *= batch if use_batch else 1
    return total * 8 if bits else total


def _pick(params_billion, n_kv_heads, gpu_gb, dtype_bytes, kv_reserve_gb,
          divides=True, strict=False, reserve=True, bytes_=True, largest=False,
          limit=8, error=True):
    fits = []
    for n in range(1, limit + 1):
        need = params_billion * (dtype_bytes if bytes_ else 1) / n
        need += kv_reserve_gb if reserve else 0
        ok = need < gpu_gb if strict else need <= gpu_gb
        if ok and (not divides or n_kv_heads % n == 0):
            fits.append(n)
    if not fits:
        if error:
            raise ValueError("no tensor-parallel size up to 8 fits")
        return None
    return max(fits) if largest else min(fits)


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "chD.check_shard_columns_rows": (
        _shard,
        [lambda *a: _shard(*a, interleave=True),   # strided shares, not blocks
         lambda *a: _shard(*a, act=False),         # the activation forgotten
         lambda *a: _shard(*a, act_after=True),    # silu after the row-parallel layer
         lambda *a: _shard(*a, whole=True),        # every rank the whole product
         lambda *a: _shard(*a, check=False),       # an uneven split not refused
         lambda *a: _shard(*a, split_inputs=True)]),  # first layer split by inputs
    "chD.check_allreduce_bytes_per_token": (
        _allreduce,
        [lambda *a: _allreduce(*a, embedding=0),   # the embedding's all-reduce left out
         lambda *a: _allreduce(*a, per_block=1),   # one all-reduce per block
         lambda *a: _allreduce(*a, use_batch=False),  # the batch ignored
         lambda *a: _allreduce(*a, bits=True)]),   # bits, not bytes
    "chD.check_pick_world_size": (
        _pick,
        [lambda *a: _pick(*a, divides=False),      # any N, KV heads or not
         lambda *a: _pick(*a, strict=True),        # exactly full does not fit
         lambda *a: _pick(*a, reserve=False),      # the KV reserve forgotten
         lambda *a: _pick(*a, bytes_=False),       # one byte a parameter
         lambda *a: _pick(*a, largest=True),       # the largest N, not the smallest
         lambda *a: _pick(*a, limit=16),           # past 8 GPUs
         lambda *a: _pick(*a, error=False)]),      # None instead of ValueError
    "chD.check_q_tiny_allreduce": (6144, [3072,    # one all-reduce per block
                                          12288,   # float32
                                          6656,    # the embedding's added
                                          1536,    # split between the 2 ranks
                                          49152]),  # bits
    "chD.check_q_bubble": (0.2, [0.25,             # (S - 1) / M
                                 0.75,             # (S - 1) / S
                                 1 / 3,            # S / M
                                 3]),              # idle slots, not a fraction
    "chD.check_q_max_tp": (8, [64,                 # the query heads
                               16,                 # a power of two past the KV heads
                               4]),                # a divisor, not the largest
}
