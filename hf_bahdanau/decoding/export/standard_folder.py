"""Export a d2l Transformer as a standard transformers folder, which loads with `AutoModelForSeq2SeqLM` and
`AutoTokenizer` without this package and without remote code (`hf-bahdanau export --format transformers`).

d2l's Transformer is, up to a permutation of the hidden dimensions, one of transformers' own architectures:
- post-norm (`norm_first: false`) is `MarianMTModel`: blocks `norm(x + sublayer(x))`, no final norm, embeddings
  scaled by sqrt(d_model) (`scale_embedding`), sinusoidal positions counted from 0, an output bias
  (`final_logits_bias`), untied or tied embeddings (`share_encoder_decoder_embeddings`, `tie_word_embeddings`);
- pre-norm (`norm_first: true`) is `BlenderbotForConditionalGeneration`: blocks `x + sublayer(norm(x))` and a final
  norm after each stack (`layer_norm`), with a learned position table that holds our sinusoids.

d2l's sinusoid table interleaves sin and cos (`P[i, 2j]`, `P[i, 2j + 1]`), Marian's puts every sine first. Reordering
every dimension of the residual stream the same way (`residual_order`: the embeddings' columns, the layer norms,
the rows of each projection that writes to the stream and the columns of each one that reads it, the output layer's
columns) turns one model into the other exactly; the attention heads' own dimensions are left as they are.
Attention projections without bias get zero biases. What no architecture holds exactly is refused in one line.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hf_bahdanau.errors import InputError
from hf_bahdanau.json_files import read_json

from .folders import (
    check_export_output,
    check_exportable,
    check_outside_model_folders,
    load_exportable,
    local_folder,
    source_fingerprint,
    write_export,
)

logger = logging.getLogger(__name__)

FORMAT = "transformers"  # `export --format`
TOKENIZER_SETTINGS = ("bos_token", "eos_token", "pad_token", "unk_token", "model_max_length")  # kept from ours
# The tokenizer class, named in config.json: AutoTokenizer of transformers 5.0-5.2, given a class in
# tokenizer_config.json, first compares it with the model type's tokenizer, Marian's being None without
# sentencepiece, and fails; a class named only in config.json is loaded as it is, by every release.
TOKENIZER_CLASS = "PreTrainedTokenizerFast"  # transformers 4 has it too; 5's TokenizersBackend


def residual_order(d_model: int) -> torch.Tensor:
    """The residual-stream dimensions of d2l's model in Marian's order: the sine dimensions `0, 2, 4, ...`, then the
    cosine ones `1, 3, 5, ...` (`(d_model,)`; Marian's dimension `k` is d2l's `order[k]`)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def architecture(model: Any) -> str:
    """The name of the standard class that holds `model` exactly, or an InputError that says why none does."""
    config = model.config
    if not config.norm_first:
        return "MarianMTModel"
    encoder, decoder = model.model.encoder.embed_tokens.weight, model.model.decoder.embed_tokens.weight
    if config.tie_word_embeddings and not config.tie_encoder_decoder_embeddings and not torch.equal(encoder, decoder):
        raise InputError(
            "a pre-norm model whose output layer shares the decoder's embedding but not the encoder's has no exact "
            "standard equivalent (Blenderbot, the pre-norm one, ties all three embeddings or none)"
        )
    return "BlenderbotForConditionalGeneration"


def standard_config(config: Any, generation: Any) -> Any:
    """The Marian or Blenderbot config of a d2l Transformer's `config`; `generation` (its generation config) gives
    the generation settings, so that no default of the standard config (e.g. a forced `</s>`) changes the search."""
    from transformers import BlenderbotConfig, MarianConfig

    shared = dict(
        vocab_size=config.vocab_size,
        d_model=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.attention_heads,
        decoder_attention_heads=config.attention_heads,
        encoder_ffn_dim=config.ffn_dim,
        decoder_ffn_dim=config.ffn_dim,
        activation_function=config.activation_function,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=0.0,
        max_position_embeddings=config.max_position_embeddings,
        scale_embedding=config.scale_embedding,
        tie_word_embeddings=config.tie_word_embeddings,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
        forced_eos_token_id=getattr(generation, "forced_eos_token_id", None),
        tokenizer_class=TOKENIZER_CLASS,
    )
    if config.norm_first:  # Blenderbot's default bans repeating the source's 3-grams
        return BlenderbotConfig(**shared, encoder_no_repeat_ngram_size=0)
    return MarianConfig(**shared, share_encoder_decoder_embeddings=config.tie_encoder_decoder_embeddings)


def _copy_linear(target: nn.Linear, source: nn.Linear, order: torch.Tensor, reads: bool, writes: bool) -> None:
    """`source` into `target`, with the residual stream's dimensions in `order` where the layer `reads` it (its
    weight's columns) or `writes` it (its weight's rows, its bias); no bias in `source` is a zero bias."""
    weight = source.weight
    if reads:
        weight = weight[:, order]
    if writes:
        weight = weight[order]
    target.weight.copy_(weight)
    bias = torch.zeros_like(target.bias) if source.bias is None else source.bias
    target.bias.copy_(bias[order] if writes else bias)


def _copy_norm(target: nn.LayerNorm, source: nn.LayerNorm, order: torch.Tensor) -> None:
    target.weight.copy_(source.weight[order])
    target.bias.copy_(source.bias[order])


def _copy_attention(target: nn.Module, source: nn.Module, order: torch.Tensor) -> None:
    """Our `MultiHeadAttention` (W_q, W_k, W_v, W_o) into transformers' (q_proj, k_proj, v_proj, out_proj)."""
    for name, ours in (("q_proj", "W_q"), ("k_proj", "W_k"), ("v_proj", "W_v")):
        _copy_linear(getattr(target, name), getattr(source, ours), order, reads=True, writes=False)
    _copy_linear(target.out_proj, source.W_o, order, reads=False, writes=True)


def _copy_layer(target: nn.Module, source: nn.Module, order: torch.Tensor) -> None:
    """An encoder or decoder layer of ours into Marian's or Blenderbot's (which name their parts alike)."""
    _copy_attention(target.self_attn, source.self_attn, order)
    _copy_norm(target.self_attn_layer_norm, source.self_attn_norm.norm, order)
    if hasattr(source, "cross_attn"):
        _copy_attention(target.encoder_attn, source.cross_attn, order)
        _copy_norm(target.encoder_attn_layer_norm, source.cross_attn_norm.norm, order)
    _copy_linear(target.fc1, source.ffn.dense1, order, reads=True, writes=False)
    _copy_linear(target.fc2, source.ffn.dense2, order, reads=False, writes=True)
    _copy_norm(target.final_layer_norm, source.ffn_norm.norm, order)


def _copy_stack(target: nn.Module, source: nn.Module, order: torch.Tensor) -> None:
    """An encoder or decoder: token embeddings, layers, and (pre-norm) the position table and the final norm."""
    target.embed_tokens.weight.copy_(source.embed_tokens.weight[:, order])
    for target_layer, source_layer in zip(target.layers, source.layers, strict=True):
        _copy_layer(target_layer, source_layer, order)
    if source.config.norm_first:  # Blenderbot: a learned position table, filled with our sinusoids
        table = source.positions.P[0, : source.config.max_position_embeddings]  # (max_positions, d_model)
        target.embed_positions.weight.copy_(table[:, order])
        _copy_norm(target.layer_norm, source.final_norm, order)


@torch.no_grad()
def to_standard_model(model: Any) -> Any:
    """Our `TransformerForConditionalGeneration` as the `MarianMTModel` or `BlenderbotForConditionalGeneration`
    that computes the same logits (float32, eval mode); an InputError where no standard class holds it exactly."""
    import transformers
    from transformers import GenerationConfig

    config = model.config
    standard_class = getattr(transformers, architecture(model))
    standard = standard_class(standard_config(config, model.generation_config)).float().eval()
    order = residual_order(config.d_model)
    _copy_stack(standard.model.encoder, model.model.encoder, order)
    _copy_stack(standard.model.decoder, model.model.decoder, order)
    if hasattr(standard.model, "shared"):  # Blenderbot's, and Marian's shared embedding: the encoder's
        standard.model.shared.weight.copy_(standard.model.encoder.embed_tokens.weight)
    standard.lm_head.weight.copy_(model.lm_head.weight[:, order])
    standard.final_logits_bias.copy_(model.lm_head.bias[None, :])  # (1, vocab)
    standard.generation_config = GenerationConfig.from_dict(model.generation_config.to_dict())
    standard.generation_config._from_model_config = False  # ours, never to be rebuilt from the standard config
    return standard


def save_tokenizer(folder: Path, staging: Path) -> None:
    """Our `tokenizer.json` as it is, with a `tokenizer_config.json` that any transformers release reads (padding on
    the right as the standard models count positions, no token type ids; the class is config.json's
    `TOKENIZER_CLASS`)."""
    shutil.copy2(folder / "tokenizer.json", staging / "tokenizer.json")
    ours = read_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
    settings = {name: ours[name] for name in TOKENIZER_SETTINGS if name in ours}
    settings.update(padding_side="right", clean_up_tokenization_spaces=False)
    settings["model_input_names"] = ["input_ids", "attention_mask"]  # not transformers 4's token_type_ids
    text = json.dumps(settings, indent=2, sort_keys=True) + "\n"
    (staging / "tokenizer_config.json").write_text(text, encoding="utf-8")


def export_transformers(
    model_dir_or_repo_id: str | os.PathLike, output_dir: str | os.PathLike, overwrite: bool = False
) -> Path:
    """Write the standard transformers folder of a `d2l_transformer` folder (or Hub repo) to `output_dir`: the
    Marian or Blenderbot config and safetensors weights, the tokenizer and the generation config. Returns its path.

    `output_dir` is a new or empty folder outside any model folder, or (with `overwrite`) an earlier export of this
    package, recognised by its `hf_bahdanau_export.json`; it is written beside it and moved into place at the end.
    """
    output = Path(output_dir)
    check_outside_model_folders(output)
    folder = local_folder(model_dir_or_repo_id)
    model_config = check_exportable(
        folder,
        FORMAT,
        "no standard transformers architecture has d2l's GRU decoder with Bahdanau attention, so "
        "only d2l_transformer models export as a standard folder",
    )
    check_export_output(output, folder, overwrite)
    fingerprint = source_fingerprint(folder)
    model, _ = load_exportable(folder)
    standard = to_standard_model(model)
    if model.config.norm_first and not torch.equal(
        model.model.encoder.embed_tokens.weight, model.model.decoder.embed_tokens.weight
    ):
        logger.warning(
            "%s needs transformers 5: on transformers 4 Blenderbot's encoder and decoder share one embedding, and "
            "this model's two differ",
            output,
        )

    def write(staging: Path) -> None:
        standard.save_pretrained(staging, safe_serialization=True)
        save_tokenizer(folder, staging)

    info = {"format": FORMAT, "architecture": type(standard).__name__, "source_fingerprint": fingerprint,
            "model_config": model_config}  # fmt: skip
    write_export(output, info, write)
    logger.info("exported %s as a standard %s folder in %s", folder, type(standard).__name__, output)
    return output


__all__ = ["FORMAT", "export_transformers", "residual_order", "save_tokenizer", "to_standard_model"]
