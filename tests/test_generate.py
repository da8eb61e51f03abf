"""llmcore.generate: every stop condition, usage, seeds, validation; no wall clock (a fake clock)."""
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from llmcore.generate import (
    Delta,
    GenerationResult,
    StopChecker,
    Usage,
    default_eos_ids,
    find_stop,
    generate,
    stream,
)
from llmcore.kvcache import KVCache, greedy_generate
from llmcore.model import ModelConfig, Transformer
from llmcore.sampling import SamplingParams
from llmcore.tokenizer import Tokenizer

TOKENIZER = Path(__file__).resolve().parent.parent / "llmcore" / "data" / "tokenizer.llmcore.json"
CFG = ModelConfig(vocab_size=4096, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=64,
                  max_position_embeddings=512)


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.load(TOKENIZER)  # the tiny model's tokenizer: 4,096 tokens, <|endoftext|> = EOS


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Transformer(CFG).eval()


class ScriptedModel(nn.Module):
    """A stand-in for a Transformer that always predicts the next token of `script`.

    The scripted token gets logit 10; the others a gentle slope (token 0 most likely), so a banned
    scripted token is replaced by token 0. Past the script's end it predicts `script[-1]` again.
    """

    def __init__(self, script, cfg=CFG):
        super().__init__()
        self.cfg, self.script = cfg, list(script)
        self.device, self.dtype = torch.device("cpu"), torch.float32  # what stream() reads
        self.prompt_len = None
        self.calls = 0

    def forward(self, input_ids, positions=None, kv_cache=None):
        self.calls += 1
        positions = positions.reshape(-1)
        if int(positions[0]) == 0:
            self.prompt_len = input_ids.shape[1]
        step = int(positions[-1]) + 1 - self.prompt_len  # index of the token this call predicts
        logits = -0.001 * torch.arange(self.cfg.vocab_size, dtype=torch.float32).repeat(*input_ids.shape, 1)
        logits[:, -1, self.script[min(step, len(self.script) - 1)]] = 10.0
        return logits


class FakeClock:
    """Advances `step` seconds every time it is read: start = 0, then token k is read at k + 1 steps."""

    def __init__(self, step=1.0):
        self.now, self.step = 0.0, step

    def __call__(self):
        now, self.now = self.now, self.now + self.step
        return now


def scripted(tok, text, extra=()):
    ids = tok.encode(text) + list(extra)
    return ScriptedModel(ids), ids


def collect(events):
    events = list(events)
    *deltas, result = events
    assert all(isinstance(d, Delta) and d.text for d in deltas) and isinstance(result, GenerationResult)
    return deltas, result


# ---------------------------------------------------------------- the loop on a real (random) model

def test_greedy_generate_matches_the_kvcache_greedy_loop(tok, model):
    prompt = tok.encode("def add(a, b):\n    return")
    got = generate(model, tok, prompt, SamplingParams(temperature=0, max_tokens=12), eos_token_ids=[])
    cache = KVCache(CFG, 1, len(prompt) + 12, "cpu", torch.float32)
    want = greedy_generate(model, torch.tensor([prompt]), 12, cache)[0].tolist()
    assert got.token_ids == want and got.text == tok.decode(want)
    assert got.finish_reason == "length" and got.stop_reason is None
    assert got.usage.prompt_tokens == len(prompt) and got.usage.completion_tokens == 12


def test_a_string_prompt_is_encoded(tok, model):
    by_text = generate(model, tok, "import os", SamplingParams(temperature=0, max_tokens=4), eos_token_ids=[])
    by_ids = generate(model, tok, tok.encode("import os"), SamplingParams(temperature=0, max_tokens=4),
                      eos_token_ids=[])
    assert by_text.token_ids == by_ids.token_ids and by_text.usage.prompt_tokens == len(tok.encode("import os"))


def test_eos_stops_and_is_counted_but_not_in_the_text(tok, model):
    eos = tok.special_tokens["<|endoftext|>"]
    assert default_eos_ids(tok) == [eos]
    r = generate(model, tok, "x = 1", SamplingParams(temperature=0, logit_bias={eos: 100.0}))
    assert r.token_ids == [eos] and r.text == "" and r.finish_reason == "stop" and r.stop_reason == eos
    assert r.usage.completion_tokens == 1 and r.usage.tpot_s is None


def test_min_tokens_holds_off_eos_until_reached(tok, model):
    eos = tok.special_tokens["<|endoftext|>"]
    r = generate(model, tok, "x = 1", SamplingParams(temperature=0, logit_bias={eos: 100.0}, min_tokens=5))
    assert len(r.token_ids) == 6 and eos not in r.token_ids[:5] and r.token_ids[5] == eos
    assert r.finish_reason == "stop" and "<|endoftext|>" not in r.text



def test_ignore_eos_makes_eos_an_ordinary_token_but_stop_ids_still_stop(tok, model):
    eos = tok.special_tokens["<|endoftext|>"]
    biased = dict(temperature=0, logit_bias={eos: 100.0}, max_tokens=4)
    r = generate(model, tok, "x = 1", SamplingParams(**biased, ignore_eos=True))
    assert r.token_ids == [eos] * 4 and r.finish_reason == "length"
    # vLLM's rule: ignore_eos drops only the EOS ids; stop_token_ids still end the reply
    r = generate(model, tok, "x = 1", SamplingParams(**biased, ignore_eos=True,
                                                     stop_token_ids=[eos]))
    assert r.token_ids == [eos] and r.finish_reason == "stop" and r.stop_reason == eos
    with pytest.raises(ValueError, match="ignore_eos must be True or False"):
        SamplingParams(ignore_eos="yes")

def test_seeded_sampling_is_reproducible_and_seeds_differ(tok, model):
    def run(seed):
        return generate(model, tok, "class A:", SamplingParams(temperature=1.0, top_p=0.95, seed=seed,
                                                               max_tokens=10), eos_token_ids=[]).token_ids
    assert run(7) == run(7) and run(7) != run(8)


def test_penalties_see_the_prompt_and_the_output(tok, model):
    params = SamplingParams(temperature=0, repetition_penalty=1e6, frequency_penalty=2.0, max_tokens=30)
    r = generate(model, tok, "a b c", params, eos_token_ids=[])
    assert len(set(r.token_ids)) == 30  # a huge penalty never repeats a token
    assert not set(r.token_ids) & set(tok.encode("a b c"))


# ---------------------------------------------------------------- stop conditions, scripted

def test_stop_token_id_stops_without_text(tok):
    m, ids = scripted(tok, "alpha beta gamma")
    r = generate(m, tok, "p", SamplingParams(temperature=0, stop_token_ids=[ids[2]]))
    assert r.token_ids == ids[:3] and r.text == tok.decode(ids[:2])
    assert (r.finish_reason, r.stop_reason) == ("stop", ids[2])


def test_stop_string_spanning_several_tokens(tok):
    text = "print(x)\n\n\ndef main():\n    pass\n"
    m, ids = scripted(tok, text)
    stop = "\ndef"
    r = generate(m, tok, "p", SamplingParams(temperature=0, stop=[stop]), eos_token_ids=[])
    assert r.text == text[:text.index(stop)] and r.finish_reason == "stop" and r.stop_reason == stop
    n = next(k for k in range(1, len(ids) + 1) if stop in tok.decode(ids[:k]))
    assert r.token_ids == ids[:n] and len(ids[:n]) > 1  # stops on the token that completes it
    assert r.usage.completion_tokens == n


def test_stop_string_ending_inside_a_token_cuts_that_token(tok):
    text = "x = result_list"  # tokens: 'x', ' =', ' result', '_list'
    m, ids = scripted(tok, text)
    assert not any(tok.decode(ids[:k]).endswith("result_") for k in range(len(ids) + 1))  # ends mid-token
    r = generate(m, tok, "p", SamplingParams(temperature=0, stop=["result_"]), eos_token_ids=[])
    assert r.text == "x = " and r.finish_reason == "stop" and r.token_ids == ids
    r = generate(m, tok, "p", SamplingParams(temperature=0, stop=["result_"], include_stop_str_in_output=True),
                 eos_token_ids=[])
    assert r.text == "x = result_"  # "list", the rest of the token, is dropped


def test_the_first_stop_string_to_complete_wins(tok):
    text = "if a:\n    b = 1\n# end\n"
    m, _ = scripted(tok, text)
    r = generate(m, tok, "p", SamplingParams(temperature=0, stop=["# end", "b = 1\n", "= 1"]), eos_token_ids=[])
    assert r.text == "if a:\n    b " and r.stop_reason == "= 1"  # "= 1" completes before "b = 1\n"
    assert find_stop("xyz", ["xyz", "yz"]) == (0, "xyz")  # same end: the longer one
    assert find_stop("xyz", ["xyz", "y"]) == (1, "y")


def test_max_tokens_and_the_detokenizer_flush(tok):
    m, ids = scripted(tok, "你好")  # 6 bytes: byte tokens, characters complete only every 3
    r = generate(m, tok, "p", SamplingParams(temperature=0, max_tokens=4), eos_token_ids=[])
    assert r.finish_reason == "length" and r.token_ids == ids[:4]
    assert r.text == tok.decode(ids[:4]) == "你\ufffd"  # the cut character becomes U+FFFD, as in decode


def test_min_tokens_ignores_stop_strings_completed_before_it(tok):
    text = "a; b; c; d"
    m, ids = scripted(tok, text)
    r = generate(m, tok, "p", SamplingParams(temperature=0, stop=[";"], min_tokens=3),
                 eos_token_ids=[])
    held_off = tok.decode(ids[:3])  # a stop string completed in the first 3 tokens is ignored
    assert ";" in held_off and r.text == text[:text.index(";", len(held_off))]


def test_min_tokens_bans_stop_ids_then_allows_them(tok):
    m, ids = scripted(tok, "abc")
    m.script = [7] * 10  # always predicts token 7, a stop id
    r = generate(m, tok, "p", SamplingParams(temperature=0, stop_token_ids=[7], min_tokens=2))
    assert r.token_ids == [0, 0, 7]  # token 0 is the runner-up while 7 is banned


def test_timeout_with_a_fake_clock(tok):
    m, _ = scripted(tok, "x = 1 + 2 + 3 + 4 + 5 + 6 + 7 + 8")
    r = generate(m, tok, "p", SamplingParams(temperature=0), eos_token_ids=[], timeout_s=3.5, clock=FakeClock())
    assert r.finish_reason == "timeout" and len(r.token_ids) == 4  # read at 1, 2, 3, 4 s
    assert r.usage == Usage(prompt_tokens=1, completion_tokens=4, ttft_s=1.0, tpot_s=1.0)


def test_budget_caps_prompt_plus_completion(tok):
    m, _ = scripted(tok, "x = 1 + 2 + 3 + 4 + 5 + 6")
    prompt = tok.encode("y = 2")
    r = generate(m, tok, prompt, SamplingParams(temperature=0), eos_token_ids=[], budget_tokens=len(prompt) + 3)
    assert r.finish_reason == "length" and r.usage.completion_tokens == 3
    assert r.usage.total_tokens == len(prompt) + 3
    with pytest.raises(ValueError, match="leaves nothing of a budget of 2 tokens"):
        generate(m, tok, prompt, SamplingParams(temperature=0), budget_tokens=2)


def test_usage_from_the_fake_clock(tok):
    m, _ = scripted(tok, "x = 1 + 2 + 3 + 4")
    r = generate(m, tok, "p", SamplingParams(temperature=0, max_tokens=5), eos_token_ids=[],
                 clock=FakeClock(0.25))
    assert r.usage.ttft_s == 0.25 and r.usage.tpot_s == 0.25 and r.usage.total_tokens == 6
    assert m.calls == 5  # one prefill, four decode steps: no forward pass after the last token


# ---------------------------------------------------------------- validation and errors

def test_prompt_that_does_not_fit_the_context_window(tok):
    m, _ = scripted(tok, "x")
    with pytest.raises(ValueError, match=r"exceeds the context window \(512\)"):
        generate(m, tok, list(range(400)), SamplingParams(max_tokens=200))


def test_stop_token_outside_the_vocabulary(tok):
    m, _ = scripted(tok, "x")
    with pytest.raises(ValueError, match="stop token id 5000 is outside the vocabulary"):
        generate(m, tok, "p", SamplingParams(stop_token_ids=[5000]))


def test_params_edited_after_construction_are_rechecked(tok):
    m, _ = scripted(tok, "x")
    params = SamplingParams()
    params.stop = [""]
    with pytest.raises(ValueError, match="SamplingParams.stop must be a list of non-empty strings"):
        generate(m, tok, "p", params)


@pytest.mark.parametrize("kwargs, message", [
    (dict(timeout_s=0), "timeout_s must be a number of seconds > 0 or None, got 0"),
    (dict(timeout_s=-1.0), "timeout_s must be"), (dict(budget_tokens=0), "budget_tokens must be an int > 0"),
    (dict(budget_tokens=2.5), "budget_tokens must be"),
])
def test_server_limits_are_checked(tok, kwargs, message):
    m, _ = scripted(tok, "x")
    with pytest.raises(ValueError, match=message):
        generate(m, tok, "p", SamplingParams(), **kwargs)


def test_stop_checker_refuses_text_after_the_stop():
    checker = StopChecker(["."])
    checker.add("end.")
    with pytest.raises(RuntimeError, match="already ended"):
        checker.add("more")


# ---------------------------------------------------------------- streaming

def test_stream_deltas_add_up_to_the_generated_text(tok, model):
    params = SamplingParams(temperature=0.8, seed=1, max_tokens=25, stop=["\n\n"])
    deltas, result = collect(stream(model, tok, "def f():", params, eos_token_ids=[]))
    assert "".join(d.text for d in deltas) == result.text == generate(model, tok, "def f():", params,
                                                                      eos_token_ids=[]).text
    assert [d.index for d in deltas] == sorted(d.index for d in deltas)


def test_stream_holds_back_a_possible_stop_string(tok):
    text = "total = 1\n# END of file\nmore"
    m, ids = scripted(tok, text)
    deltas, result = collect(stream(m, tok, "p", SamplingParams(temperature=0, stop=["# END"]),
                                    eos_token_ids=[]))
    assert result.text == "total = 1\n" and "".join(d.text for d in deltas) == result.text
    assert all("#" not in d.text for d in deltas)  # the '#' was held back, then dropped with the stop


def test_stream_never_splits_a_character(tok):
    text = "s = '数据😀 ok'"
    m, ids = scripted(tok, text)
    assert len(ids) > len(text)  # some characters take several byte tokens
    deltas, result = collect(stream(m, tok, "p", SamplingParams(temperature=0, max_tokens=len(ids)),
                                    eos_token_ids=[]))
    assert result.text == text and "".join(d.text for d in deltas) == text
    assert all("\ufffd" not in d.text for d in deltas)
    assert len(deltas) < len(ids)  # tokens holding the first bytes of a character release nothing


def test_stream_releases_nothing_after_the_result(tok, model):
    events = list(stream(model, tok, "x", SamplingParams(temperature=0, max_tokens=3), eos_token_ids=[]))
    assert isinstance(events[-1], GenerationResult)
    assert sum(isinstance(e, GenerationResult) for e in events) == 1


def test_usage_total_and_nan_free(tok, model):
    r = generate(model, tok, "x", SamplingParams(temperature=0, max_tokens=3), eos_token_ids=[])
    assert r.usage.total_tokens == r.usage.prompt_tokens + 3
    assert math.isfinite(r.usage.ttft_s) and math.isfinite(r.usage.tpot_s)


def test_special_tokens_are_skipped_or_spaced_as_the_two_flags_say(tok, model):
    eos = tok.special_tokens["<|endoftext|>"]
    biased = dict(temperature=0, logit_bias={eos: 100.0}, max_tokens=3, ignore_eos=True)
    r = generate(model, tok, "x = 1", SamplingParams(**biased))
    assert r.token_ids == [eos] * 3 and r.text == ""  # vLLM's default: no special text
    kept = generate(model, tok, "x = 1", SamplingParams(**biased,
                                                        skip_special_tokens=False))
    assert kept.text == "<|endoftext|> <|endoftext|> <|endoftext|>"
    tight = generate(model, tok, "x = 1", SamplingParams(
        **biased, skip_special_tokens=False, spaces_between_special_tokens=False))
    assert tight.text == "<|endoftext|>" * 3
    deltas, result = collect(stream(model, tok, "x = 1", SamplingParams(
        **biased, skip_special_tokens=False)))
    assert "".join(d.text for d in deltas) == result.text == kept.text  # streamed text equals the final text
    for name in ("skip_special_tokens", "spaces_between_special_tokens"):
        with pytest.raises(ValueError, match=f"{name} must be True or False"):
            SamplingParams(**{name: "no"})


def test_a_kept_special_token_between_text_gets_a_space_on_each_side(tok):
    eos = tok.special_tokens["<|endoftext|>"]
    a, b = tok.encode("x = 1"), tok.encode("y")
    script = a + [eos] + b
    model = ScriptedModel(script)
    params = SamplingParams(temperature=0, max_tokens=len(script), ignore_eos=True,
                            skip_special_tokens=False)
    r = generate(model, tok, [1], params)
    assert r.text == tok.decode(a) + " <|endoftext|> " + tok.decode(b)
    skipped = generate(ScriptedModel(script), tok, [1], SamplingParams(
        temperature=0, max_tokens=len(script), ignore_eos=True))
    assert skipped.text == tok.decode(a) + tok.decode(b)


def test_an_added_token_that_is_not_special_stays_text(tok, tmp_path):
    # HF's "special": false (Qwen's <tool_call>): a skipping reply keeps its text
    import json
    spec = json.loads((Path(TOKENIZER).parent / "tiny" / "tokenizer.json").read_text())
    for token in spec["added_tokens"]:
        token["special"] = False
    texty = Tokenizer.from_hf_json(spec)
    assert texty.text_tokens == {"<|endoftext|>"}
    texty.save(tmp_path / "t.json")
    assert Tokenizer.load(tmp_path / "t.json").text_tokens == {"<|endoftext|>"}
    eos = texty.special_tokens["<|endoftext|>"]
    script = tok.encode("x") + [eos] + tok.encode("y")
    params = SamplingParams(temperature=0, max_tokens=len(script), ignore_eos=True)
    assert generate(ScriptedModel(script), texty, [1], params).text == \
        "x<|endoftext|>y"
    assert generate(ScriptedModel(script), tok, [1], params).text == "xy"
    with pytest.raises(ValueError, match="text_tokens must be special tokens"):
        Tokenizer({bytes([b]): b for b in range(256)}, text_tokens=["<x>"])
