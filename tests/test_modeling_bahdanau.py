"""BahdanauForConditionalGeneration: d2l equivalence, padding, decoding, generation, saving and remote code."""

import helpers
import pytest
import torch
from helpers import VOCAB, greedy_config, random_ids

from hf_bahdanau import AdditiveAttention, BahdanauConfig, BahdanauForConditionalGeneration
from hf_bahdanau.modeling_bahdanau import BahdanauEncoderOutput, TokenGateTable


def make_model(seed: int = 0, **overrides) -> BahdanauForConditionalGeneration:
    return helpers.make_model("bahdanau", seed, **{"embedding_size": 12, **overrides})


# ---- d2l equivalence (the book's code is in scripts/d2l_reference.py, the `d2l` fixture) ------------------


def test_default_model_is_the_d2l_model(d2l):
    model = make_model(embedding_size=10, hidden_size=14)
    net = d2l.d2l_model(VOCAB, 10, 14, 2, 0.0).eval()
    d2l.copy_weights(model, net)
    src, tgt = random_ids(3, 7), random_ids(3, 5, seed=1)
    with torch.no_grad():
        torch.testing.assert_close(
            net(src, tgt, torch.tensor([7, 7, 7])), model(input_ids=src, decoder_input_ids=tgt).logits
        )
    generated = model.generate(src, generation_config=greedy_config(max_new_tokens=6)).tolist()
    for row in range(3):
        tokens = generated[row][1:]  # without the start token, up to </s>
        tokens = tokens[: tokens.index(2)] if 2 in tokens else tokens
        assert d2l.predict_seq2seq(net, src[row], 6, stop_at_eos=True) == tokens
        assert d2l.predict_seq2seq_batched(net, src, 6)[row, : len(tokens)].tolist() == tokens


def test_sigmoid_score_translates_to_the_same_tokens_as_d2ls_tanh(monkeypatch):
    model = helpers.make_model("bahdanau", 1, width=64, vocab_size=500)
    src = random_ids(8, 9, vocab=500)
    configs = [greedy_config(max_new_tokens=12, eos_token_id=None), greedy_config(max_new_tokens=12, num_beams=4)]
    ours = [model.generate(src, generation_config=config) for config in configs]
    teacher_forced = model(input_ids=src, decoder_input_ids=ours[0][:, :-1]).logits

    def tanh_score(self: AdditiveAttention, queries: torch.Tensor, projected_keys: torch.Tensor) -> torch.Tensor:
        features = torch.tanh(self.W_q(queries).unsqueeze(2) + projected_keys.unsqueeze(1))
        return self.w_v(features).squeeze(-1)  # d2l's formula

    monkeypatch.setattr(AdditiveAttention, "score", tanh_score)
    for config, tokens in zip(configs, ours, strict=True):
        torch.testing.assert_close(model.generate(src, generation_config=config), tokens)
    reference = model(input_ids=src, decoder_input_ids=ours[0][:, :-1]).logits
    torch.testing.assert_close(teacher_forced, reference, atol=1e-5, rtol=1e-5)


# ---- configuration ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(rnn_type="rnn"), "rnn_type"),
        (dict(attention_type="cosine"), "attention_type"),
        (dict(attention_type="dot", bidirectional_encoder=True), "dot"),
        (dict(tie_word_embeddings=True, embedding_size=8, hidden_size=16), "embedding_size"),
        (dict(tie_encoder_decoder_embeddings=True), "tie_word_embeddings"),
        (dict(vocab_size=2), "eos_token_id=2 is outside"),
        (dict(dropout=1.5), "dropout"),
        (dict(unlikelihood=-0.5), "unlikelihood must be 0 or more"),
    ],
)
def test_invalid_config_combinations_raise(settings, message):
    with pytest.raises(ValueError, match=message):
        BahdanauConfig(**settings)


# ---- forward ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rnn_type, layers", [("gru", 2), ("lstm", 3)])
def test_decoder_cells_are_the_rnn_module(monkeypatch, rnn_type, layers):
    """The decoder's per-layer cells, with the embeddings' share of the gates computed apart, give the outputs,
    state and gradients of `self.rnn` run as a module on `[context; embedding]` (its path for int8 layers)."""
    model = make_model(rnn_type=rnn_type, decoder_layers=layers, encoder_layers=layers).train()  # dropout 0
    src, tgt = random_ids(3, 6), random_ids(3, 5, seed=2)
    mask = torch.tensor([[1] * 6, [0] * 2 + [1] * 4, [1] * 3 + [0] * 3])

    def run() -> tuple[torch.Tensor, ...]:
        model.zero_grad()
        out = model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt, use_cache=True)
        out.logits.log_softmax(-1)[..., 3].sum().backward()
        grads = [param.grad for param in model.decoder.rnn.parameters()] + [model.decoder.embed_tokens.weight.grad]
        state = out.cache.rnn_state if rnn_type == "lstm" else (out.cache.hidden,)
        return out.logits, *state, *grads

    cells = run()
    monkeypatch.setattr(type(model.decoder), "_runs_cells", lambda *args: False)
    module = run()
    assert all(g is not None and g.abs().sum() > 0 for g in module[-5:])
    for ours, reference in zip(cells, module, strict=True):
        torch.testing.assert_close(ours, reference, atol=1e-5, rtol=1e-5)


def test_decoding_looks_token_gates_up_once_they_pay_and_again_after_the_weights_change():
    """In eval mode without gradients the embeddings' share of the gates comes from a `(vocab, gates)` table,
    made once the decoder has read `vocab` rows and made again when the weights change in place or move."""
    model = make_model().eval()
    src, tgt = random_ids(4, 6), random_ids(4, 5, seed=3)  # 20 target rows a call, vocabulary 40

    def table() -> TokenGateTable:
        return model.decoder.token_gate_table  # a new one after each call with gradients

    def logits(grad: bool) -> torch.Tensor:
        with torch.set_grad_enabled(grad):
            return model(input_ids=src, decoder_input_ids=tgt).logits.detach()

    products = logits(grad=True)  # the products' path, which does not count
    assert table().rows_read == 0
    with torch.inference_mode():
        torch.testing.assert_close(logits(grad=False), products)
        torch.testing.assert_close(logits(grad=False), products)
    assert table().table is None and table().rows_read == 2 * 20
    torch.testing.assert_close(logits(grad=False), products, atol=1e-6, rtol=1e-5)  # made from 40 rows on
    assert table().table is not None and table().table.shape == (VOCAB, 3 * 16)
    with torch.no_grad():
        model.decoder.embed_tokens.weight[5:9].mul_(2.0)
    after = logits(grad=False)  # the version counter moved: the old table is dropped, products again
    assert table().table is None and table().rows_read == 20
    changed = logits(grad=True)
    assert not torch.allclose(changed, products)
    torch.testing.assert_close(after, changed)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):  # made under autocast, used without
        model.decoder.embed_tokens.weight[5:9].mul_(0.5)
        for _ in range(3):
            model(input_ids=src, decoder_input_ids=tgt)
    assert table().table.dtype == torch.float32
    torch.testing.assert_close(logits(grad=False), products, atol=1e-6, rtol=1e-5)
    model.load_state_dict(make_model(seed=5).state_dict())
    model.double()
    double = logits(grad=True)
    for _ in range(3):
        torch.testing.assert_close(logits(grad=False), double)
    assert table().table.dtype == torch.float64
    model.decoder.embed_tokens.weight.data[5:9].mul_(2.0)  # unseen by the version counter...
    model.eval()  # ...until the mode is set, which forgets the table
    after = logits(grad=False)
    torch.testing.assert_close(after, logits(grad=True))


@pytest.mark.parametrize("train_mode", [True, False], ids=["train-mode", "eval-mode"])
def test_token_gates_never_outlive_a_fused_optimizer_step(train_mode):
    """torch's fused AdamW writes the weights without moving their version counter: a table made before a
    training step is not used after it, whether the step runs in training mode (the Trainer) or in eval mode (a
    plain loop on a model as `from_pretrained` returns it)."""
    model = make_model().eval()
    src, tgt = random_ids(4, 6), random_ids(4, 5, seed=3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
    for _ in range(2):
        with torch.no_grad():
            for _ in range(3):
                model(input_ids=src, decoder_input_ids=tgt)
        assert model.decoder.token_gate_table.table is not None
        if train_mode:  # else no mode call at all (`eval()` alone forgets the table)
            model.train()
        model(input_ids=src, labels=tgt).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if train_mode:
            model.eval()
        expected = model(input_ids=src, decoder_input_ids=tgt).logits.detach()  # products, with gradients
        with torch.no_grad():
            for _ in range(3):  # the last from a table made after the step
                torch.testing.assert_close(model(input_ids=src, decoder_input_ids=tgt).logits, expected)
        assert model.decoder.token_gate_table.table is not None


def test_decoder_calls_its_rnn_and_embedding_when_they_are_hooked():
    """Hooks on the decoder's RNN or embedding (a user's, pruning, offloading) run: the decoder calls such modules
    rather than reading their weights, in training and when decoding."""
    model = make_model().eval()
    src, tgt = random_ids(4, 6), random_ids(4, 5, seed=3)
    plain = model(input_ids=src, decoder_input_ids=tgt).logits.detach()
    model.decoder.embed_tokens.register_forward_hook(lambda module, args, output: output * 2)
    doubled = model(input_ids=src, decoder_input_ids=tgt).logits.detach()
    assert not torch.allclose(doubled, plain)
    with torch.no_grad():
        for _ in range(3):  # past the rows that would make a table
            torch.testing.assert_close(model(input_ids=src, decoder_input_ids=tgt).logits, doubled)
    calls = []
    model.decoder.rnn.register_forward_hook(lambda module, args, output: calls.append(args[0].shape))
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=src, decoder_input_ids=tgt).logits, doubled)
    assert calls == [(4, 1, 16 + 12)] * 5  # a step each, on [context; embedding]
    model = make_model().train()
    backward_calls = []
    model.decoder.rnn.register_full_backward_hook(lambda module, grad_in, grad_out: backward_calls.append(1))
    model(input_ids=src, labels=tgt).loss.backward()
    assert len(backward_calls) == 5


# ---- scheduled sampling -------------------------------------------------------------------------------------


def test_scheduled_sampling_feeds_own_predictions_in_training_only():
    src, tgt = random_ids(3, 6), random_ids(3, 5, seed=4)
    always_own = make_model(teacher_forcing_ratio=0.0).train()  # dropout is 0: train mode is deterministic
    own_logits = always_own(input_ids=src, decoder_input_ids=tgt).logits
    # the reference: teacher forcing on the start token followed by the model's own greedy choices
    fed = tgt[:, :1]
    for _ in range(tgt.shape[1] - 1):
        fed = torch.cat([fed, always_own(input_ids=src, decoder_input_ids=fed).logits[:, -1:].argmax(-1)], dim=1)
    torch.testing.assert_close(own_logits, always_own(input_ids=src, decoder_input_ids=fed).logits)
    assert not torch.equal(fed[:, 1:], tgt[:, 1:])
    always_gold = make_model(teacher_forcing_ratio=1.0).train()
    torch.testing.assert_close(
        always_gold(input_ids=src, decoder_input_ids=tgt).logits,
        always_own.eval()(input_ids=src, decoder_input_ids=tgt).logits,
    )  # eval mode always teacher-forces, whatever the ratio
    mixed = make_model(teacher_forcing_ratio=0.5).train()
    loss = mixed(input_ids=src, labels=tgt).loss
    loss.backward()
    assert mixed.encoder.embed_tokens.weight.grad.abs().sum() > 0


def test_assisted_generation_is_refused_for_the_recurrent_state():
    model, assistant = make_model(), make_model(seed=1)
    with pytest.raises(ValueError, match="assisted generation is not supported with stateful models"):
        model.generate(random_ids(1, 5), assistant_model=assistant, generation_config=greedy_config(max_new_tokens=4))


def test_a_state_made_for_repeated_sources_keeps_one_copy_and_reads_its_repeats():
    """`source_repeats` shapes the state when it is made; later steps read the repeats from it, and the state
    refuses rows that do not fit it or a reorder that moves a row to another sentence."""
    model = make_model(rnn_type="lstm")
    src, mask = random_ids(2, 5), torch.tensor([[1] * 5, [0] * 2 + [1] * 3])
    encoded = model.get_encoder()(src, mask)
    repeated = BahdanauEncoderOutput(**{name: value.repeat_interleave(3, 0) for name, value in encoded.items()})
    repeated_mask, tgt = mask.repeat_interleave(3, 0), random_ids(6, 4, seed=1)
    inputs = dict(encoder_outputs=repeated, attention_mask=repeated_mask)
    expected = model(**inputs, decoder_input_ids=tgt).logits  # one copy of the source per row
    first = model(**inputs, decoder_input_ids=tgt[:, :1], source_repeats=3)
    state = first.cache
    assert state.projected_keys.shape[0] == 2
    rest = model(**inputs, decoder_input_ids=tgt[:, 1:], cache=state)
    torch.testing.assert_close(torch.cat([first.logits, rest.logits], 1), expected, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="5 decoder rows do not fit a state made for 2 sources"):
        model(**inputs, decoder_input_ids=tgt[:5, :1], cache=rest.cache)
    with pytest.raises(ValueError, match="cannot move rows between sentences"):
        rest.cache.reorder_cache(torch.arange(6).roll(3))
    keys = rest.cache.projected_keys
    rest.cache.reorder_cache(torch.tensor([2, 2, 0, 5, 3, 4]))  # within sentences: allowed
    assert rest.cache.projected_keys is keys  # one copy per sentence, left as it is
    torch.testing.assert_close(rest.cache.hidden[:, 0], rest.cache.hidden[:, 1])  # row 2 twice
