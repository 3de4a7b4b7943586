"""Board power of a real accelerator by activity (issue 16): the activity energy model's constants
(idle power, J/FLOP, J/byte) measured on the chip itself, not inferred from its TDP.

Run (on an NVIDIA GPU machine; needs ``nvidia-ml-py``):
``python benchmarks/power_check.py --out power.json``, then here
``python benchmarks/power_check.py --analyse power.json --chip h100-sxm`` (writes
``benchmarks/results/power-check-<chip>.txt``).

Each phase runs one jitted kernel back to back for ``--seconds`` and reads the board's energy
counter (NVML ``nvmlDeviceGetTotalEnergyConsumption``, mJ) before and after it, so the phase power
is exact energy over wall time, not a sampled reading; power and SM clock are also sampled every
0.1 s (their mean over the last three quarters of the phase is recorded).  Phases: idle (context
alive, nothing running), a busy-but-empty kernel (a 1 MiB elementwise chain that stays in L2:
clock and issue power with no HBM traffic and no tensor work), dense matrix products (bf16 on
random data and on zeros, three sizes, int8, fp8), decode-shaped products ((b, 8192) @ (8192,
32768) bf16, b = 1 .. 256: the weights stream from HBM) and HBM streams (a copy and a read-only
reduction).  FLOP and DRAM bytes per call are counted from the shapes (each product's output row
sums are read back once).

The analysis subtracts each run's busy floor (``busy_l2``) and divides the excess power by the
work rate (J/FLOP of a product, J/bit of a stream: the whole excess charged to one activity),
and fits ``excess = e_flop FLOP/s + e_bit bit/s`` by least squares over the unthrottled
tensor-core phases (:data:`FIT_PHASES`), next to the chip spec's ``[energy]`` constants.
"""

import argparse
import json
import threading
import time
import tomllib
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _nvml() -> Any:
    import pynvml  # pyright: ignore[reportMissingImports]  (only on the GPU machine)

    pynvml.nvmlInit()
    return pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)


def _product(m: int, dtype: Any, acc: Any, reps: int, zeros: bool = False) -> Any:
    """A dependent chain of ``reps`` (m, m) @ (m, m) products (row sums read back once)."""
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(0)
    if zeros:
        a = jnp.zeros((m, m), dtype)
    elif dtype == jnp.int8:
        a = jax.random.randint(key, (m, m), -8, 8, dtype)
    else:
        a = jax.random.normal(key, (m, m)).astype(dtype)

    @jax.jit
    def fn(x, y):
        def body(_, v):
            c = jnp.dot(v, y, preferred_element_type=acc)
            s = jnp.sum(c, axis=1, keepdims=True, dtype=acc)
            return v + (s > 0).astype(v.dtype)  # a dependent chain: no product is skipped

        return jax.lax.fori_loop(0, reps, body, x)

    size, acc_size = jnp.dtype(dtype).itemsize, jnp.dtype(acc).itemsize
    bytes_ = reps * (3 * m * m * size + 2 * m * m * acc_size)
    return fn, (a, a.T), reps * 2.0 * m**3, float(bytes_)


def _stream(n_bytes: int, reps: int, read_only: bool) -> Any:
    """An HBM copy (one pass per call: XLA fuses a loop of copies into one pass) or ``reps``
    read-only reductions of ``n_bytes``."""
    import jax
    import jax.numpy as jnp

    x = jnp.ones((n_bytes // 2,), jnp.bfloat16)
    if not read_only:
        return jax.jit(lambda v: v * 1.0001), (x,), 0.0, float(2 * n_bytes)

    @jax.jit
    def fn(v):
        def read(_, acc):  # depends on acc, so the read is not hoisted out of the loop
            return acc + jnp.sum(v * (1 + acc * 1e-30).astype(v.dtype), dtype=jnp.float32)

        return jax.lax.fori_loop(0, reps, read, jnp.float32(0))

    return fn, (x,), 0.0, float(reps * n_bytes)


def _decode(batch: int, k: int, n: int, reps: int) -> Any:
    """A decode step's weight stream: (batch, k) @ (k, n) bf16, the weights read from HBM."""
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(0)
    w = jax.random.normal(key, (k, n)).astype(jnp.bfloat16)
    x = jax.random.normal(key, (batch, k)).astype(jnp.bfloat16)

    @jax.jit
    def fn(v, y):
        def body(_, u):
            c = jnp.dot(u, y, preferred_element_type=jnp.float32)
            return u + (jnp.sum(c, axis=1, keepdims=True) > 0).astype(u.dtype)

        return jax.lax.fori_loop(0, reps, body, v)

    return fn, (x, w), reps * 2.0 * batch * k * n, float(reps * 2 * k * n)


def _tiny(reps: int) -> Any:
    """A busy-but-empty chain: 1 MiB elementwise passes that stay in L2."""
    import jax
    import jax.numpy as jnp

    x = jnp.ones((2**19,), jnp.bfloat16)
    fn = jax.jit(lambda v: jax.lax.fori_loop(0, reps, lambda _, u: u * 1.0001, v))
    return fn, (x,), 0.0, 0.0


#: Rows of the decode-shaped products (the batch of a decode step).
DECODE_ROWS = (16, 1, 4, 64, 128, 256)


def _kernels(scale: int = 1) -> dict[str, Any]:
    """name -> a builder of (jitted fn, args, FLOP per call, DRAM bytes per call), called only
    for the phases that run (``--only``: the others' arrays are never allocated); sizes divided
    by ``scale`` (a smoke run on a CPU)."""
    import jax.numpy as jnp

    s, p = scale, partial
    return {
        "bf16_8192": p(_product, 8192 // s, jnp.bfloat16, jnp.float32, 64),
        "bf16_8192_zeros": p(_product, 8192 // s, jnp.bfloat16, jnp.float32, 64, zeros=True),
        "bf16_2048": p(_product, 2048 // s, jnp.bfloat16, jnp.float32, 2048 // s),
        "int8_8192": p(_product, 8192 // s, jnp.int8, jnp.int32, 64),
        "hbm_copy": p(_stream, 2**32 // s**3, 24, read_only=False),
        "hbm_read": p(_stream, 2**32 // s**3, 24, read_only=True),
        "busy_l2": p(_tiny, 20000 // s),
        "bf16_4096": p(_product, 4096 // s, jnp.bfloat16, jnp.float32, 512),
        "fp8_8192": p(_product, 8192 // s, jnp.float8_e4m3fn, jnp.bfloat16, 64),
        **{
            f"decode_b{b}": p(_decode, b, 8192 // s, 32768 // s, 256)
            for b in (16, 1, 4, 64, 128, 256)
        },
    }


def _energy_mj(nv: Any, handle: Any) -> float:
    try:
        return float(nv.nvmlDeviceGetTotalEnergyConsumption(handle))
    except Exception:  # no energy counter: the sampled mean is used instead
        return float("nan")


def _phase(nv: Any, handle: Any, fn: Any, args: tuple, seconds: float) -> dict[str, float]:
    """Run ``fn`` back to back for ``seconds``: counter power, sampled power and SM clock."""
    import jax

    for _ in range(2):
        jax.block_until_ready(fn(*args))
    samples: list[tuple[float, float]] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.wait(0.1):
            clock = float(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM))
            samples.append((nv.nvmlDeviceGetPowerUsage(handle) / 1e3, clock))

    thread = threading.Thread(target=probe)
    e0, t0 = _energy_mj(nv, handle), time.perf_counter()
    thread.start()
    calls = 0
    while time.perf_counter() - t0 < seconds or calls == 0:
        jax.block_until_ready(fn(*args))
        calls += 1
    e1, t1 = _energy_mj(nv, handle), time.perf_counter()
    stop.set()
    thread.join()
    late = samples[len(samples) // 4 :] or [(float("nan"), float("nan"))]
    return {
        "calls": calls,
        "wall_s": t1 - t0,
        "power_w": (e1 - e0) / 1e3 / (t1 - t0),
        "power_w_sampled": sum(p for p, _ in late) / len(late),
        "sm_clock_mhz": sum(c for _, c in late) / len(late),
    }


class _FakeNvml:
    """A stand-in for NVML so that ``--smoke`` exercises every kernel on a CPU."""

    NVML_CLOCK_SM = 0

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def nvmlDeviceGetTotalEnergyConsumption(self, _: Any) -> float:
        return 100.0 * 1e3 * (time.perf_counter() - self.t0)

    def nvmlDeviceGetPowerUsage(self, _: Any) -> float:
        return 100.0e3

    def nvmlDeviceGetClockInfo(self, _: Any, __: Any) -> int:
        return 1000

    def nvmlDeviceGetName(self, _: Any) -> str:
        return "fake"

    def nvmlDeviceGetPowerManagementLimit(self, _: Any) -> float:
        return 700e3


def measure(out: str, seconds: float, smoke: bool = False, only: str = "") -> None:
    """Run every phase on GPU 0 and write the readings (JSON); ``smoke``: small sizes, fake NVML."""
    import jax

    nv, handle = (_FakeNvml(), None) if smoke else _nvml()
    result: dict[str, Any] = {
        "device": str(jax.devices()[0]),
        "name": nv.nvmlDeviceGetName(handle),
        "power_limit_w": nv.nvmlDeviceGetPowerManagementLimit(handle) / 1e3,
        "phases": {},
    }
    e0, t0 = _energy_mj(nv, handle), time.perf_counter()
    time.sleep(seconds)
    idle = (_energy_mj(nv, handle) - e0) / 1e3 / (time.perf_counter() - t0)
    if idle != idle:  # no energy counter
        idle = nv.nvmlDeviceGetPowerUsage(handle) / 1e3
    result["phases"]["idle"] = {"power_w": idle, "flop_per_s": 0.0, "bytes_per_s": 0.0}
    print(json.dumps({"idle": idle}), flush=True)
    for name, build in _kernels(16 if smoke else 1).items():
        if only and name not in only.split(","):
            continue
        try:
            fn, args, flop, bytes_ = build()
            row = _phase(nv, handle, fn, args, seconds)
        except Exception as err:  # a kernel this stack cannot run is recorded, not fatal
            result["phases"][name] = {"error": repr(err)[:300]}
            continue
        if row["power_w"] != row["power_w"]:
            row["power_w"] = row["power_w_sampled"]
        row["flop_per_s"] = row["calls"] * flop / row["wall_s"]
        row["bytes_per_s"] = row["calls"] * bytes_ / row["wall_s"]
        result["phases"][name] = row
        print(json.dumps({name: row}), flush=True)
    Path(out).write_text(json.dumps(result, indent=1))


def _rows(run: dict[str, Any]) -> list[str]:
    """One line per phase of one run: power, power above the run's busy floor (``busy_l2``:
    clocks up, no tensor work, no DRAM traffic), rates and the energy per FLOP / per bit."""
    phases = run["phases"]
    floor = phases.get("busy_l2", phases["idle"])["power_w"]
    lines = []
    for name, row in phases.items():
        if "error" in row:
            lines.append(f"{name:16s} not run: {row['error'][:80]}")
            continue
        excess = row["power_w"] - floor
        pj_flop = excess / row["flop_per_s"] * 1e12 if row["flop_per_s"] else float("nan")
        pj_bit = excess / (8 * row["bytes_per_s"]) * 1e12 if row["bytes_per_s"] else float("nan")
        lines.append(
            f"{name:16s} {row['power_w']:7.1f} {excess:9.1f} {row['flop_per_s'] / 1e12:8.1f} "
            f"{row['bytes_per_s'] / 1e12:6.2f} {row.get('sm_clock_mhz', float('nan')):7.0f} "
            f"{pj_flop:8.3f} {pj_bit:7.2f}"
        )
    return lines


#: Tensor-core phases at full clock (1980 MHz, below the power limit): the fit of J/FLOP and J/bit.
FIT_PHASES = ("decode_b4", "decode_b16", "decode_b64")


def fit(runs: list[dict[str, Any]]) -> tuple[float, float, int]:
    """Least squares ``P - floor = e_flop * FLOP/s + e_bit * bit/s`` over :data:`FIT_PHASES` of
    every run (floor = the run's ``busy_l2`` power): (pJ/FLOP, pJ/bit, phases used)."""
    import numpy as np

    rows, excess = [], []
    for run in runs:
        floor = run["phases"]["busy_l2"]["power_w"]
        for name in FIT_PHASES:
            row = run["phases"].get(name, {})
            if "power_w" in row:
                rows.append([row["flop_per_s"], 8.0 * row["bytes_per_s"]])
                excess.append(row["power_w"] - floor)
    coef = np.linalg.lstsq(np.asarray(rows), np.asarray(excess), rcond=None)[0]
    return float(coef[0]) * 1e12, float(coef[1]) * 1e12, len(rows)


def analyse(path: str, chip: str) -> str:
    """The measured per-activity energies of every run in ``path`` (one run's JSON, or
    ``{"runs": [...]}``) next to the chip spec's [energy] constants."""
    data = json.loads(Path(path).read_text())
    runs = data.get("runs", [data])
    spec = tomllib.loads((ROOT / "specs" / "chips" / f"{chip}.toml").read_text())["energy"]
    lines = [
        f"# {runs[0]['name']}, power limit {runs[0]['power_limit_w']:.0f} W; measured with "
        f"python benchmarks/power_check.py (readings: {Path(path).name})",
        "# above floor = power - the run's busy_l2 power (clocks up, no tensor work, no DRAM); "
        "pJ/FLOP and pJ/bit = that excess / the phase's FLOP or DRAM-bit rate (the whole excess "
        "charged to one activity)",
    ]
    for i, run in enumerate(runs):
        lines.append(f"## run {i + 1}: {run.get('command', '')}")
        lines.append(
            f"{'phase':16s} {'P W':>7s} {'above fl':>9s} {'TFLOP/s':>8s} {'TB/s':>6s} "
            f"{'SM MHz':>7s} {'pJ/FLOP':>8s} {'pJ/bit':>7s}"
        )
        lines.extend(_rows(run))
    pj_flop, pj_bit, n = fit(runs)
    floors = [run["phases"]["busy_l2"]["power_w"] for run in runs]
    lines.append(
        f"fit over {n} unthrottled tensor-core phases ({', '.join(FIT_PHASES)}): "
        f"{pj_flop:.3f} pJ/FLOP, {pj_bit:.2f} pJ/bit; running floor (busy_l2) "
        f"{', '.join(f'{f:.1f}' for f in floors)} W, mean {sum(floors) / len(floors):.1f} W"
    )
    lines.append(
        f"spec [energy]: idle {spec['idle_w']} W, bf16 {spec['bf16_pj_per_flop']} pJ/FLOP, int8 "
        f"{spec['int8_pj_per_flop']}, fp8 {spec['fp8_pj_per_flop']} pJ/FLOP, memory "
        f"{spec['memory_pj_per_bit']} pJ/bit"
    )
    text = "\n".join(lines) + "\n"
    (ROOT / "benchmarks" / "results" / f"power-check-{chip}.txt").write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="power.json")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--analyse", default="", help="a power.json to analyse (here, no GPU)")
    parser.add_argument("--chip", default="h100-sxm")
    parser.add_argument("--smoke", action="store_true", help="small sizes, fake NVML (a CPU)")
    parser.add_argument("--only", default="", help="comma-separated phases (default: all)")
    args = parser.parse_args()
    if args.analyse:
        print(analyse(args.analyse, args.chip))
    else:
        measure(args.out, args.seconds, args.smoke, args.only)


if __name__ == "__main__":
    main()
