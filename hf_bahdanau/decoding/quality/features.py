"""What a model says about its own translation, as features of a quality estimate (`quality`): per target token its
log-probability and its cross-attention over the source.

`Evidence` holds them for one translation (the best hypothesis): the torch engine takes them from its search (which
computes them: `search(..., trace=True)`), or for a given translation from a teacher-forced pass (`torch_evidence`);
CTranslate2 takes the attention from its search and the log-probabilities from its greedy search's steps, or after a
beam search from `score_batch` (`CTranslate2Translator.search_evidence`, `CTranslate2Translator.evidence`). Each is
the same as the teacher-forced pass gives (the tests hold them to it), so the features cannot depend on how the search
ran. Words are the whitespace-separated words of the decoded translation (`word_groups`);
`word_features` and `sentence_features` turn the evidence into rows of numbers, named by `WORD_FEATURES` and
`SENTENCE_FEATURES`; Bergamot's four word features are the first four of `WORD_FEATURES`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import numpy as np
from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

BERGAMOT_FEATURES = ("mean_log_prob", "min_log_prob", "subwords", "sentence_mean_log_prob")
WORD_FEATURES = (*BERGAMOT_FEATURES, "attention_entropy")
SENTENCE_FEATURES = (
    "mean_log_prob", "min_log_prob", "doubtful_words", "unattended_source", "overattended_source", "log_length_ratio",
)  # fmt: skip
DOUBTFUL = math.log(0.2)  # a word whose least likely piece is below this is "doubtful"


@dataclass
class Evidence:
    """The model's view of one translation: per generated token (`</s>` included) its `log_probs` `(tokens,)` and
    its `attention` `(tokens, source tokens)` over the source (each row sums to 1; the last layer's first head, the
    one CTranslate2 returns; the RNN's only one), and the `words`: the token positions of each word of the
    translation (`word_groups`), with their texts in `word_texts`. Lists are taken as float64 arrays."""

    log_probs: np.ndarray
    attention: np.ndarray
    words: Sequence[Sequence[int]]
    word_texts: list[str]

    def __post_init__(self) -> None:
        self.log_probs = np.asarray(self.log_probs, dtype=np.float64)
        attention = np.asarray(self.attention, dtype=np.float64)
        self.attention = attention if attention.ndim == 2 else attention.reshape(len(attention), 0)


def word_groups(tokenizer: Any, ids: Sequence[int]) -> tuple[list[tuple[int, ...]], list[str]]:
    """The words of the translation `ids` as the tokenizer's decode splits them (on whitespace), each with the
    positions of the tokens that make it: a token belongs to the word its decoded prefix ends in; a token that adds
    only whitespace (SentencePiece's bare "▁") belongs to the next word; one that adds nothing at the end (`</s>`)
    to none. Tuples: Python's garbage collector stops tracking a tuple of ints, so the groups of the translations a
    run holds do not bring its full collections sooner."""
    prefixes = prefix_texts(tokenizer, ids)
    texts = prefixes[-1].split() if prefixes else []
    groups: list[list[int]] = [[] for _ in texts]
    waiting: list[int] = []  # tokens that join the next word
    before = ""
    for position, prefix in enumerate(prefixes):
        added = prefix != before and not prefix[len(before) :].isspace()
        before = prefix
        count = len(prefix.split())
        if not added or count == 0:
            waiting.append(position)
            continue
        word = min(count, len(texts)) - 1
        groups[word].extend([*waiting, position])
        waiting = []
    for word, group in enumerate(groups):  # a word no token ended in (decode not prefix-stable): its neighbour's
        if not group:
            groups[word] = list(groups[word - 1][-1:]) if word else []
    return [tuple(group) for group in groups], texts


def prefix_texts(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """The decoded text of `ids` up to each of its tokens, special tokens skipped: where the tokenizer's
    `backend_tokenizer` (the tokenizers library's) decodes as its `decode` does (no clean-up of spaces), the running
    text of its incremental decoding (`DecodeStream`: what each token adds), kept where it ends in the whole text's
    `decode`; else `decode` of each prefix."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if not isinstance(backend, Tokenizer) or getattr(tokenizer, "clean_up_tokenization_spaces", False):
        backend = tokenizer
    else:
        stream = DecodeStream(skip_special_tokens=True)
        prefixes = list(accumulate(stream.step(backend, int(index)) or "" for index in ids))
        if not prefixes or prefixes[-1] == backend.decode(list(ids), skip_special_tokens=True):
            return prefixes
    return [backend.decode(list(ids[: position + 1]), skip_special_tokens=True) for position in range(len(ids))]


def _spread(attention: np.ndarray) -> np.ndarray:
    """`(tokens,)`: the entropy of each token's attention `(tokens, source tokens)` over the entropy of uniform
    attention (1: spread evenly over the source; 0: on one source token)."""
    source = attention.shape[1]
    logs = np.log(np.where(attention > 0.0, attention, 1.0))
    return -(attention * logs).sum(1) / (math.log(source) if source > 1 else 1.0)


def _pieces(evidence: Sequence[Evidence]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pieces of every word of the translations `evidence`, words in turn: each piece's position among all
    their tokens `(pieces,)`, the word it belongs to `(pieces,)`, and each word's piece count `(words,)` (0: a word
    of no token of its own, see `word_groups`)."""
    offsets = np.cumsum([0, *(len(found.log_probs) for found in evidence)])
    positions = [offset + i for found, offset in zip(evidence, offsets[:-1], strict=True) for group in found.words
                 for i in group]  # fmt: skip
    sizes = np.array([len(group) for found in evidence for group in found.words], dtype=np.int64)
    return np.array(positions, dtype=np.int64), np.repeat(np.arange(len(sizes)), sizes), sizes


def _least(values: np.ndarray, owner: np.ndarray, words: int) -> np.ndarray:
    """`(words,)`: the least of `values` `(pieces,)` of each word (`owner`: each piece's); inf for none."""
    least = np.full(words, np.inf)
    np.minimum.at(least, owner, values)
    return least


def word_features(evidence: Sequence[Evidence]) -> np.ndarray:
    """`(all words, len(WORD_FEATURES))`, the words of the translations `evidence` in turn: of each word its pieces'
    mean and least log-probability, how many pieces it has, its sentence's mean log-probability (Bergamot's four),
    and the mean entropy of its pieces' attention over the source (`_spread`). A word of no token of its own (see
    `word_groups`): its sentence's mean, 0 pieces, attention spread evenly."""
    if not evidence:
        return np.zeros((0, len(WORD_FEATURES)))
    positions, owner, sizes = _pieces(evidence)
    log_probs = np.concatenate([found.log_probs for found in evidence])[positions]  # (pieces,)
    spread = np.concatenate([_spread(found.attention) for found in evidence])[positions]  # (pieces,)
    sentence = np.repeat([found.log_probs.mean() for found in evidence], [len(found.words) for found in evidence])
    own, count = sizes > 0, np.maximum(sizes, 1)  # (words,)
    return np.column_stack([
        np.where(own, np.bincount(owner, log_probs, len(sizes)) / count, sentence),
        np.where(own, _least(log_probs, owner, len(sizes)), sentence), sizes, sentence,
        np.where(own, np.bincount(owner, spread, len(sizes)) / count, 1.0),
    ])  # fmt: skip


def sentence_features(evidence: Sequence[Evidence], source_tokens: Sequence[int]) -> np.ndarray:
    """`(translations, len(SENTENCE_FEATURES))`: of each translation its mean and least token log-probability, the
    share of its words that are doubtful (least piece below `DOUBTFUL`), the share of source tokens it never attends
    (attention summed over the translation below 0.5) and attends twice or more (above 1.5), and log(translation
    tokens / source tokens); `source_tokens`: each source's length."""
    if not evidence:
        return np.zeros((0, len(SENTENCE_FEATURES)))
    positions, owner, sizes = _pieces(evidence)
    tokens = np.array([len(found.log_probs) for found in evidence])  # (translations,)
    log_probs = np.concatenate([found.log_probs for found in evidence])  # (all tokens,)
    sentence_of = np.repeat(np.arange(len(evidence)), [len(found.words) for found in evidence])[sizes > 0]
    doubtful = np.bincount(sentence_of, _least(log_probs[positions], owner, len(sizes))[sizes > 0] < DOUBTFUL,
                           len(evidence))  # fmt: skip
    spoken = np.maximum(np.bincount(sentence_of, minlength=len(evidence)), 1)
    starts = np.cumsum(tokens) - tokens
    coverage = [found.attention.sum(0) if found.attention.size else np.ones(1) for found in evidence]
    widths = np.array([len(each) for each in coverage])  # (translations,) source tokens
    coverage, covered = np.concatenate(coverage), np.cumsum(widths) - widths  # (all source tokens,)
    return np.column_stack([
        np.add.reduceat(log_probs, starts) / tokens, np.minimum.reduceat(log_probs, starts), doubtful / spoken,
        np.add.reduceat(coverage < 0.5, covered) / widths, np.add.reduceat(coverage > 1.5, covered) / widths,
        np.log(tokens / np.maximum(source_tokens, 1)),
    ])  # fmt: skip


def torch_evidence(
    model: Any, tokenizer: Any, sources: Sequence[list[int]], targets: Sequence[list[int]]
) -> list[Evidence]:
    """The evidence of each translation `targets[k]` (generated ids, `</s>` included) of `sources[k]` (ids), from one
    teacher-forced pass of the torch `model` over the batch (the sources padded as the search pads them)."""
    import torch

    from hf_bahdanau.decoding.batching import padded
    from hf_bahdanau.models.pipelines import pad_id

    device, start = model.device, model.config.decoder_start_token_id
    input_ids, attention_mask = padded(sources, pad_id(tokenizer), tokenizer.padding_side)  # (batch, src_len)
    decoder_ids, _ = padded(
        [[start, *target[:-1]] for target in targets], pad_id(tokenizer), "right"
    )  # (batch, tgt_len)
    with torch.no_grad():
        outputs = model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                        decoder_input_ids=decoder_ids.to(device), output_attentions=True)  # fmt: skip
    log_probs = outputs.logits.float().log_softmax(-1)  # (batch, tgt_len, vocab)
    cross = outputs.cross_attentions[-1][:, 0].float()  # (batch, tgt_len, src_len): the last layer's first head
    found = []
    for k, target in enumerate(targets):
        ids = torch.tensor(target, device=device)
        chosen = log_probs[k, : len(target)].gather(1, ids[:, None]).squeeze(1)  # (tokens,)
        trace = torch.cat((cross[k, : len(target)], chosen[:, None]), dim=1)  # (tokens, src_len + 1)
        found.append(traced_evidence(tokenizer, target, trace, attention_mask[k].to(device)))
    return found


def evidence_for(
    tokenizer: Any, target: Sequence[int], log_probs: Sequence[float], attention: Sequence[list[float]]
) -> Evidence:
    """The evidence of the translation `target` (ids, `</s>` included) from at least one log-probability and one
    attention row per token (cut to its tokens), its words grouped (`word_groups`)."""
    words, texts = word_groups(tokenizer, target)
    return Evidence(np.asarray(log_probs, dtype=np.float64)[: len(target)],
                    np.asarray(attention, dtype=np.float64)[: len(target)], words, texts)  # fmt: skip


def traced_evidence(tokenizer: Any, target: Sequence[int], trace: Any, mask: Any) -> Evidence:
    """The evidence of the translation `target` (ids, `</s>` included) from its tokens' traces (a tensor
    `(at least tokens, src_len + 1)`: each token's attention over the padded source, then its log-probability; a
    teacher-forced pass's or the search's, `search.step_trace`) and the source's padding `mask` `(src_len,)`."""
    trace = trace[: len(target)]
    return evidence_for(tokenizer, target, trace[:, -1].cpu().numpy(), trace[:, :-1][:, mask.bool()].cpu().numpy())


def evidence_of(
    engine: str, model: Any, tokenizer: Any, sources: Sequence[list[int]], targets: Sequence[list[int]],
    batch_size: int | None, attention: Sequence[np.ndarray | None] | None = None,
    searched: Sequence[Evidence | None] | None = None,
) -> list[Evidence | None]:  # fmt: skip
    """The evidence of each translation `targets[k]` of `sources[k]` (ids) by the Translator's `engine` and `model`:
    `searched[k]` where the search gave it, else torch's `torch_evidence` or CTranslate2's
    `CTranslate2Translator.evidence` (with the search's `attention[k]` where given), in batches of at most
    `batch_size` (None: one); None where either is empty."""
    found: list[Evidence | None] = list(searched or [None] * len(sources))
    kept = [i for i in range(len(sources)) if sources[i] and targets[i] and found[i] is None]
    step = batch_size or len(kept) or 1
    for start in range(0, len(kept), step):
        batch = kept[start : start + step]
        ours, theirs = [sources[i] for i in batch], [targets[i] for i in batch]
        if engine == "ctranslate2":
            made = model.evidence(ours, theirs, None if attention is None else [attention[i] for i in batch])
        else:
            made = torch_evidence(model, tokenizer, ours, theirs)
        for i, each in zip(batch, made, strict=True):
            found[i] = each
    return found


__all__ = [
    "BERGAMOT_FEATURES", "SENTENCE_FEATURES", "WORD_FEATURES", "Evidence", "evidence_for", "evidence_of",
    "sentence_features",
    "prefix_texts", "torch_evidence", "traced_evidence", "word_features", "word_groups",
]  # fmt: skip
