"""k-means on flat draws, for choosing draws that cover every mode a run visited.

A mode that holds a small share of the draws (an outer cluster a replica exchange visited for a
few dozen scans) is easily missed by draws picked evenly over time, and an estimate built on the
picked draws then never learns it. k-means++ seeding (Arthur and Vassilvitskii 2007) draws each
new centre with probability proportional to its squared distance from the centres so far, and
Lloyd's iterations then give a separated mode its own cell: a mode is merged into another only
at a cost in within-cell distances that grows with its distance from it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["kmeans_plus_plus", "spread_draws"]

# Lloyd's iterations of spread_draws; the cells of separated modes settle within a few.
LLOYD_ITERATIONS = 20


def _standardised(draws):
    """The draws centred, each coordinate divided by its standard deviation (a constant
    coordinate left as it is), so that no site's scale decides the distances."""
    scale = np.sqrt(np.var(draws, axis=0))
    return (draws - draws.mean(0)) / np.where(scale > 0, scale, 1.0)


def kmeans_plus_plus(draws, count, rng) -> np.ndarray:
    """k-means++ seeding: the indices of ``count`` rows of ``draws``, each after the first drawn
    with probability proportional to its squared (standardised) distance from the nearest row
    chosen so far.

    :param draws: ``(N, D)`` flat draws, ``N >= count``.
    :param int count: rows to choose.
    :param numpy.random.Generator rng: the random stream.
    :return: NumPy integer array ``(count,)``.

    **Example:**

    .. code-block:: python

        rng = np.random.default_rng(0)
        draws = np.concatenate([rng.normal(-9, 1, (990, 2)), rng.normal(9, 1, (10, 2))])
        draws[kmeans_plus_plus(draws, 2, rng)]  # one row near (-9, -9), one near (9, 9)
    """
    return _seeds(_standardised(np.asarray(draws, dtype=np.float64)), count, rng)


def _seeds(points, count, rng):
    """k-means++ seeding on points already standardised."""
    chosen = [int(rng.integers(len(points)))]
    nearest = np.sum((points - points[chosen[0]]) ** 2, axis=-1)
    for _ in range(1, count):
        total = nearest.sum()
        # Identical draws leave nothing to spread over: any row will do.
        weights = nearest / total if total > 0 else None
        chosen.append(int(rng.choice(len(points), p=weights)))
        nearest = np.minimum(nearest, np.sum((points - points[chosen[-1]]) ** 2, axis=-1))
    return np.asarray(chosen)


def spread_draws(draws, count, rng, iterations=LLOYD_ITERATIONS) -> np.ndarray:
    """The indices of ``count`` rows of ``draws`` spread over the modes they visited: k-means
    with ``count`` cells (k-means++ seeding, then Lloyd's iterations), and in each cell the draw
    nearest its centre. Every mode far from the others gets a row however few draws it holds;
    the cells, and so the rows, otherwise follow the draws' mass.

    :param draws: ``(N, D)`` flat draws.
    :param int count: rows to return; with ``count >= N`` every row, repeated in turn.
    :param numpy.random.Generator rng: the random stream of the seeding.
    :param int iterations: Lloyd's iterations.
    :return: NumPy integer array ``(count,)``.

    **Example:**

    .. code-block:: python

        rng = np.random.default_rng(0)
        draws = np.concatenate([rng.normal(0, 1, (980, 2)), rng.normal(12, 1, (20, 2))])
        starts = draws[spread_draws(draws, 8, rng)]  # at least one near (12, 12)
    """
    draws = np.asarray(draws, dtype=np.float64)
    if count >= len(draws):
        return np.arange(count) % len(draws)
    points = _standardised(draws)
    seeds = _seeds(points, count, rng)
    centres = points[seeds]
    for _ in range(iterations):
        cells = np.argmin(_squared_distances(points, centres), axis=1)
        for cell in range(count):
            members = cells == cell
            if members.any():
                centres[cell] = points[members].mean(0)
    distances = _squared_distances(points, centres)
    cells = np.argmin(distances, axis=1)
    # A cell's row is its member nearest the centre; a cell left empty keeps its seed.
    within = np.where(cells[:, None] == np.arange(count), distances, np.inf)
    return np.where(np.isfinite(within.min(0)), within.argmin(0), seeds)


def _squared_distances(points, centres):
    """``(N, K)`` squared distances, without an ``(N, K, D)`` intermediate."""
    return (
        np.sum(points**2, axis=1)[:, None]
        - 2.0 * points @ centres.T
        + np.sum(centres**2, axis=1)[None, :]
    )
