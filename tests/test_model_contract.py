"""What transformers' common model and generation tests ask of a model, written against ours: continuing generation
from a returned cache, the cache's old name, the recurrent state's format, loading a checkpoint with missing weights,
attention weights in the autograd graph, gradient checkpointing, the attention interface."""

import copy
import warnings

import pytest
import torch
import transformers
from helpers import MODEL_TYPES, make_model, random_ids
from packaging.version import Version
from safetensors.torch import load_file, save_file
from transformers import AttentionInterface, AutoModelForSeq2SeqLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from hf_bahdanau.decoding.checkpoint import load_checkpoint
from hf_bahdanau.errors import InputError
from hf_bahdanau.models.cache_names import returned_cache

# As transformers' `test_generate_continue_from_past_key_values`: no token ends a sequence, greedy, scores kept.
CONTINUE = dict(
    pad_token_id=-1,
    eos_token_id=-1,
    decoder_start_token_id=1,
    use_cache=True,
    do_sample=False,
    num_beams=1,
    return_dict_in_generate=True,
    output_scores=True,
)


# The recurrent variants: GRU, LSTM, a bidirectional encoder (LSTM: a bridged cell too), the conditional GRU.
RNN_VARIANTS = [{}, {"rnn_type": "lstm"}, {"bidirectional_encoder": True, "rnn_type": "lstm"}, {"decoder_type": "cgru"}]


def left_padded_source() -> tuple[torch.Tensor, torch.Tensor]:
    """Source ids `(4, 7)` and mask, rows 1 and 3 left-padded."""
    src = random_ids(4, 7, seed=11)
    mask = torch.ones(4, 7, dtype=torch.long)
    mask[1, :3] = mask[3, :1] = 0
    return src.masked_fill(mask == 0, 0), mask


@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("prompt_length", [1, 4])
def test_generate_continue_from_past_key_values(model_type, prompt_length):
    """Generating 3 tokens, then 1 more from the returned cache (passed as `past_key_values`) and sequences, is
    generating 4 in one go: the same tokens, scores and final state."""
    sizes = {"init_std": 1.0} if model_type != "bahdanau" else {}  # larger logits: tokens that vary
    model = make_model(model_type, width=24, **sizes)
    src, mask = left_padded_source()
    prompt = torch.cat([torch.ones(4, 1, dtype=torch.long), random_ids(4, prompt_length - 1, seed=5)], dim=1)
    inputs = dict(input_ids=src, attention_mask=mask)
    whole = model.generate(**inputs, decoder_input_ids=prompt, max_new_tokens=4, **CONTINUE)
    first = model.generate(**inputs, decoder_input_ids=prompt, max_new_tokens=3, **CONTINUE)
    then = model.generate(
        **inputs,
        decoder_input_ids=first.sequences,
        past_key_values=first.past_key_values,
        max_new_tokens=1,
        **CONTINUE,
    )
    assert whole.sequences.shape == (4, prompt_length + 4) and len(set(whole.sequences[:, -4:].flatten().tolist())) > 2
    assert torch.equal(then.sequences, whole.sequences)
    torch.testing.assert_close(torch.stack(first.scores + then.scores), torch.stack(whole.scores))
    if model_type == "bahdanau":
        states = [(output.past_key_values.hidden, output.past_key_values.steps) for output in (then, whole)]
        torch.testing.assert_close(states[0][0], states[1][0])
        assert states[0][1] == states[1][1] == prompt_length + 3
    else:
        for part in ("self_attention_cache", "cross_attention_cache"):  # the source's keys once, as in one go
            caches = [getattr(output.past_key_values, part) for output in (then, whole)]
            length = prompt_length + 3 if part == "self_attention_cache" else src.shape[1]
            assert caches[0].get_seq_length() == caches[1].get_seq_length() == length
            for ours, reference in zip(caches[0].layers, caches[1].layers, strict=True):
                torch.testing.assert_close(ours.keys, reference.keys)
                torch.testing.assert_close(ours.values, reference.values)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("with_head", [True, False])
@torch.no_grad()
def test_the_old_cache_name_continues_alike_and_warns_where_transformers_renamed_it(model_type, with_head):
    """A decoder state passed as `past_key_values` continues as one passed as `cache`; where transformers names it
    `cache` (5.24 on), the old name warns once of its deprecation (a FutureWarning), as transformers' own models do."""
    model = make_model(model_type)
    model = model if with_head else model.model
    src, mask = left_padded_source()
    first = model(input_ids=src, attention_mask=mask, decoder_input_ids=random_ids(4, 3, seed=2), use_cache=True)
    step = dict(input_ids=src, attention_mask=mask, use_cache=True)
    outputs = {}
    for name in ("cache", "past_key_values"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            state = copy.deepcopy(returned_cache(first))
            outputs[name] = model(**step, decoder_input_ids=random_ids(4, 1, seed=3), **{name: state})
        deprecations = [w for w in caught if "`past_key_values` is deprecated" in str(w.message)]
        assert all(w.category is FutureWarning for w in deprecations)
        renamed = name == "past_key_values" and Version(transformers.__version__) >= Version("5.24.0")
        assert len(deprecations) == int(renamed), name
    torch.testing.assert_close(outputs["past_key_values"][0], outputs["cache"][0])  # logits, or the last hidden state
    assert [returned_cache(output).get_seq_length() for output in outputs.values()] == [4, 4]
    after = [
        model(**step, decoder_input_ids=random_ids(4, 1, seed=4), cache=returned_cache(output))[0]
        for output in outputs.values()
    ]
    torch.testing.assert_close(after[0], after[1])  # the same state: the next step alike too


@pytest.mark.parametrize(
    "settings",
    [{}, {"rnn_type": "lstm"}, {"bidirectional_encoder": True, "rnn_type": "lstm"}, {"decoder_type": "cgru"}],
)
def test_the_rnn_state_holds_each_decoder_layer_the_source_keys_and_the_tokens_read(settings):
    """The recurrent state a forward returns: every decoder layer's hidden state (and an LSTM's cells), the top one
    being the last output; the projected keys of each source token; the number of target tokens read."""
    model = make_model("bahdanau", encoder_layers=3, decoder_layers=2, **settings)
    src, mask = left_padded_source()
    out = model.model(input_ids=src, attention_mask=mask, decoder_input_ids=random_ids(4, 5, seed=2), use_cache=True)
    state = returned_cache(out)
    assert state.hidden.shape == (2, 4, 16) and state.get_seq_length() == 5
    assert (state.cell is None) == (settings.get("rnn_type") != "lstm")
    assert state.cell is None or state.cell.shape == (2, 4, 16)
    assert state.projected_keys.shape[:2] == (4, 7)
    torch.testing.assert_close(state.hidden[-1], out.last_hidden_state[:, -1])


@pytest.mark.parametrize("settings", RNN_VARIANTS)
def test_the_rnn_hidden_states_are_its_embeddings_and_its_top_layer_outputs(settings):
    """An RNN of stacked layers returns the outputs of its top layer only: its hidden states are the embeddings and
    those outputs, a bidirectional encoder's both directions side by side (twice as wide)."""
    model = make_model("bahdanau", encoder_layers=3, decoder_layers=2, **settings).model
    src, mask = left_padded_source()
    tgt = random_ids(4, 5, seed=2)
    out = model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt, output_hidden_states=True)
    width = 32 if settings.get("bidirectional_encoder") else 16
    assert [states.shape for states in out.encoder_hidden_states] == [(4, 7, 16), (4, 7, width)]
    assert [states.shape for states in out.decoder_hidden_states] == [(4, 5, 16), (4, 5, 16)]
    torch.testing.assert_close(out.encoder_hidden_states[0], model.encoder.embed_tokens(src))
    torch.testing.assert_close(out.decoder_hidden_states[0], model.decoder.embed_tokens(tgt))
    torch.testing.assert_close(out.encoder_hidden_states[-1], out.encoder_last_hidden_state)
    torch.testing.assert_close(out.decoder_hidden_states[-1], out.last_hidden_state)


def saved_without(model, folder, dropped) -> dict:
    """Save `model` to `folder` with the weights whose names start with one of `dropped` left out; return them."""
    model.save_pretrained(folder)
    weights = load_file(folder / "model.safetensors")
    kept = {name: value for name, value in weights.items() if not name.startswith(dropped)}
    save_file(kept, folder / "model.safetensors", metadata={"format": "pt"})
    return kept


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_a_checkpoint_missing_some_weights_loads_the_rest_initialises_them_and_warns(model_type, tmp_path):
    """transformers' contract (a base model's checkpoint under a new head): what matches is loaded, the rest is
    initialised as a new model's (transformers' load report names them); the command line's strict loader refuses."""
    model = make_model(model_type, seed=1)
    kept = saved_without(model, tmp_path, ("lm_head.",))
    loaded, info = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, output_loading_info=True)
    assert set(info["missing_keys"]) == {"lm_head.weight", "lm_head.bias"} and not info["unexpected_keys"]
    state = loaded.state_dict()
    for name, value in kept.items():
        torch.testing.assert_close(state[name], value, rtol=0, atol=0)
    assert torch.isfinite(loaded.lm_head.weight).all() and not torch.equal(loaded.lm_head.weight, model.lm_head.weight)
    assert torch.count_nonzero(loaded.lm_head.bias) == 0  # initialised as a new model's: zero biases
    with pytest.raises(InputError, match=r"2 missing \(lm_head.bias, lm_head.weight\)"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
@pytest.mark.parametrize("tied", [False, True])
def test_a_checkpoint_with_no_weight_loads_a_newly_initialised_model(model_type, tied, tmp_path):
    """An empty checkpoint shares nothing but claims nothing else either: every weight is initialised (finite,
    on a real device) and reported missing, a tied one with or without the weight it shares (as transformers'
    `test_can_init_all_missing_weights` and `test_model_weights_reload_no_missing_tied_weights` ask)."""
    ties = {"tie_word_embeddings": True, "tie_encoder_decoder_embeddings": True} if tied else {}
    saved_without(make_model(model_type, **ties), tmp_path, ("",))
    loaded, info = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, output_loading_info=True)
    missing, weights = set(info["missing_keys"]), set(loaded.state_dict())
    assert set(dict(loaded.named_parameters())) <= missing <= weights  # each parameter, tied ones once or more
    assert missing == weights or tied
    embeddings = loaded.model.decoder.embed_tokens.weight
    assert (loaded.lm_head.weight is embeddings and loaded.model.encoder.embed_tokens.weight is embeddings) == tied
    for name, value in loaded.state_dict().items():
        assert value.device.type == "cpu" and torch.isfinite(value).all(), name


def test_a_checkpoint_of_another_architecture_is_refused_by_the_strict_loader(tmp_path):
    """Weights of a Transformer under an RNN's config share nothing with the model: transformers loads them with its
    report (every weight missing or unexpected); the command line's strict loader refuses them with an InputError
    naming them, not a model that translates garbage."""
    rnn, transformer = make_model("bahdanau"), make_model("d2l_transformer")
    rnn.config.save_pretrained(tmp_path)
    transformer.save_pretrained(tmp_path / "weights")
    (tmp_path / "weights" / "model.safetensors").rename(tmp_path / "model.safetensors")
    loaded, info = AutoModelForSeq2SeqLM.from_pretrained(tmp_path, output_loading_info=True)
    assert type(loaded) is type(rnn) and info["missing_keys"] and info["unexpected_keys"]
    with pytest.raises(InputError, match=r"do not fit the model its config describes: \d+ missing .*\d+ unexpected"):
        load_checkpoint(tmp_path)


def test_retain_grad_hidden_states_attentions():
    """Attention weights returned in training are the tensors the outputs are made of: their gradients exist."""
    model = make_model("d2l_transformer", output_attentions=True, output_hidden_states=True).train()
    src, mask = left_padded_source()
    out = model(input_ids=src, attention_mask=mask, decoder_input_ids=random_ids(4, 5, seed=2))
    kept = {
        name: getattr(out, name)[0]
        for name in ("encoder_hidden_states", "decoder_hidden_states", "encoder_attentions", "decoder_attentions")
        + ("cross_attentions",)
    }
    for tensor in kept.values():
        tensor.retain_grad()
    out.logits.flatten()[0].backward()
    assert {name: tensor.grad is not None for name, tensor in kept.items()} == dict.fromkeys(kept, True)


def test_gradient_checkpointing_gives_the_same_gradients():
    model = make_model("d2l_transformer", encoder_layers=2, decoder_layers=2).train()  # dropout 0
    assert model.supports_gradient_checkpointing
    src, mask = left_padded_source()
    labels = random_ids(4, 6, seed=3)

    def gradients() -> dict[str, torch.Tensor]:
        model.zero_grad()
        model(input_ids=src, attention_mask=mask, labels=labels).loss.backward()
        return {name: param.grad.clone() for name, param in model.named_parameters() if param.grad is not None}

    plain = gradients()
    calls = []
    model.model.decoder.layers[0].ffn.dense1.register_forward_hook(lambda *args: calls.append(1))
    model.activation_checkpointing_enable()  # transformers 5.24's name for gradient_checkpointing_enable
    assert model.is_activation_checkpointing
    checkpointed = gradients()
    assert len(calls) == 2  # the layer ran again in the backward pass
    assert checkpointed.keys() == plain.keys() and len(plain) > 10
    for name, grad in plain.items():
        torch.testing.assert_close(checkpointed[name], grad, msg=name)
    model.eval()
    with torch.no_grad():  # decoding with checkpointing on keeps its cache
        generated = model.generate(src, attention_mask=mask, max_new_tokens=4, num_beams=2, decoder_start_token_id=1)
    assert generated.shape[0] == 4


def test_the_rnn_does_not_claim_gradient_checkpointing():
    model = make_model("bahdanau")
    assert not model.supports_gradient_checkpointing
    with pytest.raises(ValueError, match="does not support activation checkpointing"):
        model.activation_checkpointing_enable()


def test_attention_functions_registered_with_transformers_run_in_the_transformer(monkeypatch):
    """`attn_implementation` takes "eager", "sdpa" and any function of transformers' `AttentionInterface`: the same
    logits and beam-search tokens, the registered function called for every attention."""
    calls = []

    def counting_sdpa(module, query, key, value, attention_mask, **kwargs):
        calls.append(tuple(query.shape))
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setitem(AttentionInterface._global_mapping, "counting_sdpa", counting_sdpa)
    src, mask = left_padded_source()
    tgt = random_ids(4, 5, seed=2)
    results = {}
    for name in ("eager", "sdpa", "counting_sdpa"):
        model = make_model("d2l_transformer", attn_implementation=name)
        assert model.config._attn_implementation == name
        with torch.no_grad():
            logits = model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
            tokens = model.generate(src, attention_mask=mask, max_new_tokens=5, num_beams=3, decoder_start_token_id=1)
        results[name] = logits, tokens
    assert len(calls) == (2 + 2 * 2) + (2 + 5 * 2 * 2)  # encoder layers + decoder layers x (self, cross), steps
    for name in ("sdpa", "counting_sdpa"):
        torch.testing.assert_close(results[name][0], results["eager"][0], atol=1e-5, rtol=1e-5)
        assert torch.equal(results[name][1], results["eager"][1])
    with pytest.raises(ValueError, match="not supported"):
        make_model("d2l_transformer", attn_implementation="no_such_attention")


@pytest.mark.slow
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_a_training_forward_and_a_decoding_step_compile_into_one_graph(model_type):
    """`torch.compile(model, fullgraph=True)` (which fails on any graph break) traces a training forward with labels
    and one cached decoding step (that one through AOTAutograd too, `aot_eager`), with eager's results. Dynamo traces
    recurrent layers with `allow_rnn`, set for the test through torch's own `config.patch`, which puts it back as it
    was; an RNN batch without padding (a padded one is packed, which reads its lengths)."""
    allow_rnn = torch._dynamo.config.allow_rnn
    torch._dynamo.reset()
    model = make_model(model_type).train()
    src, labels = random_ids(2, 6), random_ids(2, 5, seed=1)
    mask = None
    if model_type == "d2l_transformer":
        mask = torch.ones(2, 6, dtype=torch.long)
        mask[1, :2] = 0  # left padding: positions and masks without reading values
    with torch._dynamo.config.patch(allow_rnn=True):
        compiled = torch.compile(model, fullgraph=True, backend="eager")
        loss = compiled(input_ids=src, attention_mask=mask, labels=labels).loss
        torch.testing.assert_close(loss, model(input_ids=src, attention_mask=mask, labels=labels).loss)
        loss.backward()
        model.eval()
        with torch.no_grad():
            encoded = model.get_encoder()(src, mask)
            start = torch.ones(2, 1, dtype=torch.long)
            first = model(encoder_outputs=encoded, attention_mask=mask, decoder_input_ids=start, use_cache=True)
            step = dict(encoder_outputs=encoded, attention_mask=mask, decoder_input_ids=first.logits[:, -1:].argmax(-1))
            state = returned_cache(first)
            ours = torch.compile(model, fullgraph=True, backend="aot_eager")(cache=copy.deepcopy(state), **step)
            eager = model(cache=copy.deepcopy(state), **step)
    torch.testing.assert_close(ours.logits, eager.logits)
    assert returned_cache(ours).get_seq_length() == 2
    assert torch._dynamo.config.allow_rnn == allow_rnn  # the next test's Dynamo as this one found it
