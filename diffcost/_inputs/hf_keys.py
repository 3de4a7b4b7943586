"""Which Hugging Face config keys diffcost reads, refuses when active, or knows to be irrelevant,
per ``model_type`` (:mod:`.hf_config` reads through them).

A key no table names is judged by its effect (:func:`.hf_config._judge_other_keys`): accepted
when its value is what the family's ``transformers`` config class gives without it (a default or
a value derived from the other keys, e.g. ``is_decoder: false``, DeepSeek's ``qk_head_dim``),
refused otherwise.

Reference: ``transformers/models/<family>/configuration_<family>.py`` and
``modeling_<family>.py`` (transformers >= 4.51) for what each key builds.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """What diffcost does with each key of one ``model_type`` (besides :data:`COMMON_KEYS`)."""

    read: tuple[str, ...]  # mapped onto the model document
    refused: tuple[str, ...]  # the cost model cannot represent it when active: refused
    irrelevant: tuple[str, ...] = ()  # no effect on parameters, FLOPs or bytes moved


#: Keys of every family that do not change cost: token ids, initialisation, numerics (norm
#: epsilon), rotary frequencies and their scaling (elementwise on q/k), router loss terms
#: (training loss only), bookkeeping (``prefix``: a generation prefix of old configs), and the
#: attention-layout keys read by :func:`.hf_config._window` (``sliding_window``,
#: ``layer_types``; unknown layer kinds refused).
COMMON_KEYS = (
    "architectures",
    "model_type",
    "_name_or_path",
    "auto_map",
    "torch_dtype",
    "dtype",
    "transformers_version",
    "use_cache",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "initializer_range",
    "initializer_factor",
    "rms_norm_eps",
    "layer_norm_eps",
    "layer_norm_epsilon",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "attention_dropout",
    "hidden_dropout",
    "output_router_logits",
    "router_aux_loss_coef",
    "router_jitter_noise",
    "norm_topk_prob",
    "tokenizer_class",
    "id2label",
    "label2id",
    "problem_type",
    "return_dict",
    "output_attentions",
    "output_hidden_states",
    "chunk_size_feed_forward",
    "tie_word_embeddings",
    "is_encoder_decoder",
    "sliding_window",
    "use_sliding_window",
    "max_window_layers",
    "layer_types",
    "quantization_config",
    "vocab_size",
    "max_position_embeddings",
    "pretraining_tp",
    "prefix",
)
_DECODER = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "hidden_act",
    "attention_bias",
    "mlp_bias",
)
_QWEN_MOE = (
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "decoder_sparse_step",
    "mlp_only_layers",
)
_GEMMA = (
    "hidden_activation",
    "query_pre_attn_scalar",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "rope_local_base_freq",
    "sliding_window_pattern",
    "cache_implementation",
)
_MLA = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
_DEEPSEEK_MOE = (
    "n_routed_experts",
    "n_shared_experts",
    "moe_intermediate_size",
    "first_k_dense_replace",
    "num_experts_per_tok",
)
_DEEPSEEK_ROUTING = (
    "n_group",
    "topk_group",
    "topk_method",
    "routed_scaling_factor",
    "scoring_func",
    "aux_loss_alpha",
    "seq_aux",
    "ep_size",
    "rope_interleave",
    "num_nextn_predict_layers",
)
#: Megatron-DeepSpeed switches left in BLOOM's published configs (bigscience/bloom-560m
#: config.json): kernel fusions, the fp32 softmax, the ALiBi offset and the unknown-token id;
#: transformers' BLOOM reads none of them and they change no parameter, FLOP or byte.
_MEGATRON_SWITCHES = (
    "attention_softmax_in_fp32",
    "bias_dropout_fusion",
    "masked_softmax_fusion",
    "offset_alibi",
    "skip_bias_add",
    "skip_bias_add_qkv",
    "unk_token_id",
)
#: GPT-2's keys that GPT-J's published config keeps (EleutherAI/gpt-j-6b config.json): the
#: sequence-summary head of other tasks, the attention scaling both always apply, generation
#: settings, the training switch ``gradient_checkpointing``.
_GPT2_HEADS = (
    "summary_type",
    "summary_use_proj",
    "summary_activation",
    "summary_proj_to_labels",
    "summary_first_dropout",
    "scale_attn_weights",
    "task_specific_params",
    "gradient_checkpointing",
)
#: Dropouts of the GPT-style families: the ``dropout`` flag reads the attention one.
_GPT_DROPOUTS = ("resid_pdrop", "embd_pdrop", "attn_pdrop")

#: Per ``model_type``: the keys read, the keys refused when active, the keys irrelevant to cost.
#: Approximations, all below 0.01 % of the parameters at published sizes (below 0.05 % at the
#: 1024-wide test sizes, tests/test_hf_families.py): Qwen2 / Qwen2-MoE q/k/v biases and GPT-J's
#: MLP-only biases (the document's ``bias`` flag is all-or-nothing), Qwen3 / Gemma / OLMo-2 /
#: OLMoE / Phi / Cohere q/k norms and the extra post-norms of Gemma and OLMo-2, the parameter-free
#: LayerNorms of OLMo and the weight-only ones of Cohere, one norm per parallel block (GPT-J,
#: Phi, Cohere), BLOOM's embedding LayerNorm, OPT's two extra position rows, the Qwen2-MoE
#: shared-expert gate (hidden x 1), DeepSeek-V3's router bias, the output-layer bias of Phi and
#: GPT-J.  ``rotary_pct``, ``rotary_dim`` and ``partial_rotary_factor`` rotate part of each head
#: (elementwise work only); Granite's and Cohere's multipliers scale activations.
FAMILIES: dict[str, Family] = {
    "llama": Family(_DECODER, ()),
    "mistral": Family(_DECODER, ("sliding_window",)),
    "mixtral": Family((*_DECODER, "num_local_experts", "num_experts_per_tok"), ("sliding_window",)),
    "qwen2": Family(_DECODER, ("use_sliding_window",), ("use_mrope",)),
    "qwen2_moe": Family(
        (*_DECODER, *_QWEN_MOE, "shared_expert_intermediate_size"),
        ("use_sliding_window",),
        ("qkv_bias",),
    ),
    "qwen3": Family(_DECODER, ("use_sliding_window",)),
    "qwen3_moe": Family((*_DECODER, *_QWEN_MOE), ("use_sliding_window",)),
    "gemma": Family((*_DECODER, "hidden_activation"), ()),
    "gemma2": Family((*_DECODER, *_GEMMA), ("sliding_window", "layer_types")),
    "gemma3_text": Family((*_DECODER, *_GEMMA), ("sliding_window", "layer_types")),
    "phi": Family(
        _DECODER,
        (),
        ("partial_rotary_factor", "qk_layernorm", "resid_pdrop", "embd_pdrop"),
    ),
    "phi3": Family(
        _DECODER,
        ("sliding_window",),
        ("original_max_position_embeddings", "partial_rotary_factor", "resid_pdrop", "embd_pdrop"),
    ),
    "olmo": Family(_DECODER, (), ("clip_qkv",)),
    "olmo2": Family(_DECODER, ()),
    "olmoe": Family((*_DECODER, "num_experts", "num_experts_per_tok"), (), ("clip_qkv",)),
    "granite": Family(
        _DECODER,
        (),
        ("embedding_multiplier", "logits_scaling", "residual_multiplier", "attention_multiplier"),
    ),
    "cohere": Family(_DECODER, (), ("logit_scale", "use_qk_norm")),
    "internlm3": Family((*_DECODER, "qkv_bias", "bias"), ()),
    "starcoder2": Family(
        (*_DECODER, "use_bias"),
        ("sliding_window",),
        ("norm_epsilon", "residual_dropout", "embedding_dropout"),
    ),
    "deepseek_v2": Family(
        (*_DECODER, *_MLA, *_DEEPSEEK_MOE),
        ("moe_layer_freq",),
        _DEEPSEEK_ROUTING,
    ),
    "deepseek_v3": Family(
        (*_DECODER, *_MLA, *_DEEPSEEK_MOE, "moe_layer_freq"),
        (),
        _DEEPSEEK_ROUTING,
    ),
    "llama4_text": Family(
        (
            *_DECODER,
            "intermediate_size_mlp",
            "num_local_experts",
            "num_experts_per_tok",
            "moe_layers",
            "interleave_moe_layer_step",
        ),
        ("attention_chunk_size",),
        (
            "no_rope_layers",
            "no_rope_layer_interval",
            "use_qk_norm",
            "attn_temperature_tuning",
            "floor_scale",
            "attn_scale",
        ),
    ),
    "gpt_oss": Family(
        (*_DECODER, "num_local_experts", "num_experts_per_tok"),
        ("model_type", "layer_types", "sliding_window"),
        ("swiglu_limit",),
    ),
    "falcon": Family(
        (
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "num_kv_heads",
            "multi_query",
            "new_decoder_architecture",
            "parallel_attn",
            "bias",
            "alibi",
            "ffn_hidden_size",
            "activation",
        ),
        (),
        ("apply_residual_connection_post_layernorm", "num_ln_in_parallel_attn"),
    ),
    "bloom": Family(
        ("n_layer", "n_head", "hidden_size", "n_embed"),
        ("n_inner",),
        (
            "apply_residual_connection_post_layernorm",
            "slow_but_exact",
            *_MEGATRON_SWITCHES,
        ),
    ),
    "gptj": Family(
        ("n_layer", "n_embd", "n_head", "n_inner", "n_positions", "activation_function"),
        (),
        ("rotary_dim", "rotary", *_GPT_DROPOUTS, *_GPT2_HEADS),
    ),
    "opt": Family(
        (
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "ffn_dim",
            "activation_function",
            "enable_bias",
            "dropout",
            "activation_dropout",
        ),
        ("word_embed_proj_dim",),
        (
            "do_layer_norm_before",
            "_remove_final_layer_norm",
            "layer_norm_elementwise_affine",
            "init_std",
        ),
    ),
    "gpt_neox": Family(
        (
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "intermediate_size",
            "hidden_act",
            "use_parallel_residual",
            "attention_bias",
        ),
        (),
        ("rotary_pct", "partial_rotary_factor", "rotary_emb_base", "classifier_dropout"),
    ),
    "gpt2": Family(
        ("n_layer", "n_embd", "n_head", "n_inner", "n_positions", "activation_function"),
        (),
        (
            "n_ctx",
            *_GPT_DROPOUTS,
            *_GPT2_HEADS,
            "scale_attn_by_inverse_layer_idx",
            "reorder_and_upcast_attn",
        ),
    ),
    "bert": Family(
        (
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "intermediate_size",
            "hidden_act",
            "attention_probs_dropout_prob",
            "hidden_dropout_prob",
        ),
        ("position_embedding_type",),
        ("type_vocab_size", "gradient_checkpointing", "classifier_dropout"),
    ),
}
ENCODERS = ("bert",)
#: Families with a learned position table (``max_position_embeddings x hidden``).
LEARNED = ("gpt2", "bert", "opt")
#: Families whose norms are LayerNorms (the others: RMSNorm).
LAYERNORM = ("gpt2", "bert", "falcon", "gpt_neox", "olmo", "bloom", "gptj", "opt", "phi")
LAYERNORM += ("starcoder2", "cohere")
#: Families whose attention and MLP run in parallel on one normed input (GPT-J, PaLM-style).
PARALLEL = ("gptj", "phi", "cohere")
#: Families whose attention is ALiBi (no rotary or learned positions).
ALIBI = ("bloom",)
#: Families whose GELU MLP is gated (GeGLU, ``GemmaMLP``: gate, up, down).
GATED_GELU = ("gemma", "gemma2", "gemma3_text")
