"""What both model types promise: loss, padding, decoding, generation, transformers' model contract, saving,
loading and remote code. Each test runs for the Bahdanau RNN and for the Transformer."""

import itertools
import re

import pytest
import torch
from helpers import MODEL_TYPES, VOCAB, greedy_config, make_model, random_ids
from torch import nn
from transformers import AutoConfig, AutoModelForSeq2SeqLM
from transformers.generation.utils import DeferredStopCheck

from hf_bahdanau import GENERATION_DEFAULTS, TranslationConfig, get_model_type
from hf_bahdanau.decoding.checkpoint import load_checkpoint
from hf_bahdanau.errors import InputError
from hf_bahdanau.models.cache_names import returned_cache

pytestmark = pytest.mark.parametrize("model_type", MODEL_TYPES)

# Settings that exercise each model's variants in the padding tests.
VARIANTS = {
    "bahdanau": [dict(), dict(rnn_type="lstm", bidirectional_encoder=True), dict(attention_type="general")],
    "d2l_transformer": [dict(), dict(norm_first=True, tie_word_embeddings=True), dict(encoder_layers=3)],
}


# ---- configuration ----------------------------------------------------------------------------------------


def test_config_documents_every_field(model_type):
    config_class = get_model_type(model_type).config_class
    shared = set(TranslationConfig.config_fields())
    for cls, names in ((TranslationConfig, shared), (config_class, set(config_class.config_fields()) - shared)):
        for name in names:
            if name != "is_encoder_decoder":
                assert re.search(rf"\b{name}\b", cls.__doc__), f"{cls.__name__}.{name} is not documented"


# ---- forward ------------------------------------------------------------------------------------------------


def test_loss_ignores_minus_100_and_shifts_labels(model_type):
    model = make_model(model_type)
    src = random_ids(2, 6)
    labels = random_ids(2, 5, seed=3)
    labels[1, 3:] = -100
    out = model(input_ids=src, labels=labels)
    decoder_input_ids = torch.cat([torch.ones(2, 1, dtype=torch.long), labels[:, :-1]], dim=1).clamp(min=0)
    torch.testing.assert_close(model(input_ids=src, decoder_input_ids=decoder_input_ids).logits, out.logits)
    keep = labels != -100
    expected = nn.functional.cross_entropy(out.logits[keep], labels[keep])
    torch.testing.assert_close(out.loss, expected)
    summed = model(input_ids=src, labels=labels, num_items_in_batch=keep.sum()).loss
    torch.testing.assert_close(summed, expected)
    halved = model(input_ids=src, labels=labels, num_items_in_batch=2 * keep.sum()).loss
    torch.testing.assert_close(halved, expected / 2)


def test_labels_all_ignored_give_zero_loss_and_gradient(model_type):
    model = make_model(model_type).train()
    loss = model(input_ids=random_ids(2, 4), labels=torch.full((2, 3), -100)).loss
    assert loss.item() == 0.0
    loss.backward()
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


def test_training_returns_the_logits_and_the_loss_from_them(model_type):
    """The training loss is the cross-entropy of the logits forward returns (in fp32), in any dtype."""
    model = make_model(model_type).train()
    src, labels = random_ids(3, 6), random_ids(3, 7, seed=3)
    labels[1, 4:] = -100
    torch.manual_seed(0)
    out = model(input_ids=src, labels=labels)
    assert out.logits.shape == (3, 7, VOCAB)
    keep = labels != -100
    torch.testing.assert_close(out.loss, nn.functional.cross_entropy(out.logits[keep], labels[keep]))
    model.to(torch.bfloat16)
    out = model(input_ids=src, labels=labels)
    assert out.logits.dtype == torch.bfloat16 and out.loss.dtype == torch.float32 and out.loss.isfinite()


def test_attentions_are_per_layer_batch_heads_query_key_and_masked(model_type):
    model = make_model(model_type)
    src = random_ids(2, 6)
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, 4:] = 0
    out = model(input_ids=src, attention_mask=mask, decoder_input_ids=random_ids(2, 3), output_attentions=True)
    assert len(out.cross_attentions) == (model.config.decoder_layers if model_type != "bahdanau" else 1)
    for weights in out.cross_attentions:
        assert weights.shape[0] == 2 and weights.shape[2:] == (3, 6)  # (batch, heads, tgt, src)
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:3]))
        assert torch.all(weights[1, :, :, 4:] == 0)
    for weights in out.decoder_attentions or ():  # causal: no weight on later target tokens
        assert weights.shape[2:] == (3, 3) and torch.all(weights.triu(1) == 0)
    for weights in out.encoder_attentions or ():
        assert weights.shape[2:] == (6, 6) and torch.all(weights[1, :, :, 4:] == 0)


def test_return_dict_false_gives_a_tuple_and_hidden_states_start_with_embeddings(model_type):
    model = make_model(model_type)
    src, tgt = random_ids(2, 5), random_ids(2, 3)
    out = model(input_ids=src, decoder_input_ids=tgt, output_hidden_states=True)
    as_tuple = model(input_ids=src, decoder_input_ids=tgt, return_dict=False)
    assert isinstance(as_tuple, tuple)
    torch.testing.assert_close(as_tuple[0], out.logits)
    embeddings = model.get_input_embeddings()(tgt)
    first = out.decoder_hidden_states[0]
    if model_type == "d2l_transformer":  # scaled embeddings plus positions
        first = first - model.model.decoder.positions.P[:, :3]
        embeddings = embeddings * model.model.decoder.embed_scale
    torch.testing.assert_close(first, embeddings)
    assert len(out.decoder_hidden_states) == len(out.encoder_hidden_states) or model_type == "bahdanau"
    model.config.return_dict = False
    assert isinstance(model(input_ids=src, decoder_input_ids=tgt), tuple)


def test_padding_on_either_side_equals_no_padding(model_type):
    for settings, side in itertools.product(VARIANTS[model_type], ("right", "left")):
        model = make_model(model_type, **settings)
        sentences = [random_ids(1, n, seed=n) for n in (7, 4, 2)]
        tgt = random_ids(3, 4, seed=9)
        width = 7
        batch = torch.zeros(3, width, dtype=torch.long)
        mask = torch.zeros(3, width, dtype=torch.long)
        for row, ids in enumerate(sentences):
            n = ids.shape[1]
            cols = slice(0, n) if side == "right" else slice(width - n, width)
            batch[row, cols], mask[row, cols] = ids[0], 1
        padded = model(input_ids=batch, attention_mask=mask, decoder_input_ids=tgt).logits
        for row, ids in enumerate(sentences):
            alone = model(input_ids=ids, decoder_input_ids=tgt[row : row + 1]).logits
            torch.testing.assert_close(padded[row : row + 1], alone, atol=1e-5, rtol=1e-5, msg=f"{settings} {side}")


@torch.no_grad()
def test_a_left_padded_target_equals_the_target_alone_with_its_decoder_attention_mask(model_type):
    for settings in VARIANTS[model_type]:
        model = make_model(model_type, **settings)
        src, tgt = random_ids(2, 5), random_ids(2, 4, seed=9)
        padded = torch.cat([torch.zeros(2, 2, dtype=torch.long), tgt], dim=1)  # row 0 left-padded by 2
        padded[1] = torch.cat([tgt[1], random_ids(1, 2, seed=3)[0]])  # row 1: 6 real tokens
        mask = torch.ones(2, 6, dtype=torch.long)
        mask[0, :2] = 0
        logits = model(input_ids=src, decoder_input_ids=padded, decoder_attention_mask=mask).logits
        alone = model(input_ids=src[:1], decoder_input_ids=tgt[:1]).logits
        torch.testing.assert_close(logits[:1, 2:], alone, atol=1e-5, rtol=1e-5, msg=str(settings))
        whole = model(input_ids=src[1:], decoder_input_ids=padded[1:]).logits
        torch.testing.assert_close(logits[1:], whole, atol=1e-5, rtol=1e-5, msg=str(settings))
        first = model(
            input_ids=src, decoder_input_ids=padded[:, :3], decoder_attention_mask=mask[:, :3], use_cache=True
        )
        step = model(input_ids=src, decoder_input_ids=padded[:, 3:4], decoder_attention_mask=mask[:, :4],
                     cache=returned_cache(first))  # fmt: skip
        torch.testing.assert_close(step.logits, logits[:, 3:4], atol=1e-5, rtol=1e-5, msg=str(settings))


@torch.no_grad()
def test_embeddings_given_for_the_ids_give_the_same_outputs_and_other_arguments_are_refused(model_type):
    model = make_model(model_type)
    src, tgt = random_ids(2, 5), random_ids(2, 4, seed=9)
    expected = model(input_ids=src, decoder_input_ids=tgt).logits
    encoder, decoder = model.get_encoder(), model.get_decoder()
    embedded = model(inputs_embeds=encoder.embed_tokens(src), decoder_inputs_embeds=decoder.embed_tokens(tgt)).logits
    torch.testing.assert_close(embedded, expected)
    with pytest.raises(TypeError, match="position_ids"):
        model(input_ids=src, decoder_input_ids=tgt, position_ids=torch.arange(5)[None])
    with pytest.raises(ValueError, match="pass decoder_input_ids or decoder_inputs_embeds"):
        model(input_ids=src)


# ---- decoding -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", [0, 1])
def test_step_by_step_decoding_equals_teacher_forcing(model_type, variant):
    model = make_model(model_type, **VARIANTS[model_type][variant])
    src, tgt = random_ids(2, 6), random_ids(2, 5, seed=2)
    mask = torch.tensor([[1] * 6, [1] * 3 + [0] * 3])
    teacher_forced = model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    encoder_outputs = model.get_encoder(modality="text")(src, mask)
    state, steps = None, []
    for t in range(tgt.shape[1]):
        out = model(
            encoder_outputs=encoder_outputs,
            attention_mask=mask,
            decoder_input_ids=tgt[:, t : t + 1],
            cache=state,
            use_cache=True,
        )
        state = out.cache
        steps.append(out.logits)
    assert state.get_seq_length() == tgt.shape[1]
    torch.testing.assert_close(torch.cat(steps, dim=1), teacher_forced, atol=1e-5, rtol=1e-5)
    first = model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=tgt[:, :1])
    other = model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=tgt[:, :1]).cache
    old_name = model(encoder_outputs=encoder_outputs, attention_mask=mask, decoder_input_ids=tgt[:, 1:2],
                     past_key_values=first.cache)  # fmt: skip
    torch.testing.assert_close(old_name.logits, steps[1])  # the name generate() uses before transformers 5.24
    with pytest.raises(ValueError, match="past_key_values or as cache"):  # two different states
        model(encoder_outputs=encoder_outputs, decoder_input_ids=tgt[:, 2:3], cache=old_name.cache,
              past_key_values=other)  # fmt: skip


def manual_greedy(model, src, max_new_tokens):
    tokens = torch.ones(src.shape[0], 1, dtype=torch.long)
    for _ in range(max_new_tokens):
        logits = model(input_ids=src, decoder_input_ids=tokens).logits[:, -1]
        tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
        if bool((tokens[:, 1:] == 2).any(1).all()):
            break
    return tokens


def test_greedy_generate_matches_manual_argmax_one_beam_and_no_cache(model_type):
    model = make_model(model_type)
    src = random_ids(1, 6)
    read = []  # decoder tokens read per step
    model.model.decoder.register_forward_pre_hook(lambda module, args: read.append(args[0].shape[1]))
    greedy = model.generate(src, generation_config=greedy_config(max_new_tokens=8, min_new_tokens=8))
    assert read == [1] * 8  # each step continues from the cache `generate` hands back
    expected = manual_greedy(model, src, 8)
    torch.testing.assert_close(greedy[:, : expected.shape[1]], expected)
    assert torch.equal(model.generate(src, generation_config=greedy_config(max_new_tokens=8, num_beams=1)), greedy)
    read.clear()
    assert torch.equal(model.generate(src, generation_config=greedy_config(max_new_tokens=8, use_cache=False)), greedy)
    assert read == list(range(1, 9))  # without it, each step reads the whole prefix


def test_generate_applies_no_mask_to_an_unpadded_source(model_type, monkeypatch):
    model = make_model(model_type)
    src = random_ids(2, 5)
    masks = []
    forward = type(model).forward
    monkeypatch.setattr(type(model), "forward", lambda self, *a, **kw: masks.append(kw.get("attention_mask")) or
                        forward(self, *a, **kw))  # fmt: skip
    tokens = model.generate(src, generation_config=greedy_config(max_new_tokens=4))
    assert masks and all(mask is None for mask in masks)  # generate's all-ones mask is dropped once per call
    padded = torch.cat([src, torch.zeros(2, 1, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(2, 5, dtype=torch.long), torch.zeros(2, 1, dtype=torch.long)], dim=1)
    masks.clear()
    same = model.generate(padded, attention_mask=mask, generation_config=greedy_config(max_new_tokens=4))
    assert all(kept is not None for kept in masks)
    torch.testing.assert_close(same, tokens)


def test_generation_continues_from_the_state_it_returned(model_type):
    model = make_model(model_type)
    src = random_ids(2, 5)
    config = greedy_config(max_new_tokens=6, min_new_tokens=6)
    whole = model.generate(src, generation_config=config)
    first = model.generate(
        src,
        generation_config=greedy_config(max_new_tokens=3, min_new_tokens=3),
        return_dict_in_generate=True,
    )
    rest = model.generate(
        src,
        decoder_input_ids=first.sequences,
        cache=first.cache,
        generation_config=greedy_config(max_new_tokens=3, min_new_tokens=3),
    )
    assert torch.equal(rest, whole)
    # On an Apple GPU, greedy search asks a returned cache whether it can be cropped back a step.
    mps = torch.device("mps")
    deferred = DeferredStopCheck.is_supported(mps, first.cache, cache_is_returned=True, is_assistant=False)
    assert deferred is (model_type == "d2l_transformer")  # the RNN state cannot: no deferred stop


def sequence_log_prob(model, src, sequence):
    tokens = torch.tensor([[1, *sequence]])
    log_probs = model(input_ids=src, decoder_input_ids=tokens[:, :-1]).logits.log_softmax(-1)
    return log_probs[0].gather(-1, tokens[0, 1:, None]).sum().item()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    "length, beams",
    [
        pytest.param(2, 6, id="2-tokens-vocab-beams"),
        pytest.param(3, 36, id="3-tokens-vocab^2-beams", marks=pytest.mark.slow),  # 36 beams: most of the test's time
    ],
)
def test_beam_search_as_wide_as_the_vocabulary_finds_the_exhaustive_best(model_type, seed, length, beams):
    # With as many beams as there are prefixes one step before the end, beam search cannot drop the best sequence.
    vocab = 6
    model = make_model(model_type, seed=seed, vocab_size=vocab, width=4)
    src = torch.tensor([[3, 4, 5]])
    candidates = []  # every hypothesis: ends in </s> (id 2), or stops at the length limit
    for n in range(1, length + 1):
        for body in itertools.product([t for t in range(vocab) if t != 2], repeat=n - 1):
            candidates.append((*body, 2))
            if n == length:
                candidates.extend((*body, t) for t in range(vocab) if t != 2)
    best = max(candidates, key=lambda seq: sequence_log_prob(model, src, seq))
    out = model.generate(
        src,
        generation_config=greedy_config(
            max_new_tokens=length, num_beams=beams, length_penalty=0.0, early_stopping="never"
        ),
        return_dict_in_generate=True,
        output_scores=True,
    )
    found = tuple(out.sequences[0, 1:].tolist())
    found = found[: found.index(2) + 1] if 2 in found else found
    assert found == best
    assert out.sequences_scores[0].item() == pytest.approx(sequence_log_prob(model, src, best), abs=1e-4)


def test_beam_options_and_return_sequences(model_type):
    model = make_model(model_type)
    src = random_ids(2, 5)
    out = model.generate(
        src,
        generation_config=greedy_config(
            max_new_tokens=6,
            num_beams=4,
            num_return_sequences=3,
            length_penalty=1.2,
            early_stopping=True,
            no_repeat_ngram_size=2,
        ),
        return_dict_in_generate=True,
        output_scores=True,
    )
    assert out.sequences.shape[0] == 6
    scores = out.sequences_scores.reshape(2, 3)
    assert torch.all(scores[:, :-1] >= scores[:, 1:])  # best first
    for row in out.sequences.tolist():
        bigrams = [tuple(row[i : i + 2]) for i in range(len(row) - 1) if 0 not in row[i : i + 2]]
        assert len(bigrams) == len(set(bigrams))


@pytest.mark.parametrize("num_beams", [1, 3])
@pytest.mark.parametrize("side", ["right", "left"])
def test_padded_batch_translates_each_sentence_as_alone(model_type, num_beams, side):
    model = make_model(model_type)
    sentences = [random_ids(1, n, seed=n) for n in (6, 3, 1)]
    batch = torch.zeros(3, 6, dtype=torch.long)
    mask = torch.zeros(3, 6, dtype=torch.long)
    for row, ids in enumerate(sentences):
        cols = slice(0, ids.shape[1]) if side == "right" else slice(6 - ids.shape[1], 6)
        batch[row, cols], mask[row, cols] = ids[0], 1
    config = greedy_config(max_new_tokens=7, num_beams=num_beams)
    together = model.generate(batch, attention_mask=mask, generation_config=config)
    for row, ids in enumerate(sentences):
        alone = model.generate(ids, generation_config=config)[0]
        assert together[row, : alone.shape[0]].tolist() == alone.tolist()
        assert torch.all(together[row, alone.shape[0] :] == 0)


def test_seeded_sampling_is_reproducible_and_varies(model_type):
    model = make_model(model_type)
    src = random_ids(4, 5)
    config = greedy_config(max_new_tokens=8, do_sample=True, top_k=10, top_p=0.95, temperature=1.5)
    torch.manual_seed(7)
    first = model.generate(src, generation_config=config)
    torch.manual_seed(7)
    again = model.generate(src, generation_config=config)
    torch.manual_seed(8)
    other = model.generate(src, generation_config=config)
    assert torch.equal(first, again)
    assert not torch.equal(first, other)


def test_generate_returns_attention_of_every_step(model_type):
    model = make_model(model_type)
    src = random_ids(2, 5)
    out = model.generate(
        src,
        generation_config=greedy_config(max_new_tokens=4, min_new_tokens=4),
        return_dict_in_generate=True,
        output_attentions=True,
    )
    assert len(out.cross_attentions) == 4
    for step in out.cross_attentions:
        for weights in step:  # one per layer
            assert weights.shape[0] == 2 and weights.shape[2:] == (1, 5)
            torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:3]))


def test_generation_defaults_live_in_generation_config(model_type):
    model = make_model(model_type)
    for name, value in GENERATION_DEFAULTS.items():
        assert getattr(model.generation_config, name) == value
        assert name not in model.config.to_dict()


@pytest.mark.slow
def test_tiny_model_learns_to_copy(model_type):
    # d2l's N(0, 1) embeddings, scaled by sqrt(d_model), drown the positions: the Transformer learns with smaller ones.
    extra, lr = (
        (dict(bidirectional_encoder=True), 0.01) if model_type == "bahdanau" else (dict(init_std=32**-0.5), 3e-3)
    )
    model = make_model(model_type, seed=1, vocab_size=12, width=32, **extra)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(150):
        src = torch.randint(3, 12, (32, 5), generator=generator)
        labels = torch.cat([src, torch.full((32, 1), 2)], dim=1)
        loss = model(input_ids=src, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    assert sum(losses[-10:]) / 10 < 0.3 * sum(losses[:10]) / 10
    src = torch.randint(3, 12, (16, 5), generator=generator)
    out = model.generate(src, generation_config=greedy_config(max_new_tokens=7))
    assert (out[:, 1:6] == src).float().mean() > 0.9


# ---- saving, loading, Auto classes, remote code ------------------------------------------------------------


def test_save_and_load_round_trip_with_safetensors(model_type, tmp_path):
    model = make_model(model_type, **VARIANTS[model_type][1])
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file() and (tmp_path / "generation_config.json").is_file()
    loaded = type(model).from_pretrained(tmp_path).eval()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name
    for name, buffer in model.named_buffers():  # non-persistent buffers are rebuilt, not loaded
        assert torch.equal(buffer, dict(loaded.named_buffers())[name]), name
    src = random_ids(2, 6)
    assert torch.equal(model.generate(src, max_new_tokens=6), loaded.generate(src, max_new_tokens=6))


def test_saving_checks_the_config(model_type, tmp_path):
    model = make_model(model_type)
    model.config.tie_encoder_decoder_embeddings = True  # made inconsistent after construction
    with pytest.raises(ValueError, match="tie_encoder_decoder_embeddings needs tie_word_embeddings"):
        model.save_pretrained(tmp_path)
    assert not (tmp_path / "config.json").exists()


def test_auto_classes_load_in_process(model_type, tmp_path):
    config_class, model_class = get_model_type(model_type)
    make_model(model_type).save_pretrained(tmp_path)
    assert type(AutoConfig.from_pretrained(tmp_path)) is config_class
    assert type(AutoModelForSeq2SeqLM.from_pretrained(tmp_path)) is model_class
    assert isinstance(AutoModelForSeq2SeqLM.from_config(config_class(vocab_size=10)), model_class)


@pytest.mark.slow  # the remote code loaded in a process of its own (conftest's without_the_package)
def test_remote_code_loads_without_the_package(model_type, without_the_package):
    found = without_the_package[model_type]  # loaded in a process where hf_bahdanau cannot be imported
    model = found["model"]
    config = (found["folder"] / "config.json").read_text()
    assert '"auto_map"' in config and f"{type(model).__module__.split('.')[-1]}.{type(model).__name__}" in config
    assert found["modules"][0].startswith("transformers_modules"), found["modules"]
    assert found["generated"] == model.generate(found["inputs"]["ids"], max_new_tokens=6).tolist()


# ---- embeddings, dtypes, devices ---------------------------------------------------------------------------


@pytest.mark.parametrize("variant", [0, 1])
def test_int8_for_cpu_stays_close_to_fp32_and_is_never_saved(model_type, variant, tmp_path):
    model = make_model(model_type, width=32, **VARIANTS[model_type][variant])
    model.save_pretrained(tmp_path)
    quantized = load_checkpoint(tmp_path, quantize="int8")
    assert quantized.quantization == "int8" and quantized.lm_head.weight().dtype == torch.qint8
    left_float = [m for m in quantized.modules() if type(m) in (nn.Linear, nn.GRU, nn.LSTM)]
    assert all(type(m) is nn.Linear and m.out_features == 1 for m in left_float)  # the additive score only
    src, tgt = random_ids(4, 7), random_ids(4, 6, seed=1)
    mask = torch.ones_like(src)
    mask[1, 4:] = 0  # a padded source (the RNN encoder packs it)
    fp32, int8 = (m(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits for m in (model, quantized))
    assert (int8 - fp32).abs().max() < 0.15 * fp32.abs().max()  # int8 weights of a tiny random model
    assert (int8.argmax(-1) == fp32.argmax(-1)).float().mean() > 0.75
    assert quantized.generate(src, generation_config=greedy_config(max_new_tokens=5)).shape == (4, 6)
    with pytest.raises(ValueError, match="cannot be saved"):
        quantized.save_pretrained(tmp_path / "int8")
    assert not (tmp_path / "int8").exists()
    with pytest.raises(InputError, match="quantize must be one of"):
        load_checkpoint(tmp_path, quantize="int4")


def test_tied_embeddings_share_storage_and_stay_tied_after_resize(model_type):
    model = make_model(model_type, tie_word_embeddings=True, tie_encoder_decoder_embeddings=True)
    assert model.lm_head.weight is model.model.decoder.embed_tokens.weight
    assert model.model.encoder.embed_tokens.weight is model.model.decoder.embed_tokens.weight
    model.resize_token_embeddings(VOCAB + 5)
    assert model.config.vocab_size == VOCAB + 5
    assert model.lm_head.weight is model.model.decoder.embed_tokens.weight
    assert model.model.encoder.embed_tokens.weight is model.model.decoder.embed_tokens.weight
    assert model.lm_head.weight.shape == (VOCAB + 5, 16) and model.lm_head.bias.shape == (VOCAB + 5,)
    out = model(input_ids=torch.tensor([[VOCAB + 4, 3]]), decoder_input_ids=torch.tensor([[1, VOCAB + 3]]))
    assert out.logits.shape == (1, 2, VOCAB + 5)


def test_a_tied_embedding_is_drawn_as_an_untied_one(model_type):
    tied = make_model(model_type, tie_word_embeddings=True, tie_encoder_decoder_embeddings=True)
    untied = make_model(model_type)
    spread = untied.model.decoder.embed_tokens.weight.std()  # N(0, 1) or N(0, init_std), not the head's Xavier
    assert float(tied.model.decoder.embed_tokens.weight.std()) == pytest.approx(float(spread), rel=0.2)


@pytest.mark.parametrize("mean_resizing", [True, False])
def test_untied_resize_resizes_encoder_too(model_type, mean_resizing):
    model = make_model(model_type)
    before = {side: getattr(model.model, side).embed_tokens.weight.detach().clone() for side in ("encoder", "decoder")}
    model.resize_token_embeddings(VOCAB + 3, mean_resizing=mean_resizing)
    assert model.model.encoder.embed_tokens.num_embeddings == VOCAB + 3
    assert model.lm_head.out_features == VOCAB + 3
    assert model.lm_head.weight is not model.model.decoder.embed_tokens.weight
    for side, old in before.items():
        weight = getattr(model.model, side).embed_tokens.weight
        assert torch.equal(weight[:VOCAB], old)  # each side keeps its rows
        mean = old.mean(dim=0).expand(3, -1)  # and gains rows at their mean (transformers' within 1e-9 covariance)
        assert torch.allclose(weight[VOCAB:], mean, atol=1e-3) == mean_resizing, side


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_model_to_dtype(model_type, dtype):
    model = make_model(model_type)
    src, tgt = random_ids(2, 5), random_ids(2, 4)
    reference = model(input_ids=src, decoder_input_ids=tgt).logits
    converted = model.to(dtype)
    logits = converted(input_ids=src, decoder_input_ids=tgt).logits
    assert logits.dtype == dtype
    tolerance = dict(atol=0.3, rtol=0.05) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits.float(), reference, **tolerance)
    assert converted.generate(src, max_new_tokens=4).shape[0] == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_bf16_training_and_greedy_matches_fp32(model_type):
    model = make_model(model_type, width=32).cuda()
    src, labels = random_ids(8, 7).cuda(), random_ids(8, 6, seed=1).cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for _ in range(3):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=src, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        assert torch.isfinite(loss)
    model.eval()
    config = greedy_config(max_new_tokens=6)
    fp32 = model.generate(src, generation_config=config)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        bf16 = model.generate(src, generation_config=config)
    assert (fp32 == bf16).float().mean() > 0.9


# ---- bad input ---------------------------------------------------------------------------------------------


def test_bad_inputs_raise_clear_errors(model_type):
    model = make_model(model_type)
    with pytest.raises(ValueError, match="non-empty"):
        model(
            input_ids=torch.zeros(1, 0, dtype=torch.long),
            decoder_input_ids=torch.ones(1, 1, dtype=torch.long),
        )
    with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 4\) but input_ids has shape \(2, 5\)"):
        model(input_ids=random_ids(2, 5), attention_mask=torch.ones(2, 4), decoder_input_ids=random_ids(2, 2))


def test_the_strict_loader_names_a_checkpoint_that_does_not_fit_its_config_or_is_corrupt(model_type, tmp_path):
    model = make_model(model_type)
    model.save_pretrained(tmp_path)
    with pytest.raises(InputError, match="does not match its config: its weight shapes differ"):
        load_checkpoint(tmp_path, vocab_size=VOCAB + 10)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:50])
    with pytest.raises(InputError, match="corrupt or truncated"):
        load_checkpoint(tmp_path)
