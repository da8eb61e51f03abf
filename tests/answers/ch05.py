"""Answers for the chapter 05 checkers: one correct, several wrong (used by tests/test_exercises.py)."""

#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "ch05.check_decode_intensity": (
        lambda n, b, bytes_: 2 * n * b / (n * bytes_),
        [lambda n, b, bytes_: 2 * n / (n * bytes_),                 # forgot the batch
         lambda n, b, bytes_: 2 * n * b / (n * b * bytes_),         # weights read once per sequence
         lambda n, b, bytes_: n * b / (n * bytes_),                 # one FLOP per weight
         lambda n, b, bytes_: 2 * n * b / (n * bytes_ * 8)]),       # bits, not bytes
    "ch05.check_attainable": (
        lambda peak, bw, i: min(peak, bw * i),
        [lambda peak, bw, i: max(peak, bw * i),                    # the higher ceiling
         lambda peak, bw, i: bw * i,                               # no compute roof
         lambda peak, bw, i: min(peak, bw / i)]),                  # intensity upside down
    "ch05.check_latency_floors": (
        lambda n, b, s, peak, bw: (2 * n * s / peak, n * b / bw),
        [lambda n, b, s, peak, bw: (n * b / bw, 2 * n * s / peak),           # swapped
         lambda n, b, s, peak, bw: (n * s / peak, n * b / bw),               # one FLOP per weight
         lambda n, b, s, peak, bw: (2 * n * s / peak, n * b * s / bw),       # decode reads per prompt token
         lambda n, b, s, peak, bw: (n * b * s / bw, n * b / bw)]),           # prefill as memory-bound
}
