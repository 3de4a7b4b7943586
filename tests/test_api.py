"""The curated public API is pinned: additions and removals are deliberate."""

import diffcost

PUBLIC = {
    "BYTES_PER_ELEMENT", "Chip", "EXACT", "Efficiency", "FORMATS", "Infeasible", "Model",
    "OPTIMIZER_BYTES", "Problem", "RECOMPUTE", "RELAXED", "Scenario", "Smoothing", "Spec",
    "SpecError", "SpecInfo", "System", "TrainBreakdown", "TrainCost", "TrainMemory", "TrainPlan",
    "ZERO_STAGES", "builtin_names", "load_chip", "load_model", "load_scenario", "load_spec",
    "load_system", "specs_dir", "train_plan", "train_problems",
    "MODES", "SearchResult", "ServeBreakdown", "ServeCost", "ServePlan", "ServeSearchSpace",
    "TrainSearchSpace", "search_serve", "search_train", "serve_plan", "serve_problems",
}


def test_public_api_is_pinned():
    assert set(diffcost.__all__) == PUBLIC
    for name in diffcost.__all__:
        assert hasattr(diffcost, name), name
