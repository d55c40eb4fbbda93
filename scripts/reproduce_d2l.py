"""Reproduce d2l's "Bahdanau Attention" experiment with hf_bahdanau and `Seq2SeqTrainer`.

The seed setup: the first 600 pairs of the English-French Tatoeba corpus, d2l normalisation, d2l's word
vocabulary (min_freq 2), sequences cut to 10 tokens, a 2-layer GRU encoder-decoder with additive attention
(embeddings 32, hidden 32, dropout 0.1), Adam at lr 0.005, gradient clipping 1, batch 64, 250 epochs. Then the
chapter's four sentences are translated greedily and scored with d2l's BLEU (k=2), and the attention of the
last one is drawn as a heatmap.

    python scripts/reproduce_d2l.py --output-dir outputs/reproduce_d2l
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

import datasets
import torch
from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments, set_seed

from hf_bahdanau import BahdanauConfig, BahdanauForConditionalGeneration, show_heatmaps
from hf_bahdanau.data import normalize_d2l, tokenize_corpus
from hf_bahdanau.metrics import bleu
from hf_bahdanau.pipelines import translate_with_attention
from hf_bahdanau.tokenization import train_tokenizer
from hf_bahdanau.visualization import plot_training_curves

logger = logging.getLogger("reproduce_d2l")

ENGLISH = ["go .", "i lost .", "he's calm .", "i'm home ."]
FRENCH = ["va !", "j'ai perdu .", "il est calme .", "je suis chez moi ."]


def read_pairs(path: Path, num_examples: int) -> datasets.Dataset:
    """The first `num_examples` lines of an `English<TAB>French` file, d2l-normalised, in translation format."""
    rows = []
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if len(rows) == num_examples:
                break
            english, french = line.rstrip("\n").split("\t")[:2]
            rows.append({"en": normalize_d2l(english), "fr": normalize_d2l(french)})
    if len(rows) < num_examples:
        raise ValueError(f"{path} has only {len(rows)} pairs, {num_examples} were asked for")
    return datasets.Dataset.from_dict({"translation": rows})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    data_dir = Path(os.environ.get("HF_BAHDANAU_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
    parser.add_argument("--data", type=Path, default=data_dir / "tatoeba-fra-eng" / "fra-eng.tsv")
    parser.add_argument("--output-dir", type=Path, default=Path("outputs/reproduce_d2l"))
    parser.add_argument("--num-examples", type=int, default=600)
    parser.add_argument("--epochs", type=float, default=250)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    set_seed(args.seed)

    corpus = datasets.DatasetDict({"train": read_pairs(args.data, args.num_examples)})
    tokenizer = train_tokenizer(corpus, model="word", min_freq=2, vocab_size=None)
    tokenized, _ = tokenize_corpus(corpus, tokenizer, "en", "fr", max_source_length=10, max_target_length=10)
    config = BahdanauConfig(
        vocab_size=len(tokenizer), embedding_size=32, hidden_size=32, encoder_layers=2, decoder_layers=2,
        dropout=0.1, source_language="en", target_language="fr",
    )  # fmt: skip
    model = BahdanauForConditionalGeneration(config)
    logger.info("vocabulary %d words, %s parameters", len(tokenizer), f"{model.num_parameters():,}")

    training_args = Seq2SeqTrainingArguments(
        output_dir=str(args.output_dir / "trainer"),
        per_device_train_batch_size=64,
        learning_rate=0.005,
        weight_decay=0.0,
        lr_scheduler_type="constant",
        max_grad_norm=1.0,
        num_train_epochs=args.epochs,
        logging_steps=50,
        save_strategy="no",
        report_to="none",
        seed=args.seed,
        dataloader_pin_memory=torch.cuda.is_available(),
    )
    trainer = Seq2SeqTrainer(
        model=model,
        args=training_args,
        train_dataset=tokenized["train"],
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
    )
    start = time.perf_counter()
    trainer.train()
    logger.info("trained %d steps in %.0f s", trainer.state.global_step, time.perf_counter() - start)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    plot_training_curves(trainer.state.log_history, path=args.output_dir / "loss.png")

    model.eval()
    for english, french in zip(ENGLISH, FRENCH, strict=True):
        translation, source_tokens, target_tokens, weights = translate_with_attention(
            model, tokenizer, english, num_beams=1, max_new_tokens=10
        )
        logger.info("%s => %s, bleu %.3f", english, translation, bleu(translation, french, k=2))
    show_heatmaps(
        weights, xlabel="Keys", ylabel="Queries", xticklabels=source_tokens, yticklabels=target_tokens,
        figsize=(3.5, 3.5), path=args.output_dir / "attention.png",
    )  # fmt: skip
    model.save_pretrained(args.output_dir / "model")
    tokenizer.save_pretrained(args.output_dir / "model")
    logger.info("wrote %s", ", ".join(str(args.output_dir / name) for name in ("loss.png", "attention.png", "model")))


if __name__ == "__main__":
    main()
