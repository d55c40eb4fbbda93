"""A saved model folder loaded for inference: the checks made before anything loads, and the model and tokenizer
checked to belong together. `Translator.from_folder`, the loader of every front end (`translate`, `evaluate`, the
demo, the server, the CTranslate2 engine's torch fallback, distillation's teacher), loads a model folder through
here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from hf_bahdanau.errors import InputError, as_input_error

from .folder_data import check_model_folder

if TYPE_CHECKING:
    from transformers import PreTrainedModel
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase


def load_translation_model(path: str, quantize: str | None = None) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A saved model folder's model (in eval mode; `quantize="int8"`: int8 linear and recurrent layers for CPU)
    and tokenizer, checked to belong together."""
    from transformers import AutoTokenizer

    from hf_bahdanau.data.tokenization import check_tokenizer_location
    from hf_bahdanau.models.pipelines import check_tokenizer_matches
    from hf_bahdanau.registry import check_saved_model_type, register_auto_classes

    from .checkpoint import load_checkpoint

    register_auto_classes()  # the package's model types, which AutoModelForSeq2SeqLM then loads without remote code
    folder = check_model_folder(path)
    # What transformers and the model's own code refuse in the folder (its JSON, config values, weights) is about it.
    with as_input_error(ValueError, OSError):
        check_saved_model_type(folder)  # ours only: no code from the folder runs (trust_remote_code=False below)
        check_tokenizer_location(folder, "the model folder")
        if (folder / "pytorch_model.bin").is_file() and not any(folder.glob("model*.safetensors*")):
            raise InputError(
                f"{folder} holds only pytorch_model.bin (a pickle, which can run code): hf-bahdanau reads "
                f"safetensors only; if you trust the file, convert it once with AutoModelForSeq2SeqLM.from_pretrained("
                f"'{folder}', use_safetensors=False).save_pretrained('{folder}')"
            )
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
        model = load_checkpoint(folder, strict=True, quantize=quantize)  # safetensors only; every weight found
        check_tokenizer_matches(model.config, tokenizer)
    return model, tokenizer


def check_generation_length(model_dir: str, max_new_tokens: int | None) -> None:
    """Refuse `--max-new-tokens` beyond the model's position table (a Transformer's `max_position_embeddings`; the
    RNN has none) before anything is loaded or translated: its decoder cannot read that many tokens."""
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # not a model folder: `load_translation_model` says so
    table = config.get("max_position_embeddings") if isinstance(config, dict) else None
    if max_new_tokens is not None and isinstance(table, int) and max_new_tokens > table:
        raise InputError(
            f"--max-new-tokens {max_new_tokens} is more than the model can generate: {model_dir} has a position "
            f"table of {table} tokens (max_position_embeddings); pass at most {table}"
        )


__all__ = [
    "check_generation_length",
    "load_translation_model",
]
