"""llmcore: the inference package built chapter by chapter in the book "Inside LLM Inference".

Most modules are generated from the chapter notebooks (their first line names the notebook to
edit); the rest are hand-written and say so. Import what you need from its module, e.g.
``from llmcore.device import pick_device``.
"""
__version__ = "0.1.0"
