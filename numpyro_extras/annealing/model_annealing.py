"""Annealed importance sampling for any NumPyro model, marginalized AIS and reverse (BDMC) runs.

:func:`ais` turns a model into an annealing path with the shared model plumbing
(:func:`numpyro_extras.model.potential.split_model`) and runs it with the shared driver
(:func:`numpyro_extras.annealing.driver.anneal`):

- a :class:`~numpyro_extras.GaussianBase`: the geometric path
  ``log f_beta(x) = -(1 - beta) psi(x) + beta log p(x, y)`` (mAIS paper eq. 5), from base
  draws, ``log Z_0 = 0``. The default ``base="auto"`` fits one by Gaussian VI
  (:func:`~numpyro_extras.fit_base`), or a Gaussian mixture when the fits find several modes;
  the base enters the compiled run as data, so a base fitted for another seed reuses the
  compilation.
- ``base="prior"`` (and ``"auto"`` when discrete latent sites are left):
  ``log f_beta(x) = log p(x) + beta log p(y | x)`` on the flat unconstrained space (Jacobians in
  the prior part), from exact prior draws, ``log Z_0 = 0``.
- ``marginalize=(site, ...)``: those discrete sites are summed out by NumPyro's enumeration with
  the tempering applied inside the sum (the marginal of the tempered joint, mAIS paper eq. 19-21).

Transitions: HMC on the continuous sites, exact single-site Gibbs on the discrete
ones, alternating in mixed models; or a user transition.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable, Hashable
from functools import partial
from typing import NamedTuple

import blackjax
import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from numpyro_extras.annealing.driver import (
    anneal,
    inverse_temperature_schedule,
    warn_on_small_ess,
)
from numpyro_extras.model.bases import (
    BaseCoverageWarning,
    GaussianBase,
    MixtureBase,
    gaussian_log_normalizers,
    validate_base,
)
from numpyro_extras.model.potential import (
    SplitModel,
    check_proper_prior,
    flatten_model,
    split_model,
)
from numpyro_extras.results.evidence import Evidence, evidence_from_log_weights
from numpyro_extras.results.prior_check import check_against_prior, prior_log_likelihoods_fn
from numpyro_extras.shell.compilation import fold_in_key, quick_jit, split_key
from numpyro_extras.shell.devices import check_devices, split_invariant_sum
from numpyro_extras.shell.kernel import arguments_fingerprint
from numpyro_extras.shell.metropolis import metropolis_accept, select
from numpyro_extras.shell.validation import (
    check_count,
    check_model,
    check_model_arguments,
    check_real,
    check_rng_key,
    is_flag,
)
from numpyro_extras.tempering.base_fit import FitsDivergedError, fit_base_with_warnings

__all__ = [
    "BaseParameters",
    "HMCAdaptation",
    "MISSED_MASS_CAUSE",
    "ais",
    "anneal_split",
    "check_ais_settings",
    "check_has_latent_sites",
    "gaussian_base_parameters",
    "annealing_path",
    "base_parameters",
    "base_parameters_potential",
    "cached",
    "gibbs_sweep",
]


class HMCAdaptation(NamedTuple):
    """The HMC settings carried from one temperature to the next.

    :param log_step_size: per particle, the log of the leapfrog step size, shape ``(N,)``.
    :param inverse_mass: per particle, a diagonal inverse mass matrix, shape ``(N, D)``.
    """

    log_step_size: jax.Array
    inverse_mass: jax.Array


def annealing_path(split: SplitModel, base="prior"):
    """The tempered log density ``log f(position, beta)`` of :func:`ais` and its increment.

    :param SplitModel split: the model, from :func:`~numpyro_extras.model.potential.split_model`.
    :param base: ``"prior"`` (``log p(x) + beta log p(y | x)``) or a
        :class:`~numpyro_extras.GaussianBase` or :class:`~numpyro_extras.MixtureBase`
        (``-(1 - beta) psi(x) + beta log p(x, y)``). With
        summed-out sites ``h`` both are marginals of a tempered joint (mAIS paper eq. 19-21):
        ``log sum_h p(x) p(h | x) p(y | x, h)^beta``, and for the base
        ``-(1 - beta) psi(x) + log sum_h p(x)^beta p(h | x) p(y | x, h)^beta`` (``h`` keeps its
        untempered prior, so ``Z_0 = 1``).
    :return: ``(log_density_fn, log_weight_increment_fn)`` for one particle
        ``position = (x, discrete)``; the increment is ``None`` when it has no cheaper form than
        a difference of two densities (summed-out sites).

    **Example:**

    .. code-block:: python

        log_f, increment = annealing_path(split_model(key, model, (x, y)))
        log_f((x0, {}), 0.5)
    """
    if isinstance(base, str):
        if base != "prior":
            raise ValueError(f"base must be 'prior' or a GaussianBase, got {base!r}.")
        kind, parameters = "prior", ()
    else:
        kind, parameters = "gaussian", base_parameters(validate_base(base, split.dimension))
    log_density_fn, increment_fn = _path_functions(split, kind)

    def bound_log_density_fn(position, beta):
        return log_density_fn(position, beta, parameters)

    if increment_fn is None:
        return bound_log_density_fn, None

    def bound_increment_fn(position, beta_previous, beta):
        return increment_fn(position, beta_previous, beta, parameters)

    return bound_log_density_fn, bound_increment_fn


class BaseParameters(NamedTuple):
    """A Gaussian or Gaussian-mixture base as data for the compiled scan:
    ``psi(x) = -log sum_k exp(-(x - loc_k)^T P_k (x - loc_k) / 2 - c_k)``, one component for a
    :class:`GaussianBase`.

    ``precisions`` is ``(K, D)`` when every component is diagonal and ``(K, D, D)`` otherwise;
    ``log_normalizers`` holds ``c_k``, the component's log normaliser minus its log weight.
    """

    locs: jax.Array
    precisions: jax.Array
    log_normalizers: jax.Array


def base_parameters(base: GaussianBase | MixtureBase) -> BaseParameters:
    """``base`` as :class:`BaseParameters`: its precisions factorised once, with NumPy, outside
    any trace, so that one compiled annealing run serves every base of the same shape.

    :param base: a :class:`~numpyro_extras.GaussianBase` or :class:`~numpyro_extras.MixtureBase`.
    :return: :class:`BaseParameters`.

    **Example:**

    .. code-block:: python

        parameters = base_parameters(nx.GaussianBase(jnp.zeros(2), jnp.eye(2), 0.0))
        base_parameters_potential(parameters, jnp.ones(2))  # the base's potential at (1, 1)
    """
    if isinstance(base, MixtureBase):
        locs = base.component_locs
        scale_trils = np.asarray(base.component_scale_trils, dtype=np.float64)
        log_weights = np.asarray(base.component_log_weights, dtype=np.float64)
    else:
        locs = jnp.asarray(base.loc)[None]
        scale_trils = np.asarray(base.scale_tril, dtype=np.float64)[None]
        log_weights = np.zeros(1)
    dtype = jnp.asarray(locs).dtype
    dimension = scale_trils.shape[-1]
    diagonals = np.diagonal(scale_trils, axis1=-2, axis2=-1)
    log_normalizers = -gaussian_log_normalizers(scale_trils) - log_weights
    if not np.any(np.tril(scale_trils, -1)):
        precisions = diagonals**-2
    else:
        inverse_scale_trils = np.stack(
            [
                scipy.linalg.solve_triangular(tril, np.eye(dimension), lower=True)
                for tril in scale_trils
            ]
        )
        precisions = np.swapaxes(inverse_scale_trils, -1, -2) @ inverse_scale_trils
    return BaseParameters(
        jnp.asarray(locs),
        jnp.asarray(precisions, dtype),
        jnp.asarray(log_normalizers, dtype),
    )


def gaussian_base_parameters(loc, scale_tril) -> BaseParameters:
    """One full-rank Gaussian ``N(loc, L L^T)`` as :class:`BaseParameters`, in JAX: the
    traceable form of :func:`base_parameters`, for a base fitted inside a compiled program
    (one per data set of :func:`~numpyro_extras.batched_ais`).

    :param loc: the mean, shape ``(D,)``.
    :param scale_tril: the lower Cholesky factor ``L``, shape ``(D, D)``.
    :return: :class:`BaseParameters` with one component.

    **Example:**

    .. code-block:: python

        parameters = gaussian_base_parameters(jnp.zeros(2), jnp.eye(2))
    """
    dimension = jnp.shape(loc)[-1]
    inverse = jax.scipy.linalg.solve_triangular(
        scale_tril, jnp.eye(dimension, dtype=scale_tril.dtype), lower=True
    )
    log_normalizer = jnp.sum(jnp.log(jnp.diagonal(scale_tril))) + 0.5 * dimension * math.log(
        2 * math.pi
    )
    return BaseParameters(loc[None], (inverse.T @ inverse)[None], log_normalizer[None])


def base_parameters_potential(parameters: BaseParameters, x):
    """The base's potential ``psi(x)`` (minus its normalised log density) from its parameters.

    :param BaseParameters parameters: from :func:`base_parameters`.
    :param x: a point, shape ``(D,)``.
    :return: the scalar ``psi(x)``, equal to the base's own ``potential(x)``.
    """
    centred = x - parameters.locs
    if parameters.precisions.ndim == 2:
        scaled = parameters.precisions * centred
    else:
        scaled = jnp.einsum("kij,kj->ki", parameters.precisions, centred)
    return -jax.nn.logsumexp(-0.5 * jnp.sum(centred * scaled, axis=-1) - parameters.log_normalizers)


def _path_functions(split: SplitModel, kind: str):
    """The path of :func:`annealing_path` with the base as an argument, not a constant.

    ``log_density_fn(position, beta, parameters)`` and ``increment_fn(position, beta_previous,
    beta, parameters)`` take the base (:class:`BaseParameters`, or ``()`` for the prior) as data,
    so one compiled scan serves every base of the same shape: a base fitted afresh for another
    seed does not compile the run again.
    """
    scaled = split.scaled_log_density_fn
    summed_out = bool(split.marginalized_sites)
    if kind == "prior":

        def log_density_fn(position, beta, parameters):
            x, discrete = position
            return scaled(x, discrete, 1.0, beta)

        def increment_fn(position, beta_previous, beta, parameters):
            # mAIS paper eq. 12: log w_k = (beta_k - beta_{k-1}) log p(y | x) on this path.
            return (beta - beta_previous) * split.log_likelihood_fn(*position)

    else:

        def log_density_fn(position, beta, parameters):
            x, discrete = position
            return -(1.0 - beta) * base_parameters_potential(parameters, x) + scaled(
                x, discrete, beta, beta
            )

        def increment_fn(position, beta_previous, beta, parameters):
            x, discrete = position
            return (beta - beta_previous) * (
                scaled(x, discrete, 1.0, 1.0) + base_parameters_potential(parameters, x)
            )

    return log_density_fn, (None if summed_out else increment_fn)


def gibbs_sweep(rng_key, position, log_density_fn, supports):
    """One systematic sweep of exact single-site Gibbs over every discrete element.

    Each element of each discrete site in turn is redrawn from its full conditional under the
    current tempered density, computed by evaluating the density at every value of the
    element's support (enumeration). Candidates with a non-finite density get probability zero;
    an element whose candidates are all non-finite keeps its value (a rejected move).

    :param rng_key: PRNG key.
    :param position: ``(x, discrete)`` of ONE particle.
    :param log_density_fn: ``position -> log density`` at the current temperature.
    :param dict supports: site name -> support values ``(K,)``.
    :return: the updated ``(x, discrete)``.

    **Example:**

    .. code-block:: python

        position = gibbs_sweep(key, (x, {"s": s}), lambda p: log_f(p, beta), {"s": jnp.arange(2)})
    """
    x, discrete = position
    discrete = dict(discrete)
    for name, site_key in zip(supports, jax.random.split(rng_key, len(supports)), strict=True):
        values = supports[name]
        shape = jnp.shape(discrete[name])
        size = int(np.prod(shape))

        def update_element(flat, inputs, name=name, values=values, shape=shape):
            index, element_key = inputs

            def log_density_at(value):
                candidate = flat.at[index].set(value).reshape(shape)
                return log_density_fn((x, {**discrete, name: candidate}))

            logits = jax.vmap(log_density_at)(values)
            # NaN or +-inf would poison the draw: such candidates simply get zero probability.
            finite = jnp.isfinite(logits)
            logits = jnp.where(finite, logits, -jnp.inf)
            choice = jax.random.categorical(element_key, logits)
            new_value = jnp.where(jnp.any(finite), values[choice], flat[index])
            return flat.at[index].set(new_value), None

        flat = jnp.reshape(discrete[name], (-1,))
        element_keys = jax.random.split(site_key, size)
        flat, _ = jax.lax.scan(update_element, flat, (jnp.arange(size), element_keys))
        discrete[name] = flat.reshape(shape)
    return x, discrete


def _hmc_step(rng_key, x, discrete, beta, adaptation, log_density_fn, num_leapfrog_steps, settings):
    """One vectorized HMC move of the continuous part of every particle, then adaptation.

    Each particle's next step size and mass come from the OTHER particles only (leave one out):
    a kernel tuned on the particle's own state is not invariant, and over many temperatures
    that biases the weights (log Z came out 7 stderr too high with a shared variance).
    """
    kernel = blackjax.mcmc.hmc.build_kernel()

    def move_one(key, position, discrete_values, log_step_size, inverse_mass):
        def logdensity(flat):
            return log_density_fn((flat, discrete_values), beta)

        state = blackjax.mcmc.hmc.init(position, logdensity)
        step_size = jnp.exp(log_step_size)
        proposal, info = kernel(key, state, logdensity, step_size, inverse_mass, num_leapfrog_steps)
        # A non-finite density or position is a rejected move, never a NaN particle.
        accepted = jnp.isfinite(proposal.logdensity) & jnp.all(jnp.isfinite(proposal.position))
        acceptance = jnp.where(jnp.isfinite(info.acceptance_rate), info.acceptance_rate, 0.0)
        alive = jnp.isfinite(state.logdensity)
        return jnp.where(accepted, proposal.position, position), acceptance, alive

    keys = jax.random.split(rng_key, x.shape[0])
    x, acceptance, alive = jax.vmap(move_one)(
        keys, x, discrete, adaptation.log_step_size, adaptation.inverse_mass
    )
    adaptation, mean_acceptance = _adapt(x, acceptance, alive, adaptation, settings)
    return x, adaptation, mean_acceptance


def _adapt(x, acceptance, alive, adaptation, settings):
    """The next step sizes and masses, each particle's from the OTHER live particles."""
    # Dead particles (zero weight already) say nothing about the step size.
    acceptance = jnp.where(alive, acceptance, 0.0)
    num_alive = jnp.sum(alive)
    # Sums over particles in an order that does not depend on the devices holding them, so that
    # every split of the particles adapts, and so anneals, alike.
    total_acceptance = split_invariant_sum(acceptance)
    mean_acceptance = total_acceptance / jnp.maximum(num_alive, 1)
    log_step_size = adaptation.log_step_size
    if settings["adapt_step_size"]:
        others = num_alive - alive
        others_acceptance = (total_acceptance - acceptance) / jnp.maximum(others, 1)
        # Robbins-Monro on the log step size towards the target acceptance.
        log_step_size = log_step_size + jnp.where(
            others > 0, settings["adaptation_rate"] * (others_acceptance - settings["target"]), 0
        )
    inverse_mass = adaptation.inverse_mass
    if settings["adapt_mass"]:
        inverse_mass = _particle_variance(x, alive, inverse_mass)
    return HMCAdaptation(log_step_size, inverse_mass), mean_acceptance


def _particle_variance(x, alive, fallback):
    """Per particle, the per-dimension variance of the OTHER live particles, shape ``(N, D)``."""
    weights = alive.astype(x.dtype)[:, None]
    count = jnp.sum(weights)
    mean = split_invariant_sum(weights * x) / jnp.maximum(count, 1)
    deviation = x - mean
    sum_of_squares = split_invariant_sum(weights * deviation**2)
    others = count - weights
    # Sum of squares about the others' mean: remove the particle and the mean's shift.
    others_sum_of_squares = sum_of_squares - weights * deviation**2 * count / jnp.maximum(others, 1)
    variance = others_sum_of_squares / jnp.maximum(others - 1, 1)
    usable = (others > 1) & jnp.isfinite(variance) & (variance > 0)
    return jnp.where(usable, variance, fallback)


class _Terms(NamedTuple):
    """``a(x)``, ``b(x)`` and their gradients at one particle, for ``log f_beta = a + beta b``."""

    a: jax.Array
    b: jax.Array
    grad_a: jax.Array
    grad_b: jax.Array


def _linear_terms_fn(split: SplitModel, kind: str):
    """``(x, parameters) -> _Terms`` of a path that is linear in ``beta``.

    Without summed-out sites both paths are: the prior path has ``a = log p(x)`` and
    ``b = log p(y | x)`` (mAIS paper eq. 12), the geometric path ``a = -psi(x)`` and
    ``b = log p(x, y) + psi(x)`` (eq. 5). A particle that carries its terms needs no model
    evaluation for its weight increment ``(beta_k - beta_{k-1}) b`` nor for the density and
    gradient that start its next HMC move at the new temperature: only the leapfrog steps
    evaluate the model.
    """
    if kind == "prior":

        def a_fn(x, parameters):
            return split.log_prior_fn(x, {})

        def b_fn(x, parameters):
            return split.log_likelihood_fn(x, {})

    else:

        def a_fn(x, parameters):
            return -base_parameters_potential(parameters, x)

        def b_fn(x, parameters):
            return split.scaled_log_density_fn(x, {}, 1.0, 1.0) + base_parameters_potential(
                parameters, x
            )

    def terms_fn(x, parameters):
        a, grad_a = jax.value_and_grad(a_fn)(x, parameters)
        b, grad_b = jax.value_and_grad(b_fn)(x, parameters)
        return _Terms(a, b, grad_a, grad_b)

    return terms_fn


def _cached_terms_integrator(terms_fn, beta, parameters, kinetic_energy_fn):
    """BlackJAX's velocity Verlet whose ``logdensity`` is the particle's :class:`_Terms`.

    The position update evaluates ``a``, ``b`` and their gradients once and keeps them all, so
    that the integrator's state ends with the terms of its last position: the Metropolis test,
    the weight increment and the next temperature's first momentum step then read them instead
    of evaluating the model again.
    """

    def position_update(position, kinetic_grad, step_size, coef, auxiliary_info=None):
        position = position + step_size * coef * kinetic_grad
        terms = terms_fn(position, parameters)
        return position, terms, terms.grad_a + beta * terms.grad_b, auxiliary_info

    return blackjax.mcmc.integrators.generalized_two_stage_integrator(
        blackjax.mcmc.integrators.euclidean_momentum_update_fn(kinetic_energy_fn),
        position_update,
        blackjax.mcmc.integrators.velocity_verlet_coefficients,
        format_output_fn=blackjax.mcmc.integrators.format_euclidean_state_output,
    )


def _linear_path_functions(split, kind, settings):
    """``(log_density_fn, increment_fn, transition_fn, initialize_fn)`` on particles
    ``(x, {}, terms)`` of a continuous model on a path linear in ``beta``.

    The transition is the HMC of :func:`_hmc_step` (Gaussian momentum with the diagonal mass,
    BlackJAX's velocity Verlet, Metropolis test, the same leave-one-out adaptation) with each
    particle's terms carried in the integrator's state.
    """
    terms_fn = _linear_terms_fn(split, kind)
    num_leapfrog_steps = settings["num_leapfrog_steps"]

    def log_density_fn(position, beta, parameters):
        terms = position[2]
        return terms.a + beta * terms.b

    def increment_fn(position, beta_previous, beta, parameters):
        return (beta - beta_previous) * position[2].b

    def move_one(key, x, terms, beta, log_step_size, inverse_mass, parameters):
        momentum_key, accept_key = jax.random.split(key)
        step_size = jnp.exp(log_step_size)
        metric = blackjax.mcmc.metrics.default_metric(inverse_mass)
        integrator = _cached_terms_integrator(terms_fn, beta, parameters, metric.kinetic_energy)

        def energy(state):
            terms = state.logdensity
            return -(terms.a + beta * terms.b) + metric.kinetic_energy(state.momentum)

        start = blackjax.mcmc.integrators.IntegratorState(
            x,
            metric.sample_momentum(momentum_key, x),
            terms,
            terms.grad_a + beta * terms.grad_b,
        )
        end = jax.lax.fori_loop(
            0, num_leapfrog_steps, lambda _, state: integrator(state, step_size), start
        )
        new_terms = end.logdensity
        # A non-finite density or position is a rejected move, never a NaN particle.
        finite = jnp.isfinite(new_terms.a + beta * new_terms.b) & jnp.all(
            jnp.isfinite(end.position)
        )
        log_ratio = jnp.where(finite, energy(start) - energy(end), -jnp.inf)
        accepted, acceptance = metropolis_accept(accept_key, log_ratio)
        alive = jnp.isfinite(terms.a + beta * terms.b)
        x, terms = select(accepted, (end.position, new_terms), (x, terms))
        return x, terms, acceptance, alive

    def transition_fn(rng_key, positions, beta, adaptation, parameters):
        x, discrete, terms = positions
        acceptance = jnp.asarray(1.0, x.dtype)
        for step_key in jax.random.split(rng_key, settings["num_mcmc_steps"]):
            keys = jax.random.split(step_key, x.shape[0])
            x, terms, accepted, alive = jax.vmap(move_one, in_axes=(0, 0, 0, None, 0, 0, None))(
                keys, x, terms, beta, adaptation.log_step_size, adaptation.inverse_mass, parameters
            )
            adaptation, acceptance = _adapt(x, accepted, alive, adaptation, settings)
        return (x, discrete, terms), adaptation, acceptance

    @quick_jit
    def initialize_fn(positions, parameters):
        x, discrete = positions
        return x, discrete, jax.vmap(terms_fn, in_axes=(0, None))(x, parameters)

    return log_density_fn, increment_fn, transition_fn, initialize_fn


def _default_transition(split, log_density_fn, settings):
    """HMC on the continuous sites, then a Gibbs sweep on the discrete ones (for all particles)."""

    def transition_fn(rng_key, positions, beta, adaptation, parameters):
        def bound_log_density_fn(position, beta):
            return log_density_fn(position, beta, parameters)

        x, discrete = positions
        hmc_key, gibbs_key = jax.random.split(rng_key)
        acceptance = jnp.asarray(1.0, x.dtype)
        if split.dimension:
            for step_key in jax.random.split(hmc_key, settings["num_mcmc_steps"]):
                x, adaptation, acceptance = _hmc_step(
                    step_key,
                    x,
                    discrete,
                    beta,
                    adaptation,
                    bound_log_density_fn,
                    settings["num_leapfrog_steps"],
                    settings,
                )
        if split.discrete_sites:
            keys = jax.random.split(gibbs_key, x.shape[0])

            def sweep(key, position):
                return gibbs_sweep(
                    key, position, lambda p: bound_log_density_fn(p, beta), split.supports
                )

            x, discrete = jax.vmap(sweep)(keys, (x, discrete))
        return (x, discrete), adaptation, acceptance

    return transition_fn


def _user_transition(split, log_density_fn, transition):
    """Vectorize a per-particle user transition, rejecting moves to a non-finite density."""
    has_discrete = bool(split.discrete_sites)

    def transition_fn(rng_key, positions, beta, kernel_state, parameters):
        def move_one(key, position):
            def logdensity(user_position):
                whole = user_position if has_discrete else (user_position, {})
                return log_density_fn(whole, beta, parameters)

            user_position = position if has_discrete else position[0]
            proposal = transition(key, user_position, logdensity)
            accepted = jnp.isfinite(logdensity(proposal))
            return jax.tree.map(
                lambda new, old: jnp.where(accepted, new, old), proposal, user_position
            )

        keys = jax.random.split(rng_key, positions[0].shape[0])
        moved = jax.vmap(move_one)(keys, positions)
        return (moved if has_discrete else (moved, positions[1])), kernel_state, jnp.nan

    return transition_fn


def _initial_positions(rng_key, split, base, num_particles, reverse, init_samples):
    if reverse:
        draws = {name: jnp.asarray(value) for name, value in init_samples.items()}
        missing = [n for n in split.continuous_sites + split.discrete_sites if n not in draws]
        if missing:
            raise ValueError(
                f"init_samples lacks the latent sites {missing}; pass posterior draws of every "
                "latent site that is not summed out (as MCMC.get_samples() returns them)."
            )
        needed = split.continuous_sites + split.discrete_sites
        num_draws = int(jnp.shape(draws[needed[0]])[0]) if needed else num_particles
        # Distinct draws when there are enough of them, otherwise draws reused at random.
        indices = jax.random.choice(
            rng_key, num_draws, (num_particles,), replace=num_draws < num_particles
        )
        chosen = {name: draws[name][indices] for name in needed}
        return jax.vmap(split.ravel_fn)(chosen)
    if base is None:
        return split.sample_prior_fn(rng_key, num_particles)
    return base.sample(rng_key, (num_particles,)), {}


# Built model views and annealing functions per model, arguments and settings: a repeated call
# (another seed, another particle count, another base of the same shape) then reuses the
# driver's compiled scan instead of compiling anew. Fitted bases are kept per model, arguments
# and fit key, so an identical call does not fit again.
CACHE_SIZE = 48

BASES = ("auto", "prior")


@dataclasses.dataclass(frozen=True)
class _Build:
    """A request for what ``build()`` returns, equal to another by its ``key`` alone."""

    key: Hashable
    build: Callable = dataclasses.field(compare=False)


@functools.lru_cache(maxsize=CACHE_SIZE)
def _built(request: _Build):
    return request.build()


def cached(key, build):
    """``build()``, kept per hashable ``key`` among the latest ``CACHE_SIZE`` (least recently
    used first out); ``key=None`` (an argument that is a tracer) builds every time. An exception
    in ``build`` is raised and nothing is kept.

    :param key: a hashable key, or ``None``.
    :param build: ``() -> value``.
    :return: the value.

    **Example:**

    .. code-block:: python

        split = cached(("split", model, fingerprint), lambda: split_model(key, model, args))
    """
    return build() if key is None else _built(_Build(key, build))


def _model_split(model, model_args, model_kwargs, marginalize):
    """``(split, model_key)``: the model's view for annealing, cached per model and arguments.

    ``model_key`` is ``None`` when an argument is a tracer (nothing is cached then).
    """
    arguments = arguments_fingerprint(model_args, model_kwargs)
    model_key = None if arguments is None else (model, arguments, marginalize)
    split = cached(
        None if model_key is None else ("split", model_key),
        # The structure key only picks the values of the one trace that reads the model's sites.
        lambda: split_model(
            jax.random.PRNGKey(0), model, model_args, model_kwargs, marginalize=marginalize
        ),
    )
    return split, model_key


def _annealing_functions(split, model_key, kind, transition, settings):
    """``(log_density_fn, increment_fn, transition_fn, initialize_fn)`` of :func:`ais`, cached.

    ``initialize_fn`` maps the initial ``(x, discrete)`` to the particles the functions take
    (``None``: they take ``(x, discrete)`` itself). The base is not part of the key: it enters
    the functions as data (:func:`_path_functions`).
    """

    def build():
        linear = not (split.discrete_sites or split.marginalized_sites)
        if transition is None and linear and split.dimension:
            return _linear_path_functions(split, kind, settings)
        log_density_fn, increment_fn = _path_functions(split, kind)
        if transition is not None:
            transition_fn = _user_transition(split, log_density_fn, transition)
        else:
            transition_fn = _default_transition(split, log_density_fn, settings)
        return log_density_fn, increment_fn, transition_fn, None

    cache_key = None
    if model_key is not None:
        cache_key = ("functions", model_key, kind, transition, tuple(sorted(settings.items())))
    return cached(cache_key, build)


def _flat_marginal_model(split):
    """A model on the flat unconstrained space whose density is the marginal of ``split``.

    :func:`~numpyro_extras.fit_base` cannot see through summed-out sites (it needs every latent
    site continuous); on this model it fits the Gaussian to the marginal ``log sum_h p(x, h, y)``
    directly.
    """
    import numpyro
    import numpyro.distributions as dist

    # A proper placeholder prior (fit_base traces and samples the model), divided out again.
    placeholder = dist.Normal(0.0, 1.0).expand([split.dimension]).to_event(1)

    def flat_model():
        x = numpyro.sample("x", placeholder)
        # The inner evaluation has its own handlers; block keeps its sites out of the trace.
        with numpyro.handlers.block():
            log_density = split.scaled_log_density_fn(x, {}, 1.0, 1.0)
        numpyro.factor("log_marginal", log_density - placeholder.log_prob(x))

    return flat_model


# Dispersed VI fits that probe the posterior for more than one mode before the default base is
# settled: a few more fits in the same vmapped loop cost little next to its compilation.
NUM_PROBE_FITS = 4


def _fitted_base(fit_key, model, model_args, model_kwargs, split, model_key, progress_bar):
    """The default base, cached, with the fit's warnings issued; ``None`` when every fit
    diverged.

    ``NUM_PROBE_FITS`` VI fits from dispersed starts (:func:`fit_base` with no refitting rounds)
    look for modes. One mode, with importance weights that show no uncovered mass: the base is
    that fit's Gaussian. Otherwise one Gaussian would leave the other modes' mass out of the
    estimate with no sign in the weights, so the base is :func:`fit_base`'s full mixture.
    """
    key_bytes = np.asarray(jax.random.key_data(fit_key)).tobytes()

    def build():
        if split.marginalized_sites:
            fit_model, fit_args, fit_kwargs = _flat_marginal_model(split), (), {}
        else:
            fit_model, fit_args, fit_kwargs = model, model_args, model_kwargs
        # Flattened once for both fits (only its potential and maps are used, not its start).
        flat_model = flatten_model(fit_key, fit_model, fit_args, fit_kwargs, kernel_name="nx.ais")
        fit = partial(
            fit_base_with_warnings,
            fit_key,
            fit_model,
            fit_args,
            fit_kwargs,
            progress_bar=progress_bar,
            flat_model=flat_model,
        )
        try:
            probe, probe_warnings = fit(num_starts=NUM_PROBE_FITS, bootstrap_rounds=0)
        except FitsDivergedError:
            return None, ()
        uncovered = any(isinstance(warning, BaseCoverageWarning) for warning in probe_warnings)
        # fit_base's MixtureBase has one component per mode found.
        if isinstance(probe, MixtureBase) and (len(probe.component_locs) > 1 or uncovered):
            base, base_warnings = fit()
        else:
            base, base_warnings = probe, probe_warnings
            if isinstance(probe, MixtureBase):
                base = GaussianBase(
                    probe.component_locs[0], probe.component_scale_trils[0], probe.log_zeta
                )
        try:
            base = validate_base(base, split.dimension)
        except ValueError:  # a non-finite or degenerate fit
            base = None
        return base, base_warnings

    base, base_warnings = cached(
        None if model_key is None else ("base", model_key, key_bytes), build
    )
    # Issued at every call, the repeat of a cached fit included: the same call, the same
    # warnings.
    for warning in base_warnings:
        warnings.warn(warning, stacklevel=4)
    return base


def check_ais_settings(
    *,
    num_particles,
    num_temperatures,
    schedule,
    base,
    step_size,
    num_leapfrog_steps,
    num_mcmc_steps,
    target_accept,
    adaptation_rate,
    adapt_mass,
    num_pilot_steps,
    progress_bar,
    marginalize=(),
    reverse=False,
    init_samples=None,
    transition=None,
    devices=None,
):
    """Check every setting of :func:`ais` before any work or cache lookup; return them clean.

    A value that is only coerced later (``int(50.5)``) would silently run another setting, and
    could even return the cached run of that other setting. The settings are :func:`ais`'s, by
    name; those a forward run from the base may leave out have its defaults.

    :return: dict of the checked settings, with the schedule as ``betas``.
    :raises TypeError: for a setting of the wrong type, naming it.
    :raises ValueError: for a setting out of range.

    **Example:**

    .. code-block:: python

        checked = check_ais_settings(num_particles=100, num_temperatures=50, schedule="sigmoid",
                                     base="prior", step_size=None, num_leapfrog_steps=5,
                                     num_mcmc_steps=1, target_accept=0.75, adaptation_rate=1.0,
                                     adapt_mass=True, num_pilot_steps=10, progress_bar=False)
    """
    checked = dict(
        num_particles=check_count("num_particles", num_particles),
        num_leapfrog_steps=check_count("num_leapfrog_steps", num_leapfrog_steps),
        num_mcmc_steps=check_count("num_mcmc_steps", num_mcmc_steps),
        num_pilot_steps=check_count("num_pilot_steps", num_pilot_steps, minimum=0),
    )
    if isinstance(schedule, str):
        check_count("num_temperatures", num_temperatures, minimum=2)
    elif num_temperatures is not None:
        check_count("num_temperatures", num_temperatures)
    checked["betas"] = inverse_temperature_schedule(schedule, num_temperatures)
    if step_size is not None:
        step_size = check_real("step_size", step_size, "a positive finite number (or None)")
        if step_size <= 0:
            raise ValueError(f"step_size must be a positive finite number, got {step_size!r}.")
    checked["step_size"] = step_size
    target_accept = check_real("target_accept", target_accept, "a number in (0, 1)")
    if not 0.0 < target_accept < 1.0:
        raise ValueError(f"target_accept must be a number in (0, 1), got {target_accept!r}.")
    checked["target_accept"] = target_accept
    adaptation_rate = check_real("adaptation_rate", adaptation_rate, "a positive number")
    if adaptation_rate <= 0:
        raise ValueError(f"adaptation_rate must be a positive number, got {adaptation_rate!r}.")
    checked["adaptation_rate"] = adaptation_rate
    for name, value in (
        ("reverse", reverse),
        ("adapt_mass", adapt_mass),
        ("progress_bar", progress_bar),
    ):
        if not is_flag(value):
            raise TypeError(f"{name} must be True or False, got {value!r}.")
        checked[name] = bool(value)
    if transition is not None and not callable(transition):
        raise TypeError(
            "transition must be a function (rng_key, position, log_density_fn) -> position, "
            f"got {transition!r}."
        )
    if isinstance(base, str):
        if base not in BASES:
            raise ValueError(f"base must be 'auto', 'prior' or a GaussianBase, got {base!r}.")
    else:
        validate_base(base)
    if isinstance(marginalize, str):
        marginalize = (marginalize,)
    marginalize = tuple(marginalize)
    if not all(isinstance(name, str) for name in marginalize):
        raise TypeError(f"marginalize must be a sequence of site names, got {marginalize!r}.")
    checked["marginalize"] = marginalize
    checked["devices"] = check_devices(devices, checked["num_particles"])
    if reverse and init_samples is None:
        raise ValueError(
            "reverse=True anneals from the posterior to the base: pass init_samples, posterior "
            "draws of the model's latent sites (e.g. mcmc.get_samples())."
        )
    if init_samples is not None and not reverse:
        raise ValueError("init_samples is only used with reverse=True.")
    return checked


def _resolve_base(base, fit_key, model, model_args, model_kwargs, split, model_key, progress_bar):
    """The base of the run: ``None`` for the prior, or a checked :class:`GaussianBase` or
    :class:`MixtureBase`."""
    if isinstance(base, str):
        if base == "prior" or split.discrete_sites or not split.dimension:
            # With discrete latent sites left there is no Gaussian base: the prior is the one
            # starting density that covers them.
            return None
        fitted = _fitted_base(
            fit_key, model, model_args, model_kwargs, split, model_key, progress_bar
        )
        if fitted is None:
            warnings.warn(
                "nx.ais: the Gaussian VI fit of the default base diverged; annealing from the "
                "prior instead. Pass base='prior' to skip the fit, or a GaussianBase.",
                UserWarning,
                stacklevel=3,
            )
        return fitted
    if split.discrete_sites:
        raise ValueError(
            "A Gaussian base covers continuous sites only, but the model has discrete latent "
            f"sites {list(split.discrete_sites)}: sum them out with marginalize=, or use "
            "base='prior'."
        )
    return validate_base(base, split.dimension)


def _warn_on_small_ess(evidence, num_particles, path_base, reverse):
    start = "the prior" if path_base is None else "a Gaussian base"
    return warn_on_small_ess(
        "AIS",
        evidence,
        num_particles,
        f"on the path from {start} such weights bias the estimate {'high' if reverse else 'low'}",
        "use more temperatures or a better base",
        stacklevel=4,
    )


# Prior draws per particle for the check of a fitted base against plain importance sampling from
# the prior: a likelihood evaluation each, about 1% of an annealing's model gradients.
PRIOR_DRAWS_PER_PARTICLE = 10


# What a gap between the annealing from a fitted base and importance sampling from the prior
# means, and what to do about it.
MISSED_MASS_CAUSE = (
    "the path from the fitted base misses posterior mass that the prior reaches (a mode the "
    "base does not cover, or a region where the posterior's scale shrinks, as in the neck of a "
    "centred hierarchical model's funnel, where its HMC moves cannot carry the particles), so "
    "the estimate is low; use base='prior', a base that covers that mass (nx.fit_base with more "
    "num_starts), or reparameterise a funnel (non-centred)"
)


def _check_against_prior(rng_key, split, model_key, evidence, num_draws):
    """:func:`~numpyro_extras.results.prior_check.check_against_prior` of a run from a fitted
    base, with the prior's likelihood compiled once per model and arguments (cached); a problem
    found is warned of."""
    log_likelihoods_fn = cached(
        None if model_key is None else ("prior log likelihoods", model_key),
        lambda: prior_log_likelihoods_fn(split),
    )
    evidence, problem = check_against_prior(
        evidence,
        log_likelihoods_fn(rng_key, num_draws),
        estimate_name="the annealing's",
        cause=MISSED_MASS_CAUSE,
    )
    if problem is not None:
        warnings.warn(f"AIS {problem}.", UserWarning, stacklevel=4)
    return evidence


def ais(
    rng_key,
    model,
    model_args=(),
    model_kwargs=None,
    *,
    num_particles: int,
    num_temperatures: int,
    schedule="sigmoid",
    base: str | GaussianBase = "auto",
    marginalize=(),
    reverse: bool = False,
    init_samples: dict | None = None,
    transition: Callable | None = None,
    step_size: float | None = None,
    num_leapfrog_steps: int = 5,
    num_mcmc_steps: int = 1,
    target_accept: float = 0.75,
    adaptation_rate: float = 1.0,
    adapt_mass: bool = True,
    num_pilot_steps: int = 10,
    progress_bar: bool = True,
    devices=None,
) -> Evidence:
    """Estimate ``log Z`` of a NumPyro model by annealed importance sampling.

    ``num_particles`` particles start from exact draws of the base, move through the tempered
    densities of the schedule and collect log weights ``sum_k log f_k(x_k) - log f_{k-1}(x_k)``
    (mAIS paper eq. 10-16, Neal 2001); ``Z_hat = mean exp(log weights)`` is unbiased, so
    ``log Z`` is a stochastic lower bound. All particles run vectorized.

    **The base.** By default (``base="auto"``) the run starts from a base fitted to the
    posterior by variational inference and follows the geometric path
    ``-(1 - beta) psi(x) + beta log p(x, y)`` (mAIS paper eq. 5): the path is short when the
    base is close to the posterior. The base is a Gaussian (:class:`~numpyro_extras.GaussianBase`)
    or, when dispersed fits find more than one mode, :func:`~numpyro_extras.fit_base`'s
    Gaussian mixture, a component on each mode it finds (which warns with
    :class:`~numpyro_extras.BaseCoverageWarning` when it may still miss modes); it is cached
    per model, arguments and key. A model that keeps discrete latent sites (not summed out by
    ``marginalize``) has no Gaussian base: ``"auto"`` then anneals from the prior, as
    ``base="prior"`` does for any model (``log p(x) + beta log p(y | x)``, the likelihood
    annealed in; slow when the posterior is much narrower than the prior). A
    :class:`~numpyro_extras.GaussianBase` or :class:`~numpyro_extras.MixtureBase` of your own
    can be passed too. If every fit diverges, ``"auto"`` warns and anneals from the prior.

    **A warning when the answer is unreliable.** When the final effective sample size of the
    weights is below 5% of the particles, a few particles carry the estimate: its stderr
    understates the error and ``log Z`` is biased (low; high for a reverse run). ``ais`` then
    warns (``UserWarning``) with the ESS; use more temperatures or a better base. A run from a
    fitted base is also compared with plain importance sampling from the prior (ten draws per
    particle): where the posterior's scale shrinks (the neck of a centred hierarchical model's
    funnel) no particle may arrive, with weights that show nothing. When the prior's estimate
    lies above the annealing's by more than 1.645 combined standard errors, the stderr is
    raised to the gap between them; beyond 4, ``ais`` also warns and records the problem. The
    check says nothing when the prior's draws have an ESS below 5%.

    **Transitions.** Continuous sites: HMC with ``num_leapfrog_steps`` steps; unless
    ``step_size`` is given, the step size is adapted towards ``target_accept`` after every
    temperature, and with ``adapt_mass`` the diagonal inverse mass matrix is the particles'
    variance. Each particle is tuned on the OTHER particles, so its kernel never depends on its
    own state; fix ``step_size`` and ``adapt_mass=False`` for exactly independent runs.
    Discrete sites: exact single-site Gibbs from the enumerated full conditionals (Bernoulli,
    Categorical, under plates or with event dims). Mixed models alternate the two. A move to a
    non-finite density is rejected.

    **Marginalized AIS.** ``marginalize=("h", ...)`` sums those discrete sites out exactly with
    ``numpyro.contrib.funsor`` and anneals the rest; the likelihood is tempered inside the sum,
    ``log f_beta(x) = log sum_h p(x) p(h | x) p(y | x, h)^beta`` (mAIS paper eq. 19-26), the
    marginal of the tempered joint rather than the tempered marginal.

    **Bidirectional Monte Carlo.** ``reverse=True`` starts from ``init_samples`` (posterior draws,
    constrained, by site name as ``MCMC.get_samples()`` gives them), anneals from ``beta = 1`` to
    ``0`` (towards the same base as a forward run) and returns
    ``log Z_0 - log mean exp(log weights)``, a stochastic UPPER bound on ``log Z`` (Grosse et al.
    2015), to sandwich the truth with a forward run.

    Every setting is checked before any work: counts must be Python or NumPy integers (not
    ``50.5``, ``"100"`` or ``True``), real settings real numbers.

    :param rng_key: PRNG key; the base fit, the initial draws and the annealing each get a key
        split from it.
    :param model: a NumPyro model; observed sites (and ``numpyro.factor``) form the likelihood.
    :param tuple model_args: positional arguments of the model.
    :param dict model_kwargs: keyword arguments of the model.
    :param int num_particles: number of annealing runs ``N`` (a positive integer).
    :param int num_temperatures: number of annealing steps ``K``, at least 2 (ignored for an
        array schedule).
    :param schedule: ``"sigmoid"``, ``"linear"``, ``"geometric"`` or an array of inverse
        temperatures from 0 to 1 (see
        :func:`~numpyro_extras.annealing.driver.inverse_temperature_schedule`).
    :param base: ``"auto"`` (a Gaussian VI fit, a Gaussian mixture when the fits find several
        modes, or the prior when discrete latent sites are left), ``"prior"``, or a
        :class:`~numpyro_extras.GaussianBase` or :class:`~numpyro_extras.MixtureBase` (e.g.
        from :func:`~numpyro_extras.fit_base`) for the geometric path from it.
    :param marginalize: names of discrete latent sites to sum out exactly.
    :param bool reverse: anneal from the posterior to the base (needs ``init_samples``).
    :param dict init_samples: posterior draws for ``reverse=True``; ``N`` of them are used
        (drawn with replacement when there are fewer).
    :param transition: a per-particle transition ``(rng_key, position, log_density_fn) ->
        position`` leaving ``exp(log_density_fn)`` invariant, replacing HMC and Gibbs;
        ``position`` is the flat unconstrained vector, or ``(x, discrete_dict)`` when the model
        keeps discrete sites.
    :param float step_size: a fixed HMC step size, positive (no step-size adaptation).
    :param int num_leapfrog_steps: leapfrog steps per HMC move (positive).
    :param int num_mcmc_steps: HMC moves per temperature (positive).
    :param float target_accept: target mean acceptance of the step-size adaptation, in (0, 1).
    :param float adaptation_rate: gain of the log step-size update per temperature (positive).
    :param bool adapt_mass: use the particles' variance as the diagonal inverse mass matrix.
    :param int num_pilot_steps: pilot HMC moves at the first temperature (zero or more).
    :param bool progress_bar: show the progress bars of the base fit and of the annealing.
    :param devices: split the particles over these devices, each annealing its share in one
        SPMD program: a number ``n`` (the first ``n`` of ``jax.devices()``) or a sequence of
        ``jax.Device``; ``num_particles`` must be a multiple of their number. ``None`` runs on
        JAX's default device. The particles and their keys are the same for
        any split; each device's program rounds the last bits of its arithmetic in its own
        way, so the estimates of two splits agree to rounding, or within their error bars
        where a rounding difference turned a Metropolis decision.
    :return: :class:`~numpyro_extras.Evidence` with ``log_z``, ``stderr``, ``log_weights`` and
        ``ess``.
    :raises TypeError: for a setting of the wrong type (a count that is not an integer, a
        string for a number, a non-boolean flag), naming the argument.
    :raises ValueError: for a setting out of range (zero particles, fewer than 2 temperatures,
        a non-positive step size, ``target_accept`` outside (0, 1), ...), an unknown, observed
        or continuous site in ``marginalize``, a schedule that does not run from 0 to 1,
        ``reverse=True`` without ``init_samples``, or a Gaussian base with discrete latent
        sites left.
    :warns UserWarning: when the final ESS is below 5% of the particles, when importance
        sampling from the prior finds mass the run from a fitted base missed, or when the
        default base's fit diverged.

    **Example:**

    .. code-block:: python

        evidence = nx.ais(rng_key, model, model_args=(x, y), num_particles=500,
                          num_temperatures=100)
        print(f"log Z = {evidence.log_z:.3f} +- {evidence.stderr:.3f} (ESS {evidence.ess:.0f})")
    """
    check_rng_key(rng_key)
    check_model(model)
    checked = check_ais_settings(
        num_particles=num_particles,
        num_temperatures=num_temperatures,
        schedule=schedule,
        base=base,
        marginalize=marginalize,
        reverse=reverse,
        init_samples=init_samples,
        transition=transition,
        step_size=step_size,
        num_leapfrog_steps=num_leapfrog_steps,
        num_mcmc_steps=num_mcmc_steps,
        target_accept=target_accept,
        adaptation_rate=adaptation_rate,
        adapt_mass=adapt_mass,
        num_pilot_steps=num_pilot_steps,
        progress_bar=progress_bar,
        devices=devices,
    )
    model_args, model_kwargs = check_model_arguments(model_args, model_kwargs)
    check_proper_prior(model, model_args, model_kwargs, "nx.ais")
    fit_key, init_key, anneal_key = np.asarray(split_key(rng_key, 3))
    split, model_key = _model_split(model, model_args, model_kwargs, checked["marginalize"])
    check_has_latent_sites(split)
    path_base = _resolve_base(
        base, fit_key, model, model_args, model_kwargs, split, model_key, checked["progress_bar"]
    )
    positions = _initial_positions(
        init_key, split, path_base, checked["num_particles"], checked["reverse"], init_samples
    )
    parameters = None if path_base is None else base_parameters(path_base)
    result = anneal_split(anneal_key, split, model_key, parameters, positions, transition, checked)
    return _checked_evidence(result.log_weights, rng_key, split, model_key, path_base, checked)


def check_has_latent_sites(split):
    """Refuse a model whose every site is observed: its log Z is its log density at the data.

    :param SplitModel split: the model's view, from :func:`_model_split`.
    :raises ValueError: when the model has no latent sample site.
    """
    if not (split.continuous_sites or split.discrete_sites or split.marginalized_sites):
        raise ValueError(
            "nx.ais needs a model with at least one latent sample site; every site of this "
            "model is observed, so its log Z is its log density at the data (numpyro.infer.util."
            "log_density), with nothing to integrate."
        )


def anneal_split(anneal_key, split, model_key, parameters, positions, transition, checked):
    """The annealing of :func:`ais` for a model's view: the particles start at ``positions``,
    exact draws of the base (of the posterior for a reverse run, which follows the schedule
    backwards), and move through the tempered densities with ``transition`` or HMC and Gibbs.
    Pure JAX after the functions are built, so it runs under ``jax.vmap`` over data sets too.

    HMC is BlackJAX's kernel, or for a continuous model without summed-out sites the same
    kernel keeping each particle's path terms, so that a temperature costs
    ``num_leapfrog_steps`` model gradients. Unless ``step_size`` is fixed, its step size starts
    at 0.5 and is adapted after every temperature, from a pilot of ``num_pilot_steps`` moves at
    the first temperature (the moved particles are still exact draws there).

    :param anneal_key: the annealing's key.
    :param SplitModel split: the model's view, with ``model_key``, its cache key (``None``:
        build the functions without caching them).
    :param parameters: the Gaussian or mixture base as :class:`BaseParameters` for the
        geometric path, or ``None`` for the path from the prior.
    :param positions: the particles' starting points, as :func:`_initial_positions` gives them:
        flat points from a base, ``(x, discrete)`` from the prior or the posterior.
    :param transition: the user's per-particle transition, or ``None``.
    :param dict checked: the settings, from :func:`check_ais_settings`.
    :return: the result of :func:`~numpyro_extras.annealing.driver.anneal`.

    **Example:**

    .. code-block:: python

        positions = split.sample_prior_fn(init_key, checked["num_particles"])
        result = anneal_split(key, split, None, None, positions, None, checked)
    """
    step_size = checked["step_size"]
    num_particles = checked["num_particles"]
    num_pilot_steps = checked["num_pilot_steps"]
    reverse = checked["reverse"]
    betas = checked["betas"]
    settings = dict(
        adapt_step_size=step_size is None,
        adapt_mass=checked["adapt_mass"],
        target=checked["target_accept"],
        adaptation_rate=checked["adaptation_rate"],
        num_leapfrog_steps=checked["num_leapfrog_steps"],
        num_mcmc_steps=checked["num_mcmc_steps"],
    )
    kind = "prior" if parameters is None else "gaussian"
    parameters = () if parameters is None else parameters
    log_density_fn, increment_fn, transition_fn, initialize_fn = _annealing_functions(
        split, model_key, kind, transition, settings
    )
    if reverse:
        betas = betas[::-1]
    if initialize_fn is not None:
        positions = initialize_fn(positions, parameters)

    dtype = jnp.result_type(float)
    adaptation = HMCAdaptation(
        jnp.full((num_particles,), math.log(0.5 if step_size is None else step_size), dtype),
        jnp.ones((num_particles, split.dimension), dtype),
    )
    if transition is None and split.dimension and num_pilot_steps > 0:
        # The pilot is a run of transitions at the first temperature, as leading steps of the
        # schedule: their weight increments are zero and the moved particles are still exact
        # draws of f(., beta_0), so one compiled scan does both.
        betas = np.concatenate([np.full(num_pilot_steps, betas[0]), betas])
    return anneal(
        anneal_key,
        log_density_fn,
        positions,
        transition_fn,
        betas,
        adaptation,
        log_weight_increment_fn=increment_fn,
        progress_bar=checked["progress_bar"],
        parameters=parameters,
        devices=checked["devices"],
    )


def _checked_evidence(log_weights, rng_key, split, model_key, path_base, checked):
    """The estimate from the annealing's log weights, after the checks that warn at the caller
    of :func:`ais`: the weights' ESS, and for a forward run from a fitted base, importance
    sampling from the prior (:func:`_check_against_prior`).

    :param log_weights: the particles' log weights.
    :param rng_key: the key of :func:`ais`; the prior's draws use a key folded from it.
    :param SplitModel split: the model's view, with ``model_key``, its cache key.
    :param path_base: the base, or ``None`` for the prior.
    :param dict checked: the settings, from :func:`check_ais_settings`.
    :return: :class:`~numpyro_extras.Evidence`.
    """
    reverse = checked["reverse"]
    num_particles = checked["num_particles"]
    # Read on the host: the estimate's reduction is then one program whatever devices held the
    # particles.
    log_weights = np.asarray(log_weights)
    evidence = evidence_from_log_weights(log_weights, 0.0, reverse=reverse)
    evidence = _warn_on_small_ess(evidence, num_particles, path_base, reverse)
    if path_base is not None and not reverse and split.log_likelihood_fn is not None:
        # Its own key, so that the annealing's draws are those of a run without the check.
        evidence = _check_against_prior(
            fold_in_key(rng_key, 1),
            split,
            model_key,
            evidence,
            PRIOR_DRAWS_PER_PARTICLE * num_particles,
        )
    return evidence
