"""Markup kept where it belongs: a Multi30k split (de->en, test_2016_flickr unless `--split`) with inline tags
injected around source words, translated four ways, each scored for well-formedness, tag placement F1 and BLEU of its
text without the tags.

- **sentence** (the package: `decoding.markup`): each sentence translated whole, the tags put back on the words its
  attention aligns to their source words (`markup.html.ALIGNMENT`);
- **one_way**: the same, by `translate --alignments`' links (the last layer, each target word to one source word);
- **naive**: the same translation, the tags at the same relative positions (no alignment);
- **piecewise**: the text between tags translated piece by piece, the tags kept between the pieces.

Tags (a fixed seed): one or two spans of 1-3 words a sentence, each one of `<b>`, `<i>`, `<a href>`, `<span
class>` (at times one nested in another), and at times an empty `<img>` between two words.

Where a tag belongs is found by a word aligner independent of the model, eflomal (`pip install eflomal`; Östling and
Tiedemann 2016: a Bayesian HMM with fertility, sampled; model 3, 3 samplers, its default iterations and NULL prior),
run once on Multi30k's training pairs, the split's (source, reference) pairs and every (source, output) pair scored,
words lowercased with their edge punctuation stripped, its two directions symmetrised by grow-diag-final-and
(`grow_diag_final_and` here). eflomal seeds its sampler from /dev/urandom, so the reference moves a little from
run to run. A span's reference on an output is the run of that output's words the aligner links to its source words
(on each method's own output, so that a method is not scored on how well it translates); an empty element's is the
gap before the output words of the next aligned source word. Tag F1: per tag, the F1 of the output words inside it
against its reference words (an empty element: 1 at its reference gap, else 0), averaged over the tags that have a
reference (a span whose source words the aligner links to nothing has none). Well-formed: the output has the input's
start tags, each element closed and properly nested. BLEU: sacreBLEU of the output's text (tags taken out) against
the references, beside that of the tag-free sources translated alone.

    OMP_NUM_THREADS=1 python scripts/benchmark_markup.py --model runs/quick-de-en --data ../shared/data/multi30k \\
        --output-dir outputs/markup-benchmark [--split val]
"""

from __future__ import annotations

import argparse
import gzip
import html
import json
import logging
import random
import re
import tempfile
import time
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import sacrebleu

from hf_bahdanau.decoding.markup.html import ALIGNMENT, HtmlDocument
from hf_bahdanau.decoding.markup.parsing import tokens
from hf_bahdanau.decoding.markup.projection import parse_links
from hf_bahdanau.decoding.translator import Translator

logger = logging.getLogger("benchmark_markup")
TAGS = [("b", "<b>"), ("i", "<i>"), ("a", '<a href="https://example.org/{k}">'), ("span", '<span class="note">')]
VOID = {"img", "br", "hr", "wbr", "input", "meta", "link"}
METHODS = ("sentence", "one_way", "naive", "piecewise")


def grow_diag_final_and(forward: set[tuple[int, int]], backward: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """Koehn's symmetrisation of two one-way alignments (`(source, target)` links each): their intersection, grown
    by the neighbouring links of the union that align a word not yet aligned, then the union's links between two
    words neither of which is aligned."""
    union, links = forward | backward, forward & backward
    sources, targets = {s for s, _ in links}, {t for _, t in links}
    grew = True
    while grew:
        grew = False
        for i, j in sorted(links):
            for cell in ((i - 1, j), (i, j - 1), (i + 1, j), (i, j + 1), (i - 1, j - 1), (i - 1, j + 1),
                         (i + 1, j - 1), (i + 1, j + 1)):  # fmt: skip
                if cell in union and cell not in links and (cell[0] not in sources or cell[1] not in targets):
                    links.add(cell)
                    sources.add(cell[0])
                    targets.add(cell[1])
                    grew = True
    for cell in sorted(forward) + sorted(backward):
        if cell[0] not in sources and cell[1] not in targets:
            links.add(cell)
            sources.add(cell[0])
            targets.add(cell[1])
    return links


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="The model folder (de->en).")
    parser.add_argument("--data", required=True, help="Multi30k's folder: train.{de,en}[.gz], test_2016_flickr...")
    parser.add_argument("--output-dir", required=True, help="Where table.md and results.json go.")
    parser.add_argument("--split", default="test_2016_flickr", help="The split to tag and translate (`val`: to choose "
                        "a method on).")  # fmt: skip
    parser.add_argument("--max-samples", type=int, help="Only the first N sentences (a quick check).")
    parser.add_argument("--seed", type=int, default=1, help="The tags' seed (default 1).")
    parser.add_argument("--batch-size", type=int, default=32, help="Sentences a batch.")
    parser.add_argument("--num-beams", type=int, help="Beams (default: the model's).")
    return parser.parse_args(argv)


def read_lines(folder: Path, split: str, language: str) -> list[str]:
    """`split.language` (or its .gz) of `folder`, a line a sentence."""
    path = folder / f"{split}.{language}"
    if not path.exists():
        path = path.with_name(path.name + ".gz")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        return [line.rstrip("\n") for line in lines]


# ---- the reference word aligner ----------------------------------------------------------------------------


def _key(word: str) -> str:
    stripped = re.sub(r"^\W+|\W+$", "", word.lower())
    return stripped or word


def reference_links(training: list[tuple[str, str]], pairs: list[tuple[str, str]]) -> list[set[tuple[int, int]]]:
    """`(source word, target word)` links of each of `pairs` by eflomal (its HMM with fertility, 3 samplers), run on
    `training` and `pairs` together, words with their edge punctuation stripped; its two directions symmetrised by
    grow-diag-final-and."""
    try:
        import eflomal
    except ImportError:
        raise SystemExit("the reference word aligner is eflomal: pip install eflomal") from None
    corpus = training + pairs
    sources = [" ".join(_key(w) for w in s.split()) or "." for s, _ in corpus]  # eflomal needs a word a side
    targets = [" ".join(_key(w) for w in t.split()) or "." for _, t in corpus]
    with tempfile.TemporaryDirectory() as folder:
        paths = Path(folder, "forward"), Path(folder, "backward")
        eflomal.Aligner(model=3, n_samplers=3).align(
            sources, targets, links_filename_fwd=str(paths[0]), links_filename_rev=str(paths[1])
        )
        forward, backward = (path.read_text(encoding="utf-8").splitlines()[len(training) :] for path in paths)
    return [
        grow_diag_final_and(set(parse_links(one)), set(parse_links(other))) if s.split() and t.split() else set()
        for (s, t), one, other in zip(pairs, forward, backward, strict=True)
    ]


# ---- tags in, tags out --------------------------------------------------------------------------------------


def inject(sentence: str, rng: random.Random, k: int) -> tuple[str, list[dict]]:
    """`sentence` with tags around random word spans (and at times an empty `<img>`); the tags as
    `{"id", "start", "end"}` source word spans (an empty one: start == end, before word start)."""
    words = sentence.split()
    n = len(words)
    tags: list[dict] = []
    opens: dict[int, list[str]] = {}
    closes: dict[int, list[str]] = {}
    if n >= 2:
        start = rng.randrange(n)
        end = min(n, start + rng.randint(1, 3))
        spans = [(start, end)]
        if end - start >= 2 and rng.random() < 0.4:  # a tag nested inside
            inner = rng.randrange(start, end)
            spans.append((inner, inner + 1))
        elif rng.random() < 0.5:  # a second tag elsewhere
            other = [i for i in range(n) if not start <= i < end]
            if other:
                spans.append((other[0], other[0] + 1) if rng.random() < 0.5 else (other[-1], other[-1] + 1))
        for number, (a, b) in enumerate(spans):
            name, opening = TAGS[rng.randrange(len(TAGS))]
            ident = f"t{k}-{number}"
            opens.setdefault(a, []).append(opening.format(k=k).replace(">", f' id="{ident}">', 1))
            closes.setdefault(b, []).insert(0, f"</{name}>")
            tags.append({"id": ident, "start": a, "end": b})
        if rng.random() < 0.3:
            gap = rng.randrange(1, n)
            ident = f"t{k}-img"
            opens.setdefault(gap, []).insert(0, f'<img src="x.png" id="{ident}">')
            tags.append({"id": ident, "start": gap, "end": gap})
    pieces = []
    for i, word in enumerate(words):
        pieces.append("".join(closes.get(i, [])) + (" " if i else "") + "".join(opens.get(i, [])) + html.escape(word))
    return "".join(pieces) + "".join(closes.get(n, [])), tags


class _Spans(HTMLParser):
    """The text of a tagged output and the character span of each element with an id; whether it is well formed."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text = ""
        self.spans: dict[str, tuple[int, int]] = {}
        self.stack: list[tuple[str, str | None]] = []
        self.starts: Counter = Counter()
        self.nested = True

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.starts[self.get_starttag_text()] += 1
        ident = dict(attrs).get("id")
        if tag in VOID:
            if ident:
                self.spans[ident] = (len(self.text), len(self.text))
            return
        self.stack.append((tag, ident))
        if ident:
            self.spans[ident] = (len(self.text), -1)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1][0] != tag:
            self.nested = False
            return
        _, ident = self.stack.pop()
        if ident:
            self.spans[ident] = (self.spans[ident][0], len(self.text))

    def handle_data(self, data: str) -> None:
        self.text += data


def read_output(page: str) -> _Spans:
    parser = _Spans()
    parser.feed(page)
    parser.close()
    return parser


def word_span(text: str, start: int, end: int) -> tuple[int, int]:
    """The words of `text` a character span touches, `(first, last + 1)`; a gap for an empty span."""
    words = [match.span() for match in re.finditer(r"\S+", text)]
    if start == end:
        gap = sum(s < start for s, _ in words)
        return gap, gap
    inside = [w for w, (s, e) in enumerate(words) if s < end and e > start]
    return (inside[0], inside[-1] + 1) if inside else (sum(s < start for s, _ in words),) * 2


def reference_span(tag: dict, links: set[tuple[int, int]]) -> tuple[int, int] | None:
    """Where the aligner says a tag belongs on an output: the hull of the output words its source words link to (an
    empty element: the gap before the words of the next linked source word); None where nothing links."""
    if tag["start"] == tag["end"]:
        following = [t for s, t in links if s >= tag["start"]]
        if not following:
            return None
        nearest = min(s for s, _ in links if s >= tag["start"])
        gap = min(t for s, t in links if s == nearest)
        return gap, gap
    targets = [t for s, t in links if tag["start"] <= s < tag["end"]]
    return (min(targets), max(targets) + 1) if targets else None


def tag_f1(found: tuple[int, int], reference: tuple[int, int]) -> float:
    if reference[0] == reference[1] or found[0] == found[1]:
        return float(found == reference)
    overlap = max(0, min(found[1], reference[1]) - max(found[0], reference[0]))
    return 2 * overlap / (found[1] - found[0] + reference[1] - reference[0])


def piecewise(translator: Translator, pages: list[str], options: dict) -> list[str]:
    """Each page with the text between its tags translated piece by piece (the tags kept between the pieces)."""
    layouts = [
        [(token.kind == "text" and bool(token.raw.strip()), token.raw) for token in tokens(page)] for page in pages
    ]
    pieces = [html.unescape(raw).strip() for layout in layouts for text, raw in layout if text]
    found = iter(t.text for t in translator.translate(pieces, **options))
    out = []
    for layout in layouts:
        parts = []
        for text, raw in layout:
            if not text:
                parts.append(raw)
                continue
            lead, trail = raw[: len(raw) - len(raw.lstrip())], raw[len(raw.rstrip()) :]
            parts.append(lead + html.escape(next(found), quote=False) + trail)
        out.append("".join(parts))
    return out


def score(pages: list[str], injected: list[tuple[str, list[dict]]], references: list[str], outputs: list[str],
          links: list[set[tuple[int, int]]]) -> dict:  # fmt: skip
    """Well-formed share (%), mean tag F1 (and the tags scored) and BLEU without the tags of `outputs`, each output's
    tags against where `links` (source word, output word) put them."""
    well_formed, scores, texts = 0, [], []
    for page, (_, tags), out, linked in zip(pages, injected, outputs, links, strict=True):
        parsed = read_output(out)
        well_formed += parsed.nested and not parsed.stack and parsed.starts == read_output(page).starts
        texts.append(" ".join(parsed.text.split()))
        for tag in tags:
            reference = reference_span(tag, linked)
            if reference is not None and tag["id"] in parsed.spans and parsed.spans[tag["id"]][1] >= 0:
                scores.append(tag_f1(word_span(parsed.text, *parsed.spans[tag["id"]]), reference))
            elif reference is not None:
                scores.append(0.0)  # lost
    bleu = sacrebleu.corpus_bleu(texts, [references]).score
    return {"well_formed": 100 * well_formed / len(pages), "tag_f1": float(np.mean(scores)), "scored_tags": len(scores),
            "bleu": bleu}  # fmt: skip


def references_for(outputs: dict[str, list[str]], sources: list[str], training: list[tuple[str, str]]) -> dict:
    """Each method's reference links: eflomal on `training` and every distinct (source, output text) pair at once."""
    texts = {method: [read_output(out).text for out in found] for method, found in outputs.items()}
    pairs = list(dict.fromkeys((s, t) for found in texts.values() for s, t in zip(sources, found, strict=True)))
    started = time.perf_counter()
    linked = dict(zip(pairs, reference_links(training, pairs), strict=True))
    logger.info("eflomal aligned %d pairs in %.0f s", len(training) + len(pairs), time.perf_counter() - started)
    return {method: [linked[s, t] for s, t in zip(sources, found, strict=True)] for method, found in texts.items()}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    data, output = Path(args.data), Path(args.output_dir)
    sources, references = read_lines(data, args.split, "de"), read_lines(data, args.split, "en")
    if args.max_samples:
        sources, references = sources[: args.max_samples], references[: args.max_samples]
    rng = random.Random(args.seed)
    injected = [inject(source, rng, k) for k, source in enumerate(sources)]
    pages = [page for page, _ in injected]
    translator = Translator.from_folder(args.model, batch_size=args.batch_size)
    options = {"num_beams": args.num_beams} if args.num_beams else {}
    documents = [HtmlDocument.parse(page, "de") for page in pages]
    sentences = [sentence for document in documents for sentence in document.sentences]
    assert all(len(d.sentences) == 1 for d in documents), "a source the splitter cuts in two"
    started = time.perf_counter()
    found = translator.translate(sentences, alignments=ALIGNMENT, **options)
    seconds = time.perf_counter() - started
    outputs = {
        "sentence": [d.rebuild([(t.text, t.alignment)]) for d, t in zip(documents, found, strict=True)],
        "one_way": [
            d.rebuild([(t.text, t.alignment)])
            for d, t in zip(documents, translator.translate(sentences, alignments=True, **options), strict=True)
        ],
        "naive": [d.rebuild([(t.text, None)]) for d, t in zip(documents, found, strict=True)],
        "piecewise": piecewise(translator, pages, options),
    }
    tag_free = [t.text for t in found]
    results = {"sentences": len(sources), "tags": sum(len(tags) for _, tags in injected), "seed": args.seed,
               "tag_free_bleu": sacrebleu.corpus_bleu(tag_free, [references]).score,
               "seconds_to_translate": round(seconds, 1)}  # fmt: skip
    training = list(zip(read_lines(data, "train", "de"), read_lines(data, "train", "en"), strict=True))
    links = references_for(outputs, sources, training + list(zip(sources, references, strict=True)))
    for method in METHODS:
        results[method] = score(pages, injected, references, outputs[method], links[method])
    output.mkdir(parents=True, exist_ok=True)
    (output / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (output / "table.md").write_text(table(results), encoding="utf-8")
    (output / "examples.html").write_text(
        "\n".join(f"<p>{pages[k]}</p>\n<p>{outputs['sentence'][k]}</p>\n<p>{outputs['piecewise'][k]}</p><hr>"
                  for k in range(min(20, len(pages)))),
        encoding="utf-8",
    )  # fmt: skip
    print(table(results))
    return results


def table(results: dict) -> str:
    rows = ["| method | well-formed | tag F1 | BLEU (tags out) | BLEU - tag-free |", "|---|---:|---:|---:|---:|"]
    names = {"sentence": "by sentence, source-side alignments (the package)",
             "one_way": "by sentence, last layer's one-way alignments (`--alignments`)",
             "naive": "by sentence, relative positions (naive)",
             "piecewise": "piece by piece between tags"}  # fmt: skip
    for method in METHODS:
        r = results[method]
        rows.append(f"| {names[method]} | {r['well_formed']:.1f}% | {r['tag_f1']:.3f} | {r['bleu']:.2f} | "
                    f"{r['bleu'] - results['tag_free_bleu']:+.2f} |")  # fmt: skip
    return (f"{results['sentences']} sentences, {results['tags']} tags (seed {results['seed']}); tag-free BLEU "
            f"{results['tag_free_bleu']:.2f}\n\n" + "\n".join(rows) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
