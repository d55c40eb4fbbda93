"""The pruned beam search (`hf_bahdanau.beam_search`) against `generate()`: the same sequences, token for token, for
both model types and every setting it takes; less decoder work; and `usable` refusing what it does not do."""

from __future__ import annotations

import pytest
import torch
from helpers import greedy_config, make_model, random_ids

from hf_bahdanau.beam_search import SourceLengthLimit, beam_search, usable

VARIANTS = [
    ("bahdanau", {}),
    ("bahdanau", {"rnn_type": "lstm", "decoder_layers": 2}),
    ("bahdanau", {"decoder_type": "cgru"}),
    ("d2l_transformer", {}),
]


def eager_model(model_type: str, seed: int, **overrides):
    """A tiny random model whose `</s>` logit is raised, so that sentences end (and settle) at different steps."""
    model = make_model(model_type, seed=seed, **overrides)
    with torch.no_grad():
        model.lm_head.weight[2] += 0.5 * model.lm_head.weight.mean(0)
        model.lm_head.weight[2] *= 3.0
    return model


def sources(seed: int, batch: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    """`(batch, 9)` ids padded on the right to random lengths 2-9, and their attention mask."""
    lengths = torch.randint(2, 10, (batch,), generator=torch.Generator().manual_seed(seed))
    ids = random_ids(batch, 9, seed=seed)
    mask = (torch.arange(9)[None, :] < lengths[:, None]).long()
    return ids.masked_fill(mask == 0, 0), mask


def generate_sequences(model, ids, mask, config, limits):
    """`generate()`'s sequences, with the length limit as the logits processor `translate` gives it."""
    processors = []
    if limits is not None:
        processors = [SourceLengthLimit(limits.repeat_interleave(config.num_beams), config.eos_token_id)]
    return model.generate(input_ids=ids, attention_mask=mask, generation_config=config, logits_processor=processors)


@pytest.mark.parametrize("model_type, overrides", VARIANTS)
@pytest.mark.parametrize(
    "settings",
    [
        dict(num_beams=4),
        dict(num_beams=3, num_return_sequences=3, length_penalty=0.6),
        dict(num_beams=4, num_return_sequences=2, early_stopping=True),
        dict(num_beams=3, early_stopping="never", length_penalty=1.5),
        dict(num_beams=5, length_penalty=2.0, limits=True),
        dict(num_beams=4, num_return_sequences=4, limits=True),
    ],
    ids=["plain", "n-best", "early-stopping", "never", "limits", "limits-n-best"],
)
def test_the_sequences_are_generate_s(model_type, overrides, settings):
    settings = dict(settings)
    with_limits = settings.pop("limits", False)
    for seed in range(3):
        model = eager_model(model_type, seed, **overrides)
        ids, mask = sources(seed)
        config = greedy_config(max_new_tokens=12, **settings)
        limits = torch.randint(1, 14, (len(ids),), generator=torch.Generator().manual_seed(seed))
        limits = limits if with_limits else None
        expected = generate_sequences(model, ids, mask, config, limits)
        assert usable(model, config, ids)
        found = beam_search(model, ids, mask, config, limits)
        assert found.shape == expected.shape
        assert torch.equal(found, expected), (found != expected).any(1).nonzero()[:, 0].tolist()


def test_the_position_table_bounds_the_search_as_it_bounds_generate():
    model = eager_model("d2l_transformer", 0, max_position_embeddings=10)
    ids, mask = sources(0)
    found = beam_search(model, ids, mask, greedy_config(num_beams=3, max_new_tokens=12))
    assert found.shape[1] == 11  # the start and 10 new tokens: the table, not max_new_tokens (12)
    expected = generate_sequences(model, ids, mask, greedy_config(num_beams=3, max_new_tokens=10), None)
    assert torch.equal(found, expected)  # generate() asked for what fits


@pytest.mark.parametrize("model_type", ["bahdanau", "d2l_transformer"])
def test_settled_sentences_leave_the_batch(model_type):
    """The decoder reads fewer rows than `generate()`'s, which keeps every sentence to the last step."""
    model = eager_model(model_type, 0)
    ids, mask = sources(0, batch=16)
    limits = torch.tensor([2, 3, 4, 20] * 4)  # most sentences end early, four run on to the 12-token limit
    config = greedy_config(num_beams=4, max_new_tokens=12)
    rows = []
    hook = model.lm_head.register_forward_hook(lambda module, args, output: rows.append(output.shape[0]))
    expected = generate_sequences(model, ids, mask, config, limits)
    generate_rows, rows[:] = sum(rows), []
    found = beam_search(model, ids, mask, config, limits)
    hook.remove()
    assert torch.equal(found, expected)
    assert sum(rows) < 0.6 * generate_rows
    assert rows[0] == 16 * 4 and rows[-1] <= 4 * 4  # all sentences at first, only the long ones at the end


@pytest.mark.parametrize(
    "settings, expected",
    [
        (dict(num_beams=4), True),
        (dict(num_beams=1), False),
        (dict(num_beams=4, do_sample=True), False),
        (dict(num_beams=4, no_repeat_ngram_size=2), False),
        (dict(num_beams=4, repetition_penalty=1.2), False),
        (dict(num_beams=4, min_new_tokens=3), False),
        (dict(num_beams=4, output_scores=True, return_dict_in_generate=True), False),
        (dict(num_beams=4, eos_token_id=[2, 5]), False),  # generate() keeps more candidates for more </s> ids
        (dict(num_beams=4, max_new_tokens=None, max_length=8), False),
        (dict(num_beams=4, force_words_ids=[[5]]), False),
        (dict(num_beams=4, max_time=10.0), False),
    ],
)
def test_usable_only_for_a_plain_beam_search(settings, expected):
    model = make_model("d2l_transformer")
    assert usable(model, greedy_config(**{"max_new_tokens": 8, **settings}), random_ids(2, 5)) is expected
