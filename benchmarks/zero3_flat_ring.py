"""ZeRO-3 at scale (issue 42): the SC'21 Table 2 runs against two laws of their collectives.

Run: python benchmarks/zero3_flat_ring.py

For every point of ``specs/measurements/megatron-sc21-zero3.toml`` (DeepSpeed ZeRO-3, no
model parallelism, 384-2,240 A100 at a fixed global batch), prints the measured tokens/s and
the prediction with the system's default collective (a ring inside each node and rings between
nodes, one channel per NIC: each NIC carries ``1/8`` of its GPU's gathered bytes) and with one
flat ring (every GPU's ``(n-1)/n`` of the bytes through its own NIC,
:class:`diffcost._terms.collectives.Ring`).  With the tensor and pipeline degrees 1, the
ZeRO-3 gathers and reduce-scatters are the only collectives of these plans, so the second
column isolates that one law.  A diagnostic, not a change of the cost model.
"""

import diffcost as dc
from diffcost import load_measurements


def main() -> None:
    points = [m for m in load_measurements() if m.source == "megatron-sc21-zero3"]
    print(f"{'point':<46} {'measured':>9} {'default':>16} {'flat ring':>16}")
    for m in points:
        model = dc.load_model(m.model)
        plan = dc.train_plan(**{k: v for k, v in m.plan.items()})
        row = [f"{m.id:<46} {m.measured:>9,.0f}"]
        for collective in ("fastest", "ring"):
            system = dc.with_collective(dc.load_system(m.system, chips=m.chips), collective)
            tokens = float(dc.TrainCost(system, model)(plan).tokens_per_s)
            row.append(f"{tokens:>9,.0f} ({tokens / m.measured - 1:+.0%})")
        print(" ".join(row))


if __name__ == "__main__":
    main()
