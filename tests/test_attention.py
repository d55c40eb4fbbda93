"""Attention building blocks against d2l's code (copied below as the reference) and the chapters' printed values."""

import math

import pytest
import torch

from hf_bahdanau.models.attention import (
    AdditiveAttention,
    BilinearAttention,
    DotProductAttention,
    MultiHeadAttention,
    PositionalEncoding,
    masked_softmax,
)

# ---- d2l reference helpers (the book's code is in scripts/d2l_reference.py, the `d2l` fixture) --------------


def d2l_multihead(d2l, mha, queries, keys, values, valid_lens):
    """d2l's `MultiHeadAttention.forward` with the projections of our `mha`."""
    h = mha.num_heads
    q, k, v = (d2l.transpose_qkv(W(x), h) for W, x in ((mha.W_q, queries), (mha.W_k, keys), (mha.W_v, values)))
    valid_lens = torch.repeat_interleave(valid_lens, repeats=h, dim=0)
    scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    out = torch.bmm(d2l.masked_softmax(scores, valid_lens), v)
    return mha.W_o(d2l.transpose_output(out, h))


# ---- masked_softmax ---------------------------------------------------------------------------------------


def test_masked_softmax_1d_lengths_match_d2l_and_zero_past_length(d2l):
    X = torch.rand(2, 2, 4)
    out = masked_softmax(X, torch.tensor([2, 3]))
    torch.testing.assert_close(out, d2l.masked_softmax(X.clone(), torch.tensor([2, 3])))
    torch.testing.assert_close(out.sum(-1), torch.ones(2, 2))
    assert torch.all(out[0, :, 2:] == 0) and torch.all(out[1, :, 3:] == 0)
    assert torch.all(out[0, :, :2] > 0)


def test_masked_softmax_2d_lengths_per_query(d2l):
    X = torch.rand(2, 2, 4)
    lens = torch.tensor([[1, 3], [2, 4]])
    out = masked_softmax(X, lens)
    torch.testing.assert_close(out, d2l.masked_softmax(X.clone(), lens))
    assert out[0, 0, 0] == 1 and torch.all(out[0, 0, 1:] == 0)
    assert torch.all(out[1, 1] > 0)


def test_masked_softmax_boolean_mask_equals_lengths():
    X = torch.randn(3, 5, 6)
    lens = torch.tensor([6, 2, 4])
    mask = torch.arange(6)[None, :] < lens[:, None]  # (batch, keys)
    torch.testing.assert_close(masked_softmax(X, mask), masked_softmax(X, lens))
    torch.testing.assert_close(masked_softmax(X, mask[:, None].expand(3, 5, 6)), masked_softmax(X, lens))


def test_masked_softmax_no_mask_is_softmax():
    X = torch.randn(2, 3, 4)
    torch.testing.assert_close(masked_softmax(X), torch.softmax(X, -1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_masked_softmax_empty_row_is_zero_not_nan(dtype):
    X = (torch.randn(2, 3, 5) * 10).to(dtype)
    out = masked_softmax(X, torch.tensor([0, 3]))
    assert out.dtype == dtype
    assert not torch.isnan(out).any()
    assert torch.all(out[0] == 0)
    torch.testing.assert_close(out[1].float().sum(-1), torch.ones(3), atol=1e-2, rtol=0)
    assert torch.all(out[1, :, 3:] == 0)


def test_masked_softmax_gradients_skip_masked_positions():
    X = torch.randn(2, 2, 4, requires_grad=True)
    out = masked_softmax(X, torch.tensor([2, 3]))
    (out * torch.randn_like(out)).sum().backward()
    assert torch.all(X.grad[0, :, 2:] == 0) and torch.all(X.grad[1, :, 3:] == 0)
    assert X.grad[0, :, :2].abs().sum() > 0


def test_masked_softmax_rejects_wrong_batch_size():
    with pytest.raises(ValueError, match=r"batch size 3.*batch size 2"):
        masked_softmax(torch.rand(2, 2, 4), torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        masked_softmax(torch.rand(2, 2, 4), torch.tensor([[1, 2, 3], [1, 2, 3]]))


# ---- scoring functions ------------------------------------------------------------------------------------


def chapter_inputs():
    keys = torch.ones(2, 10, 2)
    values = torch.arange(40, dtype=torch.float32).reshape(1, 10, 4).repeat(2, 1, 1)
    return keys, values, torch.tensor([2, 6])


def test_dot_product_attention_reproduces_chapter():
    keys, values, valid_lens = chapter_inputs()
    queries = torch.normal(0, 1, (2, 1, 2))
    attention = DotProductAttention(dropout=0.5).eval()
    out = attention(queries, keys, values, valid_lens)
    torch.testing.assert_close(out, torch.tensor([[[2.0, 3.0, 4.0, 5.0]], [[10.0, 11.0, 12.0, 13.0]]]))
    weights = attention.attention_weights
    torch.testing.assert_close(weights[0, 0, :2], torch.full((2,), 0.5))
    torch.testing.assert_close(weights[1, 0, :6], torch.full((6,), 1 / 6))
    assert torch.all(weights[0, 0, 2:] == 0) and torch.all(weights[1, 0, 6:] == 0)


def test_additive_attention_reproduces_chapter_and_d2l(d2l):
    keys, values, valid_lens = chapter_inputs()
    queries = torch.normal(0, 1, (2, 1, 20))
    attention = AdditiveAttention(key_size=2, query_size=20, num_hiddens=8, dropout=0.1).eval()
    out = attention(queries, keys, values, valid_lens)
    # all keys equal -> uniform weights over the valid keys, as the chapter prints
    torch.testing.assert_close(out, torch.tensor([[[2.0, 3.0, 4.0, 5.0]], [[10.0, 11.0, 12.0, 13.0]]]))
    keys = torch.randn(2, 10, 2)
    reference = d2l.AdditiveAttention(2, 20, 8, dropout=0.0)
    reference.load_state_dict(attention.state_dict())
    expected = reference(queries, keys, values, valid_lens)
    torch.testing.assert_close(attention(queries, keys, values, valid_lens), expected)


def test_additive_score_is_d2ls_w_tanh():
    torch.manual_seed(0)
    attention = AdditiveAttention(key_size=6, query_size=5, num_hiddens=32)
    queries, keys = torch.randn(3, 2, 5, requires_grad=True), 3 * torch.randn(3, 7, 6)
    projected = attention.project_keys(keys)
    # d2l's formula: w_v . tanh(W_q q + W_k k)
    expected = attention.w_v(torch.tanh(attention.W_q(queries).unsqueeze(2) + projected.unsqueeze(1))).squeeze(-1)
    scores = attention.score(queries, projected)  # (batch, queries, keys)
    torch.testing.assert_close(scores, expected, atol=1e-6, rtol=1e-6)
    grads = torch.autograd.grad(scores.square().sum(), [queries, *attention.parameters()], retain_graph=True)
    expected_grads = torch.autograd.grad(expected.square().sum(), [queries, *attention.parameters()])
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, expected_grad, atol=1e-5, rtol=1e-5)


def test_projected_keys_are_reused():
    attention = AdditiveAttention(key_size=6, query_size=5, num_hiddens=7).eval()
    queries, keys, values = torch.randn(3, 2, 5), torch.randn(3, 4, 6), torch.randn(3, 4, 3)
    lens = torch.tensor([4, 1, 2])
    projected = attention.project_keys(keys)
    torch.testing.assert_close(
        attention(queries, keys, values, lens, projected_keys=projected),
        attention(queries, keys, values, lens),
    )
    # a wrong projection changes the result: the projection is really used
    assert not torch.allclose(
        attention(queries, keys, values, lens, projected_keys=projected + 1),
        attention(queries, keys, values, lens),
    )


def test_bilinear_attention_scores_q_W_k():
    attention = BilinearAttention(key_size=3, query_size=4).eval()
    queries, keys, values = torch.randn(2, 5, 4), torch.randn(2, 6, 3), torch.randn(2, 6, 2)
    out = attention(queries, keys, values)
    scores = torch.einsum("bqi,ij,bkj->bqk", queries, attention.W.weight, keys)
    torch.testing.assert_close(attention.attention_weights, torch.softmax(scores, -1))
    torch.testing.assert_close(out, torch.softmax(scores, -1) @ values)


@pytest.mark.parametrize(
    "attention", [DotProductAttention(), AdditiveAttention(4, 4, 8), BilinearAttention(4, 4)], ids=type
)
def test_gradients_flow_through_scoring(attention):
    queries, keys, values = (torch.randn(2, 3, 4, requires_grad=True) for _ in range(3))
    attention(queries, keys, values, torch.tensor([2, 3])).sum().backward()
    for tensor in (queries, keys, values, *attention.parameters()):
        assert tensor.grad is not None and tensor.grad.abs().sum() > 0


def test_shape_mismatches_name_both_shapes():
    attention = DotProductAttention()
    with pytest.raises(ValueError, match=r"\(2, 10, 2\).*\(2, 9, 4\)"):
        attention(torch.randn(2, 1, 2), torch.randn(2, 10, 2), torch.randn(2, 9, 4))
    with pytest.raises(ValueError, match=r"\(2, 1, 3\).*\(2, 10, 2\)"):
        attention(torch.randn(2, 1, 3), torch.randn(2, 10, 2), torch.randn(2, 10, 4))
    with pytest.raises(ValueError, match=r"queries of shape \(2, 1, 3\) should have last dimension 20"):
        AdditiveAttention(2, 20, 8)(torch.randn(2, 1, 3), torch.ones(2, 10, 2), torch.ones(2, 10, 4))
    with pytest.raises(ValueError, match=r"batch size 3"):
        attention(torch.randn(2, 1, 2), torch.randn(2, 10, 2), torch.randn(2, 10, 4), torch.tensor([1, 2, 3]))


# ---- multi-head attention ----------------------------------------------------------------------------------


def test_multihead_shape_and_d2l_equivalence(d2l):
    num_hiddens, num_heads = 100, 5
    mha = MultiHeadAttention(num_hiddens, num_hiddens, num_hiddens, num_hiddens, num_heads, 0.5).eval()
    X, Y = torch.ones(2, 4, num_hiddens), torch.ones(2, 6, num_hiddens)
    valid_lens = torch.tensor([3, 2])
    assert mha(X, Y, Y, valid_lens)[0].shape == (2, 4, 100)  # the chapter's printed shape
    X, Y = torch.randn(2, 4, num_hiddens), torch.randn(2, 6, num_hiddens)
    expected = d2l_multihead(d2l, mha, X, Y, Y, valid_lens)
    out, weights = mha(X, Y, Y, valid_lens)
    torch.testing.assert_close(out, expected)
    assert weights.shape == (2, num_heads, 4, 6)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, num_heads, 4))
    assert torch.all(weights[0, :, :, 3:] == 0) and torch.all(weights[1, :, :, 2:] == 0)
    fused, no_weights = mha(X, Y, Y, valid_lens, need_weights=False, implementation="sdpa")
    torch.testing.assert_close(fused, expected, atol=1e-5, rtol=1e-5)
    assert no_weights is None
    eager, eager_weights = mha(X, Y, Y, valid_lens, need_weights=False)  # eager always has its weights
    torch.testing.assert_close(eager, expected)
    torch.testing.assert_close(eager_weights, weights)


def test_multihead_takes_keys_and_values_projected_once():
    mha = MultiHeadAttention(8, 6, 5, 12, 3).eval()
    q, k, v = torch.randn(2, 3, 6), torch.randn(2, 4, 8), torch.randn(2, 4, 5)
    key_values = mha.project_keys_values(k, v)
    assert key_values[0].shape == key_values[1].shape == (2, 3, 4, 4)  # (batch, heads, keys, head_size)
    for implementation in ("eager", "sdpa"):
        torch.testing.assert_close(
            mha(q, key_values=key_values, implementation=implementation, need_weights=False)[0],
            mha(q, k, v)[0],
            atol=1e-6,
            rtol=1e-5,
        )
    with pytest.raises(ValueError, match="pass keys and values"):
        mha(q)
    with pytest.raises(ValueError, match="implementation must be"):
        mha(q, k, v, need_weights=False, implementation="flash")


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_multihead_keys_shared_by_groups_of_queries_equal_repeated_keys(implementation):
    mha = MultiHeadAttention(8, 6, 5, 12, 3).eval()
    q, k, v = torch.randn(6, 2, 6), torch.randn(2, 4, 8), torch.randn(2, 4, 5)  # 3 query rows per key row
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])  # (key rows, keys)
    key_values = mha.project_keys_values(k, v)
    repeated = tuple(t.repeat_interleave(3, dim=0) for t in key_values)
    for valid in (None, mask):
        out, weights = mha(q, valid_lens=valid, key_values=key_values, implementation=implementation)
        expected_valid = None if valid is None else valid.repeat_interleave(3, dim=0)
        expected, expected_weights = mha(q, valid_lens=expected_valid, key_values=repeated)
        assert out.shape == (6, 2, 12) and weights.shape == (6, 3, 2, 4)  # (batch, heads, queries, keys)
        torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(weights, expected_weights)
    assert not torch.allclose(mha(q, key_values=key_values)[0], out)  # the mask (last round) matters
    with pytest.raises(ValueError, match="a multiple of it"):
        mha(q[:5], key_values=key_values)
    with pytest.raises(ValueError, match="as many key rows as query rows"):
        mha(q, key_values=key_values, is_causal=True)


def test_multihead_fused_path_handles_empty_rows_and_gradients():
    mha = MultiHeadAttention(8, 6, 5, 12, 3).eval()
    q, k, v = torch.randn(2, 3, 6, requires_grad=True), torch.randn(2, 4, 8), torch.randn(2, 4, 5)
    mask = torch.tensor([[True, True, False, False], [False, False, False, False]])
    eager, fused = mha(q, k, v, mask)[0], mha(q, k, v, mask, need_weights=False, implementation="sdpa")[0]
    torch.testing.assert_close(fused, eager, atol=1e-5, rtol=1e-5)
    assert not torch.isnan(fused).any()
    fused.sum().backward()
    assert q.grad.abs().sum() > 0


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_multihead_is_causal_equals_the_causal_mask(implementation):
    mha = MultiHeadAttention(8, 8, 8, 12, 3).eval()
    X = torch.randn(2, 5, 8)
    causal = torch.ones(5, 5, dtype=torch.bool).tril().expand(2, -1, -1)  # (batch, queries, keys)
    expected = mha(X, X, X, causal)[0]  # the eager path with the mask written out
    out = mha(X, X, X, is_causal=True, need_weights=False, implementation=implementation)[0]
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)
    assert not torch.allclose(mha(X, X, X)[0], expected)  # the mask matters
    with pytest.raises(ValueError, match="valid_lens or is_causal"):
        mha(X, X, X, causal, is_causal=True)


def test_multihead_rejects_indivisible_heads():
    with pytest.raises(ValueError, match=r"num_hiddens \(10\).*num_heads \(3\)"):
        MultiHeadAttention(4, 4, 4, 10, 3)


# ---- positional encoding -----------------------------------------------------------------------------------


def test_positional_encoding_formula_and_buffer():
    d, max_len = 32, 60
    pe = PositionalEncoding(d, dropout=0.0, max_len=max_len)
    assert "P" not in pe.state_dict()
    out = pe(torch.zeros(1, max_len, d))
    i, j = 7, 5
    torch.testing.assert_close(out[0, i, 2 * j], torch.tensor(math.sin(i / 10000 ** (2 * j / d))))
    torch.testing.assert_close(out[0, i, 2 * j + 1], torch.tensor(math.cos(i / 10000 ** (2 * j / d))))
    assert pe.to(torch.float64).P.dtype == torch.float64


def test_positional_encoding_rejects_too_long_input():
    with pytest.raises(ValueError, match="sequence length 11 exceeds the encoding's max_len 10"):
        PositionalEncoding(8, max_len=10)(torch.zeros(1, 11, 8))
    with pytest.raises(IndexError, match="index 10 is out of bounds"):  # torch's own check of the index
        PositionalEncoding(8, max_len=10)(torch.zeros(1, 2, 8), positions=torch.tensor([[9, 10]]))


def test_positional_encoding_at_given_positions():
    pe = PositionalEncoding(6, max_len=20)
    X = torch.randn(2, 3, 6)
    positions = torch.tensor([[0, 0, 1], [4, 5, 6]])  # a left-padded row, and a row decoded from position 4
    out = pe(X, positions)
    torch.testing.assert_close(out[1], X[1] + pe.P[0, 4:7])
    torch.testing.assert_close(out[0, 2], X[0, 2] + pe.P[0, 1])
    torch.testing.assert_close(pe(X, torch.arange(3).expand(2, 3)), pe(X))
    torch.testing.assert_close(pe(X, offset=4), pe(X, torch.arange(4, 7).expand(2, 3)))
    with pytest.raises(ValueError, match="sequence length 21 exceeds"):
        pe(X, offset=18)
