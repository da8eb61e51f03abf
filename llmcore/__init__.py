"""llmcore: the inference package built chapter by chapter in the book
"Inside LLM Inference".

Most modules are generated from the chapter notebooks (their first line names the
notebook to edit); the rest are hand-written and say so. Import what you need from its
module, e.g. ``from llmcore.device import pick_device``.

This file is hand-written.
"""
import re

import torch

__version__ = "0.1.0"

# Attention relies on scaled_dot_product_attention(enable_gqa=...), new in torch 2.5.
MIN_TORCH = (2, 5)


def check_torch_version(version: str) -> None:
    """Raise ImportError, saying what to install, if `version` is below MIN_TORCH."""
    needed = f"{MIN_TORCH[0]}.{MIN_TORCH[1]}"
    match = re.match(r"(\d+)\.(\d+)", str(version))
    if match is None:
        raise ImportError(f"cannot read the torch version {version!r}; "
                          f"llmcore needs torch >= {needed}")
    if (int(match[1]), int(match[2])) < MIN_TORCH:
        raise ImportError(f"llmcore needs torch >= {needed}, found {version}; "
                          f"upgrade it: pip install -U 'torch>={needed}'")


check_torch_version(torch.__version__)
