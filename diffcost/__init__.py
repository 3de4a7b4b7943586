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
from ._serve import ServeBreakdown, ServeCost, serve_problems
from ._serve_plan import MODES, ServePlan, serve_plan
from ._serve_search import ServeSearchSpace, search_serve
from ._smooth import EXACT, RELAXED, Smoothing
from ._train import TrainBreakdown, TrainCost
from ._train_search import TrainSearchSpace, search_train
from ._validate import validate

__version__ = "0.1.0"

__all__ = [
    "BYTES_PER_ELEMENT",
    "Chip",
    "EXACT",
    "Efficiency",
    "FORMATS",
    "Infeasible",
    "MODES",
    "Measurement",
    "Model",
    "OPTIMIZER_BYTES",
    "Problem",
    "RECOMPUTE",
    "RELAXED",
    "Scenario",
    "SearchResult",
    "ServeBreakdown",
    "ServeCost",
    "ServePlan",
    "ServeSearchSpace",
    "Smoothing",
    "Spec",
    "SpecError",
    "SpecInfo",
    "System",
    "TrainBreakdown",
    "TrainCost",
    "TrainMemory",
    "TrainPlan",
    "TrainSearchSpace",
    "ZERO_STAGES",
    "builtin_names",
    "calibrate",
    "load_chip",
    "load_measurements",
    "load_model",
    "load_scenario",
    "load_spec",
    "load_system",
    "search_serve",
    "search_train",
    "serve_plan",
    "serve_problems",
    "specs_dir",
    "train_plan",
    "train_problems",
    "validate",
]
