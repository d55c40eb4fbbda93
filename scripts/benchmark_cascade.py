"""A student that calls its teacher (`decoding.cascade.Cascade`), measured: BLEU and sentences per second, one
thread, of the student alone, the teacher alone and the cascade as its threshold Q varies.

The student translates with its quality estimates (the cascade needs them) and the teacher re-translates, a batch at
a time, every sentence estimated below Q; Q = 0 keeps every student translation, Q = 1 sends all to the teacher.
Each side is loaded once and warmed up on one batch; each run translates the whole split, timed on the wall clock.
Beside each cascade, the BLEU a perfect estimate of the student's quality would reach re-translating as many
sentences (those whose sentence chrF against the reference is lowest): what no estimator can beat by choosing
sentences the way the cascade chooses. Writes a Markdown table (`table.md`), the figures (`results.json`) and a plot
of BLEU against sentences per second (`--plot`, default `OUTPUT/cascade.png`).

    OMP_NUM_THREADS=1 HF_BAHDANAU_DATA_DIR=../shared/data python scripts/benchmark_cascade.py \\
        --student runs/student --student-engine ctranslate2 --student-quantize int8 --student-beams 1 \\
        --teacher runs/teacher --teacher-beams 5 --output-dir outputs/cascade --plot docs/images/cascade.png
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import sacrebleu

from hf_bahdanau import register
from hf_bahdanau.choices import ENGINES, QUANTIZATIONS
from hf_bahdanau.data.corpora import folder_split
from hf_bahdanau.decoding.cascade import TEACHER, Cascade
from hf_bahdanau.decoding.translator import Translator

logger = logging.getLogger("benchmark_cascade")
THRESHOLDS = (0.0, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7, 1.0)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--student", required=True, help="The student's model folder (with a quality estimator).")
    parser.add_argument("--student-engine", choices=ENGINES, default="ctranslate2")
    parser.add_argument("--student-quantize", choices=(*QUANTIZATIONS, "none"), default="int8")
    parser.add_argument("--student-beams", type=int, default=1, help="The student's beams (default 1: greedy).")
    parser.add_argument("--teacher", required=True, help="The teacher's model folder.")
    parser.add_argument("--teacher-engine", choices=ENGINES, default="torch")
    parser.add_argument("--teacher-beams", type=int, default=5, help="The teacher's beams (default 5).")
    parser.add_argument("--thresholds", type=float, nargs="+", default=THRESHOLDS, help="The values of Q.")
    parser.add_argument("--split", default="test", help="The split to translate (default: test, test_2016_flickr).")
    parser.add_argument("--max-samples", type=int, help="Only the first N sentences (a quick check).")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of each side (default 1).")
    parser.add_argument("--batch-size", type=int, default=32, help="Sentences a batch.")
    parser.add_argument("--output-dir", required=True, help="Where table.md and results.json go.")
    parser.add_argument("--plot", help="The plot's file (default: OUTPUT-DIR/cascade.png).")
    args = parser.parse_args(argv)
    args.student_quantize = None if args.student_quantize == "none" else args.student_quantize
    return args


def timed(translate, sources: list[str], references: list[str], warm_up: int) -> tuple[dict, list]:
    """BLEU, chrF and sentences per second of `translate(sources)` (after a warm-up on `warm_up` sources), and its
    translations."""
    translate(sources[:warm_up])
    began = time.perf_counter()
    found = translate(sources)
    seconds = time.perf_counter() - began
    outputs = [translation.text for translation in found]
    return {
        "bleu": sacrebleu.corpus_bleu(outputs, [references]).score,
        "chrf": sacrebleu.corpus_chrf(outputs, [references]).score,
        "per_second": len(sources) / seconds,
    }, found


def weakest(translations: list[str], references: list[str], count: int) -> set[int]:
    """The indices of the `count` translations whose sentence chrF against their reference is lowest."""
    chrf = [sacrebleu.sentence_chrf(text, [reference]).score for text, reference in zip(translations, references,
                                                                                       strict=True)]  # fmt: skip
    return set(sorted(range(len(translations)), key=chrf.__getitem__)[:count])


def perfect_estimate_bleu(student: list[str], teacher: list[str], references: list[str], share: float) -> float:
    """BLEU of the student's translations with the `share` of them that a perfect estimate ranks lowest (`weakest`)
    replaced by the teacher's."""
    chosen = weakest(student, references, round(share * len(student)))
    outputs = [teacher[i] if i in chosen else text for i, text in enumerate(student)]
    return sacrebleu.corpus_bleu(outputs, [references]).score


def measure(args: argparse.Namespace) -> dict:
    """The figures of the student, the teacher and the cascade at each threshold."""
    sources, references = folder_split(Path(args.student), args.split, args.max_samples)
    student = Translator.from_folder(args.student, engine=args.student_engine, quantize=args.student_quantize,
                                     threads=args.threads, batch_size=args.batch_size)  # fmt: skip
    teacher = Translator.from_folder(args.teacher, engine=args.teacher_engine, threads=args.threads,
                                     batch_size=args.batch_size)  # fmt: skip
    results: dict = {"sentences": len(sources)}
    results["student"], alone = timed(lambda texts: student.translate(texts, num_beams=args.student_beams), sources,
                                      references, args.batch_size)  # fmt: skip
    results["student, with estimates"], estimated = timed(
        lambda texts: student.translate(texts, num_beams=args.student_beams, quality=True), sources, references,
        args.batch_size,
    )  # fmt: skip
    results["teacher"], taught = timed(lambda texts: teacher.translate(texts, num_beams=args.teacher_beams), sources,
                                       references, args.batch_size)  # fmt: skip
    outputs = {"student": [t.text for t in alone], "teacher": [t.text for t in taught]}
    results["differing"] = sum(ours != theirs for ours, theirs in zip(*outputs.values(), strict=True))
    results["cascade"] = {}
    for threshold in args.thresholds:
        cascade = Cascade(student, teacher, threshold, teacher_options={"num_beams": args.teacher_beams})
        row, found = timed(lambda texts, c=cascade: c.translate(texts, num_beams=args.student_beams), sources,
                           references, args.batch_size)  # fmt: skip
        row["retranslated"] = sum(translation.made_by == TEACHER for translation in found) / len(found)
        row["perfect_estimate_bleu"] = perfect_estimate_bleu(outputs["student"], outputs["teacher"], references,
                                                             row["retranslated"])  # fmt: skip
        results["cascade"][f"{threshold:g}"] = row
        logger.info("Q %g: %s", threshold, json.dumps(row))
    scores = sorted(t.quality.score for t in estimated if t.quality is not None)
    results["estimate_quartiles"] = [scores[len(scores) * k // 4] for k in (1, 2, 3)]
    return results


def table(results: dict, args: argparse.Namespace) -> str:
    teacher = results["teacher"]
    lines = [
        f"{results['sentences']} sentences of the {args.split} split, {args.threads} thread(s). Student: "
        f"{Path(args.student).name}, {args.student_engine} {args.student_quantize or 'fp32'}, beam "
        f"{args.student_beams}; teacher: {Path(args.teacher).name}, {args.teacher_engine} fp32, beam "
        f"{args.teacher_beams}. The student's estimates' quartiles: "
        f"{', '.join(f'{q:.2f}' for q in results['estimate_quartiles'])}. The student's and the teacher's "
        f"translations differ on {results['differing']} sentences.",
        "",
        "| translation | Q | re-translated | BLEU | chrF | sentences/s | BLEU vs teacher | speed vs teacher "
        "| BLEU vs teacher, a perfect estimate |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = [(name, "", None, results[name]) for name in ("student", "student, with estimates", "teacher")]
    rows += [("cascade", q, row["retranslated"], row) for q, row in results["cascade"].items()]
    for name, q, share, row in rows:
        retranslated = "" if share is None else f"{100 * share:.0f}%"
        perfect = f"{row['perfect_estimate_bleu'] - teacher['bleu']:+.2f}" if "perfect_estimate_bleu" in row else ""
        lines.append(f"| {name} | {q} | {retranslated} | {row['bleu']:.2f} | {row['chrf']:.2f} | "
                     f"{row['per_second']:.1f} | {row['bleu'] - teacher['bleu']:+.2f} | "
                     f"{row['per_second'] / teacher['per_second']:.2f}x | {perfect} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> None:
    """BLEU against sentences per second: the cascade's curve over Q, the student and the teacher as points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    figure, axis = plt.subplots(figsize=(6, 4))
    cascade = results["cascade"]
    speeds = [row["per_second"] for row in cascade.values()]
    axis.plot(speeds, [row["bleu"] for row in cascade.values()], "o-", label="cascade")
    axis.plot(speeds, [row["perfect_estimate_bleu"] for row in cascade.values()], "--", color="grey",
              label="as many re-translated, a perfect estimate")  # fmt: skip
    for q, row in cascade.items():
        axis.annotate(f"Q={q}", (row["per_second"], row["bleu"]), textcoords="offset points", xytext=(4, 4),
                      fontsize=8)  # fmt: skip
    teacher = results["teacher"]  # the goal: at least 3x the teacher's speed, at most 0.5 BLEU below it
    axis.fill_between([3 * teacher["per_second"], results["student"]["per_second"]], teacher["bleu"] - 0.5,
                      teacher["bleu"] + 0.2, color="green", alpha=0.1,
                      label="3x the teacher, within 0.5 BLEU")  # fmt: skip
    for name, marker in (("student", "s"), ("teacher", "^")):
        axis.plot(results[name]["per_second"], results[name]["bleu"], marker, markersize=9, label=name)
    axis.set_xscale("log")
    axis.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    axis.xaxis.set_minor_formatter(
        matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}" if f"{v:g}"[0] in "235" else "")
    )
    axis.set_xlabel("sentences per second (one thread, log scale)")
    axis.set_ylabel("BLEU")
    axis.legend(fontsize=8)
    axis.set_title("A student that calls its teacher below Q")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    register()
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    results = measure(args)
    (output / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (output / "table.md").write_text(table(results, args), encoding="utf-8")
    plot(results, Path(args.plot) if args.plot else output / "cascade.png")
    logger.info("\n%s", table(results, args))


if __name__ == "__main__":
    main()
