"""A cost model compiled once for repeated single-plan predictions.

Calling a cost model through ``eqx.filter_jit`` flattens the system, the model and the plan
(hundreds of leaves) and copies each of the ~40 outputs back on every call: 150-600 us a
prediction on a CPU.  A :class:`Predictor` closes over the cost model (its numbers become
constants of one compiled program), takes the plan as one packed vector and returns every
output as one packed vector: about 50 us a prediction including the host copy
(``benchmarks/headline.py``).
"""

from typing import Any

import jax
import numpy as np
from jax.flatten_util import ravel_pytree


class Predictor:
    """Every output of ``cost(plan)`` for plans shaped like ``example`` (same choices and field
    shapes), compiled once.

    ``predictor(plan)`` returns ``{output name: value}`` (names as ``"step_time_s"``,
    ``"memory.weights_bytes"``); the fastest path packs a plan once (:meth:`pack`) and calls
    :meth:`packed`, whose result lines up with :attr:`names`.
    """

    def __init__(self, cost: Any, example: Any):
        flat, self._unravel = ravel_pytree(example)
        self._size, self._dtype = int(flat.size), np.dtype(flat.dtype)
        names: list[str] = []
        for path, leaf in jax.tree_util.tree_flatten_with_path(jax.eval_shape(cost, example))[0]:
            name = jax.tree_util.keystr(path).lstrip(".").replace("['", ".").replace("']", "")
            size = int(np.prod(leaf.shape))
            names += [name] if leaf.shape == () else [f"{name}[{i}]" for i in range(size)]
        self.names: tuple[str, ...] = tuple(names)
        # One plan is too small for an accelerator: its launch and copies cost more than the
        # arithmetic, so the predictor runs on the host's CPU whatever the default device.
        self._cpu = jax.devices("cpu")[0]
        self._on_accelerator = jax.default_backend() != "cpu"
        cost = jax.device_put(cost, self._cpu)
        unravel = self._unravel
        self._fn = jax.jit(lambda x: ravel_pytree(cost(unravel(x)))[0])
        self.packed(np.asarray(flat))  # compile now, not on the first prediction

    def pack(self, plan: Any) -> np.ndarray:
        """A plan as the packed vector :meth:`packed` takes."""
        leaves = jax.tree_util.tree_leaves(plan)
        x = np.concatenate([np.ravel(np.asarray(leaf, dtype=self._dtype)) for leaf in leaves])
        if x.size != self._size:
            raise ValueError(
                f"this plan packs to {x.size} numbers, the compiled one to {self._size}: "
                "build a Predictor for plans of this shape"
            )
        return x

    def packed(self, x: np.ndarray) -> np.ndarray:
        """Every output, packed in the order of :attr:`names` (a host numpy array)."""
        if self._on_accelerator:
            x = jax.device_put(x, self._cpu)
        return np.asarray(self._fn(x))

    def __call__(self, plan: Any) -> dict[str, float]:
        return dict(zip(self.names, self.packed(self.pack(plan)).tolist(), strict=True))
