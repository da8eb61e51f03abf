"""llmcore: the inference package built chapter by chapter in the book "Inside LLM Inference".

Most modules are generated from the chapter notebooks (their first line names the notebook to
edit); the rest are hand-written and say so. Import what you need from its module, e.g.
``from llmcore.device import pick_device``.

This file is hand-written.
"""
import re

import torch

__version__ = "0.1.0"

# Attention relies on scaled_dot_product_attention(enable_gqa=...), new in torch 2.5.
MIN_TORCH = (2, 5)


def check_torch_version(version: str) -> None:
    """Raise ImportError, saying what to install, if `version` is older than MIN_TORCH."""
    match = re.match(r"(\d+)\.(\d+)", str(version))
    if match is None:
        raise ImportError(f"cannot read the torch version {version!r}; llmcore needs torch "
                          f">= {MIN_TORCH[0]}.{MIN_TORCH[1]}")
    if (int(match[1]), int(match[2])) < MIN_TORCH:
        raise ImportError(f"llmcore needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]}, found "
                          f"{version}; upgrade it: pip install -U 'torch>="
                          f"{MIN_TORCH[0]}.{MIN_TORCH[1]}'")


check_torch_version(torch.__version__)
