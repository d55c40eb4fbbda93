"""The decoder state's name across transformers releases: `cache` from 5.24 on, `past_key_values` before.

The one place that knows both names. The models' `forward` takes the state under either (`given_cache`), builds
transformers' output classes with it in the field the release has (`with_cache`), and code that reads an output's
state asks `returned_cache`. Copied into saved model folders (`trust_remote_code`): torch and transformers only.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from transformers.modeling_outputs import ModelOutput, Seq2SeqLMOutput

# The name this transformers release gives the decoder state in outputs and in `generate`'s calls of `forward`.
CACHE_NAME = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"


def given_cache(past_key_values: Any = None, cache: Any = None) -> Any:
    """The decoder state a caller passed under either name (`generate` uses `cache` from transformers 5.24 on,
    `past_key_values` before). On a release that names it `cache`, `past_key_values` warns (a FutureWarning) that
    it is deprecated, as transformers' own models do there (not while `torch.compile` traces the model)."""
    if past_key_values is not None and cache is not None and past_key_values is not cache:
        raise ValueError("pass the decoder state as past_key_values or as cache, not two different ones")
    if past_key_values is not None and CACHE_NAME == "cache" and not torch.compiler.is_compiling():
        warnings.warn(
            "`past_key_values` is deprecated by this transformers release: pass the decoder state as `cache`",
            FutureWarning,
            stacklevel=2,
        )
    return cache if cache is not None else past_key_values


def with_cache(output_class: type[ModelOutput], cache: Any, **fields: Any) -> ModelOutput:
    """A transformers output with the decoder state `cache` in the field this release has: `cache` (5.24 on) or
    `past_key_values` (5.0-5.23)."""
    name = "cache" if "cache" in output_class.__dataclass_fields__ else "past_key_values"
    return output_class(**fields, **{name: cache})


def returned_cache(outputs: ModelOutput) -> Any:
    """The decoder state in a model output (under `cache` from transformers 5.24 on, `past_key_values` before; read
    by the field its class has, as the other name warns of deprecation)."""
    fields = getattr(type(outputs), "__dataclass_fields__", outputs)
    return outputs.get("cache" if "cache" in fields else "past_key_values")


__all__ = ["CACHE_NAME", "given_cache", "returned_cache", "with_cache"]
