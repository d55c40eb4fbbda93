"""The translation pipeline, for both model types: v4 output format, batching, generation parameters, empty and
over-long inputs, padding sides, remote-code loading without the package, and attention maps for heatmaps."""

from __future__ import annotations

import ast
import json
import logging
import os

import pytest
import torch
from helpers import MODEL_TYPES, PIPELINE_NEW_TOKENS, WORD_CORPUS, WORD_TEXTS, make_model
from transformers import pipeline
from transformers.pipelines import REMOVED_TASKS, SUPPORTED_TASKS, get_supported_tasks
from transformers.pipelines.base import pad_collate_fn

from hf_bahdanau import Translator, plot_attention_maps
from hf_bahdanau.data.tokenization import train_tokenizer
from hf_bahdanau.decoding.attention_maps import display_tokens
from hf_bahdanau.models.pipelines import (
    REGISTERED_ALIASES,
    TASK,
    TASK_ALIASES,
    TranslationPipeline,
    register_pipeline,
    save_for_pipeline,
    transformers_provides,
)

CORPUS = WORD_CORPUS  # conftest's `tokenizer` fixture learns the module's CORPUS


def make_tokenizer(**attributes):
    tokenizer = train_tokenizer(CORPUS, None, model="word", min_freq=1)
    for name, value in attributes.items():
        setattr(tokenizer, name, value)
    return tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return make_tokenizer()


@pytest.fixture(scope="module", params=MODEL_TYPES)
def model(request, tokenizer):
    return make_model(request.param, vocab_size=len(tokenizer))


@pytest.fixture(scope="module")
def pipe(model, tokenizer):
    return pipeline(TASK, model=model, tokenizer=tokenizer, max_new_tokens=PIPELINE_NEW_TOKENS)


def by_hand(model, tokenizer, text, **generate_kwargs):
    """Reference translation: tokenizer -> model.generate -> decode."""
    inputs = tokenizer(text, return_tensors="pt")
    output = model.generate(
        **inputs, max_new_tokens=PIPELINE_NEW_TOKENS, pad_token_id=tokenizer.pad_token_id, **generate_kwargs
    )
    return tokenizer.decode(output[0], skip_special_tokens=True)


# ---- output format, batching, generation parameters -----------------------------------------------------


def test_registered_task(pipe):
    register_pipeline()  # idempotent
    assert TASK in get_supported_tasks()
    assert isinstance(pipe, TranslationPipeline) and pipe.task == TASK


def test_output_format_for_string_and_list(pipe):
    single = pipe(WORD_TEXTS[0])
    assert isinstance(single, list) and len(single) == 1 and set(single[0]) == {"translation_text"}
    assert isinstance(single[0]["translation_text"], str)
    many = pipe(WORD_TEXTS[:2])
    assert isinstance(many, list) and len(many) == 2
    assert all(isinstance(result, dict) and set(result) == {"translation_text"} for result in many)
    assert many[0] == single[0]
    assert pipe([]) == []


def test_rejects_non_strings(pipe):
    with pytest.raises(TypeError):
        pipe([WORD_TEXTS[0], 3])
    with pytest.raises(TypeError):
        pipe(5)


def test_matches_generate_by_hand(pipe, model, tokenizer):
    expected = [by_hand(model, tokenizer, text) for text in WORD_TEXTS]  # the model's defaults: 4 beams
    assert [result["translation_text"] for result in pipe(WORD_TEXTS)] == expected


def test_batching_matches_one_by_one(pipe):
    one_by_one = [pipe(text)[0] for text in WORD_TEXTS]
    assert pipe(WORD_TEXTS, batch_size=2) == one_by_one
    assert pipe(WORD_TEXTS, batch_size=5, num_beams=1) == [pipe(text, num_beams=1)[0] for text in WORD_TEXTS]


def test_generate_kwargs_pass_through(pipe, model, tokenizer):
    for result in pipe(WORD_TEXTS, max_new_tokens=1, batch_size=2):
        assert len(result["translation_text"].split()) <= 1
    expected = [by_hand(model, tokenizer, text, num_beams=3) for text in WORD_TEXTS]
    assert [result["translation_text"] for result in pipe(WORD_TEXTS, num_beams=3)] == expected
    # Parameters given at construction apply to every call; a call's own parameters win.
    short = pipeline(TASK, model=model, tokenizer=tokenizer, max_new_tokens=1)
    assert all(len(result["translation_text"].split()) <= 1 for result in short(WORD_TEXTS))
    assert short(WORD_TEXTS[2], max_new_tokens=PIPELINE_NEW_TOKENS) == pipe(WORD_TEXTS[2])


def test_num_return_sequences_gives_lists(pipe):
    results = pipe(WORD_TEXTS[:2], num_beams=3, num_return_sequences=2, batch_size=2)
    assert len(results) == 2 and all(len(result) == 2 for result in results)
    assert results[0][0] == pipe(WORD_TEXTS[0], num_beams=3)[0]
    assert len(pipe(WORD_TEXTS[0], num_beams=3, num_return_sequences=3)) == 3


# ---- empty, over-long and padded inputs ---------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 2, 4])
def test_empty_strings_skip_the_model(pipe, monkeypatch, batch_size):
    expected = [pipe(text)[0] for text in WORD_TEXTS[:2]]
    rows = []
    generate = pipe.model.generate

    def spy(*args, **kwargs):
        rows.append(kwargs["attention_mask"].shape[0])
        return generate(*args, **kwargs)

    monkeypatch.setattr(pipe.model, "generate", spy)
    results = pipe([WORD_TEXTS[0], "", WORD_TEXTS[1], "   "], batch_size=batch_size)
    assert results == [expected[0], {"translation_text": ""}, expected[1], {"translation_text": ""}]
    assert sum(rows) == 2  # only the two real sentences reached the model
    rows.clear()
    assert pipe(["", ""], batch_size=batch_size) == [{"translation_text": ""}] * 2
    assert pipe("") == [{"translation_text": ""}]
    assert rows == []


def test_overlong_input_is_truncated_with_a_warning(model, caplog, monkeypatch):
    tokenizer = make_tokenizer(model_max_length=4)
    truncating = pipeline(TASK, model=model, tokenizer=tokenizer, max_new_tokens=PIPELINE_NEW_TOKENS)
    text = WORD_TEXTS[2]  # 11 tokens with </s>
    full = tokenizer(text)["input_ids"]
    calls = []
    tokenize = type(tokenizer).__call__

    def spy(self, *args, **kwargs):
        calls.append(args)
        return tokenize(self, *args, **kwargs)

    monkeypatch.setattr(type(tokenizer), "__call__", spy)  # `tokenizer(...)` looks `__call__` up on the class
    with caplog.at_level(logging.WARNING, logger="hf_bahdanau.models.source_length"):
        preprocessed = truncating.preprocess(text)
    assert len(calls) == 1  # tokenized once
    assert "truncated to the model's limit of 4 tokens" in caplog.text
    assert preprocessed["input_ids"].tolist() == [full[:3] + [tokenizer.eos_token_id]]  # the final </s> kept
    assert preprocessed["attention_mask"].tolist() == [[1] * 4]
    monkeypatch.undo()
    result = truncating(text)
    inputs = tokenizer(text, truncation=True, max_length=4, return_tensors="pt")
    assert inputs["input_ids"].tolist() == preprocessed["input_ids"].tolist()
    output = model.generate(**inputs, max_new_tokens=PIPELINE_NEW_TOKENS)
    assert result == [{"translation_text": tokenizer.decode(output[0], skip_special_tokens=True)}]


def test_a_source_longer_than_the_position_table_is_truncated_with_a_warning(tokenizer, caplog):
    short_positions = make_model("d2l_transformer", vocab_size=len(tokenizer), max_position_embeddings=5)
    text = WORD_TEXTS[2]  # 11 tokens with </s>
    with pytest.raises(ValueError, match="max_position_embeddings is 5"):  # the model itself refuses
        short_positions.generate(**tokenizer(text, return_tensors="pt"), max_new_tokens=2)
    truncating = pipeline(TASK, model=short_positions, tokenizer=tokenizer, max_new_tokens=4)
    with caplog.at_level(logging.WARNING, logger="hf_bahdanau.models.source_length"):
        result = truncating(text)
    assert "input of 11 tokens truncated to the model's limit of 5 tokens" in caplog.text
    ids = tokenizer(text)["input_ids"]
    output = short_positions.generate(torch.tensor([ids[:4] + ids[-1:]]), max_new_tokens=4)
    assert result == [{"translation_text": tokenizer.decode(output[0], skip_special_tokens=True)}]


def test_left_padding_equals_right_padding(model, pipe):
    left = pipeline(
        TASK, model=model, tokenizer=make_tokenizer(padding_side="left"), max_new_tokens=PIPELINE_NEW_TOKENS
    )
    inputs = pad_collate_fn(left.tokenizer, None)([left.preprocess(text) for text in WORD_TEXTS])  # the pipeline's
    assert not inputs["attention_mask"][:, 0].all() and inputs["attention_mask"][:, -1].all()  # left-padded
    for kwargs in ({}, {"num_beams": 1}):
        assert left(WORD_TEXTS, batch_size=len(WORD_TEXTS), **kwargs) == pipe(
            WORD_TEXTS, batch_size=len(WORD_TEXTS), **kwargs
        )
        assert left(WORD_TEXTS, batch_size=len(WORD_TEXTS), **kwargs) == [
            pipe(text, **kwargs)[0] for text in WORD_TEXTS
        ]


# ---- saving and loading ---------------------------------------------------------------------------------------


def test_save_for_pipeline_writes_code_and_config(model, tokenizer, pipe, tmp_path):
    folder = save_for_pipeline(model, tokenizer, tmp_path / "saved")
    modeling_file = f"{type(model).__module__.split('.')[-1]}.py"
    assert {"pipelines.py", modeling_file, "modeling_translation.py", "model.safetensors"} <= set(os.listdir(folder))
    config = json.loads((folder / "config.json").read_text())
    assert config["custom_pipelines"] == {
        task: {"impl": "pipelines.TranslationPipeline", "pt": ["AutoModelForSeq2SeqLM"], "type": "text"}
        for task in (TASK, "bahdanau-translation", "translation")
    }
    assert "AutoModelForSeq2SeqLM" in config["auto_map"]
    assert not hasattr(model.config, "custom_pipelines")  # only the saved copy names the pipeline
    imported = {  # anywhere in the file, inside functions too: the remote code needs nothing of this package
        (
            getattr(node, "level", 0),
            (node.module if isinstance(node, ast.ImportFrom) else node.names[0].name).split(".")[0],
        )
        for node in ast.walk(ast.parse((folder / "pipelines.py").read_text()))
        if isinstance(node, (ast.Import, ast.ImportFrom))
    }
    assert (1, "source_length") in imported and "source_length.py" in os.listdir(folder)  # but its sibling file
    imported.remove((1, "source_length"))
    assert {module for level, module in imported} <= {
        "__future__",
        "hashlib",
        "json",
        "logging",
        "math",
        "os",
        "pathlib",
        "typing",
        "torch",
        "transformers",
    }
    assert all(level == 0 for level, _ in imported)
    loaded = pipeline(TASK, model=str(folder), pipeline_class=TranslationPipeline, max_new_tokens=PIPELINE_NEW_TOKENS)
    assert type(loaded.model) is type(model)
    assert loaded(WORD_TEXTS, batch_size=2) == pipe(WORD_TEXTS)


def test_registered_tasks_load_a_saved_folder_without_remote_code(model, tokenizer, pipe, tmp_path):
    """In-process, the registered pipeline and model classes are used; the folder's remote code is not needed."""
    folder = save_for_pipeline(model, tokenizer, tmp_path / "saved")
    for task in (TASK, *REGISTERED_ALIASES):
        loaded = pipeline(task, model=str(folder), max_new_tokens=PIPELINE_NEW_TOKENS)
        assert type(loaded) is TranslationPipeline and type(loaded.model) is type(model)
        assert loaded(WORD_TEXTS, batch_size=2) == pipe(WORD_TEXTS)


@pytest.mark.skipif(transformers_provides("translation"), reason="transformers has its own translation pipeline")
def test_translation_as_v4_users_type_it_is_a_saved_folders_remote_code(model, tokenizer, pipe, tmp_path):
    """transformers 5 removed `pipeline("translation")`, and this package leaves transformers' tables alone: a saved
    folder names its pipeline "translation" too (run as its remote code); a model object gets transformers' refusal."""
    assert "translation" in TASK_ALIASES and "translation" not in REGISTERED_ALIASES
    assert "translation" in REMOVED_TASKS  # after `register_pipeline` (run on import)
    with pytest.raises(KeyError, match="translation has been removed"):
        pipeline("translation", model=model, tokenizer=tokenizer)
    folder = save_for_pipeline(model, tokenizer, tmp_path / "saved")
    with pytest.raises(ValueError, match="trust_remote_code"):
        pipeline("translation", model=str(folder))
    loaded = pipeline("translation", model=str(folder), trust_remote_code=True, max_new_tokens=PIPELINE_NEW_TOKENS)
    assert type(loaded).__module__.startswith("transformers_modules"), type(loaded).__module__
    assert loaded(WORD_TEXTS, batch_size=2) == pipe(WORD_TEXTS)


@pytest.mark.skipif(transformers_provides("translation"), reason="transformers has its own translation pipeline")
def test_terminology_goes_through_the_registered_translator_in_a_folders_own_code_too(
    model, tokenizer, tmp_path, monkeypatch
):
    """`prefix=` and `avoid=` go through the Translator that `import hf_bahdanau` registered, from the package's
    pipeline and from a saved folder's own copy of its code alike; with none registered they are refused."""
    folder = save_for_pipeline(model, tokenizer, tmp_path / "saved")
    options = dict(prefix="the", avoid=["tea"])
    expected = Translator(model, tokenizer).translate(WORD_TEXTS[:3], max_new_tokens=PIPELINE_NEW_TOKENS, **options)
    expected = [{"translation_text": translation.text} for translation in expected]
    ours = pipeline(TASK, model=str(folder), max_new_tokens=PIPELINE_NEW_TOKENS)
    remote = pipeline("translation", model=str(folder), trust_remote_code=True, max_new_tokens=PIPELINE_NEW_TOKENS)
    assert type(remote).__module__.startswith("transformers_modules") and type(remote).translator_class is None
    assert ours(WORD_TEXTS[:3], **options) == remote(WORD_TEXTS[:3], **options) == expected
    monkeypatch.setattr(TranslationPipeline, "translator_class", None)  # as where the package is not imported
    for pipe in (ours, remote):
        with pytest.raises(ValueError, match="need the hf_bahdanau package"):
            pipe(WORD_TEXTS[:1], **options)


@pytest.mark.parametrize("impl", ["transformers.pipelines.text2text_generation.TranslationPipeline", "class"])
def test_a_translation_pipeline_of_transformers_stays_theirs(impl, monkeypatch):
    """transformers 5 names its impls by string, v4 by class: either way a translation task of theirs and its refusal
    stay as they are."""
    if impl == "class":
        impl = type("TranslationPipeline", (), {"__module__": "transformers.pipelines.text2text_generation"})
    theirs = {"impl": impl, "pt": (), "type": "text"}
    monkeypatch.setitem(SUPPORTED_TASKS, "translation", theirs)
    monkeypatch.setitem(REMOVED_TASKS, "translation", "theirs")
    assert transformers_provides("translation") and not transformers_provides(TASK)
    register_pipeline()
    assert SUPPORTED_TASKS["translation"] is theirs and REMOVED_TASKS["translation"] == "theirs"
    assert SUPPORTED_TASKS[TASK]["impl"] is TranslationPipeline


@pytest.mark.slow
def test_remote_code_pipeline_without_the_package(without_the_package):
    """Every task name's pipeline, loaded from the folder's own code where `hf_bahdanau` cannot be imported
    (conftest's `without_the_package`), translates as the package's pipeline does."""
    for model_type, found in without_the_package.items():
        tokenizer = make_tokenizer()
        expected = pipeline(
            TASK, model=found["pipeline_model"], tokenizer=tokenizer, max_new_tokens=PIPELINE_NEW_TOKENS
        )(found["pipeline_texts"], batch_size=2)
        assert found["pipeline_modules"] == [["transformers_modules"] * 2] * (1 + len(TASK_ALIASES)), model_type
        assert found["translations"] == [expected] * (1 + len(TASK_ALIASES)), model_type


# ---- attention weights ------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_beams", [1, 3])
def test_attention_maps_of_a_translation(model, tokenizer, pipe, num_beams):
    text = WORD_TEXTS[1]
    maps = Translator(model, tokenizer).attention_maps(text, num_beams=num_beams, max_new_tokens=PIPELINE_NEW_TOKENS)
    assert maps.translation == pipe(text, num_beams=num_beams)[0]["translation_text"]
    assert maps.source_tokens == tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"])  # word-level: as is
    tgt, src = len(maps.target_tokens), len(maps.source_tokens)
    layers = 1 if model.config.model_type == "bahdanau" else model.config.decoder_layers
    heads = 1 if model.config.model_type == "bahdanau" else model.config.attention_heads
    assert maps.cross.shape == (layers, heads, tgt, src) and 1 <= tgt <= PIPELINE_NEW_TOKENS
    torch.testing.assert_close(maps.cross.sum(-1), torch.ones(layers, heads, tgt))
    if model.config.model_type == "bahdanau":
        assert maps.encoder is None and maps.decoder is None
    else:
        assert maps.encoder.shape == (model.config.encoder_layers, heads, src, src)
        assert maps.decoder.shape == (layers, heads, tgt, tgt) and torch.all(maps.decoder.triu(1) == 0)
    assert maps.translation == tokenizer.convert_tokens_to_string(
        [token for token in maps.target_tokens if token not in tokenizer.all_special_tokens]
    )


def test_attention_matches_generate_cross_attentions(model, tokenizer):
    """Greedy: the teacher-forced weights are those `generate` reports step by step."""
    text = WORD_TEXTS[2]
    maps = Translator(model, tokenizer).attention_maps(text, num_beams=1, max_new_tokens=PIPELINE_NEW_TOKENS)
    output = model.generate(
        **tokenizer(text, return_tensors="pt"),
        num_beams=1,
        max_new_tokens=PIPELINE_NEW_TOKENS,
        return_dict_in_generate=True,
        output_attentions=True,
    )
    # steps x layers x (batch, heads, 1, src) -> (layers, heads, tgt, src)
    steps = torch.stack([torch.stack([layer[0] for layer in step]) for step in output.cross_attentions], dim=2)
    torch.testing.assert_close(maps.cross, steps[:, :, : len(maps.target_tokens), 0])


@pytest.mark.slow  # draws up to three attention figures
def test_attention_heatmaps_are_written_per_attention_kind(model, tokenizer, tmp_path):
    maps = Translator(model, tokenizer).attention_maps(WORD_TEXTS[0], num_beams=1, max_new_tokens=PIPELINE_NEW_TOKENS)
    written = plot_attention_maps(maps, WORD_TEXTS[0], tmp_path / "attention.png")
    expected = ["attention.png"] + ([] if maps.encoder is None else ["attention-encoder.png", "attention-decoder.png"])
    assert [path.name for path in written] == expected
    assert all(path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for path in written)


def test_attention_rejects_empty_text(model, tokenizer):
    with pytest.raises(ValueError, match="empty"):
        Translator(model, tokenizer).attention_maps("  ")


def test_subword_labels_drop_word_marks_and_keep_punctuation():
    tokenizer = train_tokenizer(["Das Fahrrad fährt.", "Ein Rad (rot)."] * 5, 40, min_freq=1)
    ids = tokenizer("Fahrrad (rot).")["input_ids"]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    labels = display_tokens(tokenizer, ids)
    assert tokens[-3:] == [")", ".", "</s>"] and labels[-3:] == [")", ".", "</s>"]
    assert [label for token, label in zip(tokens, labels, strict=True) if token.startswith("▁")] == [
        token[1:] or token for token in tokens if token.startswith("▁")
    ]
    assert all(label.startswith("-") for token, label in zip(tokens, labels, strict=True) if token.isalpha())
