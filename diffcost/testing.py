"""Internals for tests and for advanced users who need them: one documented module instead of
``diffcost._core...`` paths, so that moving a private module does not break the code that uses it.

The public API (``import diffcost as dc``, the names in ``diffcost.__all__``) comes first: use it
wherever it does what you need.  The names here are re-exports of private functions, classes,
constants and modules; their names are stable (a move inside the package changes this file, not
its users), but where they are defined, and their behaviour, follows the library's internals and
may change between releases without notice.

This module sits above every layer (like ``diffcost/__init__.py``): it may import from any of them,
and no module of the package imports it (tests/test_layers.py, tests/test_public_imports.py).
``import diffcost`` does not import it, and importing it imports no private module beyond what
``import diffcost`` does: each name imports its module on first use (PEP 562), as in
``diffcost/__init__.py``, so a test imports only what it uses, and a name whose module moved fails
alone (tests/test_public_imports.py names it).  A new name is one import in the
``TYPE_CHECKING`` block (the run-time lookup reads it: diffcost/_core/lazy.py) and one entry in
``__all__``.

A private module re-exported whole (for ``monkeypatch.setattr``) keeps its name, except where a
public name is spelled the same: ``calibration`` is the module of ``dc.calibrate``.  Two private
names spelled alike, or a private name spelled like a public one, carry the name of their
module (``CODESIGN_BUDGETS``, ``PROGRAM_BUDGETS``, ``summarise_validation``, ``CodesignProblem``).
"""

import typing

from ._core.lazy import lazy_exports

if typing.TYPE_CHECKING:  # the real imports, for type checkers; at run time: lazy_exports
    from ._analysis import calibrate as calibration
    from ._analysis import coverage, distributed, plots, schema_doc, uncertainty
    from ._analysis.calibrate_kernels import (
        KERNEL_FAMILIES,
        fit_attention,
        fit_family,
        fit_kernels,
        fixed_s,
        kernel_constants,
        with_constants,
    )
    from ._analysis.coverage import builtin_index, index
    from ._analysis.kernel_points import DATA_PARALLEL_TILE, WARM_L2
    from ._analysis.load_intervals import QUEUE_LOG_SD, load_coverage, load_intervals
    from ._analysis.plans import PLAN_SCHEMAS, load_load_measurements
    from ._analysis.program_size import BUDGETS as PROGRAM_BUDGETS
    from ._analysis.program_size import SLACK, TARGETS, count_equations, program_sizes
    from ._analysis.sensitivity import (
        HARDWARE_GROUPS,
        SERVE_METRICS,
        TRAIN_METRICS,
        parameter_names,
        serve_metrics,
        train_metrics,
    )
    from ._analysis.sweep import INTERVAL_OUTPUTS, SERVE_OUTPUTS, TRAIN_OUTPUTS
    from ._analysis.sweep_shard import STAMP, parse_shard, shard_range
    from ._analysis.sweep_spec import PLAN_FIELDS
    from ._analysis.uncertainty import MOE_REGIME, intervals
    from ._analysis.validate import prepare, scenario_toml, train_space
    from ._analysis.validate import summarise as summarise_validation
    from ._analysis.validate_kernels import kernel_rows, kernel_table, validate_kernels
    from ._analysis.validate_load import validate_load
    from ._codesign import design, optimize, technology, workloads
    from ._codesign.compare import (
        Run,
        charged,
        cma_search,
        conventions,
        median_best,
        multistart_search,
        penalised,
        popsize,
        random_search,
        start_of,
        table,
    )
    from ._codesign.design import chip_as_design, design_area_mm2, design_cost_usd, design_power_w
    from ._codesign.fleet import fleet_evaluate, fleet_problem, is_fleet
    from ._codesign.multistart import START_SPREAD, start_points
    from ._codesign.optimize import BUDGETS as CODESIGN_BUDGETS
    from ._codesign.optimize import (
        DEFAULT_BUDGETS,
        LEAVES,
        PENALTY_MAX,
        augmented_lagrangian,
        budget_excess,
        evaluate,
        exact_rank,
        incumbent,
        log_budgets,
        make_problem,
        make_step,
        nearest_chips,
        next_penalty,
        solve,
        start_vector,
        to_design,
        violation,
        within_area_and_cost,
        within_budgets,
        within_power,
        workload_power_w,
    )
    from ._codesign.optimize import Problem as CodesignProblem
    from ._codesign.optimize import summarise as summarise_codesign
    from ._codesign.parts import make_parts_step
    from ._codesign.power_points import measured_phases, phase_power_w, throttled
    from ._codesign.technology import reference_chip, reference_technology, technology_path
    from ._codesign.workloads import (
        BATCH_RESOLUTION,
        builtin_workload,
        exact_at,
        exact_objective,
        largest_batches,
        plan_neighbours,
        relaxed_objective,
        rounded_plan,
    )
    from ._core import exported, quick_compile, smooth, xla
    from ._core.dedupe import cse_jaxpr, deduplicated
    from ._core.discrete import Axis, Choice, device_columns, moves, refine, scaled_moves, unique
    from ._core.disk_cache import cached_json
    from ._core.exported import ExportedProgram, stable_name
    from ._core.extension import AbstractExtension, is_abstract, registry
    from ._core.lazy import type_checking_imports
    from ._core.options import Choices, PlanField, coerce, coerce_all, searched_choices, values
    from ._core.quick_compile import QUICK_COMPILE
    from ._core.shared import evaluation, once
    from ._core.units import UNITS, split_unit
    from ._core.xla import CPU_FLAGS, add_flags, backends_started, configure_xla, flags_supported
    from ._inputs import hf_config, schema
    from ._inputs.build import chip_module, model_module
    from ._inputs.checker import Checker, read_json, read_toml
    from ._inputs.hardware import ARCHITECTURES, NearMemory, format_index
    from ._inputs.hf_config import hf_document
    from ._inputs.hf_keys import FAMILIES
    from ._inputs.hf_values import ACTIVATIONS
    from ._inputs.kernel_measurements import kernels_dir, read_kernel_measurements
    from ._inputs.loader import efficiency_for, resolve
    from ._inputs.measurements import measurements_dir
    from ._inputs.ranges import Plausible
    from ._inputs.reserve import runtime_reserve_bytes
    from ._inputs.schema import PARAMS_TOLERANCE
    from ._launch import (
        Launch,
        bridge,
        bridge_launch,
        megatron,
        megatron_launch,
        serving_launches,
        train_launch_plan,
    )
    from ._launch.bridge import with_memory_check
    from ._launch.megatron import RunSettings, allocated, flag, parsed, switch_args
    from ._search.core import Candidates, enumerate_all, scan_space
    from ._search.core import _result as search_result
    from ._search.pools import PoolAnswer, size_pools, size_pools_formats, verdict
    from ._search.serve import ServeProblem, relaxed_serve_plan, serve_objective
    from ._search.train import TrainProblem, enumerate_space, objective_of, valid
    from ._search.train import _layout as train_layout
    from ._serve.behaviours import ENGINE_BEHAVIOURS, AbstractEngineBehaviour
    from ._serve.disagg_load import (
        DisaggregatedLoad,
        disaggregated_goodput_qps,
        disaggregated_under_load,
        prefill_only,
        transfer_s,
    )
    from ._serve.engine import (
        DEFAULT_ENGINE,
        ENGINE_KIND,
        ENGINE_PLAN_FIELDS,
        engine_names,
        load_engine,
    )
    from ._serve.formats import (
        WEIGHT_ONLY_COMPUTE,
        chip_formats,
        compute_format_on,
        format_note,
        format_problems,
        has_format,
        weight_only,
    )
    from ._serve.kv import kv_bytes_per_token
    from ._serve.load import goodput_qps, iteration_s, iteration_times, steady_state
    from ._serve.passes import (
        Work,
        consts,
        expected_tokens_per_step,
        expert_split,
        gemm_s,
        layer_time,
        pass_time,
        stacked_gemm_s,
    )
    from ._serve.plan import SERVE_FIELDS, SERVE_PLAN, plan_kwargs
    from ._serve.scheduling import IterationPolicy, host_scaled, iteration_policy, profile_policy
    from ._terms.attention import (
        ATTENTION_TILE_ROWS,
        AttentionShape,
        attention_gemms,
        causal_skip,
        decode_attention,
        fused_prefill_efficiency,
        gemm_attention_s,
        prefill_attention,
    )
    from ._terms.collectives import (
        CUSTOM_BASE_S,
        CUSTOM_LINK_EFFICIENCY,
        CUSTOM_PEER_S,
        DEFAULT_COLLECTIVE,
        NVLS,
        NVLS_EFFICIENCY,
        NVLS_LATENCY_S,
        RING_BANDWIDTH_RATIO,
        RING_BASE_S,
        RING_STEP_RATIO,
        EngineKernels,
        Fastest,
        HierarchicalRing,
        Nccl,
        OneShot,
        Ring,
        Tree,
        TwoShot,
        collective_of,
        gpu_costs,
    )
    from ._terms.comm import all_gather_s, all_reduce_s, all_to_all_s, exposed_s, tp_all_reduce_s
    from ._terms.energy import activity_energy_j
    from ._terms.execution import EXECUTION_CLASSES, AbstractExecutionClass, mma_fraction_scale
    from ._terms.gemm import (
        GemmFormat,
        array_tiles,
        gemm_bytes,
        gemm_flop,
        gemm_time_s,
        gpu_fill,
        gpu_matmul_efficiency,
        matmul_efficiency,
        matmul_time_s,
        stream_time_s,
        sustained_efficiency,
        wave_fill,
    )
    from ._terms.kernels import (
        KERNELS_PER_LAYER_FORWARD,
        elementwise_elements,
        launch_s,
        quantize_bytes,
    )
    from ._terms.layer import (
        LAYER_GEMMS,
        ExpertSplit,
        expert_gemms,
        layer_gemm_s,
        layer_gemms,
        logits_gemm,
    )
    from ._terms.memory_levels import (
        PLACEMENTS,
        AbstractPlacement,
        BandwidthProportional,
        NearFirst,
        near_share,
        placed_bandwidth_bytes_per_s,
        placed_chip,
        placement_share,
    )
    from ._terms.moe import (
        EAGER_EXPERT_CALL_S,
        EXPERT_GEMMS_PER_FORWARD,
        active_expert_fraction,
        eager_expert_dispatch_s,
        expert_imbalance,
        mixed_active_fraction,
    )
    from ._terms.power import (
        DVFS_ENERGY_EXPONENT,
        burst,
        clock_slowdown,
        sustained,
        sustained_energy,
    )
    from ._terms.reliability import (
        checkpoint_interval_s,
        expected_max_normal,
        goodput_fraction,
        optimal_wasted_fraction,
        sync_wait_s,
        wasted_fraction,
    )
    from ._terms.tp_rules import EXPERT_LAYOUT_RULES, TP_RULES, TpRule, tp_allowed
    from ._train.cost import (
        FUSED_ATTENTION_BACKWARD_RATIO,
        XENT_BACKWARD_BYTES_PER_LOGIT,
        XENT_FORWARD_BYTES_PER_LOGIT,
        adapter_forward_s,
        gathered_weight_bytes,
        gemm_format,
        jitter_s,
        layer_forward,
        pipeline_bubble,
        sharded_gather_s,
        stage_times,
        step_flop,
        tokens_per_chip,
        tp_comm_layer_s,
        zero3_s,
    )
    from ._train.memory import (
        adapter_params_per_layer,
        layer_activation_bytes_by_recompute,
        micro_batches_in_flight,
        params_per_chip,
        stage_layers,
        stage_memory,
        train_memory,
        zero3_gather_params,
    )
    from ._train.plan import (
        TRAIN_FIELDS,
        TRAIN_PLAN,
        TRAINING_PRECISIONS,
        balanced_split,
        balanced_split_ok,
    )
    from ._train.problems import framework_problems
    from ._train.rules import (
        fp8_units,
        hybrid_shard_violation,
        padded_vocab,
        pipeline_split_problems,
        pipeline_split_violation,
        tp_overlap_violation,
        with_padded_vocab,
    )
    from ._train.space import fixed_fields, to_plans
    from .cli import _train_cmd as train_cmd
    from .cli._codesign_cmd import print_buildable, print_starts
    from .cli._common import (
        NonFiniteOutput,
        check_finite,
        console,
        output_problems,
        print_json,
        stage,
    )
    from .cli._options import field_option, option_group, train_plan_flags, with_options
    from .cli._plan_cmd import risk_comparison
    from .cli._plausible import set_aside_line
    from .cli._programs import PREDICT
    from .cli._resolve import resolve_job
    from .cli._sensitivity_cmd import sensitivity_serve, sensitivity_train
    from .cli._serve_cmd import serve
    from .cli._sweep_paths import output_paths, unwritten
    from .cli._train_cmd import train
    from .cli._ui import answers as ui_answers
    from .cli._ui import jobs as ui_jobs
    from .cli._ui import server as ui_server

#: each name of the block above, imported on first use (PEP 562; diffcost/_core/lazy.py)
__getattr__, __dir__, _where = lazy_exports(globals())

__all__ = [
    "AbstractEngineBehaviour",
    "AbstractExecutionClass",
    "AbstractExtension",
    "AbstractPlacement",
    "ACTIVATIONS",
    "active_expert_fraction",
    "activity_energy_j",
    "adapter_forward_s",
    "adapter_params_per_layer",
    "add_flags",
    "all_gather_s",
    "all_reduce_s",
    "all_to_all_s",
    "allocated",
    "ARCHITECTURES",
    "array_tiles",
    "attention_gemms",
    "ATTENTION_TILE_ROWS",
    "AttentionShape",
    "augmented_lagrangian",
    "Axis",
    "backends_started",
    "balanced_split",
    "balanced_split_ok",
    "BandwidthProportional",
    "BATCH_RESOLUTION",
    "bridge",
    "bridge_launch",
    "budget_excess",
    "builtin_index",
    "builtin_workload",
    "burst",
    "cached_json",
    "calibration",
    "Candidates",
    "causal_skip",
    "charged",
    "check_finite",
    "Checker",
    "checkpoint_interval_s",
    "chip_as_design",
    "chip_formats",
    "chip_module",
    "Choice",
    "Choices",
    "clock_slowdown",
    "cma_search",
    "CODESIGN_BUDGETS",
    "CodesignProblem",
    "coerce",
    "coerce_all",
    "collective_of",
    "compute_format_on",
    "configure_xla",
    "console",
    "consts",
    "conventions",
    "count_equations",
    "coverage",
    "CPU_FLAGS",
    "cse_jaxpr",
    "CUSTOM_BASE_S",
    "CUSTOM_LINK_EFFICIENCY",
    "CUSTOM_PEER_S",
    "DATA_PARALLEL_TILE",
    "decode_attention",
    "deduplicated",
    "DEFAULT_BUDGETS",
    "DEFAULT_COLLECTIVE",
    "DEFAULT_ENGINE",
    "design",
    "design_area_mm2",
    "design_cost_usd",
    "design_power_w",
    "device_columns",
    "disaggregated_goodput_qps",
    "disaggregated_under_load",
    "DisaggregatedLoad",
    "distributed",
    "DVFS_ENERGY_EXPONENT",
    "EAGER_EXPERT_CALL_S",
    "eager_expert_dispatch_s",
    "efficiency_for",
    "elementwise_elements",
    "ENGINE_BEHAVIOURS",
    "ENGINE_KIND",
    "engine_names",
    "ENGINE_PLAN_FIELDS",
    "EngineKernels",
    "enumerate_all",
    "enumerate_space",
    "evaluate",
    "evaluation",
    "exact_at",
    "exact_objective",
    "exact_rank",
    "EXECUTION_CLASSES",
    "expected_max_normal",
    "expected_tokens_per_step",
    "expert_gemms",
    "EXPERT_GEMMS_PER_FORWARD",
    "expert_imbalance",
    "EXPERT_LAYOUT_RULES",
    "expert_split",
    "ExpertSplit",
    "exported",
    "ExportedProgram",
    "exposed_s",
    "FAMILIES",
    "Fastest",
    "field_option",
    "fit_attention",
    "fit_family",
    "fit_kernels",
    "fixed_fields",
    "fixed_s",
    "flag",
    "flags_supported",
    "fleet_evaluate",
    "fleet_problem",
    "format_index",
    "format_note",
    "format_problems",
    "fp8_units",
    "framework_problems",
    "FUSED_ATTENTION_BACKWARD_RATIO",
    "fused_prefill_efficiency",
    "gathered_weight_bytes",
    "gemm_attention_s",
    "gemm_bytes",
    "gemm_flop",
    "gemm_format",
    "gemm_s",
    "gemm_time_s",
    "GemmFormat",
    "goodput_fraction",
    "goodput_qps",
    "gpu_costs",
    "gpu_fill",
    "gpu_matmul_efficiency",
    "HARDWARE_GROUPS",
    "has_format",
    "hf_config",
    "hf_document",
    "HierarchicalRing",
    "host_scaled",
    "hybrid_shard_violation",
    "incumbent",
    "index",
    "INTERVAL_OUTPUTS",
    "intervals",
    "is_abstract",
    "is_fleet",
    "iteration_policy",
    "iteration_s",
    "iteration_times",
    "IterationPolicy",
    "jitter_s",
    "kernel_constants",
    "KERNEL_FAMILIES",
    "kernel_rows",
    "kernel_table",
    "kernels_dir",
    "KERNELS_PER_LAYER_FORWARD",
    "kv_bytes_per_token",
    "largest_batches",
    "Launch",
    "launch_s",
    "layer_activation_bytes_by_recompute",
    "layer_forward",
    "layer_gemm_s",
    "LAYER_GEMMS",
    "layer_gemms",
    "layer_time",
    "LEAVES",
    "load_coverage",
    "load_engine",
    "load_intervals",
    "load_load_measurements",
    "log_budgets",
    "logits_gemm",
    "make_parts_step",
    "make_problem",
    "make_step",
    "matmul_efficiency",
    "matmul_time_s",
    "measured_phases",
    "measurements_dir",
    "median_best",
    "megatron",
    "megatron_launch",
    "micro_batches_in_flight",
    "mixed_active_fraction",
    "mma_fraction_scale",
    "model_module",
    "MOE_REGIME",
    "moves",
    "multistart_search",
    "Nccl",
    "near_share",
    "nearest_chips",
    "NearFirst",
    "NearMemory",
    "next_penalty",
    "NonFiniteOutput",
    "NVLS",
    "NVLS_EFFICIENCY",
    "NVLS_LATENCY_S",
    "objective_of",
    "once",
    "OneShot",
    "optimal_wasted_fraction",
    "optimize",
    "option_group",
    "output_paths",
    "output_problems",
    "padded_vocab",
    "parameter_names",
    "params_per_chip",
    "PARAMS_TOLERANCE",
    "parse_shard",
    "parsed",
    "pass_time",
    "penalised",
    "PENALTY_MAX",
    "phase_power_w",
    "pipeline_bubble",
    "pipeline_split_problems",
    "pipeline_split_violation",
    "placed_bandwidth_bytes_per_s",
    "placed_chip",
    "placement_share",
    "PLACEMENTS",
    "PLAN_FIELDS",
    "plan_kwargs",
    "plan_neighbours",
    "PLAN_SCHEMAS",
    "PlanField",
    "Plausible",
    "plots",
    "PoolAnswer",
    "popsize",
    "PREDICT",
    "prefill_attention",
    "prefill_only",
    "prepare",
    "print_buildable",
    "print_json",
    "print_starts",
    "profile_policy",
    "PROGRAM_BUDGETS",
    "program_sizes",
    "quantize_bytes",
    "QUEUE_LOG_SD",
    "QUICK_COMPILE",
    "quick_compile",
    "random_search",
    "read_json",
    "read_kernel_measurements",
    "read_toml",
    "reference_chip",
    "reference_technology",
    "refine",
    "registry",
    "relaxed_objective",
    "relaxed_serve_plan",
    "resolve",
    "resolve_job",
    "Ring",
    "RING_BANDWIDTH_RATIO",
    "RING_BASE_S",
    "RING_STEP_RATIO",
    "risk_comparison",
    "rounded_plan",
    "Run",
    "RunSettings",
    "runtime_reserve_bytes",
    "scaled_moves",
    "scan_space",
    "scenario_toml",
    "schema",
    "schema_doc",
    "search_result",
    "searched_choices",
    "sensitivity_serve",
    "sensitivity_train",
    "serve",
    "SERVE_FIELDS",
    "SERVE_METRICS",
    "serve_metrics",
    "serve_objective",
    "SERVE_OUTPUTS",
    "SERVE_PLAN",
    "ServeProblem",
    "serving_launches",
    "set_aside_line",
    "shard_range",
    "sharded_gather_s",
    "size_pools",
    "size_pools_formats",
    "SLACK",
    "smooth",
    "solve",
    "split_unit",
    "stable_name",
    "stacked_gemm_s",
    "stage",
    "stage_layers",
    "stage_memory",
    "stage_times",
    "STAMP",
    "start_of",
    "start_points",
    "START_SPREAD",
    "start_vector",
    "steady_state",
    "step_flop",
    "stream_time_s",
    "summarise_codesign",
    "summarise_validation",
    "sustained",
    "sustained_efficiency",
    "sustained_energy",
    "switch_args",
    "sync_wait_s",
    "table",
    "TARGETS",
    "technology",
    "technology_path",
    "throttled",
    "to_design",
    "to_plans",
    "tokens_per_chip",
    "tp_all_reduce_s",
    "tp_allowed",
    "tp_comm_layer_s",
    "tp_overlap_violation",
    "TP_RULES",
    "TpRule",
    "train",
    "train_cmd",
    "TRAIN_FIELDS",
    "train_launch_plan",
    "train_layout",
    "train_memory",
    "TRAIN_METRICS",
    "train_metrics",
    "TRAIN_OUTPUTS",
    "TRAIN_PLAN",
    "train_plan_flags",
    "train_space",
    "TRAINING_PRECISIONS",
    "TrainProblem",
    "transfer_s",
    "Tree",
    "TwoShot",
    "type_checking_imports",
    "ui_answers",
    "ui_jobs",
    "ui_server",
    "uncertainty",
    "unique",
    "UNITS",
    "unwritten",
    "valid",
    "validate_kernels",
    "validate_load",
    "values",
    "verdict",
    "violation",
    "WARM_L2",
    "wasted_fraction",
    "wave_fill",
    "weight_only",
    "WEIGHT_ONLY_COMPUTE",
    "with_constants",
    "with_memory_check",
    "with_options",
    "with_padded_vocab",
    "within_area_and_cost",
    "within_budgets",
    "within_power",
    "Work",
    "workload_power_w",
    "workloads",
    "XENT_BACKWARD_BYTES_PER_LOGIT",
    "XENT_FORWARD_BYTES_PER_LOGIT",
    "xla",
    "zero3_gather_params",
    "zero3_s",
]
