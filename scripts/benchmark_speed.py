"""Speed of both models against reference implementations doing the same work, side by side in one process.

- RNN: `BahdanauForConditionalGeneration` against a plain copy of d2l's code (`d2l_reference.py`);
- Transformer: `TransformerForConditionalGeneration` against `transformers.MarianMTModel` of the same size
  (built from a `MarianConfig`, never downloaded), which is also the beam-search reference for the RNN (d2l has no
  beam search).

Every side runs on the same random tokens (fixed seed); the functions of one group are called in turn
(ours, theirs, ours, ...) so that noise from other processes hits all alike, and every figure is the fastest of the
repeats (the least disturbed). `--clock cpu` times the process's CPU seconds instead of the wall clock: on a loaded
machine the time spent waiting for a core then does not count (with `--threads 1` the two agree on an idle one).
Measured:

- training: target tokens/s for forward + backward + fused AdamW step (the Trainer's optimizer), dropout on;
- decoding, the same work on every side: EOS off and exactly `--tgt-len` new tokens, no logits processors;
  `generate()` for ours and Marian, d2l's greedy loop batched (and the book's `predict_seq2seq`, one sentence at a
  time); and the RNN's `forward` in d2l's batched loop ("ours, d2l's loop"), which tells the model's own cost from
  the work `generate()` does at every step and d2l's loop does not (a float32 copy of the logits, stopping criteria);
- decoding as a user calls it ("user call"): `generate()` with EOS on (random weights rarely emit it, so this
  measures the per-step cost of EOS bookkeeping);
- int8: ours after `quantize_for_cpu` (dynamic int8 linear and recurrent layers), same decoding work.

With `--models`, trained model folders translate Multi30k's test_2016_flickr instead (their own corpus and
languages), fp32 and int8 interleaved batch by batch, as a user calls them (EOS on, the model's max_new_tokens):
sentences/s and sacreBLEU.

    python scripts/benchmark_speed.py --threads 2 --output speed.md
    python scripts/benchmark_speed.py --quick  # tiny sizes, a few seconds
    HF_BAHDANAU_DATA_DIR=../shared/data python scripts/benchmark_speed.py --threads 2 --models runs/a runs/b
"""

from __future__ import annotations

import argparse
import copy
import logging
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    GenerationConfig,
    MarianConfig,
    MarianMTModel,
    PreTrainedModel,
)

from hf_bahdanau import (
    BahdanauConfig,
    BahdanauForConditionalGeneration,
    TransformerConfig,
    TransformerForConditionalGeneration,
    TranslationPipeline,
    load_metric,
    load_parallel_corpus,
    quantize_for_cpu,
)
from hf_bahdanau.models.cache_names import returned_cache

from d2l_reference import (  # scripts/ is on sys.path when this file runs as a script
    BOS,
    EOS,
    PAD,
    EncoderDecoder,
    MaskedSoftmaxCELoss,
    copy_weights,
    d2l_model,
    predict_seq2seq,
    predict_seq2seq_batched,
)

logger = logging.getLogger("benchmark_speed")

Row = tuple[str, str, float, str]  # (measure, implementation, figure, note)
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
TRAINING, GREEDY, BEAM = "training (target tokens/s)", "greedy (sentences/s)", "beam (sentences/s)"
# (model, measure, implementation over implementation)
RATIOS = [
    ("RNN", TRAINING, "ours", "d2l"),
    ("RNN", GREEDY, "ours", "d2l, batched loop"),
    ("RNN", GREEDY, "ours, d2l's loop", "d2l, batched loop"),
    ("RNN", GREEDY, "ours", "d2l, one at a time"),
    ("RNN", GREEDY, "ours int8", "d2l, batched loop"),
    ("RNN", BEAM, "ours", "MarianMT"),
    ("RNN", BEAM, "ours int8", "MarianMT"),
    ("Transformer", TRAINING, "ours", "MarianMT"),
    ("Transformer", GREEDY, "ours", "MarianMT"),
    ("Transformer", BEAM, "ours", "MarianMT"),
    ("Transformer", GREEDY, "ours int8", "MarianMT"),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--embedding-size", type=int, default=256, help="RNN embeddings")
    parser.add_argument("--hidden-size", type=int, default=256, help="RNN hidden size and Transformer d_model")
    parser.add_argument("--layers", type=int, default=2, help="RNN layers (encoder and decoder)")
    parser.add_argument("--transformer-layers", type=int, default=3, help="Transformer blocks (encoder and decoder)")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn-dim", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--src-len", type=int, default=20)
    parser.add_argument("--tgt-len", type=int, default=22)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per implementation")
    parser.add_argument("--warmup", type=int, default=3, help="untimed training steps and decoding rounds")
    parser.add_argument("--decode-repeats", type=int, default=7, help="timed decoding rounds per implementation")
    parser.add_argument("--beams", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--clock", choices=CLOCKS, default="wall", help="wall seconds, or the process's CPU seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="tiny sizes and few repeats: a smoke test")
    parser.add_argument("--output", type=Path, default=None, help="also write the markdown table here")
    parser.add_argument("--models", type=Path, nargs="+", help="saved model folders: time Multi30k test instead")
    parser.add_argument("--max-samples", type=int, default=None, help="with --models: the first N test sentences")
    args = parser.parse_args(argv)
    if args.quick:
        args.vocab_size, args.embedding_size, args.hidden_size, args.batch_size = 50, 8, 16, 4
        args.transformer_layers, args.heads, args.ffn_dim = 1, 2, 32
        args.src_len, args.tgt_len, args.steps, args.warmup, args.decode_repeats = 5, 6, 2, 1, 1
    return args


def interleaved(
    fns: dict[str, Callable[[], object]], warmup: int, repeats: int, clock: Callable[[], float] = time.perf_counter
) -> dict[str, float]:
    """Fewest seconds of `clock` per call of each function, calling them in turn `repeats` times after `warmup`
    rounds."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = clock()
            fn()
            times[name].append(clock() - start)
    return {name: min(values) for name, values in times.items()}


def adamw(model: nn.Module) -> torch.optim.Optimizer:
    """The Trainer's optimizer: AdamW, fused where this torch build has a fused CPU kernel."""
    try:
        return torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    except RuntimeError:
        return torch.optim.AdamW(model.parameters(), lr=1e-3)


def hf_training_step(model: PreTrainedModel, src: torch.Tensor, labels: torch.Tensor) -> Callable[[], None]:
    """One step of a transformers seq2seq model on `labels` (decoder inputs shifted from them)."""
    optimizer = adamw(model)

    def step() -> None:
        loss = model(input_ids=src, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def d2l_training_step(net: EncoderDecoder, src: torch.Tensor, labels: torch.Tensor) -> Callable[[], None]:
    """One step of d2l's training loop (`MaskedSoftmaxCELoss(...).sum().backward()`), with fused AdamW."""
    optimizer, loss_fn = adamw(net), MaskedSoftmaxCELoss()
    batch, tgt_len = labels.shape
    src_valid_len, tgt_valid_len = torch.full((batch,), src.shape[1]), torch.full((batch,), tgt_len)
    dec_input = torch.cat([torch.full((batch, 1), BOS), labels[:, :-1]], dim=1)  # d2l's teacher forcing

    def step() -> None:
        loss = loss_fn(net(src, dec_input, src_valid_len), labels, tgt_valid_len)
        optimizer.zero_grad()
        loss.sum().backward()
        optimizer.step()

    return step


def decoding(model: PreTrainedModel, src: torch.Tensor, args: argparse.Namespace, beams: int, eos: bool) -> Callable:
    """`generate` of `tgt_len` new tokens with `beams` beams; with `eos`, as a user calls it (stops at </s>)."""
    model.eval()
    model.generation_config.max_length = None  # else its default is merged in and warned about
    model.generation_config.eos_token_id = None  # else generate merges it in when a call leaves it unset
    config = GenerationConfig(
        decoder_start_token_id=BOS,
        eos_token_id=EOS if eos else None,
        pad_token_id=PAD,
        do_sample=False,
        num_beams=beams,
        max_new_tokens=args.tgt_len,
    )
    if not eos:
        assert model._prepare_generation_config(config)[0].eos_token_id is None

    def run() -> None:
        out = model.generate(src, generation_config=config)
        assert eos or out.shape == (args.batch_size, args.tgt_len + 1)

    return run


def d2l_loop(model: PreTrainedModel, src: torch.Tensor, steps: int) -> Callable[[], torch.Tensor]:
    """`predict_seq2seq_batched`'s greedy loop around the model's `forward` and its decoder state, not `generate`."""
    model.eval()

    def run() -> torch.Tensor:
        encoder_outputs = model.get_encoder()(src)
        tokens, state, outputs = torch.full((src.shape[0], 1), BOS), None, []
        for _ in range(steps):
            Y = model(encoder_outputs=encoder_outputs, decoder_input_ids=tokens, cache=state)
            tokens, state = Y.logits.argmax(dim=2), returned_cache(Y)
            outputs.append(tokens)
        return torch.cat(outputs, dim=1)

    return run


def fair_decoders(models: dict[str, PreTrainedModel], src: torch.Tensor, args: argparse.Namespace, beams: int) -> dict:
    """Decoding functions of each model, the same work (EOS off), and each model's user call (EOS on)."""
    fns = {name: decoding(model, src, args, beams, eos=False) for name, model in models.items()}
    users = {name: model for name, model in models.items() if "int8" not in name}
    fns.update(
        {f"{name}, user call (EOS on)": decoding(model, src, args, beams, eos=True) for name, model in users.items()}
    )
    return fns


def timed(measure: str, fns: dict[str, Callable], args: argparse.Namespace, items: int, note: str) -> list[Row]:
    """Rows of `items / seconds` for functions timed side by side."""
    logger.info("%s: %s", measure, ", ".join(fns))
    training = "training" in measure
    with torch.inference_mode(mode=not training):
        repeats = args.steps if training else args.decode_repeats
        seconds = interleaved(fns, args.warmup if training else 1, repeats, CLOCKS[args.clock])
    return [(measure, name, items / value, note) for name, value in seconds.items()]


def transformer_sizes(args: argparse.Namespace) -> dict:
    """The config fields ours and Marian's share, with the benchmark's sizes."""
    layers, dropout = args.transformer_layers, args.dropout
    sizes = dict(vocab_size=args.vocab_size, d_model=args.hidden_size, encoder_layers=layers, decoder_layers=layers)
    return dict(**sizes, dropout=dropout, attention_dropout=dropout, scale_embedding=True, max_position_embeddings=128)


def marian(args: argparse.Namespace) -> MarianMTModel:
    """`MarianMTModel` of the Transformer's size: shared and tied embeddings, ReLU, biases, post-norm."""
    config = MarianConfig(
        **transformer_sizes(args),
        encoder_attention_heads=args.heads,
        decoder_attention_heads=args.heads,
        encoder_ffn_dim=args.ffn_dim,
        decoder_ffn_dim=args.ffn_dim,
        activation_function="relu",
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
        forced_eos_token_id=None,  # Marian's default forces </s> at max_length: a logits processor ours lacks
    )
    return MarianMTModel(config)


def transformer(args: argparse.Namespace) -> TransformerForConditionalGeneration:
    """Ours at Marian's size and options (attention biases, tied embeddings, embeddings of unit-size logits)."""
    config = TransformerConfig(
        **transformer_sizes(args),
        attention_heads=args.heads,
        ffn_dim=args.ffn_dim,
        attention_bias=True,
        tie_word_embeddings=True,
        tie_encoder_decoder_embeddings=True,
        init_std=args.hidden_size**-0.5,  # the recipes' choice; d2l's N(0, 1) makes tied logits huge and their
        # gradients denormal (matrix products 20x slower, a measure of the init, not of the code)
    )
    return TransformerForConditionalGeneration(config)


def run(args: argparse.Namespace) -> list[Row]:
    """Rows (measure, implementation, figure, note) of the table: the RNN, then the Transformer."""
    torch.manual_seed(args.seed)
    rnn = BahdanauForConditionalGeneration(
        BahdanauConfig(
            vocab_size=args.vocab_size,
            embedding_size=args.embedding_size,
            hidden_size=args.hidden_size,
            encoder_layers=args.layers,
            decoder_layers=args.layers,
            dropout=args.dropout,
        )
    )
    net = d2l_model(args.vocab_size, args.embedding_size, args.hidden_size, args.layers, args.dropout)
    copy_weights(rnn, net)
    ours, theirs = transformer(args), marian(args)
    rnn_int8, ours_int8 = (quantize_for_cpu(copy.deepcopy(model)) for model in (rnn, ours))  # before training
    generator = torch.Generator().manual_seed(args.seed)
    src = torch.randint(3, args.vocab_size, (args.batch_size, args.src_len), generator=generator)
    labels = torch.randint(3, args.vocab_size, (args.batch_size, args.tgt_len), generator=generator)
    tokens, sentences, beams = args.batch_size * args.tgt_len, args.batch_size, args.beams
    note = "forward + backward + fused AdamW"
    steps = {"ours": hf_training_step(rnn, src, labels), "d2l": d2l_training_step(net, src, labels)}
    rows = timed("RNN " + TRAINING, steps, args, tokens, note)
    steps = {"ours": hf_training_step(ours, src, labels), "MarianMT": hf_training_step(theirs, src, labels)}
    rows += timed("Transformer " + TRAINING, steps, args, tokens, note)

    rnn_models = {"ours": rnn, "ours int8": rnn_int8}
    greedy = fair_decoders(rnn_models, src, args, beams=1)
    greedy["ours, d2l's loop"] = d2l_loop(rnn, src, args.tgt_len)
    greedy["d2l, batched loop"] = lambda: predict_seq2seq_batched(net, src, args.tgt_len)
    greedy["d2l, one at a time"] = lambda: [predict_seq2seq(net, row, args.tgt_len) for row in src]
    rows += timed("RNN " + GREEDY, greedy, args, sentences, f"{args.tgt_len} tokens, batch {args.batch_size}")
    beam = fair_decoders({**rnn_models, "MarianMT": theirs}, src, args, beams)
    rows += timed("RNN " + BEAM, beam, args, sentences, f"{beams} beams; d2l has no beam search")

    models = {"ours": ours, "ours int8": ours_int8, "MarianMT": theirs}
    for measure, width in ((GREEDY, 1), (BEAM, beams)):
        rows += timed(f"Transformer {measure}", fair_decoders(models, src, args, width), args, sentences, "")
    return rows


def corpus_rows(args: argparse.Namespace) -> list[Row]:
    """Sentences/s (BLEU in the note) of each saved model, fp32 and int8, greedy and beam, on its test split."""
    rows = []
    for folder in args.models:
        model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
        pipelines = {name: TranslationPipeline(model=m, tokenizer=tokenizer) for name, m in
                     (("fp32", model), ("int8", quantize_for_cpu(copy.deepcopy(model))))}  # fmt: skip
        src_lang, tgt_lang = model.config.source_language, model.config.target_language
        test = load_parallel_corpus("multi30k", src_lang, tgt_lang)["test"]["translation"][: args.max_samples]
        sources, references = [pair[src_lang] for pair in test], [[pair[tgt_lang]] for pair in test]
        for beams in (1, args.beams):
            seconds, hypotheses = dict.fromkeys(pipelines, 0.0), {name: [] for name in pipelines}
            for start in range(0, len(sources), args.batch_size):
                batch = sources[start : start + args.batch_size]
                for name, translator in pipelines.items():
                    began = time.perf_counter()
                    outputs = translator(batch, batch_size=args.batch_size, num_beams=beams)
                    seconds[name] += time.perf_counter() - began
                    hypotheses[name] += [output["translation_text"] for output in outputs]
            for name in pipelines:
                bleu = load_metric().compute(predictions=hypotheses[name], references=references)["bleu"]
                measure = f"{folder.name} ({model.config.model_type}), {beams} beam(s), sentences/s"
                rows.append((measure, name, len(sources) / seconds[name], f"BLEU {bleu:.2f}"))
            logger.info("%s", rows[-2:])
    return rows


def markdown_table(rows: list[Row]) -> str:
    """The rows and the ratios as a markdown table."""
    lines = ["| measure | implementation | figure | notes |", "|---|---|---:|---|"]
    lines += [f"| {measure} | {name} | {value:,.1f} | {note} |" for measure, name, value, note in rows]
    figure = {(measure, name): value for measure, name, value, _ in rows}
    if any(measure.endswith("sentences/s") for measure, *_ in rows):  # the --models table: int8 over fp32
        measures = dict.fromkeys(measure for measure, *_ in rows)
        ratios = [(measure, figure[measure, "int8"] / figure[measure, "fp32"]) for measure in measures]
        return "\n".join(lines + [f"| ratio | {measure}: int8 / fp32 | {ratio:.2f}x | |" for measure, ratio in ratios])
    for model, measure, top, bottom in RATIOS:
        ratio = figure[f"{model} {measure}", top] / figure[f"{model} {measure}", bottom]
        lines.append(f"| ratio | {model} {measure.split()[0]}, {top} / {bottom} | {ratio:.2f}x | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    logger.info(
        "vocab %d; RNN emb %d, hidden %d, %d layers; Transformer d_model %d, %d+%d layers, %d heads, FFN %d; "
        "batch %d, src %d, tgt %d; torch %s, %d threads, %s clock",
        args.vocab_size,
        args.embedding_size,
        args.hidden_size,
        args.layers,
        args.hidden_size,
        args.transformer_layers,
        args.transformer_layers,
        args.heads,
        args.ffn_dim,
        args.batch_size,
        args.src_len,
        args.tgt_len,
        torch.__version__,
        torch.get_num_threads(),
        args.clock,
    )
    report(markdown_table(corpus_rows(args) if args.models else run(args)), args.output)


def report(table: str, output: Path | None) -> None:
    """Log the results table and write it to `output` (a Markdown file), if given."""
    logger.info("results:\n%s", table)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(table + "\n")
        logger.info("table written to %s", output)


if __name__ == "__main__":
    main()
