"""diffcost: differentiable cost models of training and serving large models on AI hardware.

The three uses are one-liners on a cost model ``cost = TrainCost(system, model)``:

* search: ``jax.grad`` of ``cost(plan).step_time_s`` with respect to a relaxed plan;
* sensitivity: ``eqx.filter_grad`` with respect to the system or the model;
* sweeps: ``jax.vmap(cost)`` over stacked plans (or ``eqx.filter_vmap`` over stacked systems).
"""

import typing

from ._core.lazy import lazy_exports
from ._core.version import VERSION
from ._core.xla import configure_xla

configure_xla()  # before any JAX computation (it imports no JAX): see diffcost/_core/xla.py

__version__ = VERSION

if typing.TYPE_CHECKING:  # the real imports, for type checkers; at run time: lazy_exports
    from ._analysis.calibrate import calibrate
    from ._analysis.plans import load_measurements, load_scenario, load_spec
    from ._analysis.sensitivity import (
        Sensitivity,
        sensitivity,
        serve_sensitivity,
        train_sensitivity,
    )
    from ._analysis.sweep import Sweep, SweepResult, load_sweep, run_sweep
    from ._analysis.validate import validate
    from ._codesign import (
        ChipDesign,
        CodesignResult,
        codesign,
        design_chip,
        design_system,
        load_technology,
    )
    from ._core.errors import Infeasible, Problem, SpecError
    from ._core.options import (
        Format,
        Optimizer,
        Recompute,
        ServeMode,
        ServeObjective,
        TrainObjective,
        TrainPrecision,
        ZeroStage,
    )
    from ._core.predictor import Predictor
    from ._core.smooth import EXACT, RELAXED, Smoothing
    from ._inputs.hardware import BYTES_PER_ELEMENT, FORMATS, Chip, ChipEnergy, Efficiency, System
    from ._inputs.loader import (
        Spec,
        SpecInfo,
        builtin_names,
        load_chip,
        load_model,
        load_system,
        specs_dir,
    )
    from ._inputs.measurements import Measurement
    from ._inputs.model import Model
    from ._inputs.scenario import Scenario
    from ._search.core import SearchResult
    from ._search.serve import ServeSearchSpace, search_serve
    from ._search.train import TrainSearchSpace, search_train
    from ._serve.caps import SchedulerCaps, capped_plan, engine_caps
    from ._serve.cost import ServeBreakdown, ServeCost, serve_problems
    from ._serve.load import LoadBreakdown, Workload, under_load, workload
    from ._serve.plan import MODES, ServePlan, serve_plan
    from ._terms.collectives import COLLECTIVES, AbstractCollective, with_collective
    from ._train.cost import TrainBreakdown, TrainCost
    from ._train.memory import TrainMemory
    from ._train.plan import OPTIMIZER_BYTES, RECOMPUTE, ZERO_STAGES, TrainPlan, train_plan
    from ._train.problems import train_problems

#: ``import diffcost`` imports none of the names above (that would import JAX, Equinox, Optax and
#: pandas: ~2 s); the first use of a name imports its module, as the block above says
#: (PEP 562 ``__getattr__``, diffcost/_core/lazy.py), and keeps the value in the namespace.
__getattr__, __dir__, _where = lazy_exports(globals())

__all__ = [
    "AbstractCollective",
    "COLLECTIVES",
    "with_collective",
    "LoadBreakdown",
    "Workload",
    "under_load",
    "workload",
    "SchedulerCaps",
    "capped_plan",
    "engine_caps",
    "Format",
    "Optimizer",
    "Recompute",
    "ServeMode",
    "ServeObjective",
    "TrainObjective",
    "TrainPrecision",
    "ZeroStage",
    "builtin_names",
    "BYTES_PER_ELEMENT",
    "calibrate",
    "Chip",
    "ChipEnergy",
    "ChipDesign",
    "CodesignResult",
    "codesign",
    "design_chip",
    "design_system",
    "load_technology",
    "Efficiency",
    "EXACT",
    "FORMATS",
    "Infeasible",
    "load_chip",
    "load_measurements",
    "load_model",
    "load_scenario",
    "load_spec",
    "load_sweep",
    "load_system",
    "Measurement",
    "Model",
    "MODES",
    "OPTIMIZER_BYTES",
    "Problem",
    "RECOMPUTE",
    "RELAXED",
    "run_sweep",
    "Scenario",
    "search_serve",
    "search_train",
    "SearchResult",
    "Sensitivity",
    "sensitivity",
    "serve_plan",
    "serve_problems",
    "serve_sensitivity",
    "ServeBreakdown",
    "ServeCost",
    "ServePlan",
    "ServeSearchSpace",
    "Smoothing",
    "Spec",
    "SpecError",
    "SpecInfo",
    "specs_dir",
    "Sweep",
    "SweepResult",
    "System",
    "train_plan",
    "train_problems",
    "train_sensitivity",
    "TrainBreakdown",
    "TrainCost",
    "Predictor",
    "TrainMemory",
    "TrainPlan",
    "TrainSearchSpace",
    "validate",
    "ZERO_STAGES",
]
