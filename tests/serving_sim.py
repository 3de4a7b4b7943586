"""A discrete-event simulation of the continuous-batching scheduler that
``diffcost._serve.load`` approximates analytically: the oracle of tests/test_serve_load.py.

SimPy (https://simpy.readthedocs.io) runs two processes: Poisson arrivals, and an engine that
repeats iterations.  Each iteration decodes one token of every running sequence whose prompt is
done, spends the rest of the ``prefill_chunk`` token budget on prompts first come first served
(running ones first, then admitting waiting requests while fewer than ``batch`` run), and lasts
the cost model's time of that composition (``iteration_s``, tabulated over decode and prompt
tokens and interpolated bilinearly).  The iteration that finishes a prompt emits its first
token (TTFT); a request ends after ``output_len`` tokens.
"""

from collections import deque
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import simpy

from diffcost.testing import iteration_s


@dataclass
class Request:
    arrival: float
    prefill_left: float
    out_left: int
    first: float = -1.0


class IterationTable:
    """``iteration_s`` on a grid of decode tokens (0..batch) x prompt tokens (0..chunk)."""

    def __init__(self, system, model, plan, prompt_points: int = 33):
        self.decode = np.arange(0.0, float(plan.batch) + 1.0)
        self.prompt = np.linspace(0.0, float(plan.prefill_chunk), prompt_points)
        d, p = np.meshgrid(self.decode, self.prompt, indexing="ij")
        fn = jax.jit(jax.vmap(lambda a, b: iteration_s(system, model, plan, a, b, _exact())))
        self.table = np.asarray(fn(jnp.asarray(d.ravel()), jnp.asarray(p.ravel()))).reshape(d.shape)

    def __call__(self, decode: float, prompt: float) -> float:
        i = int(min(decode, self.decode[-1]))
        x = np.interp(prompt, self.prompt, self.table[i])
        return float(x)


def _exact():
    from diffcost import EXACT

    return EXACT


def simulate(table, plan, rate: float, requests: int, seed: int = 0, input_cv: float = 0.0):
    """TTFT and TPOT (seconds, numpy arrays over the requests after a 10% warm-up)."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    n_in, n_out = float(plan.input_len), int(plan.output_len)
    chunk, cap = float(plan.prefill_chunk), int(plan.batch)
    waiting: deque[Request] = deque()
    running: list[Request] = []
    done: list[Request] = []
    finish: dict[int, float] = {}
    wake = {"event": env.event()}

    def arrivals():
        for _ in range(requests):
            yield env.timeout(rng.exponential(1.0 / rate))
            length = (
                n_in if input_cv == 0 else max(1.0, rng.gamma(1 / input_cv**2, n_in * input_cv**2))
            )
            waiting.append(Request(env.now, round(length), n_out))
            if not wake["event"].triggered:
                wake["event"].succeed()

    def engine():
        while len(done) < requests:
            if not running and not waiting:
                wake["event"] = env.event()
                yield wake["event"]
                continue
            decoding = [r for r in running if r.prefill_left == 0]
            budget = chunk - len(decoding)
            work: list[tuple[Request, float]] = []
            for r in running:
                if r.prefill_left > 0 and budget > 0:
                    take = min(r.prefill_left, budget)
                    work.append((r, take))
                    budget -= take
            while waiting and len(running) < cap and budget > 0:
                r = waiting.popleft()
                running.append(r)
                take = min(r.prefill_left, budget)
                work.append((r, take))
                budget -= take
            prompt = sum(take for _, take in work)
            yield env.timeout(table(len(decoding), prompt))
            for r in decoding:
                r.out_left -= 1
            for r, take in work:
                r.prefill_left -= take
                if r.prefill_left == 0:
                    r.first = env.now
                    r.out_left -= 1
            for r in [r for r in running if r.out_left == 0]:
                running.remove(r)
                done.append(r)
                finish[id(r)] = env.now

    env.process(arrivals())
    env.process(engine())
    env.run()
    kept = sorted(done, key=lambda r: r.arrival)[requests // 10 :]
    ttft = np.asarray([r.first - r.arrival for r in kept])
    tpot = np.asarray([(finish[id(r)] - r.first) / max(n_out - 1, 1) for r in kept])
    return ttft, tpot
