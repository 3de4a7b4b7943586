"""A discrete-event simulation of the continuous-batching scheduler that
``diffcost._serve.load`` (open loop) and the continuous serving mode (closed loop,
:func:`diffcost._serve.modes.continuous_mode`) approximate analytically: the oracle of
tests/test_serve_load.py and tests/test_serve_closed_loop.py.

SimPy (https://simpy.readthedocs.io) runs two processes: arrivals (Poisson, :func:`simulate`
and, prompts done elsewhere, :func:`decode_pool`, or a closed loop of clients,
:func:`closed_loop`), and an engine that repeats iterations.
Each iteration decodes one token of every running sequence whose prompt is done, spends the
rest of the ``prefill_chunk`` token budget on prompts first come first served (running ones
first, then admitting waiting requests while fewer than ``batch`` run), and lasts the cost
model's time of that composition (``iteration_s``, tabulated over decode and prompt tokens and
interpolated bilinearly).  The iteration that finishes a prompt emits its first token (TTFT); a
request ends after ``output_len`` tokens.
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


class _Engine:
    """The scheduler (module docstring): a SimPy process serving ``waiting`` requests; each
    finished request is passed to ``on_done``."""

    def __init__(self, env, table, plan, on_done=None, mixed: bool = True):
        self.env, self.table, self.mixed = env, table, mixed
        self.chunk, self.cap = float(plan.prefill_chunk), int(plan.batch)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.done: list[Request] = []
        self.finish: dict[int, float] = {}
        self.on_done = on_done
        self.wake = env.event()

    def submit(self, r: Request) -> None:
        self.waiting.append(r)
        if not self.wake.triggered:
            self.wake.succeed()

    def run(self, requests: int):
        env, running, waiting = self.env, self.running, self.waiting
        while len(self.done) < requests:
            if not running and not waiting:
                self.wake = env.event()
                yield self.wake
                continue
            decoding = [r for r in running if r.prefill_left == 0]
            budget = self.chunk - (len(decoding) if self.mixed else 0)
            work: list[tuple[Request, float]] = []
            for r in running:
                if r.prefill_left > 0 and budget > 0:
                    take = min(r.prefill_left, budget)
                    work.append((r, take))
                    budget -= take
            while waiting and len(running) < self.cap and budget > 0:
                r = waiting.popleft()
                running.append(r)
                take = min(r.prefill_left, budget)
                work.append((r, take))
                budget -= take
            prompt = sum(take for _, take in work)
            if not self.mixed and work:  # a prefill-only iteration: the decodes wait
                decoding = []
            yield env.timeout(self.table(len(decoding), prompt))
            for r in decoding:
                r.out_left -= 1
            for r, take in work:
                r.prefill_left -= take
                if r.prefill_left == 0:
                    r.first = env.now
                    r.out_left -= 1
            for r in [r for r in running if r.out_left == 0]:
                running.remove(r)
                self.done.append(r)
                self.finish[id(r)] = env.now
                if self.on_done is not None:
                    self.on_done()

    def latencies(self, kept: list[Request], n_out: int):
        ttft = np.asarray([r.first - r.arrival for r in kept])
        tpot = np.asarray([(self.finish[id(r)] - r.first) / max(n_out - 1, 1) for r in kept])
        return ttft, tpot


def simulate(
    table,
    plan,
    rate: float,
    requests: int,
    seed: int = 0,
    input_cv: float = 0.0,
    mixed: bool = True,
):
    """TTFT and TPOT (seconds, numpy arrays over the requests after a 10% warm-up) of Poisson
    arrivals at ``rate`` requests/s (an open loop).  ``mixed`` False: an engine of
    prefill-only iterations (SGLang's default, vLLM V0 without chunked prefill): while prompt
    tokens wait, an iteration carries only them (up to the whole budget) and the decodes
    wait; otherwise it decodes."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    n_in, n_out = float(plan.input_len), int(plan.output_len)
    engine = _Engine(env, table, plan, mixed=mixed)

    def arrivals():
        for _ in range(requests):
            yield env.timeout(rng.exponential(1.0 / rate))
            length = (
                n_in if input_cv == 0 else max(1.0, rng.gamma(1 / input_cv**2, n_in * input_cv**2))
            )
            engine.submit(Request(env.now, round(length), n_out))

    env.process(arrivals())
    env.process(engine.run(requests))
    env.run()
    kept = sorted(engine.done, key=lambda r: r.arrival)[requests // 10 :]
    return engine.latencies(kept, n_out)


def decode_pool(table, plan, rate: float, requests: int, seed: int = 0):
    """TPOT (seconds, numpy array over the requests after a 10% warm-up) of a decode instance
    of a disaggregated deployment: requests arrive (Poisson at ``rate``) with their prompt
    already done elsewhere, so every iteration is decode-only."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    engine = _Engine(env, table, plan)

    def arrivals():
        for _ in range(requests):
            yield env.timeout(rng.exponential(1.0 / rate))
            engine.submit(Request(env.now, 0.0, int(plan.output_len)))

    env.process(arrivals())
    env.process(engine.run(requests))
    env.run()
    kept = sorted(engine.done, key=lambda r: r.arrival)[requests // 10 :]
    return engine.latencies(kept, int(plan.output_len))[1]


def closed_loop(table, plan, requests: int, spread_s: float = 0.0, seed: int = 0):
    """TTFT and TPOT (seconds, numpy arrays) of a closed loop of ``plan.batch`` clients, as
    concurrency benchmarks run one (AIPerf / GenAI-Perf ``--concurrency``, vLLM ``bench serve
    --max-concurrency``): every client sends its first request at a time drawn uniformly from
    ``[0, spread_s]`` (0: all at once, as those benchmarks start) and its next one the moment
    the last ends; ``requests`` in all, the first ``2 batch`` of them dropped as the warm-up."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    n_in, n_out, clients = float(plan.input_len), int(plan.output_len), int(plan.batch)
    sent = [0]

    def send() -> None:
        if sent[0] < requests:
            sent[0] += 1
            engine.submit(Request(env.now, n_in, n_out))

    def start(delay: float):
        yield env.timeout(delay)
        send()

    engine = _Engine(env, table, plan, on_done=send)
    for _ in range(clients):
        if spread_s > 0:
            env.process(start(rng.uniform(0.0, spread_s)))
        else:
            send()
    env.process(engine.run(requests))
    env.run()
    kept = sorted(engine.done, key=lambda r: r.arrival)[2 * clients :]
    return engine.latencies(kept, n_out)
