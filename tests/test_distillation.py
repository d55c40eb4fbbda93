"""`hf-bahdanau distill` on a tiny teacher: the translation cache and its key, resuming, mixing, the student's card,
and the refusals of a student whose languages or tokenizer differ from the teacher's."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
from conftest import load_script
from helpers import TINY_CORPUS, error_of, tiny_translator

from hf_bahdanau.cli import main
from hf_bahdanau.data.corpora import load_parallel_corpus
from hf_bahdanau.data.tokenization import train_tokenizer
from hf_bahdanau.models.pipelines import save_for_pipeline, tokenizer_fingerprint
from hf_bahdanau.publishing.card import card_data, make_card
from hf_bahdanau.publishing.evaluations import read_evaluations
from hf_bahdanau.training.distillation import Decoding, student_pairs, teacher_translations, teacher_translator
from hf_bahdanau.training.run_folder import locked_output_dir

GERMAN, ENGLISH = TINY_CORPUS[0::2], TINY_CORPUS[1::2]  # six aligned pairs
DECODING = Decoding(engine="torch", num_beams=5, max_new_tokens=8, batch_size=4)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Multi30k-layout folder whose train, validation and test splits are the six tiny pairs."""
    folder = tmp_path_factory.mktemp("corpus")
    for split in ("train", "val", "test_2016_flickr"):
        (folder / f"{split}.de").write_text("\n".join(GERMAN) + "\n", encoding="utf-8")
        (folder / f"{split}.en").write_text("\n".join(ENGLISH) + "\n", encoding="utf-8")
    return folder


def save_tiny_model(model_type: str, tokenizer, corpus_dir: Path, folder: Path) -> Path:
    """A tiny random De->En model saved as `train` saves one (with the corpus settings `distill` reads)."""
    model = tiny_translator(model_type, tokenizer, beams=5, max_new_tokens=8, source_language="de",
                            target_language="en")  # fmt: skip
    save_for_pipeline(model, tokenizer, folder)
    settings = {"data": str(corpus_dir), "data_path": None, "src_lang": "de", "tgt_lang": "en",
                "test_split": "test_2016_flickr", "d2l_normalize": False, "max_source_length": 64}  # fmt: skip
    (folder / "translation_data.json").write_text(json.dumps(settings), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def teacher(tokenizer, corpus_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny RNN teacher."""
    return save_tiny_model("bahdanau", tokenizer, corpus_dir, tmp_path_factory.mktemp("teacher") / "teacher")


@pytest.fixture(scope="module")
def train_split(corpus_dir: Path):
    return load_parallel_corpus(corpus_dir, "de", "en", splits=("train",))["train"]


def counting(translate, calls: list[int]):
    """`translate`, recording the number of sentences of each call in `calls`."""

    def counted(texts):
        calls.append(len(texts))
        return translate(texts)

    return counted


def test_cache_is_reused_for_the_same_teacher_corpus_and_decoding(teacher, train_split, tmp_path):
    calls: list[int] = []
    translate = counting(teacher_translator(teacher, DECODING), calls)
    first = teacher_translations(teacher, train_split, "de", "en", DECODING, tmp_path, translate=translate)
    assert calls == [6]
    assert first.dataset["translation"] == teacher_translator(teacher, DECODING)(GERMAN)  # the teacher's own output
    assert first.dataset["source"] == GERMAN and first.dataset["reference"] == ENGLISH
    (teacher / "eval_results.json").write_text('{"results": []}', encoding="utf-8")  # not a model file
    again = teacher_translations(teacher, train_split, "de", "en", DECODING, tmp_path, translate=translate)
    (teacher / "eval_results.json").unlink()
    assert calls == [6], "the same key translated again"
    assert again.folder == first.folder and again.dataset["translation"] == first.dataset["translation"]
    assert again.info["disk_bytes"] == sum(
        p.stat().st_size for p in (first.folder / "dataset").rglob("*") if p.is_file()
    )


def test_a_changed_decoding_setting_or_teacher_file_translates_anew(teacher, train_split, tmp_path):
    calls: list[int] = []
    translate = counting(teacher_translator(teacher, DECODING), calls)
    first = teacher_translations(teacher, train_split, "de", "en", DECODING, tmp_path, translate=translate)
    greedy = Decoding(engine="torch", num_beams=1, max_new_tokens=8, batch_size=4)
    other = teacher_translations(teacher, train_split, "de", "en", greedy, tmp_path, translate=translate)
    assert calls == [6, 6] and other.folder != first.folder
    generation = teacher / "generation_config.json"
    saved = generation.read_text(encoding="utf-8")
    generation.write_text(saved.replace('"num_beams": 5', '"num_beams": 4'), encoding="utf-8")
    try:
        changed = teacher_translations(teacher, train_split, "de", "en", DECODING, tmp_path, translate=translate)
    finally:
        generation.write_text(saved, encoding="utf-8")
    assert calls == [6, 6, 6] and changed.folder not in (first.folder, other.folder)
    assert changed.info["teacher_fingerprint"] != first.info["teacher_fingerprint"]


def test_an_interrupted_translation_resumes_from_the_chunks_written(teacher, train_split, tmp_path):
    calls: list[int] = []
    translate = counting(teacher_translator(teacher, DECODING), calls)
    with pytest.raises(KeyboardInterrupt):
        teacher_translations(teacher, train_split, "de", "en", DECODING, tmp_path, translate=translate, chunk_size=2,
                             stop_after=2)  # fmt: skip
    assert calls == [2, 2]
    resumed = teacher_translations(teacher, train_split, "de", "en", DECODING, tmp_path, translate=translate,
                                   chunk_size=2)  # fmt: skip
    assert calls == [2, 2, 2], "the written chunks were translated again"
    assert resumed.dataset["translation"] == teacher_translator(teacher, DECODING)(GERMAN)
    assert not list(resumed.folder.glob("chunks*")) and resumed.info["teacher_seconds"] > 0


def test_mixing_adds_each_source_with_its_reference_after_the_teacher_pairs(teacher, train_split, tmp_path):
    cached = teacher_translations(teacher, train_split, "de", "en", DECODING, tmp_path).dataset
    cached = cached.map(lambda row, i: {"translation": "" if i == 0 else row["translation"]}, with_indices=True)
    teacher_only = student_pairs(cached, "de", "en")
    expected = [{"de": s, "en": t} for s, t in zip(GERMAN[1:], cached["translation"][1:], strict=True)]
    assert teacher_only["translation"] == expected  # the empty translation left out
    mixed = student_pairs(cached, "de", "en", mix_references=True)
    references = [{"de": s, "en": t} for s, t in zip(GERMAN, ENGLISH, strict=True)]
    assert mixed["translation"] == expected + references


def distill_argv(teacher: Path, output: Path, cache: Path, *extra: str) -> list[str]:
    """A tiny `distill`: an RNN student 16 wide, one epoch of batches of 2, beam 1 in evaluation, then `extra`."""
    return ["distill", "--teacher", str(teacher), "--output-dir", str(output), "--distillation-cache", str(cache),
            "--distill-engine", "torch", "--distill-max-new-tokens", "8", "--embedding_size", "16", "--hidden_size",
            "16", "--per_device_train_batch_size", "2", "--num_train_epochs", "1", "--eval_steps", "100",
            "--save_steps", "100", "--logging_steps", "1", "--generation_max_length", "8", "--generation_num_beams",
            "1", "--max_eval_samples", "4", *extra]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("mix", [False, True])
def test_distill_trains_the_student_on_the_teacher_data_and_its_card_names_both(
    teacher, tokenizer, tmp_path, monkeypatch, mix
):
    assert main(["evaluate", "--model", str(teacher), "--num-beams", "1", "--max-new-tokens", "8"]) == 0
    output = tmp_path / "student"
    argv = distill_argv(teacher, output, tmp_path / "cache", *(["--mix-references"] if mix else []))
    assert main(argv) == 0
    record = json.loads((output / "distillation.json").read_text(encoding="utf-8"))
    kept = sum(1 for text in teacher_translator(teacher, DECODING)(GERMAN) if text.strip())
    assert record["data"]["train_pairs"] == kept + 6 * mix and record["data"]["mix_references"] is mix
    state = json.loads((output / "trainer_state.json").read_text(encoding="utf-8"))
    assert state["global_step"] == math.ceil(record["data"]["train_pairs"] / 2)  # one epoch of the student's pairs
    assert record["teacher"]["name"] == "teacher" and record["teacher"]["model_type"] == "bahdanau"
    assert record["decoding"] == {"engine": "torch", "num_beams": 5, "max_new_tokens": 8, "batch_size": 32}
    assert record["data"]["pairs"] == 6 and record["data"]["disk_bytes"] > 0
    teacher_bleu = read_evaluations(teacher)[0]["bleu"]
    assert [score["bleu"] for score in record["teacher_scores"]] == [teacher_bleu]
    from transformers import AutoTokenizer

    assert tokenizer_fingerprint(AutoTokenizer.from_pretrained(output)) == tokenizer_fingerprint(tokenizer)
    assert main(["evaluate", "--model", str(output), "--num-beams", "1", "--max-new-tokens", "8"]) == 0
    student_bleu = read_evaluations(output)[0]["bleu"]
    card = make_card(output, "someone/student").text
    assert "## Distillation" in card and "`teacher`" in card
    assert "knowledge-distillation" in card_data(output, "someone/student").tags
    assert f"| {teacher_bleu} | {student_bleu} |" in card
    assert "hf-bahdanau distill --teacher" in card  # the recorded command
    assert ("mixed with the original references" in card) is mix


@pytest.mark.slow
def test_a_student_started_from_its_teacher_begins_at_the_teacher_weights(teacher, tmp_path):
    from safetensors.torch import load_file

    output = tmp_path / "student"
    argv = ["distill", "--teacher", str(teacher), "--model_name_or_path", str(teacher), "--output-dir", str(output),
            "--distillation-cache", str(tmp_path / "cache"), "--distill-engine", "torch", "--distill-max-new-tokens",
            "8", "--per_device_train_batch_size", "2", "--num_train_epochs", "1", "--learning_rate", "0",
            "--save_steps", "100", "--eval_steps", "100", "--generation_max_length", "8", "--generation_num_beams",
            "1", "--max_eval_samples", "4", "--no_quality_estimator"]  # fmt: skip
    assert main(argv) == 0
    state = json.loads((output / "trainer_state.json").read_text(encoding="utf-8"))
    assert state["global_step"] > 0  # it trained on the teacher's translations, at a learning rate of 0
    ours, theirs = load_file(output / "model.safetensors"), load_file(teacher / "model.safetensors")
    assert ours.keys() == theirs.keys() and all(ours[name].equal(theirs[name]) for name in theirs)


@pytest.mark.parametrize("place", ["under a file", "locked by another run"])
def test_distill_refuses_an_output_dir_train_cannot_use_before_the_teacher_translates(teacher, tmp_path, caplog, place):
    (tmp_path / "file").write_text("mine")
    output = tmp_path / "file" / "student" if place == "under a file" else tmp_path / "student"
    with locked_output_dir(tmp_path / "student"):
        error = error_of(distill_argv(teacher, output, tmp_path / "cache"), caplog)
    expected = f"--output-dir {output} cannot be made: " if place == "under a file" else "another run is training"
    assert error.startswith(expected), error
    assert not (tmp_path / "cache").exists()  # the teacher translated nothing


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--src-lang", "fr"], "the student's languages fr-en differ from the teacher's de-en"),
        (["--tokenizer_name_or_path", "OTHER"], "is not the teacher's"),
    ],
)
def test_a_student_of_other_languages_or_tokenizer_is_refused_in_one_line(teacher, tmp_path, caplog, extra, message):
    other = tmp_path / "other-tokenizer"
    train_tokenizer(["Ganz andere Wörter hier.", "Entirely other words here."], 60, min_freq=1).save_pretrained(other)
    extra = [str(other) if value == "OTHER" else value for value in extra]
    with caplog.at_level(logging.ERROR):
        assert main(distill_argv(teacher, tmp_path / "student", tmp_path / "cache", *extra)) == 1
    errors = [record.getMessage() for record in caplog.records if record.levelno == logging.ERROR]
    assert len(errors) == 1 and message in errors[0] and "\n" not in errors[0]
    assert not (tmp_path / "cache").exists() and not (tmp_path / "student").exists()  # refused before any work


RECIPES = Path(__file__).resolve().parents[1] / "scripts" / "multi30k"
FROM_TEACHER = RECIPES / "distill-transformer-from-teacher-de-en.yaml"  # the teacher's architecture and weights
STUDENT_RECIPES = sorted(recipe for recipe in RECIPES.glob("distill-*.yaml") if recipe != FROM_TEACHER)


@pytest.mark.parametrize("recipe", STUDENT_RECIPES, ids=[recipe.stem for recipe in STUDENT_RECIPES])
def test_every_student_recipe_parses_into_a_valid_model_that_takes_the_teacher_corpus(recipe):
    from hf_bahdanau.cli.train import parse_train_args
    from hf_bahdanau.registry import get_model_type

    model_args, tokenizer_args, data_args, _, _ = parse_train_args(["--config", str(recipe), "--output-dir", "x"])
    assert data_args.data is None and tokenizer_args.tokenizer_name_or_path is None  # the teacher's
    config_class, _ = get_model_type(model_args.model_type)
    config = config_class(**model_args.config_overrides(), vocab_size=8000)
    config.check()
    if model_args.model_type == "transformer":  # deep encoder, shallow decoder (Kasai et al. 2021)
        assert (config.encoder_layers, config.decoder_layers) == (6, 1) and config.d_model in (128, 256)
    else:
        assert (config.decoder_type, config.rnn_type, config.bidirectional_encoder) == ("cgru", "gru", True)
    assert {"distill-transformer-6-1-de-en", "distill-transformer-small-de-en", "distill-cgru-de-en"} == {
        path.stem for path in STUDENT_RECIPES
    }


def test_the_student_from_its_teacher_sets_no_architecture_of_its_own():
    from hf_bahdanau.cli.train import parse_train_args

    model_args, tokenizer_args, data_args, _, _ = parse_train_args(["--config", str(FROM_TEACHER), "--output-dir", "x"])
    assert data_args.data is None and tokenizer_args.tokenizer_name_or_path is None  # the teacher's
    assert model_args.model_name_or_path is None  # the teacher's folder, given with it on the command line
    assert model_args.config_overrides() == {}  # a saved model keeps its architecture: nothing to contradict it


@pytest.mark.slow  # the benchmark script and four evaluations
def test_the_benchmark_measures_teacher_and_students_on_every_engine_and_plots_them(tokenizer, corpus_dir, tmp_path):
    pytest.importorskip("ctranslate2")
    transformer = save_tiny_model("d2l_transformer", tokenizer, corpus_dir, tmp_path / "teacher")
    rnn = save_tiny_model("bahdanau", tokenizer, corpus_dir, tmp_path / "rnn")
    output = tmp_path / "benchmark"
    load_script("benchmark_distillation").main(
        ["--teacher", str(transformer), "--student", f"rnn={rnn}", "--output-dir", str(output), "--batch-size", "4"]
    )
    header, _, *rows = (output / "table.md").read_text(encoding="utf-8").splitlines()
    assert header.startswith("| model (6 sentences, 1 thread) |")
    cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]
    assert [(row[0], row[2]) for row in cells] == [
        ("teacher", "torch fp32"), ("teacher", "CTranslate2 fp32"), ("teacher", "CTranslate2 int8"),
        ("rnn", "torch fp32"),
    ]  # fmt: skip
    assert cells[0][-1] == "1.0x" and all(float(row[5]) > 0 and float(row[6]) > 0 for row in cells)
    for folder, row in ((transformer, cells[0]), (rnn, cells[3])):  # torch fp32: what `evaluate` scores
        for beams, column in ((5, 3), (1, 4)):
            assert (
                main(["evaluate", "--model", str(folder), "--num-beams", str(beams)]) == 0
            )  # the default bounds, as the benchmark
            scores = {result["num_beams"]: result["bleu"] for result in read_evaluations(folder)}
            assert float(row[column]) == pytest.approx(scores[beams], abs=0.006)
    assert (output / "quality_speed.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_a_resumed_distill_reuses_the_cached_translations_and_continues_the_student(teacher, tmp_path, caplog):
    output, cache = tmp_path / "student", tmp_path / "cache"
    steps = ["--max_steps", "2", "--save_steps", "2", "--eval_steps", "2"]
    assert main(distill_argv(teacher, output, cache, *steps)) == 0
    info = json.loads(next(cache.glob("*/info.json")).read_text(encoding="utf-8"))
    with caplog.at_level(logging.INFO):
        assert main(distill_argv(teacher, output, cache, *steps[2:], "--max_steps", "4", "--resume")) == 0
    messages = [record.getMessage() for record in caplog.records]
    assert any("from the cache" in message for message in messages)
    assert not any("the teacher translates" in message for message in messages)
    assert any("resuming from" in message and "checkpoint-2" in message for message in messages)
    assert json.loads((output / "trainer_state.json").read_text(encoding="utf-8"))["global_step"] == 4
    assert json.loads((output / "distillation.json").read_text(encoding="utf-8"))["data"]["key"] == info["key"]
