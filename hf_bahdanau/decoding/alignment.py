"""Words and word alignments: which word each token belongs to, attention between words, Pharaoh `i-j` pairs.

Words are whitespace-separated words of the source and the translation (subword pieces merged; a word-level
vocabulary's tokens are its words). An alignment links each translation word to the source word it attends to most
in a teacher-forced pass over the translation: the RNN's attention, the Transformer's last layer averaged over its
heads. A source-side alignment (what HTML's tags are put back by, `markup`) averages every layer and head and links
each source word to the translation word whose token attends to it most: on Multi30k's validation split it places
tags better than the last layer's one-way links and than both ways symmetrised (docs/benchmarks.md, Markup).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

WORD_START = ("\u2581", "\u0120")  # SentencePiece's and byte-level BPE's word-start marks


def marks_words(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the vocabulary marks word starts (subwords), or is one of words; remembered on the tokenizer."""
    marked = getattr(tokenizer, "_marks_words", None)
    if marked is None:
        marked = any(token.startswith(WORD_START) for token in tokenizer.get_vocab())
        tokenizer._marks_words = marked
    return marked


def word_ids(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int]) -> list[int | None]:
    """The word each token belongs to (from 0), None for special tokens (`</s>`, padding): a piece with a word-start
    mark begins a word, one without continues it (a word-level vocabulary: every token is a word)."""
    tokens = tokenizer.convert_ids_to_tokens(list(ids))
    special = set(tokenizer.all_special_tokens) - {tokenizer.unk_token}
    marked = marks_words(tokenizer)
    words: list[int | None] = []
    current = -1
    for token in tokens:
        if token in special:
            words.append(None)
            continue
        if current < 0 or not marked or token.startswith(WORD_START):  # a bare mark and the piece after it: one word
            current += 1
        words.append(current)
    return words


def merge_words(
    weights: torch.Tensor, query_words: Sequence[int | None], key_words: Sequence[int | None], pool: str = "mean"
) -> torch.Tensor:
    """Attention between words from attention between tokens: a key word gets the weights of its pieces summed, a
    query word the mean of its pieces' rows (`pool="max"`: their largest weight to each key word); special tokens are
    left out. weights: `(..., queries, keys)` -> `(..., query words, key words)`."""
    n_queries = 1 + max((word for word in query_words if word is not None), default=-1)
    n_keys = 1 + max((word for word in key_words if word is not None), default=-1)
    keys = torch.zeros(len(key_words), n_keys)  # (keys, key words): each column sums its pieces
    for position, word in enumerate(key_words):
        if word is not None:
            keys[position, word] = 1.0
    keyed = weights.float() @ keys  # (..., queries, key words)
    if pool == "max":
        pieces = [[p for p, w in enumerate(query_words) if w == word] for word in range(n_queries)]
        return torch.stack([keyed[..., rows, :].amax(-2) for rows in pieces], -2) if pieces else keyed[..., :0, :]
    queries = torch.zeros(n_queries, len(query_words))  # (query words, queries): each row averages its pieces
    for position, word in enumerate(query_words):
        if word is not None:
            queries[word, position] = 1.0
    return queries / queries.sum(1, keepdim=True).clamp(min=1) @ keyed


def pharaoh(word_attention: torch.Tensor) -> str:
    """Pharaoh `i-j` pairs (source word i, target word j) linking each target word to the source word it attends to
    most; word_attention: `(target words, source words)`."""
    if word_attention.numel() == 0:
        return ""
    best = word_attention.argmax(1).tolist()  # (target words,)
    return " ".join(f"{source}-{target}" for source, target in sorted((s, t) for t, s in enumerate(best)))


def source_pharaoh(word_attention: torch.Tensor) -> str:
    """Pharaoh pairs linking each source word to the target word that attends to it most; word_attention: `(target
    words, source words)`."""
    if word_attention.numel() == 0:
        return ""
    best = word_attention.argmax(0).tolist()  # (source words,)
    return " ".join(f"{source}-{target}" for source, target in enumerate(best))


@torch.no_grad()
def alignments(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    input_ids: torch.Tensor,  # (rows, src_len), a source row for each sequence
    attention_mask: torch.Tensor,  # (rows, src_len)
    sequences: torch.Tensor,  # (rows, 1 + generated), the decoder start first
    lengths: torch.Tensor,  # (rows,) generated tokens of each, `</s>` included
    by_source: bool = False,
) -> list[str]:
    """Pharaoh alignments of `sequences`, from a teacher-forced pass: the last layer's cross-attention, heads
    averaged, each target word to one source word; `by_source`: every layer's and head's averaged, each source word
    to the target word of the token that attends to it most (`source_pharaoh` of `merge_words`' maxima)."""
    outputs = model(
        input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=sequences[:, :-1], output_attentions=True
    )
    if by_source:  # (layers, rows, heads, generated, src_len) -> (rows, generated, src_len)
        cross = torch.stack(outputs.cross_attentions).float().mean((0, 2)).cpu()
    else:
        cross = outputs.cross_attentions[-1].float().mean(1).cpu()  # (rows, generated, src_len)
    links, pool = (source_pharaoh, "max") if by_source else (pharaoh, "mean")
    found = []
    for row in range(sequences.shape[0]):
        columns = attention_mask[row].bool().cpu()
        source = input_ids[row].cpu()[columns].tolist()
        target = sequences[row, 1 : 1 + int(lengths[row])].tolist()
        weights = cross[row, : len(target)][:, columns]  # (target tokens, source tokens)
        words = merge_words(weights, word_ids(tokenizer, target), word_ids(tokenizer, source), pool)
        found.append(links(words))
    return found


__all__ = [
    "WORD_START",
    "alignments",
    "marks_words",
    "merge_words",
    "pharaoh",
    "source_pharaoh",
    "word_ids",
]
