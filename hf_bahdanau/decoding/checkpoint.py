"""`load_checkpoint`: a saved model folder's model for inference, loaded through transformers' Auto classes (the
package's model types registered), with the checks the command line asks of a folder: every weight found (strict),
one-line errors for a corrupt file or weights of other shapes, and int8 on request."""

from __future__ import annotations

import os
from typing import Any

from safetensors import SafetensorError
from transformers import AutoModelForSeq2SeqLM, PreTrainedModel

from hf_bahdanau.errors import InputError

from .quantization import quantizer


def unloaded_weights(loading_info: dict[str, Any]) -> str | None:
    """What a load left out, as "2 missing (a, b); 1 unexpected (c)" (three names at most of each), or None."""
    problems = []
    for kind in ("missing", "unexpected"):
        keys = sorted(loading_info.get(f"{kind}_keys") or ())
        if keys:
            shown = ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")
            problems.append(f"{len(keys)} {kind} ({shown})")
    return "; ".join(problems) or None


def load_checkpoint(
    folder: str | os.PathLike, *, strict: bool = True, quantize: str | None = None, **kwargs: Any
) -> PreTrainedModel:
    """The model of the saved `folder` (`AutoModelForSeq2SeqLM`, safetensors only, no code from the folder), in eval
    mode; `kwargs` go to `from_pretrained`.

    `strict` refuses a checkpoint with a missing or unexpected weight (tied weights, stored once, are not missing):
    weights of another model type or architecture would translate garbage. A corrupt or truncated weights file and
    weights whose shapes differ from the config's are one-line InputErrors too. `quantize="int8"`: int8 linear and
    recurrent layers for CPU inference (`quantization.quantize_for_cpu`).
    """
    quantize_model = None if quantize is None else quantizer(quantize)  # an unknown name fails before loading
    options = {"use_safetensors": True, "trust_remote_code": False, **kwargs}
    try:
        model, loading_info = AutoModelForSeq2SeqLM.from_pretrained(folder, output_loading_info=True, **options)
    except SafetensorError as error:
        raise InputError(f"the checkpoint in {folder} is corrupt or truncated ({error})") from error
    except RuntimeError as error:
        if "mismatch" not in str(error).lower():
            raise
        raise InputError(
            f"the checkpoint in {folder} does not match its config: its weight shapes differ (usually vocab_size or "
            "a hidden size; the load report above lists them)"
        ) from error
    problems = unloaded_weights(loading_info) if strict else None
    if problems:
        raise InputError(
            f"the weights in {folder} do not fit the model its config describes: {problems} (a config of another "
            "model type or another architecture?)"
        )
    model.eval()
    return model if quantize_model is None else quantize_model(model)


__all__ = ["load_checkpoint"]
