r"""The Gaussian-mixture relaxation of a Boltzmann machine (continuous tempering paper, Sec. 7.2
and App. B), with exact ``log Z``, mean and covariance obtained by enumerating all Boltzmann
machine states.

``log Z`` is the log integral of ``exp(-phi)`` over NumPyro's unconstrained space, as defined in
:mod:`numpyro_extras.targets`. :func:`make_boltzmann_relaxation` draws a machine and its
relaxation; :func:`boltzmann_relaxation_potential` and :func:`boltzmann_relaxation_model` give its
potential ``phi`` of eq. 51 as a JAX function and as a NumPyro model.
"""

import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

__all__ = [
    "BoltzmannRelaxation",
    "boltzmann_relaxation_model",
    "boltzmann_relaxation_potential",
    "boltzmann_states",
    "enumerate_boltzmann_machine",
    "make_boltzmann_relaxation",
]

# ------------------------------------------------------------------------------------------------
# Gaussian-mixture relaxation of a Boltzmann machine (paper Sec. 7.2, App. B)
# ------------------------------------------------------------------------------------------------
#
# Derivation of the exact quantities (checked numerically in
# tests/targets/test_boltzmann_relaxation.py).
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

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import make_boltzmann_relaxation
        relaxation = make_boltzmann_relaxation(0, num_units=10)
        relaxation.log_z, relaxation.mean.shape  # the exact log Z and E[x], shape (9,)
    """

    weights: np.ndarray
    biases: np.ndarray
    projection: np.ndarray
    diagonal: np.ndarray
    log_z: float
    mean: np.ndarray
    covariance: np.ndarray


def boltzmann_states(num_units, start=0, stop=None):
    """
    The Boltzmann machine states ``s`` in ``{-1, +1}^{D_B}`` with indices ``start`` to
    ``stop - 1``, in the order every enumeration of this package uses: bit ``i`` of a state's
    index gives unit ``i`` (0 for -1, 1 for +1).

    :param int num_units: number of units ``D_B``.
    :param int start: index of the first state.
    :param int stop: one past the index of the last state; ``None`` for ``2^{D_B}``, all states.
    :return: float64 numpy array of shape ``[stop - start, D_B]`` with entries -1 and +1.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets.boltzmann_relaxation import boltzmann_states
        boltzmann_states(2).tolist()  # [[-1.0, -1.0], [1.0, -1.0], [-1.0, 1.0], [1.0, 1.0]]
    """
    if stop is None:
        stop = 2**num_units
    state_index = np.arange(start, stop, dtype=np.int64)
    return 2.0 * ((state_index[:, None] >> np.arange(num_units, dtype=np.int64)) & 1) - 1.0


def enumerate_boltzmann_machine(weights, biases, chunk_size=2**16):
    """
    Exact ``log Z_B``, ``E[s]`` and ``E[s s^T]`` of a Boltzmann machine
    ``P(s) ∝ exp(s^T W s / 2 + s^T b)`` on ``{-1, +1}^{D_B}`` (eq. 44 of the continuous tempering
    paper) by enumerating all ``2^{D_B}`` states (:func:`boltzmann_states`) in chunks of
    ``chunk_size`` (memory ``O(chunk_size * D_B)``, time ``O(2^{D_B} D_B^2)``; practical up to
    ``D_B`` of about 20-24 on a CPU).

    The sums are accumulated relative to a running maximum of the log weights, so no state's
    weight overflows or underflows before it could matter.

    :param weights: coupling matrix ``W``, shape ``[D_B, D_B]``, symmetric with zero diagonal.
    :param biases: biases ``b``, shape ``[D_B]``.
    :param int chunk_size: number of states evaluated at once.
    :return: tuple ``(log_z, mean, second_moment)``: ``log Z_B`` as a float, ``E[s]`` as a float64
        numpy array ``[D_B]`` and ``E[s s^T]`` as a float64 numpy array ``[D_B, D_B]``.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets.boltzmann_relaxation import enumerate_boltzmann_machine
        log_z, mean, second_moment = enumerate_boltzmann_machine(np.zeros((3, 3)), np.zeros(3))
        log_z  # 3 log 2 = 2.0794: all 8 states equally likely
    """
    weights = np.asarray(weights, dtype=np.float64)
    biases = np.asarray(biases, dtype=np.float64)
    num_units = biases.shape[0]
    running_max = -math.inf
    total = 0.0
    first_moment = np.zeros(num_units)
    second_moment = np.zeros((num_units, num_units))
    for start in range(0, 2**num_units, chunk_size):
        stop = min(start + chunk_size, 2**num_units)
        states = boltzmann_states(num_units, start, stop)
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
    log_z_machine, state_mean, state_second_moment = enumerate_boltzmann_machine(
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
    semi-definite program (eq. 46), which would need a convex solver: a valid relaxation (eq. 52
    holds with this ``D``), but a different and more widely separated target than the paper's.
    Only the eigen-directions of ``W + D`` with eigenvalue above ``1e-6`` are kept,
    ``Q = R_r diag(sqrt(e_r))``, so ``D_x = num_units - 1`` (the direction of ``lambda_min`` is
    dropped).

    The exact quantities cost ``O(2^num_units num_units^2)``: about a second for
    ``num_units = 20``.

    :param int seed: seed of the numpy generator.
    :param int num_units: number of Boltzmann units ``D_B``.
    :return: the relaxation with its exact ``log_z``, ``mean`` and ``covariance``.
    :rtype: BoltzmannRelaxation

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import make_boltzmann_relaxation
        relaxation = make_boltzmann_relaxation(0, num_units=10)
        relaxation.projection.shape  # (9, 10)
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
    :rtype: collections.abc.Callable

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import boltzmann_relaxation_potential, make_boltzmann_relaxation
        relaxation = make_boltzmann_relaxation(0, num_units=8)
        potential = boltzmann_relaxation_potential(relaxation)
        gradient = jax.grad(potential)(jnp.zeros(7))
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

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import boltzmann_relaxation_model, make_boltzmann_relaxation
        relaxation = make_boltzmann_relaxation(0, num_units=8)
        mcmc = MCMC(NUTS(boltzmann_relaxation_model), num_warmup=100, num_samples=100,
                    progress_bar=False)
        mcmc.run(jax.random.PRNGKey(0), relaxation)
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
