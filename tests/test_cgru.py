"""The conditional GRU decoder (`decoder_type="cgru"`, Nematus / LIUM) beside d2l's decoder."""

import pytest
import torch
from helpers import VOCAB, greedy_config, make_model, random_ids

from hf_bahdanau import BahdanauConfig
from hf_bahdanau.cli.train import parse_train_args
from hf_bahdanau.models.bahdanau_decoder import BahdanauDecoder, ConditionalGRUDecoder

SETTINGS = {
    "one layer": dict(decoder_layers=1, encoder_layers=1),
    "two layers, bidirectional encoder, general attention": dict(bidirectional_encoder=True, attention_type="general"),
}


def source_batch():
    input_ids = random_ids(3, 7, seed=1)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 5:] = 0  # right padding
    attention_mask[2, :2] = 0  # left padding
    return input_ids, attention_mask


@pytest.mark.parametrize("settings", list(SETTINGS.values()), ids=list(SETTINGS))
def test_teacher_forced_logits_equal_step_by_step_decoding(settings):
    model = make_model("bahdanau", decoder_type="cgru", **settings)
    assert isinstance(model.model.decoder, ConditionalGRUDecoder)
    input_ids, attention_mask = source_batch()
    decoder_input_ids = torch.cat([torch.ones(3, 1, dtype=torch.long), random_ids(3, 5, seed=2)], dim=1)
    with torch.no_grad():
        forced = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
        encoder_outputs, cache, steps = model.get_encoder()(input_ids, attention_mask), None, []
        for step in range(decoder_input_ids.shape[1]):
            out = model(encoder_outputs=encoder_outputs, attention_mask=attention_mask, cache=cache,
                        decoder_input_ids=decoder_input_ids[:, step : step + 1], use_cache=True)  # fmt: skip
            steps.append(out.logits)
            cache = out.cache
    assert forced.shape == (3, 6, VOCAB)
    torch.testing.assert_close(torch.cat(steps, dim=1), forced, rtol=1e-5, atol=1e-6)


def test_one_step_is_the_conditional_gru():
    """By hand: s' = GRU1(embedding, s); c = attention(s', source); s = GRU2(c, s'); logits = head(s)."""
    model = make_model("bahdanau", decoder_type="cgru", decoder_layers=1, encoder_layers=1)
    decoder = model.model.decoder
    input_ids = random_ids(1, 5, seed=3)
    with torch.no_grad():
        encoded = model.get_encoder()(input_ids)
        start = torch.ones(1, 1, dtype=torch.long)
        logits = model(input_ids=input_ids, decoder_input_ids=start).logits[0, 0]
        gru1, gru2 = decoder.rnn, decoder.rnn2
        s = encoded.decoder_initial_hidden.transpose(0, 1)  # (1, 1, hidden)
        _, first = gru1(decoder.embed_tokens(start), s)
        source = encoded.last_hidden_state
        context, _ = decoder.attention(first[-1].unsqueeze(1), source, source, None, return_weights=True)
        output, _ = gru2(context, first)
        assert torch.allclose(logits, model.lm_head(output)[0, 0], atol=1e-6)


def test_generate_greedy_and_beam_and_save_load(tmp_path):
    model = make_model("bahdanau", decoder_type="cgru")
    input_ids, attention_mask = source_batch()
    config = greedy_config(max_new_tokens=6, eos_token_id=None)
    with torch.no_grad():
        greedy = model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config)
        tokens = torch.ones(3, 1, dtype=torch.long)
        for _ in range(6):  # the same by hand: argmax of the teacher-forced logits of the tokens so far
            logits = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=tokens).logits
            tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        assert torch.equal(greedy, tokens)
        beams = model.generate(input_ids=input_ids, attention_mask=attention_mask,
                               generation_config=greedy_config(max_new_tokens=6, num_beams=3))  # fmt: skip
        assert beams.shape[0] == 3
    model.save_pretrained(tmp_path)
    loaded = type(model).from_pretrained(tmp_path).eval()
    assert loaded.config.decoder_type == "cgru" and isinstance(loaded.model.decoder, ConditionalGRUDecoder)
    with torch.no_grad():
        again = loaded.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config)
    assert torch.equal(again, greedy)


def test_d2l_stays_the_default_and_cgru_is_a_gru_decoder_and_a_train_option():
    assert BahdanauConfig().decoder_type == "d2l"
    assert type(make_model("bahdanau").model.decoder) is BahdanauDecoder
    with pytest.raises(ValueError, match="decoder_type='cgru' is a GRU decoder: it needs rnn_type='gru'"):
        BahdanauConfig(decoder_type="cgru", rnn_type="lstm")
    with pytest.raises(ValueError, match="decoder_type must be one of"):
        BahdanauConfig(decoder_type="nematus")
    model_args = parse_train_args(["--output_dir=x", "--data", "multi30k", "--decoder_type", "cgru"])[0]
    assert model_args.decoder_type == "cgru" and model_args.config_overrides()["decoder_type"] == "cgru"
