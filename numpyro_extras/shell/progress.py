"""The one progress bar for work that runs as a sequence of compiled chunks.

A long ``lax.scan`` shows no progress until it returns; split into equal compiled chunks (one
compilation, reused), it can move a tqdm bar between chunks. The annealing driver, the base
fit's variational fits and the learned proposals' pilot chains all run this way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from numpyro_extras.shell.compilation import quick_jit

__all__ = ["run_chunks", "scan_in_chunks"]


def run_chunks(
    run_chunk: Callable,
    carry: Any,
    chunks: Iterable[tuple[Any, int]],
    *,
    total: int,
    description: str,
    progress_bar: bool = True,
    postfix: Callable[[Any], dict] | None = None,
):
    """Run ``run_chunk(carry, inputs)`` chunk after chunk, moving a progress bar.

    :param run_chunk: ``(carry, inputs) -> (carry, outputs)``, typically a jitted scan.
    :param carry: the initial carry.
    :param chunks: ``(inputs, steps)`` per chunk: the chunk's inputs and how many steps of
        ``total`` it covers.
    :param int total: the number of steps of the whole run.
    :param str description: the bar's label.
    :param bool progress_bar: show the bar.
    :param postfix: ``outputs -> dict`` shown beside the bar after each chunk.
    :return: ``(carry, outputs)``, the list of every chunk's outputs.

    **Example:**

    .. code-block:: python

        carry, losses = run_chunks(
            lambda state, _: scan_chunk(state), state, [(None, 100)] * 10,
            total=1000, description="fitting",
        )
    """
    outputs = []
    with tqdm(total=total, desc=description, disable=not progress_bar, leave=False) as bar:
        for inputs, steps in chunks:
            carry, chunk_outputs = run_chunk(carry, inputs)
            outputs.append(chunk_outputs)
            bar.update(steps)
            if postfix is not None:
                bar.set_postfix(postfix(chunk_outputs))
    return carry, outputs


def scan_in_chunks(
    transition: Callable,
    carry: Any,
    length: int,
    *,
    description: str,
    progress_bar: bool = True,
    optimize: bool | int = True,
):
    """``jax.lax.scan(transition, carry, None, length)`` as equal compiled chunks (one
    compilation, reused), a progress bar moving between them.

    :param transition: ``(carry, None) -> (carry, outputs)``, one step.
    :param carry: the initial carry.
    :param int length: the number of steps.
    :param str description: the bar's label.
    :param bool progress_bar: show the bar.
    :param optimize: the chunk's compilation (:func:`~numpyro_extras.shell.compilation.quick_jit`).
    :return: ``(carry, outputs)``, every step's outputs stacked on a leading axis (numpy).

    **Example:**

    .. code-block:: python

        states, (positions, num_steps) = scan_in_chunks(
            lambda states, _: step(states), states, 1000, description="pilot chains"
        )
    """
    # The largest divisor of the length that splits it into at least ten chunks.
    chunk = next(size for size in range(max(length // 10, 1), 0, -1) if length % size == 0)

    @quick_jit(optimize=optimize)
    def run_chunk(carry, _):
        return jax.lax.scan(transition, carry, None, length=chunk)

    carry, outputs = run_chunks(
        run_chunk,
        carry,
        [(None, chunk)] * (length // chunk),
        total=length,
        description=description,
        progress_bar=progress_bar,
    )
    return carry, jax.tree.map(lambda *parts: np.concatenate(parts), *outputs)
