"""Decoding speed of our Transformer in CTranslate2 against our torch `generate()` and against MarianMT in CTranslate2.

The setup is `benchmark_speed.py`'s (imported from it): the random d_model 256, 3+3-layer Transformer and the
MarianMT model of the same size, the same random source tokens (batch 64, 20 tokens), the same work on every side
(EOS off, exactly `--tgt-len` = 22 new tokens; CTranslate2 with `min_decoding_length = max_decoding_length`), the
functions of a group called in turn and the best of `--decode-repeats` rounds kept. Measured, greedy and beam 5:

- ours in torch: `generate()` fp32, and after `quantize_for_cpu` (our `--quantize int8`);
- ours in CTranslate2 (`hf_bahdanau.export.D2LTransformerConverter`), fp32 and int8;
- MarianMT in CTranslate2, converted by CTranslate2's own `TransformersConverter` (its Marian loader drops the last
  vocabulary row, which Marian keeps for padding: 1 row in 8,000), fp32 and int8.

Each CTranslate2 model first decodes the source greedily beside torch's fp32 `generate()` and the share of
sentences with the same tokens is logged (fp32: all of them).

    python scripts/benchmark_ctranslate2.py --threads 1 --output ct2.md
    python scripts/benchmark_ctranslate2.py --quick  # tiny sizes, seconds
"""

from __future__ import annotations

import argparse
import copy
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

from hf_bahdanau.export import D2LTransformerConverter

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


def ct2_models(ours: torch.nn.Module, marian: torch.nn.Module, args: argparse.Namespace, scratch: Path) -> dict:
    """CTranslate2 translators of ours and Marian, fp32 and int8, each with its vocabulary (token strings)."""
    tokenizer = word_tokenizer(args.vocab_size)
    ours_dir = D2LTransformerConverter(ours, tokenizer).convert(str(scratch / "ours"), force=True)
    marian.config.save_pretrained(scratch / "marian-config")  # TransformersConverter reads the config from a folder
    # Marian's loader drops the last vocabulary row (it takes it for Marian's padding row)
    marian_tokenizer = word_tokenizer(args.vocab_size, last="<pad>")
    converter = InMemoryTransformersConverter(str(scratch / "marian-config"), marian, marian_tokenizer)
    marian_dir = converter.convert(str(scratch / "marian"), force=True)
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
    ours, marian = shared.transformer(args).eval(), shared.marian(args).eval()
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


def markdown_table(rows: list[shared.Row]) -> str:
    """The rows and the ratios as a markdown table."""
    lines = ["| measure | implementation | figure | notes |", "|---|---|---:|---|"]
    lines += [f"| {measure} | {name} | {value:,.1f} | {note} |" for measure, name, value, note in rows]
    figure = {(measure, name): value for measure, name, value, _ in rows}
    for measure, top, bottom in RATIOS:
        ratio = figure[f"Transformer {measure}", top] / figure[f"Transformer {measure}", bottom]
        lines.append(f"| ratio | {measure.split()[0]}, {top} / {bottom} | {ratio:.2f}x | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = shared.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    sizes = (args.hidden_size, args.transformer_layers, args.transformer_layers, args.vocab_size)
    work = (args.batch_size, args.src_len, args.tgt_len)
    versions = (ctranslate2.__version__, torch.__version__, args.threads or "default")
    logger.info("d_model %d, %d+%d layers, vocab %d; batch %d, src %d, tgt %d; ctranslate2 %s, torch %s, %s threads",
                *sizes, *work, *versions)  # fmt: skip
    shared.report(markdown_table(run(args)), args.output)


if __name__ == "__main__":
    main()
