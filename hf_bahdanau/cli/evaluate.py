"""`hf-bahdanau evaluate`: translate a split of a corpus, score it with sacreBLEU and chrF, record the scores in the
model's folder, and with `--compare` test the difference to another model with paired bootstrap resampling."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .arguments import (
    UsageError,
    add_command,
    add_generation_arguments,
    check_engine_options,
    generation_options,
    load_translator,
    positive_int,
    translate_texts,
)
from .streams import write_out

if TYPE_CHECKING:
    from hf_bahdanau.decoding.translator import Translation, Translator

logger = logging.getLogger("hf_bahdanau")
SUMMARY = "translate a split and score it with sacreBLEU and chrF"
EPILOG = """\
examples:
  hf-bahdanau evaluate --model runs/quick-de-en                      # the test split training held out
  hf-bahdanau evaluate --model runs/quick-de-en --num-beams 1 --max-samples 200
  hf-bahdanau evaluate --model runs/de-en --data my-corpus.tsv --split test --output hyp.txt
  hf-bahdanau evaluate --model runs/de-en --compare runs/de-en-averaged   # paired bootstrap: significant or not?
  hf-bahdanau evaluate --model runs/quick-de-en --glossary terms.tsv      # and how many glossary terms it used

A model folder with a quality estimator (hf-bahdanau calibrate) also gets the correlations its estimates reach on the
split: Pearson r of sentence scores with sentence chrF, MCC of word OK/BAD verdicts, its own and Bergamot's.
"""


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `evaluate` and its options to the command line's subparsers."""
    parser = add_command(commands, "evaluate", SUMMARY, EPILOG)
    add_generation_arguments(parser)
    add_corpus_arguments(parser, "test", "The split to translate and score.")
    parser.add_argument(
        "--output",
        help="Hypotheses file (default: hypotheses.SPLIT.SRC-TGT.DECODING.txt in --model, e.g. "
        "hypotheses.test_2016_flickr.de-en.beam5.txt; --num-beams 1: ...greedy.txt).",
    )
    parser.add_argument(
        "--compare",
        metavar="OTHER_MODEL_DIR",
        help="Also translate the split with this model (same decoding options; its hypotheses in its folder, or "
        "OUTPUT.compare.txt with --output) and test the difference with sacreBLEU's paired bootstrap resampling "
        "(1000 resamples): both models' BLEU and chrF with 95%% confidence intervals, the p-value, significant or not.",
    )


def add_corpus_arguments(parser: argparse.ArgumentParser, split: str, split_help: str) -> None:
    """The options that say which corpus, split and direction a command reads (`evaluate`, `calibrate`)."""
    parser.add_argument("--data", help="A corpus name, folder, file or Hub dataset (default: the training corpus).")
    parser.add_argument("--split", default=split, help=split_help)
    parser.add_argument(
        "--test-split", "--test_split", help="Which file of a folder is the test set (default: as trained)."
    )
    parser.add_argument(
        "--d2l-normalize",
        "--d2l_normalize",
        action=argparse.BooleanOptionalAction,
        help="d2l normalisation of the corpus (default: as in training).",
    )
    parser.add_argument("--src-lang", "--src_lang", help="Source language code (default: the model's).")
    parser.add_argument("--tgt-lang", "--tgt_lang", help="Target language code (default: the model's).")
    parser.add_argument("--max-samples", "--max_samples", type=positive_int, help="Read only the first N pairs.")


def _check_output_file(output: Path, model_dirs: Sequence[str], inputs: Sequence[str | None] = ()) -> None:
    """Refuse a hypotheses file that is any file evaluate reads (by inode: through a symlink or a hard link too) or
    lies in a model folder (an earlier hypotheses file there excepted) or a corpus folder."""
    from hf_bahdanau.folders import files_by_inode, inode

    target = output.resolve()
    homes = [Path(folder) for folder in model_dirs if target.is_relative_to(Path(folder).resolve())]
    single = output.is_file() and not output.is_symlink() and output.stat().st_nlink == 1  # no other name
    hypotheses = target.name.startswith("hypotheses") and (single or not output.exists())
    if homes and not hypotheses:
        raise UsageError(f"--output {output} would overwrite part of the model folder {homes[0]}: choose another")
    read = files_by_inode([*model_dirs, *inputs])
    if (key := inode(output)) in read and not (homes and hypotheses):
        raise UsageError(f"--output {output} is {read[key]}, which evaluate reads: choose another")
    for path in filter(None, inputs):
        if Path(path).is_dir() and target.is_relative_to(Path(path).resolve()):
            raise UsageError(f"--output {output} would overwrite the corpus {path}, which it evaluates: choose another")


def _write_lines(output: Path, lines: Sequence[str]) -> None:
    """Write `lines` to the hypotheses file `output` (its folder made); a path that cannot be written is named."""
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    except OSError as error:
        raise UsageError(f"the hypotheses file {output} cannot be written ({error.strerror or error})") from None


def hypotheses_file_name(split: str, languages: tuple[str, str], beams: int, args: argparse.Namespace) -> str:
    """`evaluate`'s default hypotheses file: one per split, direction and decoding (`greedy` or `beamN`, and any
    length penalty, quantization or engine), so that evaluating another way never overwrites an earlier file."""
    decoding = ["greedy" if beams == 1 else f"beam{beams}"]
    if args.length_penalty is not None:
        decoding.append(f"lp{args.length_penalty:g}")
    decoding += [name for name in (args.quantize, args.engine) if name not in (None, "torch")]
    decoding += [name for name in ("glossary", "avoid") if getattr(args, name)]
    return f"hypotheses.{split}.{'-'.join(languages)}.{'-'.join(decoding)}.txt"


def run(args: argparse.Namespace) -> None:
    """Translate the split, print and record its scores, and compare with `--compare`."""
    from hf_bahdanau.data.cache import named_corpus_path
    from hf_bahdanau.decoding.loading import check_generation_length
    from hf_bahdanau.metrics import count_repeating, load_metric
    from hf_bahdanau.publishing.evaluations import record_evaluation

    check_generation_length(args.model, args.max_new_tokens)
    check_engine_options(args)
    if args.compare:
        _check_comparable(args)
    models = [args.model, *([args.compare] if args.compare else [])]
    reads = [args.glossary, args.avoid]  # the other files read, beside the models and the corpus
    for output in _given_outputs(args):  # before any work; the corpus is checked once found
        _check_output_file(output, models, reads)
    translator = load_translator(args)
    pairs = read_pairs(args, translator)
    data, split, (src_lang, tgt_lang) = pairs.data, pairs.split, pairs.languages
    sources, references = pairs.sources, pairs.references
    quality = translator.quality_estimator is not None  # its figures on this split too
    found = translator.translate(sources, progress=sys.stderr.isatty(), quality=quality, **generation_options(args))
    hypotheses = [translation.text for translation in found]
    beams = args.num_beams if args.num_beams is not None else translator.generation_config.num_beams
    output = Path(args.output or Path(args.model) / hypotheses_file_name(split, (src_lang, tgt_lang), beams, args))
    other = _compare_output(args, output)
    for path in filter(None, (output, other)):  # the corpus found (a name resolved to its file or folder) too
        _check_output_file(path, models, [data, named_corpus_path(data), *reads])
    _write_lines(output, hypotheses)
    scores = load_metric().compute(predictions=hypotheses, references=[[ref] for ref in references])
    printed = (
        f"BLEU = {scores['bleu']:.2f}  ({scores['bleu_signature']})\n"
        f"BLEU lowercased = {scores['bleu_lowercase']:.2f}  ({scores['bleu_lowercase_signature']})\n"
        f"chrF = {scores['chrf']:.2f}  ({scores['chrf_signature']})\n"
        f"length ratio = {scores['sys_len'] / scores['ref_len']:.3f}  (hypotheses {scores['sys_len']} / "
        f"references {scores['ref_len']} tokens)\n"
        f"{count_repeating(hypotheses)} of {len(hypotheses)} translations repeat a phrase back to back, "
        f"{count_repeating(hypotheses, times=3)} three times or more (a decoder caught in a loop)\n"
        f"{len(hypotheses)} {args.split} sentences, {src_lang}->{tgt_lang}, beams {beams}; hypotheses in {output}\n"
    )
    if quality:
        printed += quality_lines(found, references)
    if args.glossary:
        printed += _term_use(args.glossary, sources, hypotheses)
    write_out(printed, "the scores")  # now: the scores stand even where they cannot be stored
    if args.glossary or args.avoid:  # the card reports translations as the model makes them, unconstrained
        logger.info("scores with --glossary or --avoid not stored in %s (its card reports plain decoding)", args.model)
    elif args.quantize is None and args.engine == "torch":  # the folder's card reports its fp32 weights' scores only
        try:
            record_evaluation(args.model, scores, data=data, split=split, languages=(src_lang, tgt_lang),
                              num_beams=beams, samples=len(hypotheses))  # fmt: skip
        except ValueError as error:
            raise UsageError(f"the scores above were not stored: {error}") from None
    else:
        engine = f"{args.engine} {args.quantize or 'fp32'}"
        logger.info("scores of the %s engine not stored in %s (its card reports torch fp32)", engine, args.model)
    if other is not None:
        _compare(args, sources, references, hypotheses, (src_lang, tgt_lang), other)


@dataclass
class Pairs:
    """A split read as a command asked: its sources and references, the corpus `data` (a name resolved to where
    training read it), the `split` name results carry, and the direction."""

    sources: list[str]
    references: list[str]
    data: str
    split: str
    languages: tuple[str, str]


def read_pairs(args: argparse.Namespace, translator: Translator) -> Pairs:
    """The `--split` of `--data` (default: the model's training corpus, read as training read it) in the model's
    direction, cut to `--max-samples`."""
    from hf_bahdanau.data.cache import named_corpus_path
    from hf_bahdanau.data.corpora import load_parallel_corpus
    from hf_bahdanau.data.run_settings import corpus_id, read_data_settings

    # Unless told otherwise, read the corpus exactly as training did (same normalisation, hence the same split).
    settings = read_data_settings(args.model)
    if args.data and corpus_id(args.data) not in (settings.get("data"), settings.get("data_path")):
        settings = {"d2l_normalize": settings.get("d2l_normalize", False)}  # another corpus: only this carries over
    data = args.data or settings.get("data")
    location = settings.get("data_path")  # a named corpus: where training read it
    if location and Path(location).exists():
        logger.info("reading %s from %s, where training read it", data, location)
        data = location
    elif location:
        logger.warning("%s is no longer in %s, where training read it: looking it up by name", data, location)
    src_lang = args.src_lang or translator.config.source_language
    tgt_lang = args.tgt_lang or translator.config.target_language
    if not data:
        raise UsageError("the model does not record its corpus: pass --data")
    if not src_lang or not tgt_lang:
        raise UsageError("the model does not record its languages: pass --src-lang and --tgt-lang")
    _check_direction("--model", args.model, translator.config, (src_lang, tgt_lang))
    normalize = args.d2l_normalize if args.d2l_normalize is not None else settings.get("d2l_normalize", False)
    test_split = args.test_split or settings.get("test_split", "test_2016_flickr")
    corpus = load_parallel_corpus(data, src_lang, tgt_lang, test_split=test_split, normalize=normalize)
    if args.split not in corpus:
        raise UsageError(f"{data} has no {args.split!r} split (it has {', '.join(corpus)})")
    rows = corpus[args.split]
    if args.max_samples is not None:
        rows = rows.select(range(min(args.max_samples, len(rows))))
    sources = [pair[src_lang] for pair in rows["translation"]]
    references = [pair[tgt_lang] for pair in rows["translation"]]
    # The test split of a folder by its file (test_2016_flickr): the name the results and the hypotheses file carry.
    split = test_split if args.split == "test" and Path(named_corpus_path(data) or data).is_dir() else args.split
    return Pairs(sources, references, str(data), split, (src_lang, tgt_lang))


def quality_lines(translations: Sequence[Translation], references: Sequence[str]) -> str:
    """How well the model's quality estimates follow the quality of `translations`: Pearson r of sentence scores with
    sentence chrF and MCC of word verdicts, ours and Bergamot's."""
    from hf_bahdanau.decoding.calibration import estimate_figures

    found = estimate_figures(translations, references)
    return (
        f"quality estimates: Pearson r with sentence chrF {found['pearson']:.3f} (Bergamot's "
        f"{found['bergamot_pearson']:.3f}), word MCC {found['mcc']:.3f} (Bergamot's {found['bergamot_mcc']:.3f}); "
        f"{found['sentences']} sentences, {found['words']} words\n"
    )


def _compare_output(args: argparse.Namespace, output: Path) -> Path | None:
    """Where the --compare model's hypotheses go: OUTPUT.compare.txt with --output, else its folder, under the name
    the --model's hypotheses file has in its own; None without --compare."""
    if not args.compare:
        return None
    return Path(args.compare) / output.name if args.output is None else output.with_suffix(".compare.txt")


def _given_outputs(args: argparse.Namespace) -> list[Path]:
    """The hypotheses files named by --output (its .compare.txt too, with --compare), known before any work."""
    if not args.output:
        return []
    output = Path(args.output)
    return [output, *filter(None, [_compare_output(args, output)])]


def _term_use(glossary_file: str, sources: Sequence[str], hypotheses: Sequence[str]) -> str:
    """A line saying how many of the glossary terms that apply to the sources their translations use (exact,
    case-sensitive, whole-word matches of the target side)."""
    from hf_bahdanau.decoding.glossary import Glossary, term_used

    glossary = Glossary.from_file(glossary_file)
    uses = [term_used(term.target, hypothesis) for source, hypothesis in zip(sources, hypotheses, strict=True)
            for term in glossary.terms_for(source)]  # fmt: skip
    rate = f" ({100 * sum(uses) / len(uses):.1f}%)" if uses else ""
    return f"glossary terms used: {sum(uses)} of {len(uses)}{rate} (exact matches of the target term)\n"


def _check_comparable(args: argparse.Namespace) -> None:
    """Refuse an `evaluate --compare` folder that is not a model or is the --model folder itself, before any work."""
    from hf_bahdanau.decoding.loading import check_generation_length

    check_generation_length(args.compare, args.max_new_tokens)
    if not (Path(args.compare) / "config.json").is_file():
        raise UsageError(f"--compare {args.compare} is not a saved model folder (no config.json)")
    if Path(args.compare).resolve() == Path(args.model).resolve():
        raise UsageError(f"--compare {args.compare} is the --model folder itself: compare another model")


def _check_direction(option: str, folder: str, config: Any, languages: tuple[str, str]) -> None:
    """Refuse to score a model in a direction other than the one its config records (where it records one)."""
    recorded = (config.source_language, config.target_language)
    if any(mine and mine != wanted for mine, wanted in zip(recorded, languages, strict=True)):
        raise UsageError(f"{option} {folder} translates {'->'.join(map(str, recorded))}, not {'->'.join(languages)}")


def _compare(
    args: argparse.Namespace,
    sources: Sequence[str],
    references: Sequence[str],
    hypotheses: Sequence[str],
    languages: tuple[str, str],
    output: Path,
) -> None:
    """Translate `sources` with the --compare model (the same decoding options), write its translations to `output`
    and print sacreBLEU's paired bootstrap test of both models' BLEU and chrF (--model is the baseline)."""
    from hf_bahdanau.metrics import BOOTSTRAP_SAMPLES, SIGNIFICANCE_LEVEL, paired_bootstrap

    translator = load_translator(args, args.compare)
    _check_direction("--compare", args.compare, translator.config, languages)
    others = translate_texts(translator, sources, args)
    _write_lines(output, others)
    lines = [
        f"paired bootstrap resampling (sacreBLEU, {BOOTSTRAP_SAMPLES} resamples), {args.model} (baseline) against "
        f"{args.compare}; its hypotheses in {output}\n"
    ]
    for result in paired_bootstrap(hypotheses, others, references):
        (score, mean, ci), (other, other_mean, other_ci) = result.baseline, result.other
        if result.identical:
            verdict = "the two models translate every sentence alike: no difference"
        else:
            verdict = "significant" if result.significant else "not significant"
            verdict = f"the difference of {other - score:+.2f} is {verdict} at {SIGNIFICANCE_LEVEL}"
        lines.append(
            f"{result.metric}: {score:.2f} (mean {mean:.2f} ± {ci:.2f}, 95% CI) against {other:.2f} (mean "
            f"{other_mean:.2f} ± {other_ci:.2f}), p = {result.p_value:.4f}: {verdict}  ({result.signature})\n"
        )
    write_out("".join(lines), "the comparison")


# ---- translate --------------------------------------------------------------------------------------------
