"""BahdanauForConditionalGeneration: d2l equivalence, padding, decoding, generation, saving and remote code."""

import helpers
import pytest
import torch
from helpers import VOCAB, greedy_config, random_ids

from hf_bahdanau import BahdanauConfig, BahdanauForConditionalGeneration


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
    ],
)
def test_invalid_config_combinations_raise(settings, message):
    with pytest.raises(ValueError, match=message):
        BahdanauConfig(**settings)


# ---- forward ------------------------------------------------------------------------------------------------


def test_decoder_calls_its_rnn_and_embedding_when_they_are_hooked():
    """Hooks on the decoder's RNN or embedding (a user's, pruning, offloading) run: the decoder calls its modules,
    in training and when decoding."""
    model = make_model().eval()
    src, tgt = random_ids(4, 6), random_ids(4, 5, seed=3)
    plain = model(input_ids=src, decoder_input_ids=tgt).logits.detach()
    model.model.decoder.embed_tokens.register_forward_hook(lambda module, args, output: output * 2)
    doubled = model(input_ids=src, decoder_input_ids=tgt).logits.detach()
    assert not torch.allclose(doubled, plain)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(model(input_ids=src, decoder_input_ids=tgt).logits, doubled)
    calls = []
    model.model.decoder.rnn.register_forward_hook(lambda module, args, output: calls.append(args[0].shape))
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=src, decoder_input_ids=tgt).logits, doubled)
    assert calls == [(4, 1, 16 + 12)] * 5  # a step each, on [context; embedding]
    model = make_model().train()
    backward_calls = []
    model.model.decoder.rnn.register_full_backward_hook(lambda module, grad_in, grad_out: backward_calls.append(1))
    model(input_ids=src, labels=tgt).loss.backward()
    assert len(backward_calls) == 5


# ---- scheduled sampling -------------------------------------------------------------------------------------


def test_assisted_generation_is_refused_for_the_recurrent_state():
    model, assistant = make_model(), make_model(seed=1)
    with pytest.raises(ValueError, match="assisted generation is not supported with stateful models"):
        model.generate(random_ids(1, 5), assistant_model=assistant, generation_config=greedy_config(max_new_tokens=4))
