"""The one place the package calls ArviZ, under either line a user may have installed.

ArviZ 0.2x (``InferenceData``, statistics at the top level) and ArviZ 1.x (``arviz-base``,
``arviz-stats``, ``arviz-plots``; xarray's ``DataTree``) differ in the calls the package needs:
1.x reads a 1-D array as no chain at all, moved ``psislw`` out of the top level, leaves the log
likelihood out of ``from_numpyro`` unless asked for and takes ``from_dict``'s groups as one
mapping. The functions here take plain NumPy arrays and a finished run, and give the same
numbers and the same groups under both lines; every other module goes through them.
"""

from __future__ import annotations

import sys

import arviz as az
import numpy as np
import numpyro.infer  # noqa: F401  (loads the submodules restore_numpyro_submodules sets back)
import xarray as xr

__all__ = [
    "ARVIZ_MAJOR",
    "restore_numpyro_submodules",
    "ess",
    "mcse",
    "rhat",
    "psis_log_weights",
    "from_numpyro",
    "from_draws",
    "add_sample_stats",
]

ARVIZ_MAJOR = int(az.__version__.split(".")[0])


def restore_numpyro_submodules():
    """Set every imported ``numpyro`` submodule back as an attribute of its parent package.

    ArviZ 1.x imports NumPyro lazily (``lazy_loader``); when ``arviz`` is imported before
    ``numpyro``, the submodules of ``numpyro.infer`` end up in ``sys.modules`` but not as
    attributes of ``numpyro.infer``, and ``az.from_numpyro``, which reads
    ``numpyro.infer.initialization``, fails. Called when this module is imported (so a user's
    own ``az.from_numpyro`` works after ``import numpyro_extras``) and before every export.
    """
    for name, module in list(sys.modules.items()):
        parent, _, child = name.rpartition(".")
        if name.startswith("numpyro.") and parent in sys.modules:
            if not hasattr(sys.modules[parent], child):
                setattr(sys.modules[parent], child, module)


restore_numpyro_submodules()


def _as_chains(values):
    """``values`` as ``(chain, draw)`` float64: a 1-D series is one chain."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        return values[None]
    if values.ndim != 2:
        raise ValueError(f"Expected draws of shape (draw,) or (chain, draw), got {values.shape}.")
    return values


def ess(values, method="bulk") -> float:
    """ArviZ's effective sample size of one quantity's draws.

    :param values: draws, shape ``(draw,)`` (one chain) or ``(chain, draw)``.
    :param str method: ArviZ's method (``"bulk"``, ``"tail"``, ``"mean"``, ...).
    :return: the effective sample size, a float.

    **Example:**

    .. code-block:: python

        ess(np.random.default_rng(0).standard_normal((4, 1000)))  # about 4000
    """
    return float(az.ess(_as_chains(values), method=method))


def mcse(values, method="mean") -> float:
    """ArviZ's Monte Carlo standard error of one quantity's mean (or other ``method``), which
    accounts for autocorrelation within chains and spread between them.

    :param values: draws, shape ``(draw,)`` (one chain) or ``(chain, draw)``.
    :param str method: ArviZ's method (``"mean"``, ``"sd"``, ...).
    :return: the standard error, a float.

    **Example:**

    .. code-block:: python

        mcse(np.random.default_rng(0).standard_normal((4, 1000)))  # about 1 / sqrt(4000)
    """
    return float(az.mcse(_as_chains(values), method=method))


def rhat(values, method="rank") -> float:
    """ArviZ's R-hat of one quantity's draws.

    :param values: draws, shape ``(chain, draw)``.
    :param str method: ArviZ's method (``"rank"``, ``"split"``, ...).
    :return: R-hat, a float (NaN where ArviZ cannot compute it).

    **Example:**

    .. code-block:: python

        rhat(np.random.default_rng(0).standard_normal((4, 1000)))  # about 1.0
    """
    return float(az.rhat(_as_chains(values), method=method))


def psis_log_weights(log_weights):
    """Pareto-smoothed importance sampling (Vehtari et al., 2024, "Pareto smoothed importance
    sampling", eq. 5 and section 3): the log weights with their upper tail replaced by a fitted
    generalized Pareto, and the fit's shape ``k``.

    :param log_weights: finite log importance weights, shape ``(num_draws,)``.
    :return: ``(smoothed, k)``: the smoothed log weights, on the scale of ``log_weights`` (not
        normalised), and ``k`` as a float.

    **Example:**

    .. code-block:: python

        smoothed, k = psis_log_weights(np.random.default_rng(0).standard_normal(20_000))
    """
    log_weights = np.asarray(log_weights, dtype=np.float64).ravel()
    if ARVIZ_MAJOR >= 1:
        from arviz_stats.base import array_stats

        # arviz-stats' PSIS takes the draws' log likelihood of leave-one-out cross-validation,
        # whose negation is the log weight, and returns the smoothed weights normalised. PSIS
        # leaves the weights below the tail as they are, so the smallest one gives back the scale.
        smoothed, k = array_stats.psislw(-log_weights)
        smallest = np.argmin(log_weights)
        smoothed = np.asarray(smoothed) + (log_weights[smallest] - smoothed[smallest])
        return smoothed, float(k)
    smoothed, k = az.psislw(log_weights.copy(), normalize=False)
    return np.asarray(smoothed), float(k)


def from_numpyro(mcmc):
    """:func:`arviz.from_numpyro` of a finished run with its ``log_likelihood`` group, which
    ArviZ 1.x leaves out unless asked (``az.loo`` and ``az.compare`` need it).

    :param mcmc: a finished :class:`~numpyro.infer.MCMC` run of a kernel built on a model.
    :return: the installed ArviZ's ``InferenceData`` (0.2x) or ``DataTree`` (1.x).
    """
    restore_numpyro_submodules()
    return az.from_numpyro(mcmc, log_likelihood=True)


def from_draws(posterior, sample_stats=None):
    """ArviZ data of draws given as arrays of shape ``(chain, draw, ...)``.

    :param dict posterior: the posterior group, by variable name.
    :param dict sample_stats: the sample-stats group, by name (omitted when empty).
    :return: the installed ArviZ's ``InferenceData`` (0.2x) or ``DataTree`` (1.x).

    **Example:**

    .. code-block:: python

        idata = from_draws({"x": np.zeros((2, 100, 3))}, {"diverging": np.zeros((2, 100), bool)})
    """
    groups = {"posterior": posterior}
    if sample_stats:
        groups["sample_stats"] = sample_stats
    if ARVIZ_MAJOR >= 1:
        return az.from_dict(groups)
    return az.from_dict(**groups)


def add_sample_stats(idata, stats):
    """Add per-draw statistics to the ``sample_stats`` group, in place.

    :param idata: ArviZ data of a run (``InferenceData`` or ``DataTree``) with a
        ``sample_stats`` group.
    :param dict stats: arrays of shape ``(chain, draw)``, by name.
    :return: ``idata``.
    """
    group = idata.sample_stats
    for name, values in stats.items():
        group[name] = xr.DataArray(np.asarray(values), dims=("chain", "draw"))
    return idata
