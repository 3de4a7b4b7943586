"""Searched training plans: the memory the search charged, the memory Megatron-LM allocates for the
emitted line (read back with :func:`diffcost._launch.megatron.allocated`), and for the same line
without ``--grad-reduce-in-bf16`` (Megatron then keeps fp32 main gradients: the lines before
issue 15).

Run: ``python benchmarks/launch_memory.py`` (results: ``benchmarks/results/launch-memory.txt``).
"""

import diffcost as dc
from diffcost._inputs.loader import load_spec
from diffcost._launch import megatron_launch, train_launch_plan
from diffcost._launch.megatron import allocated
from diffcost._search.train import TrainSearchSpace, search_train
from diffcost._train.cost import TrainCost
from diffcost._train.plan import TRAIN_FIELDS

FIELDS = {f.name for f in TRAIN_FIELDS}
CASES = [
    ("llama-3-70b", "dgx-h100", 64, 512, 4096),
    ("llama-3-8b", "dgx-h100", 8, 64, 4096),
    ("mixtral-8x7b", "dgx-h100", 16, 128, 4096),
    ("gpt3-175b", "dgx-a100", 1024, 1536, 2048),
    ("llama-3-405b", "dgx-h100", 1024, 2048, 4096),
]


def main() -> None:
    """Print one line per searched plan (best and three runners-up of each case)."""
    for model, system, chips, batch, seq in CASES:
        s, m = dc.load_system(system, chips=chips), dc.load_model(model)
        space = TrainSearchSpace(global_batch=batch, seq_len=seq, chips=(chips,), max_cp=8)
        result = search_train(s, m, space)
        result.keep(4)
        spec = load_spec("model", model).values
        rows = result.rows()
        for row, charged in zip(rows, result.breakdowns, strict=True):
            line = megatron_launch(train_launch_plan(row, space), m, spec, 8)
            back = {k: v for k, v in allocated(line).items() if k in FIELDS}
            new = TrainCost(s, m)(dc.train_plan(dp=row["dp"], **back))
            old_plan = dc.train_plan(dp=row["dp"], **{**back, "grad_bytes_per_param": 4.0})
            old = float(TrainCost(s, m)(old_plan).memory.total_bytes)
            cap = float(new.capacity_bytes)
            layout = f"z{row['zero']} tp{row['tp']} pp{row['pp']} cp{row['cp']}"
            print(
                f"{model:13s} {chips:5d} {layout} mb{row['micro_batch']} charged "
                f"{float(charged.memory.total_bytes) / 1e9:6.1f} GB | new line "
                f"{float(new.memory.total_bytes) / 1e9:6.1f} | old line (fp32 grads) "
                f"{old / 1e9:6.1f} {'FITS' if old <= cap else 'OOM'} / cap {cap / 1e9:.1f}"
            )


if __name__ == "__main__":
    main()
