"""Quality estimates wherever a translation goes besides `translate`: the server's answers (and its student that
calls a teacher), `/frontend/settings`, the pipeline's output dicts and the demo page; checked against the
`Translator`'s estimates. A folder without an estimator answers as before."""

from __future__ import annotations

import shutil

import pytest
from test_cascade import calibrated_folder, middle_threshold
from test_quality import SOURCES, tiny_folder

from hf_bahdanau.decoding.cascade import TEACHER, Cascade
from hf_bahdanau.decoding.quality.estimator import joined_estimate
from hf_bahdanau.decoding.translator import Translator
from hf_bahdanau.errors import InputError

GERMAN = sorted({text.split(". ")[0] + "." for text in SOURCES})  # the one-sentence texts SOURCES are made of


@pytest.fixture(scope="module")
def student_folder(tokenizer, tmp_path_factory):
    return calibrated_folder(tokenizer, tmp_path_factory.mktemp("surfaces"))


@pytest.fixture(scope="module")
def plain_folder(tokenizer, tmp_path_factory):
    """A de->en folder without an estimator (an RNN: translations other than the student's)."""
    return tiny_folder(tokenizer, tmp_path_factory.mktemp("plain") / "model", "bahdanau")


def close(found: dict | None, expected: dict | None) -> bool:
    """Whether two estimates as JSON agree: the same words and flags, probabilities and scores within 1e-3 (a batch
    of other sentences pads the evidence differently)."""
    if found is None or expected is None:
        return found is expected

    def numbers(estimate: dict) -> list[float]:
        return [estimate["score"], estimate.get("bergamot", 0.0), *(w["probability"] for w in estimate["words"])]

    words = [(w["word"], w["ok"]) for w in found["words"]] == [(w["word"], w["ok"]) for w in expected["words"]]
    return words and numbers(found) == pytest.approx(numbers(expected), abs=1e-3)


# ---- the server -------------------------------------------------------------------------------------------


def client_of(*models, **settings):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from hf_bahdanau.serving.app import Settings, build_app

    return TestClient(build_app(Settings(models=tuple(str(model) for model in models), **settings)))


def test_answers_carry_each_text_s_estimate_beside_libretranslate_s_fields(student_folder):
    texts = [*GERMAN[:3], f"{GERMAN[3]} {GERMAN[4]}"]  # the last of two sentences: their estimates joined
    translator = Translator.from_folder(student_folder)
    sentences = translator.translate(GERMAN[:5], quality=True)
    expected = [t.quality.as_dict() for t in sentences[:3]]
    expected.append(joined_estimate([sentences[3].quality, sentences[4].quality]).as_dict())
    with client_of(student_folder) as client:
        batch = client.post("/translate", json={"q": texts, "source": "de", "target": "en"}).json()
        single = client.post("/translate", data={"q": texts[0], "source": "de", "target": "en"}).json()
        html = client.post("/translate", json={"q": f"<p>{texts[0]}</p>", "source": "de", "target": "en",
                                               "format": "html"}).json()  # fmt: skip
        settings = client.get("/frontend/settings").json()
    assert batch["translatedText"] == [*(t.text for t in sentences[:3]), f"{sentences[3].text} {sentences[4].text}"]
    assert set(batch) == {"translatedText", "quality"} and len(batch["quality"]) == len(texts)
    assert all(close(found, wanted) for found, wanted in zip(batch["quality"], expected, strict=True))
    assert single["translatedText"] == sentences[0].text and close(single["quality"], expected[0])
    assert html["translatedText"].startswith("<p>") and close(html["quality"], expected[0])  # the text between tags
    assert settings["qualityEstimates"] == [{"source": "de", "target": "en", "minQuality": None}]
    assert settings["charLimit"] == 5000  # LibreTranslate's fields as ever


@pytest.mark.parametrize("served", ["without an estimator", "with --no-quality"])
def test_a_model_without_an_estimator_or_told_not_to_estimate_answers_as_before(student_folder, plain_folder, served):
    from hf_bahdanau.serving.model import Decoding

    plain = served == "without an estimator"
    folder, decoding = (plain_folder, Decoding()) if plain else (student_folder, Decoding(quality=False))
    expected = [t.text for t in Translator.from_folder(folder).translate(GERMAN[:2])]
    with client_of(folder, decoding=decoding) as client:
        answer = client.post("/translate", json={"q": GERMAN[:2], "source": "de", "target": "en"}).json()
        settings = client.get("/frontend/settings").json()
    assert answer == {"translatedText": expected} and settings["qualityEstimates"] == []


def test_a_served_student_calls_its_teacher_for_the_sentences_below_the_threshold(student_folder, plain_folder):
    from hf_bahdanau.serving.model import Decoding

    student, teacher = Translator.from_folder(student_folder), Translator.from_folder(plain_folder)
    threshold = middle_threshold(student)
    halves = list(zip(GERMAN, GERMAN[1:] + GERMAN[:1], strict=True))
    texts = [f"{a} {b}" for a, b in halves]  # two sentences each
    sentences = Cascade(student, teacher, threshold).translate([s for half in halves for s in half], quality=True)
    pairs = [sentences[k : k + 2] for k in range(0, len(sentences), 2)]
    assert 0 < sum(t.made_by == TEACHER for t in sentences) < len(sentences)
    decoding = Decoding(min_quality=threshold)
    with client_of(student_folder, fallbacks=(str(plain_folder),), decoding=decoding) as client:
        answer = client.post("/translate", json={"q": texts, "source": "de", "target": "en"}).json()
        with_terms = client.post("/translate", json={"q": texts, "source": "de", "target": "en",
                                                     "glossary": {"Hund": "hound"}})  # fmt: skip
        settings = client.get("/frontend/settings").json()
    assert answer["translatedText"] == [f"{a.text} {b.text}" for a, b in pairs]
    for found, (a, b) in zip(answer["quality"], pairs, strict=True):
        expected = joined_estimate([a.quality, b.quality])  # the teacher has no estimator: only the student's
        if expected is None:
            assert found is None
        else:
            assert close({k: v for k, v in found.items() if k != "retranslated"}, expected.as_dict())
            assert found["retranslated"] == (a.made_by == TEACHER) + (b.made_by == TEACHER)
    assert with_terms.status_code == 200 and len(with_terms.json()["quality"]) == len(texts)
    assert settings["qualityEstimates"] == [{"source": "de", "target": "en", "minQuality": threshold}]


def test_serve_refuses_a_fallback_it_cannot_use_in_one_line(student_folder, plain_folder, tokenizer, tmp_path, caplog):
    from hf_bahdanau.cli import main
    from hf_bahdanau.serving.app import Settings, load_models
    from hf_bahdanau.serving.model import Decoding

    pytest.importorskip("fastapi")
    assert main(["serve", "--model", str(student_folder), "--fallback", str(plain_folder)]) == 1
    assert "--fallback needs --min-quality" in caplog.text and "Traceback" not in caplog.text
    decoding = Decoding(min_quality=0.5)
    with pytest.raises(InputError, match="no quality estimator"):  # the student cannot decide
        load_models(Settings(models=(str(plain_folder),), fallbacks=(str(plain_folder),), decoding=decoding))
    other = tiny_folder(tokenizer, tmp_path / "de-en")
    with pytest.raises(InputError, match="both translate de->en"):
        load_models(Settings(models=(str(student_folder),), fallbacks=(str(plain_folder), str(other)),
                             decoding=decoding))  # fmt: skip
    elsewhere = shutil.copytree(plain_folder, tmp_path / "en-de")
    config = (elsewhere / "config.json").read_text().replace('"source_language": "de"', '"source_language": "xx"')
    (elsewhere / "config.json").write_text(config)
    with pytest.raises(InputError, match="no --model translates that pair"):
        load_models(Settings(models=(str(student_folder),), fallbacks=(str(elsewhere),), decoding=decoding))


# ---- the pipeline -----------------------------------------------------------------------------------------


def test_the_pipeline_adds_each_translation_s_estimate_when_asked(student_folder, plain_folder, monkeypatch):
    from transformers import pipeline

    from hf_bahdanau.models.pipelines import TASK, TranslationPipeline

    pipe = pipeline(TASK, model=str(student_folder))
    expected = Translator.from_folder(student_folder).translate([*GERMAN[:3], ""], quality=True)
    found = pipe([*GERMAN[:3], ""], quality=True)
    assert [row["translation_text"] for row in found] == [t.text for t in expected]
    assert [row["quality"] for row in found] == [t.quality and t.quality.as_dict() for t in expected]
    assert pipe(GERMAN[0], quality=True)[0]["quality"] == expected[0].quality.as_dict()
    assert all(set(row) == {"translation_text"} for row in pipe(GERMAN[:3], quality=False))
    with pytest.raises(ValueError, match="not of input_format='html'"):
        pipe("<p>Ein Hund.</p>", input_format="html", quality=True)
    with pytest.raises(InputError, match="no quality estimator"):
        pipeline(TASK, model=str(plain_folder))(GERMAN[:1], quality=True)
    monkeypatch.setattr(TranslationPipeline, "translator_class", None)  # as where the package is not imported
    with pytest.raises(ValueError, match="need the hf_bahdanau package"):
        pipe(GERMAN[:1], quality=True)


# ---- the demo ---------------------------------------------------------------------------------------------


def test_the_demo_shades_the_words_by_their_flag_and_shows_the_score(student_folder, plain_folder):
    pytest.importorskip("gradio")
    from hf_bahdanau.serving import demo

    translator = Translator.from_folder(student_folder)
    found = demo.translation_of(translator, GERMAN[0], "beam", 2)
    expected = translator.translate([GERMAN[0]], quality=True, num_beams=2)[0].quality
    assert found.quality == expected
    words, line = demo.quality_view(found.quality)
    assert words == [(f"{w.word} ", "OK" if w.ok else "BAD") for w in expected.words]
    assert f"**{expected.score:.2f}**" in line and f"{sum(not w.ok for w in expected.words)} of" in line
    assert demo.quality_view(None) == ([], "")
    assert demo.translation_of(Translator.from_folder(plain_folder), GERMAN[0], "greedy", 1).quality is None
    for folder, shown in ((student_folder, True), (plain_folder, False)):
        page = demo.build_demo(str(folder))
        (words_box,) = [block for block in page.blocks.values() if getattr(block, "elem_id", None) == "quality-words"]
        assert words_box.visible is shown
