"""The base density of continuous tempering and its fit by variational inference.

Continuous tempering bridges a normalised base density ``exp(-psi)`` (inverse temperature 0) and
the target (inverse temperature 1). The closer the base is to the target and ``log zeta`` to
``log Z``, the flatter the marginal of the temperature and the better the chain mixes (paper
section 6, eqs. 23-25). :func:`fit_base` fits the base: Gaussian variational fits from dispersed
starts, their posterior masses and ``log zeta`` by importance sampling, and short tempering runs
that look for the modes the fits missed.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
import scipy.special
import tqdm
from jax.scipy.linalg import solve_triangular
from numpyro.infer import Predictive
from scipy.special import logsumexp

from numpyro_extras.potential import flatten_model
from numpyro_extras.tempering.weights import log_target_weight, sample_inverse_temperature

__all__ = ["GaussianBase", "MixtureBase", "fit_base", "validate_base"]


class GaussianBase(NamedTuple):
    """A normalised Gaussian base density on the model's flat unconstrained space.

    :param loc: mean, shape ``(D,)``.
    :param scale_tril: lower Cholesky factor of the covariance, shape ``(D, D)``.
    :param log_zeta: the guess ``log zeta`` of the target's log normaliser ``log Z``.

    **Example:**

    .. code-block:: python

        base = GaussianBase(jnp.zeros(2), jnp.eye(2), log_zeta=0.0)
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
        whitened = solve_triangular(self.scale_tril, position - self.loc, lower=True)
        log_determinant = jnp.sum(jnp.log(jnp.diagonal(self.scale_tril)))
        return (
            0.5 * jnp.sum(whitened**2)
            + log_determinant
            + 0.5 * self.dimension * math.log(2 * math.pi)
        )

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
        normalizer = jnp.asarray(
            np.sum(np.log(diagonal)) + 0.5 * self.dimension * math.log(2 * math.pi), loc.dtype
        )
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
        noise = jax.random.normal(rng_key, tuple(sample_shape) + (self.dimension,))
        return self.loc + noise @ self.scale_tril.T


class MixtureBase(NamedTuple):
    """A normalised Gaussian-mixture base density on the model's flat unconstrained space.

    ``psi(x) = -log sum_k pi_k N(x; mu_k, L_k L_k^T)``. It offers what the tempering kernels use
    of a :class:`GaussianBase`: ``potential_and_gradient``, ``sample``, ``log_zeta``, and the
    mixture's overall ``loc``, ``covariance`` and ``scale_tril`` (for the eq. 22 check).

    :param component_locs: means ``mu_k``, shape ``(K, D)``.
    :param component_scale_trils: lower Cholesky factors ``L_k``, shape ``(K, D, D)``.
    :param component_log_weights: ``log pi_k``, shape ``(K,)``, normalised.
    :param log_zeta: the guess ``log zeta`` of the target's log normaliser ``log Z``.
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
        second = jnp.einsum(
            "k,kij->ij",
            weights,
            trils @ jnp.swapaxes(trils, -1, -2)
            + jnp.einsum("ki,kj->kij", self.component_locs, self.component_locs),
        )
        loc = self.loc
        return second - jnp.outer(loc, loc)

    @property
    def scale_tril(self) -> jax.Array:
        return jnp.linalg.cholesky(self.covariance)

    def potential(self, position):
        return self.potential_and_gradient()(position)[0]

    def potential_function(self):
        """``psi`` as a function of one flat point; see :meth:`potential_and_gradient`."""
        potential_and_gradient = self.potential_and_gradient()
        return lambda position: potential_and_gradient(position)[0]

    def potential_and_gradient(self):
        """``psi`` and its gradient, ``sum_k r_k(x) P_k (x - mu_k)`` with the components'
        responsibilities ``r_k``, as one function of a flat point; the inverse factors are
        computed once, with NumPy.

        :return: a function ``x -> (psi(x), grad psi(x))``.
        """
        trils = np.asarray(self.component_scale_trils, dtype=np.float64)
        dimension = self.dimension
        inverse = np.stack(
            [scipy.linalg.solve_triangular(t, np.eye(dimension), lower=True) for t in trils]
        )
        locs = jnp.asarray(self.component_locs)
        dtype = locs.dtype
        inverse = jnp.asarray(inverse, dtype)
        log_normalizers = jnp.asarray(
            np.asarray(self.component_log_weights, dtype=np.float64)
            - np.sum(np.log(np.diagonal(trils, axis1=1, axis2=2)), axis=1)
            - 0.5 * dimension * math.log(2 * math.pi),
            dtype,
        )

        def potential_and_gradient(position):
            whitened = jnp.einsum("kij,kj->ki", inverse, position - locs)
            log_components = log_normalizers - 0.5 * jnp.sum(whitened**2, axis=-1)
            log_density = jax.nn.logsumexp(log_components)
            responsibilities = jnp.exp(log_components - log_density)
            gradient = jnp.einsum("k,kji,kj->i", responsibilities, inverse, whitened)
            return -log_density, gradient

        return potential_and_gradient

    def sample(self, rng_key, sample_shape=()):
        """Draw ``sample_shape`` points from the mixture."""
        component_key, noise_key = jax.random.split(rng_key)
        sample_shape = tuple(sample_shape)
        components = jax.random.categorical(
            component_key, self.component_log_weights, shape=sample_shape
        )
        noise = jax.random.normal(noise_key, sample_shape + (self.dimension,))
        trils = self.component_scale_trils[components]
        return self.component_locs[components] + jnp.einsum("...ij,...j->...i", trils, noise)


def validate_base(base, dimension=None) -> GaussianBase | MixtureBase:
    """Check that ``base`` is a normalised Gaussian (or Gaussian mixture) of the right
    dimension; return it as arrays.

    :param base: a :class:`GaussianBase` or :class:`MixtureBase`.
    :param int dimension: the model's number of unconstrained dimensions, if known.
    :raises TypeError: if ``base`` is not a :class:`GaussianBase`.
    :raises ValueError: for wrong shapes, a non-finite ``log_zeta`` or a scale that is not a
        lower-triangular factor with a positive diagonal (then the density is not normalised).
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


def _validate_mixture_base(base, dimension):
    locs = np.asarray(base.component_locs)
    trils = np.asarray(base.component_scale_trils)
    log_weights = np.asarray(base.component_log_weights)
    log_zeta = np.asarray(base.log_zeta)
    if locs.ndim != 2 or trils.shape != locs.shape + locs.shape[-1:]:
        raise ValueError(
            "MixtureBase.component_locs must have shape (K, D) and component_scale_trils "
            f"(K, D, D), got {locs.shape} and {trils.shape}."
        )
    if log_weights.shape != locs.shape[:1] or abs(scipy.special.logsumexp(log_weights)) > 1e-6:
        raise ValueError("MixtureBase.component_log_weights must be K normalised log weights.")
    if log_zeta.shape != () or not np.isfinite(log_zeta):
        raise ValueError(f"base.log_zeta must be a finite scalar, got {log_zeta}.")
    if not (np.all(np.isfinite(locs)) and np.all(np.isfinite(trils))):
        raise ValueError("The mixture's locs and scale_trils must be finite.")
    diagonals = np.diagonal(trils, axis1=1, axis2=2)
    if np.any(np.triu(trils, 1) != 0) or np.any(diagonals <= 0):
        raise ValueError(
            "Every component_scale_trils[k] must be lower triangular with a positive diagonal."
        )
    if dimension is not None and locs.shape[1] != dimension:
        raise ValueError(
            f"The base has dimension {locs.shape[1]} but the model has {dimension} unconstrained "
            "dimensions."
        )
    return MixtureBase(
        jnp.asarray(locs), jnp.asarray(trils), jnp.asarray(log_weights), jnp.asarray(log_zeta)
    )


# ------------------------------------------------------------------------------------------------
# Gaussian variational fits on the flat unconstrained space
# ------------------------------------------------------------------------------------------------

_LOG_2PI = math.log(2 * math.pi)
# The initial standard deviation of every variational fit (NumPyro's autoguide default).
_INIT_SCALE = 0.1


def _softplus_inverse(value):
    return math.log(math.expm1(value))


def _variational_fits(potential_fn, dimension, settings, diagonal):
    """Compiled Gaussian VI from a batch of starting points, all fits in one vmapped scan.

    Maximises the reparameterised ELBO ``E_q[-phi] + H[q]`` with Adam, the ADVI objective of
    NumPyro's ``AutoMultivariateNormal`` / ``AutoDiagonalNormal`` on the same flat space.

    :return: a function ``(starts [K, D], keys [K]) -> (locs, scale_trils, finite)``.
    """
    num_steps = settings["num_steps"]
    num_particles = settings["num_particles"]
    learning_rate = settings["learning_rate"]
    first_moment_decay, second_moment_decay = 0.9, 0.999

    def unpack(params):
        loc, raw = params
        diagonal_scale = jax.nn.softplus(jnp.diagonal(raw)) + 1e-10
        lower = jnp.zeros_like(raw) if diagonal else jnp.tril(raw, -1)
        return loc, lower + jnp.diag(diagonal_scale)

    def negative_elbo(params, key):
        loc, scale_tril = unpack(params)
        noise = jax.random.normal(key, (num_particles, dimension), loc.dtype)
        # One potential call per particle: a vmap over particles inside the vmap over fits hits
        # a slow path of XLA's CPU backend (about 300x slower at 4 particles).
        energies = [potential_fn(loc + scale_tril @ noise[index]) for index in range(num_particles)]
        return sum(energies) / num_particles - jnp.sum(jnp.log(jnp.diagonal(scale_tril)))

    loss_and_grad = jax.value_and_grad(negative_elbo)

    def fit_one(start, key):
        raw = jnp.eye(dimension, dtype=start.dtype) * _softplus_inverse(_INIT_SCALE)
        params = (start, raw)
        zeros = jax.tree.map(jnp.zeros_like, params)

        def adam_step(carry, inputs):
            params, first, second = carry
            step, step_key = inputs
            loss, grads = loss_and_grad(params, step_key)
            finite = jnp.isfinite(loss) & jnp.all(
                jnp.stack([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)])
            )
            # A step whose loss or gradient is not finite is skipped, as NumPyro's optimisers
            # would otherwise carry the NaN into every later step.
            grads = jax.tree.map(lambda g: jnp.where(finite, g, 0.0), grads)
            first = jax.tree.map(
                lambda m, g: first_moment_decay * m + (1 - first_moment_decay) * g, first, grads
            )
            second = jax.tree.map(
                lambda v, g: second_moment_decay * v + (1 - second_moment_decay) * g**2,
                second,
                grads,
            )
            first_correction = 1 - first_moment_decay ** (step + 1.0)
            second_correction = 1 - second_moment_decay ** (step + 1.0)
            updated = jax.tree.map(
                lambda p, m, v: (
                    p
                    - learning_rate
                    * (m / first_correction)
                    / (jnp.sqrt(v / second_correction) + 1e-8)
                ),
                params,
                first,
                second,
            )
            params = jax.tree.map(lambda new, old: jnp.where(finite, new, old), updated, params)
            return (params, first, second), loss

        step_keys = jax.random.split(key, num_steps)
        (params, _, _), losses = jax.lax.scan(
            adam_step, (params, zeros, zeros), (jnp.arange(num_steps), step_keys)
        )
        loc, scale_tril = unpack(params)
        finite = (
            jnp.all(jnp.isfinite(loc))
            & jnp.all(jnp.isfinite(scale_tril))
            & jnp.all(jnp.isfinite(losses[-10:]))
        )
        return loc, scale_tril, finite

    return jax.jit(jax.vmap(fit_one))


def _elbo_function(potential_fn, dimension, num_particles):
    """``(loc, scale_tril, key) -> ELBO`` estimated with ``num_particles`` draws, compiled."""

    def elbo(loc, scale_tril, key):
        noise = jax.random.normal(key, (num_particles, dimension), loc.dtype)
        energy = jnp.mean(jax.vmap(potential_fn)(loc + noise @ scale_tril.T))
        entropy = jnp.sum(jnp.log(jnp.diagonal(scale_tril))) + 0.5 * dimension * (1 + _LOG_2PI)
        return entropy - energy

    return jax.jit(elbo)


# ------------------------------------------------------------------------------------------------
# Importance sampling with the mixture of the fits
# ------------------------------------------------------------------------------------------------


# Standard deviations of the importance proposal's components over the fits'.
_PROPOSAL_WIDENING = 1.1


class _MixtureEstimate(NamedTuple):
    log_zeta: float
    masses: np.ndarray  # posterior mass attributed to each fit (0 for unused slots)
    ess: float


def _mixture_importance_sampler(potential_fn, dimension, draws_per_fit):
    """Compiled importance sampling of ``exp(-phi)`` with the mixture of fitted Gaussians.

    The proposal is the equal-weight mixture of the fits in use, each fit contributing
    ``draws_per_fit`` draws (stratified sampling), and every draw is weighted by the whole
    mixture's density (the deterministic-mixture weight), so ``mean(w)`` is an unbiased
    estimate of the mass the fits cover and near-duplicate fits of one mode do no harm: they
    share its mass instead of counting it twice.

    :return: ``(locs [P, D], scale_trils [P, D, D], their inverses, in_use [P], key) ->
        (log_w [P * n], responsibilities [P, P * n])``.
    """

    def run(locs, scale_trils, inverse_trils, in_use, key):
        num_fits = locs.shape[0]
        noise = jax.random.normal(key, (num_fits, draws_per_fit, dimension), locs.dtype)
        draws = locs[:, None] + jnp.einsum("kij,knj->kni", scale_trils, noise)
        draws = draws.reshape(-1, dimension)

        def component_log_density(loc, inverse_tril):
            whitened = (draws - loc) @ inverse_tril.T
            return (
                -0.5 * jnp.sum(whitened**2, -1)
                + jnp.sum(jnp.log(jnp.diagonal(inverse_tril)))
                - 0.5 * dimension * _LOG_2PI
            )

        log_mixture_weights = jnp.where(in_use, -jnp.log(jnp.sum(in_use)), -jnp.inf)
        log_components = (
            jax.vmap(component_log_density)(locs, inverse_trils) + log_mixture_weights[:, None]
        )
        log_proposal = jax.nn.logsumexp(log_components, axis=0)
        log_weights = -jax.vmap(potential_fn)(draws) - log_proposal
        drawn_from_used = jnp.repeat(in_use, draws_per_fit)
        log_weights = jnp.where(drawn_from_used & jnp.isfinite(log_weights), log_weights, -jnp.inf)
        return log_weights, jnp.exp(log_components - log_proposal)

    return jax.jit(run)


def _mixture_estimate(sampler, locs, scale_trils, in_use, key, draws_per_fit):
    # Variational fits are narrower than their modes; a slightly wider proposal keeps the
    # weights' tails light at a small cost in efficiency.
    proposal_trils = _PROPOSAL_WIDENING * scale_trils
    # Inverted with NumPy: a batched triangular solve under jit deadlocks now and then on CPU.
    inverse_trils = np.stack([_inverse_tril(tril) for tril in proposal_trils])
    log_weights, responsibilities = sampler(
        jnp.asarray(locs),
        jnp.asarray(proposal_trils),
        jnp.asarray(inverse_trils),
        jnp.asarray(in_use),
        key,
    )
    log_weights = np.asarray(log_weights, dtype=np.float64)
    responsibilities = np.asarray(responsibilities, dtype=np.float64)
    if not np.any(np.isfinite(log_weights)):
        raise RuntimeError("No importance draw of the fitted base has a finite target density.")
    num_draws = int(np.sum(in_use)) * draws_per_fit
    # Truncated importance sampling (Ionides 2008): weights capped at sqrt(N) times their mean.
    # A mode that is not Gaussian (or a fit that missed part of one) leaves heavy-tailed weights,
    # and one draw could otherwise carry most of the estimate.
    log_cap = float(logsumexp(log_weights)) - 0.5 * math.log(num_draws)
    log_weights = np.minimum(log_weights, log_cap)
    log_total = float(logsumexp(log_weights))
    normalised = np.exp(log_weights - log_total)
    masses = np.where(in_use, responsibilities @ normalised, 0.0)
    return _MixtureEstimate(
        log_zeta=log_total - math.log(num_draws),
        masses=masses / np.sum(masses),
        ess=float(1.0 / np.sum(normalised**2)),
    )


def _moment_match(masses, locs, covariances):
    """One Gaussian with the moments of the mixture ``sum_k m_k N(mu_k, S_k)`` (paper eq. 25,
    with the component masses estimated by importance sampling instead of ``exp(ELBO_k)``)."""
    mean = masses @ locs
    second_moment = np.einsum(
        "k,kij->ij", masses, covariances + np.einsum("ki,kj->kij", locs, locs)
    )
    covariance = second_moment - np.outer(mean, mean)
    return mean, 0.5 * (covariance + covariance.T)


def _inverse_tril(scale_tril):
    return scipy.linalg.solve_triangular(scale_tril, np.eye(len(scale_tril)), lower=True)


def _cholesky(covariance):
    dimension = len(covariance)
    jitter = 1e-10 * max(np.trace(covariance) / dimension, 1e-30)
    return np.linalg.cholesky(covariance + jitter * np.eye(dimension))


# ------------------------------------------------------------------------------------------------
# Short Gibbs tempering runs for the bootstrap rounds
# ------------------------------------------------------------------------------------------------


def _tempering_explorer(potential_fn, dimension, settings):
    """Compiled Gibbs continuous tempering (paper section 4) with the base as an argument.

    One compilation serves every bootstrap round, whatever base it explores with. The ``x``-move
    is HMC with ``explore_leapfrog_steps`` steps in the base's whitened coordinates (the base's
    covariance as mass matrix), the step size adapted per chain during warm-up; ``beta | x`` is
    drawn exactly (eq. 17).

    :return: ``(key, loc, scale_tril, log_zeta) -> (positions [C, S, D], deltas [C, S],
        betas [C, S])``.
    """
    num_chains = settings["bootstrap_num_chains"]
    num_warmup = settings["bootstrap_num_warmup"]
    num_samples = settings["bootstrap_num_samples"]
    num_leapfrog = settings["explore_leapfrog_steps"]
    target_accept = 0.75
    value_and_grad = jax.value_and_grad(potential_fn)

    def run(key, loc, scale_tril, log_zeta):
        base_normalizer = jnp.sum(jnp.log(jnp.diagonal(scale_tril))) + 0.5 * dimension * _LOG_2PI

        def evaluate(whitened):
            target_potential, gradient = value_and_grad(loc + scale_tril @ whitened)
            base_potential = 0.5 * jnp.sum(whitened**2) + base_normalizer
            return target_potential, scale_tril.T @ gradient, base_potential

        def delta_of(target_potential, base_potential):
            delta = target_potential + log_zeta - base_potential
            # A point of zero target density is one the target never weighs (w1 = 0).
            return jnp.where(jnp.isfinite(delta), delta, 1e4)

        def one_chain(chain_key):
            init_key, chain_key = jax.random.split(chain_key)
            whitened = jax.random.normal(init_key, (dimension,), loc.dtype)
            state = (whitened, jnp.zeros((), loc.dtype), *evaluate(whitened))

            def transition(carry, inputs):
                state, log_step, log_step_sum = carry
                iteration, step_key = inputs
                whitened, beta, target_potential, target_gradient, base_potential = state
                momentum_key, accept_key, beta_key, jitter_key = jax.random.split(step_key, 4)
                step_size = jnp.exp(log_step) * jax.random.uniform(
                    jitter_key, minval=0.8, maxval=1.2, dtype=loc.dtype
                )

                def gradient_at(point_state):
                    _, _, _, t_grad, _ = point_state
                    return beta * t_grad + (1 - beta) * point_state[0]

                def energy_at(point_state):
                    _, _, t_pot, _, b_pot = point_state
                    return beta * t_pot + (1 - beta) * b_pot

                def leapfrog(carry, _):
                    point_state, momentum = carry
                    momentum = momentum - 0.5 * step_size * gradient_at(point_state)
                    position = point_state[0] + step_size * momentum
                    point_state = (position, beta, *evaluate(position))
                    momentum = momentum - 0.5 * step_size * gradient_at(point_state)
                    return (point_state, momentum), None

                momentum = jax.random.normal(momentum_key, (dimension,), loc.dtype)
                (proposal, new_momentum), _ = jax.lax.scan(
                    leapfrog, (state, momentum), None, length=num_leapfrog
                )
                energy_change = (
                    energy_at(proposal)
                    + 0.5 * jnp.sum(new_momentum**2)
                    - energy_at(state)
                    - 0.5 * jnp.sum(momentum**2)
                )
                accept_prob = jnp.where(
                    jnp.isfinite(energy_change), jnp.exp(jnp.minimum(0.0, -energy_change)), 0.0
                )
                accepted = jax.random.uniform(accept_key, dtype=loc.dtype) < accept_prob
                state = jax.tree.map(
                    lambda new, old: jnp.where(accepted, new, old), proposal, state
                )
                whitened, _, target_potential, target_gradient, base_potential = state
                delta = delta_of(target_potential, base_potential)
                beta = sample_inverse_temperature(beta_key, delta)
                state = (whitened, beta, target_potential, target_gradient, base_potential)
                warming_up = iteration < num_warmup
                gain = 1.0 / jnp.sqrt(iteration + 10.0)
                log_step = jnp.where(
                    warming_up, log_step + gain * (accept_prob - target_accept), log_step
                )
                log_step_sum = jnp.where(
                    iteration >= num_warmup // 2, log_step_sum + log_step, log_step_sum
                )
                # Sampling runs at the mean step size of the second half of warm-up.
                log_step = jnp.where(
                    iteration == num_warmup - 1,
                    log_step_sum / (num_warmup - num_warmup // 2),
                    log_step,
                )
                draw = (loc + scale_tril @ whitened, delta, beta)
                return (state, log_step, log_step_sum), draw

            total = num_warmup + num_samples
            carry = (state, jnp.log(jnp.asarray(0.5, loc.dtype)), jnp.zeros((), loc.dtype))
            _, (positions, deltas, betas) = jax.lax.scan(
                transition,
                carry,
                (jnp.arange(total), jax.random.split(chain_key, total)),
            )
            return positions[num_warmup:], deltas[num_warmup:], betas[num_warmup:]

        return jax.vmap(one_chain)(jax.random.split(key, num_chains))

    return jax.jit(run)


def _new_starts(positions, deltas, scale_tril, num_starts, rng):
    """Starting points for new fits from a tempering run: half resampled by the target weight
    ``w1`` (eq. 21), half spread out by farthest-point selection among the draws that carry
    target weight, so that a rarely visited mode still gets a fit of its own."""
    positions = positions.reshape(-1, positions.shape[-1])
    log_w1 = np.asarray(log_target_weight(deltas.ravel()), dtype=np.float64)
    weights = np.exp(log_w1 - logsumexp(log_w1))
    num_resampled = num_starts - num_starts // 2
    cumulative = np.cumsum(weights)
    cumulative[-1] = 1.0
    uniforms = (rng.uniform() + np.arange(num_resampled)) / num_resampled
    chosen = list(np.searchsorted(cumulative, uniforms))
    # Distances in the base's whitened coordinates; candidates: the draws with the most weight.
    candidates = np.argsort(weights)[::-1][
        : max(num_starts, int(np.sum(weights > 1e-3 / len(weights))))
    ]
    whitened = scipy.linalg.solve_triangular(scale_tril, positions[candidates].T, lower=True).T
    nearest = np.full(len(candidates), np.inf)
    for index in chosen:
        point = scipy.linalg.solve_triangular(scale_tril, positions[index], lower=True)
        nearest = np.minimum(nearest, np.sum((whitened - point) ** 2, -1))
    for _ in range(num_starts // 2):
        pick = int(np.argmax(nearest))
        chosen.append(candidates[pick])
        nearest = np.minimum(nearest, np.sum((whitened - whitened[pick]) ** 2, -1))
    return positions[np.asarray(chosen)]


# ------------------------------------------------------------------------------------------------
# The fit
# ------------------------------------------------------------------------------------------------


def _prior_positions(rng_key, model, model_args, model_kwargs, flat_model, num_draws):
    """Prior draws mapped to the flat unconstrained space (rows with a non-finite entry dropped)."""

    @jax.jit
    def draw(key):
        draws = Predictive(model, num_samples=num_draws)(key, *model_args, **model_kwargs)
        latent = {name: draws[name] for name in flat_model.latent_sites}
        return jax.vmap(flat_model.ravel_fn)(latent)

    try:
        positions = np.asarray(draw(rng_key), dtype=np.float64)
    except Exception:  # noqa: BLE001 -- a model whose prior cannot be sampled still gets a fit
        return np.zeros((0, flat_model.dimension))
    return positions[np.all(np.isfinite(positions), axis=1)]


def _explore_with_prior(loc, covariance, prior_positions):
    """The Gaussian with the moments of the equal mixture of the base and the prior.

    A base fitted to the modes found so far leaves a narrow mode elsewhere in its far tail,
    where the geometric bridge never leads; the prior's spread gives the first bootstrap round a
    path there, the fitted half keeps the bridge short enough to reach ``beta = 1``.
    """
    dimension = len(loc)
    if len(prior_positions) > dimension:
        prior_loc = prior_positions.mean(0)
        prior_covariance = np.atleast_2d(np.cov(prior_positions.T))
    elif len(prior_positions) > 1:
        prior_loc = prior_positions.mean(0)
        prior_covariance = np.diag(prior_positions.var(0))
    else:
        return loc, 4.0 * covariance
    masses = np.array([0.5, 0.5])
    return _moment_match(
        masses, np.stack([loc, prior_loc]), np.stack([covariance, prior_covariance])
    )


def _prior_moment_base(rng_key, model, model_args, model_kwargs, flat_model, dtype):
    """A base from the prior's moments on the flat space, ``log zeta`` by importance sampling
    with it (an unbiased estimate of ``Z``; the kernels adapt ``log zeta`` in warm-up)."""
    prior_key, draw_key = jax.random.split(rng_key)
    positions = _prior_positions(prior_key, model, model_args, model_kwargs, flat_model, 2000)
    if positions.shape[0] < 2 * flat_model.dimension + 2:
        raise RuntimeError(
            "Every variational fit of the base diverged and too few prior draws map to finite "
            "unconstrained values to fit a base from the prior; pass a base."
        )
    loc = positions.mean(0)
    scale_tril = _cholesky(np.atleast_2d(np.cov(positions, rowvar=False)))
    base = GaussianBase(jnp.asarray(loc, dtype), jnp.asarray(scale_tril, dtype), jnp.asarray(0.0))
    draws = base.sample(draw_key, (2000,))
    potential_and_gradient = base.potential_and_gradient()
    log_weights = np.asarray(
        -jax.vmap(flat_model.potential_fn)(draws)
        + jax.vmap(lambda x: potential_and_gradient(x)[0])(draws),
        dtype=np.float64,
    )
    log_weights = log_weights[np.isfinite(log_weights)]
    log_zeta = logsumexp(log_weights) - np.log(max(len(log_weights), 1))
    return base._replace(log_zeta=jnp.asarray(log_zeta, dtype))


def fit_base(
    rng_key,
    model,
    model_args=(),
    model_kwargs=None,
    *,
    method="mixture",
    num_starts=16,
    num_steps=2000,
    learning_rate=0.01,
    num_particles=4,
    elbo_particles=2000,
    guide="multivariate",
    init_radius=2.0,
    importance_draws=4096,
    bootstrap_rounds=None,
    bootstrap_num_warmup=300,
    bootstrap_num_samples=700,
    bootstrap_num_chains=8,
    explore_leapfrog_steps=10,
    form="gaussian",
    defensive_weight=0.2,
    progress_bar=True,
) -> GaussianBase | MixtureBase:
    """Fit a Gaussian base density and ``log zeta`` for continuous tempering.

    ``method="mixture"`` (the default; paper eq. 25 with importance-sampled masses):

    1. ``num_starts`` Gaussian VI fits on the model's flat unconstrained space (the ADVI
       objective of NumPyro's ``AutoMultivariateNormal``, all fits in one compiled, vmapped
       loop), half started from prior draws, half uniformly in ``[-init_radius, init_radius]``.
    2. Importance sampling of the target with the equal mixture of the fits as proposal gives
       ``log zeta`` and each fit's share of the posterior mass; the base is the Gaussian with
       the moments of the mixture of fits weighted by those masses. Unlike ``logsumexp`` of the
       ELBOs, near-duplicate fits of one mode share its mass instead of counting it twice.
    3. ``bootstrap_rounds`` rounds (default 2): a short Gibbs continuous tempering run with
       the base (the first round with the moments of the base mixed half and half with the
       prior's, to reach modes the fits missed), ``num_starts`` new VI fits started from its
       draws (half resampled by target weight, half spread out over the weighted draws), then
       step 2 again over all fits so far.

    ``method="gaussian"`` is a single VI fit with ``log zeta = ELBO`` (paper section 6, recipe
    1), estimated with ``elbo_particles`` draws, and no bootstrap round unless asked for.

    :param jax.random.PRNGKey rng_key: random key.
    :param model: NumPyro model with continuous latent sites.
    :param tuple model_args: the model's positional arguments.
    :param dict model_kwargs: the model's keyword arguments.
    :param str method: ``"mixture"`` or ``"gaussian"``.
    :param int num_starts: VI fits per stage for ``"mixture"``.
    :param int num_steps: Adam steps per fit.
    :param float learning_rate: Adam learning rate.
    :param int num_particles: ELBO particles per step.
    :param int elbo_particles: particles for the final ELBO of ``"gaussian"``.
    :param str guide: ``"multivariate"`` (dense covariance) or ``"diagonal"`` (mean field).
    :param float init_radius: radius of the uniform starts.
    :param int importance_draws: importance draws per mass estimate, spread evenly over the fits.
    :param int bootstrap_rounds: tempering rounds after the first fit; ``None`` for 2 with
        ``"mixture"`` and 0 with ``"gaussian"``.
    :param int bootstrap_num_warmup: warm-up iterations of each bootstrap run.
    :param int bootstrap_num_samples: kept iterations per chain of each bootstrap run.
    :param int bootstrap_num_chains: vectorized chains of each bootstrap run.
    :param int explore_leapfrog_steps: leapfrog steps of the bootstrap runs' HMC moves.
    :param bool progress_bar: show a tqdm bar over the stages.
    :return: a :class:`GaussianBase`.

    **Example:**

    .. code-block:: python

        base = nx.fit_base(jax.random.PRNGKey(0), model, (x, y))
        kernel = nx.GibbsContinuousTempering(model, base=base)
    """
    model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
    if method not in ("mixture", "gaussian"):
        raise ValueError(f"method must be 'mixture' or 'gaussian', got {method!r}.")
    if form not in ("gaussian", "mixture"):
        raise ValueError(f"form must be 'gaussian' or 'mixture', got {form!r}.")
    if guide not in ("multivariate", "diagonal"):
        raise ValueError(f"guide must be 'multivariate' or 'diagonal', got {guide!r}.")
    if bootstrap_rounds is None:
        bootstrap_rounds = 2 if method == "mixture" else 0
    num_fits = 1 if method == "gaussian" else int(num_starts)
    if num_fits < 1 or bootstrap_rounds < 0:
        raise ValueError("num_starts must be positive and bootstrap_rounds non-negative.")
    settings = dict(
        num_steps=int(num_steps),
        learning_rate=float(learning_rate),
        num_particles=int(num_particles),
        bootstrap_num_warmup=int(bootstrap_num_warmup),
        bootstrap_num_samples=int(bootstrap_num_samples),
        bootstrap_num_chains=int(bootstrap_num_chains),
        explore_leapfrog_steps=int(explore_leapfrog_steps),
    )
    keys = iter(jax.random.split(rng_key, 8 + 3 * bootstrap_rounds))
    flat_model = flatten_model(next(keys), model, model_args, model_kwargs, kernel_name="fit_base")
    dimension = flat_model.dimension
    dtype = flat_model.initial_position.dtype
    potential_fn = flat_model.potential_fn
    rng = np.random.default_rng(np.asarray(jax.random.key_data(next(keys))).ravel().tolist())
    num_stages = 1 + (method == "mixture") + 2 * bootstrap_rounds

    with tqdm.tqdm(
        total=num_stages, desc="fit_base", disable=not progress_bar, leave=False
    ) as progress:
        progress.set_postfix_str(f"{num_fits} Gaussian VI fit{'s' if num_fits > 1 else ''}")
        num_prior = num_fits // 2 if method == "mixture" else 0
        prior_key = next(keys)
        prior_positions = (
            _prior_positions(
                prior_key, model, model_args, model_kwargs, flat_model, max(256, num_prior)
            )
            if num_prior or bootstrap_rounds
            else np.zeros((0, dimension))
        )
        starts = rng.uniform(-init_radius, init_radius, (num_fits, dimension))
        num_prior = min(num_prior, len(prior_positions))
        starts[:num_prior] = prior_positions[:num_prior]
        fit = _variational_fits(potential_fn, dimension, settings, guide == "diagonal")
        locs, scale_trils, finite = (
            np.asarray(value, dtype=np.float64)
            for value in fit(jnp.asarray(starts, dtype), jax.random.split(next(keys), num_fits))
        )
        finite = finite.astype(bool)
        progress.update()
        if not np.any(finite):
            warnings.warn(
                "Every variational fit of the base diverged (a Gaussian on the unconstrained "
                "space cannot follow a support that depends on another latent site, for "
                "example); the base is the Gaussian with the moments of prior draws on the "
                "unconstrained space, and log zeta comes from importance sampling with it.",
                stacklevel=2,
            )
            return _prior_moment_base(
                next(keys), model, model_args, model_kwargs, flat_model, dtype
            )
        if not np.all(finite):
            warnings.warn(
                f"{num_fits - int(np.sum(finite))} of {num_fits} variational fits diverged and "
                "were dropped.",
                stacklevel=2,
            )
        pool_size = num_fits * (1 + bootstrap_rounds)
        pool_locs = np.zeros((pool_size, dimension))
        pool_trils = np.tile(np.eye(dimension), (pool_size, 1, 1))
        in_use = np.zeros(pool_size, dtype=bool)
        pool_locs[:num_fits], pool_trils[:num_fits], in_use[:num_fits] = locs, scale_trils, finite

        if method == "gaussian":
            elbo = _elbo_function(potential_fn, dimension, int(elbo_particles))
            loc, covariance = locs[0], scale_trils[0] @ scale_trils[0].T
            log_zeta = float(
                elbo(jnp.asarray(locs[0], dtype), jnp.asarray(scale_trils[0], dtype), next(keys))
            )
        draws_per_fit = max(16, int(importance_draws) // pool_size)
        sampler = _mixture_importance_sampler(potential_fn, dimension, draws_per_fit)

        def refit():
            estimate = _mixture_estimate(
                sampler, pool_locs, pool_trils, in_use, next(keys), draws_per_fit
            )
            covariances = np.einsum("kij,klj->kil", pool_trils, pool_trils)
            loc, covariance = _moment_match(estimate.masses, pool_locs, covariances)
            return loc, covariance, estimate.log_zeta, estimate.masses

        if method == "mixture":
            loc, covariance, log_zeta, masses = refit()
            progress.update()
        explorer = (
            _tempering_explorer(potential_fn, dimension, settings) if bootstrap_rounds else None
        )
        for round_index in range(bootstrap_rounds):
            progress.set_postfix_str(f"bootstrap round {round_index + 1}")
            explore_loc, explore_covariance = (
                _explore_with_prior(loc, covariance, prior_positions)
                if round_index == 0
                else (loc, covariance)
            )
            explore_tril = _cholesky(explore_covariance)
            positions, deltas, _ = (
                np.asarray(value, dtype=np.float64)
                for value in explorer(
                    next(keys),
                    jnp.asarray(explore_loc, dtype),
                    jnp.asarray(explore_tril, dtype),
                    jnp.asarray(log_zeta, dtype),
                )
            )
            progress.update()
            starts = _new_starts(positions, deltas, explore_tril, num_fits, rng)
            locs, scale_trils, finite = (
                np.asarray(value, dtype=np.float64)
                for value in fit(jnp.asarray(starts, dtype), jax.random.split(next(keys), num_fits))
            )
            slots = slice(num_fits * (round_index + 1), num_fits * (round_index + 2))
            pool_locs[slots], pool_trils[slots] = locs, scale_trils
            in_use[slots] = finite.astype(bool)
            loc, covariance, log_zeta, masses = refit()
            progress.update()

    scale_tril = _cholesky(covariance)
    if form == "gaussian" or method == "gaussian":
        return GaussianBase(
            jnp.asarray(loc, dtype), jnp.asarray(scale_tril, dtype), jnp.asarray(log_zeta, dtype)
        )
    return _mixture_base(
        masses, pool_locs, pool_trils, loc, scale_tril, log_zeta, defensive_weight, dtype
    )


def _mixture_base(masses, locs, scale_trils, loc, scale_tril, log_zeta, defensive_weight, dtype):
    """The fits weighted by their masses, widened like the importance proposal, plus the
    moment-matched Gaussian with weight ``defensive_weight`` for what the fits missed."""
    keep = masses > 1e-3 * np.max(masses)
    weights = np.concatenate(
        [(1 - defensive_weight) * masses[keep] / np.sum(masses[keep]), [defensive_weight]]
    )
    component_locs = np.concatenate([locs[keep], loc[None]])
    component_trils = np.concatenate([_PROPOSAL_WIDENING * scale_trils[keep], scale_tril[None]])
    positive = weights > 0
    log_weights = np.log(weights[positive])
    log_weights -= logsumexp(log_weights)
    return MixtureBase(
        jnp.asarray(component_locs[positive], dtype),
        jnp.asarray(component_trils[positive], dtype),
        jnp.asarray(log_weights, dtype),
        jnp.asarray(log_zeta, dtype),
    )
