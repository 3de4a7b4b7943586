"""Parameter and FLOP counts against the published closed forms."""

import jax.numpy as jnp
import pytest

import diffcost as dc

GPT_FAMILY = ["megatron-gpt-1.7b", "megatron-gpt-22b", "gpt3-175b", "megatron-gpt-1t"]


@pytest.mark.parametrize("name", GPT_FAMILY)
def test_params_match_narayanan_eq2(name):
    """P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)) + final LayerNorm 2h (Narayanan eq. 2)."""
    m = dc.load_model(name)
    n_l, h, V, s = (float(x) for x in (m.layers, m.hidden, m.vocab, m.max_seq_len))
    eq2 = 12 * n_l * h**2 * (1 + 13 / (12 * h) + (V + s) / (12 * n_l * h))
    assert float(m.num_params()) == pytest.approx(eq2 + 2 * h, rel=1e-12)


@pytest.mark.parametrize("name", GPT_FAMILY)
@pytest.mark.parametrize("batch,seq", [(1, 2048), (1536, 2048), (4, 4096)])
def test_forward_flop_matches_korthikanti_eq7(name, batch, seq):
    """Model FLOP = 3 x forward = 72 B L s h^2 (1 + s/(6h) + V/(12 h L)) (Korthikanti eq. 7)."""
    m = dc.load_model(name)
    L, h, V = (float(x) for x in (m.layers, m.hidden, m.vocab))
    eq7 = 72 * batch * L * seq * h**2 * (1 + seq / (6 * h) + V / (12 * h * L))
    assert 3 * float(m.forward_flop(batch, seq)) == pytest.approx(eq7, rel=1e-12)


def test_gqa_and_swiglu_param_count():
    """Llama 2 70B: 68.98B parameters in the released checkpoint (GQA 8 KV heads, SwiGLU)."""
    m = dc.load_model("llama-2-70b")
    assert float(m.num_params()) == pytest.approx(68_976_648_192, rel=1e-9)


def test_llama3_8b_param_count():
    """Llama 3 8B checkpoint: 8,030,261,248 parameters."""
    assert float(dc.load_model("llama-3-8b").num_params()) == pytest.approx(8_030_261_248, rel=1e-9)


def test_flop_counts_are_jnp_functions():
    m = dc.load_model("llama-2-7b")
    tokens = jnp.asarray([1.0, 2.0])
    assert m.layer_matmul_flop(tokens).shape == (2,)


def test_mixtral_total_and_active_params():
    """Mixtral 8x7B: 46.7B parameters, 12.9B per token (Mistral AI, 2023-12-11): the experts
    multiply only the MLP; the attention, embeddings and router are shared."""
    m = dc.load_model("mixtral-8x7b")
    h, f, L = 4096, 14336, 32
    attention = h * (32 + 2 * 8) * 128 + 32 * 128 * h
    shared = L * (attention + h * 8 + 2 * h) + 2 * 32000 * h + h  # + router, norms, emb, out
    assert float(m.num_params()) == pytest.approx(shared + L * 8 * 3 * h * f, rel=1e-6)
    assert float(m.active_params()) == pytest.approx(shared + L * 2 * 3 * h * f, rel=1e-6)
    assert float(m.num_params()) / 1e9 == pytest.approx(46.7, rel=0.003)
    assert float(m.active_params()) / 1e9 == pytest.approx(12.9, rel=0.003)


def test_moe_flop_counts_active_experts_only():
    """A token runs through its top-k experts: forward FLOP per token is 2 x active matrices
    (no attention at s = 1 aside), far below 2 x total parameters."""
    m = dc.load_model("mixtral-8x7b")
    per_token = float(m.layer_matmul_flop(1.0)) * float(m.layers) + float(m.logits_flop(1.0))
    embedding = float(m.vocab * m.hidden)
    norms = float(m.layers) * float(m.layer_norm_params()) + float(m.hidden)
    assert per_token == pytest.approx(2 * (float(m.active_params()) - embedding - norms), rel=1e-6)


def test_a_dense_model_has_no_moe_terms():
    """experts = 0: total = active parameters; the dense MLP width is ffn_hidden."""
    m = dc.load_model("llama-3-8b")
    assert float(m.active_params()) == float(m.num_params())
    assert float(m.active_ffn_hidden()) == float(m.ffn_hidden)
    assert float(m.layer_expert_params()) == 0.0


def test_deepseek_v3_latent_attention_and_experts():
    """DeepSeek-V3: 671B total, 37B active (report abstract); MLA's projections per block are
    q 7168x1536 + 1536x128x192, kv 7168x576 + 512x128x256, o 128x128x7168 (187.1M)."""
    m = dc.load_model("deepseek-v3")
    mla = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert float(m.attention_projection_params()) == pytest.approx(mla, rel=1e-9)
    assert float(m.num_params()) / 1e9 == pytest.approx(671, rel=0.002)
    assert float(m.active_params()) / 1e9 == pytest.approx(37, rel=0.015)
    # the cache holds the 512-wide latent and the 64-wide rotary key, whatever the KV heads
    assert float(m.kv_cache_elements(16.0)) == 576.0
    assert float(m.decode_attention_dim()) == 2 * 512 + 64


def test_standard_attention_is_unchanged_by_the_latent_terms():
    """Without MLA the cache holds K and V of each local KV head, decode multiplies 2 e."""
    m = dc.load_model("llama-3-70b")
    assert float(m.kv_cache_elements(1.0)) == 2 * 128
    assert float(m.decode_attention_dim()) == 2 * 128
    assert float(m.latent_projection_params()) == 0.0


def test_gpt_oss_120b_counts_match_its_model_card():
    """116.83B total; 5.13B active without the 0.58B input embedding (the card's convention)."""
    m = dc.load_model("gpt-oss-120b")
    assert float(m.num_params()) == pytest.approx(116.83e9, rel=0.01)
    embedding = 201088 * 2880
    assert float(m.active_params()) - embedding == pytest.approx(5.13e9, rel=0.01)
    assert (float(m.sliding_window), float(m.sliding_layers)) == (128.0, 18.0)
