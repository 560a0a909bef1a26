"""The proposal densities of bridge sampling, fitted to posterior draws on the flat unconstrained
space: one Gaussian with the draws' moments (Meng and Wong 1996; Gronau et al. 2017, eq. 11),
or a Gaussian mixture fitted by expectation-maximisation when the draws visited several modes.
Either is a :class:`~numpyro_extras.MixtureBase` (one component for the Gaussian).
"""

from __future__ import annotations

import math

import jax
import numpy as np
from scipy.special import logsumexp

from numpyro_extras.model.bases import MixtureBase
from numpyro_extras.shell.clustering import kmeans_plus_plus
from numpyro_extras.shell.compilation import quick_jit

__all__ = ["fit_gaussian", "fit_mixture", "component_log_densities", "MAX_COMPONENTS"]

# Most components the mixture proposal tries; the Bayesian information criterion picks fewer.
MAX_COMPONENTS = 8
_EM_ITERATIONS = 100
# EM stops when the mean log likelihood per draw gains less than this: a proposal needs the
# components' places and shapes, not the likelihood's last digits.
_EM_TOLERANCE = 1e-3
# Added to each covariance's diagonal, relative to the draws' variances: keeps a component
# fitted to a few nearly collinear draws positive definite.
_COVARIANCE_JITTER = 1e-6


@quick_jit
def _component_log_densities(mixture: MixtureBase, points):
    return jax.vmap(mixture.component_log_densities)(points)


def component_log_densities(mixture: MixtureBase, points) -> np.ndarray:
    """``log pi_k N(x; mu_k, Sigma_k)`` of every component at every point, ``(N, K)`` float64.

    :param MixtureBase mixture: the proposal.
    :param points: ``(N, D)`` flat points.
    :return: NumPy array ``(N, K)``.
    """
    return np.asarray(
        _component_log_densities(mixture, np.asarray(points, dtype=np.float64)), dtype=np.float64
    )


def _mixture(locs, covariances, weights) -> MixtureBase:
    trils = np.linalg.cholesky(covariances)
    return MixtureBase(
        np.asarray(locs, dtype=np.float64),
        trils,
        np.log(np.asarray(weights, dtype=np.float64)),
        np.zeros(()),
    )


def _jittered(covariance, variances):
    return covariance + np.diag(_COVARIANCE_JITTER * variances + 1e-300)


def fit_gaussian(draws) -> MixtureBase:
    """The Gaussian with the draws' mean and covariance, as a one-component mixture.

    :param draws: ``(N, D)`` flat posterior draws.
    :return: :class:`~numpyro_extras.MixtureBase` with one component.

    **Example:**

    .. code-block:: python

        proposal = fit_gaussian(np.random.default_rng(0).normal(size=(1000, 2)))
    """
    draws = np.asarray(draws, dtype=np.float64)
    variances = np.var(draws, axis=0)
    covariance = np.atleast_2d(np.cov(draws, rowvar=False))
    return _mixture(draws.mean(0)[None], _jittered(covariance, variances)[None], np.ones(1))


def _expectation_maximisation(draws, num_components, rng):
    """A Gaussian mixture of ``num_components`` fitted to ``draws`` by EM; returns the mixture
    and its log likelihood (``None`` when a component collapses onto too few draws)."""
    num_draws, dimension = draws.shape
    variances = np.var(draws, axis=0)
    centres = draws[kmeans_plus_plus(draws, num_components, rng)]
    labels = np.argmin(np.sum((draws[:, None] - centres[None]) ** 2, axis=-1), axis=1)
    responsibilities = np.eye(num_components)[labels]
    previous = -np.inf
    for _ in range(_EM_ITERATIONS):
        counts = responsibilities.sum(0)
        if np.any(counts < dimension + 1):
            return None, -np.inf
        locs = responsibilities.T @ draws / counts[:, None]
        covariances = []
        for loc, weights, count in zip(locs, responsibilities.T, counts, strict=True):
            centred = draws - loc
            covariances.append(
                _jittered((centred * weights[:, None]).T @ centred / count, variances)
            )
        covariances = np.stack(covariances)
        mixture = _mixture(locs, covariances, counts / num_draws)
        log_components = component_log_densities(mixture, draws)
        log_densities = logsumexp(log_components, axis=1)
        log_likelihood = float(np.sum(log_densities))
        responsibilities = np.exp(log_components - log_densities[:, None])
        if log_likelihood - previous < _EM_TOLERANCE * num_draws:
            break
        previous = log_likelihood
    return mixture, log_likelihood


def fit_mixture(draws, rng, max_components=MAX_COMPONENTS) -> MixtureBase:
    """A Gaussian mixture fitted to the draws by EM, with the number of components (1 to
    ``max_components``) that minimises the Bayesian information criterion: components are added
    one at a time until one more does not lower it.

    :param draws: ``(N, D)`` flat posterior draws.
    :param numpy.random.Generator rng: for the k-means++ seeding of EM.
    :param int max_components: most components tried.
    :return: :class:`~numpyro_extras.MixtureBase`.

    **Example:**

    .. code-block:: python

        rng = np.random.default_rng(0)
        draws = np.concatenate([rng.normal(-4, 1, (500, 1)), rng.normal(4, 1, (500, 1))])
        fit_mixture(draws, rng).component_locs  # about [[-4], [4]]
    """
    draws = np.asarray(draws, dtype=np.float64)
    num_draws, dimension = draws.shape
    parameters_per_component = 1 + dimension + dimension * (dimension + 1) // 2
    best = fit_gaussian(draws)
    best_criterion = -2 * float(np.sum(logsumexp(component_log_densities(best, draws), axis=1))) + (
        parameters_per_component - 1
    ) * math.log(num_draws)
    for num_components in range(2, max_components + 1):
        if num_components * (dimension + 1) > num_draws:
            break
        mixture, log_likelihood = _expectation_maximisation(draws, num_components, rng)
        criterion = -2 * log_likelihood + (
            num_components * parameters_per_component - 1
        ) * math.log(num_draws)
        if not criterion < best_criterion:
            break
        best, best_criterion = mixture, criterion
    return best
