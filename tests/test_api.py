"""The curated public API is pinned: additions and removals are deliberate."""

import diffcost

PUBLIC = {
    # specs and errors
    "BYTES_PER_ELEMENT", "Chip", "ChipEnergy", "Efficiency", "FORMATS", "Infeasible", "Model",
    "Problem", "Spec", "SpecError", "SpecInfo", "System", "builtin_names", "load_chip",
    "load_model", "load_spec", "load_system", "specs_dir", "Scenario", "load_scenario",
    # extension points: collective algorithms
    "AbstractCollective", "COLLECTIVES", "with_collective",
    # hardware co-design
    "ChipDesign", "CodesignResult", "codesign", "design_chip", "design_system", "load_technology",
    # relaxation
    "EXACT", "RELAXED", "Smoothing",
    # repeated single-plan predictions, compiled once
    "Predictor",
    # typed options (library entry points also take their plain values)
    "Format", "Optimizer", "Recompute", "ServeMode", "ServeObjective", "TrainObjective",
    "TrainPrecision", "ZeroStage",
    # training
    "OPTIMIZER_BYTES", "RECOMPUTE", "ZERO_STAGES", "TrainBreakdown", "TrainCost", "TrainMemory",
    "TrainPlan", "train_plan", "train_problems",
    # serving
    "MODES", "ServeBreakdown", "ServeCost", "ServePlan", "serve_plan", "serve_problems",
    # serving under load
    "LoadBreakdown", "Workload", "under_load", "workload",
    "SchedulerCaps", "capped_plan", "engine_caps",
    # search
    "SearchResult", "ServeSearchSpace", "TrainSearchSpace", "search_serve", "search_train",
    # validation and calibration
    "Measurement", "calibrate", "load_measurements", "validate",
    # sensitivity and sweeps
    "Sensitivity", "sensitivity", "serve_sensitivity", "train_sensitivity",
    "Sweep", "SweepResult", "load_sweep", "run_sweep",
}  # fmt: skip


def test_public_api_is_pinned():
    assert set(diffcost.__all__) == PUBLIC
    for name in diffcost.__all__:
        assert hasattr(diffcost, name), name


def test_the_package_says_it_is_typed():
    """PEP 561: the empty ``py.typed`` marker beside ``__init__.py`` tells type checkers to read
    the package's annotations; hatch packs every file of ``diffcost/`` into the wheel (checked
    with ``pip wheel``: ``diffcost/py.typed`` is in it)."""
    from pathlib import Path

    marker = Path(diffcost.__file__).parent / "py.typed"
    assert marker.is_file()
    assert marker.read_bytes() == b""


def test_only_public_jax():
    """JAX's private modules change without notice: the package and its tests use the public API
    only (``jax``, ``jax.extend``, ``jax.config``...)."""
    from pathlib import Path

    root = Path(diffcost.__file__).parent.parent
    private = "jax." + "_src"  # not spelled out: this file would match itself
    found = [
        f"{path.relative_to(root)}:{number}"
        for folder in ("diffcost", "tests", "benchmarks")
        for path in sorted((root / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if private in line
    ]
    assert not found, found
