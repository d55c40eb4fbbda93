"""The demo (issue 29): the Gradio page in a real browser (Debian's chromium driven by Playwright), what the page
computes, and the Space that `publish --space` writes (never uploaded: `HfApi` patched)."""

from __future__ import annotations

import pytest
import torch
from helpers import MODEL_TYPES, make_model

from hf_bahdanau.attention_maps import attention_maps
from hf_bahdanau.pipelines import save_for_pipeline
from hf_bahdanau.tokenization import train_tokenizer
from hf_bahdanau.translating import length_bound, source_ids, translate_ids

CORPUS = [
    "Ein Mann fährt Fahrrad.", "A man is riding a bicycle.", "Zwei Hunde spielen im Schnee.",
    "Two dogs are playing in the snow.", "Eine Frau liest ein Buch im Park.", "A woman is reading a book in the park.",
    "Kinder laufen am Strand entlang.", "Children are running along the beach.", "Ein Junge springt ins Wasser.",
    "A boy jumps into the water.", "Die Leute warten auf den Bus.", "People are waiting for the bus.",
]  # fmt: skip
SENTENCE = "Zwei Hunde spielen im Schnee."


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(CORPUS, 120, min_freq=1)


@pytest.fixture(scope="module", params=MODEL_TYPES)
def model(request, tokenizer):
    """A tiny random model of each type that searches 3 beams by default."""
    model = make_model(request.param, width=32, vocab_size=len(tokenizer))
    model.generation_config.num_beams = 3
    model.config.source_language, model.config.target_language = "de", "en"
    return model


@pytest.fixture(scope="module")
def folder(model, tokenizer, tmp_path_factory):
    return save_for_pipeline(model, tokenizer, tmp_path_factory.mktemp("tiny") / "model")


def test_sampling_gives_n_samples_each_within_its_sources_length_bound(model, tokenizer, monkeypatch):
    generated = []  # the sequences generate returns: (sources * samples, 1 + new tokens)
    generate = model.generate

    def recording(*args, **kwargs):
        outputs = generate(*args, **kwargs)
        generated.append(outputs.sequences[:, 1:])
        return outputs

    monkeypatch.setattr(model, "generate", recording)
    rows = source_ids(tokenizer, ["Ein Junge.", "Eine Frau liest ein Buch im Park am Strand."], 512)
    torch.manual_seed(0)
    found = translate_ids(model, tokenizer, rows, 4, scores=True, num_beams=1, do_sample=True)
    assert [len(hypotheses) for hypotheses in found] == [4, 4]
    assert all(hypothesis.score <= 0 for hypotheses in found for hypothesis in hypotheses)
    assert len({hypothesis.text for hypothesis in found[1]}) > 1  # samples, not one translation 4 times
    eos = model.generation_config.eos_token_id
    for sequence, row in zip(generated[0], [rows[0]] * 4 + [rows[1]] * 4, strict=True):
        ends = (sequence == eos).nonzero()
        assert len(ends) and ends[0].item() < length_bound(len(row))  # </s> by the bound of its own source


def test_attention_maps_of_a_given_translation_are_those_of_the_generated_one(model, tokenizer):
    generated = attention_maps(model, tokenizer, SENTENCE, num_beams=1)
    inputs = tokenizer(SENTENCE, return_tensors="pt")
    ids = model.generate(**inputs, num_beams=1, pad_token_id=tokenizer.pad_token_id)[0, 1:].tolist()
    given = attention_maps(model, tokenizer, SENTENCE, target_ids=ids)
    assert given.translation == generated.translation and given.target_tokens == generated.target_tokens
    torch.testing.assert_close(given.cross, generated.cross)
    # each hypothesis of an n-best list carries its ids, which give the maps of that translation
    hypotheses = translate_ids(model, tokenizer, source_ids(tokenizer, [SENTENCE], 512), 3, num_beams=3)[0]
    for hypothesis in hypotheses:
        assert hypothesis.ids[-1] == model.generation_config.eos_token_id or len(hypothesis.ids) >= 8
        maps = attention_maps(model, tokenizer, SENTENCE, target_ids=hypothesis.ids)
        assert maps.translation == hypothesis.text and maps.cross.shape[2] == len(hypothesis.ids)
