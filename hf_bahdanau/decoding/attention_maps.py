"""The attention weights of one translation, for heatmaps: `(layers, heads, queries, keys)` for any model type.

The Bahdanau RNN has one cross-attention "layer" with one "head"; the Transformer has encoder self-attention,
decoder self-attention and cross-attention per layer and head.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from hf_bahdanau.errors import InputError
from hf_bahdanau.models.source_length import source_limit
from hf_bahdanau.visualization import show_heatmaps

from .alignment import WORD_START, merge_words, word_ids
from .sources import source_ids


@dataclass
class AttentionMaps:
    """A translation and its attention, on CPU as float.

    Args:
        translation: the decoded translation.
        source_tokens, target_tokens: display labels of the source tokens and of the generated tokens (end of
            sentence included); a piece that continues a word starts with "-".
        decoder_input_tokens: the decoder's inputs (the start token, then `target_tokens` but the last): the keys
            of the decoder self-attention.
        cross: `(layers, heads, tgt_len, src_len)` encoder-decoder attention; each row sums to 1.
        encoder: `(layers, heads, src_len, src_len)` encoder self-attention, or None (no such attention).
        decoder: `(layers, heads, tgt_len, tgt_len)` causal decoder self-attention, or None.
        source_word_ids, target_word_ids: the word of each source and target token (None: `</s>`, padding).
        source_words, target_words: the words, as the tokenizer decodes their pieces.
    """

    translation: str
    source_tokens: list[str]
    target_tokens: list[str]
    decoder_input_tokens: list[str]
    cross: torch.Tensor
    encoder: torch.Tensor | None = None
    decoder: torch.Tensor | None = None
    source_word_ids: list[int | None] = field(default_factory=list)
    target_word_ids: list[int | None] = field(default_factory=list)
    source_words: list[str] = field(default_factory=list)
    target_words: list[str] = field(default_factory=list)


def display_tokens(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> list[str]:
    """Token labels for a figure: word-start marks dropped, word-continuing pieces prefixed with "-" (punctuation,
    a token of its own, is shown as it is)."""
    tokens = tokenizer.convert_ids_to_tokens(ids)
    if not any(token.startswith(WORD_START) for token in tokens):  # a word-level vocabulary
        return tokens
    special = set(tokenizer.all_special_tokens)

    def label(token: str) -> str:
        if token.startswith(WORD_START):
            return token[1:] or token
        return token if token in special or not any(char.isalnum() for char in token) else f"-{token}"

    return [label(token) for token in tokens]


def _words(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> tuple[list[int | None], list[str]]:
    """Each token's word (`alignment.word_ids`) and each word's text (its pieces decoded, no marks)."""
    words = word_ids(tokenizer, ids)
    pieces: dict[int, list[int]] = {}
    for token, word in zip(ids, words, strict=True):
        if word is not None:
            pieces.setdefault(word, []).append(token)
    return words, [tokenizer.decode(pieces[word]).strip() or "␣" for word in sorted(pieces)]


def _stack(layers: tuple[torch.Tensor, ...] | None) -> torch.Tensor | None:
    """One `(batch=1, heads, q, k)` tensor per layer -> `(layers, heads, q, k)`."""
    return None if not layers else torch.stack([weights[0] for weights in layers]).float().cpu()


@torch.no_grad()
def attention_maps(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, text: str, target_ids: Sequence[int]
) -> AttentionMaps:
    """The attention maps of `text` translated as `target_ids` (a hypothesis's ids, `Translator.attention_maps`),
    from a teacher-forced pass up to its end of sentence: row i is the attention with which token i was predicted."""
    ids = source_ids(tokenizer, [text], source_limit(model.config, tokenizer))[0]
    if not ids:
        raise InputError("cannot translate an empty text with attention weights")
    input_ids = torch.tensor([ids], device=model.device)  # (1, src_len)
    start = model.generation_config.decoder_start_token_id
    if start is None:
        start = model.config.decoder_start_token_id
    sequence = torch.tensor([start, *target_ids], device=model.device)  # (1 + target,)
    generated = sequence[1:].tolist()
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos) if isinstance(eos, list) else {eos}
    length = next((i + 1 for i, token in enumerate(generated) if token in eos_ids), len(generated))
    was_training = model.training
    model.eval()
    try:
        outputs = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                        decoder_input_ids=sequence[None, :length], output_attentions=True)  # fmt: skip
    finally:
        model.train(was_training)
    source_word_ids, source_words = _words(tokenizer, ids)
    target_word_ids, target_words = _words(tokenizer, generated[:length])
    return AttentionMaps(
        translation=tokenizer.decode(generated[:length], skip_special_tokens=True),
        source_tokens=display_tokens(tokenizer, ids),
        target_tokens=display_tokens(tokenizer, generated[:length]),
        decoder_input_tokens=display_tokens(tokenizer, sequence[:length].tolist()),
        cross=_stack(outputs.cross_attentions),
        encoder=_stack(outputs.encoder_attentions),
        decoder=_stack(outputs.decoder_attentions),
        source_word_ids=source_word_ids,
        target_word_ids=target_word_ids,
        source_words=source_words,
        target_words=target_words,
    )


_INCHES_PER_TOKEN = 0.35  # room for a token's label
_PANEL_INCHES = (3.0, 12.0)  # a panel's side, at least (unless the figure's limit leaves less) and at most
_FIGURE_INCHES = 40.0  # a figure's width and height at most (6,000 pixels at save_figure's 150 dpi)
_LABEL_INCHES = 0.15  # tokens get a label each while a panel gives them this much; else numbered ticks
_TITLE_CHARS = 100  # the source and translation in the figure's title are cut to this


def _panel_inches(tokens: int, panels: int) -> float:
    """A panel's side for `tokens` rows or columns, `panels` of them side by side: room for each token's label,
    within the panel's and the figure's limits (a long source must not make a figure of gigabytes)."""
    low, high = _PANEL_INCHES
    return min(max(low, _INCHES_PER_TOKEN * tokens), high, _FIGURE_INCHES / panels)


def _labels(tokens: list[str], inches: float) -> list[str] | None:
    """The tokens as tick labels where a panel side of `inches` has room for them, else None (numbered ticks)."""
    return tokens if inches >= _LABEL_INCHES * len(tokens) else None


def _shorten(text: str) -> str:
    return text if len(text) <= _TITLE_CHARS else text[: _TITLE_CHARS - 1] + "…"


def plot_attention_maps(maps: AttentionMaps, text: str, path: str | Path) -> list[Path]:
    """Heatmaps of `maps`: the cross-attention at `path` (one panel, or a layers x heads grid), and the encoder and
    decoder self-attention beside it (`<stem>-encoder<suffix>`, `<stem>-decoder<suffix>`) when the model has them.
    Figures stay within 40 x 40 inches; tokens are labelled while a panel has 0.15 inch for each (up to 80 tokens
    a panel; numbered ticks beyond).
    Returns the files written."""
    path = Path(path)
    source, target, decoder_inputs = maps.source_tokens, maps.target_tokens, maps.decoder_input_tokens
    kinds = [  # (title, weights, (x label, keys), (y label, queries), file)
        ("encoder-decoder attention", maps.cross, ("source", source), ("translation", target), path),
        ("encoder self-attention", maps.encoder, ("source", source), ("source", source), "encoder"),
        ("decoder self-attention", maps.decoder, ("decoder input", decoder_inputs), ("translation", target), "decoder"),
    ]
    written = []
    for title, weights, (xlabel, keys), (ylabel, queries), where in kinds:
        if weights is None:
            continue
        target = where if isinstance(where, Path) else path.with_name(f"{path.stem}-{where}{path.suffix}")
        layers, heads = weights.shape[:2]
        width, height = _panel_inches(len(keys), heads), _panel_inches(len(queries), layers)
        show_heatmaps(
            weights,
            xlabel=xlabel,
            ylabel=ylabel,
            titles=[f"head {head + 1}" for head in range(heads)] if heads > 1 else None,
            row_labels=[f"layer {layer + 1}" for layer in range(layers)] if layers > 1 else None,
            xticklabels=_labels(keys, width),
            yticklabels=_labels(queries, height),
            figsize=(width * heads, height * layers),
            suptitle=f"{title}\n{_shorten(text)}\n→ {_shorten(maps.translation)}",
            colorbar_label="attention weight",
            path=target,
        )
        written.append(target)
    return written


def plot_word_attention(
    maps: AttentionMaps, text: str, path: str | Path, layer: int | None = None, head: int | None = None
) -> Path:
    """One readable figure at `path`: the cross-attention between the words of the source and of the translation
    (a source word's pieces summed, a translation word's pieces averaged; `</s>` left out) of `layer` (from 1;
    default the last) averaged over its heads, or of one `head` (from 1). Returns the file written."""
    layers, heads = maps.cross.shape[:2]
    for name, value, count in (("layer", layer, layers), ("head", head, heads)):
        if value is not None and not 1 <= value <= count:
            raise InputError(f"--heatmap-{name} {value}: the model's cross-attention has {count} {name}s (1-{count})")
    weights = maps.cross[(layer or layers) - 1]  # (heads, tgt_len, src_len)
    weights = weights.mean(0) if head is None else weights[head - 1]
    words = merge_words(weights, maps.target_word_ids, maps.source_word_ids)  # (target words, source words)
    which = f"layer {layer or layers} of {layers}" if layers > 1 else ""
    which += (", " if which else "") + (
        f"head {head} of {heads}" if head else f"{heads} heads averaged" if heads > 1 else ""
    )
    width, height = _panel_inches(len(maps.source_words), 1), _panel_inches(len(maps.target_words), 1)
    show_heatmaps(
        words,
        xlabel="source",
        ylabel="translation",
        xticklabels=_labels(maps.source_words, width),
        yticklabels=_labels(maps.target_words, height),
        figsize=(width + 1.5, height + 1.0),
        suptitle=f"encoder-decoder attention{f' ({which})' if which else ''}\n{_shorten(text)}\n→ "
        f"{_shorten(maps.translation)}",
        colorbar_label="attention weight",
        path=path,
    )
    return Path(path)


__all__ = ["AttentionMaps", "attention_maps", "display_tokens", "plot_attention_maps", "plot_word_attention"]
