"""What both translation models share: the `PreTrainedModel` + `GenerationMixin` base of an encoder, a decoder and
a language-model head.

A model defines `encoder` (called as `encoder(input_ids, attention_mask, output_attentions=,
output_hidden_states=)`, returning a batch-first `ModelOutput`), `decoder` (see `TranslationPreTrainedModel._decode`)
and `lm_head`; the base does the rest: input checks, labels -> decoder inputs, the loss, outputs as transformers
expects them, embedding access with tying, generation defaults and clear loading errors. This file is copied into
saved model folders (`trust_remote_code`), so it imports nothing but torch, safetensors and transformers.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch
from safetensors import SafetensorError
from torch import nn
from transformers import GenerationConfig, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions, ModelOutput, Seq2SeqLMOutput
from transformers.utils import logging as transformers_logging
from transformers.utils.deprecation import deprecate_kwarg

from .configuration_translation import TranslationConfig
from .linear import linear, onednn_applies, product

# What `generate` hands `prepare_inputs_for_generation` that is not for `forward`.
GENERATION_ONLY_KWARGS = ("labels", "inputs_embeds", "is_first_iteration", "decoder_attention_mask")
# The one place for a new model's generation settings (saved in its generation_config.json, overridable per call).
GENERATION_DEFAULTS = {"num_beams": 5, "max_new_tokens": 128}
logger = transformers_logging.get_logger(__name__)
# The smallest 1 - p(c) of the unlikelihood term, as Welleck et al.: no infinite loss for p = 1.
UNLIKELIHOOD_FLOOR = 1e-5
# Logits per block of `LinearCrossEntropySum`: 4 MB in fp32, 131 tokens at 8,000 words (fastest at one CPU thread;
# see docs/benchmarks.md).
LOSS_BLOCK_SIZE = 2**20


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs from labels: prepend the start token, drop the last label, replace -100 by padding."""
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


def check_ids(name: str, ids: torch.Tensor, vocab_size: int) -> None:
    """Raise a ValueError when `ids` hold a token outside `[0, vocab_size)`."""
    if not ids.numel():
        return
    low, high = (int(value) for value in torch.aminmax(ids))  # one device sync
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"{name} holds ids in [{low}, {high}], outside the vocabulary [0, {vocab_size}): "
            "does the tokenizer match the model's config?"
        )


def check_source(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, vocab_size: int) -> torch.Tensor:
    """Validate the source batch; return the mask as booleans `(batch, src_len)`."""
    if input_ids.dim() != 2 or input_ids.numel() == 0:
        raise ValueError(f"input_ids must be a non-empty (batch, src_len) tensor, got shape {tuple(input_ids.shape)}")
    check_ids("input_ids", input_ids, vocab_size)
    if attention_mask is None:
        return torch.ones_like(input_ids, dtype=torch.bool)
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)} but input_ids has shape {tuple(input_ids.shape)}"
        )
    mask = attention_mask.bool()
    empty = (~mask.any(1)).nonzero().flatten()
    if empty.numel():
        raise ValueError(f"source sequence(s) {empty.tolist()} have no token: attention_mask is all zeros there")
    return mask


def check_loaded_weights(path: str | os.PathLike, loading_info: dict[str, Any]) -> None:
    """Raise a one-line ValueError when `from_pretrained`'s `loading_info` has missing or unexpected weights."""
    problems = []
    for kind in ("missing", "unexpected"):
        keys = sorted(loading_info.get(f"{kind}_keys") or ())
        if keys:
            shown = ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")
            problems.append(f"{len(keys)} {kind} ({shown})")
    if problems:
        raise ValueError(
            f"the weights in {path} do not fit the model its config describes: {'; '.join(problems)} (a config of "
            "another model type or another architecture?); pass strict=False to load it anyway, newly initialised"
        )


def check_beams_keep_their_source(beam_idx: torch.Tensor, repeats: int) -> None:
    """Refuse a reorder of decoder rows (`beam_idx`, by beam search) that moves a row to another source, for a state
    that keeps one copy of each source for its `repeats` consecutive rows."""
    rows = torch.arange(len(beam_idx), device=beam_idx.device)
    if not torch.equal(beam_idx // repeats, rows // repeats):
        raise ValueError(
            f"the decoder state keeps one copy of each source for its {repeats} consecutive rows (beams), and cannot "
            "move rows between sentences"
        )


def earlier_tokens(labels: torch.Tensor) -> torch.Tensor:
    """For each target position, the distinct tokens of the earlier positions other than its own label (the
    candidates of token-level unlikelihood): `(batch, tgt_len, tgt_len)`, -100 where there is none."""
    # labels (batch, tgt_len), -100 = ignored
    length = labels.shape[1]
    before = torch.ones(length, length, dtype=torch.bool, device=labels.device).tril(-1)  # [t, s]: s < t
    same = labels.unsqueeze(2) == labels.unsqueeze(1)  # [b, t, s]: y_t == y_s
    first = ~(same & before).any(2)  # (batch, tgt_len): y_s does not occur before s
    keep = before & ~same & (first & (labels != -100)).unsqueeze(1) & (labels != -100).unsqueeze(2)
    return labels.unsqueeze(1).expand(-1, length, -1).masked_fill(~keep, -100)


class TokenLosses:
    """Per-token cross-entropy with label smoothing, plus `unlikelihood` times the token-level unlikelihood loss
    `-sum log(1 - p(c))` over each token's `candidates` (Welleck et al., 2020), from the log-softmax of the logits;
    and the gradient of their sum with respect to the logits, written over that log-softmax."""

    def __init__(
        self,
        log_probs: torch.Tensor,  # (tokens, vocab), fp32
        labels: torch.Tensor,  # (tokens,), -100 = ignored
        smoothing: float,
        candidates: torch.Tensor | None,  # (tokens, k), -100 = none; None: no unlikelihood term
        unlikelihood: float,
    ) -> None:
        self.labelled = labels != -100  # (tokens,)
        self.index = labels.clamp(min=0).unsqueeze(1)  # (tokens, 1)
        losses = -log_probs.gather(1, self.index).squeeze(1)  # (tokens,)
        if smoothing:
            losses = (1 - smoothing) * losses - smoothing * log_probs.mean(-1)
        self.penalised = self.weights = None
        if candidates is not None:
            self.penalised = candidates.clamp(min=0)  # (tokens, k)
            probs = log_probs.gather(1, self.penalised).exp() * (candidates != -100)  # (tokens, k)
            complement = (1 - probs).clamp(min=UNLIKELIHOOD_FLOOR)  # (tokens, k)
            losses = losses - unlikelihood * complement.log().sum(1)
            # d(-log(1 - p_c))/dlogits = w_c (one_hot(c) - softmax), w_c = p_c / (1 - p_c); none where clamped
            self.weights = unlikelihood * probs / complement * (complement > UNLIKELIHOOD_FLOOR)
        self.losses = losses.masked_fill(~self.labelled, 0.0)  # (tokens,)

    def saved(self) -> tuple[torch.Tensor | None, ...]:
        return self.labelled, self.index, self.penalised, self.weights

    @staticmethod
    def gradient_(
        log_probs: torch.Tensor,  # (tokens, vocab), overwritten
        grad: torch.Tensor | float,  # the incoming gradient of the summed loss
        smoothing: float,
        labelled: torch.Tensor,
        index: torch.Tensor,
        penalised: torch.Tensor | None,
        weights: torch.Tensor | None,
    ) -> torch.Tensor:
        """d(sum of losses)/dlogits, in place of `log_probs`: softmax * (1 - sum_c w_c) - smoothing / vocab
        - (1 - smoothing) * one_hot(label) + sum_c w_c * one_hot(c), times `grad`; zero on ignored tokens."""
        scale = (labelled * grad).unsqueeze(1)  # (tokens, 1)
        gradient = log_probs.exp_()  # (tokens, vocab), the softmax, in place
        gradient.mul_(scale if weights is None else scale * (1 - weights.sum(1, keepdim=True)))
        if smoothing:
            gradient.sub_(scale * (smoothing / gradient.shape[-1]))
        gradient.scatter_add_(1, index, scale * (smoothing - 1))
        if weights is not None:
            gradient.scatter_add_(1, penalised, scale * weights)
        return gradient


class CrossEntropySum(torch.autograd.Function):
    """The sum of `TokenLosses` over `logits` `(tokens, vocab)`, in fp32: `cross_entropy(logits, labels,
    ignore_index=-100, label_smoothing=, reduction="sum")` plus the unlikelihood term.

    The backward turns the saved log-softmax into the gradient in place: no zero-filled (tokens, vocab) buffer for
    `nll_loss_backward` and no second one for `log_softmax_backward` (two fewer 45 MB temporaries per step at
    1,408 tokens x 8,000 words). Its backward runs once (the saved tensor is consumed)."""

    @staticmethod
    def forward(
        ctx: Any,
        logits: torch.Tensor,  # (tokens, vocab)
        labels: torch.Tensor,  # (tokens,), -100 = ignored
        smoothing: float,
        candidates: torch.Tensor | None = None,  # (tokens, k), -100 = none; None: no unlikelihood term
        unlikelihood: float = 0.0,
    ) -> torch.Tensor:
        log_probs = torch.log_softmax(logits.float(), dim=-1)  # (tokens, vocab)
        losses = TokenLosses(log_probs, labels, smoothing, candidates, unlikelihood)
        ctx.save_for_backward(log_probs, *losses.saved())
        ctx.smoothing, ctx.dtype, ctx.consumed = smoothing, logits.dtype, False
        return losses.losses.sum()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        if ctx.consumed:
            raise RuntimeError("CrossEntropySum's backward reuses its saved tensor and runs only once")
        ctx.consumed = True
        log_probs, *saved = ctx.saved_tensors
        gradient = TokenLosses.gradient_(log_probs, grad, ctx.smoothing, *saved)
        return gradient.to(ctx.dtype), None, None, None, None


class LinearCrossEntropySum(torch.autograd.Function):
    """`CrossEntropySum` of `linear(hidden, weight, bias)` in fp32, computed block by block without the logits.

    Each block of `rows` tokens has its logits, log-softmax and gradient made and used while they are in cache, and
    the forward already computes the gradients of `hidden`, `weight` and `bias` (when `gradients`), which the
    backward scales by the incoming one. What it saves on CPU, per training step: the (tokens, vocab) logits and
    log-softmax (45 MB each at 1,408 tokens x 8,000 words, each page-faulted in afresh by the OS), and the output
    layer's three matrix products run on blocks that stay in cache."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,  # (tokens, d), fp32
        weight: torch.Tensor,  # (vocab, d), fp32
        bias: torch.Tensor | None,  # (vocab,)
        labels: torch.Tensor,  # (tokens,), -100 = ignored
        smoothing: float,
        candidates: torch.Tensor | None,  # (tokens, k), -100 = none; None: no unlikelihood term
        unlikelihood: float,
        gradients: bool,
        rows: int,
    ) -> torch.Tensor:
        total = hidden.new_zeros(())
        grad_hidden = torch.empty_like(hidden) if gradients else None
        grad_weight = torch.zeros_like(weight) if gradients else None
        grad_bias = torch.zeros_like(bias) if gradients and bias is not None else None
        buffers = hidden.new_empty(2, min(rows, hidden.shape[0]), weight.shape[0])  # reused by every block
        onednn = onednn_applies(hidden[:rows], weight)  # fresh logits per block, but products twice as fast
        weight_t = weight.t().contiguous() if onednn and gradients else None  # (d, vocab), for grad_hidden
        for start in range(0, hidden.shape[0], rows):
            block = slice(start, start + rows)
            logits, log_probs = buffers[:, : len(hidden[block])]  # (rows, vocab) each
            if onednn:
                logits = product(hidden[block], weight, bias)
            elif bias is None:
                torch.mm(hidden[block], weight.t(), out=logits)
            else:
                torch.addmm(bias, hidden[block], weight.t(), out=logits)
            torch.log_softmax(logits, dim=-1, out=log_probs)
            losses = TokenLosses(
                log_probs, labels[block], smoothing, None if candidates is None else candidates[block], unlikelihood
            )
            total += losses.losses.sum()
            if gradients:
                gradient = TokenLosses.gradient_(log_probs, 1.0, smoothing, *losses.saved())  # (rows, vocab)
                if weight_t is None:
                    torch.mm(gradient, weight, out=grad_hidden[block])
                else:
                    grad_hidden[block] = product(gradient, weight_t)
                grad_weight.addmm_(gradient.t(), hidden[block])
                if grad_bias is not None:
                    grad_bias += gradient.sum(0)
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        return total

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        return (*(None if part is None else part * grad for part in ctx.saved_tensors), *(None,) * 6)


QUANTIZATIONS = ("int8",)


def quantize_for_cpu(model: TranslationPreTrainedModel) -> TranslationPreTrainedModel:
    """The model, in place, with int8 linear and recurrent (GRU, LSTM) layers (weights int8 per output channel,
    activations quantized per call) for CPU inference; returns it, in eval mode. It translates faster on CPU and
    can no longer be trained or saved.

    This is torch's dynamic quantization (`torch.ao.quantization.quantize_dynamic`, deprecated in favour of
    torchao, whose int8 kernels ran slower than fp32 on our x86 CPU, and which has no recurrent layers): the path
    that runs fastest here today.
    """
    # A one-output layer (the additive attention's score vector) would only quantize its large input per step.
    layers = (
        name
        for name, module in model.named_modules()
        if (type(module) is nn.Linear and module.out_features > 1) or type(module) in (nn.GRU, nn.LSTM)
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(deprecated|quantize_per_tensor|quantize_per_channel).*")
        qconfigs = dict.fromkeys(layers, torch.ao.quantization.per_channel_dynamic_qconfig)  # a scale per output
        torch.ao.quantization.quantize_dynamic(model.eval(), qconfigs, dtype=torch.qint8, inplace=True)
    model.quantization = "int8"
    return model


class TranslationPreTrainedModel(PreTrainedModel, GenerationMixin):
    """Base of the translation models: an `encoder`, a `decoder` and an `lm_head` over one joint vocabulary."""

    config: TranslationConfig
    config_class = TranslationConfig
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    quantization: str | None = None  # "int8" after `quantize_for_cpu`

    def post_init(self) -> None:
        """Declare the tied weights, initialise, and give a new model the translation generation defaults."""
        self._tied_weights_keys = {"lm_head.weight": "decoder.embed_tokens.weight"}
        if self.config.tie_encoder_decoder_embeddings:
            self._tied_weights_keys["encoder.embed_tokens.weight"] = "decoder.embed_tokens.weight"
        super().post_init()
        defaults = dict(GENERATION_DEFAULTS)
        table = getattr(self.config, "max_position_embeddings", None)
        if table is not None:  # a Transformer's translations are no longer than its position table
            defaults["max_new_tokens"] = min(defaults["max_new_tokens"], table)
        self.generation_config.update(**defaults)

    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path: str | os.PathLike, *args: Any, **kwargs: Any
    ) -> TranslationPreTrainedModel:
        """`PreTrainedModel.from_pretrained`, with a ValueError naming the problem for a checkpoint that does
        not fit its config (e.g. another vocabulary size) or that is corrupt, and without a "Loading weights"
        progress bar (loading these small models is no long work).

        `quantize="int8"` returns the model ready for CPU inference with int8 linear and recurrent layers
        (`quantize_for_cpu`).

        A weight the model has and the checkpoint lacks, or one the checkpoint has and the model lacks (e.g. a
        folder whose config names another model type), is a ValueError naming them: such a model would translate
        garbage. `strict=False` loads it anyway, with those weights newly initialised or dropped (transformers' load
        report lists them; `output_loading_info=True` returns them too). Tied weights are not missing.
        """
        strict = kwargs.pop("strict", True)
        output_loading_info = kwargs.pop("output_loading_info", False)
        quantize = kwargs.pop("quantize", None)
        if quantize not in (None, *QUANTIZATIONS):
            raise ValueError(f"quantize must be one of {QUANTIZATIONS} or None, got {quantize!r}")
        was_enabled = transformers_logging.is_progress_bar_enabled()
        transformers_logging.disable_progress_bar()
        try:
            model, loading_info = super().from_pretrained(
                pretrained_model_name_or_path, *args, output_loading_info=True, **kwargs
            )
        except SafetensorError as error:
            raise ValueError(
                f"the checkpoint in {pretrained_model_name_or_path} is corrupt or truncated ({error})"
            ) from error
        except RuntimeError as error:
            if "mismatched_sizes" not in str(error):
                raise
            raise ValueError(
                f"the checkpoint in {pretrained_model_name_or_path} does not match the config: its weight shapes "
                "differ (the load report above lists them; usually vocab_size or a hidden size). Load it with its "
                "own config, or pass ignore_mismatched_sizes=True to re-initialise the mismatched weights."
            ) from error
        finally:
            if was_enabled:
                transformers_logging.enable_progress_bar()
        if strict:
            check_loaded_weights(pretrained_model_name_or_path, loading_info)
        model = model if quantize is None else quantize_for_cpu(model)
        return (model, loading_info) if output_loading_info else model

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> None:
        """`PreTrainedModel.save_pretrained`; refused for a quantized model (folders hold fp32 weights only)."""
        if self.quantization is not None:
            raise ValueError(
                f"this model was quantized to {self.quantization} for inference and cannot be saved: save the fp32 "
                "model and pass quantize= when loading it"
            )
        super().save_pretrained(save_directory, *args, **kwargs)

    def get_encoder(self, modality: str | None = None) -> nn.Module:
        return self.encoder

    def get_input_embeddings(self) -> nn.Embedding:
        return self.decoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.decoder.embed_tokens = value
        if self.config.tie_encoder_decoder_embeddings:
            self.encoder.embed_tokens = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head = new_embeddings

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        """Resize the decoder (and untied encoder) embeddings and the output layer to a new vocabulary size."""
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        if not self.config.tie_encoder_decoder_embeddings:  # the base class only resizes the decoder's
            self.encoder.embed_tokens = self._get_resized_embeddings(
                self.encoder.embed_tokens, embeddings.num_embeddings, mean_resizing=mean_resizing
            )
        return embeddings

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def prepare_inputs_for_generation(
        self,
        input_ids: torch.LongTensor,
        next_sequence_length: int | None = None,
        cache: Any = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """One generation step's `forward` arguments: the tokens the decoder state has not read yet (also when
        `generate` continues from a returned `cache` with the whole sequence so far) and the model
        kwargs. Lean on purpose: `GenerationMixin`'s version inspects `forward`'s signature and looks up the
        device at every step (~0.4 ms, some 5% of a greedy step at batch 64)."""
        if next_sequence_length is None and cache is not None:
            seen = cache.get_seq_length()
            if 0 < seen < input_ids.shape[1]:
                next_sequence_length = input_ids.shape[1] - seen
        if next_sequence_length is not None:
            input_ids = input_ids[:, -next_sequence_length:]
        inputs = {name: value for name, value in kwargs.items() if name not in GENERATION_ONLY_KWARGS}
        return {**inputs, "decoder_input_ids": input_ids, "cache": cache}

    def _prepare_generated_length(
        self, generation_config: GenerationConfig, *args: Any, **kwargs: Any
    ) -> GenerationConfig:
        """`GenerationMixin`'s, bounded by the position table (a Transformer's `max_position_embeddings`; the RNN
        has none): the decoder reads every token but the last, so a sequence holds at most table + 1 tokens (the
        start token and `table` new ones). Asking for more generates that many, with one warning."""
        generation_config = super()._prepare_generated_length(generation_config, *args, **kwargs)
        table = getattr(self.config, "max_position_embeddings", None)
        if table is not None and generation_config.max_length > table + 1:
            logger.warning_once(
                f"generation asked for sequences of up to {generation_config.max_length} tokens, but the model's "
                f"position table holds {table} (max_position_embeddings): generating up to {table + 1}"
            )
            generation_config.max_length = table + 1
            generation_config.min_length = min(generation_config.min_length, table + 1)
        return generation_config

    def _expand_inputs_for_generation(
        self,
        expand_size: int = 1,
        is_encoder_decoder: bool = False,
        input_ids: torch.LongTensor | None = None,
        **kwargs: Any,
    ) -> tuple[torch.LongTensor | None, dict[str, Any]]:
        """`GenerationMixin`'s, which repeats each source `expand_size` times (beams, returned sequences), and tells
        the decoder so: it attends to one copy of each source (projected once) for all of its rows."""
        input_ids, kwargs = super()._expand_inputs_for_generation(expand_size, is_encoder_decoder, input_ids, **kwargs)
        return input_ids, {**kwargs, "source_repeats": expand_size}

    def _prepare_text_encoder_decoder_kwargs_for_generation(
        self, inputs_tensor: torch.Tensor, model_kwargs: dict[str, Any], *args: Any, **kwargs: Any
    ) -> dict[str, Any]:
        """Encode the source once per `generate` call; drop an all-ones `attention_mask` (what `generate` makes
        for unpadded inputs), so that no decoding step applies a mask that hides nothing."""
        model_kwargs = super()._prepare_text_encoder_decoder_kwargs_for_generation(
            inputs_tensor, model_kwargs, *args, **kwargs
        )
        mask = model_kwargs.get("attention_mask")
        if mask is not None and bool(mask.all()):
            del model_kwargs["attention_mask"]
        return model_kwargs

    @deprecate_kwarg("past_key_values", "6.0.0", new_name="cache", raise_if_both_names=True)  # before 5.24
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        encoder_outputs: ModelOutput | tuple | None = None,
        cache: Any = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        skip_logits: bool | None = None,
        source_repeats: int = 1,
        **kwargs: Any,  # generation and Trainer extras
    ) -> Seq2SeqLMOutput | tuple:
        """Logits `(batch, tgt_len, vocab)`; `loss` when `labels` `(batch, tgt_len)` are given (-100 ignored).

        With `cache` (the state returned by the previous call) only the new decoder tokens are read.
        `num_items_in_batch` (from the Trainer) makes the loss a sum divided by it, for gradient accumulation.
        `skip_logits=True` computes the loss without the logits (`LinearCrossEntropySum`), which come back as None
        (the RNN's scheduled sampling needs them and returns them). The default, None, skips them where that is
        faster and nothing reads them: a training step with labels on CPU, in fp32 without autocast (what the
        Trainer runs there). Pass False to get them in training.
        `source_repeats`: each source row is repeated this many times in a row (`generate` passes it at every step, for
        the beams or returned sequences of a sentence); the decoder keeps one copy of each source for its rows.
        """
        output_attentions = output_attentions if output_attentions is not None else self.config.output_attentions
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        if decoder_input_ids is None:
            raise ValueError("pass decoder_input_ids or labels")
        if cache is None or cache.get_seq_length() == 0:  # later steps feed generated tokens
            check_ids("decoder_input_ids", decoder_input_ids, self.config.vocab_size)

        if encoder_outputs is None:
            if input_ids is None:
                raise ValueError("pass input_ids or encoder_outputs")
            encoder_outputs = self.encoder(
                input_ids,
                attention_mask,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
            )
        elif not isinstance(encoder_outputs, ModelOutput):
            encoder_outputs = self.encoder.output_class(*encoder_outputs)
        source = encoder_outputs.last_hidden_state  # (batch, src_len, d)
        source_mask = attention_mask.bool() if attention_mask is not None else None  # None: no padding
        if skip_logits is None:
            skip_logits = self.training and labels is not None and self._loss_skips_logits_here()
        if skip_logits and labels is None:
            raise ValueError("skip_logits=True needs labels: without them the logits are all forward returns")
        decoder_outputs, logits = self._decode(
            decoder_input_ids,
            encoder_outputs,
            source_mask,
            cache,
            with_logits=not skip_logits,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            source_repeats=source_repeats,
        )
        hidden = decoder_outputs.last_hidden_state  # (batch, tgt_len, d)
        output = Seq2SeqLMOutput(
            loss=None if labels is None else self._loss(labels, num_items_in_batch, logits, hidden),
            logits=logits,
            cache=decoder_outputs.cache if use_cache else None,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=source,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )
        return output if return_dict else output.to_tuple()

    def _decode(
        self,
        decoder_input_ids: torch.LongTensor,  # (batch, tgt_len)
        encoder_outputs: ModelOutput,
        source_mask: torch.Tensor | None,  # (batch, src_len), bool; None: no padding
        cache: Any,
        with_logits: bool = True,
        **options: Any,  # use_cache, output_attentions, output_hidden_states, source_repeats
    ) -> tuple[BaseModelOutputWithPastAndCrossAttentions, torch.Tensor | None]:
        """The decoder's outputs and the logits `(batch, tgt_len, vocab)` (None unless `with_logits`)."""
        outputs = self.decoder(decoder_input_ids, encoder_outputs, source_mask, cache, **options)
        return outputs, linear(self.lm_head, outputs.last_hidden_state) if with_logits else None

    def _loss_skips_logits_here(self) -> bool:
        """Whether the loss is faster without the logits: on CPU, in fp32, outside autocast, with grads enabled."""
        weight = self.lm_head.weight
        return (
            weight.device.type == "cpu"
            and weight.dtype == torch.float32
            and not torch.is_autocast_enabled("cpu")
            and torch.is_grad_enabled()
        )

    def _loss(
        self,
        labels: torch.Tensor,  # (batch, tgt_len), -100 = ignored
        num_items_in_batch: int | torch.Tensor | None,
        logits: torch.Tensor | None = None,  # (batch, tgt_len, vocab)
        hidden: torch.Tensor | None = None,  # (batch, tgt_len, d): the decoder's output, when logits is None
    ) -> torch.Tensor:
        """Token cross-entropy with label smoothing, plus the config's `unlikelihood` term in training; mean over
        labelled tokens, or sum / `num_items_in_batch`. From the logits, or from the decoder's output through
        `lm_head` block by block (`LinearCrossEntropySum`, the same loss and gradients without the logits).

        A batch with no labelled token gives a loss of 0 with zero gradients (not NaN)."""
        inputs = hidden if logits is None else logits
        flat_labels = labels.to(inputs.device).reshape(-1)
        unlikelihood = self.config.unlikelihood if self.training else 0.0
        candidates = earlier_tokens(flat_labels.view(labels.shape)).flatten(0, 1) if unlikelihood else None
        smoothing = self.config.label_smoothing
        if logits is not None:
            loss = CrossEntropySum.apply(logits.flatten(0, 1), flat_labels, smoothing, candidates, unlikelihood)
        else:
            weight, bias = self.lm_head.weight, self.lm_head.bias
            if hidden.dtype != torch.float32 or weight.dtype != torch.float32:
                raise ValueError(
                    f"skip_logits=True computes the loss in fp32, but the decoder output is {hidden.dtype} and the "
                    f"output layer {weight.dtype} (a half-precision model or autocast): pass skip_logits=False"
                )
            gradients = torch.is_grad_enabled() and any(
                x is not None and x.requires_grad for x in (hidden, weight, bias)
            )
            rows = max(1, LOSS_BLOCK_SIZE // weight.shape[0])
            loss = LinearCrossEntropySum.apply(
                hidden.flatten(0, 1), weight, bias, flat_labels, smoothing, candidates, unlikelihood, gradients, rows
            )
        count = (flat_labels != -100).sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        return loss / count


__all__ = [
    "GENERATION_DEFAULTS",
    "QUANTIZATIONS",
    "TranslationPreTrainedModel",
    "check_beams_keep_their_source",
    "check_ids",
    "check_source",
    "quantize_for_cpu",
    "shift_tokens_right",
]
