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
from typing import Any

BERGAMOT_FEATURES = ("mean_log_prob", "min_log_prob", "subwords", "sentence_mean_log_prob")
WORD_FEATURES = (*BERGAMOT_FEATURES, "attention_entropy")
SENTENCE_FEATURES = (
    "mean_log_prob", "min_log_prob", "doubtful_words", "unattended_source", "overattended_source", "log_length_ratio",
)  # fmt: skip
DOUBTFUL = math.log(0.2)  # a word whose least likely piece is below this is "doubtful"


@dataclass
class Evidence:
    """The model's view of one translation: per generated token (`</s>` included) its `log_probs` and its
    `attention` `(tokens, source tokens)` over the source (each row sums to 1; the last layer's first head, the one
    CTranslate2 returns; the RNN's only one), and the `words`: the token positions of each word of the translation
    (`word_groups`), with their texts in `word_texts`."""

    log_probs: list[float]
    attention: list[list[float]]
    words: list[list[int]]
    word_texts: list[str]


def word_groups(tokenizer: Any, ids: Sequence[int]) -> tuple[list[list[int]], list[str]]:
    """The words of the translation `ids` as the tokenizer's decode splits them (on whitespace), each with the
    positions of the tokens that make it: a token belongs to the word its decoded prefix ends in; a token that adds
    only whitespace (SentencePiece's bare "▁") belongs to the next word; one that adds nothing at the end (`</s>`)
    to none."""
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
    return groups, texts


def prefix_texts(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """`tokenizer.decode` of each prefix of `ids`, special tokens skipped: by a transformers tokenizer's
    `backend_tokenizer` where its `decode` adds nothing to it (no clean-up of spaces), one prefix a call (its
    `decode_batch` spends CPU time on threads for batches this small)."""
    prefixes = [list(ids[: position + 1]) for position in range(len(ids))]
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or getattr(tokenizer, "clean_up_tokenization_spaces", False):
        backend = tokenizer
    return [backend.decode(prefix, skip_special_tokens=True) for prefix in prefixes]


def _entropy(row: Sequence[float]) -> float:
    return -sum(p * math.log(p) for p in row if p > 0.0)


def word_features(evidence: Evidence) -> list[list[float]]:
    """`(words, len(WORD_FEATURES))`: of each word its pieces' mean and least log-probability, how many pieces it
    has, the sentence's mean log-probability (Bergamot's four), and the mean entropy of its pieces' attention over
    the source (over the entropy of uniform attention: 1 is attention spread evenly, 0 on one source token)."""
    log_probs = evidence.log_probs
    sentence = sum(log_probs) / len(log_probs)
    source = len(evidence.attention[0]) if evidence.attention else 1
    uniform = math.log(source) if source > 1 else 1.0
    rows = []
    for group in evidence.words:
        if not group:  # a word of no token of its own (see word_groups): a neutral row
            rows.append([sentence, sentence, 0.0, sentence, 1.0])
            continue
        pieces = [log_probs[i] for i in group]
        spread = sum(_entropy(evidence.attention[i]) for i in group) / len(group) / uniform
        rows.append([sum(pieces) / len(pieces), min(pieces), float(len(pieces)), sentence, spread])
    return rows


def sentence_features(evidence: Evidence, source_tokens: int) -> list[float]:
    """`len(SENTENCE_FEATURES)` numbers of one translation: its mean and least token log-probability, the share of
    its words that are doubtful (least piece below `DOUBTFUL`), the share of source tokens it never attends
    (attention summed over the translation below 0.5) and attends twice or more (above 1.5), and log(translation
    tokens / source tokens)."""
    log_probs = evidence.log_probs
    doubtful = [min(log_probs[i] for i in group) < DOUBTFUL for group in evidence.words if group]
    coverage = [sum(column) for column in zip(*evidence.attention, strict=True)] if evidence.attention else [1.0]
    return [
        sum(log_probs) / len(log_probs), min(log_probs), sum(doubtful) / max(len(doubtful), 1),
        sum(total < 0.5 for total in coverage) / len(coverage), sum(total > 1.5 for total in coverage) / len(coverage),
        math.log(len(log_probs) / max(source_tokens, 1)),
    ]  # fmt: skip


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
    return Evidence(list(log_probs)[: len(target)], list(attention)[: len(target)], words, texts)


def traced_evidence(tokenizer: Any, target: Sequence[int], trace: Any, mask: Any) -> Evidence:
    """The evidence of the translation `target` (ids, `</s>` included) from its tokens' traces (a tensor
    `(at least tokens, src_len + 1)`: each token's attention over the padded source, then its log-probability; a
    teacher-forced pass's or the search's, `search.step_trace`) and the source's padding `mask` `(src_len,)`."""
    trace = trace[: len(target)]
    return evidence_for(tokenizer, target, trace[:, -1].tolist(), trace[:, :-1][:, mask.bool()].tolist())


def evidence_of(
    engine: str, model: Any, tokenizer: Any, sources: Sequence[list[int]], targets: Sequence[list[int]],
    batch_size: int | None, attention: Sequence[list[list[float]] | None] | None = None,
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
