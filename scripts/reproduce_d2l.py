"""Reproduce d2l's "Bahdanau Attention" and "The Transformer Architecture" experiments with `Seq2SeqTrainer`.

The book's setup: the first 600 pairs of the English-French Tatoeba corpus, d2l normalisation, d2l's word
vocabulary (min_freq 2), sequences cut to 10 tokens, Adam at lr 0.005, gradient clipping 1, batch 64, and
- `--model bahdanau`: a 2-layer GRU encoder-decoder with additive attention (embeddings 32, hidden 32, dropout
  0.1), 250 epochs;
- `--model transformer`: 2+2 blocks, d_model 32, 4 heads, FFN 64, dropout 0.1, 200 epochs.
Then the chapter's four sentences are translated greedily and scored with d2l's BLEU (k=2), and the attention of
the last one is drawn as heatmaps (for the Transformer: layers x heads, encoder, decoder and encoder-decoder).

    python scripts/reproduce_d2l.py --model transformer --output-dir outputs/reproduce_d2l_transformer

The output folder is a model folder as `hf-bahdanau train` writes it, with `training_curves.png` and the
attention heatmaps (`attention.png`, and for the Transformer `attention-encoder.png`, `attention-decoder.png`).
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

from hf_bahdanau import attention_maps, get_model_type, plot_attention_maps, save_for_pipeline
from hf_bahdanau.data.cleaning import normalize_d2l
from hf_bahdanau.data.tokenization import train_tokenizer
from hf_bahdanau.data.tokenized import tokenize_corpus
from hf_bahdanau.metrics import bleu
from hf_bahdanau.visualization import plot_training_curves

logger = logging.getLogger("reproduce_d2l")

ENGLISH = ["go .", "i lost .", "he's calm .", "i'm home ."]
FRENCH = ["va !", "j'ai perdu .", "il est calme .", "je suis chez moi ."]
# The book's sizes and epochs for each model.
BOOK = {
    "bahdanau": (dict(embedding_size=32, hidden_size=32, encoder_layers=2, decoder_layers=2, dropout=0.1), 250),
    "transformer": (
        dict(d_model=32, encoder_layers=2, decoder_layers=2, attention_heads=4, ffn_dim=64, dropout=0.1),
        200,
    ),
}


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
    parser.add_argument("--model", choices=sorted(BOOK), default="bahdanau")
    parser.add_argument("--output-dir", type=Path, default=Path("outputs/reproduce_d2l"))
    parser.add_argument("--num-examples", type=int, default=600)
    parser.add_argument("--epochs", type=float, help="Default: the book's (250 for bahdanau, 200 for transformer).")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    set_seed(args.seed)

    corpus = datasets.DatasetDict({"train": read_pairs(args.data, args.num_examples)})
    tokenizer = train_tokenizer(corpus, model="word", min_freq=2, vocab_size=None)
    tokenized, _ = tokenize_corpus(corpus, tokenizer, "en", "fr", max_source_length=10, max_target_length=10)
    sizes, epochs = BOOK[args.model]
    config_class, model_class = get_model_type(args.model)
    model = model_class(config_class(vocab_size=len(tokenizer), source_language="en", target_language="fr", **sizes))
    logger.info("vocabulary %d words, %s parameters", len(tokenizer), f"{model.num_parameters():,}")

    training_args = Seq2SeqTrainingArguments(
        output_dir=str(args.output_dir),
        per_device_train_batch_size=64,
        learning_rate=0.005,
        weight_decay=0.0,
        lr_scheduler_type="constant",
        max_grad_norm=1.0,
        num_train_epochs=args.epochs or epochs,
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

    model.eval()
    for english, french in zip(ENGLISH, FRENCH, strict=True):
        maps = attention_maps(model, tokenizer, english, num_beams=1, max_new_tokens=10)
        logger.info("%s => %s, bleu %.3f", english, maps.translation, bleu(maps.translation, french, k=2))
    # A model folder as `hf-bahdanau train` leaves it (model, tokenizer, pipeline code, trainer state, figures), so
    # that `hf-bahdanau translate` and `publish` take it as it is.
    save_for_pipeline(model, tokenizer, args.output_dir)
    trainer.save_state()
    plot_training_curves(trainer.state.log_history, path=args.output_dir / "training_curves.png")
    plot_attention_maps(maps, ENGLISH[-1], args.output_dir / "attention.png")
    logger.info("wrote the model and its figures in %s", args.output_dir)


if __name__ == "__main__":
    main()
