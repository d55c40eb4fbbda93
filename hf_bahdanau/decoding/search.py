"""The package's own search: greedy, sampling and beam search over a seq2seq model's public forward and cache.

As fairseq's `SequenceGenerator` and CTranslate2 do, a sentence leaves the batch as soon as its result is final: its
rows go out of the decoder's cache through the cache's public `batch_select_indices` (`EncoderDecoderCache`, the RNN's
`BahdanauDecoderState`), and out of the encoder outputs and the search's own tensors. Beams follow their parents
through the cache's `reorder_cache`. The arithmetic and the stopping rules are `generate()`'s (beam search: its
candidates, length penalty and `early_stopping` heuristic), so the sequences are `generate()`'s token for token
(`tests/test_search.py` checks both model types against it), each with the sum of its tokens' log-probabilities under
the model (before the length bound and the sampling warpers) for scores.

A sentence with required phrases (glossary terms) has its own stopping rule: its result is final once no running
hypothesis, normalized as `generate()`'s heuristic does, beats the last of the `num_return_sequences` finished ones
that hold every phrase. generate()'s rule waits for `num_beams` such hypotheses, which under the allocation's forced
continuations keeps a sentence, and its batch, running long after its result is settled.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from transformers import (
    PreTrainedModel,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)
from transformers.modeling_outputs import ModelOutput

from hf_bahdanau.errors import InputError
from hf_bahdanau.models.cache_names import returned_cache

from .constraints import Constraints
from .settings import SearchSettings

NEG = -1.0e9  # generate()'s "no such hypothesis" score


@dataclass
class SearchOutput:
    """The hypotheses of a search, `n = num_return_sequences` per source, best first (samples: as drawn).

    sequences: `(batch * n, 1 + longest)`, the decoder start first, filled after `</s>` as `generate()` fills them.
    lengths: `(batch * n,)` generated tokens of each, `</s>` included.
    log_probs: `(batch * n,)` the sum of its tokens' log-probabilities under the model (no bound, no warper).
    met: `(batch * n,)` whether it holds every required phrase (None: the search had none).
    """

    sequences: torch.Tensor
    lengths: torch.Tensor
    log_probs: torch.Tensor
    met: torch.Tensor | None = None


class DecoderRows:
    """The decoder side of a search: the encoder outputs of each decoder row, the cache, one forward per step."""

    def __init__(
        self,
        model: PreTrainedModel,
        input_ids: torch.Tensor,  # (batch, src_len)
        attention_mask: torch.Tensor | None,  # (batch, src_len)
        repeats: int,  # decoder rows per source (beams, samples)
    ) -> None:
        self.model = model
        if attention_mask is not None and bool(attention_mask.all()):
            attention_mask = None  # no padding: no mask to apply at every step
        encoded = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        self.encoded = self._select(encoded, lambda tensor: tensor.repeat_interleave(repeats, 0))
        self.mask = None if attention_mask is None else attention_mask.repeat_interleave(repeats, 0)
        self.cache = None
        parameters = inspect.signature(model.forward).parameters
        self.cache_name = "cache" if "cache" in parameters else "past_key_values"

    @staticmethod
    def _select(encoded: ModelOutput, pick: Any) -> ModelOutput:
        """`encoded` with `pick` applied to each of its tensors (batch first)."""
        values = {name: pick(value) if isinstance(value, torch.Tensor) else value for name, value in encoded.items()}
        return type(encoded)(**values)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """The next-token logits `(rows, vocab)` in float32 after each row's last token `tokens` `(rows, 1)`."""
        outputs = self.model(
            encoder_outputs=self.encoded,
            attention_mask=self.mask,
            decoder_input_ids=tokens,
            use_cache=True,
            return_dict=True,
            **{self.cache_name: self.cache},
        )
        self.cache = returned_cache(outputs)
        if self.cache is None:
            raise ValueError("the model returned no decoder cache: it cannot be searched step by step")
        return outputs.logits[:, -1, :].float()

    def reorder(self, rows: torch.Tensor) -> None:
        """Row i continues from row `rows[i]` (beams of the same source)."""
        self.cache.reorder_cache(rows)

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only the decoder rows `rows`, in that order."""
        self.cache.batch_select_indices(rows)
        self.encoded = self._select(self.encoded, lambda tensor: tensor[rows])
        self.mask = None if self.mask is None else self.mask[rows]


def force_end(scores: torch.Tensor, limits: torch.Tensor | None, generated: int, eos: int) -> torch.Tensor:
    """`scores` `(rows, vocab)` with `</s>` forced on the rows whose `limits` `(rows,)` (most new tokens, `</s>`
    included) leave room for `</s>` only, after `generated` tokens."""
    if limits is None:
        return scores
    ended = limits - 1 <= generated  # (rows,)
    if not bool(ended.any()):
        return scores
    scores = scores.clone()
    scores[ended] = -torch.inf
    scores[ended, eos] = 0.0
    return scores


@torch.no_grad()
def search(
    model: PreTrainedModel,
    input_ids: torch.Tensor,  # (batch, src_len)
    attention_mask: torch.Tensor | None,  # (batch, src_len)
    settings: SearchSettings,
    limits: torch.Tensor | None = None,  # (batch,): each source's most new tokens, `</s>` included
    constraints: Constraints | None = None,
) -> SearchOutput:
    """Translate a batch of sources: beam search with `num_beams` > 1, else greedy or sampling (`do_sample`);
    `constraints`: a prefix and phrases to avoid (any search), phrases to place (beam search)."""
    settings = settings.bounded(model)
    if limits is not None:
        limits = limits.to(input_ids.device)
    if settings.num_beams > 1:
        return _beam_search(model, input_ids, attention_mask, settings, limits, constraints)
    if settings.num_return_sequences > 1 and not settings.do_sample:
        raise InputError("greedy search gives one translation: n-best lists need beams (or sampling)")
    if constraints is not None and constraints.has_required:
        raise InputError("required phrases (glossary terms) need beam search: num_beams of 2 or more")
    return _greedy(model, input_ids, attention_mask, settings, limits, constraints)


def _warpers(settings: SearchSettings) -> list:
    """generate()'s sampling warpers, in its order: temperature, top-k, top-p (public logits processors)."""
    warpers = []
    if settings.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(settings.temperature))
    if settings.top_k:
        warpers.append(TopKLogitsWarper(settings.top_k))
    if settings.top_p < 1.0:
        warpers.append(TopPLogitsWarper(settings.top_p))
    return warpers


def _greedy(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    settings: SearchSettings,
    limits: torch.Tensor | None,
    constraints: Constraints | None = None,
) -> SearchOutput:
    """Greedy search (or `num_return_sequences` samples a source); a row leaves the batch at its `</s>`."""
    copies, eos, device = settings.num_return_sequences, settings.eos_token_id, input_ids.device
    rows = input_ids.shape[0] * copies
    fill = settings.pad_token_id if settings.pad_token_id is not None else eos
    tokens = torch.full((rows, 1 + settings.max_new_tokens), fill, dtype=torch.long, device=device)
    tokens[:, 0] = settings.decoder_start_token_id
    lengths = torch.zeros(rows, dtype=torch.long, device=device)
    log_probs = torch.zeros(rows, device=device)
    alive = torch.arange(rows, device=device)  # the row of each decoder row left
    row_limits = None if limits is None else limits.repeat_interleave(copies)
    warpers = _warpers(settings) if settings.do_sample else []
    decoder = DecoderRows(model, input_ids, attention_mask, copies)
    for generated in range(settings.max_new_tokens):
        logits = decoder.step(tokens[alive, generated : generated + 1])  # (alive, vocab)
        scores = logits
        if constraints is not None:
            scores = constraints.mask(logits, tokens[alive, : generated + 1], alive // copies, eos)
        scores = force_end(scores, row_limits, generated, eos)
        if settings.do_sample:
            for warper in warpers:
                scores = warper(tokens[alive, : generated + 1], scores)
            chosen = torch.multinomial(scores.softmax(-1), num_samples=1).squeeze(1)
        else:
            chosen = scores.argmax(-1)  # (alive,)
        tokens[alive, generated + 1] = chosen
        log_probs[alive] += logits.log_softmax(-1).gather(1, chosen[:, None]).squeeze(1)
        ended = (chosen == eos) | (generated + 1 == settings.max_new_tokens)
        lengths[alive[ended]] = generated + 1
        if bool(ended.all()):
            break
        if bool(ended.any()):
            kept = (~ended).nonzero().squeeze(1)
            decoder.keep(kept)
            alive = alive[kept]
            row_limits = None if row_limits is None else row_limits[kept]
    return SearchOutput(tokens[:, : 1 + int(lengths.max())], lengths, log_probs)


def _beam_search(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    settings: SearchSettings,
    limits: torch.Tensor | None,
    constraints: Constraints | None = None,
) -> SearchOutput:
    """generate()'s beam search (one `</s>` id), each sentence leaving the batch once its hypotheses are final;
    with required phrases, its candidates come from dynamic beam allocation (`constraints`), in their order."""
    beams, returned, eos = settings.num_beams, settings.num_return_sequences, settings.eos_token_id
    batch, device = input_ids.shape[0], input_ids.device
    max_length = 1 + settings.max_new_tokens  # the decoder start and the new tokens
    fill = settings.pad_token_id or eos  # generate()'s fill of beam search (`</s>` where the pad id is 0)
    penalty, early = settings.length_penalty, settings.early_stopping
    # The search's state, (sentences left, beams, ...): the running hypotheses and the finished ones.
    running = torch.full((batch, beams, max_length), fill, dtype=torch.long, device=device)
    running[:, :, 0] = settings.decoder_start_token_id
    running_scores = torch.zeros((batch, beams), device=device)
    running_scores[:, 1:] = NEG  # the first step expands the first beam only
    running_log_probs = torch.zeros((batch, beams), device=device)
    finished = running.clone()
    finished_scores = torch.full((batch, beams), NEG, device=device)
    finished_log_probs = torch.zeros((batch, beams), device=device)
    finished_lengths = torch.zeros((batch, beams), dtype=torch.long, device=device)
    is_finished = torch.zeros((batch, beams), dtype=torch.bool, device=device)
    improvable = torch.ones(batch, dtype=torch.bool, device=device)  # generate()'s early stopping heuristic
    top_beams = torch.arange(2 * beams, device=device) < beams  # candidates that may finish (the top `beams`)
    left = torch.arange(batch, device=device)  # the sentence of each slot
    row_limits = None if limits is None else limits.repeat_interleave(beams)
    results = torch.full((batch, returned, max_length), fill, dtype=torch.long, device=device)
    result_lengths = torch.zeros((batch, returned), dtype=torch.long, device=device)
    result_log_probs = torch.zeros((batch, returned), device=device)
    placing = constraints is not None and constraints.has_required
    phrases = constraints.required.shape[1] if placing else 0
    lengths = constraints.required_lengths(torch.arange(batch, device=device)) if placing else None  # (batch, phrases)
    has_phrases = (lengths > 0).any(-1) if placing else None  # (batch,)
    running_met = torch.zeros((batch, beams, phrases), dtype=torch.bool, device=device)
    finished_met = torch.ones((batch, beams), dtype=torch.bool, device=device)  # whether it holds every phrase
    result_met = torch.ones((batch, returned), dtype=torch.bool, device=device)
    in_order = -torch.arange(2 * beams, dtype=torch.float32, device=device)  # the allocation's order, as a score
    decoder = DecoderRows(model, input_ids, attention_mask, beams)
    for cur_len in range(1, max_length):
        size = left.shape[0]
        logits = decoder.step(running[:, :, cur_len - 1].reshape(size * beams, 1))  # (rows, vocab)
        token_log_probs = torch.log_softmax(logits, dim=-1)  # (rows, vocab)
        vocab = token_log_probs.shape[-1]
        scores = token_log_probs
        if constraints is not None:
            unmet = ((~running_met) & (lengths[left, None] > 0)).any(-1).flatten() if placing else None  # (rows,)
            history = running[:, :, :cur_len].reshape(size * beams, cur_len)
            scores = constraints.mask(scores, history, left.repeat_interleave(beams), eos, unmet)
        scores = force_end(scores, row_limits, cur_len - 1, eos)
        scores = scores.view(size, beams, vocab) + running_scores[:, :, None]  # (size, beams, vocab)
        if placing:
            top_scores, top_indices, top_met = constraints.candidates(scores, running, running_met, left, cur_len,
                                                                      2 * beams)  # fmt: skip
            ranks = in_order.expand(size, -1)  # (size, 2 * beams): taken in the allocation's order
            holds_all = (top_met | (lengths[left, None] == 0)).all(-1)  # (size, 2 * beams)
        else:
            top_scores, top_indices = torch.topk(scores.view(size, -1), 2 * beams)  # (size, 2 * beams)
            ranks = top_scores
        parents, top_tokens = top_indices // vocab, top_indices % vocab
        candidates = running.gather(1, parents[:, :, None].expand(-1, -1, max_length)).clone()
        candidates[:, :, cur_len] = top_tokens
        candidate_log_probs = running_log_probs.gather(1, parents) + token_log_probs.view(size, -1).gather(
            1, top_indices
        )  # (size, 2 * beams)
        hits = top_tokens == eos  # (size, 2 * beams)
        if cur_len + 1 >= max_length:
            hits[:] = True
        # The running beams: the best candidates that did not end.
        alive_scores = top_scores + hits.to(torch.float32) * NEG
        chosen = torch.topk(ranks + hits.to(torch.float32) * NEG, beams)[1]  # (size, beams)
        running = candidates.gather(1, chosen[:, :, None].expand(-1, -1, max_length))
        running_scores = alive_scores.gather(1, chosen)
        running_log_probs = candidate_log_probs.gather(1, chosen)
        if placing:
            running_met = top_met.gather(1, chosen[:, :, None].expand(-1, -1, phrases))
        # The finished hypotheses: the best of those kept and of the top candidates that ended.
        ended = hits & top_beams[None, :]
        ended_scores = top_scores / (cur_len**penalty)
        ended_scores += (is_finished.all(-1, keepdim=True) & (early is True)).to(torch.float32) * NEG
        ended_scores += (~improvable[:, None]).to(torch.float32) * NEG
        ended_scores += (~ended) * NEG
        if placing:  # a hypothesis cut off by its bound without every phrase ranks below all that hold them
            ended_scores += (~holds_all) * (NEG / 2)
            finished_met = torch.cat((finished_met, holds_all), 1)
        merged_scores = torch.cat((finished_scores, ended_scores), dim=1)
        best = torch.topk(merged_scores, beams)[1]  # (size, beams)
        if placing:
            finished_met = finished_met.gather(1, best)
        finished = torch.cat((finished, candidates), 1).gather(1, best[:, :, None].expand(-1, -1, max_length))
        finished_scores = merged_scores.gather(1, best)
        finished_log_probs = torch.cat((finished_log_probs, candidate_log_probs), 1).gather(1, best)
        ended_lengths = torch.full_like(top_tokens, cur_len)
        finished_lengths = torch.cat((finished_lengths, ended_lengths), 1).gather(1, best)
        is_finished = torch.cat((is_finished, ended), 1).gather(1, best)
        rows = (torch.arange(size, device=device)[:, None] * beams + parents.gather(1, chosen)).flatten()
        decoder.reorder(rows)
        # generate()'s heuristic: can a running beam still beat the worst finished one?
        best_length = (max_length - 1) if early == "never" and penalty > 0.0 else cur_len
        best_running = running_scores.max(1, keepdim=True)[0] / (best_length**penalty)
        worst = torch.where(is_finished, finished_scores.min(1, keepdim=True)[0], NEG)
        improvable = improvable & (best_running > worst).any(-1)
        settled = ~improvable | bool(hits.all())  # (size,): results final from now on
        if early is True:
            settled |= is_finished.all(1)
        if placing:  # a sentence with phrases is final once no running hypothesis can beat those it returns
            last_returned = finished_scores[:, returned - 1]  # (size,): below NEG / 4 where it lacks a phrase
            settled |= has_phrases[left] & (last_returned > NEG / 4) & (best_running[:, 0] <= last_returned)
        if not bool(settled.any()):
            continue
        where = left[settled]
        results[where] = finished[settled, :returned]
        result_lengths[where] = finished_lengths[settled, :returned]
        result_log_probs[where] = finished_log_probs[settled, :returned]
        result_met[where] = finished_met[settled, :returned]
        if bool(settled.all()):
            break
        kept = (~settled).nonzero().squeeze(1)  # (sentences kept,)
        kept_rows = (kept[:, None] * beams + torch.arange(beams, device=device)).flatten()  # (rows kept,)
        left, improvable, is_finished = left[kept], improvable[kept], is_finished[kept]
        running, running_scores, running_log_probs = running[kept], running_scores[kept], running_log_probs[kept]
        finished, finished_scores = finished[kept], finished_scores[kept]
        finished_log_probs, finished_lengths = finished_log_probs[kept], finished_lengths[kept]
        running_met, finished_met = running_met[kept], finished_met[kept]
        decoder.keep(kept_rows)
        row_limits = None if row_limits is None else row_limits[kept_rows]
    longest = 1 + int(result_lengths.max())
    return SearchOutput(
        results[:, :, :longest].reshape(batch * returned, -1),
        result_lengths.flatten(),
        result_log_probs.flatten(),
        result_met.flatten() if placing else None,
    )


__all__ = ["DecoderRows", "SearchOutput", "force_end", "search"]
