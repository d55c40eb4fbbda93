"""Beam search that lets each sentence leave the batch once its result is final, for translating many sentences.

`generate()`'s beam search runs every sentence of a batch until the last one ends: a sentence whose best
hypotheses are settled keeps its rows in the decoder, step after step, and their results are thrown away. Here the
loop is `generate()`'s own (`GenerationMixin._beam_search`, step for step, with its helpers: the same arithmetic and
the same stopping rule), but after each step the sentences whose finished hypotheses can no longer change (the early
stopping heuristic said so, or with `early_stopping=True` all their beams are done) are taken out of the batch: out
of the decoder's cache (`batch_select_indices`, the `transformers` cache API), the encoder outputs and the search's
own tensors. The sequences returned are `generate()`'s (`tests/test_beam_search.py` checks them token for token).

Only a plain beam search is done here (`usable` says when): no sampling, no logits processor but the per-row length
limit (`SourceLengthLimit`), no scores.
"""

from __future__ import annotations

import copy
import math

import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList, PreTrainedModel

from .modeling_translation import returned_cache


class SourceLengthLimit(LogitsProcessor):
    """Forces `</s>` once a row has generated its own limit's tokens but one (beam rows follow their source)."""

    def __init__(self, limits: torch.Tensor, eos_token_id: int, prompt_length: int = 1) -> None:
        self.limits = limits  # (rows,): each row's most new tokens, `</s>` included
        self.eos_token_id = eos_token_id
        self.prompt_length = prompt_length  # the decoder start

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        # input_ids: (rows, cur_len); scores: (rows, vocab)
        generated = input_ids.shape[1] - self.prompt_length
        ended = self.limits.to(scores.device) - 1 <= generated  # (rows,)
        if ended.any():
            scores = scores.clone()
            scores[ended] = -math.inf
            scores[ended, self.eos_token_id] = 0.0
        return scores


def first_id(ids: int | list[int]) -> int:
    """The `</s>` id of a config's `eos_token_id` (an id, or a list whose first is used)."""
    return ids[0] if isinstance(ids, list) else ids


def filled(config: GenerationConfig) -> GenerationConfig:
    """A copy of `config` with the defaults `generate()` fills in."""
    config = copy.deepcopy(config)
    config.update(**config._get_default_generation_params(), defaults_only=True)
    return config


def usable(model: PreTrainedModel, config: GenerationConfig, input_ids: torch.Tensor) -> bool:
    """Whether `beam_search` gives what `model.generate(generation_config=config)` would, for a `config` built from
    the model's own (as `translating.translate_ids` builds it): a plain beam search of an encoder-decoder model, one
    `</s>` id, `max_new_tokens` set, no logits processor, constraint or stopping rule of `generate()`'s own."""
    if not model.config.is_encoder_decoder or config.num_beams <= 1 or config.do_sample:
        return False
    if (config.num_beam_groups or 1) > 1 or config.output_scores or config.output_logits:
        return False
    eos = config.eos_token_id
    if isinstance(eos, list) and len(eos) != 1 or config.max_new_tokens is None:
        return False
    if config.constraints or config.force_words_ids or config.low_memory or config.max_time or config.stop_strings:
        return False
    config = filled(config)
    model._prepare_special_tokens(config, True, input_ids.device)  # some processors need the `</s>` tensor
    processors = model._get_logits_processor(
        generation_config=config,
        input_ids_seq_length=1,
        encoder_input_ids=input_ids,
        logits_processor=LogitsProcessorList(),
        device=input_ids.device,
        model_kwargs={},
    )
    return len(processors) == 0


@torch.no_grad()
def beam_search(
    model: PreTrainedModel,
    input_ids: torch.Tensor,  # (batch, src_len)
    attention_mask: torch.Tensor | None,  # (batch, src_len)
    config: GenerationConfig,  # num_beams, num_return_sequences, max_new_tokens, length_penalty, early_stopping
    limits: torch.Tensor | None = None,  # (batch,): each sentence's most new tokens (`SourceLengthLimit`), or none
) -> torch.Tensor:
    """`model.generate(...).sequences` of a plain beam search: `(batch * num_return_sequences, 1 + generated)`, each
    sentence's hypotheses best first, filled as `generate()` fills them; see the module's docstring."""
    config = filled(config)
    beams, returned = config.num_beams, config.num_return_sequences or 1
    eos = first_id(config.eos_token_id)
    fill = config.pad_token_id or eos  # as `generate()` fills its sequences (with `</s>` where the pad id is 0)
    batch, device = input_ids.shape[0], input_ids.device
    start = torch.full((batch, 1), config.decoder_start_token_id, dtype=torch.long, device=device)
    encoder_kwargs = model._prepare_text_encoder_decoder_kwargs_for_generation(
        input_ids, {"attention_mask": attention_mask}, "input_ids", config
    )
    _, kwargs = model._expand_inputs_for_generation(beams, True, start, **encoder_kwargs)
    config = model._prepare_generated_length(config, True, True, "input_ids", 1, input_ids)  # as `generate()`
    table = getattr(model.config, "max_position_embeddings", None)  # the decoder reads all but the last token
    max_length = config.max_length if table is None else min(config.max_length, table + 1)
    limit = None
    if limits is not None:
        limit = SourceLengthLimit(limits.to(device).repeat_interleave(beams), eos)

    # The search's state, as in `GenerationMixin._beam_search`: (sentences, beams, ...) of the sentences left.
    running = torch.full((batch, beams, max_length), fill, dtype=torch.long, device=device)
    running[:, :, :1] = config.decoder_start_token_id
    finished = running.clone()
    running_scores = torch.zeros((batch, beams), device=device)
    running_scores[:, 1:] = -1e9
    finished_scores = torch.full((batch, beams), -1e9, device=device)
    is_finished = torch.zeros((batch, beams), dtype=torch.bool, device=device)
    open_sentences = torch.ones((batch, 1), dtype=torch.bool, device=device)  # early stopping heuristic unsatisfied
    running_indices = torch.full((batch, beams, max_length - 1), -1, dtype=torch.int32, device=device)
    finished_indices = running_indices.clone()
    keep_top = torch.arange(2 * beams, device=device) < beams  # generate's top_num_beam_mask (one eos token)
    left = torch.arange(batch, device=device)  # the original index of each sentence left
    results = torch.full((batch, returned, max_length), fill, dtype=torch.long, device=device)
    lengths = torch.zeros((batch, returned), dtype=torch.long, device=device)  # generated tokens of each result
    cache, cur_len = None, 1
    while True:
        size = left.shape[0]
        flat = running[:, :, :cur_len].reshape(size * beams, cur_len)  # (rows, cur_len)
        outputs = model(decoder_input_ids=flat[:, -1:], cache=cache, use_cache=True, return_dict=True, **kwargs)
        cache = returned_cache(outputs)
        log_probs = torch.log_softmax(outputs.logits[:, -1, :].float(), dim=-1)  # (rows, vocab)
        if limit is not None:
            log_probs = limit(flat, log_probs)
        log_probs = (log_probs.view(size, beams, -1) + running_scores[:, :, None]).view(size, -1)
        top_scores, top_sequences, top_indices = model._get_top_k_continuations(
            accumulated_log_probs=log_probs,
            running_sequences=running,
            running_beam_indices=running_indices,
            cur_len=cur_len,
            decoder_prompt_len=1,
            do_sample=False,
            beams_to_keep=2 * beams,
            num_beams=beams,
            batch_size=size,
        )
        hits = top_sequences[:, :, cur_len] == eos  # (size, 2 * beams): generate's eos and max-length criteria
        if cur_len + 1 >= max_length:
            hits[:] = True
        running, running_scores, running_indices = model._get_running_beams_for_next_iteration(
            topk_log_probs=top_scores,
            topk_running_sequences=top_sequences,
            topk_running_beam_indices=top_indices,
            next_token_hits_stopping_criteria=hits,
            num_beams=beams,
        )
        finished, finished_scores, finished_indices, is_finished = model._update_finished_beams(
            sequences=finished,
            topk_running_sequences=top_sequences,
            beam_scores=finished_scores,
            topk_log_probs=top_scores,
            beam_indices=finished_indices,
            topk_running_beam_indices=top_indices,
            is_early_stop_heuristic_unsatisfied=open_sentences,
            is_sent_finished=is_finished,
            next_token_hits_stopping_criteria=hits,
            top_num_beam_mask=keep_top,
            num_beams=beams,
            cur_len=cur_len,
            decoder_prompt_len=1,
            length_penalty=config.length_penalty,
            early_stopping=config.early_stopping,
        )
        cache.reorder_cache(running_indices[..., cur_len - 1].flatten())
        cur_len += 1
        open_sentences = model._check_early_stop_heuristic(
            is_early_stop_heuristic_unsatisfied=open_sentences,
            running_beam_scores=running_scores,
            beam_scores=finished_scores,
            is_sent_finished=is_finished,
            cur_len=cur_len,
            max_length=max_length,
            decoder_prompt_len=1,
            early_stopping=config.early_stopping,
            length_penalty=config.length_penalty,
        )
        settled = ~open_sentences[:, 0]  # (size,): results final from now on
        if config.early_stopping is True:
            settled |= is_finished.all(1)
        if bool(hits.all()):  # every candidate ended (the length limit): nothing can change any more
            settled[:] = True
        if not settled.any():
            continue
        where = left[settled]
        results[where] = finished[settled, :returned]
        # generated tokens: the beam indices counted (their values are row offsets from before earlier prunings)
        lengths[where] = (finished_indices[settled, :returned] >= 0).sum(-1).long()
        if bool(settled.all()):
            break
        kept = (~settled).nonzero()[:, 0]  # (sentences kept,)
        rows = (kept[:, None] * beams + torch.arange(beams, device=device)).flatten()  # (rows kept,)
        left, open_sentences = left[kept], open_sentences[kept]
        running, running_scores, running_indices = running[kept], running_scores[kept], running_indices[kept]
        finished, finished_scores, finished_indices = finished[kept], finished_scores[kept], finished_indices[kept]
        is_finished = is_finished[kept]
        cache.batch_select_indices(rows)
        kwargs = _select_rows(kwargs, rows)
        if limit is not None:
            limit.limits = limit.limits[rows]
    return results[:, :, : 1 + int(lengths.max())].reshape(batch * returned, -1)


def _select_rows(kwargs: dict, rows: torch.Tensor) -> dict:
    """The decoder's keyword arguments with the encoder outputs and attention mask of the kept `rows` only."""
    encoder_outputs = kwargs["encoder_outputs"]
    fields = {
        name: value[rows] if isinstance(value, torch.Tensor) else value for name, value in encoder_outputs.items()
    }
    kwargs = {**kwargs, "encoder_outputs": type(encoder_outputs)(**fields)}
    if kwargs.get("attention_mask") is not None:
        kwargs["attention_mask"] = kwargs["attention_mask"][rows]
    return kwargs


__all__ = ["SourceLengthLimit", "beam_search", "usable"]
