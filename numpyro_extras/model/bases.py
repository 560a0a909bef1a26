"""The base densities: normalised Gaussians and Gaussian mixtures on a model's flat space.

A base is where continuous tempering (inverse temperature 0) and annealed importance sampling
start: a normalised density ``exp(-psi(x))`` with cheap exact draws, plus ``log zeta``, a guess
of the target's ``log Z`` (continuous tempering paper section 6, eqs. 23-25). Every family uses
these; :func:`~numpyro_extras.fit_base` fits them to a model.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import scipy.linalg
from scipy.special import logsumexp

from numpyro_extras.shell.compilation import quick_jit

__all__ = [
    "BaseCoverageWarning",
    "GaussianBase",
    "MixtureBase",
    "ModeSearchWarning",
    "gaussian_log_density",
    "gaussian_log_normalizers",
    "validate_base",
    "weighted_gaussian",
]


def gaussian_log_density(position, loc, scale_tril):
    """``log N(x; loc, L L^T)``: NumPyro's ``MultivariateNormal`` with ``scale_tril=L``,
    batched over the leading axes of its arguments (one component per row of ``loc`` and
    ``scale_tril``, say). Jittable.

    :param position: point(s) ``(..., D)``.
    :param loc: mean(s) ``(..., D)``.
    :param scale_tril: lower Cholesky factor(s) ``(..., D, D)``.
    :return: log densities, the broadcast batch shape.

    **Example:**

    .. code-block:: python

        gaussian_log_density(jnp.zeros(2), jnp.zeros(2), jnp.eye(2))  # -log(2 pi)
    """
    return dist.MultivariateNormal(loc, scale_tril=scale_tril).log_prob(position)


def gaussian_log_normalizers(scale_trils) -> np.ndarray:
    """``log N(loc; loc, L L^T) = -sum(log diag L) - D log(2 pi) / 2``, the log density at the
    mean, of each lower Cholesky factor; computed once, with NumPy, by the functions that
    factor a Gaussian before a compiled loop evaluates it many times.

    :param scale_trils: lower Cholesky factor(s) ``(..., D, D)``.
    :return: ``np.ndarray`` of shape ``(...)``, float64.

    **Example:**

    .. code-block:: python

        gaussian_log_normalizers(np.eye(2)[None])  # [-log(2 pi)]
    """
    scale_trils = np.asarray(scale_trils, dtype=np.float64)
    diagonals = np.diagonal(scale_trils, axis1=-2, axis2=-1)
    return -np.sum(np.log(diagonals), axis=-1) - 0.5 * scale_trils.shape[-1] * math.log(2 * math.pi)


class BaseCoverageWarning(UserWarning):
    """:func:`fit_base` may have missed modes of the posterior: a run with the base can then be
    wrong without showing it, so the tempering diagnostics repeat this warning.

    **Example:**

    .. code-block:: python

        import warnings

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", nx.BaseCoverageWarning)  # stop rather than go on
                base = nx.fit_base(jax.random.PRNGKey(0), model, (x, y))
        except nx.BaseCoverageWarning as warning:
            print(warning)  # then fit again with more num_starts, or a longer run
    """


class ModeSearchWarning(BaseCoverageWarning):
    """:func:`fit_base`'s refitting rounds ended while still finding new modes: the posterior
    may have more modes than the base covers (a heavy tail alone gives a plain
    :class:`BaseCoverageWarning`). Where the posterior's standard deviation in one coordinate
    differs more than ``SCALE_CHANGE_RATIO``-fold between the fitted components and the local
    minima of the potential that none covers, the message names that coordinate's site and says
    the scale changes across the posterior's mass (a funnel), which Gaussian components follow
    only piece by piece. A tempering kernel that fitted such a base with many modes makes more
    transitions per kept draw (``moves_per_draw="auto"``).

    :param str message: what the fit found.
    :param int num_modes: the modes the fit had found when its rounds ended.

    **Example:**

    .. code-block:: python

        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            base = nx.fit_base(jax.random.PRNGKey(0), model, (x, y))
        found = [w.message.num_modes for w in caught if w.category is nx.ModeSearchWarning]
    """

    def __init__(self, message, num_modes):
        # Both in args, so that the warning survives pickling (process pools, pytest-xdist).
        super().__init__(message, int(num_modes))

    @property
    def num_modes(self) -> int:
        return self.args[1]

    def __str__(self):
        return self.args[0]


class GaussianBase(NamedTuple):
    """A normalised Gaussian base density on the model's flat unconstrained space.

    :param loc: mean, shape ``(D,)``.
    :param scale_tril: lower Cholesky factor of the covariance, shape ``(D, D)``.
    :param log_zeta: the guess ``log zeta`` of the target's log normaliser ``log Z``.

    **Example:**

    .. code-block:: python

        base = nx.GaussianBase(jnp.zeros(2), jnp.eye(2), log_zeta=0.0)
        base.potential(jnp.ones(2))  # psi(x) = -log N(x; loc, L L^T)
    """

    loc: jax.Array
    scale_tril: jax.Array
    log_zeta: jax.Array

    @property
    def dimension(self) -> int:
        return int(jnp.shape(self.loc)[-1])

    @property
    def covariance(self) -> jax.Array:
        return self.scale_tril @ self.scale_tril.T

    def potential(self, position):
        """``psi(x) = -log N(x; loc, scale_tril scale_tril^T)`` for one flat point."""
        return -gaussian_log_density(position, self.loc, self.scale_tril)

    def potential_function(self):
        """``psi`` as a function of one flat point, with the factorisation done once.

        :return: a function ``x -> psi(x)``; see :meth:`potential_and_gradient`.
        """
        potential_and_gradient = self.potential_and_gradient()
        return lambda position: potential_and_gradient(position)[0]

    def potential_and_gradient(self):
        """``psi`` and its gradient as one function of a flat point, factorised once.

        The precision matrix ``(L L^T)^{-1}`` is computed here with NumPy (so the result holds no
        JAX tracer); each call is then one matrix-vector product, ``grad psi = P (x - loc)`` and
        ``psi = (x - loc)^T grad psi / 2 + const``, or an elementwise scaling for a diagonal
        base.

        :return: a function ``x -> (psi(x), grad psi(x))``.

        **Example:**

        .. code-block:: python

            value, gradient = base.potential_and_gradient()(jnp.zeros(base.dimension))
        """
        scale_tril = np.asarray(self.scale_tril, dtype=np.float64)
        loc = jnp.asarray(self.loc)
        diagonal = np.diagonal(scale_tril)
        normalizer = jnp.asarray(-gaussian_log_normalizers(scale_tril), loc.dtype)
        if not np.any(np.tril(scale_tril, -1)):
            precision_diagonal = jnp.asarray(diagonal**-2, loc.dtype)

            def diagonal_potential_and_gradient(position):
                centred = position - loc
                gradient = precision_diagonal * centred
                return 0.5 * jnp.sum(centred * gradient) + normalizer, gradient

            return diagonal_potential_and_gradient
        inverse_scale_tril = scipy.linalg.solve_triangular(
            scale_tril, np.eye(self.dimension), lower=True
        )
        precision = jnp.asarray(inverse_scale_tril.T @ inverse_scale_tril, loc.dtype)

        def dense_potential_and_gradient(position):
            centred = position - loc
            gradient = precision @ centred
            return 0.5 * jnp.sum(centred * gradient) + normalizer, gradient

        return dense_potential_and_gradient

    def sample(self, rng_key, sample_shape=()):
        """Draw ``sample_shape`` points from the base."""
        return _gaussian_draws(self, rng_key, tuple(sample_shape))


class MixtureBase(NamedTuple):
    """A normalised Gaussian-mixture base density on the model's flat unconstrained space.

    ``psi(x) = -log sum_k pi_k N(x; mu_k, L_k L_k^T)``. A base with a component on every mode
    keeps ``Delta = phi + log zeta - psi`` nearly flat across modes, so the tempered chain finds
    each mode at ``beta`` near 0 in proportion to its mass (paper eqs. 19 and 23). It offers what
    the kernels and estimators use of a :class:`GaussianBase`: ``potential_and_gradient``,
    ``sample``, ``log_zeta``, and the mixture's overall ``loc``, ``covariance`` and
    ``scale_tril``.

    :param component_locs: means ``mu_k``, shape ``(K, D)``.
    :param component_scale_trils: lower Cholesky factors ``L_k``, shape ``(K, D, D)``.
    :param component_log_weights: normalised ``log pi_k``, shape ``(K,)``.
    :param log_zeta: the guess ``log zeta`` of the target's log normaliser ``log Z``.

    **Example:**

    .. code-block:: python

        base = nx.MixtureBase(
            jnp.array([[-3.0], [3.0]]), jnp.ones((2, 1, 1)), jnp.log(jnp.array([0.7, 0.3])), 0.0
        )
        base.sample(jax.random.PRNGKey(0), (5,))
    """

    component_locs: jax.Array
    component_scale_trils: jax.Array
    component_log_weights: jax.Array
    log_zeta: jax.Array

    @property
    def dimension(self) -> int:
        return int(jnp.shape(self.component_locs)[-1])

    @property
    def loc(self) -> jax.Array:
        return jnp.exp(self.component_log_weights) @ self.component_locs

    @property
    def covariance(self) -> jax.Array:
        weights = jnp.exp(self.component_log_weights)
        trils = self.component_scale_trils
        component_second_moments = trils @ jnp.swapaxes(trils, -1, -2) + jnp.einsum(
            "ki,kj->kij", self.component_locs, self.component_locs
        )
        loc = self.loc
        return jnp.einsum("k,kij->ij", weights, component_second_moments) - jnp.outer(loc, loc)

    @property
    def scale_tril(self) -> jax.Array:
        return jnp.linalg.cholesky(self.covariance)

    def potential(self, position):
        """``psi(x) = -log sum_k pi_k N(x; mu_k, L_k L_k^T)`` for one flat point, jittable in
        the mixture's arrays too (a mixture passed as an argument of a compiled function); for
        many calls with one mixture, :meth:`potential_function` factors it once."""
        return -self.log_prob(position)

    def component_log_densities(self, position):
        """``log pi_k N(x; mu_k, L_k L_k^T)`` of every component ``k`` at one flat point,
        ``(K,)``. Jittable in the mixture's arrays too (where :meth:`potential_and_gradient`
        factors them once, with NumPy), for a mixture that travels inside a traced pytree.

        **Example:**

        .. code-block:: python

            labels = jnp.argmax(jax.vmap(base.component_log_densities)(draws), axis=-1)
        """

        return self.component_log_weights + gaussian_log_density(
            position, self.component_locs, self.component_scale_trils
        )

    def log_prob(self, position):
        """``log q(x) = -psi(x)`` at one flat point, jittable in the mixture's arrays too."""
        return jax.nn.logsumexp(self.component_log_densities(position))

    def potential_function(self):
        """``psi`` as a function of one flat point; see :meth:`potential_and_gradient`."""
        potential_and_gradient = self.potential_and_gradient()
        return lambda position: potential_and_gradient(position)[0]

    def potential_and_gradient(self):
        """``psi`` and its gradient ``sum_k r_k(x) P_k (x - mu_k)`` (``r_k`` the components'
        responsibilities, ``P_k`` their precisions) as one function of a flat point; the inverse
        factors are computed once, with NumPy, so the result holds no JAX tracer.

        :return: a function ``x -> (psi(x), grad psi(x))``.

        **Example:**

        .. code-block:: python

            value, gradient = base.potential_and_gradient()(jnp.zeros(base.dimension))
        """
        trils = np.asarray(self.component_scale_trils, dtype=np.float64)
        identity = np.eye(self.dimension)
        inverse_trils = np.stack(
            [scipy.linalg.solve_triangular(tril, identity, lower=True) for tril in trils]
        )
        locs = jnp.asarray(self.component_locs)
        dtype = locs.dtype
        log_normalizers = np.asarray(
            self.component_log_weights, dtype=np.float64
        ) + gaussian_log_normalizers(trils)
        inverse_trils = jnp.asarray(inverse_trils, dtype)
        log_normalizers = jnp.asarray(log_normalizers, dtype)

        def potential_and_gradient(position):
            whitened = jnp.einsum("kij,kj->ki", inverse_trils, position - locs)
            log_components = log_normalizers - 0.5 * jnp.sum(whitened**2, axis=-1)
            log_density = jax.nn.logsumexp(log_components)
            responsibilities = jnp.exp(log_components - log_density)
            gradient = jnp.einsum("k,kji,kj->i", responsibilities, inverse_trils, whitened)
            return -log_density, gradient

        return potential_and_gradient

    def sample(self, rng_key, sample_shape=()):
        """Draw ``sample_shape`` points from the mixture."""
        return _mixture_draws(self, rng_key, tuple(sample_shape))


# The draws are compiled programs: called outside a trace (a kernel's starting points, an
# importance-sampling estimate), each primitive of a draw would otherwise compile on its own.
@functools.partial(quick_jit, static_argnums=2)
def _gaussian_draws(base: GaussianBase, rng_key, sample_shape):
    noise = jax.random.normal(rng_key, sample_shape + (base.dimension,))
    return base.loc + noise @ base.scale_tril.T


@functools.partial(quick_jit, static_argnums=2)
def _mixture_draws(base: MixtureBase, rng_key, sample_shape):
    component_key, noise_key = jax.random.split(rng_key)
    components = jax.random.categorical(
        component_key, base.component_log_weights, shape=sample_shape
    )
    noise = jax.random.normal(noise_key, sample_shape + (base.dimension,))
    trils = base.component_scale_trils[components]
    return base.component_locs[components] + jnp.einsum("...ij,...j->...i", trils, noise)


def validate_base(base, dimension=None) -> GaussianBase | MixtureBase:
    """Check that ``base`` is a normalised Gaussian (or Gaussian mixture) of the right dimension;
    return it as arrays.

    :param base: a :class:`GaussianBase` or :class:`MixtureBase`.
    :param int dimension: the model's number of unconstrained dimensions, if known.
    :raises TypeError: if ``base`` is neither.
    :raises ValueError: for wrong shapes, a non-finite ``log_zeta``, mixture weights that do not
        sum to one or a scale that is not a lower-triangular factor with a positive diagonal
        (then the density is not normalised).
    """
    if isinstance(base, MixtureBase):
        return _validate_mixture_base(base, dimension)
    if not isinstance(base, GaussianBase):
        raise TypeError(
            "base must be a numpyro_extras.GaussianBase (a normalised Gaussian density with loc, "
            f"scale_tril and log_zeta) or a MixtureBase, got {type(base).__name__}. Fit one "
            "with nx.fit_base."
        )
    loc = np.asarray(base.loc)
    scale_tril = np.asarray(base.scale_tril)
    log_zeta = np.asarray(base.log_zeta)
    if loc.ndim != 1:
        raise ValueError(f"base.loc must be a vector of shape (D,), got shape {loc.shape}.")
    size = loc.shape[0]
    if scale_tril.shape != (size, size):
        raise ValueError(
            f"base.scale_tril must have shape {(size, size)} to match base.loc, got "
            f"{scale_tril.shape}."
        )
    if log_zeta.shape != () or not np.isfinite(log_zeta):
        raise ValueError(f"base.log_zeta must be a finite scalar, got {log_zeta}.")
    if not (np.all(np.isfinite(loc)) and np.all(np.isfinite(scale_tril))):
        raise ValueError("base.loc and base.scale_tril must be finite.")
    if np.any(np.triu(scale_tril, 1) != 0) or np.any(np.diagonal(scale_tril) <= 0):
        raise ValueError(
            "base.scale_tril must be lower triangular with a positive diagonal, or the base is "
            "not a normalised density."
        )
    if dimension is not None and size != dimension:
        raise ValueError(
            f"The base has dimension {size} but the model has {dimension} unconstrained dimensions."
        )
    return GaussianBase(jnp.asarray(loc), jnp.asarray(scale_tril), jnp.asarray(log_zeta))


def _validate_mixture_base(base: MixtureBase, dimension) -> MixtureBase:
    locs = np.asarray(base.component_locs)
    trils = np.asarray(base.component_scale_trils)
    log_weights = np.asarray(base.component_log_weights)
    log_zeta = np.asarray(base.log_zeta)
    if locs.ndim != 2 or trils.shape != locs.shape + locs.shape[-1:]:
        raise ValueError(
            "MixtureBase.component_locs must have shape (K, D) and component_scale_trils "
            f"(K, D, D), got {locs.shape} and {trils.shape}."
        )
    if log_weights.shape != locs.shape[:1] or not abs(logsumexp(log_weights)) < 1e-6:
        raise ValueError(
            "MixtureBase.component_log_weights must be K log weights whose exponentials sum to "
            f"1, got {log_weights}."
        )
    if log_zeta.shape != () or not np.isfinite(log_zeta):
        raise ValueError(f"base.log_zeta must be a finite scalar, got {log_zeta}.")
    if not (np.all(np.isfinite(locs)) and np.all(np.isfinite(trils))):
        raise ValueError("MixtureBase.component_locs and component_scale_trils must be finite.")
    diagonals = np.diagonal(trils, axis1=1, axis2=2)
    if np.any(np.triu(trils, 1) != 0) or np.any(diagonals <= 0):
        raise ValueError(
            "Every MixtureBase.component_scale_trils[k] must be lower triangular with a positive "
            "diagonal, or the base is not a normalised density."
        )
    if dimension is not None and locs.shape[1] != dimension:
        raise ValueError(
            f"The base has dimension {locs.shape[1]} but the model has {dimension} unconstrained "
            "dimensions."
        )
    return MixtureBase(
        jnp.asarray(locs), jnp.asarray(trils), jnp.asarray(log_weights), jnp.asarray(log_zeta)
    )


def weighted_gaussian(draws, log_weights, log_zeta, dtype=None) -> GaussianBase:
    """The Gaussian base with the weighted mean and covariance of draws.

    With a tempering run's draws and their target weights (continuous tempering paper eq. 21),
    and ``log zeta`` its ``log Z`` estimate (eq. 20), this is one bootstrap round (section 6).

    :param draws: flat draws, shape ``(N, D)``.
    :param log_weights: their log weights, shape ``(N,)`` (normalised here).
    :param float log_zeta: the base's ``log zeta``.
    :param dtype: dtype of the result (default: that of ``draws``).
    :return: a :class:`GaussianBase`.

    **Example:**

    .. code-block:: python

        base = weighted_gaussian(draws, np.zeros(len(draws)), log_zeta=0.0)  # sample moments
    """
    draws = np.asarray(draws, dtype=np.float64)
    log_weights = np.asarray(log_weights, dtype=np.float64)
    weights = np.exp(log_weights - logsumexp(log_weights))
    mean = weights @ draws
    centred = draws - mean
    covariance = (centred * weights[:, None]).T @ centred
    covariance = 0.5 * (covariance + covariance.T)
    jitter = 1e-10 * np.trace(covariance) / len(mean)
    scale_tril = np.linalg.cholesky(covariance + jitter * np.eye(len(mean)))
    dtype = dtype or jnp.result_type(float)
    return GaussianBase(
        jnp.asarray(mean, dtype), jnp.asarray(scale_tril, dtype), jnp.asarray(log_zeta, dtype)
    )
