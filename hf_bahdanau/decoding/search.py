"""The package's own search: greedy, sampling and beam search over a seq2seq model's public forward and cache.

As fairseq's `SequenceGenerator` and CTranslate2 do, a sentence leaves the batch as soon as its result is final: its
rows go out of the decoder's cache through the cache's public `batch_select_indices` (`EncoderDecoderCache`, the RNN's
`BahdanauDecoderState`), and out of the encoder outputs and the search's own tensors. Beams follow their parents
through the cache's `reorder_cache`. The arithmetic and the stopping rules are `generate()`'s (beam search: its
candidates, length penalty and `early_stopping` heuristic), so the sequences are `generate()`'s token for token
(`tests/test_search.py` checks both model types against it), each with the sum of its tokens' log-probabilities under
the model (before the length bound and the sampling warpers) for scores.

Beam search is split as fairseq splits it: this module runs the model step by step (`DecoderRows`); the hypotheses
of the sentences left are a `BeamState` (`beams`); a strategy (`strategies`) picks each step's candidates:
generate()'s best ones, or dynamic beam allocation where the translations must hold required phrases. An engine
that runs the model elsewhere gives its own rows with `DecoderRows`'s methods (`decoder_rows`: ONNX Runtime's), and
the same search runs on its logits.
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

from .beams import BeamResults, BeamState
from .constraints import Constraints
from .settings import SearchSettings
from .strategies import PhraseAllocation, strategy_for


@dataclass
class SearchOutput:
    """The hypotheses of a search, `n = num_return_sequences` per source, best first (samples: as drawn).

    sequences: `(batch * n, 1 + longest)`, the decoder start first, filled after `</s>` as `generate()` fills them.
    lengths: `(batch * n,)` generated tokens of each, `</s>` included.
    log_probs: `(batch * n,)` the sum of its tokens' log-probabilities under the model (no bound, no warper).
    met: `(batch * n,)` whether it holds every required phrase (None: the search had none).
    traces: `(batch * n, longest, src_len + 1)` per generated token its cross-attention over the (padded) source (the
        last layer's first head) and, last, its log-probability under the model (None: not asked for, `trace`).
    """

    sequences: torch.Tensor
    lengths: torch.Tensor
    log_probs: torch.Tensor
    met: torch.Tensor | None = None
    traces: torch.Tensor | None = None


class DecoderRows:
    """The decoder side of a search: the encoder outputs of each decoder row, the cache, one forward per step."""

    def __init__(
        self,
        model: PreTrainedModel,
        input_ids: torch.Tensor,  # (batch, src_len)
        attention_mask: torch.Tensor | None,  # (batch, src_len)
        repeats: int,  # decoder rows per source (beams, samples)
        trace: bool = False,  # keep each step's cross-attention (`attention`)
    ) -> None:
        self.model = model
        self.trace = trace
        self.attention: torch.Tensor | None = None  # (rows, src_len) the last step's, with `trace`
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
            output_attentions=self.trace,
            **{self.cache_name: self.cache},
        )
        if self.trace:  # the last layer's first head
            self.attention = outputs.cross_attentions[-1][:, 0, -1].float()
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


def decoder_rows(
    model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, repeats: int,
    trace: bool = False,
) -> DecoderRows:  # fmt: skip
    """The decoder side of a search over `model`: `DecoderRows`, or an engine's own with its methods (a model object
    of an engine that has `decoder_rows`, e.g. ONNX Runtime's, which keeps no attention)."""
    own = getattr(model, "decoder_rows", None)
    if own is None:
        return DecoderRows(model, input_ids, attention_mask, repeats, trace)
    if trace:
        raise InputError("this engine's search keeps no attention")
    return own(input_ids, attention_mask, repeats)


def step_trace(decoder: DecoderRows, token_log_probs: torch.Tensor) -> torch.Tensor:
    """`(rows, src_len + 1)`: the last step's attention of each decoder row and its chosen token's log-probability
    `token_log_probs` `(rows,)`."""
    return torch.cat((decoder.attention, token_log_probs[:, None]), dim=1)


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
    trace: bool = False,
) -> SearchOutput:
    """Translate a batch of sources: beam search with `num_beams` > 1, else greedy or sampling (`do_sample`);
    `constraints`: a prefix and phrases to avoid (any search), phrases to place (beam search); `trace`: keep each
    hypothesis's token log-probabilities and attention (`SearchOutput.traces`)."""
    settings = settings.bounded(model)
    if limits is not None:
        limits = limits.to(input_ids.device)
    if settings.num_beams > 1:
        return _beam_search(model, input_ids, attention_mask, settings, limits, constraints, trace)
    if settings.num_return_sequences > 1 and not settings.do_sample:
        raise InputError("greedy search gives one translation: n-best lists need beams (or sampling)")
    if constraints is not None and constraints.has_required:
        raise InputError("required phrases (glossary terms) need beam search: num_beams of 2 or more")
    return _greedy(model, input_ids, attention_mask, settings, limits, constraints, trace)


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
    trace: bool = False,
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
    decoder = decoder_rows(model, input_ids, attention_mask, copies, trace)
    traces = torch.zeros((rows, settings.max_new_tokens, input_ids.shape[1] + 1), device=device) if trace else None
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
        token_log_probs = logits.log_softmax(-1).gather(1, chosen[:, None]).squeeze(1)  # (alive,)
        log_probs[alive] += token_log_probs
        if traces is not None:
            traces[alive, generated] = step_trace(decoder, token_log_probs)
        ended = (chosen == eos) | (generated + 1 == settings.max_new_tokens)
        lengths[alive[ended]] = generated + 1
        if bool(ended.all()):
            break
        if bool(ended.any()):
            kept = (~ended).nonzero().squeeze(1)
            decoder.keep(kept)
            alive = alive[kept]
            row_limits = None if row_limits is None else row_limits[kept]
    longest = int(lengths.max())
    return SearchOutput(tokens[:, : 1 + longest], lengths, log_probs, None,
                        None if traces is None else traces[:, :longest])  # fmt: skip


def _beam_search(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    settings: SearchSettings,
    limits: torch.Tensor | None,
    constraints: Constraints | None = None,
    trace: bool = False,
) -> SearchOutput:
    """generate()'s beam search (one `</s>` id), each sentence leaving the batch once its hypotheses are final;
    the candidates come from a strategy (`strategies`): generate()'s, or dynamic beam allocation for required
    phrases."""
    batch, device = input_ids.shape[0], input_ids.device
    traced = input_ids.shape[1] + 1 if trace else None  # the width of a step's trace
    state = BeamState.start(settings, batch, limits, device, traced)
    strategy = strategy_for(settings, constraints, batch, device)
    results = BeamResults(settings, batch, device, traced)
    decoder = decoder_rows(model, input_ids, attention_mask, settings.num_beams, trace)
    for cur_len in range(1, 1 + settings.max_new_tokens):
        logits = decoder.step(state.running[:, :, cur_len - 1].reshape(-1, 1))  # (size * beams, vocab)
        log_probs = torch.log_softmax(logits, dim=-1)  # (size * beams, vocab)
        scores = strategy.mask(log_probs, state, cur_len)
        scores = force_end(scores, state.row_limits(), cur_len - 1, settings.eos_token_id)
        scores = scores.view(state.size, settings.num_beams, -1) + state.running_scores[:, :, None]
        candidates = strategy.candidates(scores, state, cur_len)  # (size, 2 * beams)
        chosen, rows, hits = state.advance(candidates, log_probs, cur_len, settings, decoder.attention)
        strategy.follow(candidates, chosen)
        decoder.reorder(rows)
        best_running = state.best_running(cur_len, settings)  # (size,)
        settled = strategy.settles(state, best_running, state.settled(best_running, hits, settings))  # (size,)
        if not bool(settled.any()):
            continue
        results.store(state, settled)
        if bool(settled.all()):
            break
        kept = (~settled).nonzero().squeeze(1)  # (sentences kept,)
        decoder.keep(state.keep(kept))
        strategy.keep(kept)
    longest = 1 + int(results.lengths.max())
    return SearchOutput(
        results.sequences[:, :, :longest].reshape(-1, longest),
        results.lengths.flatten(),
        results.log_probs.flatten(),
        results.holds.flatten() if isinstance(strategy, PhraseAllocation) else None,
        None if results.traces is None else results.traces[:, :, : longest - 1].flatten(0, 1),
    )


__all__ = ["DecoderRows", "SearchOutput", "force_end", "search"]
