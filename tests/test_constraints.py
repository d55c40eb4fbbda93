"""Lexical constraints in the package's search (`hf_bahdanau.decoding.constraints`): a prefix and phrases to avoid
against `generate()`'s own logits processors as the oracle; required phrases placed by dynamic beam allocation,
every one of them, with a search that stays the unconstrained one where a sentence has none."""

from __future__ import annotations

import pytest
import torch
from helpers import MODEL_TYPES, greedy_config, make_model, random_ids

from hf_bahdanau.decoding.constraints import Constraints
from hf_bahdanau.decoding.search import search
from hf_bahdanau.decoding.settings import SearchSettings

BATCH = 6


def eager_model(model_type: str, seed: int = 1):
    """A tiny random model whose `</s>` logit is raised, so that sentences end at different steps."""
    model = make_model(model_type, seed=seed)
    with torch.no_grad():
        model.lm_head.weight[2] += 0.5 * model.lm_head.weight.mean(0)
        model.lm_head.weight[2] *= 3.0
    return model


def settings(model, **options) -> SearchSettings:
    return SearchSettings.from_config(greedy_config(max_new_tokens=16, **options), model.config)


def sources() -> tuple[torch.Tensor, torch.Tensor]:
    ids = random_ids(BATCH, 7, seed=3)
    return ids, torch.ones_like(ids)


def constraints(required=None, avoid=None, prefix=None, continues_word=None) -> Constraints:
    empty = [[] for _ in range(BATCH)]
    return Constraints.build(required or empty, avoid or empty, prefix or empty, continues_word)


def generated(output, row: int) -> list[int]:
    return output.sequences[row, 1 : 1 + output.lengths[row]].tolist()


def holds(sequence: list[int], phrase: list[int]) -> bool:
    return any(sequence[i : i + len(phrase)] == phrase for i in range(len(sequence) - len(phrase) + 1))


@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("beams", [1, 4])
def test_a_prefix_and_phrases_to_avoid_give_generates_tokens_under_its_own_processors(model_type, beams):
    model = eager_model(model_type)
    ids, mask = sources()
    prefixes = [[30, 31], [], [4], [5, 7, 8], [], [9]]
    avoided = [[[6], [9, 9], [24, 24]]] * BATCH

    def allowed(batch_id: int, sequence: torch.Tensor) -> list[int]:
        prefix, step = prefixes[batch_id], sequence.shape[0] - 1
        return [prefix[step]] if step < len(prefix) else list(range(model.config.vocab_size))

    expected = model.generate(input_ids=ids, attention_mask=mask, generation_config=greedy_config(
        num_beams=beams, max_new_tokens=16, bad_words_ids=avoided[0]), prefix_allowed_tokens_fn=allowed)  # fmt: skip
    found = search(
        model, ids, mask, settings(model, num_beams=beams), constraints=constraints(avoid=avoided, prefix=prefixes)
    )
    assert found.sequences.tolist() == expected[:, : found.sequences.shape[1]].tolist()
    assert (expected[:, found.sequences.shape[1] :] == 0).all()  # generate() pads where all have ended
    for row in range(BATCH):
        sequence = generated(found, row)
        assert sequence[: len(prefixes[row])] == prefixes[row]
        assert not any(holds(sequence, phrase) for phrase in avoided[row])


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_sampling_keeps_the_prefix_and_never_writes_an_avoided_token(model_type):
    model = eager_model(model_type)
    ids, mask = sources()
    torch.manual_seed(0)
    found = search(model, ids, mask, settings(model, do_sample=True, num_return_sequences=3),
                   constraints=constraints(avoid=[[[7], [8]]] * BATCH, prefix=[[11, 12]] * BATCH))  # fmt: skip
    for row in range(BATCH * 3):
        sequence = generated(found, row)
        assert sequence[:2] == [11, 12] and 7 not in sequence and 8 not in sequence


@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("beams", [2, 4])
def test_every_required_phrase_is_placed_multi_token_and_overlapping_alike(model_type, beams):
    model = eager_model(model_type)
    ids, mask = sources()
    required = [[[10, 11]], [[12], [13, 14, 15]], [[20]], [[10, 11], [11, 12]], [[5, 5, 5]], [[30], [31], [32]]]
    found = search(model, ids, mask, settings(model, num_beams=beams, num_return_sequences=2),
                   constraints=constraints(required=required))  # fmt: skip
    for row in range(BATCH * 2):
        placed = all(holds(generated(found, row), phrase) for phrase in required[row // 2])
        assert placed == bool(found.met[row])  # the search says which hypotheses hold them all
    assert found.met[::2].all()  # every best hypothesis does


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_a_sentence_without_phrases_searches_as_the_unconstrained_search_token_for_token(model_type):
    model = eager_model(model_type)
    ids, mask = sources()
    beam = settings(model, num_beams=4, num_return_sequences=3)
    plain = search(model, ids, mask, beam)
    assert search(model, ids, mask, beam, constraints=constraints()).sequences.tolist() == plain.sequences.tolist()
    required = [[[10, 11]], [], [[20]], [], [[12]], []]
    mixed = search(model, ids, mask, beam, constraints=constraints(required=required))
    for row in range(BATCH * 3):
        if not required[row // 3]:
            assert generated(mixed, row) == generated(plain, row)
            assert mixed.log_probs[row] == pytest.approx(plain.log_probs[row].item())
    greedy = settings(model)
    assert search(model, ids, mask, greedy, constraints=constraints()).sequences.tolist() == (
        search(model, ids, mask, greedy).sequences.tolist()
    )


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_a_sentence_with_phrases_stops_once_no_running_hypothesis_can_beat_its_result(model_type):
    model = eager_model(model_type)
    with torch.no_grad():
        model.lm_head.weight[2] *= 2.0  # sentences end early, so the rule shows before the bound
    forward, steps = model.forward, []
    model.forward = lambda *args, **kwargs: steps.append(1) or forward(*args, **kwargs)
    ids, mask = sources()
    required = [[[10]], [[12], [13, 14]], [[20]], [[11]], [[5, 5]], [[30], [31]]]
    beam = settings(model, num_beams=4)
    together = search(model, ids, mask, beam, constraints=constraints(required=required))
    for row in range(BATCH):
        steps.clear()
        alone = search(model, ids[row : row + 1], mask[row : row + 1], beam,
                       constraints=Constraints.build([required[row]], [[]], [[]]))  # fmt: skip
        assert len(steps) == alone.lengths[0]  # no step after the hypothesis it returns
        assert alone.met[0] and generated(alone, 0) == generated(together, row)
    assert together.lengths.min() < 16  # some sentences end before the bound


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_phrases_longer_than_the_bound_end_the_search_at_the_bound_and_say_so(model_type):
    model = eager_model(model_type)
    ids, mask = sources()
    required = [[[7] * 20], [[10]], [], [], [], []]
    found = search(model, ids, mask, settings(model, num_beams=3), constraints=constraints(required=required))
    assert found.lengths[0] == 16 and not found.met[0]  # cut at max_new_tokens, reported unmet
    assert found.met[1:].all() and holds(generated(found, 1), [10])


def test_no_token_continues_the_word_of_a_placed_phrase():
    model = eager_model("d2l_transformer")
    ids, mask = sources()
    required = [[[10]] for _ in range(BATCH)]
    plain = search(model, ids, mask, settings(model, num_beams=3), constraints=constraints(required=required))
    followers = {generated(plain, row)[generated(plain, row).index(10) + 1] for row in range(BATCH)}
    assert followers - {2}
    continues_word = torch.zeros(model.config.vocab_size, dtype=torch.bool)
    continues_word[list(followers - {2})] = True  # the tokens that followed the phrase now continue its word
    found = search(
        model, ids, mask, settings(model, num_beams=3), constraints=constraints(required, continues_word=continues_word)
    )
    for row in range(BATCH):
        sequence = generated(found, row)
        after = [sequence[i + 1] for i in range(len(sequence) - 1) if sequence[i] == 10]
        assert 10 in sequence and not any(continues_word[token] for token in after)


def test_greedy_search_refuses_required_phrases():
    model = eager_model("bahdanau")
    ids, mask = sources()
    with pytest.raises(ValueError, match="beam search"):
        search(model, ids, mask, settings(model), constraints=constraints(required=[[[10]]] * BATCH))
