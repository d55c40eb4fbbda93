"""Translating files like a translator's tool: scores, n-best lists, word alignments, length-sorted token batches,
translations bounded by their source's length.

- A hypothesis's score is its length-normalised log-probability: the mean, over its generated tokens (`</s>`
  included), of the model's log-probability of each token (from the raw logits `generate` returns, before any
  logits processor), so a score near 0 is a confident translation and a low one a doubtful one.
- Alignments are Pharaoh `i-j` pairs (source word i, translation word j, both from 0) read from the cross-attention
  of a teacher-forced pass over the translation: the RNN's attention, the Transformer's last layer averaged over its
  heads. Words are whitespace-separated words of the source and the translation (subword pieces merged; a word-level
  vocabulary's tokens are its words); each translation word is linked to the source word it attends to most.
- Files are translated in windows of `SORT_WINDOW` lines, each sorted by length and cut into batches of at most
  `batch_tokens` padded source tokens, the results given back in input order as soon as they can be.
- Unless the caller sets `max_new_tokens`, each translation is cut at `max(8, 3 * source tokens)` tokens, so odd
  input (a lone "-", emoji, a URL) cannot loop on.
- A plain beam search without scores runs in `beam_search.beam_search`: `generate()`'s search, the same sequences,
  with each sentence leaving the batch once its result is final; anything else runs in `generate()`.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from transformers import LogitsProcessorList, PreTrainedModel, PreTrainedTokenizerBase

from .beam_search import SourceLengthLimit, beam_search, first_id, usable
from .pipelines import _pad_id, encode

logger = logging.getLogger(__name__)

LENGTH_FACTOR = 3  # a translation is at most this many times its source's tokens ...
MIN_NEW_TOKENS = 8  # ... or this many, whichever is more
SORT_WINDOW = 2000  # lines sorted by length together (results wait at most this many lines to be written in order)
_WORD_START = ("\u2581", "\u0120")  # SentencePiece's and byte-level BPE's word-start marks


def length_bound(source_tokens: int) -> int:
    """The most tokens a translation of a source of `source_tokens` tokens (`</s>` included) may have."""
    return max(MIN_NEW_TOKENS, LENGTH_FACTOR * source_tokens)


@dataclass
class Hypothesis:
    """One translation: its text, score (mean token log-probability) and Pharaoh alignment, when asked for, and
    its token ids (`</s>` included; e.g. to draw its attention: `attention_maps(..., target_ids=ids)`)."""

    text: str
    score: float | None = None
    alignment: str | None = None
    ids: list[int] = field(default_factory=list, compare=False, repr=False)


# ---- words -----------------------------------------------------------------------------------------------


def _marks_words(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the vocabulary marks word starts (subwords), or is one of words; remembered on the tokenizer."""
    marked = getattr(tokenizer, "_marks_words", None)
    if marked is None:
        marked = any(token.startswith(_WORD_START) for token in tokenizer.get_vocab())
        tokenizer._marks_words = marked
    return marked


def word_ids(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int]) -> list[int | None]:
    """The word each token belongs to (from 0), None for special tokens (`</s>`, padding): a piece with a word-start
    mark begins a word, one without continues it (a word-level vocabulary: every token is a word)."""
    tokens = tokenizer.convert_ids_to_tokens(list(ids))
    special = set(tokenizer.all_special_tokens) - {tokenizer.unk_token}
    marked = _marks_words(tokenizer)
    words: list[int | None] = []
    current = -1
    for token in tokens:
        if token in special:
            words.append(None)
            continue
        if current < 0 or not marked or token.startswith(_WORD_START):  # a bare mark and the piece after it: one word
            current += 1
        words.append(current)
    return words


def merge_words(
    weights: torch.Tensor, query_words: Sequence[int | None], key_words: Sequence[int | None]
) -> torch.Tensor:
    """Attention between words from attention between tokens: a key word gets the weights of its pieces summed, a
    query word the mean of its pieces' rows; special tokens are left out.
    weights: `(..., queries, keys)` -> `(..., query words, key words)`."""
    n_queries = 1 + max((word for word in query_words if word is not None), default=-1)
    n_keys = 1 + max((word for word in key_words if word is not None), default=-1)
    queries = torch.zeros(n_queries, len(query_words))  # (query words, queries): each row averages its pieces
    for position, word in enumerate(query_words):
        if word is not None:
            queries[word, position] = 1.0
    queries = queries / queries.sum(1, keepdim=True).clamp(min=1)
    keys = torch.zeros(len(key_words), n_keys)  # (keys, key words): each column sums its pieces
    for position, word in enumerate(key_words):
        if word is not None:
            keys[position, word] = 1.0
    return queries @ weights.float() @ keys


def pharaoh(word_attention: torch.Tensor) -> str:
    """Pharaoh `i-j` pairs (source word i, target word j) linking each target word to the source word it attends to
    most; word_attention: `(target words, source words)`."""
    if word_attention.numel() == 0:
        return ""
    best = word_attention.argmax(1).tolist()  # (target words,)
    return " ".join(f"{source}-{target}" for source, target in sorted((s, t) for t, s in enumerate(best)))


# ---- translating a batch ---------------------------------------------------------------------------------


def _pad(rows: Sequence[list[int]], pad: int, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """`input_ids` and `attention_mask` `(batch, longest)` of `rows`, padded on the left or the right."""
    longest = max(len(row) for row in rows)
    ids = torch.full((len(rows), longest), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), longest), dtype=torch.long)
    for i, row in enumerate(rows):
        where = slice(longest - len(row), longest) if left else slice(0, len(row))
        ids[i, where] = torch.tensor(row)
        mask[i, where] = 1
    return ids, mask


def source_ids(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], limit: int) -> list[list[int]]:
    """Each text's token ids, cut to `limit` with a warning (`encode`); an empty or blank text has none."""
    return [encode(tokenizer, text, limit)["input_ids"][0].tolist() if text.strip() else [] for text in texts]


def _scores(model: PreTrainedModel, outputs: object, lengths: torch.Tensor) -> torch.Tensor:
    """Mean log-probability of each returned sequence's first `lengths` generated tokens, from the raw logits."""
    transition = model.compute_transition_scores(
        outputs.sequences, outputs.logits, getattr(outputs, "beam_indices", None), normalize_logits=True
    )  # (rows, steps)
    steps = torch.arange(transition.shape[1], device=transition.device)
    mask = steps[None, :] < lengths[:, None].to(transition.device)
    return (transition.masked_fill(~mask, 0.0).sum(1) / lengths.clamp(min=1).to(transition.device)).cpu()


@torch.no_grad()
def translate_ids(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[list[int]],
    n_best: int = 1,
    scores: bool = False,
    alignments: bool = False,
    max_new_tokens: int | None = None,
    **generate_options: object,
) -> list[list[Hypothesis]]:
    """Translate sources given as token ids (`source_ids`), `n_best` hypotheses each, best first; an empty source
    translates to one empty hypothesis of score 0 without reaching the model. Unless `max_new_tokens` is given,
    each translation has at most `length_bound(len(source))` tokens."""
    empty = Hypothesis("", 0.0 if scores else None, "" if alignments else None)
    results: list[list[Hypothesis]] = [[empty] for _ in rows]
    kept = [i for i, row in enumerate(rows) if row]
    if not kept:
        return results
    input_ids, attention_mask = _pad([rows[i] for i in kept], _pad_id(tokenizer), tokenizer.padding_side == "left")
    input_ids, attention_mask = input_ids.to(model.device), attention_mask.to(model.device)  # (batch, src_len)
    eos = first_id(model.generation_config.eos_token_id)
    options: dict = {"pad_token_id": _pad_id(tokenizer), **generate_options, "num_return_sequences": n_best}
    limits = None
    if max_new_tokens is None:
        limits = torch.tensor([length_bound(len(rows[i])) for i in kept])  # (batch,)
        options["max_new_tokens"] = int(limits.max())
    else:
        options["max_new_tokens"] = max_new_tokens
    config = copy.deepcopy(model.generation_config)
    config.update(**options)
    if config.decoder_start_token_id is None:
        config.decoder_start_token_id = model.config.decoder_start_token_id
    if not scores and usable(model, config, input_ids):  # the same sequences, finished sentences let go
        sequences = beam_search(model, input_ids, attention_mask, config, limits)
        outputs = None
    else:
        if limits is not None:
            copies = config.num_beams if config.num_beams > 1 else n_best  # generate's rows per source
            processor = SourceLengthLimit(limits.repeat_interleave(copies), eos)
            options["logits_processor"] = LogitsProcessorList([processor])
        outputs = model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            return_dict_in_generate=True,
            output_logits=scores,
            **options,
        )
        sequences = outputs.sequences  # (batch * n_best, 1 + generated)
    generated = sequences[:, 1:]
    is_eos = generated == eos
    lengths = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, generated.shape[1])  # (rows,) with </s>
    row_scores = _scores(model, outputs, lengths) if scores else None
    row_alignments = (
        _alignments(model, tokenizer, input_ids, attention_mask, sequences, lengths, n_best) if alignments else None
    )
    for k, i in enumerate(kept):
        hypotheses = []
        for j in range(k * n_best, (k + 1) * n_best):
            text = tokenizer.decode(generated[j, : lengths[j]], skip_special_tokens=True)
            score = float(row_scores[j]) if row_scores is not None else None
            alignment = row_alignments[j] if row_alignments is not None else None
            hypotheses.append(Hypothesis(text, score, alignment, generated[j, : lengths[j]].tolist()))
        results[i] = hypotheses
    return results


def _alignments(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    sequences: torch.Tensor,
    lengths: torch.Tensor,
    n_best: int,
) -> list[str]:
    """Pharaoh alignments of the returned sequences, from a teacher-forced pass (the last layer's cross-attention,
    heads averaged); input_ids, attention_mask: `(batch, src_len)`, sequences: `(batch * n_best, 1 + generated)`."""
    input_ids = input_ids.repeat_interleave(n_best, 0)
    attention_mask = attention_mask.repeat_interleave(n_best, 0)
    outputs = model(
        input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=sequences[:, :-1], output_attentions=True
    )
    cross = outputs.cross_attentions[-1].float().mean(1).cpu()  # (rows, generated, src_len)
    alignments = []
    for row in range(sequences.shape[0]):
        source = input_ids[row][attention_mask[row].bool()].tolist()
        columns = attention_mask[row].bool().cpu()
        target = sequences[row, 1 : 1 + lengths[row]].tolist()
        weights = cross[row, : len(target)][:, columns]  # (target tokens, source tokens)
        words = merge_words(weights, word_ids(tokenizer, target), word_ids(tokenizer, source))
        alignments.append(pharaoh(words))
    return alignments


def trained_source_length(model_dir: str) -> int | None:
    """The longest source (in tokens, `</s>` included) a model folder was trained on: `max_source_length` in its
    `translation_data.json` (None where not recorded, e.g. a folder trained before it was)."""
    from .run_settings import read_data_settings

    length = read_data_settings(model_dir).get("max_source_length")
    return length if isinstance(length, int) else None


def warn_long_sources(lengths: Sequence[int], trained: int | None) -> bool:
    """Log one warning when a source is longer than `trained` tokens; whether it did."""
    longer = [length for length in lengths if trained is not None and length > trained]
    if longer:
        logger.warning(
            "%d source(s) longer than the %d tokens of the longest source the model saw in training (up to %d "
            "tokens): their translations may be cut short or go wrong",
            len(longer),
            trained,
            max(longer),
        )
    return bool(longer)


def unknown_text_message(tokenizer: PreTrainedTokenizerBase, text: str) -> str | None:
    """One line saying that `text` is mostly unknown to the model, or None: more than half of its tokens (special
    tokens such as `</s>` left out) are the tokenizer's unk token, e.g. Chinese typed into a de-en model."""
    unk = tokenizer.unk_token_id
    special = set(tokenizer.all_special_ids) - {unk}
    ids = [i for i in tokenizer(text, verbose=False)["input_ids"] if i not in special]
    unknown = sum(i == unk for i in ids) if unk is not None else 0
    if 2 * unknown <= len(ids):
        return None
    shown = text if len(text) <= 40 else text[:40] + "..."
    return (
        f"The text is mostly in letters the model does not know ({unknown} of {len(ids)} tokens unknown): "
        f"{shown!r} is not in the language it translates from."
    )


# ---- files -----------------------------------------------------------------------------------------------


def token_batches(
    lengths: Sequence[int], batch_tokens: int | None = None, max_sentences: int | None = None
) -> list[list[int]]:
    """Indices of `lengths` sorted longest first, cut into batches whose padded size (sentences x longest) stays
    within `batch_tokens` (a longer sentence goes alone) and of at most `max_sentences` sentences."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for index in order:
        batch = batches[-1] if batches else None
        if (
            batch is not None
            and (batch_tokens is None or (len(batch) + 1) * max(lengths[batch[0]], 1) <= batch_tokens)
            and (max_sentences is None or len(batch) < max_sentences)
        ):  # sorted: the batch's first is its longest
            batch.append(index)
        else:
            batches.append([index])
    return batches


def translate_in_order(
    translate: Callable[[list[int]], list[list[Hypothesis]]],
    lengths: Sequence[int],
    batch_tokens: int | None = None,
    max_sentences: int | None = None,
    progress: bool = False,
) -> Iterator[list[list[Hypothesis]]]:
    """Translate `len(lengths)` sentences by length-sorted token batches (`translate(indices)` -> their hypotheses,
    in that order); yields the results in input order, as soon as the next ones are done."""
    from tqdm.auto import tqdm

    done: dict[int, list[Hypothesis]] = {}
    next_index = 0
    with tqdm(total=len(lengths), desc="translating", unit="sent", disable=not progress) as bar:
        for start in range(0, len(lengths), SORT_WINDOW):
            window = lengths[start : start + SORT_WINDOW]
            for batch in token_batches(window, batch_tokens, max_sentences):
                indices = [start + i for i in batch]
                done.update(zip(indices, translate(indices), strict=True))
                bar.update(len(indices))
                ready = []
                while next_index in done:
                    ready.append(done.pop(next_index))
                    next_index += 1
                if ready:
                    yield ready


def hypothesis_lines(index: int, hypotheses: Sequence[Hypothesis], n_best: bool) -> str:
    """The output lines of one source: `[INDEX TAB] [SCORE TAB] TRANSLATION [TAB ALIGNMENT]`, one per hypothesis (the
    index only for n-best lists, the score and alignment when computed)."""
    lines = []
    for hypothesis in hypotheses:
        fields = [str(index)] if n_best else []
        if hypothesis.score is not None:
            fields.append(f"{hypothesis.score:.4f}")
        fields.append(hypothesis.text)
        if hypothesis.alignment is not None:
            fields.append(hypothesis.alignment)
        lines.append("\t".join(fields) + "\n")
    return "".join(lines)


__all__ = [
    "Hypothesis",
    "LENGTH_FACTOR",
    "MIN_NEW_TOKENS",
    "SourceLengthLimit",
    "hypothesis_lines",
    "length_bound",
    "merge_words",
    "pharaoh",
    "source_ids",
    "token_batches",
    "trained_source_length",
    "translate_ids",
    "translate_in_order",
    "unknown_text_message",
    "warn_long_sources",
    "word_ids",
]
