r"""Built-in NumPyro models whose log normalizer is known, for tests, benchmarks and demos.

Throughout this module the *log normalizer* of a model means

.. math::

    \log Z = \log \int \exp(-\phi(x))\, dx,

where :math:`\phi` is the potential energy NumPyro computes for the model on the unconstrained
space (so it includes all transform Jacobians) and the integral runs over that whole space. For a
model with observations this is the log marginal likelihood :math:`\log p(y)`. It is the quantity
the tempering samplers of :mod:`numpyro_extras` estimate.

Targets provided:

* :func:`bimodal_model` -- the one-dimensional two-mode toy of Sec. 7.1 of the continuous
  tempering paper (Graham & Storkey, 2017), with :math:`\log Z` chosen by the caller.
* :func:`gaussian_model` -- a multivariate normal with :math:`\log Z` chosen by the caller.
* :func:`linear_regression_model` -- Bayesian linear regression with a closed-form evidence
  (:func:`linear_regression_log_evidence`).
* :func:`boltzmann_relaxation_model` -- the Gaussian-mixture relaxation of a Boltzmann machine
  (Sec. 7.2 and App. B of the paper) with exact :math:`\log Z`, mean and covariance obtained by
  enumerating all Boltzmann machine states (:func:`make_boltzmann_relaxation`).
* :func:`radon_model` -- the hierarchical radon regression of Sec. 7.3 (no exact
  :math:`\log Z`), with the data from :func:`load_radon`.
* :func:`make_multimodal_grid` -- the ACS paper's synthetic two-dimensional multimodal
  distribution over ordinal integers (its Sec. 4.1 and Table 3; spec ``acs.md`` E1, C8), with
  its exact distribution by enumeration (:func:`multimodal_grid_probabilities`) and a NumPyro
  model on two categorical sites (:func:`multimodal_grid_model`).
"""

import json
import math
from importlib import resources
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import scipy.linalg

__all__ = [
    "BIMODAL_LOCS",
    "BIMODAL_SCALES",
    "BIMODAL_WEIGHTS",
    "BoltzmannRelaxation",
    "bimodal_mode_weights",
    "bimodal_model",
    "boltzmann_relaxation_model",
    "boltzmann_relaxation_potential",
    "gaussian_model",
    "linear_regression_log_evidence",
    "linear_regression_model",
    "load_radon",
    "make_boltzmann_relaxation",
    "make_linear_regression_data",
    "radon_model",
    "MULTIMODAL_LAYOUTS",
    "MultimodalGrid",
    "make_multimodal_grid",
    "multimodal_grid_log_density",
    "multimodal_grid_model",
    "multimodal_grid_nearest_mode",
    "multimodal_grid_probabilities",
]

# ------------------------------------------------------------------------------------------------
# One-dimensional bimodal target (paper Sec. 7.1, Fig. 1)
# ------------------------------------------------------------------------------------------------

#: Mixture weights of the bimodal target 0.6 N(-8, 1^2) + 0.4 N(8, 2^2).
BIMODAL_WEIGHTS = (0.6, 0.4)
#: Component means of the bimodal target.
BIMODAL_LOCS = (-8.0, 8.0)
#: Component standard deviations of the bimodal target.
BIMODAL_SCALES = (1.0, 2.0)


def bimodal_model(log_scale=0.0):
    """
    One-dimensional bimodal target of the continuous tempering paper (Sec. 7.1, Fig. 1):
    the normalised mixture ``0.6 N(-8, 1^2) + 0.4 N(8, 2^2)`` multiplied by ``exp(log_scale)``.

    The model has a single latent site ``"x"`` (a scalar) and a factor site ``"scale"``
    contributing the constant ``log_scale``, so that the potential energy is
    ``-log p(x) - log_scale`` and the log normalizer is exactly ``log Z = log_scale``. A
    non-zero ``log_scale`` is useful to check that an estimator of ``log Z`` does not silently
    assume a normalised target. Plain HMC started near either mode essentially never crosses the
    barrier between them, which is what tempering is meant to fix; the true mode masses are
    :data:`BIMODAL_WEIGHTS` (compare with :func:`bimodal_mode_weights`).

    :param float log_scale: log normalizer of the target.

    **Example**

    .. doctest::

        >>> import jax
        >>> from numpyro.infer import MCMC, NUTS
        >>> from numpyro_extras.targets import bimodal_model, bimodal_mode_weights
        >>> mcmc = MCMC(NUTS(bimodal_model), num_warmup=200, num_samples=200, progress_bar=False)
        >>> mcmc.run(jax.random.PRNGKey(0), log_scale=2.0)
        >>> negative_mass, positive_mass = bimodal_mode_weights(mcmc.get_samples()["x"])
    """
    mixture = dist.MixtureSameFamily(
        dist.Categorical(probs=jnp.array(BIMODAL_WEIGHTS)),
        dist.Normal(jnp.array(BIMODAL_LOCS), jnp.array(BIMODAL_SCALES)),
    )
    numpyro.sample("x", mixture)
    numpyro.factor("scale", log_scale)


def bimodal_mode_weights(x, weights=None):
    """
    Fraction of (optionally weighted) draws in each mode of the bimodal target, split at zero.

    The exact values for :func:`bimodal_model` are :data:`BIMODAL_WEIGHTS` = ``(0.6, 0.4)``: the
    mass between the modes assigned to the wrong side of zero is below ``1e-4``.

    :param x: draws of the site ``"x"``, any shape (e.g. ``[num_chains, num_samples]``); flattened.
    :param weights: optional non-negative importance weights with the same number of elements as
        ``x``, e.g. the tempering weights ``w1(x)`` of eq. 21. Need not be normalised.
    :return: array of shape ``[2]`` with the fraction of (weighted) draws with ``x < 0`` and with
        ``x >= 0``; the two entries sum to one.

    **Example**

    .. doctest::

        >>> import numpy as np
        >>> from numpyro_extras.targets import bimodal_mode_weights
        >>> fractions = bimodal_mode_weights(np.array([-8.1, -7.9, 8.3, -8.0]))
        >>> [float(fraction) for fraction in fractions]
        [0.75, 0.25]
    """
    x = jnp.ravel(jnp.asarray(x))
    if weights is None:
        weights = jnp.ones_like(x)
    else:
        weights = jnp.ravel(jnp.asarray(weights)).astype(x.dtype)
    negative_mass = jnp.sum(jnp.where(x < 0, weights, 0.0))
    total_mass = jnp.sum(weights)
    negative_fraction = negative_mass / total_mass
    return jnp.stack([negative_fraction, 1.0 - negative_fraction])


# ------------------------------------------------------------------------------------------------
# Multivariate normal
# ------------------------------------------------------------------------------------------------


def gaussian_model(loc, scale_tril, log_scale=0.0):
    """
    Multivariate normal target ``N(loc, scale_tril @ scale_tril.T)`` multiplied by
    ``exp(log_scale)``.

    The model has a single latent site ``"x"`` with event shape ``[D]`` and a factor site
    ``"scale"`` contributing ``log_scale``, so that ``log Z = log_scale`` exactly. Useful as the
    simplest sanity check of a normalizer estimator (e.g. with a Gaussian base of a different
    mean and covariance).

    :param loc: mean, shape ``[D]``.
    :param scale_tril: lower-triangular Cholesky factor of the covariance, shape ``[D, D]``.
    :param float log_scale: log normalizer of the target.

    **Example**

    .. doctest::

        >>> import jax, jax.numpy as jnp
        >>> from numpyro.infer.util import initialize_model
        >>> from numpyro_extras.targets import gaussian_model
        >>> model_info = initialize_model(
        ...     jax.random.PRNGKey(0), gaussian_model,
        ...     model_args=(jnp.zeros(3), jnp.eye(3)), model_kwargs={"log_scale": -1.5})
        >>> potential = model_info.potential_fn({"x": jnp.zeros(3)})  # 1.5 + 1.5 log(2 pi)
    """
    numpyro.sample("x", dist.MultivariateNormal(loc, scale_tril=scale_tril))
    numpyro.factor("scale", log_scale)


# ------------------------------------------------------------------------------------------------
# Bayesian linear regression
# ------------------------------------------------------------------------------------------------


def linear_regression_model(features, targets, prior_scale=1.0, noise_scale=1.0):
    """
    Bayesian linear regression with a Gaussian prior on the weights and known noise scale::

        w ~ N(0, prior_scale^2 I_P)
        targets[n] ~ N(features[n] @ w, noise_scale^2),   n = 1..N   (plate "data")

    Latent site ``"w"`` has event shape ``[P]``; the observed site is ``"targets"``. The log
    normalizer is the log evidence ``log p(targets)``, available in closed form from
    :func:`linear_regression_log_evidence`.

    :param features: design matrix, shape ``[N, P]``.
    :param targets: observed responses, shape ``[N]``; ``None`` to sample them (prior predictive).
    :param float prior_scale: prior standard deviation of each weight.
    :param float noise_scale: observation noise standard deviation.

    **Example**

    .. doctest::

        >>> import jax
        >>> from numpyro.infer import MCMC, NUTS
        >>> from numpyro_extras.targets import (
        ...     linear_regression_log_evidence, linear_regression_model,
        ...     make_linear_regression_data)
        >>> features, targets = make_linear_regression_data(0)
        >>> log_z = linear_regression_log_evidence(features, targets)
        >>> mcmc = MCMC(NUTS(linear_regression_model), num_warmup=100, num_samples=100,
        ...             progress_bar=False)
        >>> mcmc.run(jax.random.PRNGKey(0), features, targets)
    """
    features = jnp.asarray(features)
    num_data, num_features = features.shape
    weights = numpyro.sample("w", dist.Normal(0.0, prior_scale).expand([num_features]).to_event(1))
    with numpyro.plate("data", num_data):
        numpyro.sample("targets", dist.Normal(features @ weights, noise_scale), obs=targets)


def linear_regression_log_evidence(features, targets, prior_scale=1.0, noise_scale=1.0):
    """
    Exact log evidence of :func:`linear_regression_model`.

    Integrating out ``w`` gives ``targets ~ N(0, noise_scale^2 I_N + prior_scale^2 X X^T)`` with
    ``X = features``; its log density at ``targets`` is evaluated in float64 with numpy/scipy
    regardless of the JAX precision setting.

    :param features: design matrix, shape ``[N, P]``.
    :param targets: observed responses, shape ``[N]``.
    :param float prior_scale: prior standard deviation of each weight.
    :param float noise_scale: observation noise standard deviation.
    :return: ``log p(targets)`` as a Python float.
    :rtype: float

    **Example**

    .. doctest::

        >>> from numpyro_extras.targets import (
        ...     linear_regression_log_evidence, make_linear_regression_data)
        >>> features, targets = make_linear_regression_data(0, num_data=20, num_features=3)
        >>> log_z = linear_regression_log_evidence(features, targets)
    """
    features = np.asarray(features, dtype=np.float64)
    targets = np.asarray(targets, dtype=np.float64)
    num_data = targets.shape[0]
    marginal_covariance = noise_scale**2 * np.eye(num_data) + prior_scale**2 * (
        features @ features.T
    )
    cholesky = scipy.linalg.cholesky(marginal_covariance, lower=True)
    whitened = scipy.linalg.solve_triangular(cholesky, targets, lower=True)
    log_determinant = 2.0 * np.sum(np.log(np.diag(cholesky)))
    return float(
        -0.5 * (whitened @ whitened)
        - 0.5 * log_determinant
        - 0.5 * num_data * math.log(2 * math.pi)
    )


def make_linear_regression_data(
    seed, num_data=50, num_features=5, prior_scale=1.0, noise_scale=1.0
):
    """
    Simulate a data set from :func:`linear_regression_model`.

    Features are i.i.d. standard normal; the true weights are drawn from the prior and the
    targets from the likelihood, using ``numpy.random.default_rng(seed)``.

    :param int seed: seed of the numpy generator.
    :param int num_data: number of observations ``N``.
    :param int num_features: number of features ``P``.
    :param float prior_scale: prior standard deviation of each weight.
    :param float noise_scale: observation noise standard deviation.
    :return: tuple ``(features, targets)`` of float64 numpy arrays with shapes ``[N, P]`` and
        ``[N]``.

    **Example**

    .. doctest::

        >>> from numpyro_extras.targets import make_linear_regression_data
        >>> features, targets = make_linear_regression_data(0, num_data=10, num_features=2)
        >>> features.shape, targets.shape
        ((10, 2), (10,))
    """
    rng = np.random.default_rng(seed)
    features = rng.standard_normal((num_data, num_features))
    true_weights = prior_scale * rng.standard_normal(num_features)
    targets = features @ true_weights + noise_scale * rng.standard_normal(num_data)
    return features, targets


# ------------------------------------------------------------------------------------------------
# Gaussian-mixture relaxation of a Boltzmann machine (paper Sec. 7.2, App. B)
# ------------------------------------------------------------------------------------------------
#
# Derivation of the exact quantities (checked numerically in tests/test_targets.py).
#
# Boltzmann machine on s in {-1, +1}^{D_B} (eq. 44):
#     P(s) = exp(s^T W s / 2 + s^T b) / Z_B,   W symmetric with zero diagonal.
# Relaxation: x | s ~ N(Q^T s, I_{D_x}) with Q of shape [D_B, D_x] and Q Q^T = W + D, D diagonal.
# Here `projection` stores Q^T (shape [D_x, D_B]); its columns are the q_i of eq. 51.
#
# Expanding the Gaussian density and using s_i^2 = 1 (so s^T D s = Tr(D)):
#     P(s) N(x; Q^T s, I) = (2 pi)^{-D_x/2} exp(-x^T x / 2 + s^T (Q x + b) - Tr(D) / 2) / Z_B,
# i.e. the s^T W s terms cancel. Summing over s with sum_s exp(s^T a) = prod_i 2 cosh(a_i):
#     p(x) = (2 pi)^{-D_x/2} exp(-Tr(D)/2) 2^{D_B} / Z_B * exp(-phi(x)),
#     phi(x) = x^T x / 2 - sum_i log cosh(q_i^T x + b_i)                                   (eq. 51)
# Since p(x) integrates to one,
#     log Z = log int exp(-phi) = log Z_B + Tr(D)/2 + (D_x/2) log(2 pi) - D_B log 2,        (eq. 52)
# which agrees with the paper (no correction needed). p(x) is the mixture sum_s P(s) N(Q^T s, I),
# so E[x] = Q^T E[s] (eq. 53) and Cov[x] = Q^T (E[s s^T] - E[s] E[s]^T) Q + I (eq. 54, with the
# paper's typo "E[Q^T s s^T Q + I]" fixed).


class BoltzmannRelaxation(NamedTuple):
    """
    A Gaussian-mixture relaxation of a Boltzmann machine with its exact normalizer and moments
    (continuous tempering paper, Sec. 7.2 and App. B). All arrays are float64 numpy arrays.

    With ``num_units`` Boltzmann units (``D_B``) and ``D_x`` continuous dimensions:

    :ivar weights: Boltzmann machine coupling matrix ``W``, shape ``[D_B, D_B]``, symmetric with
        zero diagonal.
    :ivar biases: Boltzmann machine biases ``b``, shape ``[D_B]``.
    :ivar projection: the matrix ``Q^T`` of the paper, shape ``[D_x, D_B]``, such that
        ``x | s ~ N(projection @ s, I_{D_x})``. Its column ``i`` is ``q_i`` of eq. 51 and
        ``projection.T @ projection == weights + diag(diagonal)`` up to rounding.
    :ivar diagonal: diagonal ``D`` of the relaxation, shape ``[D_B]``, making ``W + D``
        positive semi-definite.
    :ivar log_z: exact log normalizer ``log int exp(-phi(x)) dx`` of the potential ``phi`` of
        eq. 51 (eq. 52).
    :ivar mean: exact ``E[x]``, shape ``[D_x]`` (eq. 53).
    :ivar covariance: exact ``Cov[x]``, shape ``[D_x, D_x]`` (eq. 54, typo fixed).
    """

    weights: np.ndarray
    biases: np.ndarray
    projection: np.ndarray
    diagonal: np.ndarray
    log_z: float
    mean: np.ndarray
    covariance: np.ndarray


def _enumerate_boltzmann_machine(weights, biases, chunk_size=2**16):
    """
    Exact ``log Z_B``, ``E[s]`` and ``E[s s^T]`` of a Boltzmann machine
    ``P(s) ∝ exp(s^T W s / 2 + s^T b)`` on ``{-1, +1}^{D_B}`` by enumerating all ``2^{D_B}``
    states in chunks of ``chunk_size`` (memory ``O(chunk_size * D_B)``, time ``O(2^{D_B} D_B^2)``;
    practical up to ``D_B`` of about 20-24 on a CPU).

    The sums are accumulated relative to a running maximum of the log weights, so no state's
    weight overflows or underflows before it could matter.
    """
    weights = np.asarray(weights, dtype=np.float64)
    biases = np.asarray(biases, dtype=np.float64)
    num_units = biases.shape[0]
    unit_bits = np.arange(num_units, dtype=np.int64)
    running_max = -math.inf
    total = 0.0
    first_moment = np.zeros(num_units)
    second_moment = np.zeros((num_units, num_units))
    for start in range(0, 2**num_units, chunk_size):
        stop = min(start + chunk_size, 2**num_units)
        state_index = np.arange(start, stop, dtype=np.int64)
        # Bit i of the state index gives unit i: 0 -> -1, 1 -> +1.
        states = 2.0 * ((state_index[:, None] >> unit_bits) & 1) - 1.0
        log_weights = 0.5 * np.sum((states @ weights) * states, axis=1) + states @ biases
        new_max = max(running_max, float(np.max(log_weights)))
        rescale = math.exp(running_max - new_max)
        unnormalised_probs = np.exp(log_weights - new_max)
        total = rescale * total + np.sum(unnormalised_probs)
        first_moment = rescale * first_moment + unnormalised_probs @ states
        second_moment = rescale * second_moment + (states * unnormalised_probs[:, None]).T @ states
        running_max = new_max
    log_z = running_max + math.log(total)
    return log_z, first_moment / total, second_moment / total


def _relaxation_from_projection(projection, biases, chunk_size=2**16):
    """
    Build a :class:`BoltzmannRelaxation` from ``projection`` (``Q^T``, shape ``[D_x, D_B]``) and
    ``biases``: the Boltzmann machine is read off ``Q Q^T = W + D`` (off-diagonal part ``W``,
    diagonal ``D``), so the exact quantities are exact for the potential built from
    ``projection`` and ``biases`` whatever rounding produced ``projection``.
    """
    projection = np.asarray(projection, dtype=np.float64)
    biases = np.asarray(biases, dtype=np.float64)
    num_dims, num_units = projection.shape
    shifted_weights = projection.T @ projection
    shifted_weights = 0.5 * (shifted_weights + shifted_weights.T)
    diagonal = np.diag(shifted_weights).copy()
    weights = shifted_weights - np.diag(diagonal)
    log_z_machine, state_mean, state_second_moment = _enumerate_boltzmann_machine(
        weights, biases, chunk_size
    )
    # Eq. 52 (derivation above).
    log_z = (
        log_z_machine
        + 0.5 * np.sum(diagonal)
        + 0.5 * num_dims * math.log(2 * math.pi)
        - num_units * math.log(2.0)
    )
    state_covariance = state_second_moment - np.outer(state_mean, state_mean)
    mean = projection @ state_mean  # eq. 53
    covariance = projection @ state_covariance @ projection.T + np.eye(num_dims)  # eq. 54
    covariance = 0.5 * (covariance + covariance.T)
    return BoltzmannRelaxation(
        weights=weights,
        biases=biases,
        projection=projection,
        diagonal=diagonal,
        log_z=float(log_z),
        mean=mean,
        covariance=covariance,
    )


def make_boltzmann_relaxation(seed, num_units=16):
    """
    Generate a random Boltzmann machine as in App. B of the continuous tempering paper and its
    Gaussian-mixture relaxation, with exact ``log Z``, mean and covariance by enumeration.

    Generation (``numpy.random.default_rng(seed)``): ``R`` Haar-random orthogonal (QR of a
    Gaussian matrix with the signs of ``diag`` of the triangular factor absorbed into ``R``);
    eigenvalues ``e_i = 6 tanh(2 n_i)``, ``n_i ~ N(0, 1)``; ``V = R diag(e) R^T``; ``W`` equals
    ``V`` off the diagonal and is zero on it; ``b_i ~ N(0, 0.1^2)``. Eigenvalues clustered near
    ``±6`` make the relaxation highly multimodal.

    The relaxation uses the diagonal shift ``D = -lambda_min(W) I`` rather than the paper's
    semi-definite program (spec pitfall P19: no convex solver needed; a valid relaxation, but a
    different and more widely separated target than the paper's). Only the eigen-directions of
    ``W + D`` with eigenvalue above ``1e-6`` are kept, ``Q = R_r diag(sqrt(e_r))``, so
    ``D_x = num_units - 1`` (the direction of ``lambda_min`` is dropped).

    The exact quantities cost ``O(2^num_units num_units^2)``: about a second for
    ``num_units = 20``.

    :param int seed: seed of the numpy generator.
    :param int num_units: number of Boltzmann units ``D_B``.
    :return: the relaxation with its exact ``log_z``, ``mean`` and ``covariance``.
    :rtype: BoltzmannRelaxation

    **Example**

    .. doctest::

        >>> from numpyro_extras.targets import make_boltzmann_relaxation
        >>> relaxation = make_boltzmann_relaxation(0, num_units=10)
        >>> relaxation.projection.shape
        (9, 10)
    """
    rng = np.random.default_rng(seed)
    gaussian_matrix = rng.standard_normal((num_units, num_units))
    orthogonal, triangular = np.linalg.qr(gaussian_matrix)
    # Without the sign fix QR's output is not Haar distributed (Mezzadri, 2007).
    orthogonal = orthogonal * np.sign(np.diag(triangular))
    eigenvalues = 6.0 * np.tanh(2.0 * rng.standard_normal(num_units))
    coupling = (orthogonal * eigenvalues) @ orthogonal.T
    weights = coupling - np.diag(np.diag(coupling))
    weights = 0.5 * (weights + weights.T)
    biases = 0.1 * rng.standard_normal(num_units)

    weight_eigenvalues, weight_eigenvectors = np.linalg.eigh(weights)
    # The smallest shift making W + D positive semi-definite; its bottom eigenvalue becomes zero
    # and is dropped below, so D_x = D_B - 1 (unless lambda_min is repeated).
    shifted_eigenvalues = weight_eigenvalues - weight_eigenvalues[0]
    keep = shifted_eigenvalues > 1e-6
    projection = (weight_eigenvectors[:, keep] * np.sqrt(shifted_eigenvalues[keep])).T
    return _relaxation_from_projection(projection, biases)


def _log_cosh(value):
    # log cosh(a) = |a| + log(1 + exp(-2|a|)) - log 2 never overflows, unlike log(cosh(a)), which
    # overflows for |a| > ~710 (float64) or ~89 (float32).
    magnitude = jnp.abs(value)
    return magnitude + jnp.log1p(jnp.exp(-2.0 * magnitude)) - math.log(2.0)


def boltzmann_relaxation_potential(relaxation):
    """
    Potential energy of a Boltzmann machine relaxation (eq. 51 of the continuous tempering paper)::

        phi(x) = x^T x / 2 - sum_i log cosh(q_i^T x + b_i),

    with ``q_i = relaxation.projection[:, i]``. Its log normalizer is ``relaxation.log_z``.

    :param BoltzmannRelaxation relaxation: the relaxation, e.g. from
        :func:`make_boltzmann_relaxation`.
    :return: a JAX function mapping ``x`` of shape ``[..., D_x]`` to ``phi(x)`` of shape ``[...]``.
    :rtype: callable

    **Example**

    .. doctest::

        >>> import jax, jax.numpy as jnp
        >>> from numpyro_extras.targets import (
        ...     boltzmann_relaxation_potential, make_boltzmann_relaxation)
        >>> relaxation = make_boltzmann_relaxation(0, num_units=8)
        >>> potential = boltzmann_relaxation_potential(relaxation)
        >>> gradient = jax.grad(potential)(jnp.zeros(7))
    """
    projection = jnp.asarray(relaxation.projection)
    biases = jnp.asarray(relaxation.biases)

    def potential(x):
        return 0.5 * jnp.sum(x * x, axis=-1) - jnp.sum(_log_cosh(x @ projection + biases), axis=-1)

    return potential


def boltzmann_relaxation_model(relaxation):
    """
    NumPyro model of a Boltzmann machine relaxation whose potential energy is exactly ``phi`` of
    eq. 51 (:func:`boltzmann_relaxation_potential`), so its log normalizer is
    ``relaxation.log_z``.

    The single latent site ``"x"`` has event shape ``[D_x]`` and a standard normal prior (which
    gives sensible initial values and prior draws); the factor site ``"log_cosh"`` adds
    ``sum_i log cosh(q_i^T x + b_i) + (D_x / 2) log(2 pi)``, the last term cancelling the
    prior's normalising constant so that the potential is ``phi`` with no offset.

    :param BoltzmannRelaxation relaxation: the relaxation, e.g. from
        :func:`make_boltzmann_relaxation`.

    **Example**

    .. doctest::

        >>> import jax
        >>> from numpyro.infer import MCMC, NUTS
        >>> from numpyro_extras.targets import (
        ...     boltzmann_relaxation_model, make_boltzmann_relaxation)
        >>> relaxation = make_boltzmann_relaxation(0, num_units=8)
        >>> mcmc = MCMC(NUTS(boltzmann_relaxation_model), num_warmup=100, num_samples=100,
        ...             progress_bar=False)
        >>> mcmc.run(jax.random.PRNGKey(0), relaxation)
    """
    projection = jnp.asarray(relaxation.projection)
    biases = jnp.asarray(relaxation.biases)
    num_dims = projection.shape[0]
    x = numpyro.sample("x", dist.Normal(0.0, 1.0).expand([num_dims]).to_event(1))
    numpyro.factor(
        "log_cosh",
        jnp.sum(_log_cosh(x @ projection + biases), axis=-1)
        + 0.5 * num_dims * math.log(2 * math.pi),
    )


# ------------------------------------------------------------------------------------------------
# Hierarchical radon regression (paper Sec. 7.3, Fig. 3)
# ------------------------------------------------------------------------------------------------


def load_radon():
    """
    Minnesota radon data (Gelman & Hill, 2007, ch. 12) bundled with the package: 919 households
    in 85 counties.

    :return: dict with numpy arrays ``"floor"`` (float64 ``[919]``, 1 if measured on the first
        floor, 0 in the basement), ``"log_uranium"`` (float64 ``[919]``, county-level log uranium
        of each household's county), ``"county"`` (int64 ``[919]``, **0-based** county index),
        ``"log_radon"`` (float64 ``[919]``) and the int ``"num_counties"`` (85). The keys match
        the arguments of :func:`radon_model`.
    :rtype: dict

    **Example**

    .. doctest::

        >>> from numpyro_extras.targets import load_radon, radon_model
        >>> data = load_radon()
        >>> int(data["county"].min()), data["num_counties"]
        (0, 85)
    """
    data_file = resources.files("numpyro_extras") / "data" / "radon_mn.json"
    raw = json.loads(data_file.read_text())
    return {
        "floor": np.asarray(raw["floor_measure"], dtype=np.float64),
        "log_uranium": np.asarray(raw["log_uppm"], dtype=np.float64),
        # The file follows Stan's 1-based convention.
        "county": np.asarray(raw["county_idx"], dtype=np.int64) - 1,
        "log_radon": np.asarray(raw["log_radon"], dtype=np.float64),
        "num_counties": int(raw["J"]),
    }


def radon_model(floor, log_uranium, county, num_counties, log_radon=None):
    """
    Hierarchical regression of household log radon (continuous tempering paper, Sec. 7.3,
    Fig. 3a), in the non-centred form of the paper's code::

        mu_alpha, mu_beta ~ N(0, 1)
        sigma_alpha, sigma_beta, epsilon ~ HalfCauchy(2.5)
        alpha = mu_alpha + sigma_alpha * alpha_offset,   alpha_offset ~ N(0, I_J)
        beta = mu_beta + sigma_beta * beta_offset,       beta_offset ~ N(0, I_2)
        log_radon[i] ~ N(alpha[county[i]] + beta[0] floor[i] + beta[1] log_uranium[i], epsilon^2)

    All scales are standard deviations (spec pitfall P17). With the bundled data (``J = 85``)
    there are 5 + 85 + 2 = 92 unconstrained dimensions; the scales live on the log scale with
    their Jacobians in the potential. The centred and non-centred forms have the same
    normalizer ``p(log_radon)``, which has no closed form. ``alpha`` and ``beta`` are recorded as
    deterministic sites.

    :param floor: floor indicator per household, shape ``[N]``.
    :param log_uranium: county log uranium per household, shape ``[N]``.
    :param county: 0-based county index per household, shape ``[N]``.
    :param int num_counties: number of counties ``J`` (static).
    :param log_radon: observed log radon, shape ``[N]``; ``None`` to sample it.

    **Example**

    .. doctest::

        >>> import jax
        >>> from numpyro.infer import MCMC, NUTS
        >>> from numpyro_extras.targets import load_radon, radon_model
        >>> mcmc = MCMC(NUTS(radon_model), num_warmup=200, num_samples=200, progress_bar=False)
        >>> mcmc.run(jax.random.PRNGKey(0), **load_radon())
    """
    floor = jnp.asarray(floor)
    log_uranium = jnp.asarray(log_uranium)
    county = jnp.asarray(county)
    mu_alpha = numpyro.sample("mu_alpha", dist.Normal(0.0, 1.0))
    mu_beta = numpyro.sample("mu_beta", dist.Normal(0.0, 1.0))
    sigma_alpha = numpyro.sample("sigma_alpha", dist.HalfCauchy(2.5))
    sigma_beta = numpyro.sample("sigma_beta", dist.HalfCauchy(2.5))
    epsilon = numpyro.sample("epsilon", dist.HalfCauchy(2.5))
    alpha_offset = numpyro.sample(
        "alpha_offset", dist.Normal(0.0, 1.0).expand([num_counties]).to_event(1)
    )
    beta_offset = numpyro.sample("beta_offset", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    alpha = numpyro.deterministic("alpha", mu_alpha + sigma_alpha * alpha_offset)
    beta = numpyro.deterministic("beta", mu_beta + sigma_beta * beta_offset)
    predicted = alpha[county] + beta[0] * floor + beta[1] * log_uranium
    with numpyro.plate("data", county.shape[0]):
        numpyro.sample("log_radon", dist.Normal(predicted, epsilon), obs=log_radon)


# ------------------------------------------------------------------------------------------------
# Synthetic multimodal distribution over ordinal integers (ACS paper Sec. 4.1, Table 3)
# ------------------------------------------------------------------------------------------------


class MultimodalGrid(NamedTuple):
    """
    The ACS paper's synthetic two-dimensional target on ``{0, ..., N - 1}^2`` (spec ``acs.md``
    E1): modes on a square grid and the log density of the paper's code,

    .. math::

        U(\\theta) = \\log\\Big(\\sum_m w_m \\exp\\big(-\\lVert\\theta - \\mu_m\\rVert_2 / s\\big)
        + 10^{-10}\\Big),

    with the **unsquared** Euclidean distance and ``s = sigma^2 L`` (spec pitfall P3). Build one
    with :func:`make_multimodal_grid`.

    :param int num_values: ``N``, the number of values of each coordinate.
    :param modes: mode centres ``mu_m``, float array ``[L, 2]``.
    :param weights: mode weights ``w_m``, float array ``[L]``.
    :param float scale: ``s = sigma^2 L``.
    """

    num_values: int
    modes: np.ndarray
    weights: np.ndarray
    scale: float


#: Where :func:`make_multimodal_grid` puts the modes: ``"grid"`` (the paper's square grid) or
#: ``"diagonal"`` (one mode per row and column).
MULTIMODAL_LAYOUTS = ("grid", "diagonal")


def make_multimodal_grid(
    modes_per_side=5,
    spacing=25,
    num_values=150,
    sigma2=None,
    uneven=False,
    heavy_weight=1.0,
    light_weight=0.4,
    layout="grid",
):
    """
    The synthetic multimodal target of the ACS paper scaled to CPU size (spec claim C8).

    ``L = modes_per_side^2`` modes at ``(spacing (i + 1), spacing (j + 1))``, ``i, j = 0, ...,
    modes_per_side - 1`` (the paper's layout; its printed formula for the centres is a typo).
    The even case has ``w_m = 1`` and ``sigma^2 = 0.15`` (the paper's Fig. 1); the uneven case
    (Table 3, spec pitfall P4) gives the top-left mode ``(spacing, spacing)`` the weight
    ``heavy_weight`` and every other mode ``light_weight``, with ``sigma^2 = 0.2`` (the paper's
    code).

    ``layout="diagonal"`` puts ``L = modes_per_side`` modes at ``(spacing (k + 1), spacing
    (k + 1))`` instead: neighbours are ``sqrt(2) spacing`` apart, as far as on the grid, but no
    row or column holds two modes, so a sampler that moves one coordinate at a time (Gibbs)
    cannot step from one mode to the next, as it can along the grid's rows. The modes of
    correlated coordinates look like this.

    :param int modes_per_side: ``sqrt(L)`` (paper 5).
    :param int spacing: ``Delta`` between neighbouring modes (paper 75; 25 at CPU size).
    :param int num_values: ``N`` values per coordinate (paper 450; 150 at CPU size).
    :param float sigma2: ``sigma^2``; ``None`` for the paper's 0.15 (even) or 0.2 (uneven).
    :param bool uneven: uneven mode weights (Table 3).
    :param str layout: one of :data:`MULTIMODAL_LAYOUTS`.
    :return: :class:`MultimodalGrid`.

    **Example**

    .. doctest::

        >>> from numpyro_extras.targets import make_multimodal_grid, multimodal_grid_probabilities
        >>> grid = make_multimodal_grid()
        >>> multimodal_grid_probabilities(grid).shape
        (150, 150)
    """
    modes_per_side, spacing, num_values = int(modes_per_side), int(spacing), int(num_values)
    if modes_per_side < 1 or spacing < 1 or spacing * modes_per_side >= num_values:
        raise ValueError(
            f"The modes must lie inside {{0, ..., {num_values - 1}}}^2: got modes_per_side="
            f"{modes_per_side}, spacing={spacing}."
        )
    if layout not in MULTIMODAL_LAYOUTS:
        raise ValueError(f"layout must be one of {MULTIMODAL_LAYOUTS}, got {layout!r}.")
    centres = spacing * (np.arange(modes_per_side) + 1.0)
    if layout == "grid":
        rows, columns = np.meshgrid(centres, centres, indexing="ij")
        modes = np.stack([rows.ravel(), columns.ravel()], -1)
    else:
        modes = np.stack([centres, centres], -1)
    weights = np.ones(len(modes))
    if uneven:
        weights[:] = light_weight
        weights[0] = heavy_weight
    if sigma2 is None:
        sigma2 = 0.2 if uneven else 0.15
    return MultimodalGrid(num_values, modes, weights, float(sigma2) * len(modes))


def _safe_norm(offsets):
    """Euclidean norm over the last axis whose gradient is 0 (not NaN) at the origin."""
    squared = jnp.sum(offsets**2, -1)
    positive = squared > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, squared, 1.0)), 0.0)


def multimodal_grid_log_density(grid, theta):
    """
    ``U(theta)`` of :class:`MultimodalGrid` (a log density, unnormalised), differentiable.

    The distance's gradient is taken as 0 at a mode centre, where the Euclidean norm has none,
    so that any gradient user (not only ACS, which reads a non-finite gradient as flat) gets a
    finite value there.

    :param MultimodalGrid grid: the target.
    :param theta: coordinates, float array ``[..., 2]`` (integers in ``{0, ..., N - 1}``).
    :return: array ``[...]``.
    """
    theta = jnp.asarray(theta, dtype=jnp.result_type(float))
    distances = _safe_norm(theta[..., None, :] - jnp.asarray(grid.modes))
    log_mixture = jax.nn.logsumexp(
        -distances / grid.scale + jnp.log(jnp.asarray(grid.weights)), axis=-1
    )
    return jnp.logaddexp(log_mixture, math.log(1e-10))


def multimodal_grid_probabilities(grid):
    """
    The exact distribution of :class:`MultimodalGrid` over all ``N^2`` states, by enumeration.

    :param MultimodalGrid grid: the target.
    :return: float64 numpy array ``[N, N]`` summing to 1; entry ``[a, b]`` is ``P(theta = (a, b))``.
    """
    values = np.arange(grid.num_values, dtype=np.float64)
    theta = np.stack(np.meshgrid(values, values, indexing="ij"), -1)
    log_p = np.asarray(multimodal_grid_log_density(grid, theta), dtype=np.float64)
    p = np.exp(log_p - log_p.max())
    return p / p.sum()


def multimodal_grid_nearest_mode(grid, theta):
    """
    Index of the nearest mode centre (ties to the lower index) for each state.

    :param MultimodalGrid grid: the target.
    :param theta: coordinates, array ``[..., 2]``.
    :return: integer numpy array ``[...]`` and the distance to that mode, float array ``[...]``.
    """
    theta = np.asarray(theta, dtype=np.float64)
    distances = np.linalg.norm(theta[..., None, :] - grid.modes, axis=-1)
    nearest = np.argmin(distances, -1)
    return nearest, np.take_along_axis(distances, nearest[..., None], -1)[..., 0]


def multimodal_grid_model(grid):
    """
    :class:`MultimodalGrid` as a NumPyro model with two ``Categorical(N)`` latent sites ``"a"``
    and ``"b"`` (the two coordinates) and a factor site ``"log_density"``; the uniform
    categorical prior is a constant, so the posterior is exactly the grid distribution (for
    NumPyro's discrete Gibbs kernels, which enumerate the values of one site at a time).

    :param MultimodalGrid grid: the target.
    """
    logits = jnp.zeros(grid.num_values)
    a = numpyro.sample("a", dist.Categorical(logits=logits))
    b = numpyro.sample("b", dist.Categorical(logits=logits))
    numpyro.factor("log_density", multimodal_grid_log_density(grid, jnp.stack([a, b], -1)))


# ------------------------------------------------------------------------------------------------
# Bayesian logistic regression on the German credit data
# ------------------------------------------------------------------------------------------------

__all__ += ["load_german_credit", "logistic_regression_model"]

GERMAN_CREDIT_NUM_PREDICTORS = 24


def load_german_credit(num_predictors=None):
    """
    The German credit data (Statlog, UCI; the numeric version with 24 predictors) bundled with the
    package: 1000 loan applicants, label 1 for a bad credit risk (300 of them).

    Each predictor is standardised to mean 0 and standard deviation 1 (over the 1000 rows, with
    ``ddof=0``) and a column of ones is prepended as the intercept, as in the usual Bayesian
    logistic regression benchmark of this data.

    :param int num_predictors: keep the first ``num_predictors`` predictors (1 to 24); ``None``
        keeps all 24.
    :return: tuple ``(features, labels)``: float64 numpy arrays of shapes
        ``[1000, num_predictors + 1]`` (intercept first) and ``[1000]`` with values in {0, 1};
        the arguments of :func:`logistic_regression_model`.
    :raises ValueError: for a ``num_predictors`` outside 1..24 or not an integer.

    **Example**

    .. doctest::

        >>> from numpyro_extras.targets import load_german_credit
        >>> features, labels = load_german_credit(num_predictors=8)
        >>> features.shape, labels.shape
        ((1000, 9), (1000,))
    """
    if num_predictors is None:
        num_predictors = GERMAN_CREDIT_NUM_PREDICTORS
    if (
        isinstance(num_predictors, bool)
        or not isinstance(num_predictors, (int, np.integer))
        or not 1 <= num_predictors <= GERMAN_CREDIT_NUM_PREDICTORS
    ):
        raise ValueError(
            f"num_predictors must be an integer from 1 to {GERMAN_CREDIT_NUM_PREDICTORS} (or "
            f"None for all), got {num_predictors!r}."
        )
    data_file = resources.files("numpyro_extras") / "data" / "german.csv"
    with data_file.open("r") as handle:
        table = np.loadtxt(handle, delimiter=",", skiprows=1, dtype=np.float64)
    predictors = table[:, : int(num_predictors)]
    predictors = (predictors - predictors.mean(axis=0)) / predictors.std(axis=0)
    features = np.concatenate([np.ones((table.shape[0], 1)), predictors], axis=1)
    return features, table[:, -1].copy()


def logistic_regression_model(features, labels=None):
    """
    Bayesian logistic regression with standard normal priors on every coefficient::

        w ~ N(0, I_P)                          (the intercept, if features has one, included)
        labels[n] ~ Bernoulli(logits = features[n] @ w),   n = 1..N   (plate "data")

    Latent site ``"w"`` has event shape ``[P]``; the observed site is ``"labels"``. With
    :func:`load_german_credit` ``P`` is 25 (24 predictors and the intercept). The log evidence has
    no closed form; ``benchmarks/german_credit_benchmark.py`` computes a reference by importance
    sampling from a Student-t fitted at the mode.

    :param features: design matrix, shape ``[N, P]``.
    :param labels: observed labels in {0, 1}, shape ``[N]``; ``None`` to sample them.

    **Example**

    .. doctest::

        >>> import jax
        >>> import numpyro_extras as nx
        >>> from numpyro_extras.targets import load_german_credit, logistic_regression_model
        >>> features, labels = load_german_credit(num_predictors=8)
        >>> evidence = nx.ais(jax.random.PRNGKey(0), logistic_regression_model,
        ...                   (features, labels), num_particles=100, num_temperatures=50,
        ...                   progress_bar=False)
    """
    features = jnp.asarray(features)
    num_data, num_features = features.shape
    weights = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([num_features]).to_event(1))
    with numpyro.plate("data", num_data):
        numpyro.sample("labels", dist.Bernoulli(logits=features @ weights), obs=labels)
