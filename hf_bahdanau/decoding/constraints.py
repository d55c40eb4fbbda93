"""Lexical constraints on the package's search: required phrases (glossary terms), a forced target prefix and phrases
to avoid, as token ids, with the masks and the beam allocation that enforce them.

- **Prefix**: while a translation is shorter than its prefix, the prefix's next token is the only one allowed (even
  where another constraint would forbid it).
- **Avoid**: a token that would complete an avoided phrase is not allowed (the phrase as the tokenizer writes it).
- **Required phrases** (beam search only): dynamic beam allocation (Post & Vilar 2018), in the vectorized form of
  Hu et al. 2019 (fairseq's `LexicallyConstrainedBeamSearch`). Each step's candidates are the best `2 * beams`
  continuations, each beam's best token and, for each beam, the next token of each phrase it has not yet produced.
  A candidate's *bank* is the number of phrase tokens it has produced (whole phrases plus the longest started one).
  Candidates are ranked best first within their bank, then taken round-robin across banks, highest bank first, so
  the beam's size stays fixed while hypotheses that placed more of the phrases keep their share of it. A hypothesis
  may end (`</s>`) only once every phrase is in it, except at its length bound: there it ends anyway, ranks below
  every hypothesis that placed them all, and the search reports the sentence as unmet. Where Hu et al. track
  progress in a trie, a hypothesis's progress here is read off its own tokens (the longest start of each phrase that
  ends it), so a token can advance several phrases at once and a phrase can restart anywhere. Right after a
  phrase is complete, a token that continues its last word is not allowed (`dog` does not become `dogs`). The search
  stops a sentence once no running hypothesis can beat the ones it returns (`strategies.PhraseAllocation`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

NO_TOKEN = -1  # fill past a phrase's end
DEAD = -1.0e8  # beam scores below this are no hypothesis (the search marks them -1e9 or -inf)
WORD_STARTS = ("▁", "Ġ")  # the word-start marks of SentencePiece / Metaspace and byte-level BPE


def _padded(phrases: Sequence[Sequence[Sequence[int]]], device: torch.device) -> torch.Tensor:
    """`(sources, most phrases, longest phrase)` token ids of each source's phrases, `NO_TOKEN` past each end."""
    count = max((len(group) for group in phrases), default=0)
    longest = max((len(phrase) for group in phrases for phrase in group), default=0)
    ids = torch.full((len(phrases), count, longest), NO_TOKEN, dtype=torch.long)
    for i, group in enumerate(phrases):
        for j, phrase in enumerate(group):
            ids[i, j, : len(phrase)] = torch.tensor(list(phrase), dtype=torch.long)
    return ids.to(device)


def word_continuations(tokenizer: PreTrainedTokenizerBase, vocab_size: int) -> torch.Tensor | None:
    """`(vocab_size,)`: which tokens continue the word before them: a subword without a word-start mark that begins
    with a letter or digit, and a special token other than `</s>` (it writes nothing, so the next subword would join
    the word); None for a tokenizer whose tokens carry no word-start marks (whole words)."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(min(len(tokenizer), vocab_size))))
    if not any(isinstance(token, str) and token.startswith(WORD_STARTS) for token in tokens):
        return None
    silent = set(tokenizer.all_special_ids) - {tokenizer.eos_token_id}
    continues = torch.zeros(vocab_size, dtype=torch.bool)
    for i, token in enumerate(tokens):
        joins = isinstance(token, str) and token[:1].isalnum() and not token.startswith(WORD_STARTS)
        continues[i] = i in silent or (joins and i not in set(tokenizer.all_special_ids))
    return continues


@dataclass
class Constraints:
    """The constraints of one batch of sources, as token ids (any of them may be empty for any source).

    required: `(batch, phrases, longest)` phrases each translation must contain, `NO_TOKEN` past each end.
    avoid: `(batch, phrases, longest)` phrases no translation may contain.
    prefix: `(batch, longest)` the tokens each translation starts with, `NO_TOKEN` past each end.
    continues_word: `(vocab,)` the tokens not allowed right after a required phrase (None: any token is).
    """

    required: torch.Tensor
    avoid: torch.Tensor
    prefix: torch.Tensor
    continues_word: torch.Tensor | None = None

    @classmethod
    def build(
        cls,
        required: Sequence[Sequence[Sequence[int]]],
        avoid: Sequence[Sequence[Sequence[int]]],
        prefix: Sequence[Sequence[int]],
        continues_word: torch.Tensor | None = None,
        device: torch.device | str = "cpu",
    ) -> Constraints:
        """The constraints of a batch from each source's phrases and prefix (lists of token ids)."""
        device = torch.device(device)
        prefix_ids = _padded([[row] for row in prefix], device)[:, 0] if prefix else torch.empty(0, 0)
        return cls(
            required=_padded(required, device),
            avoid=_padded(avoid, device),
            prefix=prefix_ids.to(device=device, dtype=torch.long),
            continues_word=None if continues_word is None else continues_word.to(device),
        )

    @property
    def has_required(self) -> bool:
        return self.required.numel() > 0 and bool((self.required[:, :, 0] != NO_TOKEN).any())

    def required_lengths(self, sources: torch.Tensor) -> torch.Tensor:
        """`(rows, phrases)` the token count of each row's required phrases (0: no such phrase)."""
        return (self.required[sources] != NO_TOKEN).sum(-1)

    def progress(self, history: torch.Tensor, sources: torch.Tensor) -> torch.Tensor:
        """`(rows, phrases)`: for each row's history `(rows, length)` (the decoder start first) and each required
        phrase of its source, the longest start of the phrase that ends the history."""
        phrases = self.required[sources]  # (rows, phrases, longest)
        lengths = (phrases != NO_TOKEN).sum(-1)  # (rows, phrases)
        found = torch.zeros_like(lengths)
        for size in range(1, min(phrases.shape[-1], history.shape[1] - 1) + 1):
            tail = history[:, -size:]  # (rows, size)
            matches = (phrases[:, :, :size] == tail[:, None, :]).all(-1) & (size <= lengths)  # (rows, phrases)
            found = torch.where(matches, torch.full_like(found, size), found)
        return found

    def mask(
        self,
        scores: torch.Tensor,  # (rows, vocab)
        history: torch.Tensor,  # (rows, length): the decoder start and each row's tokens so far
        sources: torch.Tensor,  # (rows,): the source of each row
        eos: int,
        unmet: torch.Tensor | None = None,  # (rows,): rows with a required phrase not yet produced
    ) -> torch.Tensor:
        """`scores` with -inf on the tokens the constraints forbid each row next."""
        given, scores = scores, scores.clone()
        step = history.shape[1] - 1  # tokens generated so far
        if self.avoid.numel():
            phrases = self.avoid[sources]  # (rows, phrases, longest)
            lengths = (phrases != NO_TOKEN).sum(-1)  # (rows, phrases)
            for size in range(1, phrases.shape[-1] + 1):
                if size - 1 > step:
                    break
                tail = history[:, history.shape[1] - (size - 1) :] if size > 1 else history[:, :0]
                started = (phrases[:, :, : size - 1] == tail[:, None, :]).all(-1) & (lengths == size)
                rows, which = started.nonzero(as_tuple=True)
                scores[rows, phrases[rows, which, size - 1]] = -torch.inf
        if self.has_required:
            if unmet is not None:
                scores[unmet, eos] = -torch.inf
            if self.continues_word is not None:
                lengths = self.required_lengths(sources)  # (rows, phrases)
                complete = ((self.progress(history, sources) == lengths) & (lengths > 0)).any(-1)  # (rows,)
                scores[complete] = scores[complete].masked_fill(self.continues_word, -torch.inf)
        if self.prefix.numel() and step < self.prefix.shape[1]:  # the prefix wins over every other constraint
            forced = self.prefix[sources, step]  # (rows,)
            rows = (forced != NO_TOKEN).nonzero().squeeze(1)
            scores[rows] = -torch.inf
            scores[rows, forced[rows]] = given[rows, forced[rows]]
        return scores

    def candidates(
        self,
        scores: torch.Tensor,  # (size, beams, vocab): each continuation's beam score, masked
        running: torch.Tensor,  # (size, beams, max_length): the running hypotheses
        met: torch.Tensor,  # (size, beams, phrases): the phrases each running hypothesis has produced
        sources: torch.Tensor,  # (size,)
        cur_len: int,  # the position of the next token
        count: int,  # how many candidates to return
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Dynamic beam allocation: `count` candidates a sentence, in the order the search takes them, as
        (`scores` `(size, count)`, flat indices `beam * vocab + token` `(size, count)`, phrases produced
        `(size, count, phrases)`). A slot with no candidate has score -inf."""
        size, beams, vocab = scores.shape
        flat = scores.reshape(size, -1)  # (size, beams * vocab)
        progress = self.progress(
            running[:, :, :cur_len].reshape(size * beams, cur_len), sources.repeat_interleave(beams)
        )
        phrases = self.required[sources]  # (size, phrases, longest)
        lengths = (phrases != NO_TOKEN).sum(-1)  # (size, phrases)
        pool, empty = self._pool(scores, phrases, lengths, progress.view(size, beams, -1), met, count)  # (size, pool)
        pool_scores = flat.gather(1, pool).masked_fill(empty, -torch.inf)  # (size, pool)
        empty |= pool_scores < DEAD  # forbidden tokens, and the first step's copies of the first beam
        parents, pool_tokens = pool // vocab, pool % vocab
        candidates = running.gather(1, parents[:, :, None].expand(-1, -1, running.shape[-1]))[:, :, : cur_len + 1]
        candidates[:, :, cur_len] = pool_tokens
        pool_sources = sources.repeat_interleave(pool.shape[1])
        ended = self.progress(candidates.reshape(-1, cur_len + 1), pool_sources).view(size, pool.shape[1], -1)
        pool_met = met.gather(1, parents[:, :, None].expand(-1, -1, met.shape[-1])) | (
            (ended == lengths[:, None]) & (lengths[:, None] > 0)
        )  # (size, pool, phrases)
        partial = ended.masked_fill(pool_met, 0).amax(-1)  # (size, pool): the longest phrase under way
        bank = (pool_met * lengths[:, None]).sum(-1) + partial  # (size, pool): phrase tokens produced
        order = _round_robin(bank, pool_scores, empty)[:, :count]  # (size, count)
        return (
            pool_scores.gather(1, order),
            pool.gather(1, order),
            pool_met.gather(1, order[:, :, None].expand(-1, -1, pool_met.shape[-1])),
        )

    def _pool(
        self,
        scores: torch.Tensor,  # (size, beams, vocab)
        phrases: torch.Tensor,  # (size, phrases, longest): each sentence's required phrases
        lengths: torch.Tensor,  # (size, phrases): their token counts
        progress: torch.Tensor,  # (size, beams, phrases): the longest start of each phrase ending each beam
        met: torch.Tensor,  # (size, beams, phrases)
        count: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The continuations the allocation chooses from, as flat indices `beam * vocab + token` `(size, pool)`:
        the best `count`, each beam's best, and for each beam each unmet phrase's next and first token; and
        `(size, pool)` which slots are empty (a repeat, or no phrase)."""
        size, beams, vocab = scores.shape
        device = scores.device
        # Each unmet phrase's next token (continuing it) and first token (starting it again), for each beam.
        following = (
            phrases[:, None]
            .expand(-1, beams, -1, -1)
            .gather(3, progress.clamp(max=phrases.shape[-1] - 1)[..., None])[..., 0]
        )  # (size, beams, phrases)
        first = phrases[:, None, :, 0].expand(-1, beams, -1)  # (size, beams, phrases)
        wanted = (~met & (lengths[:, None] > 0)).repeat(1, 1, 2)  # (size, beams, 2 * phrases)
        tokens = torch.cat((following, first), dim=-1).clamp(min=0)  # (size, beams, 2 * phrases)
        beam_ids = torch.arange(beams, device=device)[None, :, None]
        constrained = (beam_ids * vocab + tokens).masked_fill(~wanted, -1).reshape(size, -1)
        best = (torch.arange(beams, device=device) * vocab)[None] + scores.argmax(-1)  # (size, beams)
        flat = scores.reshape(size, -1)
        top = torch.topk(flat, min(count, flat.shape[1]))[1]  # (size, count)
        pool = torch.cat((top, best, constrained), dim=1)  # (size, pool)
        # One of each: duplicates (and the unwanted -1s) become empty slots.
        pool, _ = pool.sort(dim=1)
        repeated = torch.zeros_like(pool, dtype=torch.bool)
        repeated[:, 1:] = pool[:, 1:] == pool[:, :-1]
        return pool.clamp(min=0), repeated | (pool < 0)


def _round_robin(bank: torch.Tensor, scores: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
    """`(size, pool)` the order in which to take candidates: best first within each bank, then one from each bank in
    turn, highest bank first; empty slots last."""
    by_score = torch.sort(scores, dim=1, descending=True, stable=True)[1]
    by_bank = torch.sort(bank.gather(1, by_score), dim=1, descending=True, stable=True)[1]
    ranked = by_score.gather(1, by_bank)  # (size, pool): by bank, then score
    banks = bank.gather(1, ranked)
    position = torch.arange(ranked.shape[1], device=bank.device).expand_as(ranked)
    starts = torch.ones_like(banks, dtype=torch.bool)
    starts[:, 1:] = banks[:, 1:] != banks[:, :-1]
    first = torch.cummax(torch.where(starts, position, torch.zeros_like(position)), dim=1)[0]
    turn = position - first  # (size, pool): rank within its bank
    top_bank = int(bank.max()) + 1 if bank.numel() else 1
    key = (turn * (top_bank + 1) + (top_bank - banks)).float()
    key = key.masked_fill(empty.gather(1, ranked), torch.inf)
    return ranked.gather(1, torch.sort(key, dim=1, stable=True)[1])


__all__ = ["NO_TOKEN", "Constraints", "word_continuations"]
