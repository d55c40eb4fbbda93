"""The training objective, a run's choice and not the model's config: label smoothing, token-level unlikelihood and
scheduled sampling through the Trainer's `compute_loss_func`, recorded in `trainer_state.json`; folders whose
config.json holds these settings still load."""

import itertools
import json

import pytest
import torch
from helpers import MODEL_TYPES, VOCAB, make_model, random_ids
from torch import nn
from transformers import AutoConfig, AutoModelForSeq2SeqLM, Seq2SeqTrainingArguments

from hf_bahdanau.training.objective import TrainingObjective, scheduled_sampling_outputs
from hf_bahdanau.training.trainer import TranslationTrainer


def random_logits(batch: int, length: int) -> torch.Tensor:
    """Logits `(batch, tgt_len, vocab)` with gradients."""
    return torch.randn(batch, length, VOCAB, requires_grad=True)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_the_cross_entropy_equals_torchs_with_its_label_smoothing(smoothing):
    labels = torch.randint(0, VOCAB, (3, 10))
    labels[:, ::4] = -100
    logits = random_logits(3, 10)
    loss = TrainingObjective(label_smoothing=smoothing)({"logits": logits}, labels)
    expected = nn.functional.cross_entropy(logits.transpose(1, 2), labels, label_smoothing=smoothing)
    torch.testing.assert_close(loss, expected)
    (grad,), (expected_grad,) = (torch.autograd.grad(3 * value, (logits,)) for value in (loss, expected))
    torch.testing.assert_close(grad, expected_grad)
    assert not grad[:, ::4].any()  # ignored tokens get no gradient
    summed = TrainingObjective(label_smoothing=smoothing)({"logits": logits}, labels, num_items_in_batch=60)
    torch.testing.assert_close(summed, expected * (labels != -100).sum() / 60)  # the Trainer's count


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_unlikelihood_penalises_each_earlier_target_token_once_where_gradients_are_taken(smoothing):
    objective = TrainingObjective(label_smoothing=smoothing, unlikelihood=0.5)
    labels = torch.randint(4, 8, (3, 8))  # few distinct tokens: many repeats
    labels[1, 5:] = -100  # padding
    labels[2, 2] = -100
    logits = random_logits(3, 8)
    loss = objective({"logits": logits}, labels)
    # Welleck et al. (2020): cross-entropy + weight * sum over t of -log(1 - p(c)) for c in {y_<t} - {y_t}
    log_probs = torch.log_softmax(logits, -1)
    penalty = torch.zeros(())
    for b, t in itertools.product(range(3), range(8)):
        if labels[b, t] != -100:
            earlier = set(labels[b, :t].tolist()) - {labels[b, t].item(), -100}
            penalty = penalty - sum((torch.log1p(-log_probs[b, t, c].exp()) for c in earlier), torch.zeros(()))
    cross_entropy = nn.functional.cross_entropy(logits.transpose(1, 2), labels, label_smoothing=smoothing)
    expected = cross_entropy + 0.5 * penalty / (labels != -100).sum()
    assert penalty > 0
    torch.testing.assert_close(loss, expected)
    (grad,), (expected_grad,) = (torch.autograd.grad(value, (logits,), retain_graph=True) for value in (loss, expected))
    torch.testing.assert_close(grad, expected_grad)
    assert not grad[1, 5:].any()
    with torch.no_grad():  # evaluation: the cross-entropy alone
        torch.testing.assert_close(objective({"logits": logits}, labels), cross_entropy)


def test_labels_all_ignored_give_zero_loss_and_gradient():
    logits = random_logits(2, 3)
    loss = TrainingObjective(0.1, 0.5)({"logits": logits}, torch.full((2, 3), -100))
    assert loss.item() == 0.0
    assert not torch.autograd.grad(loss, (logits,))[0].any()


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_scheduled_sampling_feeds_the_models_own_predictions(model_type):
    model = make_model(model_type).train()  # dropout is 0: train mode is deterministic
    src, tgt = random_ids(3, 6), random_ids(3, 5, seed=4)
    inputs = {"input_ids": src, "attention_mask": torch.ones_like(src), "decoder_input_ids": tgt}
    own = scheduled_sampling_outputs(model, inputs, teacher_forcing_ratio=0.0)["logits"]
    # the reference: teacher forcing on the start token followed by the model's own greedy choices
    fed = tgt[:, :1]
    for _ in range(tgt.shape[1] - 1):
        fed = torch.cat([fed, model(input_ids=src, decoder_input_ids=fed).logits[:, -1:].argmax(-1)], dim=1)
    torch.testing.assert_close(own, model(input_ids=src, decoder_input_ids=fed).logits)
    assert not torch.equal(fed[:, 1:], tgt[:, 1:])
    gold = scheduled_sampling_outputs(model, inputs, teacher_forcing_ratio=1.0)["logits"]
    torch.testing.assert_close(gold, model(input_ids=src, decoder_input_ids=tgt).logits)
    TrainingObjective()(scheduled_sampling_outputs(model, inputs, 0.5), tgt).backward()
    assert model.model.encoder.embed_tokens.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_a_config_saved_with_training_settings_loads_without_them(model_type, tmp_path):
    model = make_model(model_type)
    model.save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    saved = json.loads(path.read_text())
    path.write_text(json.dumps({**saved, "label_smoothing": 0.1, "unlikelihood": 4.0, "teacher_forcing_ratio": 0.9}))
    config = AutoConfig.from_pretrained(tmp_path)
    assert not {"label_smoothing", "unlikelihood", "teacher_forcing_ratio"} & set(config.to_dict())
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    for name, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[name]), name


@pytest.mark.parametrize("ratio", [1.0, 0.0])
def test_the_trainer_trains_on_the_objective_with_scheduled_sampling_below_a_ratio_of_1(ratio, tmp_path):
    model = make_model("bahdanau")
    src, labels = random_ids(3, 6), random_ids(3, 5, seed=4)
    batch = {"input_ids": src, "attention_mask": torch.ones_like(src), "labels": labels,
             "decoder_input_ids": model.prepare_decoder_input_ids_from_labels(labels)}  # fmt: skip
    objective = TrainingObjective(label_smoothing=0.1, unlikelihood=0.5, teacher_forcing_ratio=ratio)
    args = Seq2SeqTrainingArguments(str(tmp_path), report_to=[], use_cpu=True)
    trainer = TranslationTrainer(model=model, args=args, compute_loss_func=objective)
    loss = trainer.compute_loss(model.train(), dict(batch))
    inputs = {name: value for name, value in batch.items() if name != "labels"}
    outputs = model(**inputs) if ratio == 1 else scheduled_sampling_outputs(model, inputs, ratio)
    torch.testing.assert_close(loss, objective(outputs, labels))
    assert not torch.equal(loss, trainer.compute_loss(model.eval(), dict(batch)).detach()) or ratio == 1
