r"""Multimodal NumPyro models with exact ``log Z`` and exact mode weights.

Three families, each returned as a :class:`MultimodalTarget` (model, its arguments, exact
``log Z``, exact mode weights and a function labelling draws by mode):

* :func:`gaussian_mixture_target` -- a broad Gaussian prior on ``x`` in ``R^D`` times a
  Gaussian-mixture likelihood whose posterior is a separated two-component Gaussian mixture with
  unequal weights, the minor component the narrower one.
* :func:`sign_product_target` -- ``d`` independent parameters, each observed through its square
  (so the likelihood cannot tell ``theta_i`` from ``-theta_i``) with a prior that slightly favours
  one sign: ``2^d`` modes with unequal weights.
* :func:`boltzmann_target` -- the Gaussian-mixture relaxation of a Boltzmann machine
  (:func:`~numpyro_extras.targets.boltzmann_relaxation.make_boltzmann_relaxation`), with modes read
  on the signs of its leading principal components.

``log Z`` is, as in :mod:`numpyro_extras.targets`, the log integral of ``exp(-phi)`` over the
unconstrained space, ``phi`` being NumPyro's potential energy of the model: here the log marginal
likelihood. ``tests/targets/test_multimodal.py`` checks every exact quantity against quadrature,
enumeration or independent sampling.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import scipy.integrate
import scipy.linalg
import scipy.special
import scipy.stats
from jax.scipy.special import logsumexp

from numpyro_extras.targets.boltzmann_relaxation import (
    BoltzmannRelaxation,
    boltzmann_relaxation_model,
    boltzmann_states,
    make_boltzmann_relaxation,
)

__all__ = [
    "MultimodalTarget",
    "gaussian_mixture_model",
    "gaussian_mixture_target",
    "sign_product_model",
    "sign_product_target",
    "boltzmann_target",
    "boltzmann_orthant_weights",
    "mode_weight_error",
]


@dataclass(frozen=True)
class MultimodalTarget:
    """A multimodal NumPyro model with its exact log normalizer and mode weights.

    :ivar str name: a short description, e.g. ``"mixture D=12"``.
    :ivar model: the NumPyro model.
    :ivar tuple model_args: its positional arguments.
    :ivar dict model_kwargs: its keyword arguments.
    :ivar float log_z: exact ``log Z`` (the log marginal likelihood).
    :ivar mode_weights: exact posterior mass of each mode label, float64 array ``[K]`` summing
        to 1.
    :ivar site: the latent site :meth:`mode_labels` reads.
    :ivar info: the target's construction details (family specific).

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import sign_product_target
        target = sign_product_target(0, 3)  # 2^3 = 8 modes
        draws = {"theta": np.array([[2.0, 2.0, 2.0], [-2.0, 2.0, 2.0]])}
        target.mode_labels(draws), target.empirical_mode_weights(draws)  # [7, 6], half in each
    """

    name: str
    model: Callable
    model_args: tuple
    model_kwargs: dict
    log_z: float
    mode_weights: np.ndarray
    site: str
    label_fn: Callable[[np.ndarray], np.ndarray] = field(repr=False)
    info: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def num_modes(self) -> int:
        return len(self.mode_weights)

    def mode_labels(self, draws) -> np.ndarray:
        """The mode label (an integer in ``[0, num_modes)``) of each draw.

        :param draws: a dict of constrained site values with leading sample dimensions (as
            ``mcmc.get_samples()`` returns), or the array of the site :attr:`site`.
        :return: integer array of the draws' leading shape.
        """
        values = draws[self.site] if isinstance(draws, dict) else draws
        values = np.asarray(values, dtype=np.float64)
        batch_shape = values.shape[:-1]
        labels = self.label_fn(values.reshape(-1, values.shape[-1]))
        return np.asarray(labels, dtype=np.int64).reshape(batch_shape)

    def empirical_mode_weights(self, draws, weights=None) -> np.ndarray:
        """The (optionally weighted) fraction of draws in each mode.

        :param draws: as for :meth:`mode_labels`.
        :param weights: non-negative weights of the draws (any normalisation), or ``None``.
        :return: float64 array ``[num_modes]`` summing to 1.
        """
        labels = self.mode_labels(draws).ravel()
        weights = np.ones(labels.shape) if weights is None else np.ravel(weights)
        totals = np.bincount(labels, weights=weights, minlength=self.num_modes)
        return totals / np.sum(totals)


def mode_weight_error(estimated, exact) -> float:
    """The largest absolute error over the mode weights, ``max_k |w_hat_k - w_k|``.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import mode_weight_error
        mode_weight_error([0.55, 0.45], [0.6, 0.4])  # 0.05
    """
    return float(np.max(np.abs(np.asarray(estimated) - np.asarray(exact))))


def _random_covariance(rng, dimension, scale):
    """A covariance with a Haar-random orientation and standard deviations log-uniform in
    ``scale * [0.9, 1.1]``; returns its lower Cholesky factor."""
    orthogonal, triangular = np.linalg.qr(rng.standard_normal((dimension, dimension)))
    orthogonal = orthogonal * np.sign(np.diag(triangular))
    deviations = scale * np.exp(rng.uniform(math.log(0.9), math.log(1.1), dimension))
    covariance = (orthogonal * deviations**2) @ orthogonal.T
    return np.linalg.cholesky(0.5 * (covariance + covariance.T))


def _mvn_log_density(x, loc, scale_tril):
    """``log N(x; loc, L L^T)`` for rows of ``x`` (float64 numpy)."""
    whitened = scipy.linalg.solve_triangular(scale_tril, (x - loc).T, lower=True)
    return (
        -0.5 * np.sum(whitened**2, axis=0)
        - np.sum(np.log(np.diag(scale_tril)))
        - 0.5 * len(loc) * math.log(2 * math.pi)
    )


# ------------------------------------------------------------------------------------------------
# (a) Separated two-component Gaussian mixture posterior
# ------------------------------------------------------------------------------------------------


def gaussian_mixture_model(prior_scale, locs, inverse_scale_trils, log_weights):
    """``x ~ N(0, prior_scale^2 I_D)`` with the likelihood ``sum_k a_k N(x; m_k, S_k)``.

    The likelihood is a ``numpyro.factor`` (``log_weights`` holds ``log a_k``); prior times
    likelihood is a two-component Gaussian mixture (see :func:`gaussian_mixture_target`).
    The components take the inverses of their Cholesky factors: a batched triangular solve
    inside vmapped chains runs up to 100 times slower on CPU and now and then deadlocks (jaxlib
    0.10.2).

    :param float prior_scale: prior standard deviation of every coordinate.
    :param locs: likelihood component means ``m_k``, shape ``[2, D]``.
    :param inverse_scale_trils: inverses ``L_k^-1`` of the Cholesky factors of the likelihood
        covariances ``S_k = L_k L_k^T``, shape ``[2, D, D]``.
    :param log_weights: ``log a_k``, shape ``[2]``.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import gaussian_mixture_model, gaussian_mixture_target
        target = gaussian_mixture_target(0, 6)
        kernel = nx.ReplicaExchange(gaussian_mixture_model, num_replicas=8)
        mcmc = MCMC(kernel, num_warmup=300, num_samples=1000)
        mcmc.run(jax.random.PRNGKey(0), *target.model_args)
    """
    dimension = locs.shape[-1]
    x = numpyro.sample("x", dist.Normal(0.0, prior_scale).expand([dimension]).to_event(1))
    whitened = jnp.einsum("kij,kj->ki", inverse_scale_trils, x - locs)
    log_densities = (
        jnp.sum(jnp.log(jnp.diagonal(inverse_scale_trils, axis1=-2, axis2=-1)), axis=-1)
        - 0.5 * jnp.sum(whitened**2, axis=-1)
        - 0.5 * dimension * math.log(2 * math.pi)
    )
    numpyro.factor("likelihood", logsumexp(log_weights + log_densities))


def gaussian_mixture_target(
    seed,
    dimension,
    *,
    minor_weight=None,
    width_ratio=1.25,
    separation=8.0,
    prior_scale=3.0,
) -> MultimodalTarget:
    """A broad Gaussian prior times a likelihood that makes the posterior a separated,
    unequal-weight two-component Gaussian mixture whose minor component is the narrower one.

    The posterior is chosen first and the likelihood solved for. With ``u`` a random unit
    vector and ``c ~ N(0, I)``, the posterior is ``(1 - m) N(mu_0, C_0) + m N(mu_1, C_1)`` with
    ``mu_0 = c - m L u``, ``mu_1 = c + (1 - m) L u`` (so its mean is ``c``), ``L =
    separation``, ``m = minor_weight`` (default uniform in [0.25, 0.35]), ``C_0`` a random
    covariance with standard deviations in [0.9, 1.1] and ``C_1`` one with standard deviations
    ``width_ratio`` times smaller (own random orientation; with the default ratio every one of
    them is below every standard deviation of ``C_0``). Each posterior component is the
    product of the prior ``N(0, s^2 I)`` and a Gaussian likelihood component ``N(x; m_k, S_k)``
    with ``S_k^-1 = C_k^-1 - I / s^2`` and ``m_k = S_k C_k^-1 mu_k``; the likelihood weights
    ``a_k`` (summing to 1) are ``proportional to w_k / N(m_k; 0, S_k + s^2 I)``, so that

        log Z = log sum_k a_k N(m_k; 0, S_k + s^2 I).

    The defaults make the minor mode's standard deviations 0.8 times the major's (its typical
    set ``1.25^D`` times smaller in volume: 3.8 at ``D = 6``, 87 at ``D = 20``), the modes about 8
    major standard deviations apart (gradient MCMC started in one never reaches the other) and
    the prior three times as wide as the posterior components. Gaussian VI from almost any start
    converges to the major mode, whose tails dominate everywhere but near the minor one. With
    ``width_ratio = 1.5`` or 2 a narrow mode at ``D >= 12`` lies so far in the tail of every
    Gaussian fitted to what was found first that no Gaussian-based search of ours found it.

    Mode labels: 0 for the major component, 1 for the minor one, by the larger of ``w_k
    N(x; mu_k, C_k)``. The exact mass of each label differs from ``w_k`` by the probability of
    misclassification, about ``1e-5`` at the defaults (checked by exact sampling in the tests).

    :param int seed: seed of ``numpy.random.default_rng``.
    :param int dimension: ``D`` (6 to 20 in the benchmark).
    :param float minor_weight: posterior weight of the minor component, or ``None``.
    :param float width_ratio: major over minor standard deviations.
    :param float separation: distance ``L`` between the component means.
    :param float prior_scale: prior standard deviation ``s``; must exceed every posterior
        standard deviation.
    :return: :class:`MultimodalTarget` with ``info`` holding the posterior's ``weights``,
        ``locs`` and ``scale_trils``.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import gaussian_mixture_target
        target = gaussian_mixture_target(0, 6)
        target.mode_weights, target.log_z  # the exact weights of the two modes and log Z
    """
    rng = np.random.default_rng(seed)
    if minor_weight is None:
        minor_weight = rng.uniform(0.25, 0.35)
    direction = rng.standard_normal(dimension)
    direction /= np.linalg.norm(direction)
    centre = rng.standard_normal(dimension)
    posterior_weights = np.array([1.0 - minor_weight, minor_weight])
    posterior_locs = np.stack(
        [
            centre - minor_weight * separation * direction,
            centre + (1.0 - minor_weight) * separation * direction,
        ]
    )
    posterior_trils = np.stack(
        [
            _random_covariance(rng, dimension, 1.0),
            _random_covariance(rng, dimension, 1.0 / width_ratio),
        ]
    )
    likelihood_locs, likelihood_trils, log_marginals = [], [], []
    for loc, tril in zip(posterior_locs, posterior_trils, strict=True):
        posterior_precision = scipy.linalg.cho_solve((tril, True), np.eye(dimension))
        precision = posterior_precision - np.eye(dimension) / prior_scale**2
        covariance = np.linalg.inv(precision)
        covariance = 0.5 * (covariance + covariance.T)
        likelihood_loc = covariance @ posterior_precision @ loc
        likelihood_locs.append(likelihood_loc)
        likelihood_trils.append(np.linalg.cholesky(covariance))
        marginal = np.linalg.cholesky(covariance + prior_scale**2 * np.eye(dimension))
        log_marginals.append(_mvn_log_density(likelihood_loc[None], np.zeros(dimension), marginal))
    log_marginals = np.concatenate(log_marginals)
    log_likelihood_weights = np.log(posterior_weights) - log_marginals
    log_likelihood_weights -= scipy.special.logsumexp(log_likelihood_weights)
    log_z = float(scipy.special.logsumexp(log_likelihood_weights + log_marginals))

    def label_fn(x):
        log_densities = np.stack(
            [
                np.log(weight) + _mvn_log_density(x, loc, tril)
                for weight, loc, tril in zip(
                    posterior_weights, posterior_locs, posterior_trils, strict=True
                )
            ],
            axis=-1,
        )
        return np.argmax(log_densities, axis=-1)

    model_args = (
        float(prior_scale),
        jnp.asarray(np.stack(likelihood_locs)),
        jnp.asarray(
            np.stack(
                [
                    scipy.linalg.solve_triangular(t, np.eye(dimension), lower=True)
                    for t in likelihood_trils
                ]
            )
        ),
        jnp.asarray(log_likelihood_weights),
    )
    return MultimodalTarget(
        name=f"mixture D={dimension}",
        model=gaussian_mixture_model,
        model_args=model_args,
        model_kwargs={},
        log_z=log_z,
        mode_weights=posterior_weights,
        site="x",
        label_fn=label_fn,
        info={
            "weights": posterior_weights,
            "locs": posterior_locs,
            "scale_trils": posterior_trils,
            "width_ratio": float(width_ratio),
            "separation": float(separation),
        },
    )


# ------------------------------------------------------------------------------------------------
# (b) Products of sign-ambiguous parameters
# ------------------------------------------------------------------------------------------------


def sign_product_model(prior_locs, prior_scale, observations, noise_scale):
    """``theta_i ~ N(prior_locs_i, prior_scale^2)``, ``observations[i, j] ~ N(theta_i^2,
    noise_scale^2)``: the likelihood sees only ``theta_i^2``, the prior breaks the sign symmetry.

    :param prior_locs: prior means, shape ``[d]``.
    :param float prior_scale: prior standard deviation.
    :param observations: shape ``[d, n]``.
    :param float noise_scale: observation noise standard deviation.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import sign_product_model, sign_product_target
        target = sign_product_target(0, 3)
        kernel = nx.JointContinuousTempering(sign_product_model)
        mcmc = MCMC(kernel, num_warmup=300, num_samples=1000)
        mcmc.run(jax.random.PRNGKey(0), *target.model_args)
    """
    theta = numpyro.sample("theta", dist.Normal(prior_locs, prior_scale).to_event(1))  # shape [d]
    with numpyro.plate("observations", observations.shape[-1]):
        with numpyro.plate("parameters", observations.shape[0], dim=-2):
            numpyro.sample("y", dist.Normal(theta[:, None] ** 2, noise_scale), obs=observations)


def _sign_product_log_density(theta, prior_loc, prior_scale, observations, noise_scale):
    """Log prior plus log likelihood of one parameter, at the points ``theta`` (numpy)."""
    theta = np.asarray(theta, dtype=np.float64)
    log_prior = scipy.stats.norm.logpdf(theta, prior_loc, prior_scale)
    log_likelihood = np.sum(
        scipy.stats.norm.logpdf(observations[:, None], theta[None] ** 2, noise_scale), axis=0
    )
    return log_prior + log_likelihood


def sign_product_target(
    seed,
    num_parameters,
    *,
    num_observations=4,
    noise_scale=2.0,
    prior_scale=1.0,
    magnitude_range=(2.0, 2.5),
    positive_probabilities=None,
) -> MultimodalTarget:
    """``d`` independent sign-ambiguous parameters: a posterior with ``2^d`` modes.

    Parameter ``i`` has magnitude ``a_i`` uniform in ``magnitude_range``; its
    ``num_observations`` observations are ``a_i^2`` plus ``N(0, noise_scale^2)`` noise centred to
    mean zero (so the likelihood peaks at ``theta_i = +-a_i``). Its prior mean is
    ``logit(p_i) prior_scale^2 / (2 a_i)``, which makes the prior density ratio at ``+a_i`` and
    ``-a_i`` equal to ``p_i / (1 - p_i)``; ``p_i`` is uniform in [0.6, 0.75] with a random side
    (or given by ``positive_probabilities``). With the defaults each mode has a standard
    deviation of about 0.2-0.25 and the barrier at ``theta_i = 0`` is 8-20 nats high.

    The exact quantities come from adaptive 1-D quadrature per parameter (the posterior
    factorises): ``log Z = sum_i log Z_i``, ``P(theta_i > 0)``, and the weight of the mode with
    sign pattern ``sigma`` is ``prod_i P(sign theta_i = sigma_i)``. The label of a draw is
    ``sum_i [theta_i > 0] 2^i``.

    :param int seed: seed of ``numpy.random.default_rng``.
    :param int num_parameters: ``d`` (4 to 6 in the benchmark).
    :param int num_observations: observations per parameter.
    :param float noise_scale: observation noise.
    :param float prior_scale: prior standard deviation.
    :param magnitude_range: the range of the magnitudes ``a_i``.
    :param positive_probabilities: the ``p_i`` that set the prior means, or ``None``.
    :return: :class:`MultimodalTarget`; ``info["positive_probability"]`` holds the exact
        ``P(theta_i > 0)``.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import sign_product_target
        target = sign_product_target(0, 3)
        target.log_z, target.info["positive_probability"]  # exact, by quadrature
    """
    rng = np.random.default_rng(seed)
    magnitudes = rng.uniform(*magnitude_range, num_parameters)
    if positive_probabilities is None:
        positive_probabilities = rng.uniform(0.6, 0.75, num_parameters)
        flip = rng.random(num_parameters) < 0.5
        positive_probabilities = np.where(
            flip, 1.0 - positive_probabilities, positive_probabilities
        )
    positive_probabilities = np.asarray(positive_probabilities, dtype=np.float64)
    prior_locs = scipy.special.logit(positive_probabilities) * prior_scale**2 / (2 * magnitudes)
    noise = rng.standard_normal((num_parameters, num_observations))
    # Centred noise keeps the modes at +-a_i: an unlucky draw would otherwise pull them towards
    # zero and lower the barrier between them to a nat or two.
    noise -= noise.mean(axis=1, keepdims=True)
    observations = magnitudes[:, None] ** 2 + noise_scale * noise
    log_normalizers, positive = [], []
    for index in range(num_parameters):
        args = (prior_locs[index], prior_scale, observations[index], noise_scale)
        mode = math.sqrt(max(np.mean(observations[index]), 1e-3))
        grid = np.linspace(-2 * mode - 3, 2 * mode + 3, 20001)
        peak = np.max(_sign_product_log_density(grid, *args))

        def density(theta, args=args, peak=peak):
            return float(np.exp(_sign_product_log_density(np.array([theta]), *args)[0] - peak))

        sides = []
        for lower, upper, centre in ((-np.inf, 0.0, -mode), (0.0, np.inf, mode)):
            finite_lower = max(lower, -mode - 6 * mode - 10)
            finite_upper = min(upper, mode + 6 * mode + 10)
            value, _ = scipy.integrate.quad(
                density,
                finite_lower,
                finite_upper,
                points=[centre],
                epsabs=0.0,
                epsrel=1e-11,
                limit=500,
            )
            sides.append(value)
        total = sides[0] + sides[1]
        log_normalizers.append(peak + math.log(total))
        positive.append(sides[1] / total)
    positive = np.array(positive)
    patterns = (np.arange(2**num_parameters)[:, None] >> np.arange(num_parameters)) & 1
    mode_weights = np.prod(np.where(patterns == 1, positive, 1.0 - positive), axis=1)

    def label_fn(theta):
        return np.sum((theta > 0).astype(np.int64) << np.arange(theta.shape[-1]), axis=-1)

    return MultimodalTarget(
        name=f"signs d={num_parameters}",
        model=sign_product_model,
        model_args=(
            jnp.asarray(prior_locs),
            float(prior_scale),
            jnp.asarray(observations),
            float(noise_scale),
        ),
        model_kwargs={},
        log_z=float(np.sum(log_normalizers)),
        mode_weights=mode_weights,
        site="theta",
        label_fn=label_fn,
        info={
            "positive_probability": positive,
            "magnitudes": magnitudes,
            "log_normalizers": np.array(log_normalizers),
        },
    )


# ------------------------------------------------------------------------------------------------
# (c) Boltzmann machine relaxations
# ------------------------------------------------------------------------------------------------


def boltzmann_orthant_weights(relaxation: BoltzmannRelaxation, directions) -> np.ndarray:
    """Exact probability of each sign pattern of ``directions^T x`` under the relaxation.

    Given the Boltzmann state ``s``, ``x ~ N(Q^T s, I)``, so for orthonormal ``directions`` the
    projections ``v_j^T x`` are independent ``N(v_j^T Q^T s, 1)``: the probability of the
    orthant is a product of normal CDFs, summed over all ``2^D_B`` states with ``P(s)``.

    :param BoltzmannRelaxation relaxation: the relaxation.
    :param directions: orthonormal columns ``v_j``, shape ``[D_x, m]``.
    :return: float64 array ``[2^m]``; entry ``sum_j [v_j^T x > 0] 2^j``.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import boltzmann_orthant_weights, boltzmann_target
        target = boltzmann_target(0, num_units=8)
        relaxation, directions = target.info["relaxation"], target.info["directions"]
        boltzmann_orthant_weights(relaxation, directions)  # target.mode_weights
    """
    directions = np.asarray(directions, dtype=np.float64)
    states = boltzmann_states(len(relaxation.biases))
    log_weights = (
        0.5 * np.sum((states @ relaxation.weights) * states, axis=1) + states @ relaxation.biases
    )
    probabilities = np.exp(log_weights - scipy.special.logsumexp(log_weights))
    means = states @ (relaxation.projection.T @ directions)  # [2^D_B, m]
    num_directions = directions.shape[1]
    patterns = (np.arange(2**num_directions)[:, None] >> np.arange(num_directions)) & 1
    log_positive = scipy.stats.norm.logcdf(means)
    log_negative = scipy.stats.norm.logcdf(-means)
    weights = np.empty(2**num_directions)
    for label, pattern in enumerate(patterns):
        log_orthant = np.sum(np.where(pattern == 1, log_positive, log_negative), axis=1)
        weights[label] = probabilities @ np.exp(log_orthant)
    return weights


def boltzmann_target(seed, num_units=16, num_directions=2) -> MultimodalTarget:
    """A Boltzmann machine relaxation
    (:func:`~numpyro_extras.targets.boltzmann_relaxation.make_boltzmann_relaxation`) with its exact
    ``log Z`` and modes read on its leading principal components.

    The relaxation is a mixture of ``2^D_B`` unit Gaussians at ``Q^T s``; its mass sits on a few
    Boltzmann states far apart along the leading eigenvectors of its covariance (at ``D_B = 16``
    a handful of states carry half the mass), mirror pairs ``s, -s`` nearly equal. A draw's mode
    label is the sign pattern of its projections on the ``num_directions`` leading eigenvectors
    ``v_j`` of the exact covariance (each oriented so that its largest entry is positive):
    ``sum_j [v_j^T x > 0] 2^j``. The exact weights are :func:`boltzmann_orthant_weights`.

    :param int seed: seed of the machine.
    :param int num_units: ``D_B``.
    :param int num_directions: ``m``; ``2^m`` mode labels.
    :return: :class:`MultimodalTarget`; ``info`` holds the ``relaxation`` and ``directions``.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import boltzmann_target
        target = boltzmann_target(0, num_units=8)
        target.num_modes, target.log_z  # 4 sign patterns of 2 directions, the exact log Z
    """
    relaxation = make_boltzmann_relaxation(seed, num_units)
    _, eigenvectors = np.linalg.eigh(relaxation.covariance)
    directions = eigenvectors[:, ::-1][:, :num_directions]
    largest = np.argmax(np.abs(directions), axis=0)
    directions = directions * np.sign(directions[largest, np.arange(num_directions)])
    mode_weights = boltzmann_orthant_weights(relaxation, directions)

    def label_fn(x):
        signs = (x @ directions > 0).astype(np.int64)
        return np.sum(signs << np.arange(num_directions), axis=-1)

    return MultimodalTarget(
        name=f"Boltzmann D_B={num_units}",
        model=boltzmann_relaxation_model,
        model_args=(relaxation,),
        model_kwargs={},
        log_z=float(relaxation.log_z),
        mode_weights=mode_weights,
        site="x",
        label_fn=label_fn,
        info={"relaxation": relaxation, "directions": directions},
    )
