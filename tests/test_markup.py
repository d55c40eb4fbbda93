"""HTML translated a sentence at a time with its inline tags put back on the aligned words (`decoding.markup`): the
projection with hand-made alignments, the parser's hostile cases, and every front end that takes HTML."""

from __future__ import annotations

import io
import time
from collections import Counter
from html.parser import HTMLParser

import pytest
import torch
from helpers import tiny_translator

from hf_bahdanau.cli import main
from hf_bahdanau.decoding.alignment import merge_words, pharaoh, source_pharaoh
from hf_bahdanau.decoding.markup.html import ALIGNMENT, HtmlDocument
from hf_bahdanau.decoding.markup.projection import Element, layout, project, relative_links
from hf_bahdanau.decoding.translator import Translator
from hf_bahdanau.models.pipelines import transformers_provides

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}


class _Elements(HTMLParser):
    """The start tags of a document (as written) and whether its elements are properly nested."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.starts: Counter = Counter()
        self.stack: list[str] = []
        self.nested = True

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.starts[self.get_starttag_text()] += 1
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self.starts[self.get_starttag_text()] += 1

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.nested = False


def elements(page: str) -> tuple[Counter, bool]:
    """The start tags of `page` and whether it is well formed (every element closed, properly nested)."""
    parser = _Elements()
    parser.feed(page)
    parser.close()
    return parser.starts, parser.nested and not parser.stack


def translated(page: str, order: str = "same", upper: bool = True) -> str:
    """`page` "translated" by hand: each sentence's words upper-cased, in the same or reversed order, with the
    alignment that says so."""
    document = HtmlDocument.parse(page, "de")
    found = []
    for sentence in document.sentences:
        words = sentence.upper().split() if upper else sentence.split()
        n = len(words)
        if order == "reversed":
            found.append((" ".join(reversed(words)), " ".join(f"{i}-{n - 1 - i}" for i in range(n))))
        else:
            found.append((" ".join(words), " ".join(f"{i}-{i}" for i in range(n))))
    return document.rebuild(found)


def test_a_monotone_alignment_puts_every_tag_back_where_it_was():
    page = '<p>Ein <b>großer</b> Hund rennt <a href="/x">hier</a>. Zwei (<i>Katzen</i>) <img src="k.png"> schlafen.</p>'
    document = HtmlDocument.parse(page, "de")
    assert document.sentences == ["Ein großer Hund rennt hier.", "Zwei (Katzen) schlafen."]  # whole, tags out
    assert translated(page) == (
        '<p>EIN <b>GROSSER</b> HUND RENNT <a href="/x">HIER</a>. ZWEI (<i>KATZEN</i>) <img src="k.png"> SCHLAFEN.</p>'
    )


def test_reordered_words_carry_their_tags_and_nested_elements_stay_nested():
    page = "<p><b>Ein <i>großer</i> Hund</b> rennt <u>schnell</u></p>"
    found = translated(page, "reversed")
    assert found == "<p><u>SCHNELL</u> RENNT <b>HUND <i>GROSSER</i> EIN</b></p>"
    assert elements(found) == (elements(page)[0], True)


def test_crossing_alignments_give_properly_nested_elements_on_the_side_with_more_aligned_words():
    # source "a b c d": <b> holds a b, <i> holds c d; the target interleaves them: a c b d
    elements_ = [Element(0, 2), Element(2, 4)]
    links = [(0, 0), (2, 1), (1, 2), (3, 3)]
    placed = project(elements_, 4, 4, links)
    assert placed == [(0, 3), (3, 4)]  # <b> a c b, then <i> cut to the side outside <b>: d
    events = layout(elements_, placed, 4)
    assert events == [("open", 0), ("word", 0), ("word", 1), ("word", 2), ("close", 0), ("open", 1), ("word", 3),
                      ("close", 1)]  # fmt: skip
    # more of <i>'s words inside <b>'s span: <i> nests inside it
    placed = project([Element(0, 2), Element(2, 4)], 4, 5, [(0, 0), (2, 1), (3, 2), (1, 3), (3, 4)])
    assert placed == [(0, 4), (1, 3)]  # cut to (1, 4) inside <b>, then to its aligned words


def test_children_stay_inside_their_parent_and_unaligned_words_keep_their_relative_place():
    # <b> (words 0-1) holds <i> (word 1); word 1 is unaligned: <i> takes the same relative place, inside <b>
    placed = project([Element(0, 2), Element(1, 2, parent=0)], 4, 4, [(0, 0), (2, 2), (3, 3)])
    assert placed == [(0, 1), (0, 1)]
    page = "<p>Ein <b>Hund</b> rennt.</p>"
    document = HtmlDocument.parse(page, "de")
    assert document.rebuild([("A dog runs .", "0-0 2-2")]) == "<p>A <b>dog</b> runs .</p>"  # "Hund" unaligned
    assert document.rebuild([("A dog runs.", None)]) == "<p>A <b>dog</b> runs.</p>"  # no alignment: relative
    assert relative_links(3, 6) == [(0, 0), (0, 1), (1, 2), (1, 3), (2, 4), (2, 5)]


def test_empty_elements_and_comments_go_to_the_aligned_gap():
    page = '<p>Ein <b></b>Hund <img src="a.png" alt="x"> rennt<br/>Hallo <!-- note --> Welt <span> </span></p>'
    document = HtmlDocument.parse(page, "de")
    assert document.sentences == ["Ein Hund rennt", "Hallo Welt"]  # <br/> separates segments
    found = document.rebuild([("runs dog a", "0-2 1-1 2-0"), ("world hello", "0-1 1-0")])
    # each before the translation of the source word it preceded; <span> </span> (no words) after "Welt"'s
    assert found == '<p><img src="a.png" alt="x"> runs <b></b>dog a<br/><!-- note --> world <span> </span>hello</p>'
    assert elements(found) == (elements(page)[0], True)


def test_attributes_with_angle_brackets_entities_and_quotes_are_kept_and_text_is_escaped_again():
    page = """<p title="a > b" data-x='<i>'>Fisch &amp; Chips &lt;heiß&gt; "gut"</p>"""
    document = HtmlDocument.parse(page, "de")
    assert document.sentences == ['Fisch & Chips <heiß> "gut"']
    found = document.rebuild([('Fish & chips <hot> "good"', "0-0 1-1 2-2 3-3 4-4")])
    assert found == """<p title="a > b" data-x='<i>'>Fish &amp; chips &lt;hot&gt; "good"</p>"""


def test_code_scripts_styles_pre_comments_and_translate_no_are_kept_as_they_are():
    page = (
        '<html><head><style>p > b { color: red }</style><script>if (a < b) { x = "<b>Hund</b>"; }</script></head>'
        '<body><p>Tippe <code>ls &lt;dir&gt;</code> ein. Die <span translate="no">Deutsche Bahn</span> fährt.</p>'
        '<pre>Ein  <b>Hund</b>\n  bellt</pre><div class="x notranslate">Nicht übersetzen</div><!-- <p>Kommentar</p> -->'
        "</body></html>"
    )
    document = HtmlDocument.parse(page, "de")
    assert document.sentences == ["Tippe ein.", "Die fährt."]
    assert translated(page) == page.replace("Tippe", "TIPPE").replace(" ein.", " EIN.").replace("Die", "DIE").replace(
        "fährt", "FÄHRT"
    )


def test_an_unclosed_tag_is_closed_at_the_end_of_its_segment_and_a_stray_end_is_dropped():
    found = translated("<p>Ein <b>großer Hund</p><p>Zwei</i> Katzen</span></p>")
    assert found == "<p>EIN <b>GROSSER HUND</b></p><p>ZWEI KATZEN</p>"
    assert elements(translated("<p>Ein <b>großer Hund</p>")) == (elements("<p>Ein <b>großer Hund</p>")[0], True)


def test_an_inline_element_holding_a_block_stays_where_it_is():
    page = '<a href="/x">Ein Hund <div>rennt</div> schnell</a>'
    assert translated(page, "reversed") == '<a href="/x">HUND EIN <div>RENNT</div> SCHNELL</a>'


@pytest.mark.parametrize("order", ["same", "reversed"])
def test_every_output_is_well_formed_with_the_same_elements(order):
    pages = [
        "<p><b><i>Ein</i> Hund</b> <a href=x><em>rennt</em> <img src=y> weg</a> und <b>bellt <i>laut</i></b>.</p>",
        "<ul><li>Ein <b>Hund</b></li><li><b>Zwei <i>Katzen</i> <u>schlafen</u></b></li></ul>",
        "<p><span class=a><span class=b>Ein</span></span> Satz. Noch <b>einer. Und</b> noch.</p>",
    ]
    for page in pages:
        found = translated(page, order)
        assert elements(found) == (elements(page)[0], True), found


@pytest.mark.parametrize("paragraphs", [True, False], ids=["paragraphs", "one-paragraph"])
def test_a_one_megabyte_document_is_translated_in_bounded_time(paragraphs):
    sentences = 'Ein <b>großer</b> Hund rennt <a href="/x?a=1&amp;b=2">hier</a> &amp; dort. Zwei <i>Katzen</i>. '
    unit = f"<p>{sentences}</p>\n" if paragraphs else sentences
    count = 1_000_000 // len(unit) + 1
    page = unit * count if paragraphs else f"<p>{unit * count}</p>"
    start = time.perf_counter()
    found = translated(page, "reversed")
    assert time.perf_counter() - start < 120  # about 10 s here
    assert elements(found) == (elements(page)[0], True)
    if paragraphs:
        assert found == translated(unit, "reversed") * count


def test_thousands_of_nested_elements_stay_nested():
    page = "<p>" + "<b>" * 3000 + "Hund" + "</b>" * 3000 + ' rennt <a href="/x">weg</a>.</p>'
    found = translated(page, "reversed")
    assert found == '<p><a href="/x">WEG</a>. RENNT ' + "<b>" * 3000 + "HUND" + "</b>" * 3000 + "</p>"


CORPUS = [
    "Ein Mann fährt Fahrrad.", "A man is riding a bicycle.", "Zwei Hunde spielen im Schnee.",
    "Two dogs are playing in the snow.", "Eine Frau liest ein Buch im Park.", "A woman is reading a book in the park.",
]  # fmt: skip
PAGE = '<p>Zwei <b>Hunde</b> spielen im Schnee. Eine Frau <a href="/b?x=1">liest</a> ein Buch.</p><p>Ein Mann</p>'


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_translator("d2l_transformer", tokenizer, 2, max_new_tokens=10, source_language="de",
                           target_language="en")  # fmt: skip


def text_of(page: str) -> str:
    """The text of `page`, without its tags (character references read)."""
    parser = HTMLParser(convert_charrefs=True)
    pieces: list[str] = []
    parser.handle_data = pieces.append
    parser.feed(page)
    parser.close()
    return " ".join(pieces)


def test_the_translator_translates_html_by_whole_sentences(model, tokenizer):
    translator = Translator(model, tokenizer)
    found = translator.translate_html([PAGE, "ohne Tags"])
    sentences = HtmlDocument.parse(PAGE, "de").sentences
    assert sentences == ["Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch.", "Ein Mann"]
    whole = [translation.text for translation in translator.translate([*sentences, "ohne Tags"])]
    assert elements(found[0]) == (elements(PAGE)[0], True)
    assert text_of(found[0]).split() == " ".join(whole[:3]).split()  # the sentences' own translations, whole
    assert found[1] == whole[3]  # plain text: its plain translation


def test_each_source_word_goes_to_the_target_word_that_attends_to_it_most():
    attention = torch.tensor([[0.7, 0.3, 0.0], [0.2, 0.7, 0.1], [0.1, 0.5, 0.4]])  # (A dog runs, Ein Hund rennt)
    assert source_pharaoh(attention) == "0-0 1-1 2-2"  # the columns' argmaxes: 0.7, 0.7 and 0.4
    assert pharaoh(attention) == "0-0 1-1 1-2"  # the rows': `runs` attends to `Hund` most
    document = HtmlDocument.parse("Ein <b>Hund</b> rennt", "de")
    assert document.rebuild([("A dog runs", source_pharaoh(attention))]) == "A <b>dog</b> runs"
    assert document.rebuild([("A dog runs", pharaoh(attention))]) == "A <b>dog runs</b>"
    assert source_pharaoh(torch.zeros(2, 0)) == ""


def test_a_target_word_attends_to_a_source_word_as_much_as_its_piece_that_attends_most():
    attention = torch.tensor([[0.8, 0.1, 0.1], [0.5, 0.1, 0.4], [0.1, 0.8, 0.1], [0.0, 0.5, 0.5]])  # (▁A ▁do g ▁runs,
    targets, sources = [0, 1, 1, 2], [0, 1, 2]  # Ein Hund rennt)
    most = merge_words(attention, targets, sources, pool="max")
    assert torch.allclose(most, torch.tensor([[0.8, 0.1, 0.1], [0.5, 0.8, 0.4], [0.0, 0.5, 0.5]]))
    mean = merge_words(attention, targets, sources)  # `dog`: (0.3, 0.45, 0.25), below `runs` (0.5) for `Hund`
    assert (source_pharaoh(most), source_pharaoh(mean)) == ("0-0 1-1 2-2", "0-0 1-2 2-2")
    document = HtmlDocument.parse("Ein <b>Hund</b> rennt", "de")
    assert document.rebuild([("A dog runs", source_pharaoh(most))]) == "A <b>dog</b> runs"


def test_the_rnn_translates_html_with_source_alignments_too(tokenizer):
    rnn = tiny_translator("bahdanau", tokenizer, 1, max_new_tokens=8, source_language="de", target_language="en")
    translator = Translator(rnn, tokenizer)
    found = translator.translate(HtmlDocument.parse(PAGE, "de").sentences, alignments=ALIGNMENT)
    for translation, count in zip(found, (5, 5, 2), strict=True):  # each source word once, to a target word
        pairs = [tuple(map(int, pair.split("-"))) for pair in translation.alignment.split()]
        assert [s for s, _ in pairs] == list(range(count)) and all(t < len(translation.text.split()) for _, t in pairs)
    assert elements(translator.translate_html([PAGE])[0]) == (elements(PAGE)[0], True)


def test_translate_input_format_html_reads_stdin_and_a_document(
    folder, model, tokenizer, monkeypatch, capsys, tmp_path
):  # noqa: E501
    expected = Translator(model, tokenizer).translate_html([PAGE])[0] + "\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(PAGE + "\n"))
    assert main(["translate", "--model", str(folder), "--input-format", "html"]) == 0
    assert capsys.readouterr().out == expected
    path = tmp_path / "page.html"
    path.write_text(PAGE, encoding="utf-8")
    assert main(["translate", "--model", str(folder), "--input-format", "html", "--document", str(path)]) == 0
    assert capsys.readouterr().out == expected


def test_the_pipeline_translates_html_through_the_translator(folder, model, tokenizer):
    from transformers import pipeline

    from hf_bahdanau.models.pipelines import TASK

    pipe = pipeline(TASK, model=str(folder))
    expected = Translator(model, tokenizer).translate_html([PAGE])[0]
    assert pipe(PAGE, input_format="html") == [{"translation_text": expected}]
    assert pipe([PAGE, PAGE], input_format="html") == [{"translation_text": expected}] * 2
    with pytest.raises(ValueError, match="input_format 'xml'"):
        pipe(PAGE, input_format="xml")


@pytest.mark.skipif(transformers_provides("translation"), reason="transformers has its own translation pipeline")
def test_a_folders_own_pipeline_code_refuses_html_without_the_package(folder, monkeypatch):
    from transformers import pipeline

    from hf_bahdanau.models.pipelines import TranslationPipeline

    remote = pipeline("translation", model=str(folder), trust_remote_code=True)
    monkeypatch.setattr(TranslationPipeline, "translator_class", None)  # as where the package is not imported
    with pytest.raises(ValueError, match="^input_format='html' needs the hf_bahdanau package") as refused:
        remote(PAGE, input_format="html")
    assert "\n" not in str(refused.value)


def test_the_demo_translates_html_as_the_translator_does(model, tokenizer):
    from hf_bahdanau.errors import InputError
    from hf_bahdanau.serving import demo

    translator = Translator(model, tokenizer)
    assert demo.translate_html(translator, PAGE, "greedy", 1) == translator.translate_html([PAGE], num_beams=1)[0]
    with pytest.raises(InputError, match="Nothing to translate"):
        demo.translate_html(translator, "  ", "greedy", 1)


def test_the_server_translates_format_html_as_the_translator_does(folder, model, tokenizer):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    import asyncio

    from hf_bahdanau.serving.app import Settings, build_app

    app = build_app(Settings(models=(str(folder),)))

    async def ask() -> list:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                found = []
                for text_format in ("html", "text"):
                    body = {"q": [PAGE, "Ein Mann"], "source": "de", "target": "en", "format": text_format}
                    found.append((await client.post("/translate", json=body, timeout=60)).json())
                return found

    html_answer, text_answer = asyncio.run(ask())
    translator = Translator(model, tokenizer)
    assert html_answer == {"translatedText": translator.translate_html([PAGE, "Ein Mann"])}
    assert text_answer["translatedText"][1] == translator.translate(["Ein Mann"])[0].text


def test_the_benchmark_scores_the_four_ways_on_a_tiny_model(model, tokenizer, tmp_path):
    import json

    pytest.importorskip("eflomal")  # the reference word aligner
    from conftest import load_script

    from hf_bahdanau.models.pipelines import save_for_pipeline

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split in ("train", "test_2016_flickr"):
        (corpus / f"{split}.de").write_text("\n".join(CORPUS[0::2]) + "\n", encoding="utf-8")
        (corpus / f"{split}.en").write_text("\n".join(CORPUS[1::2]) + "\n", encoding="utf-8")
    folder = save_for_pipeline(model, tokenizer, tmp_path / "model")
    output = tmp_path / "benchmark"
    found = load_script("benchmark_markup").main(["--model", str(folder), "--data", str(corpus),
                                                  "--output-dir", str(output)])  # fmt: skip
    assert json.loads((output / "results.json").read_text(encoding="utf-8")) == found
    assert found["sentences"] == 3 and found["tags"] >= 3
    assert found["sentence"]["well_formed"] == found["naive"]["well_formed"] == 100.0
    assert found["sentence"]["bleu"] == pytest.approx(found["tag_free_bleu"])  # the same words: tags take none away
    assert all(0 <= found[method]["tag_f1"] <= 1 for method in ("sentence", "one_way", "naive", "piecewise"))
    table = (output / "table.md").read_text(encoding="utf-8")
    assert "| by sentence, source-side alignments (the package) | 100.0% |" in table


def test_the_benchmark_symmetrises_its_reference_by_grow_diag_final_and():
    from conftest import load_script

    grow_diag_final_and = load_script("benchmark_markup").grow_diag_final_and
    # intersection (0,0),(1,1); (2,1) and then (2,2) grow from (1,1), each aligning a word not yet aligned
    assert grow_diag_final_and({(0, 0), (1, 1), (2, 1)}, {(0, 0), (1, 1), (2, 2)}) == {(0, 0), (1, 1), (2, 1), (2, 2)}
    # no link neighbours (0,0): final-and adds forward's (3,3), then backward's (1,2) and (2,1), whose words are
    # unaligned, but not (3,2): source word 3 is aligned by then
    assert grow_diag_final_and({(0, 0), (3, 3)}, {(0, 0), (2, 1), (1, 2), (3, 2)}) == {(0, 0), (1, 2), (2, 1), (3, 3)}
