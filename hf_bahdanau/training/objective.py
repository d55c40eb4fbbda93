"""The training objective, a run's choice rather than the model's: the token cross-entropy with label smoothing, the
token-level unlikelihood loss (Welleck et al., 2020), and scheduled sampling (Bengio et al., 2015).

`TrainingObjective` is the Trainer's `compute_loss_func` and a stateful callback, so that every checkpoint's and the
run folder's `trainer_state.json` records its settings; `scheduled_sampling_outputs` runs the model step by step
through its public `forward` and cache.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from hf_bahdanau.models.cache_names import returned_cache

# The smallest 1 - p(c) of the unlikelihood term, as Welleck et al.: no infinite loss for p = 1.
UNLIKELIHOOD_FLOOR = 1e-5


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


class TrainingObjective(TrainerCallback, ExportableState):
    """The loss of a batch from the model's logits: token cross-entropy in fp32 with `label_smoothing`, plus, where
    gradients are taken (training, not evaluation), `unlikelihood` times `-sum log(1 - p(c))` over each token's
    earlier distinct tokens; the mean over labelled tokens, or the sum / `num_items_in_batch` (the Trainer's count
    over the accumulated batches). `teacher_forcing_ratio` < 1: scheduled sampling in training (`TranslationTrainer`).

    A batch with no labelled token gives a loss of 0 with zero gradients (not NaN)."""

    def __init__(self, label_smoothing: float = 0.0, unlikelihood: float = 0.0, teacher_forcing_ratio: float = 1.0):
        self.label_smoothing, self.unlikelihood = label_smoothing, unlikelihood
        self.teacher_forcing_ratio = teacher_forcing_ratio

    def __call__(
        self, outputs: Any, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
    ) -> torch.Tensor:
        logits = outputs["logits"]  # (batch, tgt_len, vocab)
        flat_logits = logits.flatten(0, 1).float()  # (tokens, vocab)
        flat_labels = labels.to(flat_logits.device).reshape(-1)  # (tokens,), -100 = ignored
        loss = F.cross_entropy(
            flat_logits, flat_labels, ignore_index=-100, label_smoothing=self.label_smoothing, reduction="sum"
        )
        if self.unlikelihood and torch.is_grad_enabled():
            candidates = earlier_tokens(flat_labels.view(labels.shape)).flatten(0, 1)  # (tokens, tgt_len), -100: none
            log_probs = flat_logits.log_softmax(-1)  # (tokens, vocab)
            probs = log_probs.gather(1, candidates.clamp(min=0)).exp() * (candidates != -100)  # (tokens, tgt_len)
            loss = loss - self.unlikelihood * (1 - probs).clamp(min=UNLIKELIHOOD_FLOOR).log().sum()
        count = (flat_labels != -100).sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        return loss / count

    def state(self) -> dict[str, Any]:
        """The settings, as `trainer_state.json` records them."""
        return {
            "args": {
                "label_smoothing": self.label_smoothing,
                "unlikelihood": self.unlikelihood,
                "teacher_forcing_ratio": self.teacher_forcing_ratio,
            },
            "attributes": {},
        }


def scheduled_sampling_outputs(model: nn.Module, inputs: dict[str, Any], teacher_forcing_ratio: float) -> dict:
    """The logits `(batch, tgt_len, vocab)` of the model fed, after the first decoder token, the gold previous token
    with probability `teacher_forcing_ratio`, else its own greedy prediction: the source encoded once, then one
    `forward` call per target token, each continuing from the cache the previous one returned."""
    gold = inputs["decoder_input_ids"]  # (batch, tgt_len)
    mask = inputs.get("attention_mask")
    encoder_outputs = model.get_encoder()(inputs["input_ids"], mask, return_dict=True)
    cache, logits, step_input = None, [], gold[:, :1]  # (batch, 1)
    for step in range(gold.shape[1]):
        outputs = model(
            attention_mask=mask, encoder_outputs=encoder_outputs, decoder_input_ids=step_input, cache=cache,
            use_cache=True,
        )  # fmt: skip
        logits.append(outputs.logits)  # (batch, 1, vocab)
        cache = returned_cache(outputs)
        if step + 1 < gold.shape[1]:
            next_gold = gold[:, step + 1 : step + 2]
            use_gold = torch.rand(next_gold.shape, device=next_gold.device) < teacher_forcing_ratio
            step_input = torch.where(use_gold, next_gold, outputs.logits.argmax(-1))
    return {"logits": torch.cat(logits, dim=1)}


__all__ = ["TrainingObjective", "earlier_tokens", "scheduled_sampling_outputs"]
