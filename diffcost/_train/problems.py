"""Why an exact plan is infeasible, in words and numbers (for the CLI and the search)."""

from .._core.errors import memory_problem
from .._inputs.model import Model
from .._terms.tp_rules import TP_RULES
from .cost import TrainBreakdown
from .plan import TrainPlan
from .rules import pipeline_split_problems


def framework_problems(model: Model, plan: TrainPlan) -> list[str]:
    """Megatron-LM's refusals beyond plain divisibility (:mod:`diffcost._train.rules`): KV heads
    neither a multiple nor a divisor of ``tp``; an interleaved schedule whose micro-batch count
    is not a multiple of ``pp``."""
    g = lambda x: float(x)
    tp, pp, v = g(plan.tp), g(plan.pp), g(plan.virtual_stages)
    m = g(plan.num_micro_batches())
    split = [r.problem(g(getattr(model, r.key)), tp) for r in TP_RULES if r.either_way]
    problems = [p for p in split if p is not None]
    if v > 1 and m % pp:
        problems.append(
            f"the interleaved schedule (virtual_stages {v:.0f}) needs the micro-batch count "
            f"({m:g}) to be a multiple of pp ({pp:.0f}): Megatron-LM refuses it"
        )
    return problems


def expert_problems(model: Model, plan: TrainPlan) -> list[str]:
    """The expert-parallel rules of :func:`~diffcost._train.rules.expert_parallel_violation`,
    each named."""
    g = lambda x: float(x)
    ep, experts, tp = g(plan.ep), g(model.experts), g(plan.tp)
    problems = []
    if g(plan.ep_overlap):
        if ep == 1:
            problems.append("ep_overlap needs expert parallelism (ep > 1)")
        if g(plan.pp) > 1 and g(plan.virtual_stages) == 1:
            problems.append("ep_overlap with pp > 1 needs virtual_stages > 1 (Megatron-Core)")
        if g(plan.recompute[2]) > 0:
            problems.append("ep_overlap needs recompute other than full (Megatron-Core)")
    if experts == 0:
        if ep > 1:
            problems.append(f"ep ({ep:.0f}) > 1 but the model has no experts: use ep 1")
        return problems
    etp, f_e = g(plan.expert_tp), g(model.expert_ffn_hidden)
    ranks = tp * g(plan.cp) * g(plan.shard_group())
    if experts % ep:
        problems.append(f"experts ({experts:.0f}) is not divisible by ep ({ep:.0f})")
    if ranks % (ep * etp):
        problems.append(
            f"expert_tp*ep ({etp * ep:.0f}) does not divide the tp*cp*dp ranks of a stage "
            f"({ranks:.0f}): Megatron-Core lays the expert grid over them"
        )
    if f_e % etp:
        problems.append(f"expert_ffn_hidden ({f_e:.0f}) is not divisible by expert_tp ({etp:.0f})")
    return problems


def train_problems(
    model: Model, plan: TrainPlan, out: TrainBreakdown, system_chips: float
) -> list[str]:
    """Every reason an exact training plan cannot run as given (empty list: feasible)."""
    g = lambda x: float(x)
    tp, pp, dp, cp = g(plan.tp), g(plan.pp), g(plan.dp), g(plan.cp)
    v, mb, gb, s = (
        g(plan.virtual_stages),
        g(plan.micro_batch),
        g(plan.global_batch),
        g(plan.seq_len),
    )
    problems = []
    chips = tp * pp * dp * cp
    if chips != system_chips:
        problems.append(f"tp*pp*dp*cp = {chips:.0f} but the system has {system_chips:.0f} chips")
    split = [r.problem(g(getattr(model, r.key)), tp) for r in TP_RULES if not r.either_way]
    problems += [p for p in split if p is not None]  # the TP rules (TP_RULES)
    problems += pipeline_split_problems(model, plan)  # in the place of the layer rule
    checks = [
        (gb, dp * mb, "global_batch", "dp*micro_batch"),
        (s, cp, "seq_len", "cp"),
    ]
    for num, den, a, b in checks:
        if num % den:
            problems.append(
                f"{a} ({num:.0f}) is not divisible by {b} ({den:.0f}): remainder {num % den:.0f}"
            )
    if v > 1 and pp == 1:
        problems.append("virtual_stages > 1 needs pipeline parallelism (pp > 1)")
    problems += framework_problems(model, plan)
    problems += expert_problems(model, plan)
    if g(out.unsupported_format) > 0:
        problems.append(
            "precision fp8 needs FP8 matrix units, which this chip does not have "
            "(its FP8 peak is its BF16 peak): train in bf16"
        )
    mem = memory_problem(g(out.memory.total_bytes), g(out.capacity_bytes))
    if mem:
        problems.append(mem)
    return problems
