"""Matching what the hardware calls itself (NVML names, JAX device kinds) to catalog models."""

from __future__ import annotations

import re

# JAX `device_kind` strings per catalog TPU model.
TPU_KINDS: dict[str, tuple[str, ...]] = {
    "TPU-v5e": ("TPU v5 lite", "TPU v5e"),
    "TPU-v5p": ("TPU v5p", "TPU v5"),
    "TPU-v6e": ("TPU v6 lite", "TPU v6e"),
}


def _tokens(text: str) -> list[str]:
    return [t for t in re.split(r"[\s\-_]+", text.upper()) if t]


def model_matches(catalog_model: str, reported: str) -> bool:
    """Whether a device reporting `reported` is the catalog's `catalog_model`.

    GPUs: the chip token leads the catalog name ("H100" of "H100-SXM5-80GB") and appears as a word
    in NVML's name ("NVIDIA H100 80GB HBM3"); memory size is checked separately, which is what
    tells an A100 40GB from an 80GB. TPUs: JAX's device kind is compared with the known spellings.
    """
    if catalog_model in TPU_KINDS:
        return reported.strip().lower() in {k.lower() for k in TPU_KINDS[catalog_model]}
    chip = _tokens(catalog_model)[0] if _tokens(catalog_model) else ""
    return bool(chip) and chip in _tokens(reported)
