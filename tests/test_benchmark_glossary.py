"""`scripts/benchmark_glossary.py` on a tiny model: the term use, BLEU, chrF and speed of translations without and
with a glossary, as `evaluate --glossary` counts the terms, in a table, a JSON file and a plot."""

from __future__ import annotations

import json

import pytest
import sacrebleu
from conftest import load_script
from helpers import TINY_CORPUS, tiny_translator

from hf_bahdanau.models.pipelines import save_for_pipeline

GERMAN, ENGLISH = TINY_CORPUS[0::2], TINY_CORPUS[1::2]


@pytest.mark.slow
def test_the_benchmark_counts_terms_as_evaluate_does_and_the_glossary_places_them(tokenizer, tmp_path, capsys):
    from hf_bahdanau.cli import main

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split in ("train", "val", "test_2016_flickr"):
        (corpus / f"{split}.de").write_text("\n".join(GERMAN) + "\n", encoding="utf-8")
        (corpus / f"{split}.en").write_text("\n".join(ENGLISH) + "\n", encoding="utf-8")
    model = tiny_translator("d2l_transformer", tokenizer, 5, source_language="de", target_language="en")
    folder = save_for_pipeline(model, tokenizer, tmp_path / "model")
    settings = {"data": str(corpus), "data_path": None, "src_lang": "de", "tgt_lang": "en",
                "test_split": "test_2016_flickr", "d2l_normalize": False}  # fmt: skip
    (folder / "translation_data.json").write_text(json.dumps(settings), encoding="utf-8")
    glossary = tmp_path / "glossary.tsv"
    # "Junge" -> "man" applies to a sentence whose reference ("A boy jumps ...") does not use it
    terms = "de\ten\nHunde\tdogs\nFahrrad\tbicycle\nStrand\tbeach\nBus\tbus\nJunge\tman\n"
    glossary.write_text(terms, encoding="utf-8")
    output = tmp_path / "benchmark"
    load_script("benchmark_glossary").main(["--model", f"tiny={folder}", "--glossary", str(glossary),
                                            "--output-dir", str(output), "--batch-size", "4"])  # fmt: skip
    results = json.loads((output / "results.json").read_text(encoding="utf-8"))["tiny"]
    assert results["reference"] == {"term_use": 80.0, "terms": 5, "agreeing": 5, "sentences": 6}
    assert results["with"]["term_use"] == 100.0 and results["with"]["per_second"] > 0
    capsys.readouterr()
    assert main(["evaluate", "--model", str(folder), "--num-beams", "5", "--output", str(tmp_path / "hyp.txt")]) == 0
    assert f"BLEU = {results['without']['bleu']:.2f}" in capsys.readouterr().out  # the same translations
    assert main(["evaluate", "--model", str(folder), "--num-beams", "5", "--glossary", str(glossary),
                 "--output", str(tmp_path / "hyp.glossary.txt")]) == 0  # fmt: skip
    assert "glossary terms used: 5 of 5 (100.0%)" in capsys.readouterr().out
    hypotheses = (tmp_path / "hyp.glossary.txt").read_text(encoding="utf-8").splitlines()
    boy = GERMAN.index("Ein Junge springt ins Wasser.")  # the one sentence with a term its reference does not use
    others = [i for i in range(len(GERMAN)) if i != boy]
    assert results["with"]["bleu_other"] == sacrebleu.corpus_bleu([hypotheses[boy]], [[ENGLISH[boy]]]).score
    assert (
        results["with"]["bleu_agreeing"]
        == sacrebleu.corpus_bleu([hypotheses[i] for i in others], [[ENGLISH[i] for i in others]]).score
    )
    assert "| tiny | with | 100.0% |" in (output / "table.md").read_text(encoding="utf-8")
    assert (output / "glossary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
