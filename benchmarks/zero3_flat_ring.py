"""ZeRO-3 at scale (issue 42): the SC'21 Table 2 runs against the cost model.

Run: python benchmarks/zero3_flat_ring.py

For every point of ``specs/measurements/megatron-sc21-zero3.toml`` (DeepSpeed ZeRO-3, no
model parallelism, 384-2,240 A100 at a fixed global batch), prints the measured tokens/s, the
prediction and the seconds of ZeRO-3 communication the step adds.  The cost model runs ZeRO-3's
gathers and reduce-scatters across nodes as one flat ring, every GPU's ``(n-1)/n`` of its bytes
through its own NIC (:func:`diffcost._train.cost.sharded_gather_s`).  Before it charged the
rails' ``1/8`` share per NIC and predicted +48/+133/+322% (174.6B at 384/768/1,536 GPUs) and
+64/+121/+308% (529.6B at 640/1,120/2,240); with the flat ring +26/+20/+23% and +37/+8/+14%.
"""

import diffcost as dc
from diffcost import load_measurements


def main() -> None:
    points = [m for m in load_measurements() if m.source == "megatron-sc21-zero3"]
    print(f"{'point':<46} {'measured':>9} {'predicted':>17} {'ZeRO-3 comm s':>14}")
    for m in points:
        model = dc.load_model(m.model)
        plan = dc.train_plan(**m.plan)
        out = dc.TrainCost(dc.load_system(m.system, chips=m.chips), model)(plan)
        tokens = float(out.tokens_per_s)
        print(
            f"{m.id:<46} {m.measured:>9,.0f} {tokens:>9,.0f} ({tokens / m.measured - 1:+.0%})"
            f" {float(out.dp_comm_time_s):>14.1f}"
        )


if __name__ == "__main__":
    main()
