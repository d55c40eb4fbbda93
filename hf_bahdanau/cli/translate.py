"""`hf-bahdanau translate`: translate arguments, stdin (in chunks, written as each batch is done) or lines typed at
a prompt; documents, JSON lines and HTML (`--document`, `--input-format jsonl|html`); the attention heatmap
(`--heatmap`)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .arguments import (
    UsageError,
    add_command,
    add_fallback_arguments,
    add_generation_arguments,
    check_engine_options,
    check_fallback_options,
    generation_options,
    load_translator,
    positive_int,
    said_fallback,
    with_fallback,
)
from .streams import interactive_lines, stdin_chunks, stdin_lines, write_out

if TYPE_CHECKING:
    from hf_bahdanau.decoding.cascade import Cascade
    from hf_bahdanau.decoding.translator import Translation, Translator

logger = logging.getLogger("hf_bahdanau")
SUMMARY = "translate arguments, stdin lines, or at a prompt"
EPILOG = """\
examples:
  hf-bahdanau translate --model runs/quick-de-en "Ein Hund rennt." "Zwei Männer lachen."
  hf-bahdanau translate --model runs/quick-de-en < sentences.de > sentences.en   # one line out per line in
  hf-bahdanau translate --model runs/quick-de-en                                 # a prompt; q quits
  hf-bahdanau translate --model runs/quick-de-en "Ein Hund rennt." --heatmap attention.png
  hf-bahdanau translate --model runs/quick-de-en --document letter.de.txt > letter.en.txt  # paragraphs kept
  hf-bahdanau translate --model runs/quick-de-en --input-format jsonl --scores < in.jsonl > out.jsonl
  hf-bahdanau translate --model runs/quick-de-en --input-format html < page.de.html > page.en.html
  hf-bahdanau translate --model runs/quick-de-en --glossary terms.tsv < sentences.de   # terms.tsv: Hund<TAB>hound
  hf-bahdanau translate --model runs/quick-de-en --prefix "Two dogs" "Zwei Hunde spielen im Schnee."
  hf-bahdanau translate --model runs/quick-de-en --quality < sentences.de     # after hf-bahdanau calibrate
  hf-bahdanau translate --model runs/student --fallback runs/teacher --min-quality 0.5 < sentences.de  # teacher < 0.5
"""


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Add `translate` and its options to the command line's subparsers."""
    parser = add_command(commands, "translate", SUMMARY, EPILOG)
    add_generation_arguments(parser)
    parser.add_argument("text", nargs="*", help="Sentences to translate (default: stdin; a prompt on a terminal).")
    parser.add_argument(
        "--prefix", metavar="TEXT", help="Each translation starts with this text (e.g. to complete what you typed)."
    )
    parser.add_argument(
        "--heatmap",
        metavar="FILE.png",
        help="Draw the first sentence's attention into this one file: the cross-attention between source and "
        "translation words (subwords merged) of the last layer, heads averaged.",
    )
    parser.add_argument(
        "--heatmap-layer", "--heatmap_layer", type=positive_int, help="Draw this layer (from 1) instead of the last."
    )
    parser.add_argument(
        "--heatmap-head", "--heatmap_head", type=positive_int, help="Draw this head (from 1) instead of their average."
    )
    parser.add_argument(
        "--heatmap-all",
        "--heatmap_all",
        action="store_true",
        help="Draw every layer and head, token by token: the cross-attention grid in FILE.png, and for the "
        "Transformer its self-attention in FILE-encoder.png and FILE-decoder.png (three files).",
    )
    parser.add_argument(
        "--n-best",
        "--n_best",
        type=positive_int,
        help="Write the K best translations of each source (K at most the beams), best first, as lines "
        "INDEX<TAB>SCORE<TAB>TRANSLATION (INDEX: the source's line, from 0).",
    )
    parser.add_argument(
        "--scores",
        action="store_true",
        help="Write SCORE<TAB>TRANSLATION lines: SCORE is the translation's mean token log-probability (0 is "
        "certain; low scores flag doubtful output); an empty source gets 0.0000 and an empty translation.",
    )
    parser.add_argument(
        "--quality",
        action="store_true",
        help="Estimate each translation's quality (the model folder's quality estimator, from `calibrate`): lines "
        "QUALITY<TAB>TRANSLATION<TAB>TAGS, QUALITY the predicted sentence chrF / 100 (0 to 1; low: check it), TAGS "
        "OK or BAD per word of the translation (space-separated); with --input-format jsonl a 'quality' field "
        "{score, words: [{word, probability, ok}], bergamot}.",
    )
    parser.add_argument(
        "--alignments",
        action="store_true",
        help="Append <TAB>ALIGNMENT to each line: Pharaoh pairs i-j linking source word i to translation word j "
        "(whitespace words from 0, subwords merged), each translation word to the source word it attends to most "
        "(the Transformer's last-layer cross-attention averaged over heads; the RNN's attention).",
    )
    parser.add_argument(
        "--batch-tokens",
        "--batch_tokens",
        type=positive_int,
        help="Batches hold at most N padded source tokens (and at most --batch-size sentences); sources are "
        "sorted by length (within windows of 2,000 lines) and written back in input order.",
    )
    parser.add_argument(
        "--document",
        metavar="FILE",
        help="Translate a document (- for stdin): paragraphs (split at blank lines, their lines joined) are split "
        "into sentences (sentencex), and each paragraph's translation is written on one line, its sentences joined "
        "by a space; blank lines are kept. With --input-format jsonl, each record's text is such a document.",
    )
    parser.add_argument(
        "--document-language",
        "--document_language",
        metavar="CODE",
        help="The language the sentence splitter splits --document by (default: the model's source language).",
    )
    parser.add_argument(
        "--input-format",
        "--input_format",
        choices=("text", "jsonl", "html"),
        default="text",
        help="jsonl: each input line is a JSON object with a 'text' field; each output line is that object with "
        "'translation' added (and 'score' with --scores, a document's the mean of its sentences'; 'retranslated' "
        "with --fallback, how many of its sentences the teacher re-translated). html: stdin (or --document) is one "
        "HTML document, translated a sentence at a time with its inline tags put back on the aligned words; tags, "
        'comments, scripts, code and translate="no" content are kept.',
    )
    add_fallback_arguments(parser, "Give it once; the log says how many sentences it re-translated.")


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[Callable[[], contextlib.AbstractContextManager[None]]]:
    """SIGTERM (e.g. `kill`, a job scheduler) raises KeyboardInterrupt as Ctrl-C does, in the main thread, meanwhile.
    Both wait out a block under the `whole()` it gives, so that what the block writes and counts is done whole, or not
    at all: the interrupt comes at its end."""
    in_block = interrupted = False

    def interrupt(signum: int, frame: object) -> None:
        nonlocal interrupted
        if not in_block:
            raise KeyboardInterrupt
        interrupted = True

    @contextlib.contextmanager
    def whole() -> Iterator[None]:
        nonlocal in_block
        in_block = True
        try:
            yield
        finally:
            in_block = False
        if interrupted:
            raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: signals stay as they are
        yield contextlib.nullcontext
        return
    ctrl_c = signal.getsignal(signal.SIGINT) is signal.default_int_handler  # (one that is ignored stays ignored)
    if ctrl_c:
        signal.signal(signal.SIGINT, interrupt)
    try:
        yield whole
    finally:
        signal.signal(signal.SIGTERM, previous)
        if ctrl_c:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _write_heatmap(translator: Translator, text: str, args: argparse.Namespace, **options: int) -> str:
    """Translate `text` and draw its attention to `args.heatmap`: one figure of the words' cross-attention (a layer,
    a head), or with `args.heatmap_all` every layer and head, and the self-attention beside it; the translation."""
    from hf_bahdanau.decoding.attention_maps import plot_attention_maps, plot_word_attention
    from hf_bahdanau.errors import as_input_error
    from hf_bahdanau.models.source_length import logger as cutting

    class Untruncated(logging.Filter):  # the translation of `text` says it was cut: once is enough
        def filter(self, record: logging.LogRecord) -> bool:
            return "truncated" not in record.getMessage()

    said = Untruncated()
    cutting.addFilter(said)
    try:
        maps = translator.attention_maps(text, **options)
    finally:
        cutting.removeFilter(said)
    with as_input_error(ValueError, OSError):  # --heatmap FILE: a folder it cannot make, a format with no writer
        if args.heatmap_all:
            plot_attention_maps(maps, text, args.heatmap)  # save_figure logs each file written
        else:
            plot_word_attention(maps, text, args.heatmap, layer=args.heatmap_layer, head=args.heatmap_head)
    return maps.translation


def _check_translate_options(args: argparse.Namespace) -> None:
    """Refuse options the engine cannot do (before anything is loaded)."""
    check_engine_options(args)
    check_fallback_options(args, several=False)
    if args.fallback and args.heatmap:
        raise UsageError("--heatmap draws one model's attention: leave out --fallback")
    if args.engine != "torch":
        asked = [name for name, value in (("--heatmap", args.heatmap), ("--alignments", args.alignments)) if value]
        if asked:
            raise UsageError(f"{' and '.join(asked)} need --engine torch: {args.engine} gives no attention weights")
    if args.document or args.input_format != "text":
        _check_document_options(args)
    if args.heatmap:
        _check_heatmap_files(args)


def _check_heatmap_files(args: argparse.Namespace) -> None:
    """Refuse a --heatmap file (any of the three of --heatmap-all) that is a file translate reads: the model's, the
    glossary, the avoid list or the document, by inode (through a symlink or a hard link too)."""
    from hf_bahdanau.folders import files_by_inode, inode

    path = Path(args.heatmap)
    parts = ("encoder", "decoder") if args.heatmap_all else ()
    read = files_by_inode([args.model, args.glossary, args.avoid, args.document if args.document != "-" else None])
    for file in (path, *(path.with_name(f"{path.stem}-{part}{path.suffix}") for part in parts)):
        if (key := inode(file)) in read:
            raise UsageError(f"--heatmap {file} would overwrite {read[key]}, which translate reads: choose another")


def _check_document_options(args: argparse.Namespace) -> None:
    """Refuse what `--document` and `--input-format jsonl` cannot do (before anything is loaded)."""
    given = "--document" if args.document else f"--input-format {args.input_format}"
    if args.text:
        raise UsageError(f"{given} reads {args.document or 'stdin'}: leave out the sentences given as arguments")
    asked = [name for name, value in (("--heatmap", args.heatmap), ("--n-best", args.n_best),
             ("--alignments", args.alignments)) if value]  # fmt: skip
    if asked:
        raise UsageError(f"{given} takes no {' or '.join(asked)}: translate sentences a line each")
    for name, value, field in (("--scores", args.scores, "score"), ("--quality", args.quality, "quality")):
        if value and args.input_format == "html":
            raise UsageError(f"{name} does not apply to --input-format html: a page has no place for a {field}")
        if value and args.input_format != "jsonl":
            raise UsageError(f"{name} with --document needs --input-format jsonl (a '{field}' field per record)")


def _translate_documents(translator: Translator | Cascade, args: argparse.Namespace) -> None:
    """`--document FILE` (paragraphs split into sentences, written back as paragraphs) and `--input-format jsonl`
    (a `text` field per line, written back with `translation`, and `score` with --scores: the mean of its
    sentences' scores); every sentence translated in length-sorted token batches, the output written in order."""
    from hf_bahdanau.decoding.cascade import TEACHER
    from hf_bahdanau.decoding.documents import (
        check_language,
        grouped,
        join_document,
        jsonl_line,
        read_jsonl,
        split_document,
        text_lines,
    )
    from hf_bahdanau.decoding.quality.estimator import joined_estimate

    source = args.document if args.document and args.document != "-" else "stdin"
    if source == "stdin":
        text = "\n".join(stdin_lines())
    else:
        try:
            text = Path(source).read_bytes().decode("utf-8-sig")  # a byte-order mark is not text
        except OSError as error:
            raise UsageError(f"--document {source} cannot be read ({error.strerror or error})") from None
        except UnicodeDecodeError as error:
            raise UsageError(f"{source} is not UTF-8 text (byte {error.start})") from None
    if args.input_format == "html":
        write_out(translator.translate_html([text], args.document_language, progress=sys.stderr.isatty(),
                                            **generation_options(args))[0] + "\n")  # fmt: skip
        return
    language = check_language(args.document_language or translator.config.source_language) if args.document else None
    jsonl = args.input_format == "jsonl"
    records = read_jsonl(text_lines(text), source) if jsonl else None
    if records is None:  # the document's lines, each the sentences of a paragraph or none (a blank line)
        layouts = [[sentences] for sentences in split_document(text, language)]
    else:  # each record's text as a document, or as one sentence; a blank line as nothing
        layouts = [[] if r is None else split_document(r["text"], language) if language
                   else [[r["text"]]] if r["text"].strip() else [[]] for r in records]  # fmt: skip
    sentences = [sentence for layout in layouts for line in layout for sentence in line]
    counts = [sum(len(line) for line in layout) for layout in layouts]
    progress = sys.stderr.isatty()  # a bar on a terminal, not in a log file
    written = 0
    try:  # each paragraph (record) is written as soon as its sentences are translated
        with terminate_as_interrupt() as whole:
            batches = translator.translate_stream(sentences, progress=progress, quality=args.quality,
                                                  **generation_options(args))  # fmt: skip
            found = grouped(counts, (translation for batch in batches for translation in batch))
            for index, (layout, hypotheses) in enumerate(zip(layouts, found, strict=True)):
                translation = join_document(layout, [hypothesis.text for hypothesis in hypotheses])
                if records is None:
                    line = f"{translation}\n"
                elif records[index] is None:
                    line = "\n"
                else:
                    record = {**records[index], "translation": translation}
                    if args.scores:  # null where nothing was translated (0.0 would say "certain")
                        scores = [hypothesis.score for hypothesis in hypotheses if hypothesis.score is not None]
                        record["score"] = round(sum(scores) / len(scores), 4) if scores else None
                    if args.quality:  # null where nothing was translated
                        estimate = joined_estimate([translation.quality for translation in hypotheses])
                        record["quality"] = None if estimate is None else estimate.as_dict()
                    if args.fallback:
                        record["retranslated"] = sum(translation.made_by == TEACHER for translation in hypotheses)
                    line = jsonl_line(record)
                with whole():
                    write_out(line)
                    written += 1
    except KeyboardInterrupt:
        unit = "lines" if jsonl else "paragraph lines"
        raise KeyboardInterrupt(f"interrupted: wrote {written} of {len(layouts)} {unit}") from None


def hypothesis_lines(
    index: int, translation: Translation, n_best: bool, scores: bool, alignments: bool, quality: bool = False
) -> str:
    """The output lines of one source: `[INDEX TAB] [SCORE TAB] [QUALITY TAB] TRANSLATION [TAB ALIGNMENT] [TAB TAGS]`,
    one per hypothesis (the index for n-best lists, the score and alignment when asked for); with `quality`, the best
    hypothesis's estimate: QUALITY its sentence score (0 to 1), TAGS an OK or BAD per word, space-separated (empty
    fields on the other hypotheses and where nothing was estimated)."""
    lines = []
    for rank, hypothesis in enumerate(translation.hypotheses):
        fields = [str(index)] if n_best else []
        if scores:  # an empty field where nothing was scored (a blank source, CTranslate2)
            fields.append("" if hypothesis.score is None else f"{hypothesis.score:.4f}")
        estimate = translation.quality if quality and rank == 0 else None
        if quality:
            fields.append("" if estimate is None else f"{estimate.score:.4f}")
        fields.append(hypothesis.text)
        if alignments and hypothesis.alignment is not None:
            fields.append(hypothesis.alignment)
        if quality:
            fields.append("" if estimate is None else " ".join("OK" if ok else "BAD" for ok in estimate.ok))
        lines.append("\t".join(fields) + "\n")
    return "".join(lines)


def run(args: argparse.Namespace) -> None:
    """Translate what the options name, writing each batch as soon as it is done."""
    from hf_bahdanau.decoding.batching import SORT_WINDOW
    from hf_bahdanau.decoding.loading import check_generation_length

    check_generation_length(args.model, args.max_new_tokens)
    _check_translate_options(args)
    translator = with_fallback(load_translator(args), args)
    options = generation_options(args)
    beams = options.get("num_beams") or translator.generation_config.num_beams or 1
    if args.n_best and args.n_best > beams:
        raise UsageError(
            f"--n-best {args.n_best} is more than the {beams} beams searched: pass --num-beams {args.n_best}"
        )
    if args.heatmap and not args.text:
        raise UsageError("--heatmap needs the sentence as an argument")
    if (args.heatmap_layer or args.heatmap_head or args.heatmap_all) and not args.heatmap:
        raise UsageError("--heatmap-layer, --heatmap-head and --heatmap-all need --heatmap FILE.png")
    if args.heatmap_all and (args.heatmap_layer or args.heatmap_head):
        raise UsageError("--heatmap-all draws every layer and head: leave out --heatmap-layer and --heatmap-head")
    if args.document or args.input_format != "text":
        _translate_documents(translator, args)
        said_fallback(translator, args)
        return
    n_best = bool(args.n_best)
    decoding = dict(options, n_best=args.n_best or 1, alignments=args.alignments, quality=args.quality)

    def lines(index: int, translation: Translation) -> str:
        return hypothesis_lines(index, translation, n_best, args.scores or n_best, args.alignments, args.quality)

    if not args.text and sys.stdin.isatty():
        logger.info("type a sentence and press Enter to translate it; q (or Ctrl-D) quits")
        for line in interactive_lines(f"{translator.config.source_language or 'source'} > "):
            write_out(lines(0, translator.translate([line], **decoding)[0]))
        return
    # stdin in chunks: the sort window's worth of lines, or what came before the input paused
    chunks = [list(args.text)] if args.text else stdin_chunks(SORT_WINDOW)
    written = read = 0
    try:  # each batch is written as soon as it can be, in input order: an interrupted run keeps what it has done
        with terminate_as_interrupt() as whole:
            if args.heatmap:
                _write_heatmap(translator, args.text[0], args, **options)
            progress = sys.stderr.isatty()  # a bar on a terminal, not in a log file
            for texts in chunks:
                read += len(texts)
                for batch in translator.translate_stream(texts, progress=progress, **decoding):
                    output = "".join(lines(written + i, translation) for i, translation in enumerate(batch))
                    with whole():
                        write_out(output)
                        written += len(batch)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"interrupted: wrote {written} translations of the {read} lines read") from None
    said_fallback(translator, args)
