"""Decoding speed of our Transformer in CTranslate2 against our torch `generate()` and against MarianMT in CTranslate2.

The setup is `benchmark_speed.py`'s (imported from it): the random d_model 256, 3+3-layer Transformer and the
MarianMT model of the same size, the same random source tokens (batch 64, 20 tokens), the same work on every side
(EOS off, exactly `--tgt-len` = 22 new tokens; CTranslate2 with `min_decoding_length = max_decoding_length`), the
functions of a group called in turn and the best of `--decode-repeats` rounds kept. Measured, greedy and beam 5:

- ours in torch: `generate()` fp32, and after `quantize_for_cpu` (our `--quantize int8`);
- ours in CTranslate2 (`hf_bahdanau.decoding.export.ctranslate2_converter.D2LTransformerConverter`), fp32 and int8;
- MarianMT in CTranslate2, converted by CTranslate2's own `TransformersConverter` (its Marian loader drops the last
  vocabulary row, which Marian keeps for padding: 1 row in 8,000), fp32 and int8.

Each CTranslate2 model first decodes the source greedily beside torch's fp32 `generate()` and the share of
sentences with the same tokens is logged (fp32: all of them).

MarianMT gets one vocabulary row more than ours, so that after its loader drops one both CTranslate2 models have
the same rows: the two models then differ only in the start embedding (Marian's is zeros) and the position table's
values; the vocabulary sizes and model.bin sizes are logged and checked. `--threads` takes several counts: each is
run in turn and the table has a column per count.

    python scripts/benchmark_ctranslate2.py --threads 1 2 --decode-repeats 15 --output ct2.md
    python scripts/benchmark_ctranslate2.py --quick  # tiny sizes, seconds

`--exactness MODEL_DIR` measures instead how closely CTranslate2 translates a trained model's test split (the
corpus and split the model was trained with) through the package's own paths: the `evaluate` translation loop with
the torch pipeline and with `CTranslate2Translator` (fp32 and int8 exports), one thread each, greedy and
`--beams`, each against torch fp32 (the same lines, sacreBLEU). For each differing line of the fp32 beam search it
scores both hypotheses under our model (its beam score: the summed log-probability over length ** length_penalty)
and CTranslate2's `score_batch` of its own hypothesis against our model's, to tell search from weights.

    python scripts/benchmark_ctranslate2.py --exactness runs/quick-de-en --output ct2-exactness.md
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path

import benchmark_speed as shared  # scripts/ is on sys.path when this file runs as a script
import ctranslate2
import torch
from ctranslate2.converters import TransformersConverter
from tokenizers import Tokenizer, models
from transformers import GenerationConfig, PreTrainedTokenizerFast

from hf_bahdanau.decoding.export.ctranslate2_converter import D2LTransformerConverter

logger = logging.getLogger("benchmark_ctranslate2")

GREEDY, BEAM = shared.GREEDY, shared.BEAM
# (measure, implementation over implementation)
RATIOS = [
    (measure, top, bottom)
    for measure in (GREEDY, BEAM)
    for top, bottom in (
        ("ours, CTranslate2 fp32", "ours, torch fp32"),
        ("ours, CTranslate2 int8", "ours, torch fp32"),
        ("ours, CTranslate2 int8", "ours, torch int8"),
        ("ours, CTranslate2 fp32", "MarianMT, CTranslate2 fp32"),
        ("ours, CTranslate2 int8", "MarianMT, CTranslate2 int8"),
    )
]


def word_tokenizer(vocab_size: int, last: str | None = None) -> PreTrainedTokenizerFast:
    """A tokenizer whose token `i` is `w<i>` (the special tokens at benchmark_speed's ids): only its vocabulary is
    read by the converters. `last`: the name of the last token (then token 0 is `<blank>`)."""
    names = ["<pad>", "<s>", "</s>", "<unk>", *(f"w{i}" for i in range(4, vocab_size))]
    if last is not None:
        names[0], names[-1] = "<blank>", last
    vocab = {name: i for i, name in enumerate(names)}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
    )


class InMemoryTransformersConverter(TransformersConverter):
    """CTranslate2's converter for transformers models, given the model and tokenizer instead of loading them."""

    def __init__(self, folder: str, model: torch.nn.Module, tokenizer: PreTrainedTokenizerFast) -> None:
        super().__init__(folder)
        self._model, self._tokenizer = model, tokenizer

    def load_model(self, model_class: type, model_name_or_path: str, **kwargs: object) -> torch.nn.Module:
        return self._model

    def load_tokenizer(
        self, tokenizer_class: type, model_name_or_path: str, **kwargs: object
    ) -> PreTrainedTokenizerFast:
        return self._tokenizer


def marian_for_ctranslate2(args: argparse.Namespace) -> torch.nn.Module:
    """MarianMT of ours's size with one vocabulary row more: Marian's CTranslate2 loader drops the last row (it takes
    it for Marian's padding row), so both CTranslate2 models get `vocab_size` rows, the same output layer."""
    return shared.marian(argparse.Namespace(**{**vars(args), "vocab_size": args.vocab_size + 1}))


def check_same_size(ours_dir: str, marian_dir: str) -> None:
    """Log and check that the two exports hold the same vocabulary and the same amount of weights (model.bin's
    size: the same variables and shapes; a stored output bias or untied copy would show)."""
    sizes = {}
    for name, folder in (("ours", ours_dir), ("MarianMT", marian_dir)):
        vocabulary = json.loads((Path(folder) / "shared_vocabulary.json").read_text(encoding="utf-8"))
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
        sizes[name] = (len(vocabulary), (Path(folder) / "model.bin").stat().st_size)
        logger.info("%s in CTranslate2: %d tokens, model.bin %d bytes, %s", name, *sizes[name], config)
    (ours_rows, ours_bytes), (marian_rows, marian_bytes) = sizes.values()
    # model.bin also holds each model's config and tokens: a few hundred bytes apart at most
    if ours_rows != marian_rows or abs(ours_bytes - marian_bytes) > 1024:
        raise RuntimeError(f"the CTranslate2 models differ in size (tokens, bytes): {sizes}")


def ct2_models(ours: torch.nn.Module, marian: torch.nn.Module, args: argparse.Namespace, scratch: Path) -> dict:
    """CTranslate2 translators of ours and Marian (`marian_for_ctranslate2`), fp32 and int8."""
    tokenizer = word_tokenizer(args.vocab_size)
    ours_dir = D2LTransformerConverter(ours, tokenizer).convert(str(scratch / "ours"), force=True)
    marian.config.save_pretrained(scratch / "marian-config")  # TransformersConverter reads the config from a folder
    marian_tokenizer = word_tokenizer(marian.config.vocab_size, last="<pad>")  # its last row, dropped
    converter = InMemoryTransformersConverter(str(scratch / "marian-config"), marian, marian_tokenizer)
    marian_dir = converter.convert(str(scratch / "marian"), force=True)
    check_same_size(ours_dir, marian_dir)
    threads = args.threads or 0
    translators = {}
    for name, folder in (("ours", ours_dir), ("MarianMT", marian_dir)):
        for label, compute in (("fp32", "float32"), ("int8", "int8")):
            translator = ctranslate2.Translator(folder, compute_type=compute, inter_threads=1, intra_threads=threads)
            translators[f"{name}, CTranslate2 {label}"] = translator
    return translators


def ct2_decoding(
    translator: ctranslate2.Translator, tokens: list[list[str]], args: argparse.Namespace, beams: int
) -> Callable[[], list]:
    """`translate_batch` of exactly `tgt_len` new tokens (EOS masked until then) with `beams` beams."""
    options = dict(beam_size=beams, min_decoding_length=args.tgt_len, max_decoding_length=args.tgt_len)

    def run() -> list:
        results = translator.translate_batch(tokens, max_batch_size=0, **options)
        assert all(len(result.hypotheses[0]) == args.tgt_len for result in results)
        return results

    return run


def same_tokens(model: torch.nn.Module, src: torch.Tensor, translators: dict, args: argparse.Namespace) -> None:
    """Log how many sentences each CTranslate2 model decodes greedily into torch fp32's tokens (`</s>` suppressed in
    torch, as CTranslate2's minimum length masks it)."""
    config = GenerationConfig(decoder_start_token_id=shared.BOS, eos_token_id=None, pad_token_id=shared.PAD,
                              do_sample=False, num_beams=1, max_new_tokens=args.tgt_len,
                              suppress_tokens=[shared.EOS])  # fmt: skip
    with torch.inference_mode():
        reference = model.generate(src, generation_config=config)[:, 1:].tolist()
    tokens = [[f"w{i}" for i in row] for row in src.tolist()]
    vocabulary = word_tokenizer(args.vocab_size)
    for name, translator in translators.items():
        if name.startswith("ours"):
            results = ct2_decoding(translator, tokens, args, 1)()
            expected = [vocabulary.convert_ids_to_tokens(row) for row in reference]
            same = sum(row == result.hypotheses[0] for row, result in zip(expected, results, strict=True))
            logger.info("%s: %d of %d sentences with torch fp32's greedy tokens", name, same, len(reference))


def run(args: argparse.Namespace) -> list[shared.Row]:
    """Rows (measure, implementation, figure, note) of the table."""
    torch.manual_seed(args.seed)
    ours, marian = shared.transformer(args).eval(), marian_for_ctranslate2(args).eval()
    ours_int8 = shared.quantize_for_cpu(copy.deepcopy(ours))
    generator = torch.Generator().manual_seed(args.seed)
    src = torch.randint(4, args.vocab_size - 1, (args.batch_size, args.src_len), generator=generator)
    tokens = [[f"w{i}" for i in row] for row in src.tolist()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="benchmark_ctranslate2_") as scratch:
        translators = ct2_models(ours, marian, args, Path(scratch))
        same_tokens(ours, src, translators, args)
        for measure, beams in ((GREEDY, 1), (BEAM, args.beams)):
            fns: dict[str, Callable] = {
                "ours, torch fp32": shared.decoding(ours, src, args, beams, eos=False),
                "ours, torch int8": shared.decoding(ours_int8, src, args, beams, eos=False),
            }
            fns.update(
                {name: ct2_decoding(translator, tokens, args, beams) for name, translator in translators.items()}
            )
            note = f"{args.tgt_len} tokens, batch {args.batch_size}, {args.threads or 'default'} threads"
            rows += shared.timed(f"Transformer {measure}", fns, args, args.batch_size, note)
    return rows


def threads_label(threads: int | None) -> str:
    return "default threads" if threads is None else f"{threads} thread{'s' if threads > 1 else ''}"


def markdown_table(results: dict[int | None, list[shared.Row]]) -> str:
    """The rows and the ratios as a markdown table, a column per thread count (`results`: count -> rows)."""
    counts = list(results)
    lines = ["| measure | implementation | " + " | ".join(map(threads_label, counts)) + " |"]
    lines.append("|---|---|" + "---:|" * len(counts))
    figures = [{(measure, name): value for measure, name, value, _ in rows} for rows in results.values()]
    for measure, name in figures[0]:
        values = " | ".join(f"{figure[measure, name]:,.1f}" for figure in figures)
        lines.append(f"| {measure} | {name} | {values} |")
    for measure, top, bottom in RATIOS:
        key = f"Transformer {measure}"
        ratios = " | ".join(f"{figure[key, top] / figure[key, bottom]:.2f}x" for figure in figures)
        lines.append(f"| ratio | {measure.split()[0]}, {top} / {bottom} | {ratios} |")
    return "\n".join(lines)


# ---- exactness on a trained model -------------------------------------------------------------------------


def test_corpus(model_dir: Path, max_samples: int | None) -> tuple[list[str], list[str]]:
    """Sources and references of the test split the model was trained with (its recorded corpus settings)."""
    from hf_bahdanau.data.corpora import load_parallel_corpus
    from hf_bahdanau.data.run_settings import read_data_settings

    settings = read_data_settings(model_dir)
    if not settings:
        raise SystemExit(f"{model_dir} records no corpus (translation_data.json): not a folder made by `train`")
    location = settings.get("data_path")  # a named corpus: where training read it (as `evaluate` reads it)
    data = location if location and Path(location).exists() else settings["data"]
    src, tgt = settings["src_lang"], settings["tgt_lang"]
    corpus = load_parallel_corpus(data, src, tgt, test_split=settings.get("test_split", "test_2016_flickr"),
                                  normalize=settings.get("d2l_normalize", False))  # fmt: skip
    rows = corpus["test"]["translation"][:max_samples]
    return [row[src] for row in rows], [row[tgt] for row in rows]


def beam_scores(model: torch.nn.Module, tokenizer, source: str, targets: list[list[int]]) -> list[tuple[float, float]]:
    """Each target's (summed log-probability, beam score) under `model`, teacher-forced; targets end with `</s>`.
    The beam score is generate()'s: the sum over length ** length_penalty."""
    from hf_bahdanau.models.pipelines import encode
    from hf_bahdanau.models.source_length import source_limit

    encoded = encode(tokenizer, source, source_limit(model.config, tokenizer))  # (1, src_len)
    penalty = model.generation_config.length_penalty
    scores = []
    with torch.inference_mode():
        for target in targets:
            labels = torch.tensor([target])  # (1, tgt_len)
            logits = model(**encoded, labels=labels).logits  # (1, tgt_len, vocab)
            total = float(logits.log_softmax(-1)[0, torch.arange(len(target)), target].sum())
            scores.append((total, total / len(target) ** penalty))
    return scores


def explain_differences(
    model, tokenizer, translator, sources: list[str], indices: list[int], beams: int, lines: tuple | None = None
) -> str:
    """Why the beam search of `translator` (CTranslate2 fp32) and of torch differ on `indices`: each sentence's two
    hypotheses (decoded again alone, for their tokens) scored by our model, and CTranslate2's score of its own
    hypothesis against ours (the weights). `lines`: (torch's, CTranslate2's) batch outputs, to count the sentences
    that decode alone differently."""
    from hf_bahdanau.models.pipelines import encode
    from hf_bahdanau.models.source_length import source_limit

    eos = model.config.eos_token_id
    higher = lower = tied = 0
    weight_gap, moved = 0.0, 0
    for i in indices:
        encoded = encode(tokenizer, sources[i], source_limit(model.config, tokenizer))
        with torch.inference_mode():
            ours = model.generate(**encoded, num_beams=beams)[0, 1:].tolist()  # without the start token
        ours = ours[: ours.index(eos) + 1] if eos in ours else ours
        tokens = translator.source_tokens(sources[i])
        result = translator.translator.translate_batch([tokens], **translator.options(num_beams=beams))[0]
        theirs = tokenizer.convert_tokens_to_ids(result.hypotheses[0]) + [eos]
        (_, ours_score), (theirs_total, theirs_score) = beam_scores(model, tokenizer, sources[i], [ours, theirs])
        ct2_total = sum(translator.translator.score_batch([tokens], [result.hypotheses[0]])[0].log_probs)
        weight_gap = max(weight_gap, abs(ct2_total - theirs_total))
        texts = (tokenizer.decode(ours, skip_special_tokens=True), tokenizer.decode(theirs, skip_special_tokens=True))
        moved += lines is not None and texts != (lines[0][i], lines[1][i])
        gap = theirs_score - ours_score
        higher, lower, tied = higher + (gap > 1e-5), lower + (gap < -1e-5), tied + (abs(gap) <= 1e-5)
        logger.info("line %d: torch %r (beam score %.4f), CTranslate2 %r (%.4f)", i + 1, texts[0], ours_score,
                    texts[1], theirs_score)  # fmt: skip
    return (
        f"{len(indices)} lines differ; under our model CTranslate2's hypothesis scores higher in {higher} (torch's "
        f"search stopped before finding it), lower in {lower} (CTranslate2's stopped first), the same in {tied}; "
        f"CTranslate2's log-probability of its hypotheses against our model's: at most {weight_gap:.1e} apart"
        + (f" ({moved} decoded alone otherwise than in their batch)" if moved else "")
    )


def exactness(args: argparse.Namespace) -> str:
    """The exactness table of `args.exactness` (a trained model folder) on its test split."""
    from hf_bahdanau.decoding.engines.ctranslate2 import CTranslate2Translator
    from hf_bahdanau.decoding.export.ctranslate2 import export_ctranslate2
    from hf_bahdanau.decoding.loading import load_translation_model
    from hf_bahdanau.metrics import load_metric
    from hf_bahdanau.models.pipelines import TranslationPipeline

    torch.set_num_threads(1)
    sources, references = test_corpus(args.exactness, args.max_samples)
    model, tokenizer = load_translation_model(str(args.exactness))
    engines: dict[str, object] = {"torch fp32": TranslationPipeline(model=model, tokenizer=tokenizer)}
    metric = load_metric()
    lines = ["| decoding | engine | same as torch fp32 | BLEU | BLEU change |", "|---|---|---:|---:|---:|"]
    notes = []
    with tempfile.TemporaryDirectory(prefix="benchmark_ctranslate2_") as scratch:
        for label, quantization in (("fp32", "float32"), ("int8", "int8")):
            folder = export_ctranslate2(args.exactness, Path(scratch) / quantization, quantization)
            engines[f"CTranslate2 {label}"] = CTranslate2Translator(folder, threads=1)
        for beams in (1, args.beams):
            decoding = "greedy" if beams == 1 else f"beam {beams}"
            outputs = {engine: [row["translation_text"] for row in translator(sources, batch_size=32, num_beams=beams)]
                       for engine, translator in engines.items()}  # fmt: skip
            bleu = {engine: metric.compute(predictions=hypotheses, references=[[ref] for ref in references])["bleu"]
                    for engine, hypotheses in outputs.items()}  # fmt: skip
            for engine, hypotheses in outputs.items():
                same = sum(a == b for a, b in zip(hypotheses, outputs["torch fp32"], strict=True))
                shown = "-" if engine == "torch fp32" else f"{same:,} / {len(sources):,}"
                change = "" if engine == "torch fp32" else f"{round(bleu[engine] - bleu['torch fp32'], 2) + 0.0:+.2f}"
                lines.append(f"| {decoding} | {engine} | {shown} | {bleu[engine]:.2f} | {change} |")
                logger.info("%s, %s: %d of %d lines as torch fp32, BLEU %.2f", decoding, engine, same,
                            len(sources), bleu[engine])  # fmt: skip
            pairs = enumerate(zip(outputs["CTranslate2 fp32"], outputs["torch fp32"], strict=True))
            differing = [i for i, (a, b) in pairs if a != b]
            if differing:
                lines_pair = (outputs["torch fp32"], outputs["CTranslate2 fp32"])
                why = explain_differences(model, tokenizer, engines["CTranslate2 fp32"], sources, differing, beams,
                                          lines_pair)  # fmt: skip
                notes.append(f"- {decoding}, CTranslate2 fp32: {why}.")
    header = (f"{args.exactness}, {len(sources):,} test sentences, one thread; ctranslate2 {ctranslate2.__version__}, "
              f"torch {torch.__version__}")  # fmt: skip
    return "\n".join([header, "", *lines, "", *notes])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """benchmark_speed's options, `--threads` taking several counts, and `--exactness MODEL_DIR`."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--threads", type=int, nargs="+", default=[None], help="thread counts, each run in turn")
    parser.add_argument("--exactness", type=Path, help="a trained model folder: measure exactness, not speed")
    own, rest = parser.parse_known_args(argv)
    args = shared.parse_args(rest)
    args.thread_counts, args.exactness = own.threads, own.exactness
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.exactness is not None:
        shared.report(exactness(args), args.output)
        return
    sizes = (args.hidden_size, args.transformer_layers, args.transformer_layers, args.vocab_size)
    work = (args.batch_size, args.src_len, args.tgt_len)
    logger.info("d_model %d, %d+%d layers, vocab %d; batch %d, src %d, tgt %d; ctranslate2 %s, torch %s",
                *sizes, *work, ctranslate2.__version__, torch.__version__)  # fmt: skip
    results = {}
    for threads in args.thread_counts:
        args.threads = threads
        if threads is not None:
            torch.set_num_threads(threads)
        logger.info("%s", threads_label(threads))
        results[threads] = run(args)
    shared.report(markdown_table(results), args.output)


if __name__ == "__main__":
    main()
