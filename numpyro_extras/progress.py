"""The one progress bar for work that runs as a sequence of compiled chunks.

A long ``lax.scan`` shows no progress until it returns; split into equal compiled chunks (one
compilation, reused), it can move a tqdm bar between chunks. The annealing driver and the base
fit's variational fits both run this way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tqdm.auto import tqdm

__all__ = ["run_chunks"]


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
