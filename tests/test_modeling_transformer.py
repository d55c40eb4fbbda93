"""TransformerForConditionalGeneration: d2l equivalence, configuration, attention implementations, positions."""

import helpers
import pytest
import torch
from helpers import VOCAB, greedy_config, random_ids
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from hf_bahdanau import TransformerConfig, TransformerForConditionalGeneration


def make_model(seed: int = 0, **overrides) -> TransformerForConditionalGeneration:
    return helpers.make_model("d2l_transformer", seed, **overrides)


# ---- d2l equivalence (the book's code is in scripts/d2l_reference.py, the `d2l` fixture) ------------------


def test_default_model_is_the_d2l_transformer(d2l):
    model = make_model(d_model=16, ffn_dim=24, attention_heads=4, max_position_embeddings=1000)
    net = d2l.d2l_transformer(VOCAB, 16, 24, 4, 2, 0.0)
    d2l.copy_transformer_weights(model, net)
    src, tgt = random_ids(3, 7), random_ids(3, 5, seed=1)
    lengths = torch.tensor([7, 4, 2])
    mask = torch.arange(7)[None] < lengths[:, None]
    with torch.no_grad():  # d2l masks its decoder's future only in training mode (dropout is 0 here)
        expected = net.train()(src, tgt, lengths)
        torch.testing.assert_close(
            model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits, expected, atol=1e-5, rtol=1e-5
        )
    # d2l's `predict_seq2seq` feeds one token at a time, and its decoder then adds the encoding of position 0 to
    # every step (a known quirk of the book's code): the reference greedy decoder re-reads the whole prefix instead.
    generated = model.generate(src, attention_mask=mask, generation_config=greedy_config(max_new_tokens=6))
    tokens = torch.ones(3, 1, dtype=torch.long)
    with torch.no_grad():
        for _ in range(6):
            tokens = torch.cat([tokens, net(src, tokens, lengths)[:, -1:].argmax(-1)], dim=1)
    for row in range(3):
        ours = generated[row, 1:].tolist()
        ours = ours[: ours.index(2)] if 2 in ours else ours
        assert tokens[row, 1 : len(ours) + 1].tolist() == ours


# ---- configuration ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(d_model=30, attention_heads=4), r"d_model \(30\) must be divisible by attention_heads \(4\)"),
        (dict(activation_function="tanhh"), "activation_function"),
        (dict(attention_dropout=1.0), "attention_dropout"),
        (dict(ffn_dim=0), "ffn_dim must be positive"),
        (dict(tie_encoder_decoder_embeddings=True), "tie_word_embeddings"),
        (dict(vocab_size=2), "eos_token_id=2 is outside"),
        (dict(init_std=0.0), "init_std"),
    ],
)
def test_invalid_config_combinations_raise(settings, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig(**settings)


def test_attention_dropout_defaults_to_dropout_and_fields_have_transformers_names():
    config = TransformerConfig(dropout=0.3, d_model=64, attention_heads=8, decoder_layers=3)
    assert config.attention_dropout == 0.3
    assert (config.hidden_size, config.num_attention_heads, config.num_hidden_layers) == (64, 8, 3)


# ---- attention implementations ----------------------------------------------------------------------------


def test_eager_and_sdpa_give_the_same_logits_and_weights_whatever_the_implementation(tmp_path):
    model = make_model()
    assert model.config._attn_implementation == "sdpa"  # transformers picks sdpa for a class that supports it
    src, tgt = random_ids(2, 6), random_ids(2, 4)
    mask = torch.tensor([[1] * 6, [0] * 2 + [1] * 4])
    sdpa = model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt, output_attentions=True)
    model.save_pretrained(tmp_path)
    eager_model = TransformerForConditionalGeneration.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert eager_model.config._attn_implementation == "eager"
    eager = eager_model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt, output_attentions=True)
    torch.testing.assert_close(eager.logits, sdpa.logits, atol=1e-5, rtol=1e-5)
    for name in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        for ours, theirs in zip(getattr(sdpa, name), getattr(eager, name), strict=True):
            assert ours.shape[1] == model.config.attention_heads
            torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("padded", [False, True])
def test_fused_attention_without_masks_trains_and_translates_as_eager(tmp_path, padded):
    model = make_model(decoder_layers=3).train()  # no dropout: train mode is deterministic
    src, labels = random_ids(3, 6), random_ids(3, 5, seed=2)
    mask = torch.tensor([[1] * 6, [0] * 2 + [1] * 4, [1] * 5 + [0]]) if padded else None
    model.save_pretrained(tmp_path)
    eager = TransformerForConditionalGeneration.from_pretrained(tmp_path, attn_implementation="eager").train()
    fused_loss, eager_loss = (m(input_ids=src, attention_mask=mask, labels=labels).loss for m in (model, eager))
    torch.testing.assert_close(fused_loss, eager_loss, atol=1e-5, rtol=1e-5)
    fused_loss.backward()
    eager_loss.backward()
    grads = [(p.grad, q.grad) for p, q in zip(model.parameters(), eager.parameters(), strict=True)]
    for fused_grad, eager_grad in grads:
        torch.testing.assert_close(fused_grad, eager_grad, atol=1e-4, rtol=1e-4)
    for beams in (1, 3):
        config = greedy_config(max_new_tokens=7, num_beams=beams)
        tokens = [m.eval().generate(src, attention_mask=mask, generation_config=config) for m in (model, eager)]
        torch.testing.assert_close(*tokens)


def test_the_cache_projects_cross_attention_once_and_grows_self_attention():
    model = make_model(decoder_layers=3)
    src = random_ids(2, 5)
    config = greedy_config(max_new_tokens=4, min_new_tokens=4)
    out = model.generate(src, generation_config=config, return_dict_in_generate=True)
    cache = out.cache
    assert cache.get_seq_length() == 4  # the start token and three generated tokens were fed
    for layer in range(3):
        assert cache.cross_attention_cache.get_seq_length(layer) == 5  # the source, projected once
        assert cache.self_attention_cache.get_seq_length(layer) == 4
    configless = EncoderDecoderCache(DynamicCache(), DynamicCache())  # layers made as they are first updated
    again = model.generate(src, generation_config=config, cache=configless)
    torch.testing.assert_close(again, out.sequences)


# ---- positions ----------------------------------------------------------------------------------------------


def test_a_source_longer_than_the_position_table_is_a_clear_error():
    model = make_model(max_position_embeddings=8)
    with pytest.raises(ValueError, match="source reaches 9 tokens but the model's max_position_embeddings is 8"):
        model(input_ids=random_ids(1, 9), decoder_input_ids=torch.ones(1, 1, dtype=torch.long))
    padded = torch.cat([torch.zeros(1, 2, dtype=torch.long), random_ids(1, 6)], dim=1)  # 6 real tokens, padded to 8
    mask = (padded != 0).long()
    assert model(
        input_ids=padded, attention_mask=mask, decoder_input_ids=torch.ones(1, 1, dtype=torch.long)
    ).logits.shape
    padded = torch.cat([torch.zeros(1, 2, dtype=torch.long), random_ids(1, 7)], dim=1)  # a shape check: padding counts
    with pytest.raises(ValueError, match="source reaches 9 tokens"):
        model(input_ids=padded, attention_mask=(padded != 0).long(), decoder_input_ids=torch.ones(1, 1).long())
    with pytest.raises(ValueError, match="target reaches 9 tokens"):
        model(input_ids=random_ids(1, 3), decoder_input_ids=random_ids(1, 9))


def test_pre_norm_adds_a_final_norm_and_changes_the_output():
    post, pre = make_model(), make_model(norm_first=True)
    assert isinstance(pre.model.encoder.final_norm, torch.nn.LayerNorm) and isinstance(
        post.model.encoder.final_norm, torch.nn.Identity
    )
    src, tgt = random_ids(2, 5), random_ids(2, 3)
    assert not torch.allclose(
        pre(input_ids=src, decoder_input_ids=tgt).logits, post(input_ids=src, decoder_input_ids=tgt).logits
    )
