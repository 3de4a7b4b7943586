"""diffcost: differentiable cost models of training and serving large models on AI hardware.

The three uses are one-liners on a cost model ``cost = TrainCost(system, model)``:

* search: ``jax.grad`` of ``cost(plan).step_time_s`` with respect to a relaxed plan;
* sensitivity: ``eqx.filter_grad`` with respect to the system or the model;
* sweeps: ``jax.vmap(cost)`` over stacked plans (or ``eqx.filter_vmap`` over stacked systems).
"""

from ._calibrate import calibrate
from ._errors import Infeasible, Problem, SpecError
from ._feasibility import train_problems
from ._hardware import BYTES_PER_ELEMENT, FORMATS, Chip, Efficiency, System
from ._loader import (
    Spec,
    SpecInfo,
    builtin_names,
    load_chip,
    load_model,
    load_spec,
    load_system,
    specs_dir,
)
from ._measurements import Measurement, load_measurements
from ._memory import TrainMemory
from ._model import Model
from ._plan import OPTIMIZER_BYTES, RECOMPUTE, ZERO_STAGES, TrainPlan, train_plan
from ._scenario import Scenario, load_scenario
from ._search import SearchResult
from ._sensitivity import Sensitivity, sensitivity, serve_sensitivity, train_sensitivity
from ._serve import ServeBreakdown, ServeCost, serve_problems
from ._serve_plan import MODES, ServePlan, serve_plan
from ._serve_search import ServeSearchSpace, search_serve
from ._smooth import EXACT, RELAXED, Smoothing
from ._sweep import Sweep, SweepResult, load_sweep, run_sweep
from ._train import TrainBreakdown, TrainCost
from ._train_search import TrainSearchSpace, search_train
from ._validate import validate

__version__ = "0.1.0"

__all__ = [
    "builtin_names",
    "BYTES_PER_ELEMENT",
    "calibrate",
    "Chip",
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
    "TrainMemory",
    "TrainPlan",
    "TrainSearchSpace",
    "validate",
    "ZERO_STAGES",
]
