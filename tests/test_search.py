"""The package's own search (`hf_bahdanau.decoding.search`) against `generate()`: the same sequences, token for
token, for both model types and every setting it takes; less decoder work; the log-probabilities it reports; the
settings it refuses."""

from __future__ import annotations

import re

import pytest
import torch
from helpers import SourceLengthLimit, greedy_config, make_model, random_ids

from hf_bahdanau.decoding.search import search
from hf_bahdanau.decoding.settings import SearchSettings

VARIANTS = [  # the fast lane searches with the GRU and the Transformer; the full run with the other decoders too
    ("bahdanau", {}),
    pytest.param("bahdanau", {"rnn_type": "lstm", "decoder_layers": 2}, marks=pytest.mark.slow),
    pytest.param("bahdanau", {"decoder_type": "cgru"}, marks=pytest.mark.slow),
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
    """`generate()`'s sequences, with the length limit as a logits processor."""
    processors = []
    if limits is not None:
        copies = max(config.num_beams, config.num_return_sequences or 1)
        processors = [SourceLengthLimit(limits.repeat_interleave(copies), config.eos_token_id)]
    return model.generate(input_ids=ids, attention_mask=mask, generation_config=config, logits_processor=processors)


def teacher_forced_log_probs(model, ids, mask, sequences, lengths):
    """The sum of each sequence's generated tokens' log-probabilities, by one forward pass."""
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=sequences[:, :-1]).logits
    token_log_probs = logits.log_softmax(-1).gather(2, sequences[:, 1:, None]).squeeze(2)  # (rows, generated)
    kept = torch.arange(sequences.shape[1] - 1)[None, :] < lengths[:, None]
    return (token_log_probs * kept).sum(1)


SETTINGS = [
    dict(num_beams=1),
    dict(num_beams=1, limits=True),
    dict(num_beams=4),
    dict(num_beams=3, num_return_sequences=3, length_penalty=0.6),
    dict(num_beams=4, num_return_sequences=2, early_stopping=True),
    dict(num_beams=3, early_stopping="never", length_penalty=1.5),
    dict(num_beams=5, length_penalty=2.0, limits=True),
    dict(num_beams=4, num_return_sequences=4, limits=True),
]
SETTING_NAMES = ["greedy", "greedy-limits", "plain", "n-best", "early-stopping", "never", "limits", "limits-n-best"]


@pytest.mark.parametrize("model_type, overrides", VARIANTS)
@pytest.mark.parametrize("settings", SETTINGS, ids=SETTING_NAMES)
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
        found = search(model, ids, mask, SearchSettings.from_config(config), limits)
        assert found.sequences.shape == expected.shape
        assert torch.equal(found.sequences, expected), (found.sequences != expected).any(1).nonzero()[:, 0].tolist()
        copies = found.sequences.shape[0] // len(ids)
        by_hand = teacher_forced_log_probs(
            model, ids.repeat_interleave(copies, 0), mask.repeat_interleave(copies, 0), expected, found.lengths
        )
        torch.testing.assert_close(found.log_probs, by_hand, atol=1e-4, rtol=1e-4)


def test_each_length_counts_the_tokens_up_to_the_end_of_sentence():
    model = eager_model("d2l_transformer", 0)
    ids, mask = sources(0)
    found = search(model, ids, mask, SearchSettings.from_config(greedy_config(num_beams=3, max_new_tokens=12)))
    for sequence, length in zip(found.sequences[:, 1:], found.lengths.tolist(), strict=True):
        ends = (sequence == 2).nonzero()[:, 0].tolist()
        assert (ends[0] + 1 if ends else 12) == length


def test_the_position_table_bounds_the_search():
    model = eager_model("d2l_transformer", 0, max_position_embeddings=10)
    ids, mask = sources(0)
    found = search(model, ids, mask, SearchSettings.from_config(greedy_config(num_beams=3, max_new_tokens=12)))
    expected = generate_sequences(model, ids, mask, greedy_config(num_beams=3, max_new_tokens=10), None)
    assert found.sequences.shape[1] == 11  # the start and 10 new tokens: the table, not max_new_tokens (12)
    assert torch.equal(found.sequences, expected)


@pytest.mark.parametrize("model_type", ["bahdanau", "d2l_transformer"])
@pytest.mark.parametrize("beams", [1, 4])
def test_settled_sentences_leave_the_batch(model_type, beams):
    """The decoder reads fewer rows than `generate()`'s, which keeps every sentence to the last step."""
    model = eager_model(model_type, 0)
    ids, mask = sources(0, batch=16)
    limits = torch.tensor([2, 3, 4, 20] * 4)  # most sentences end early, four run on to the 12-token limit
    config = greedy_config(num_beams=beams, max_new_tokens=12)
    rows = []
    hook = model.lm_head.register_forward_hook(lambda module, args, output: rows.append(output.shape[0]))
    expected = generate_sequences(model, ids, mask, config, limits)
    generate_rows, rows[:] = sum(rows), []
    found = search(model, ids, mask, SearchSettings.from_config(config), limits)
    hook.remove()
    assert torch.equal(found.sequences, expected)
    assert sum(rows) < 0.7 * generate_rows
    assert rows[0] == 16 * beams and rows[-1] <= 4 * beams  # all sentences at first, only the long ones at the end


@pytest.mark.parametrize("model_type", ["bahdanau", "d2l_transformer"])
def test_samples_end_within_their_bound_and_draw_from_the_model(model_type):
    model = make_model(model_type, seed=0)
    ids, mask = sources(0, batch=4)
    limits = torch.tensor([3, 5, 8, 12])
    config = greedy_config(do_sample=True, num_return_sequences=6, max_new_tokens=12, top_k=0)
    torch.manual_seed(0)
    found = search(model, ids, mask, SearchSettings.from_config(config), limits)
    assert found.sequences.shape[0] == 4 * 6
    assert (found.lengths <= limits.repeat_interleave(6)).all()
    assert len({tuple(row.tolist()) for row in found.sequences[18:]}) > 1  # samples, not one sequence 6 times
    by_hand = teacher_forced_log_probs(
        model, ids.repeat_interleave(6, 0), mask.repeat_interleave(6, 0), found.sequences, found.lengths
    )
    torch.testing.assert_close(found.log_probs, by_hand, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "settings, refused",
    [
        (dict(no_repeat_ngram_size=2), "no_repeat_ngram_size=2"),
        (dict(repetition_penalty=1.2), "repetition_penalty=1.2"),
        (dict(min_new_tokens=3), "min_new_tokens=3"),
        (dict(eos_token_id=[2, 5]), "eos_token_id=[2, 5] (one id)"),
        (dict(force_words_ids=[[5]]), "force_words_ids=[[5]]"),
        (dict(max_time=10.0), "max_time=10.0"),
    ],
)
def test_settings_the_search_does_not_do_are_refused_by_name(settings, refused):
    with pytest.raises(ValueError, match=re.escape(f"the search does not do {refused}")):
        SearchSettings.from_config(greedy_config(num_beams=4, **settings))


def test_settings_come_from_the_config_with_overrides_on_top():
    model = make_model("d2l_transformer")
    model.generation_config.num_beams = 5
    settings = SearchSettings.from_config(model.generation_config, model.config, length_penalty=0.5, num_beams=None)
    assert (settings.num_beams, settings.length_penalty, settings.max_new_tokens) == (5, 0.5, 128)
    assert (settings.eos_token_id, settings.decoder_start_token_id) == (2, 1)
    with pytest.raises(ValueError, match="the search takes no beam_width"):
        SearchSettings.from_config(model.generation_config, beam_width=3)
    with pytest.raises(ValueError, match="greedy search gives one translation"):
        search(model, *sources(0, 2), SearchSettings.from_config(greedy_config(), num_return_sequences=2))
