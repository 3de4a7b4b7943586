"""One optimizer step of a transformer on a cluster: time, memory, utilisation, energy, cost.

``TrainCost(system, model)(plan)`` is the single jittable entry point.  The step is the 1F1B
pipeline schedule of Narayanan et al. (SC'21 §2.2):

    step = (m + (p - 1)/v) * (t_fwd + t_bwd + t_recompute + t_p2p)   per micro-batch per stage
           + exposed data-parallel reduction + exposed ZeRO-3 gathers + optimizer update

where each per-micro-batch stage time sums roofline GEMM times (shape-dependent efficiency),
memory-bound elementwise kernels, kernel launches, and tensor-parallel all-reduces (2 per layer
forward, 2 backward, 2 more when the forward is recomputed; Shoeybi et al. 2019, §3).  Backward
GEMMs cost twice the forward ones (input and weight gradients).

MFU counts model FLOP (no recomputation) and HFU hardware FLOP (with it), both against the dense
bf16 peak, as in PaLM (Chowdhery et al. 2022, App. B) and Korthikanti et al. (2022, App. A).
"""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._core.smooth import EXACT, Smoothing, divisibility_violation, is_one, smax
from .._inputs.hardware import BYTES_PER_ELEMENT, FORMATS, System, format_index
from .._inputs.model import Model
from .._terms.comm import all_gather_s, all_reduce_s, exposed_s, point_to_point_s
from .._terms.gemm import matmul_time_s, stream_time_s
from .memory import TrainMemory, params_per_chip, train_memory
from .plan import TrainPlan

_ELEMENT_BYTES = jnp.asarray([BYTES_PER_ELEMENT[f] for f in FORMATS])
_BF16 = format_index("bf16")
_FP8 = format_index("fp8")
#: Kernels launched per layer forward (2 norms, QKV, rotary/bias, attention, projection,
#: 2 residual/dropout, MLP in, activation, MLP out, one collective): an op count, not a fit.
KERNELS_PER_LAYER_FORWARD = 12.0


class TrainBreakdown(eqx.Module):
    """Prediction for one optimizer step (SI units; every field a float array)."""

    step_time_s: Float[Array, ""]
    compute_time_s: Float[Array, ""]
    recompute_time_s: Float[Array, ""]
    tp_comm_time_s: Float[Array, ""]
    cp_comm_time_s: Float[Array, ""]
    pp_bubble_time_s: Float[Array, ""]
    pp_p2p_time_s: Float[Array, ""]
    dp_comm_time_s: Float[Array, ""]
    optimizer_time_s: Float[Array, ""]
    tokens_per_s: Float[Array, ""]
    model_flop: Float[Array, ""]
    hardware_flop: Float[Array, ""]
    model_flop_per_s_per_chip: Float[Array, ""]
    mfu: Float[Array, ""]
    hfu: Float[Array, ""]
    memory: TrainMemory
    capacity_bytes: Float[Array, ""]
    headroom_bytes: Float[Array, ""]
    chips: Float[Array, ""]
    micro_batches: Float[Array, ""]
    divisibility_violation: Float[Array, ""]
    energy_j: Float[Array, ""]
    cost_usd: Float[Array, ""]

    def fits(self) -> Array:
        """1.0 if the step fits in memory, else 0.0."""
        return jnp.where(self.headroom_bytes >= 0.0, 1.0, 0.0)


class TrainCost(eqx.Module):
    """Training-step cost model of ``model`` on ``system``; call it on a :class:`TrainPlan`.

    ``smoothing`` (static) selects the exact model (default) or its smooth relaxation.
    """

    system: System
    model: Model
    smoothing: Smoothing = eqx.field(static=True, default=EXACT)

    def __call__(self, plan: TrainPlan) -> TrainBreakdown:
        sys, model, sm = self.system, self.model, self.smoothing
        chip, eff = sys.chip, sys.efficiency
        t, p, d, c, v = plan.tp, plan.pp, plan.dp, plan.cp, plan.virtual_stages
        m = plan.num_micro_batches()
        b, s = plan.micro_batch, plan.seq_len
        tokens = b * s / c  # tokens of one micro-batch on one chip
        peak = jnp.sum(plan.precision * chip.peak_flop_per_s)
        gemm_bytes = jnp.sum(plan.precision * _ELEMENT_BYTES)
        bf16_peak = chip.peak_flop_per_s[_BF16]
        h, a, e = model.hidden, model.heads, model.head_dim
        f, n_mat = model.ffn_hidden, model.mlp_matrices
        rep = plan.sequence_parallel / t + (1.0 - plan.sequence_parallel)

        # --- one layer, one micro-batch, forward: GEMMs -------------------------------------
        gemm = lambda n, k: matmul_time_s(tokens, n, k, peak, gemm_bytes, sys, sm)
        t_gemm = (
            gemm(model.attention_width() / t, h)  # QKV
            + gemm(h, a * e / t)  # attention output projection
            + gemm((n_mat - 1.0) * f / t, h)  # MLP in (gate and up for SwiGLU)
            + gemm(h, f / t)  # MLP out
        )
        # attention core: QK^T and AV per head; a fused causal kernel skips the masked half.
        causal_skip = 1.0 - 0.5 * model.causal * plan.flash_attention
        heads_local = a / t * b
        s_q = s / c
        t_attn = causal_skip * (
            matmul_time_s(s_q, s, e, bf16_peak, 2.0, sys, sm, heads_local)
            + matmul_time_s(s_q, e, s, bf16_peak, 2.0, sys, sm, heads_local)
        )
        # memory-bound elementwise kernels: 2 norms (read+write h), 2 residual/dropout adds
        # (read 2h, write h), the activation (read (n_mat-1) f, write f); unfused softmax and
        # dropout over the score matrix (read+write, plus mask) when not flash attention.
        ew_elems = tokens * (10.0 * h * rep + n_mat * f / t)
        scores = (1.0 - plan.flash_attention) * (3.0 + 2.0 * model.dropout) * heads_local * s_q * s
        # FP8 GEMMs (Transformer Engine) cast each bf16 input to fp8 first: read 2 bytes, write
        # 1, for the QKV and MLP inputs (full h after the SP all-gather), the projection input
        # and the MLP-out input; backward's gradient casts are in the 2x backward factor.
        fp8 = plan.precision[_FP8]
        cast_bytes = fp8 * 3.0 * tokens * (2.0 * h + (a * e + f) / t)
        t_elem = stream_time_s(2.0 * (ew_elems + scores) + cast_bytes, sys)
        t_launch = KERNELS_PER_LAYER_FORWARD * eff.kernel_launch_s
        t_layer_fwd = t_gemm + t_attn + t_elem + t_launch

        # --- tensor- and context-parallel communication per layer -----------------------------
        act_bytes = 2.0 * tokens * h  # bf16 activations of one micro-batch
        t_tp_ar = all_reduce_s(act_bytes, t, 1.0, sys, sm)
        # K and V (bf16) of the local KV heads; TP beyond kv_heads replicates heads (Megatron).
        kv_bytes = 2.0 * 2.0 * tokens * e * smax(model.kv_heads / t, 1.0, sm)
        t_cp = all_gather_s(kv_bytes * c, c, t, sys, sm)  # K,V ring pass, hidden under attention
        t_cp_exposed = exposed_s(t_cp, t_attn, sys, sm)

        # --- recomputation -------------------------------------------------------------------
        w_sel, w_full = plan.recompute[1], plan.recompute[2]
        t_recompute_layer = w_full * (t_layer_fwd + 2.0 * t_tp_ar) + w_sel * (
            t_attn + stream_time_s(2.0 * scores, sys)
        )
        tp_per_layer = (4.0 + 2.0 * w_full) * t_tp_ar
        cp_per_layer = 3.0 * t_cp_exposed  # forward gather, backward gather + reduce-scatter

        # --- the stage: its layers plus (worst stage) the output layer ------------------------
        layers_per_stage = model.layers / p
        t_logits_fwd = matmul_time_s(tokens, model.vocab / t, h, peak, gemm_bytes, sys, sm)
        t_xent = stream_time_s(3.0 * 4.0 * tokens * model.vocab / t, sys)  # fp32 logits r/w
        t_fwd = layers_per_stage * t_layer_fwd + t_logits_fwd + t_xent
        t_bwd = 2.0 * t_fwd
        t_rec = layers_per_stage * t_recompute_layer
        t_tp = layers_per_stage * tp_per_layer
        t_cpc = layers_per_stage * cp_per_layer
        # pipeline hand-offs: v chunk boundaries each way per micro-batch (scatter/gather over TP)
        has_pp = 1.0 - is_one(p, sm)
        p2p_bytes = act_bytes * rep
        t_p2p = has_pp * 2.0 * v * point_to_point_s(p2p_bytes, t * c * d, sys, sm)
        per_micro = t_fwd + t_bwd + t_rec + t_tp + t_cpc + t_p2p
        bubble = (p - 1.0) / v

        # --- data parallelism, ZeRO, optimizer ----------------------------------------------
        params = params_per_chip(model, plan, sm)
        z = plan.zero
        grad_bytes = params * plan.grad_bytes_per_param
        # gradients are reduced (and ZeRO shards) over data x context parallel ranks: CP ranks
        # hold the same weights.  Group of d*c members, t apart.
        dpc = d * c
        t_dp = all_reduce_s(grad_bytes, dpc, t, sys, sm)  # = reduce-scatter + all-gather
        t_dp_exposed = (1.0 - plan.overlap_grad_reduce) * t_dp + plan.overlap_grad_reduce * (
            exposed_s(t_dp, t_bwd + t_rec, sys, sm)
        )
        # ZeRO-3: gather weights for forward and backward, reduce-scatter grads, per micro-batch,
        # prefetched under that micro-batch's compute.
        weight_bytes = params * plan.weight_bytes_per_param
        t_z3 = 2.0 * all_gather_s(weight_bytes, dpc, t, sys, sm) + all_gather_s(
            grad_bytes, dpc, t, sys, sm
        )
        t_z3_exposed = m * exposed_s(t_z3, per_micro, sys, sm)
        t_dp_total = (1.0 - z[3]) * t_dp_exposed + z[3] * t_z3_exposed
        shard = z[0] + (z[1] + z[2] + z[3]) / dpc
        opt_bytes = (
            params
            * shard
            * (
                2.0 * plan.weight_bytes_per_param
                + plan.grad_bytes_per_param
                + 2.0 * plan.optimizer_bytes_per_param
            )
        )
        # FP8: fp8 weight copies are made once per step (read 2 bytes, write 1 per weight;
        # Transformer Engine caches them across micro-batches).
        opt_bytes += plan.precision[_FP8] * 3.0 * params
        t_opt = stream_time_s(opt_bytes, sys)

        step = (m + bubble) * per_micro + t_dp_total + t_opt

        # --- FLOP, utilisation, memory, energy ----------------------------------------------
        fwd = model.forward_flop(plan.global_batch, s)
        model_flop = 3.0 * fwd
        attn_core = model.layers * model.layer_attention_flop(plan.global_batch, s)
        layer_fwd = fwd - model.logits_flop(plan.global_batch * s)
        hardware_flop = model_flop + w_full * layer_fwd + w_sel * attn_core
        chips = plan.num_chips()
        mfu = model_flop / (step * chips * bf16_peak)
        hfu = hardware_flop / (step * chips * bf16_peak)
        mem = train_memory(
            model,
            plan,
            chip.memory_capacity_bytes,
            eff.memory_reserved_bytes * (1.0 - chip.on_chip_sram),
            eff.memory_fragmentation_fraction,
            sm,
        )
        divis = (
            divisibility_violation(a / t, sm)
            + divisibility_violation(f / t, sm)
            + divisibility_violation(model.layers / (p * v), sm)
            + divisibility_violation(m, sm)
            + divisibility_violation(s / c, sm)
        )
        return TrainBreakdown(
            step_time_s=step,
            compute_time_s=m * (t_fwd + t_bwd),
            recompute_time_s=m * t_rec,
            tp_comm_time_s=m * t_tp,
            cp_comm_time_s=m * t_cpc,
            pp_bubble_time_s=bubble * per_micro,
            pp_p2p_time_s=m * t_p2p,
            dp_comm_time_s=t_dp_total,
            optimizer_time_s=t_opt,
            tokens_per_s=plan.global_batch * s / step,
            model_flop=model_flop,
            hardware_flop=hardware_flop,
            model_flop_per_s_per_chip=model_flop / (step * chips),
            mfu=mfu,
            hfu=hfu,
            memory=mem,
            capacity_bytes=chip.memory_capacity_bytes,
            headroom_bytes=chip.memory_capacity_bytes - mem.total_bytes,
            chips=chips,
            micro_batches=m,
            divisibility_violation=divis,
            energy_j=chips * chip.tdp_w * step,
            cost_usd=chips * sys.price_usd_per_chip_hour * step / 3600.0,
        )
