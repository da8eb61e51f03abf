"""Answers for the appendix C checkers: one correct, several wrong (tests/test_exercises.py)."""
import torch


def _group(values, scale=None, offset=8, signed_max=False, clamp=True, floor=False,
           eps=1e-12, float_codes=False):
    if scale is None:
        top = values.max() if signed_max else values.abs().max()
        scale = top.clamp(min=eps) / 7 if eps else top / 7
    x = values / scale
    codes = (torch.floor(x) if floor else torch.round(x)) + offset
    if clamp:
        codes = codes.clamp(offset - 8, offset + 7)
    return (codes if float_codes else codes.to(torch.long)), scale


def _bytes(shapes, fmt, group_size=32, scale_bytes=2, pad=True, scales=True,
           int4_bytes=0.5):
    total = 0
    for out, n_in in shapes:
        if fmt == "bf16":
            total += 2 * out * n_in
        elif fmt == "int8":
            total += out * n_in + (out * scale_bytes if scales else 0)
        else:
            groups = -(-n_in // group_size)
            padded = groups * group_size if pad else n_in
            total += int(out * padded * int4_bytes)
            total += out * groups * scale_bytes if scales else 0
    return total


def _speedup(before, after, bandwidth, fixed, use_fixed=True, invert=False):
    fixed = fixed if use_fixed else 0.0
    t_before, t_after = fixed + before / bandwidth, fixed + after / bandwidth
    return t_after / t_before if invert else t_before / t_after


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "chC.check_quantize_group": (
        _group,
        [lambda v, s=None: _group(v, s, offset=0),             # no +8 offset
         lambda v, s=None: _group(v, s, signed_max=True),      # max v, not max |v|
         lambda v, s=None: _group(v, s, clamp=False),          # no clamp to 0..15
         lambda v, s=None: _group(v, s, floor=True),           # floor, not round
         lambda v, s=None: _group(v, s, eps=0),                # 0 / 0 on a zero group
         lambda v, s=None: _group(v, s, float_codes=True)]),   # float codes
    "chC.check_bytes_per_step": (
        _bytes,
        [lambda *a, **k: _bytes(*a, **k, pad=False),          # rows not padded to groups
         lambda *a, **k: _bytes(*a, **k, scales=False),       # scales forgotten
         lambda *a, **k: _bytes(*a, **k, int4_bytes=1)]),     # int4 stored a byte each
    "chC.check_predicted_speedup": (
        _speedup,
        [lambda *a: _speedup(*a, use_fixed=False),            # the fixed cost ignored
         lambda *a: _speedup(*a, invert=True)]),              # new time over old
    "chC.check_q_int4_bits": (4.125, [4,          # the scales forgotten
                                      4.25,       # a 32-bit scale
                                      4.5,        # groups of 32
                                      0.515625,   # bytes, not bits
                                      20]),       # 4 + 16, not shared by the group
    "chC.check_q_kv_sequences": (62, [64,         # the scales forgotten
                                      32,         # bfloat16
                                      124,        # keys only, or values only
                                      66]),       # KiB per token, not sequences
    "chC.check_q_decode_ceiling": (1330, [1371,   # the scales forgotten
                                          343,    # bfloat16
                                          686,    # int4 stored a byte each
                                          2743,   # bits / 8 twice
                                          0.75]),  # milliseconds a step
}
