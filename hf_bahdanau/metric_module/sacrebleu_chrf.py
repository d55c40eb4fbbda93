"""Corpus sacreBLEU and chrF in one `evaluate` metric, loadable standalone with `evaluate.load(<this file>)`.

This file must not import `hf_bahdanau`: `evaluate` copies it into its modules cache and imports it there.
"""

from __future__ import annotations

import datasets
import evaluate
from sacrebleu.metrics import BLEU, CHRF

_DESCRIPTION = """\
Corpus-level BLEU (Papineni et al., 2002) and chrF (Popović, 2015) computed with sacreBLEU (Post, 2018) on
detokenized text, with the signatures that make the figures reproducible.
"""

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    pages = "186--191",
}
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list[str]): one detokenized translation per sentence.
    references (list[str] | list[list[str]]): the reference(s) of each sentence; every sentence needs the same
        number of references.
    tokenize (str | None): sacreBLEU's BLEU tokenizer (default "13a"; "intl", "char", "none", ...).
    lowercase (bool): case-insensitive scores.
    lowercase_bleu (bool): also `bleu_lowercase`, BLEU of lowercased text (default True), as Joey NMT reports it.
    char_order (int), word_order (int): chrF's character and word n-gram orders (word_order=2: chrF++).
Returns:
    bleu, chrf (float, 0-100), bleu_signature, chrf_signature (str), counts, totals (n-gram matches and
    n-grams per order), precisions (list[float], 0-100), bp (brevity penalty), sys_len, ref_len (int);
    bleu_lowercase (float), bleu_lowercase_signature (str): the same BLEU on lowercased text ("case:lc"), as Joey
    NMT and much of the literature report it (with lowercase_bleu).
Examples:
    >>> metric = evaluate.load("path/to/sacrebleu_chrf.py")
    >>> metric.compute(predictions=["a cat sat on the mat"], references=[["a cat sat on the mat"]])["bleu"]
    100.0
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SacrebleuChrf(evaluate.Metric):
    """sacreBLEU corpus BLEU and chrF of detokenized predictions against one or more references each."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            homepage="https://github.com/mjpost/sacrebleu",
            features=[
                datasets.Features(
                    {
                        "predictions": datasets.Value("string"),
                        "references": datasets.Sequence(datasets.Value("string")),
                    }
                ),
                datasets.Features({"predictions": datasets.Value("string"), "references": datasets.Value("string")}),
            ],
            reference_urls=["https://github.com/mjpost/sacrebleu"],
        )

    def _compute(
        self,
        predictions: list[str],
        references: list[str] | list[list[str]],
        tokenize: str | None = None,
        lowercase: bool = False,
        char_order: int = CHRF.CHAR_ORDER,
        word_order: int = CHRF.WORD_ORDER,
        lowercase_bleu: bool = True,
    ) -> dict:
        references = [[ref] if isinstance(ref, str) else list(ref) for ref in references]
        n_refs = {len(refs) for refs in references}
        if len(n_refs) > 1:
            raise ValueError(f"every prediction needs the same number of references, got counts {sorted(n_refs)}")
        # sacreBLEU wants reference streams: streams[i][j] is the i-th reference of sentence j.
        streams = [list(stream) for stream in zip(*references, strict=True)]
        bleu = BLEU(tokenize=tokenize, lowercase=lowercase)
        chrf = CHRF(char_order=char_order, word_order=word_order, lowercase=lowercase)
        bleu_score = bleu.corpus_score(predictions, streams)
        chrf_score = chrf.corpus_score(predictions, streams)
        lowercased = {}
        if lowercase_bleu:  # Joey NMT's `sacrebleu.corpus_bleu(..., lowercase=True, tokenize="13a")`
            bleu_lc = BLEU(tokenize=tokenize, lowercase=True)
            lowercased = {
                "bleu_lowercase": bleu_lc.corpus_score(predictions, streams).score,
                "bleu_lowercase_signature": str(bleu_lc.get_signature()),
            }
        return {
            "bleu": bleu_score.score,
            "chrf": chrf_score.score,
            "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature()),
            "counts": bleu_score.counts,
            "totals": bleu_score.totals,
            "precisions": bleu_score.precisions,
            "bp": bleu_score.bp,
            "sys_len": bleu_score.sys_len,
            "ref_len": bleu_score.ref_len,
            **lowercased,
        }
