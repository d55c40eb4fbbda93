"""Export a model of either family to ONNX (`hf-bahdanau export --format onnx`): an encoder and a decoder step in
float32, with int8 copies (onnxruntime's dynamic quantization) beside them, the tokenizer files and
`onnx/decoding.json`, which names every input and output so that a search loop in any language can run them.

The graphs are traced from the package's own modules (nothing of the model is written twice): `onnx_transformer` and
`onnx_rnn` call the model's encoder, decoder and head with the decoder state as plain tensors (`onnx_tracing`).

- **Transformer** (`d2l_transformer`): the standard folder of `standard_folder` (MarianMT for a post-norm model,
  Blenderbot for a pre-norm one) plus transformers.js's layout of it: `onnx/encoder_model.onnx` (`input_ids`,
  `attention_mask` -> `last_hidden_state`) and `onnx/decoder_model_merged.onnx` with optimum's names
  (`encoder_attention_mask`, `input_ids` `(batch, 1)`, `encoder_hidden_states`, `past_key_values.{i}.decoder.key`
  ..., `use_cache_branch` -> `logits`, `present.{i}.decoder.key` ...; keys and values `(batch, heads, seq, head_dim)`),
  and their `_quantized` copies. "Merged" is one graph for every step (`onnx_transformer`): the past may be empty
  (the first step), and an ONNX `If` on `use_cache_branch` takes the cross-attention keys and values from the past
  (true; their presents are then empty, the pasts kept) or projects them from `encoder_hidden_states` (false). The
  decoder reads one token a step. Its graph is our model's, whose residual stream is the standard one's up to a
  permutation of dimensions: the keys, values and logits are the standard model's.
- **RNN** (`bahdanau`): `onnx/encoder_model.onnx` (`input_ids`, `attention_mask` -> `encoder_hidden_states`,
  `projected_keys`, the decoder's initial `hidden` (and an LSTM's `cell`), batch first) and `onnx/decoder_model.onnx`,
  one step: `input_ids` `(batch, 1)`, `encoder_hidden_states`, `projected_keys`, `encoder_attention_mask`, `hidden`
  (`cell`) -> `logits` `(batch, 1, vocab)`, `new_hidden` (`new_cell`); with the tokenizer files, the generation
  config and the model's config (without the pointers to the code a saved folder holds).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from torch import nn

from hf_bahdanau.errors import InputError

from .folders import (
    COPIED_FILES,
    check_export_output,
    check_exportable,
    check_outside_model_folders,
    load_exportable,
    local_folder,
    source_fingerprint,
    write_export,
)
from .onnx_tracing import OPSET

logger = logging.getLogger(__name__)

FORMAT = "onnx"  # `export --format`
SUBFOLDER = "onnx"  # where transformers.js looks for a model's ONNX files
DESCRIPTION = "decoding.json"  # in SUBFOLDER: the graphs' files, inputs and outputs, and the special ids
QUANTIZED_SUFFIX = "_quantized"  # transformers.js's name of int8 ("q8") files
INSTALL_HINT = "pip install hf_bahdanau[onnx]"
CODE_SETTINGS = ("auto_map", "custom_pipelines")  # a saved folder's pointers to its code, which an export lacks


def require_onnx() -> None:
    """An InputError that says how to install what an ONNX export needs, where it is missing."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as error:
        raise InputError(f"ONNX export needs onnx and onnxruntime ({error.name} is missing): {INSTALL_HINT}") from None


def description(model: nn.Module, graphs: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    """What `onnx/decoding.json` says: each graph's file (and int8 file), inputs and outputs; which decoder outputs
    feed which decoder inputs at the next step (`state`), the encoder outputs the decoder reads (`from_encoder`,
    with the source's `attention_mask` as `encoder_attention_mask`), which inputs belong to a source rather than to
    a hypothesis (`per_source`: a beam search reorders only the others), what the first step and the later ones
    feed (`first_step`, `later_steps`: the empty past's shape for the Transformer), and the special ids."""
    config, generation = model.config, model.generation_config
    encoder_name, decoder_name = list(graphs)
    files = {name: {"file": f"{name}.onnx", "int8_file": f"{name}{QUANTIZED_SUFFIX}.onnx",
                    "inputs": [v.name for v in graph.graph.input], "outputs": [v.name for v in graph.graph.output]}
             for name, (graph, _) in graphs.items()}  # fmt: skip
    decoder_inputs = set(files[decoder_name]["inputs"])
    from_encoder = {name: name for name in files[encoder_name]["outputs"] if name in decoder_inputs}
    if "last_hidden_state" in files[encoder_name]["outputs"]:
        from_encoder["last_hidden_state"] = "encoder_hidden_states"
    state = {}
    for name in files[decoder_name]["outputs"]:
        if name.startswith("present."):
            state[name] = name.replace("present.", "past_key_values.", 1)
        elif name.startswith("new_"):
            state[name] = name[len("new_") :]
    cross = [name for name in decoder_inputs if name.endswith((".encoder.key", ".encoder.value"))]
    per_source = ["encoder_hidden_states", "encoder_attention_mask", "projected_keys", *cross]
    found = {
        "family": "transformer" if config.model_type == "d2l_transformer" else "rnn",
        "opset": OPSET,
        "encoder": files[encoder_name],
        "decoder": files[decoder_name],
        "from_encoder": from_encoder,
        "state": state,
        "per_source": sorted(name for name in per_source if name in decoder_inputs),
        "decoder_start_token_id": config.decoder_start_token_id,
        "eos_token_id": config.eos_token_id,
        "pad_token_id": config.pad_token_id,
        "vocab_size": config.vocab_size,
        "max_position_embeddings": getattr(config, "max_position_embeddings", None),
        "num_beams": generation.num_beams,
        "length_penalty": 1.0 if generation.length_penalty is None else generation.length_penalty,
    }
    if found["family"] == "transformer":
        heads = config.attention_heads
        found["first_step"] = {"use_cache_branch": False,
                               "empty_past_shape": ["batch_size", heads, 0, config.d_model // heads]}  # fmt: skip
        found["later_steps"] = {"use_cache_branch": True}
    return found


def export_onnx(
    model_dir_or_repo_id: str | os.PathLike, output_dir: str | os.PathLike, overwrite: bool = False
) -> Path:
    """Write the ONNX export of a model folder (or Hub repo) of either family to `output_dir` (see the module's
    docstring); its path. `output_dir` is a new or empty folder outside any model folder, or (with `overwrite`) an
    earlier export; it is written beside it and moved into place at the end."""
    require_onnx()
    import onnx

    output = Path(output_dir)
    check_outside_model_folders(output)
    folder = local_folder(model_dir_or_repo_id)
    model_config = check_exportable(folder, "ONNX", rnn_reason=None)
    check_export_output(output, folder, overwrite)
    fingerprint = source_fingerprint(folder)
    model, _ = load_exportable(folder)
    standard = None
    if model.config.model_type == "d2l_transformer":
        from .onnx_transformer import transformer_graphs
        from .standard_folder import to_standard_model

        standard = to_standard_model(model)  # refuses, in one line, what no standard architecture holds
        graphs = transformer_graphs(model)
    else:
        from .onnx_rnn import rnn_graphs

        graphs = rnn_graphs(model)
    found = description(model, graphs)

    def write(staging: Path) -> None:
        if standard is not None:
            from .standard_folder import save_tokenizer

            standard.save_pretrained(staging, safe_serialization=True)
            save_tokenizer(folder, staging)
        else:  # the tokenizer, the generation config, and the model's config as data (no code to load it with)
            for name in COPIED_FILES:
                if (folder / name).is_file():
                    shutil.copy2(folder / name, staging / name)
            settings = {name: value for name, value in model_config.items() if name not in CODE_SETTINGS}
            (staging / "config.json").write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        (staging / SUBFOLDER).mkdir()
        for name, (graph, int8) in graphs.items():
            onnx.save(graph, str(staging / SUBFOLDER / f"{name}.onnx"))
            onnx.save(int8, str(staging / SUBFOLDER / f"{name}{QUANTIZED_SUFFIX}.onnx"))
        text = json.dumps(found, indent=2) + "\n"
        (staging / SUBFOLDER / DESCRIPTION).write_text(text, encoding="utf-8")

    info = {"format": FORMAT, "family": found["family"], "source_fingerprint": fingerprint,
            "model_config": model_config}  # fmt: skip
    if standard is not None:
        info["architecture"] = type(standard).__name__
    write_export(output, info, write)
    logger.info("exported %s to ONNX (float32 and int8) in %s", folder, output)
    return output


def is_onnx_folder(folder: str | os.PathLike) -> bool:
    """Whether `folder` holds an ONNX export of this package (its `onnx/decoding.json`)."""
    return (Path(folder) / SUBFOLDER / DESCRIPTION).is_file()


__all__ = ["DESCRIPTION", "FORMAT", "SUBFOLDER", "export_onnx", "is_onnx_folder", "require_onnx"]
