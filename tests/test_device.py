"""llmcore.device: device choice, dtype policy, seeding."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from llmcore.device import (DEVICE_ENV, DTYPE_ENV, available_devices, default_dtype, deterministic,
                            pick_device, resolve_dtype, seed_everything, synchronize)


def test_cpu_is_always_available_and_last():
    assert available_devices()[-1] == "cpu"


def test_default_is_fastest_available(monkeypatch):
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    assert pick_device().type == available_devices()[0]


def test_env_var_overrides(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    assert pick_device() == torch.device("cpu")


def test_explicit_argument_beats_env(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "not-a-device")
    assert pick_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("bad", ["tpu", "gpu", "", "cuda:x", "xla"])
def test_unknown_device_names_are_value_errors(monkeypatch, bad):
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    with pytest.raises(ValueError, match="use one of 'cuda', 'cuda:N', 'mps' or 'cpu'"):
        pick_device(bad or " ")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_missing_device_names_what_exists(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    with pytest.raises(RuntimeError, match=r"has only \[.*'cpu'\].*unset LLMCORE_DEVICE"):
        pick_device()


@pytest.mark.cuda
def test_cuda_index_out_of_range():
    with pytest.raises(RuntimeError, match="CUDA device"):
        pick_device(f"cuda:{torch.cuda.device_count()}")


@pytest.mark.cuda
def test_cuda_default_dtype_is_16_bit():
    assert default_dtype("cuda") in (torch.bfloat16, torch.float16)


@pytest.mark.parametrize("native, emulated, expected", [
    (True, True, torch.bfloat16),    # Ampere and later: bfloat16 in hardware
    (False, True, torch.float16),    # a T4 (Colab's free GPU): bfloat16 only emulated, slower
    (False, False, torch.float16),
])
def test_cuda_default_dtype_asks_for_native_bfloat16(monkeypatch, native, emulated, expected):
    def is_bf16_supported(including_emulation=True):
        return emulated if including_emulation else native

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    assert default_dtype("cuda") == expected


def test_dtype_policy_on_cpu(monkeypatch):
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    assert default_dtype("cpu") == torch.float32
    assert resolve_dtype(None, "cpu") == torch.float32
    assert resolve_dtype("bf16", "cpu") == torch.bfloat16
    assert resolve_dtype("torch.float16", "cpu") == torch.float16
    assert resolve_dtype(torch.bfloat16, "cpu") == torch.bfloat16
    monkeypatch.setenv(DTYPE_ENV, "fp16")
    assert resolve_dtype(None, "cpu") == torch.float16


@pytest.mark.parametrize("bad", ["int8", "fp8", torch.int64])
def test_unsupported_dtypes_are_value_errors(bad):
    with pytest.raises(ValueError, match="float32"):
        resolve_dtype(bad, "cpu")


def test_seed_everything_reproduces_all_generators():
    def draw():
        return random.random(), float(np.random.rand()), torch.rand(3).tolist()
    seed_everything(123)
    first = draw()
    seed_everything(123)
    assert draw() == first
    seed_everything(124)
    assert draw() != first


@pytest.mark.parametrize("bad", [-1, 1.5, "1", True])
def test_bad_seeds_are_rejected(bad):
    with pytest.raises(ValueError, match="non-negative int"):
        seed_everything(bad)


def test_deterministic_restores_previous_setting():
    before = torch.are_deterministic_algorithms_enabled()
    with deterministic():
        assert torch.are_deterministic_algorithms_enabled()
    assert torch.are_deterministic_algorithms_enabled() == before


def test_synchronize_is_a_no_op_on_cpu():
    synchronize("cpu")


@pytest.mark.parametrize("version", ["2.4.1", "2.4.1+cu121", "1.13.0", "nightly"])
def test_old_or_unreadable_torch_is_refused_on_import(version):
    import llmcore
    with pytest.raises(ImportError, match=r"torch >= 2\.5"):
        llmcore.check_torch_version(version)


@pytest.mark.parametrize("version", ["2.5.0", "2.13.0+cpu", "3.0.0a0"])
def test_supported_torch_passes(version):
    import llmcore
    llmcore.check_torch_version(version)


def test_the_lower_bound_is_the_one_pyproject_states():
    from pathlib import Path

    import llmcore
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert f'"torch>={llmcore.MIN_TORCH[0]}.{llmcore.MIN_TORCH[1]}"' in pyproject
