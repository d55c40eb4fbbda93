"""Translate with an ONNX export (`onnx_export` writes it) on ONNX Runtime: the `--engine onnxruntime` engine.

`OnnxRuntimeModel` is an export as the package's own search (`search.search`) runs a model: the exported model's
config and generation config, its tokenizer, and `decoder_rows`, which gives the search `OnnxDecoderRows` (the
methods of `search.DecoderRows`: the encoder outputs and the decoder state of each row, one decoder run a step).
So greedy, beam search, sampling, n-best lists, scores and the length bound are the torch engine's, computed the
same way from the graphs' logits. The export's `onnx/decoding.json` says which graph outputs feed which inputs, so
one class runs both families.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hf_bahdanau.choices import EXPORT_INFO
from hf_bahdanau.decoding.export.onnx import DESCRIPTION, INSTALL_HINT, SUBFOLDER, is_onnx_folder
from hf_bahdanau.decoding.folder_data import Settings, read_tokenizer
from hf_bahdanau.errors import InputError
from hf_bahdanau.json_files import read_json

FLAGS = ("use_cache_branch",)  # decoder inputs of the whole batch (shape (1,)), not of each row


def require_onnxruntime() -> Any:
    """The `onnxruntime` module, or an InputError that says how to install it."""
    try:
        import onnxruntime
    except ImportError:
        raise InputError(f"ONNX Runtime is not installed: {INSTALL_HINT}") from None
    return onnxruntime


class OnnxRuntimeModel:
    """An ONNX export loaded in ONNX Runtime sessions: its float32 graphs, or with `quantize="int8"` their int8
    copies; `threads`: ONNX Runtime's intra-op threads (None: its default)."""

    device = torch.device("cpu")

    def __init__(self, folder: str | os.PathLike, quantize: str | None = None, threads: int | None = None) -> None:
        ort = require_onnxruntime()
        self.folder = Path(folder)
        if not is_onnx_folder(self.folder) or not (self.folder / EXPORT_INFO).is_file():
            raise InputError(
                f"{self.folder} is no ONNX export of this package (no {SUBFOLDER}/{DESCRIPTION} or {EXPORT_INFO}): "
                f"export it with hf-bahdanau export --format onnx"
            )
        self.description = read_json(self.folder / SUBFOLDER / DESCRIPTION)
        self.config = Settings(read_json(self.folder / EXPORT_INFO)["model_config"])
        self.generation_config = Settings(read_json(self.folder / "generation_config.json"))
        self.tokenizer = read_tokenizer(self.folder)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or 0
        options.inter_op_num_threads = 1
        key = "int8_file" if quantize == "int8" else "file"
        self.encoder, self.decoder = (
            ort.InferenceSession(str(self.folder / SUBFOLDER / self.description[part][key]), options,
                                 providers=["CPUExecutionProvider"])
            for part in ("encoder", "decoder")
        )  # fmt: skip

    def decoder_rows(
        self,
        input_ids: torch.Tensor,  # (batch, src_len)
        attention_mask: torch.Tensor | None,  # (batch, src_len)
        repeats: int,
    ) -> OnnxDecoderRows:
        """The decoder side of a search of `input_ids`, `repeats` rows a source (beams, samples)."""
        return OnnxDecoderRows(self, input_ids, attention_mask, repeats)


class OnnxDecoderRows:
    """`search.DecoderRows` on ONNX Runtime: each row's decoder inputs as arrays, batch first; `step` runs the decoder
    and feeds its state outputs back (`decoding.json`'s `state`; keys and values of the source once made, as
    transformers.js keeps them), `reorder` moves the hypotheses' state to their beams, `keep` drops finished rows."""

    attention: torch.Tensor | None = None  # the search's trace of each step's attention: ONNX Runtime keeps none

    def __init__(
        self, model: OnnxRuntimeModel, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, repeats: int
    ) -> None:
        described = model.description
        self.decoder, self.state = model.decoder, described["state"]
        self.per_source = set(described["per_source"])
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        feeds = {"input_ids": input_ids.numpy(), "attention_mask": mask.numpy()}
        encoded = model.encoder.run(None, feeds)
        names = [output.name for output in model.encoder.get_outputs()]
        rows = {described["from_encoder"][name]: value for name, value in zip(names, encoded, strict=True)}
        rows["encoder_attention_mask"] = feeds["attention_mask"]
        rows = {name: np.repeat(value, repeats, axis=0) for name, value in rows.items()}
        first = described.get("first_step", {})
        if "empty_past_shape" in first:  # the Transformer's: no past at the first step
            empty = np.zeros((input_ids.shape[0] * repeats, *first["empty_past_shape"][1:]), dtype=np.float32)
            rows.update({name: empty for name in described["decoder"]["inputs"] if name.startswith("past_key_values")})
        self.rows = rows  # name -> (rows, ...)
        self.flags = {name: np.array([value]) for name, value in first.items() if name in FLAGS}
        self.later = {name: np.array([value]) for name, value in described.get("later_steps", {}).items()}
        self.inputs = described["decoder"]["inputs"]
        self.outputs = described["decoder"]["outputs"]
        self.first = True

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """The next-token logits `(rows, vocab)` in float32 after each row's last token `tokens` `(rows, 1)`."""
        feeds = {**self.rows, **self.flags, "input_ids": np.ascontiguousarray(tokens.numpy())}
        found = dict(
            zip(self.outputs, self.decoder.run(None, {name: feeds[name] for name in self.inputs}), strict=True)
        )
        for output, name in self.state.items():
            if self.first or name not in self.per_source:
                self.rows[name] = found[output]
        self.flags, self.first = self.later, False
        return torch.from_numpy(found["logits"][:, -1, :]).float()

    def reorder(self, rows: torch.Tensor) -> None:
        """Row i continues from row `rows[i]` (beams of the same source: what belongs to the source stays)."""
        index = rows.numpy()
        for name in self.state.values():
            if name not in self.per_source:
                self.rows[name] = self.rows[name][index]

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only the decoder rows `rows`, in that order."""
        index = rows.numpy()
        self.rows = {name: value[index] for name, value in self.rows.items()}


__all__ = ["OnnxDecoderRows", "OnnxRuntimeModel", "require_onnxruntime"]
