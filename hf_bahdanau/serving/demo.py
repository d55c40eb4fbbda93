"""`hf-bahdanau demo`: a web page (Gradio) to try a translation model.

The page translates a text greedily, by beam search or by sampling; shows the n-best list (or the samples) with each
translation's score, its mean token log-probability (`decoding.Translator`, as `translate` does); and draws the
attention of the translation chosen in that list with the figure `translate --heatmap` draws (`plot_word_attention`:
the cross-attention between words of the last layer, heads averaged, or of the layer and head chosen on the page).
A model with a quality estimator (`hf-bahdanau calibrate`) also shows the best translation's estimated quality and
its words shaded OK or BAD (`quality_view`).
Bad input (an empty text, a text too long, a text mostly in letters the model does not know) gets a message on
the page. With "HTML" ticked, the text is an HTML fragment translated as `serve` translates `format=html`
(`Translator.translate_html`: a sentence at a time, the inline tags put back on the aligned words), shown as markup
and rendered.

Gradio reaches no network from here: analytics off (`GRADIO_ANALYTICS_ENABLED`), no share link unless asked, no
server-side rendering, and the page's scripts, styles and the theme's fonts come from the local server.

The Space that serves this page for a model published on the Hub is written and uploaded by
`publishing.space.publish_space`.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_bahdanau.errors import InputError, as_input_error

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # read when gradio is imported

if TYPE_CHECKING:
    import gradio as gr
    from PIL.Image import Image
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from hf_bahdanau.decoding.attention_maps import AttentionMaps
    from hf_bahdanau.decoding.glossary import Glossary
    from hf_bahdanau.decoding.quality.estimator import QualityEstimate
    from hf_bahdanau.decoding.translator import Hypothesis, Translation, Translator

logger = logging.getLogger(__name__)

MAX_CHARACTERS = 1000  # the most characters the page translates at once: a few sentences
MAX_BEAMS = 10  # the beam size (or number of samples) slider's top
DECODINGS = ("greedy", "beam", "sampling")
AVERAGE = "average"  # the head choice that averages the heads


# ---- what the page computes -------------------------------------------------------------------------------


def load_demo_translator(model: str) -> Translator:
    """The `Translator` of a saved model folder or of a published model (a Hub repo id, downloaded into the Hub
    cache), loaded as `translate` loads it (`Translator.from_folder`: the package's classes, safetensors only, no repo
    code)."""
    from hf_bahdanau.decoding.translator import Translator

    folder = Path(model)
    if not folder.exists() and model.count("/") == 1:
        from huggingface_hub import snapshot_download

        with as_input_error(OSError):  # offline, no such repo, no access
            folder = Path(snapshot_download(model, ignore_patterns=["ctranslate2/*", "*.png"]))
    return Translator.from_folder(folder)


def size_message(text: str) -> str | None:
    """Why `text` is not translated here for its size (one line: empty, or over `MAX_CHARACTERS`), or None."""
    if not text.strip():
        return "Nothing to translate: type a sentence first."
    if len(text) > MAX_CHARACTERS:
        return f"The text has {len(text):,} characters: the demo translates at most {MAX_CHARACTERS:,} at once."
    return None


def check_text(text: str, tokenizer: PreTrainedTokenizerBase, limit: int) -> str | None:
    """Why `text` cannot be translated here (one line), or None: empty, over `MAX_CHARACTERS` or `limit` tokens, or
    mostly tokens the model does not know (`unknown_text_message`: a script the tokenizer never saw)."""
    from hf_bahdanau.decoding.sources import unknown_text_message

    if message := size_message(text):
        return message
    tokens = len(tokenizer(text, verbose=False)["input_ids"])
    if tokens > limit:
        return f"The text is {tokens:,} tokens long: the model reads at most {limit:,}."
    return unknown_text_message(tokenizer, text)


def decoding_options(decoding: str, beams: int) -> tuple[dict[str, Any], int]:
    """`generate` options of a decoding choice, and the hypotheses to return: `beams` is the beam size of beam
    search, the number of samples of sampling (greedy: one translation)."""
    if decoding not in DECODINGS:
        raise InputError(f"decoding {decoding!r}: choose one of {', '.join(DECODINGS)}")
    if decoding == "beam":
        return {"num_beams": beams, "do_sample": False}, beams
    return {"num_beams": 1, "do_sample": decoding == "sampling"}, 1 if decoding == "greedy" else beams


def glossary_of(text: str) -> Glossary | None:
    """The glossary typed on the page: `source = target` (or `source<TAB>target`) lines; None where it is empty.
    InputError names a line that is neither."""
    from hf_bahdanau.decoding.glossary import Glossary

    pairs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        source, tab, target = line.partition("\t") if "\t" in line else line.partition("=")
        if not tab or not source.strip() or not target.strip():
            raise InputError(f"Glossary line {number}: write it as 'source term = target term'.")
        pairs.append((source, target))
    return Glossary.from_pairs(pairs) if pairs else None


def translate(translator: Translator, text: str, decoding: str, beams: int, glossary: str = "") -> list[Hypothesis]:
    """The hypotheses of `text` with their scores, in beam search's order (as `translate --n-best` writes them),
    samples ranked by score, with the terms of the `glossary` typed on the page; InputError with the page's message
    for bad input."""
    return translation_of(translator, text, decoding, beams, glossary).hypotheses


def translation_of(translator: Translator, text: str, decoding: str, beams: int, glossary: str = "") -> Translation:
    """`translate`'s hypotheses as a `Translation`, with the best one's quality estimate where the translator has
    an estimator."""
    message = check_text(text, translator.tokenizer, translator.limit)
    if message:
        raise InputError(message)
    options, n_best = decoding_options(decoding, beams)
    quality = translator.quality_estimator is not None
    return translator.translate([text], n_best=n_best, glossary=glossary_of(glossary), quality=quality, **options)[0]


def quality_view(estimate: QualityEstimate | None) -> tuple[list[tuple[str, str]], str]:
    """The page's view of an estimate: its words, each with its flag (`OK`, `BAD`) for shading, and a line with the
    sentence score and how many words are flagged ([] and "" for none)."""
    if estimate is None:
        return [], ""
    words = [(f"{word.word} ", "OK" if word.ok else "BAD") for word in estimate.words]
    bad = sum(not word.ok for word in estimate.words)
    return words, (f"Estimated quality **{estimate.score:.2f}** (0 to 1, the predicted chrF / 100); {bad} of "
                   f"{len(estimate.words)} words flagged BAD.")  # fmt: skip


def translate_html(translator: Translator, text: str, decoding: str, beams: int) -> str:
    """`text` as HTML translated (`Translator.translate_html`, the best translation of each sentence); InputError
    with the page's message for an empty text or one too long."""
    if message := size_message(text):
        raise InputError(message)
    options, _ = decoding_options(decoding, beams)
    return translator.translate_html([text], **options)[0]


def attention_image(maps: AttentionMaps, text: str, layer: int | None = None, head: int | None = None) -> Image:
    """`translate --heatmap`'s figure of `maps` (`plot_word_attention`) as an image."""
    from PIL import Image as Images

    from hf_bahdanau.decoding.attention_maps import plot_word_attention

    with tempfile.TemporaryDirectory() as folder:
        path = plot_word_attention(maps, text, Path(folder) / "attention.png", layer=layer, head=head)
        with Images.open(path) as image:
            return image.copy()


# ---- the page ---------------------------------------------------------------------------------------------


def build_demo(
    model_dir: str,
    model: PreTrainedModel | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
) -> gr.Blocks:
    """The page for the model of `model_dir` (a model folder or a Hub repo id; or the `model` and `tokenizer`
    given). Serve it with `launch`."""
    import gradio as gr

    from hf_bahdanau.decoding.sources import warn_long_sources
    from hf_bahdanau.decoding.translator import Translator

    if model is None or tokenizer is None:
        translator = load_demo_translator(model_dir)
        model, tokenizer = translator.model, translator.tokenizer
    else:
        translator = Translator(model, tokenizer)
    trained = translator.trained_source_length
    source, target = model.config.source_language or "source", model.config.target_language or "target"
    name = Path(model_dir).resolve().name if Path(model_dir).exists() else model_dir  # a folder, or a repo id
    beams = model.generation_config.num_beams or 1
    estimates = translator.quality_estimator is not None

    def figure_of(
        maps: AttentionMaps, text: str, layer: int | None, head: int | str | None
    ) -> tuple[Image | None, str]:
        """The figure of `maps` (of `layer`, `head`: their choices on the page), and a message (or "")."""
        if not maps.target_words:
            return None, "The translation is empty: there is no attention to draw."
        return attention_image(maps, text, layer, None if head in (None, AVERAGE) else int(head)), ""

    def draw(state: dict, chosen: int, layer: int | None, head: int | str | None) -> tuple[Image | None, str]:
        """The figure of hypothesis `chosen` (from 1) of the last translation, and a message (or "")."""
        hypotheses = state.get("hypotheses") or []
        if not 1 <= chosen <= len(hypotheses):
            return None, ""
        maps = translator.attention_maps(state["text"], hypotheses[chosen - 1])
        return figure_of(maps, state["text"], layer, head)

    def on_translate(
        text: str,
        decoding: str,
        size: float,
        terms: str,
        markup: bool,
        progress: gr.Progress = gr.Progress(),  # noqa: B008
    ) -> tuple:
        # outputs: message, translation, n-best list, chosen, layer, head, figure, state, rendered HTML, quality
        # words and line
        progress(0.1, desc="translating")
        hidden = gr.update(visible=False)
        try:
            if markup:
                found = translate_html(translator, text, decoding, int(size))
                return ("", found, [[1, None, found]], gr.update(choices=[], value=None), hidden, hidden, None, {},
                        gr.update(value=found, visible=True), [], "")  # fmt: skip
            best = translation_of(translator, text, decoding, int(size), terms)
        except InputError as error:
            gr.Warning(str(error))
            return f"⚠️ {error}", "", [], gr.update(choices=[], value=None), hidden, hidden, None, {}, hidden, [], ""
        hypotheses = best.hypotheses
        lengths = [len(tokenizer(text, verbose=False)["input_ids"])]
        message = ""
        if warn_long_sources(lengths, trained):
            message = f"⚠️ The text is longer than any source the model saw in training ({trained} tokens)."
            gr.Warning(message)
        progress(0.6, desc="drawing the attention")
        state = {"text": text, "hypotheses": hypotheses}
        maps = translator.attention_maps(text, hypotheses[0])
        layers, heads = maps.cross.shape[:2]
        selectable = layers > 1 or heads > 1
        image, said = figure_of(maps, text, None, None)
        rows = [
            [rank, None if hypothesis.score is None else round(hypothesis.score, 4), hypothesis.text]
            for rank, hypothesis in enumerate(hypotheses, 1)
        ]
        return (
            " ".join(filter(None, (message, said))),
            hypotheses[0].text,
            rows,
            gr.update(choices=[(f"{rank}: {shown[:60]}", rank) for rank, _, shown in rows], value=1),
            gr.update(choices=list(range(1, layers + 1)), value=layers, visible=selectable),
            gr.update(choices=[AVERAGE, *range(1, heads + 1)], value=AVERAGE, visible=selectable),
            image,
            state,
            hidden,
            *quality_view(best.quality),
        )

    with gr.Blocks(title=f"hf-bahdanau: {source}→{target}", analytics_enabled=False, delete_cache=(3600, 3600)) as demo:
        gr.Markdown(
            f"## Translate {source} → {target}\n`{name}`: a {model.config.model_type} model. The score of a "
            "translation is its mean token log-probability (0 is certain); the figure is the attention between the "
            "words of the source and of the chosen translation."
        )
        with gr.Row():
            with gr.Column():
                text = gr.Textbox(label=f"text ({source})", lines=3, elem_id="source")
                decoding = gr.Radio(list(DECODINGS), value="beam" if beams > 1 else "greedy", label="decoding")
                size = gr.Slider(1, MAX_BEAMS, value=beams, step=1, label="beam size (beam search), samples (sampling)")
                terms = gr.Textbox(label="glossary (beam search): one 'source term = target term' a line", lines=2,
                                   elem_id="glossary")  # fmt: skip
                markup = gr.Checkbox(label="HTML: translate the text as markup, its tags kept", elem_id="html")
                button = gr.Button("Translate", variant="primary", elem_id="translate")
            with gr.Column():
                message = gr.Markdown(elem_id="message")
                translation = gr.Textbox(label=f"translation ({target})", interactive=False, elem_id="translation")
                nbest = gr.Dataframe(headers=["#", "score", "translation"], label="n-best list", interactive=False,
                                     wrap=True, column_widths=["7%", "17%", "76%"], elem_id="nbest")  # fmt: skip
                rendered = gr.HTML(visible=False, elem_id="rendered")
                words = gr.HighlightedText(label="estimated quality of the translation's words", visible=estimates,
                                           color_map={"OK": "green", "BAD": "red"}, show_legend=True,
                                           elem_id="quality-words")  # fmt: skip
                score = gr.Markdown(visible=estimates, elem_id="quality")
        with gr.Row():
            chosen = gr.Dropdown(choices=[], label="attention of translation", elem_id="chosen")
            layer = gr.Dropdown(choices=[], label="layer", visible=False, elem_id="layer")
            head = gr.Dropdown(choices=[], label="head", visible=False, elem_id="head")
        figure = gr.Image(label="attention", type="pil", format="png", interactive=False, elem_id="attention")
        state = gr.State({})
        outputs = [message, translation, nbest, chosen, layer, head, figure, state, rendered, words, score]
        for event in (button.click, text.submit):
            event(on_translate, [text, decoding, size, terms, markup], outputs)
        for selector in (chosen, layer, head):
            selector.input(draw, [state, chosen, layer, head], [figure, message])
    return demo


def launch(
    demo: gr.Blocks, host: str | None = "127.0.0.1", port: int | None = None, share: bool = False, block: bool = True
) -> None:
    """Serve `demo` on `host:port` (None: Gradio's defaults, or a Space's `GRADIO_SERVER_NAME`/`_PORT`); a public
    share link only with `share`; `block=False` returns while the server runs in a thread (`demo.close()`)."""
    import gradio as gr

    # Gradio's own start-up lines name its Python options (`share=True`); ours name the command's
    demo.launch(server_name=host, server_port=port, share=share, prevent_thread_lock=True, ssr_mode=False,
                theme=gr.themes.Default(), mcp_server=False, pwa=False, quiet=True)  # fmt: skip
    link = f"; public link {demo.share_url}" if demo.share_url else " (a public link: --share true)"
    logger.info("the demo runs at %s%s; Ctrl-C stops it", demo.local_url, link)
    if block:
        demo.block_thread()


__all__ = [
    "DECODINGS",
    "MAX_CHARACTERS",
    "attention_image",
    "build_demo",
    "check_text",
    "decoding_options",
    "glossary_of",
    "launch",
    "load_demo_translator",
    "quality_view",
    "translate",
    "translate_html",
    "translation_of",
]
