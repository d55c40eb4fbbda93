"""`evaluate` reports like the literature: lowercased BLEU beside the cased score (scores, card), and
`--compare` with sacreBLEU's paired bootstrap resampling. Tiny untrained models; no Trainer."""

import gzip
import json
import shutil
from pathlib import Path

import pytest
import sacrebleu
import torch
from huggingface_hub import ModelCard
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from hf_bahdanau import get_model_type, train_tokenizer
from hf_bahdanau.cli import main
from hf_bahdanau.metrics import load_metric, paired_bootstrap
from hf_bahdanau.models.pipelines import save_for_pipeline
from hf_bahdanau.publishing.card import make_card
from hf_bahdanau.publishing.evaluations import EVAL_RESULTS_FILE, read_evaluations

PAIRS = 24


@pytest.fixture(scope="module")
def corpus(multi30k_dir, tmp_path_factory) -> tuple[Path, list[tuple[str, str]]]:
    """A Multi30k-style folder whose train, val and test files hold the same 24 short De-En pairs."""
    de = gzip.open(multi30k_dir / "train.de.gz", "rt", encoding="utf-8").read().splitlines()
    en = gzip.open(multi30k_dir / "train.en.gz", "rt", encoding="utf-8").read().splitlines()
    pairs = [(d, e) for d, e in zip(de, en, strict=True) if len(e.split()) <= 7][:PAIRS]
    folder = tmp_path_factory.mktemp("corpus")
    for stem in ("train", "val", "test_2016_flickr"):
        for index, lang in enumerate(("de", "en")):
            (folder / f"{stem}.{lang}").write_text("".join(pair[index] + "\n" for pair in pairs), encoding="utf-8")
    return folder, pairs


@pytest.fixture(scope="module")
def model_dir(corpus, tmp_path_factory) -> Path:
    """A tiny random RNN saved with a tokenizer of the corpus (what `evaluate` loads)."""
    _, pairs = corpus
    tokenizer = train_tokenizer([text for pair in pairs for text in pair], vocab_size=150)
    config_class, model_class = get_model_type("bahdanau")
    torch.manual_seed(0)
    config = config_class(vocab_size=len(tokenizer), embedding_size=16, hidden_size=16, dropout=0.0, pad_token_id=0,
                          bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, source_language="de",
                          target_language="en")  # fmt: skip
    return save_for_pipeline(model_class(config).eval(), tokenizer, tmp_path_factory.mktemp("models") / "a")


def hypotheses_of(folder: Path) -> list[str]:
    """The lines of the one hypotheses file `evaluate` wrote in `folder` (its name tells split and decoding)."""
    (path,) = folder.glob("hypotheses.*.txt")
    return path.read_text(encoding="utf-8").splitlines()


def evaluate(model: Path, corpus: Path, *extra: str) -> int:
    return main(["evaluate", "--model", str(model), "--data", str(corpus), "--num-beams", "1",
                 "--max-new-tokens", "8", *extra])  # fmt: skip


def test_the_metric_adds_lowercased_bleu_as_joey_nmt_reports_it():
    predictions = ["A man rides A Bike.", "Two DOGS play in the snow.", "a woman is reading a book"]
    references = ["A man rides a bike.", "Two dogs play in the snow.", "A woman is reading a book."]
    scores = load_metric().compute(predictions=predictions, references=[[ref] for ref in references])
    joey = sacrebleu.corpus_bleu(predictions, [references], lowercase=True, tokenize="13a")  # Joey NMT's call
    assert scores["bleu_lowercase"] == pytest.approx(joey.score)
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(predictions, [references]).score)
    assert scores["bleu"] < scores["bleu_lowercase"]  # the case errors count in the cased score only
    assert "case:lc" in scores["bleu_lowercase_signature"] and "tok:13a" in scores["bleu_lowercase_signature"]
    assert "case:mixed" in scores["bleu_signature"]
    plain = load_metric().compute(predictions=predictions, references=references, lowercase_bleu=False)
    assert "bleu_lowercase" not in plain and plain["bleu"] == pytest.approx(scores["bleu"])


@pytest.mark.slow
def test_evaluate_prints_and_stores_both_bleus_and_the_card_carries_them(model_dir, corpus, tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(model_dir, folder)
    assert evaluate(folder, corpus[0]) == 0
    printed = capsys.readouterr().out
    hypotheses = hypotheses_of(folder)
    references = [en for _, en in corpus[1]]
    lowercased = BLEU(lowercase=True)
    expected = lowercased.corpus_score(hypotheses, [references]).score
    (stored,) = read_evaluations(folder)
    assert stored["bleu_lowercase"] == round(expected, 2)
    assert stored["bleu_lowercase_signature"] == str(lowercased.get_signature())
    assert f"BLEU lowercased = {expected:.2f}  ({stored['bleu_lowercase_signature']})\n" in printed
    assert f"BLEU = {stored['bleu']:.2f}  ({stored['bleu_signature']})\n" in printed  # the cased score beside it

    card = ModelCard(make_card(folder, "me/tiny").content)
    assert "| Beams | BLEU | BLEU lowercased | chrF |" in card.text
    assert f"| 1 | {stored['bleu']} | {stored['bleu_lowercase']} | {stored['chrf']} |" in card.text
    assert f"- BLEU lowercased `{stored['bleu_lowercase_signature']}`" in card.text.splitlines()
    indexed = {result.metric_name: (result.metric_value, result.metric_config) for result in card.data.eval_results}
    assert indexed["BLEU lowercased (greedy)"] == (stored["bleu_lowercase"], stored["bleu_lowercase_signature"])
    assert indexed["BLEU (greedy)"] == (stored["bleu"], stored["bleu_signature"])

    # A result without lowercased BLEU: its card row without it; beside a result with it, a dash.
    old = {key: value for key, value in stored.items() if not key.startswith("bleu_lowercase")}
    (folder / EVAL_RESULTS_FILE).write_text(json.dumps({"results": [old]}), encoding="utf-8")
    card = ModelCard(make_card(folder, "me/tiny").content)
    assert "lowercased" not in card.text and "| Beams | BLEU | chrF |" in card.text
    assert [result.metric_name for result in card.data.eval_results] == ["BLEU (greedy)", "chrF (greedy)"]
    (folder / EVAL_RESULTS_FILE).write_text(
        json.dumps({"results": [{**old, "num_beams": 5}, stored]}), encoding="utf-8"
    )
    text = ModelCard(make_card(folder, "me/tiny").content).text
    assert f"| 5 | {stored['bleu']} | – | {stored['chrf']} |" in text
    assert f"| 1 | {stored['bleu']} | {stored['bleu_lowercase']} | {stored['chrf']} |" in text


def test_paired_bootstrap_gives_sacrebleus_own_figures():
    references = ["a cat sat on the mat", "the dog runs fast", "he is here today", "we go home now"] * 10
    baseline = ["a cat sat on mat", "the dog run fast", "he is here", "we go home"] * 10
    worse = [text if i % 3 else "x y z" for i, text in enumerate(baseline)]
    signatures, scores = PairedTest(
        [("a", baseline), ("b", worse)], {"BLEU": BLEU(), "chrF": CHRF()}, [references], test_type="bs", n_samples=1000
    )()
    results = paired_bootstrap(baseline, worse, references)
    assert [result.metric for result in results] == ["BLEU", "chrF2"]
    for result in results:
        first, second = scores[result.metric]
        assert result.signature == str(signatures[result.metric]) and "bs:1000|seed:12345" in result.signature
        assert result.baseline == pytest.approx((first.score, first.mean, first.ci))
        assert result.other == pytest.approx((second.score, second.mean, second.ci))
        assert result.p_value == pytest.approx(second.p_value) and result.significant and not result.identical
    # Identical systems: no difference, p = 1 (sacreBLEU itself says 1 / 1001: it counts differences above 0).
    same = paired_bootstrap(baseline, list(baseline), references)
    assert all(result.p_value == 1.0 and not result.significant and result.identical for result in same)
    _, own = PairedTest([("a", baseline), ("b", baseline)], {"BLEU": BLEU()}, [references], test_type="bs")()
    assert own["BLEU"][1].p_value == pytest.approx(1 / 1001)
    with pytest.raises(ValueError, match="one translation per reference"):
        paired_bootstrap(baseline, worse[:-1], references)


@pytest.mark.slow
def test_compare_with_a_copy_of_the_model_is_no_difference(model_dir, corpus, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(model_dir, other)
    output = tmp_path / "hyp.txt"
    assert evaluate(model_dir, corpus[0], "--compare", str(other), "--output", str(output)) == 0
    printed = capsys.readouterr().out
    compared = tmp_path / "hyp.compare.txt"
    assert compared.read_text(encoding="utf-8") == output.read_text(encoding="utf-8")
    lines = [line for line in printed.splitlines() if line.startswith(("BLEU:", "chrF2:"))]
    assert len(lines) == 2, printed
    assert all("p = 1.0000: the two models translate every sentence alike: no difference" in line for line in lines)
    assert f"{model_dir} (baseline) against {other}; its hypotheses in {compared}" in printed


@pytest.mark.slow
def test_compare_against_a_broken_model_is_significant(model_dir, corpus, tmp_path, capsys):
    """The broken copy ends every translation at once (an empty line): its chrF falls to 0, significantly."""
    broken = tmp_path / "broken"
    shutil.copytree(model_dir, broken)
    model_class = get_model_type("bahdanau").model_class
    model = model_class.from_pretrained(broken)
    with torch.no_grad():
        model.get_output_embeddings().weight.zero_()
        model.get_output_embeddings().bias.fill_(-10.0)
        model.get_output_embeddings().bias[2] = 10.0  # </s> first
    model.save_pretrained(broken)
    assert evaluate(model_dir, corpus[0], "--compare", str(broken)) == 0
    printed = capsys.readouterr().out
    assert set(hypotheses_of(broken)) == {""}
    hypotheses = hypotheses_of(model_dir)
    references = [en for _, en in corpus[1]]
    _, scores = PairedTest(
        [("a", hypotheses), ("b", [""] * len(hypotheses))], {"chrF": CHRF()}, [references], test_type="bs"
    )()
    first, second = scores["chrF2"]
    (line,) = [line for line in printed.splitlines() if line.startswith("chrF2:")]
    assert line.startswith(
        f"chrF2: {first.score:.2f} (mean {first.mean:.2f} ± {first.ci:.2f}, 95% CI) against 0.00 (mean 0.00 ± 0.00), "
        f"p = {second.p_value:.4f}: the difference of {-first.score:+.2f} is significant at 0.05"
    )
    assert first.score > 5 and second.p_value < 0.05


def test_compare_refuses_the_model_itself_or_a_non_model(model_dir, corpus, tmp_path, caplog):
    assert evaluate(model_dir, corpus[0], "--compare", str(model_dir)) == 1
    assert "is the --model folder itself" in caplog.text
    assert evaluate(model_dir, corpus[0], "--compare", str(tmp_path)) == 1
    assert "is not a saved model folder" in caplog.text
