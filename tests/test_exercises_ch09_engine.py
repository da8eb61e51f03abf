"""Exercise 9.7's rule (blocks two prompts share) is what the engine really does: a
prefix-caching Engine serves `first`, then `second`, and second's cached tokens are the
rule's answer times the block size, over many random and adversarial prompt pairs."""
from __future__ import annotations

import random

import pytest
import torch

from answers.ch09 import ANSWERS
from llmcore.engine import Engine, Request
from llmcore.exercises.ch09 import _shared_blocks
from llmcore.model import ModelConfig, Transformer
from llmcore.sampling import SamplingParams

BLOCK = 4


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4,
                                   n_kv_heads=2, hidden_dim=48,
                                   max_position_embeddings=256)).eval()


def _pairs(n: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """Prompt pairs: equal, one a prefix of the other, one extending the other, a token
    changed (often the last of a block), early blocks changed, or unrelated; tokens from
    a small alphabet so that blocks also match by chance."""
    rng = random.Random(seed)

    def prompt(length):
        return [rng.randrange(6) for _ in range(length)]

    pairs = []
    for i in range(n):
        first = prompt(rng.randint(1, 40))
        kind = i % 7
        if kind == 0:
            second = list(first)
        elif kind == 1:
            second = first[:rng.randint(1, len(first))]
        elif kind == 2:
            second = first + prompt(rng.randint(1, 9))
        elif kind in (3, 4):  # one token changed; kind 4: the last of a block
            second = list(first)
            ends = [j for j in range(BLOCK - 1, len(first), BLOCK)]
            j = rng.choice(ends) if kind == 4 and ends else rng.randrange(len(first))
            second[j] = 6 + rng.randrange(58)
        elif kind == 5:  # the first block changed, the rest equal
            second = [6 + rng.randrange(58)] + first[1:] + prompt(rng.randint(0, 5))
        else:
            second = prompt(rng.randint(1, 40))
        pairs.append((first, second))
    return pairs


def _engine_blocks(model, first: list[int], second: list[int]) -> int:
    engine = Engine(model, num_blocks=64, block_size=BLOCK, prefix_caching=True)
    params = SamplingParams(temperature=0.0, max_tokens=1)
    engine.add_request(Request("first", first, params))
    assert engine.run()[0].cached_tokens == 0  # nothing cached before it
    engine.add_request(Request("second", second, params))
    (done,) = engine.run()
    assert done.cached_tokens % BLOCK == 0
    return done.cached_tokens // BLOCK


def test_shared_blocks_rule_matches_the_engine(model):
    pairs = _pairs(140)
    found = [_engine_blocks(model, first, second) for first, second in pairs]
    for (first, second), blocks in zip(pairs, found):
        assert _shared_blocks(first, second, BLOCK) == blocks, (first, second)
        assert ANSWERS["ch09.check_shared_blocks"][0](first, second, BLOCK) == blocks
    assert len(set(found)) >= 5  # the pairs share from 0 to several blocks
    # every wrong answer the checker rejects is also wrong about the engine
    for wrong in ANSWERS["ch09.check_shared_blocks"][1]:
        assert any(wrong(f, s, BLOCK) != b for (f, s), b in zip(pairs, found))
