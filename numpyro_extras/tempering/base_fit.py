"""The fit of a base density (:mod:`numpyro_extras.model.bases`) to a model by variational
inference.

Continuous tempering bridges a normalised base density ``exp(-psi)`` (inverse temperature 0) and
the target (inverse temperature 1). The closer the base is to the target and ``log zeta`` to
``log Z``, the flatter the marginal of the temperature and the better the chain mixes (paper
section 6, eqs. 23-25). :func:`fit_base` fits the base with Gaussian variational fits on the
model's flat potential (the objective of NumPyro's autoguides under ``Trace_ELBO``).
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.linalg
from blackjax.smc.ess import ess as effective_sample_size
from jax.scipy.stats import norm
from numpyro.infer import HMC
from scipy.special import logsumexp

from numpyro_extras.model.bases import (
    BaseCoverageWarning,
    GaussianBase,
    MixtureBase,
    ModeSearchWarning,
    gaussian_log_normalizers,
    weighted_gaussian,
)
from numpyro_extras.model.potential import FlatModel, flatten_model
from numpyro_extras.results import arviz_adapter
from numpyro_extras.results.evidence import UNRELIABLE_PARETO_K
from numpyro_extras.shell.compilation import quick_jit, split_key
from numpyro_extras.shell.kernel import hmc_settings
from numpyro_extras.shell.progress import run_chunks
from numpyro_extras.shell.validation import (
    check_count,
    check_model,
    check_model_arguments,
    check_real,
    check_rng_key,
    is_flag,
)
from numpyro_extras.tempering.chains import (
    GIBBS_KEYS,
    INIT_KEYS,
    build_gibbs_kernel,
    gibbs_init,
    unreached_ends,
)
from numpyro_extras.tempering.weights import log_base_weight, log_target_weight

__all__ = [
    "MixtureEstimate",
    "BaseFit",
    "FitsDivergedError",
    "fit_base",
    "fit_base_with_warnings",
    "fit_gaussian",
    "KernelBaseFit",
    "fit_base_for_kernel",
    "importance_masses",
    "numpy_rng",
    "polish_flagged",
    "vectorized_potential",
    "LocalOptima",
    "posterior_modes",
    "same_basin",
    "check_fit_base_settings",
]


class _LocalFit(NamedTuple):
    loc: np.ndarray
    covariance: np.ndarray
    elbo: float


# Fits of method="gaussian", of which the one with the highest ELBO is kept.
GAUSSIAN_STARTS = 4

# One compiled program instead of an eager operation per primitive at every call.
_importance_ess = quick_jit(effective_sample_size)


def numpy_rng(rng_key) -> np.random.Generator:
    """A NumPy generator seeded by a JAX key, for the host-side draws of a fit: one eager JAX
    draw compiles a program per shape, which costs more than the fit's small draws themselves.

    :param rng_key: a JAX PRNG key.
    :return: :class:`numpy.random.Generator`.

    **Example:**

    .. code-block:: python

        numpy_rng(jax.random.PRNGKey(0)).standard_normal(3)
    """
    return np.random.default_rng(np.asarray(jax.random.key_data(rng_key)).ravel().tolist())


def _dispersed_starts(rng, num_fits, dimension, radius, prior_positions):
    """Half prior draws (where there are any), half uniform in ``[-radius, radius]`` on the flat
    unconstrained space (``rng`` a NumPy generator)."""
    starts = rng.uniform(-radius, radius, (num_fits, dimension))
    num_prior_starts = min(num_fits // 2, len(prior_positions))
    starts[1::2][:num_prior_starts] = prior_positions[:num_prior_starts]
    return starts


def _scale_tril(raw_scale, unit_lower):
    """A Cholesky factor ``diag(exp(raw_scale)) @ (I + strictly lower part)`` (the
    parametrisation of NumPyro's AutoMultivariateNormal, with ``exp`` for its ``softplus``);
    ``unit_lower`` holds the strictly lower entries row by row, empty for a diagonal factor.

    Adam moves ``raw_scale`` by about its step size per step. Under ``softplus`` that grows a
    scale linearly, to about 30 in 2000 steps of 0.03, short of a posterior as wide as a vague
    prior; under ``exp`` the log scale moves, as under ``softplus`` below a scale of 0.1."""
    dimension = raw_scale.shape[-1]
    scale = jnp.exp(raw_scale)
    if unit_lower.shape[-1] == 0:
        return jnp.diag(scale)
    rows, columns = np.tril_indices(dimension, -1)
    unit = jnp.eye(dimension, dtype=raw_scale.dtype).at[rows, columns].set(unit_lower)
    return scale[:, None] * unit


# The fixed-point steps that finish a fit Adam left unsettled (see ``_polish`` below): their
# number, the draws their expectations average over, the draws that judge them, and the largest
# dimension where a Hessian per draw is cheap.
POLISH_STEPS = 3
POLISH_DRAWS = 32
POLISH_CHECK_DRAWS = 256
MAX_POLISH_DIMENSION = 100
# A fit is unsettled where phi's curvature at its mean and its own precision differ more than
# UNSETTLED_RATIO-fold along a coordinate where phi is quadratic (its curvature the same within
# QUADRATIC_TOLERANCE a posterior standard deviation away): a posterior much narrower (or wider)
# than Adam's steps could resolve, on which the fixed-point steps are exact.
UNSETTLED_RATIO = 100.0
QUADRATIC_TOLERANCE = 1.3


def _variational_fitter(flat_model, full_rank, settings):
    """``fit(rng_key, starts, steps) -> list[_LocalFit]``: Gaussian VI fits side by side from the
    flat points ``starts``.

    Each fit minimises, with Adam, the negative ELBO ``E_q[phi(z) + log q(z)]`` of a Gaussian ``q``
    on the flat unconstrained space, estimated with ``num_particles`` reparametrised draws per
    step: the objective of NumPyro's AutoMultivariateNormal (``full_rank``) or
    AutoDiagonalNormal under Trace_ELBO, with their parametrisation (``exp`` for ``softplus``,
    :func:`_scale_tril`) and initial scale 0.1, but
    on the potential already built, so that the model is not traced again for a guide. All fits
    run in one compiled, vmapped loop, compiled once per fitter (the refitting rounds call
    ``fit`` again with as many starts), ``steps`` steps (default ``num_steps``).
    """
    potential_fn = flat_model.potential_fn
    dimension = flat_model.dimension
    dtype = flat_model.initial_position.dtype
    num_lower = dimension * (dimension - 1) // 2 if full_rank else 0
    optimizer = optax.scale_by_adam()
    negative_elbo = functools.partial(_negative_elbo, potential_fn, dimension, dtype)
    one_step = functools.partial(
        _adam_step, negative_elbo, optimizer, settings["learning_rate"], settings["num_particles"]
    )
    start_state = functools.partial(_start_state, optimizer, dimension, num_lower, dtype)

    num_steps = settings["num_steps"]
    # The steps run in compiled chunks so that a progress bar can report between them.
    chunk_length = max(1, num_steps // 20)

    @quick_jit(optimize=True)
    def run_chunk(states, progress):
        # progress: each step's share of the fit's steps done, the same for every fit.
        return jax.lax.scan(jax.vmap(one_step, (0, None)), states, progress)

    # One fit per program: all fits in one vmapped program (32 fits of a 92-coordinate
    # regression) left the result waiting forever in XLA's CPU runtime, every worker idle.
    polish_one = quick_jit(functools.partial(_polish, potential_fn, full_rank, dimension, dtype))

    @quick_jit
    def moments_and_elbos(params, seed):
        rng_keys = jax.random.split(jax.random.key(seed, impl="unsafe_rbg"), len(params[0]))

        def moments(fit_params, rng_key):
            scale_tril = _scale_tril(*fit_params[1:])
            # A precise ELBO only where it is used (log zeta = ELBO enters the estimator
            # directly); otherwise the fits are ranked by their last losses.
            elbo = (
                -negative_elbo(fit_params, rng_key, settings["elbo_particles"])
                if settings["elbo_particles"]
                else jnp.zeros((), dtype)
            )
            unsettled = _unsettled(potential_fn, dimension, dtype, fit_params)
            return fit_params[0], scale_tril @ scale_tril.T, elbo, unsettled

        return jax.vmap(moments)(params, rng_keys)

    @quick_jit
    def start_states(starts, seed):
        # The draws of the fits' ELBO estimates come from XLA's bit generator: a threefry draw
        # in the vmapped, scanned step compiles into a program three times as large, and the
        # fits need no more of their noise than independence between steps.
        fit_keys = jax.random.split(jax.random.key(seed, impl="unsafe_rbg"), len(starts))
        return jax.vmap(start_state)(starts, fit_keys)

    def fit(rng_key, starts, steps=num_steps) -> list[_LocalFit]:
        rng = numpy_rng(rng_key)
        num_fits = len(starts)
        num_chunks = max(1, steps // chunk_length)
        states = start_states(jnp.asarray(starts, dtype), rng.integers(2**31 - 1))
        progress = np.arange(num_chunks * chunk_length).reshape(num_chunks, chunk_length)
        progress = (progress / (num_chunks * chunk_length)).astype(dtype)
        states, all_losses = run_chunks(
            run_chunk,
            states,
            [(chunk_progress, chunk_length) for chunk_progress in progress],
            total=num_chunks * chunk_length,
            description=f"fit_base: {num_fits} Gaussian VI fit{'s' if num_fits > 1 else ''}",
            progress_bar=settings["progress_bar"],
            postfix=lambda losses: {"loss": f"{np.min(np.asarray(losses[-1])):.3g}"},
        )
        final_losses = np.concatenate([np.asarray(losses) for losses in all_losses])[-10:]
        final_losses = final_losses.astype(np.float64)
        params = states[0]
        seed = rng.integers(2**31 - 1)
        means, covariances, precise_elbos, to_polish = (
            np.asarray(value) for value in moments_and_elbos(params, seed)
        )
        elbos = precise_elbos if settings["elbo_particles"] else -final_losses.mean(0)
        if np.any(to_polish) and dimension <= MAX_POLISH_DIMENSION:
            means, covariances, elbos = _polished_moments(
                polish_one,
                moments_and_elbos,
                seed,
                params,
                to_polish,
                (means, covariances, elbos),
                settings["elbo_particles"],
            )
        return _finite_fits(means, covariances, elbos, final_losses)

    return fit


def fit_gaussian(
    potential_fn, start, rng_key, *, num_steps=2000, learning_rate=0.03, num_particles=4
):
    """One full-rank Gaussian VI fit of a flat potential, in pure JAX: the fit of
    :func:`fit_base`'s first stage (the objective of NumPyro's AutoMultivariateNormal, Adam with
    a cosine-decayed step size, initial scale 0.1) without its checks, polish or progress bar,
    so that it can be vmapped, e.g. over the data sets of
    :func:`~numpyro_extras.batched_ais`.

    :param potential_fn: the flat potential ``phi(z)``, minus the log joint density.
    :param start: the fit's starting mean, shape ``(D,)``.
    :param rng_key: the key of the ELBO's draws.
    :param int num_steps: Adam steps.
    :param float learning_rate: the first steps' size.
    :param int num_particles: the ELBO's draws per step.
    :return: ``(loc, scale_tril, loss)``: the Gaussian's mean and lower Cholesky factor, and
        the mean negative ELBO of the last tenth of the steps.

    **Example:**

    .. code-block:: python

        loc, scale_tril, loss = fit_gaussian(lambda z: 0.5 * z @ z, jnp.ones(2), key)
    """
    dimension = jnp.shape(start)[-1]
    dtype = jnp.result_type(start)
    optimizer = optax.scale_by_adam()
    negative_elbo = functools.partial(_negative_elbo, potential_fn, dimension, dtype)
    one_step = functools.partial(_adam_step, negative_elbo, optimizer, learning_rate, num_particles)
    state = _start_state(
        optimizer, dimension, dimension * (dimension - 1) // 2, dtype, start, rng_key
    )
    progress = jnp.arange(num_steps, dtype=dtype) / num_steps
    (params, _, _), losses = jax.lax.scan(one_step, state, progress)
    return params[0], _scale_tril(*params[1:]), jnp.mean(losses[-max(1, num_steps // 10) :])


def _start_state(optimizer, dimension, num_lower, dtype, loc, rng_key):
    """A fit's first state ``(params, optimizer_state, rng_key)``: at ``loc``, with the
    autoguides' initial scale 0.1 and no correlation.

    :param optimizer: ``optax.scale_by_adam()``.
    :param int dimension: the fit's dimension.
    :param int num_lower: the entries of its strictly lower factor (0 for a diagonal fit).
    :param dtype: the parameters' dtype.
    :param loc: the start.
    :param rng_key: the fit's key.
    :return: the state.
    """
    # exp(raw) = 0.1, the autoguides' init_scale.
    initial_raw_scale = math.log(0.1)
    params = (
        loc,
        jnp.full((dimension,), initial_raw_scale, dtype),
        jnp.zeros((num_lower,), dtype),
    )
    return params, optimizer.init(params), rng_key


def _negative_elbo(potential_fn, dimension, dtype, params, rng_key, num_particles):
    """The negative ELBO ``E_q[phi(z) + log q(z)]`` of one Gaussian fit, estimated with
    ``num_particles`` reparametrised draws.

    :param potential_fn: the flat potential ``phi``.
    :param int dimension: its dimension.
    :param dtype: the draws' dtype.
    :param params: the fit's ``(loc, raw_scale, unit_lower)`` (:func:`_scale_tril`).
    :param rng_key: the draws' key.
    :param int num_particles: the draws.
    :return: the estimate.
    """
    loc, raw_scale, unit_lower = params
    scale_tril = _scale_tril(raw_scale, unit_lower)
    noise = jax.random.normal(rng_key, (num_particles, dimension), dtype)
    potentials = jax.vmap(potential_fn)(loc + noise @ scale_tril.T)
    # log q at each draw, as Trace_ELBO scores the guide's samples: when q is close to the
    # target, phi + log q varies far less between draws than phi alone. The draw is
    # loc + L noise, so log q = log N(noise; 0, I) - log det L.
    log_q = jnp.sum(norm.logpdf(noise), axis=-1) - jnp.sum(jnp.log(jnp.diagonal(scale_tril)))
    return jnp.mean(potentials + log_q)


def _adam_step(negative_elbo, optimizer, learning_rate, num_particles, state, progress):
    """One Adam step of one fit, its step size cosine-decayed with the fit's ``progress``.

    :param negative_elbo: ``(params, rng_key, num_particles) -> loss``.
    :param optimizer: ``optax.scale_by_adam()``.
    :param float learning_rate: the first steps' size.
    :param int num_particles: the loss's draws per step.
    :param state: ``(params, optimizer_state, rng_key)``.
    :param progress: the share of the fit's steps done.
    :return: ``(state, loss)``.
    """
    params, optimizer_state, rng_key = state
    rng_key, step_key = jax.random.split(rng_key)
    loss, gradients = jax.value_and_grad(negative_elbo)(params, step_key, num_particles)
    directions, optimizer_state = optimizer.update(gradients, optimizer_state)
    # A step size cosine-decayed to a hundredth over the fit's steps: large first steps
    # cross a correlated posterior in a few hundred steps, small last ones settle the fit
    # where a constant step size leaves Adam's iterate wandering about the optimum.
    decay = 0.01 + 0.495 * (1.0 + jnp.cos(jnp.pi * progress))
    params = jax.tree.map(
        lambda value, direction: value - learning_rate * decay * direction, params, directions
    )
    return (params, optimizer_state, rng_key), loss


def _polish(potential_fn, full_rank, dimension, dtype, params):
    """Fixed-point steps of the Gaussian ELBO's stationarity conditions,
    ``E_q[grad phi] = 0`` and ``Sigma^-1 = E_q[hess phi]`` (diagonal of it for a diagonal
    ``q``), with the expectations over fixed draws; each step is kept only where it raises
    the ELBO on other fixed draws. Adam moves the mean by about its step size whatever the
    posterior's width, so a posterior much narrower than the last steps is left unresolved;
    these steps are exact for a Gaussian posterior and scale-free.

    :param potential_fn: the flat potential ``phi``.
    :param bool full_rank: whether the fit is a full-rank Gaussian.
    :param int dimension: the potential's dimension.
    :param dtype: the draws' dtype.
    :param params: one fit's ``(loc, raw_scale, unit_lower)``.
    :return: ``(polished_params, check_elbo, improved)``.
    """
    noise = jax.random.normal(jax.random.PRNGKey(0), (POLISH_DRAWS, dimension), dtype)
    # Judged on draws of their own, so that a step fitted to the first draws' noise is not
    # kept for it.
    check_noise = jax.random.normal(jax.random.PRNGKey(1), (POLISH_CHECK_DRAWS, dimension), dtype)
    hessian_fn = jax.vmap(jax.hessian(potential_fn))
    gaussian_entropy_constant = 0.5 * dimension * (1.0 + math.log(2.0 * math.pi))
    gradient_fn = jax.vmap(jax.grad(potential_fn))

    def elbo_on_draws(loc, scale_tril):
        potentials = jax.vmap(potential_fn)(loc + check_noise @ scale_tril.T)
        entropy = jnp.sum(jnp.log(jnp.diagonal(scale_tril))) + gaussian_entropy_constant
        return entropy - jnp.mean(potentials)

    def step(fit_params, _):
        loc, raw_scale, unit_lower = fit_params
        scale_tril = _scale_tril(raw_scale, unit_lower)
        draws = loc + noise @ scale_tril.T
        mean_hessian = jnp.mean(hessian_fn(draws), axis=0)
        mean_hessian = 0.5 * (mean_hessian + mean_hessian.T)
        new_loc = loc - jnp.linalg.solve(mean_hessian, jnp.mean(gradient_fn(draws), axis=0))
        if full_rank:
            new_tril = jnp.linalg.cholesky(jnp.linalg.inv(mean_hessian))
            new_raw_scale = jnp.log(jnp.diagonal(new_tril))
            rows, columns = np.tril_indices(dimension, -1)
            new_unit_lower = (new_tril / jnp.diagonal(new_tril)[:, None])[rows, columns]
        else:
            new_raw_scale = -0.5 * jnp.log(jnp.diagonal(mean_hessian))
            new_unit_lower = unit_lower
        candidate = (new_loc, new_raw_scale, new_unit_lower)
        better = elbo_on_draws(new_loc, _scale_tril(new_raw_scale, new_unit_lower))
        better = better > elbo_on_draws(loc, scale_tril)
        keep = better & jnp.all(jnp.array([jnp.all(jnp.isfinite(v)) for v in candidate]))
        return jax.tree.map(lambda a, b: jnp.where(keep, a, b), candidate, fit_params), None

    polished = jax.lax.scan(step, params, None, length=POLISH_STEPS)[0]
    check_elbo = elbo_on_draws(polished[0], _scale_tril(*polished[1:]))
    return polished, check_elbo, check_elbo > elbo_on_draws(params[0], _scale_tril(*params[1:]))


def _unsettled(potential_fn, dimension, dtype, fit_params):
    """Whether Adam left the fit short of a posterior that is Gaussian on its own scale:
    along some coordinate, phi's curvature at the fit's mean differs from the fit's
    conditional precision more than ``UNSETTLED_RATIO``-fold, and is the same (within
    ``QUADRATIC_TOLERANCE``) a posterior standard deviation away, so that the fixed-point
    steps of :func:`_polish` apply.

    :param potential_fn: the flat potential ``phi``.
    :param int dimension: its dimension.
    :param dtype: the fit's dtype.
    :param fit_params: one fit's ``(loc, raw_scale, unit_lower)``.
    :return: a boolean scalar.
    """
    loc = fit_params[0]
    scale_tril = _scale_tril(*fit_params[1:])
    identity = jnp.eye(dimension, dtype=dtype)
    conditional_precision = jnp.diagonal(jax.scipy.linalg.cho_solve((scale_tril, True), identity))
    centre = potential_fn(loc)

    def curvature(steps):
        offsets = jnp.diag(steps)
        up = jax.vmap(potential_fn)(loc + offsets)
        down = jax.vmap(potential_fn)(loc - offsets)
        return (up + down - 2.0 * centre) / steps**2

    near = curvature(0.1 / jnp.sqrt(conditional_precision))
    positive = near > 0
    far = curvature(1.0 / jnp.sqrt(jnp.where(positive, near, conditional_precision)))
    mismatch = jnp.abs(jnp.log(jnp.where(positive, near, 1.0) / conditional_precision))
    quadratic = jnp.abs(jnp.log(jnp.where(positive & (far > 0), far / near, 0.0))) < jnp.log(
        QUADRATIC_TOLERANCE
    )
    return jnp.any(positive & (far > 0) & quadratic & (mismatch > jnp.log(UNSETTLED_RATIO)))


def _polished_moments(polish_one, moments_and_elbos, seed, params, flags, moments, elbo_particles):
    """The fits' moments and ELBOs with the flagged fits polished (:func:`_polish`) where that
    raised their ELBO on its check draws.

    :param polish_one: the compiled polish of one fit.
    :param moments_and_elbos: ``(params, seed) -> (means, covariances, elbos, unsettled)``.
    :param seed: the seed the unpolished fits' ELBOs were estimated with.
    :param params: the fits' parameters.
    :param flags: the fits to polish.
    :param moments: the unpolished fits' ``(means, covariances, elbos)``.
    :param int elbo_particles: the draws of a precise ELBO (0: the fits are ranked by their
        last losses).
    :return: ``(means, covariances, elbos)``.
    """
    means, covariances, elbos = moments
    polished, check_elbos, improved = polish_flagged(polish_one, params, flags)
    polished_moments = moments_and_elbos(polished, seed)
    keep = flags & np.asarray(improved)
    means, covariances = (
        np.where(keep.reshape((-1,) + (1,) * (np.ndim(old) - 1)), new, old)
        for new, old in zip(polished_moments[:2], (means, covariances), strict=True)
    )
    # A polished fit is ranked by its ELBO on the check draws where no precise ELBO
    # is computed: its last losses were the unpolished fit's.
    new_elbos = polished_moments[2] if elbo_particles else check_elbos
    return means, covariances, np.where(keep, new_elbos, elbos)


def _finite_fits(means, covariances, elbos, final_losses):
    """The fits whose ELBO, moments and last losses are all finite, as :class:`_LocalFit`.

    :param means: the fits' means ``(fits, D)``, with their ``covariances`` and ``elbos``.
    :param final_losses: their last losses ``(steps, fits)``.
    :return: ``list[_LocalFit]``.
    """
    means, covariances, elbos = (
        np.asarray(value, dtype=np.float64) for value in (means, covariances, elbos)
    )
    fits = []
    for index in range(len(elbos)):
        values = (elbos[index], means[index], covariances[index], final_losses[:, index])
        if all(np.all(np.isfinite(value)) for value in values):
            fits.append(_LocalFit(means[index], covariances[index], float(elbos[index])))
    return fits


def polish_flagged(polish_one, params, flags):
    """``polish_one`` applied to the fits flagged in ``flags``, one after another (a polishing
    step costs a Hessian per draw), the other fits left as they were.

    :param polish_one: ``fit_params -> (polished_params, check_elbo, improved)`` for one fit.
    :param params: the fits' parameters, a tuple of arrays with the fits along the first axis.
    :param flags: ``(num_fits,)`` booleans, the fits to polish.
    :return: ``(params, check_elbos, improved)``: the parameters with the flagged fits' replaced,
        each fit's check ELBO (``-inf`` where not polished) and whether polishing improved it.

    **Example:**

    .. code-block:: python

        params = (np.zeros((3, 2)),)
        polished, _, improved = polish_flagged(
            lambda fit: ((fit[0] + 1.0,), 0.0, True), params, np.array([True, False, True])
        )
        polished[0][:, 0]  # [1, 0, 1]
    """
    polished = [np.array(leaf) for leaf in params]
    check_elbos = np.full(len(flags), -np.inf)
    improved = np.zeros(len(flags), bool)
    for index in np.flatnonzero(flags):
        result, check_elbos[index], improved[index] = polish_one(
            tuple(leaf[index] for leaf in params)
        )
        for leaf, value in zip(polished, result, strict=True):
            leaf[index] = np.asarray(value)
    return tuple(polished), check_elbos, improved


def _drop_duplicates(fits: list[_LocalFit], tolerance: float, batched_potential=None):
    """Keep the best of each group of fits of one mode.

    Two fits are of one mode when their means lie within ``tolerance`` standard deviations (of
    the kept fit) in every coordinate, or, given ``batched_potential`` (``phi`` of every row of
    an array), when the target has no
    barrier between their means: ``phi`` on the segment between them never rises more than
    ``_BARRIER`` nats above its higher end. The second test holds for two loosely converged fits
    of one mode in many dimensions, which seldom pass the first.
    """
    fits = sorted(fits, key=lambda f: -f.elbo)
    one_basin = (
        same_basin(batched_potential, np.stack([fit.loc for fit in fits]))
        if batched_potential is not None and len(fits) > 1
        else np.zeros((len(fits), len(fits)), dtype=bool)
    )
    kept: list[int] = []
    for index, fit in enumerate(fits):
        duplicate = False
        for other in kept:
            scale = np.sqrt(np.maximum(np.diagonal(fits[other].covariance), 1e-30))
            close = np.max(np.abs(fit.loc - fits[other].loc) / scale) < tolerance
            if close or one_basin[index, other]:
                duplicate = True
                break
        if not duplicate:
            kept.append(index)
    return [fits[index] for index in kept]


# A rise of the potential between two fits' means, in nats, that counts as a barrier.
_BARRIER = 1.0
_SEGMENT_POINTS = 9
_POTENTIAL_BLOCK = 1024


def vectorized_potential(potential_fn):
    """``phi`` of every row of a NumPy array, in float64, from one compiled, vmapped function.

    Rows go through in blocks of ``_POTENTIAL_BLOCK`` (the last one padded), so that the rounds
    of the fit, whose numbers of importance draws and segment points vary, share one
    compilation.

    :param potential_fn: ``x -> phi(x)`` for one flat point.
    :return: ``positions (N, D) numpy -> phi (N,) numpy float64``.
    """
    compiled = quick_jit(jax.vmap(potential_fn))

    def batched(positions):
        num_rows = len(positions)
        num_blocks = max(1, -(-num_rows // _POTENTIAL_BLOCK))
        padded = np.zeros((num_blocks * _POTENTIAL_BLOCK,) + positions.shape[1:])
        padded[:num_rows] = positions
        blocks = padded.reshape((num_blocks, _POTENTIAL_BLOCK) + positions.shape[1:])
        values = [np.asarray(compiled(jnp.asarray(block)), dtype=np.float64) for block in blocks]
        return np.concatenate(values)[:num_rows]

    return batched


def same_basin(batched_potential, locs):
    """``[K, K]`` booleans: no barrier in ``phi`` (a rise of more than one nat above both ends)
    on the straight segment between points ``i`` and ``j``.

    :param batched_potential: ``positions (N, D) -> phi (N,)`` (:func:`vectorized_potential`).
    :param locs: ``(K, D)`` points.
    :return: NumPy boolean array ``(K, K)``.
    """
    fractions = np.linspace(0.0, 1.0, _SEGMENT_POINTS)
    points = (
        locs[:, None, None, :] * (1.0 - fractions)[:, None]
        + locs[None, :, None, :] * fractions[:, None]
    )
    potentials = batched_potential(points.reshape(-1, locs.shape[-1])).reshape(points.shape[:3])
    potentials = np.where(np.isfinite(potentials), potentials, np.inf)
    ends = np.maximum(potentials[..., 0], potentials[..., -1])
    return np.max(potentials, axis=-1) <= ends + _BARRIER


def _elbo_moment_match(fits: list[_LocalFit]) -> tuple[np.ndarray, np.ndarray, float]:
    """One Gaussian with the moments of the ELBO-weighted mixture of fits (paper eq. 25)."""
    elbos = np.array([fit.elbo for fit in fits])
    log_zeta = float(logsumexp(elbos))
    loc, covariance = _moment_match(
        np.exp(elbos - log_zeta),
        np.stack([fit.loc for fit in fits]),
        np.stack([fit.covariance for fit in fits]),
    )
    return loc, covariance, log_zeta


def _moment_match(masses, locs, covariances) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of the Gaussian mixture with weights ``masses``."""
    mean = masses @ locs
    second_moment = np.einsum(
        "k,kij->ij", masses, covariances + np.einsum("ki,kj->kij", locs, locs)
    )
    covariance = second_moment - np.outer(mean, mean)
    return mean, 0.5 * (covariance + covariance.T)


def _cholesky(covariance):
    jitter = 1e-10 * max(np.trace(covariance) / len(covariance), 1e-30)
    return np.linalg.cholesky(covariance + jitter * np.eye(len(covariance)))


def _prior_positions(rng_key, flat_model, num_draws, stacklevel=3):
    """Prior draws on the flat unconstrained space, rows with a non-finite entry dropped; none
    for a potential without a model or a model whose prior cannot be sampled (an improper prior;
    any other failure warns, with ``stacklevel`` counted from this function)."""
    if flat_model.sample_prior_fn is None:
        return np.zeros((0, flat_model.dimension))
    try:
        positions = quick_jit(flat_model.sample_prior_fn, static_argnums=1)(rng_key, num_draws)
        positions = np.asarray(positions, dtype=np.float64)
    except NotImplementedError:
        # An improper prior (ImproperUniform) has no sampler: the fits start from uniform draws.
        return np.zeros((0, flat_model.dimension))
    except Exception as error:  # noqa: BLE001 -- any other failure is the model's, and said
        warnings.warn(
            f"fit_base could not draw from the model's prior ({type(error).__name__}: "
            f"{error}); its fits start from uniform draws in [-init_radius, init_radius] only, "
            "which may miss modes that prior draws would reach.",
            stacklevel=stacklevel,
        )
        return np.zeros((0, flat_model.dimension))
    return positions[np.all(np.isfinite(positions), axis=-1)]


def _defensive_component(locs, covariances, prior_positions):
    """The broad Gaussian of the fitting rounds, over every fit and the prior: the moments of
    the fits (equally weighted) mixed half and half with the prior's; without enough prior
    draws, the fits' moments with four times the covariance.

    A mode no fit found lies where the fits' own tails never reach; the prior's spread puts
    some of the importance draws there, so a later round can start a fit in it.
    """
    num_fits = len(locs)
    loc, covariance = _moment_match(np.full(num_fits, 1.0 / num_fits), locs, covariances)
    dimension = len(loc)
    if len(prior_positions) <= 2 * dimension + 2:
        return loc, 4.0 * covariance
    prior_loc = prior_positions.mean(0)
    prior_covariance = np.atleast_2d(np.cov(prior_positions, rowvar=False))
    return _moment_match(
        np.array([0.5, 0.5]), np.stack([loc, prior_loc]), np.stack([covariance, prior_covariance])
    )


def _component_log_densities(positions, locs, scale_trils):
    """``log N(x_i; mu_k, L_k L_k^T)`` for every point and component, shape ``[N, K]``, with
    NumPy (the importance draws live on the host)."""
    columns = []
    for loc, scale_tril, log_normalizer in zip(
        locs, scale_trils, gaussian_log_normalizers(scale_trils), strict=True
    ):
        whitened = scipy.linalg.solve_triangular(scale_tril, (positions - loc).T, lower=True)
        columns.append(log_normalizer - 0.5 * np.sum(whitened**2, axis=0))
    return np.stack(columns, axis=-1)


class MixtureEstimate(NamedTuple):
    """What :func:`importance_masses` finds.

    :param log_zeta: the importance-sampling estimate of ``log Z``.
    :param masses: each fit's share of the target's mass.
    :param effective_sample_size: of the (smoothed) importance weights.
    :param pareto_k: the tail index of the weights (above 0.7: the estimate is unreliable).
    :param positions: the importance draws, ``(N, D)``.
    :param log_weights: their smoothed log weights.
    :param log_uncovered: per draw, the log of the defensive component's share of the proposal.
    """

    log_zeta: float
    masses: np.ndarray
    effective_sample_size: float
    pareto_k: float
    positions: np.ndarray
    log_weights: np.ndarray
    log_uncovered: np.ndarray


def importance_masses(rng_key, batched_potential, locs, scale_trils, num_fits, num_draws):
    """``log Z`` and each fit's share of the target's mass by importance sampling.

    The proposal is the equal mixture of all components (the fits, then the defensive one),
    drawn stratified, with the deterministic-mixture weights ``exp(-phi(x)) / q(x)``, Pareto
    smoothed (ArviZ's PSIS). A draw's weight is shared among the fits by their
    responsibilities, so two near-duplicate fits of one mode split its mass instead of each
    claiming all of it, as a sum of their ELBOs would.

    A draw in a mode that only the defensive component reaches can outweigh all the others by
    many orders of magnitude; raw weights would then hand it the whole mass, and a later round
    would drop every other fit as massless. Smoothing the tail bounds such a draw's share, and
    the tail's Pareto ``k`` (above 0.7: unreliable) says when the estimate cannot be trusted.

    :param rng_key: PRNG key for the draws.
    :param batched_potential: ``positions -> phi`` (:func:`vectorized_potential`).
    :param locs: component means ``(K, D)``, the fits first, the defensive component last.
    :param scale_trils: their Cholesky factors ``(K, D, D)``.
    :param int num_fits: how many of the components are fits.
    :param int num_draws: importance draws.
    :return: :class:`MixtureEstimate`.
    """
    num_components, dimension = locs.shape
    noise = numpy_rng(rng_key).standard_normal((num_draws, dimension))
    components = np.arange(num_draws) % num_components
    # One product per component: gathering a scale factor per draw would build an (N, D, D)
    # array, hundreds of megabytes at a few thousand draws in 100 dimensions.
    positions = np.empty_like(noise)
    for component, (loc, scale_tril) in enumerate(zip(locs, scale_trils, strict=True)):
        drawn = components == component
        positions[drawn] = loc + noise[drawn] @ scale_tril.T
    log_components = _component_log_densities(positions, locs, scale_trils)
    log_proposal = logsumexp(log_components, axis=1) - math.log(num_components)
    potentials = batched_potential(positions)
    log_weights = np.where(np.isfinite(potentials), -potentials - log_proposal, -np.inf)
    finite = np.isfinite(log_weights)
    pareto_k = np.inf
    if np.sum(finite) > 10:
        smoothed, pareto_k = arviz_adapter.psis_log_weights(log_weights[finite])
        log_weights[finite] = smoothed
    log_total = logsumexp(log_weights)
    weights = np.exp(log_weights - log_total)
    fit_log_components = log_components[:, :num_fits]
    responsibilities = np.exp(
        fit_log_components - logsumexp(fit_log_components, axis=1, keepdims=True)
    )
    log_uncovered = log_components[:, -1] - logsumexp(log_components, axis=1)
    return MixtureEstimate(
        log_zeta=float(log_total - math.log(len(positions))),
        masses=weights @ responsibilities,
        effective_sample_size=float(_importance_ess(jnp.asarray(log_weights))),
        pareto_k=float(pareto_k),
        positions=positions,
        log_weights=log_weights,
        # The defensive component's share of the proposal density: near 1 where no fit reaches.
        log_uncovered=log_uncovered,
    )


def _mixture_base(rng_key, batched_potential, fits, prior_positions, settings, dtype):
    """The fits (one per mode: duplicates already dropped) with their importance-sampled
    masses, plus the defensive component with weight ``defensive_weight``; ``log zeta`` by
    importance sampling.

    :return: ``(MixtureBase, MixtureEstimate)``.
    """
    locs = np.stack([fit.loc for fit in fits])
    covariances = np.stack([fit.covariance for fit in fits])
    defensive_loc, defensive_covariance = _defensive_component(locs, covariances, prior_positions)
    all_locs = np.concatenate([locs, defensive_loc[None]])
    scale_trils = np.stack([_cholesky(c) for c in [*covariances, defensive_covariance]])
    estimate = importance_masses(
        rng_key, batched_potential, all_locs, scale_trils, len(fits), settings["importance_draws"]
    )
    if not np.isfinite(estimate.log_zeta):
        raise RuntimeError(
            "The target's density is zero or not finite at every importance draw of the base "
            "fit; pass a base."
        )
    # A fit that carries no target mass (stuck where the target is negligible) only dilutes
    # the base.
    kept = estimate.masses > 1e-3
    masses = estimate.masses[kept] / np.sum(estimate.masses[kept])
    defensive_weight = settings["defensive_weight"]
    weights = np.append((1.0 - defensive_weight) * masses, defensive_weight)
    keep_components = np.append(kept, True)
    base = MixtureBase(
        jnp.asarray(all_locs[keep_components], dtype),
        jnp.asarray(scale_trils[keep_components], dtype),
        jnp.asarray(np.log(weights), dtype),
        jnp.asarray(estimate.log_zeta, dtype),
    )
    return base, estimate


class LocalOptima(NamedTuple):
    """Distinct local minima of ``phi`` and whether a refitting round has started a fit there."""

    positions: np.ndarray
    potentials: np.ndarray
    tried: np.ndarray


def _local_optima(potential_fn, starts, num_steps, dtype, learning_rate=0.1) -> LocalOptima:
    """Local minima of ``phi`` from many starts at once: Adam (optax) with a cosine-decayed step
    size, vmapped over the starts, in one compiled loop.

    A minimisation is far cheaper than a variational fit, so hundreds of them find most modes of
    a posterior with many (each start lands in the mode whose basin holds it), where a few dozen
    fits find only some; the refitting rounds then start fits only in the modes the base misses.
    Minima with a non-finite ``phi`` or gradient are dropped, and so are repeats (closer than
    ``1e-3`` of the minima's spread).

    :return: :class:`LocalOptima`, ordered by ``phi`` (the highest density first).
    """
    if len(starts) == 0:
        return LocalOptima(starts, np.zeros(0), np.zeros(0, dtype=bool))
    value_and_gradient = jax.vmap(jax.value_and_grad(potential_fn))
    optimizer = optax.adam(optax.cosine_decay_schedule(learning_rate, num_steps, alpha=0.01))

    @quick_jit(optimize=True)
    def minimise(positions):
        def step(carry, _):
            positions, optimizer_state = carry
            _, gradients = value_and_gradient(positions)
            # A start where phi is not finite stays where it is and is dropped below.
            gradients = jnp.where(jnp.isfinite(gradients), gradients, 0.0)
            updates, optimizer_state = optimizer.update(gradients, optimizer_state)
            return (optax.apply_updates(positions, updates), optimizer_state), None

        (positions, _), _ = jax.lax.scan(
            step, (positions, optimizer.init(positions)), None, length=num_steps
        )
        return (positions, *value_and_gradient(positions))

    positions, potentials, gradients = (
        np.asarray(value, dtype=np.float64) for value in minimise(jnp.asarray(starts, dtype))
    )
    finite = np.isfinite(potentials) & np.all(np.isfinite(gradients), axis=-1)
    positions, potentials = positions[finite], potentials[finite]
    order = np.argsort(potentials)
    positions, potentials = positions[order], potentials[order]
    if len(positions) > 1:
        spread = max(float(np.max(np.std(positions, axis=0))), 1e-12)
        kept = [0]
        for index in range(1, len(positions)):
            distances = np.max(np.abs(positions[kept] - positions[index]), axis=1)
            if np.min(distances) > 1e-3 * spread:
                kept.append(index)
        positions, potentials = positions[kept], potentials[kept]
    return LocalOptima(positions, potentials, np.zeros(len(positions), dtype=bool))


# A local minimum where the target's density is this many times the base's (times zeta) lies
# in a mode that no component of the base covers.
_UNCOVERED_RATIO = 10.0


def posterior_modes(
    rng_key, model, model_args, model_kwargs, flat_model, num_starts=64, num_steps=250
) -> LocalOptima:
    """Local maxima of a model's posterior density on the flat unconstrained space: Adam
    minimisations of ``phi`` from ``num_starts`` dispersed starts (half prior draws, half uniform
    in ``[-2, 2]``), all in one compiled loop, as the refitting rounds of :func:`fit_base` seed
    theirs.

    :param jax.random.PRNGKey rng_key: random key.
    :param model: the NumPyro model.
    :param tuple model_args: its positional arguments.
    :param dict model_kwargs: its keyword arguments.
    :param FlatModel flat_model: its flat potential (:func:`~numpyro_extras.flatten_model`).
    :param int num_starts: minimisations.
    :param int num_steps: Adam steps of each.
    :return: :class:`LocalOptima`, the distinct minima of ``phi``, lowest first.

    **Example:**

    .. code-block:: python

        flat = nx.flatten_model(jax.random.PRNGKey(0), model, (y,))
        modes = posterior_modes(jax.random.PRNGKey(1), model, (y,), {}, flat)
        modes.positions  # (num_modes, D), the highest density first
    """
    prior_key, starts_key = np.asarray(jax.random.split(rng_key))
    prior_positions = _prior_positions(prior_key, flat_model, num_draws=num_starts)
    starts = _dispersed_starts(
        numpy_rng(starts_key), num_starts, flat_model.dimension, 2.0, prior_positions
    )
    return _local_optima(
        flat_model.potential_fn, starts, num_steps, flat_model.initial_position.dtype
    )


def _uncovered_optima(optima: LocalOptima, base: MixtureBase) -> np.ndarray:
    """The local minima of ``phi`` that the base does not cover (the target's density there is
    more than ``_UNCOVERED_RATIO`` times ``zeta`` times the base's) and that no round has started
    a fit at, the highest target density first, at most one per mode (two minima are of one mode
    when they lie within 0.1 standard deviations of the base's broad component of each other).

    :return: indices into ``optima``.
    """
    if len(optima.positions) == 0:
        return np.zeros(0, dtype=int)
    locs = np.asarray(base.component_locs, dtype=np.float64)
    scale_trils = np.asarray(base.component_scale_trils, dtype=np.float64)
    log_weights = np.asarray(base.component_log_weights, dtype=np.float64)
    log_base = logsumexp(
        _component_log_densities(optima.positions, locs, scale_trils) + log_weights, axis=1
    )
    log_ratio = -optima.potentials - float(base.log_zeta) - log_base
    candidates = np.flatnonzero((log_ratio > math.log(_UNCOVERED_RATIO)) & ~optima.tried)
    whitened = scipy.linalg.solve_triangular(
        scale_trils[-1], optima.positions[candidates].T, lower=True
    ).T
    chosen: list[int] = []
    for row in range(len(candidates)):
        if not chosen or np.min(np.max(np.abs(whitened[chosen] - whitened[row]), axis=1)) > 0.1:
            chosen.append(row)
    return candidates[chosen]


def _new_starts(positions, log_weights, existing, scale_tril, num_starts, rng):
    """Starting points for new fits from weighted draws: half resampled by weight, half spread
    out by farthest-point selection among the draws that carry weight, away from the ``existing``
    fits' means too, so that each separate region of weight gets a fit of its own."""
    weights = np.exp(log_weights - logsumexp(log_weights))
    num_resampled = num_starts - num_starts // 2
    cumulative = np.cumsum(weights)
    cumulative[-1] = 1.0
    chosen = list(
        np.searchsorted(cumulative, (rng.uniform() + np.arange(num_resampled)) / num_resampled)
    )
    candidates = np.flatnonzero(weights > 1e-3 / len(weights))

    def whiten(points):
        return scipy.linalg.solve_triangular(scale_tril, np.atleast_2d(points).T, lower=True).T

    whitened = whiten(positions[candidates])
    taken = whiten(np.concatenate([positions[chosen], existing]))
    nearest = np.min(np.sum((whitened[:, None] - taken[None]) ** 2, -1), axis=1)
    for _ in range(min(num_starts // 2, len(candidates))):
        pick = int(np.argmax(nearest))
        chosen.append(candidates[pick])
        nearest = np.minimum(nearest, np.sum((whitened - whitened[pick]) ** 2, -1))
    # Always num_starts points, so that every round reuses the first round's compiled fits.
    chosen += chosen[: num_starts - len(chosen)]
    return positions[np.asarray(chosen)]


# fit_base's settings, each with its check: (kind, minimum) for counts, (kind, low, high) for
# real numbers in an open interval, the accepted values for choices.
_FIT_BASE_SETTINGS = {
    "method": ("choice", ("mixture", "gaussian")),
    "num_starts": ("count", 1),
    "num_steps": ("count", 1),
    "learning_rate": ("real", 0.0, None),
    "num_particles": ("count", 1),
    "elbo_particles": ("count", 1),
    "guide": ("choice", ("multivariate", "diagonal")),
    "init_radius": ("real", 0.0, None),
    "duplicate_tolerance": ("real", 0.0, None),
    "importance_draws": ("count", 1),
    "defensive_weight": ("real", 0.0, 1.0),
    "num_optima": ("count", 0),
    "bootstrap_rounds": ("count or None", 0),
    "bootstrap_num_warmup": ("count", 0),
    "bootstrap_num_samples": ("count", 1),
    "bootstrap_num_chains": ("count", 1),
    "progress_bar": ("flag",),
    "flat_model": ("flat model",),
}


def check_fit_base_settings(owner="fit_base", **settings):
    """Check settings of :func:`fit_base` by name before any work: unknown names, and values of
    the wrong kind or out of range, raise an error that names the setting and what it accepts.

    :param str owner: how the error names where the settings came from (a kernel's
        ``fit_base_kwargs``, say).
    :param settings: the settings, by :func:`fit_base`'s keyword names.
    :return: the settings, unchanged.
    :raises TypeError: for an unknown name or a value of the wrong kind.
    :raises ValueError: for a value out of range.

    **Example:**

    .. code-block:: python

        check_fit_base_settings("fit_base_kwargs", num_starts=8, num_steps=500)
    """
    unknown = sorted(set(settings) - set(_FIT_BASE_SETTINGS))
    if unknown:
        raise TypeError(
            f"{owner}: unknown fit_base setting{'s' * (len(unknown) > 1)} {unknown}; the "
            f"settings are {sorted(_FIT_BASE_SETTINGS)}."
        )
    for name, value in settings.items():
        kind, *limits = _FIT_BASE_SETTINGS[name]
        label = f"{owner}: {name}" if owner != "fit_base" else name
        if kind == "choice" and value not in limits[0]:
            raise ValueError(f"{label} must be one of {limits[0]}, got {value!r}.")
        if kind == "count" or (kind == "count or None" and value is not None):
            check_count(label, value, minimum=limits[0])
        if kind == "real":
            low, high = limits
            requirement = (
                "a positive number" if high is None else f"a number in ({low:g}, {high:g})"
            )
            check_real(label, value, requirement, low=low, high=high)
        if kind == "flag" and not is_flag(value):
            raise TypeError(f"{label} must be True or False, got {value!r}.")
        if kind == "flat model" and value is not None and not isinstance(value, FlatModel):
            raise TypeError(
                f"{label} must be a FlatModel (nx.flatten_model) or None, got "
                f"{type(value).__name__}."
            )
    return settings


class BaseFit(NamedTuple):
    """A fitted base and the warnings its fit has for the user.

    :param base: :class:`~numpyro_extras.GaussianBase` or :class:`~numpyro_extras.MixtureBase`.
    :param warnings: ``Warning`` instances (:class:`~numpyro_extras.BaseCoverageWarning` and
        :class:`~numpyro_extras.ModeSearchWarning` among them), in the order the fit found them.
    """

    base: GaussianBase | MixtureBase
    warnings: tuple[Warning, ...]


class FitsDivergedError(RuntimeError):
    """Every variational fit of the base diverged and the prior gives no fallback base."""


def fit_base(rng_key, model, model_args=(), model_kwargs=None, **settings):
    """Fit a base density and ``log zeta`` for continuous tempering by variational inference.

    ``method="mixture"`` (the default; paper eq. 25 with importance-sampled weights) returns a
    :class:`MixtureBase`:

    1. ``num_starts`` Gaussian VI fits (the objective of NumPyro's autoguides on the model's flat
       potential, all in one compiled, vmapped loop)
       from dispersed starts: half prior draws, half uniform in ``[-init_radius, init_radius]``
       on the unconstrained space; near-duplicates (means closer than ``duplicate_tolerance``
       standard deviations, or with no barrier of the target between them) dropped.
    2. Importance sampling with the equal mixture of the fits and a broad defensive Gaussian
       (the fits' and the prior's moments) gives ``log zeta`` and each fit's share of the
       posterior mass.
    3. Up to ``bootstrap_rounds`` times (default 4), until a round adds no new component and
       no uncovered minimum is left (two rounds in a row with ``num_optima=0``): ``num_starts``
       new fits of ``num_steps / 4`` steps, half started from the importance draws that only
       the defensive component reaches (resampled by weight and spread out away from the fits
       so far, so a region of target mass that no fit covers gets one), half from local minima
       of ``phi`` that the base does not cover (``num_optima`` cheap minimisations from
       dispersed starts, run once, find most modes when there are many), then from new
       dispersed starts; step 2 over all fits. When the rounds run out with minima still
       uncovered (with ``num_optima=0``: while still finding modes), or the importance weights'
       Pareto ``k`` exceeds 0.7, it warns (:class:`BaseCoverageWarning`).
    4. The base is the mixture of the fits with those masses; only when it warns, also, with
       weight ``defensive_weight``, the Gaussian with the moments of the fits' mixture, which
       spans every mode found, so that a chain near ``beta = 0`` reaches the regions between
       them.

    ``method="gaussian"`` is the best of four fits from uniform starts (one start alone can
    stall far from the optimum on a hierarchical model), a :class:`GaussianBase` with
    ``log zeta = ELBO`` (recipe 1), the ELBO estimated with ``elbo_particles`` particles; a
    bootstrap round, if asked for, refits it to a tempering run's weighted moments
    (:func:`~numpyro_extras.refit_base`).

    :param jax.random.PRNGKey rng_key: random key.
    :param model: NumPyro model with continuous latent sites.
    :param tuple model_args: the model's positional arguments.
    :param dict model_kwargs: the model's keyword arguments.
    :param str method: ``"mixture"`` or ``"gaussian"``.
    :param int num_starts: VI fits per stage of ``"mixture"``.
    :param int num_steps: Adam steps per fit.
    :param float learning_rate: Adam's first step size, cosine-decayed to a hundredth of it
        over each fit's steps.
    :param int num_particles: ELBO particles per step.
    :param int elbo_particles: particles for the ELBO of ``"gaussian"``.
    :param str guide: ``"multivariate"`` (a full-rank Gaussian, as
        :class:`~numpyro.infer.autoguide.AutoMultivariateNormal`) or ``"diagonal"`` (as
        :class:`~numpyro.infer.autoguide.AutoDiagonalNormal`).
    :param float init_radius: radius of the uniform starts.
    :param float duplicate_tolerance: duplicate distance, in standard deviations of a kept fit
        (fits with no barrier of the target between their means are duplicates too).
    :param int importance_draws: importance draws per estimate of the masses and ``log zeta``.
    :param float defensive_weight: weight of the broad component of ``"mixture"`` (in its
        rounds' importance sampling, and in the base when it warns).
    :param int num_optima: minimisations of ``phi`` (Adam, ``num_steps / 4`` steps each, all
        vmapped) whose minima seed the refitting rounds of ``"mixture"``; 0 for none.
    :param int bootstrap_rounds: most refitting rounds after the first fits; ``None`` for 4 with
        ``"mixture"`` and 0 with ``"gaussian"`` (whose rounds are short Gibbs tempering runs
        followed by :func:`~numpyro_extras.refit_base`).
    :param int bootstrap_num_warmup: warm-up draws of each tempering run of ``"gaussian"``'s
        rounds.
    :param int bootstrap_num_samples: kept draws per chain of those runs.
    :param int bootstrap_num_chains: vectorized chains of those runs.
    :param bool progress_bar: show the fits' progress (a tqdm bar).
    :param FlatModel flat_model: the model's flat potential (:func:`~numpyro_extras.flatten_model`
        of these arguments) when the caller has built it already, as the kernels have; ``None``
        builds it.
    :return: a :class:`MixtureBase` (``"mixture"``) or a :class:`GaussianBase` (``"gaussian"``).
    :raises FitsDivergedError: when every fit diverged and the prior gives no fallback base.

    **Example:**

    .. code-block:: python

        base = nx.fit_base(jax.random.PRNGKey(0), model, (x, y))
        kernel = nx.GibbsContinuousTempering(model, base=base)
    """
    fitted = fit_base_with_warnings(rng_key, model, model_args, model_kwargs, **settings)
    for warning in fitted.warnings:
        warnings.warn(warning, stacklevel=2)
    return fitted.base


def fit_base_with_warnings(
    rng_key,
    model,
    model_args=(),
    model_kwargs=None,
    *,
    method="mixture",
    num_starts=32,
    num_steps=2000,
    learning_rate=0.03,
    num_particles=4,
    elbo_particles=2000,
    guide="multivariate",
    init_radius=2.0,
    duplicate_tolerance=0.5,
    importance_draws=4096,
    defensive_weight=0.1,
    num_optima=512,
    bootstrap_rounds=None,
    bootstrap_num_warmup=500,
    bootstrap_num_samples=1000,
    bootstrap_num_chains=4,
    progress_bar=True,
    flat_model=None,
) -> BaseFit:
    """As :func:`fit_base`, with the same arguments, but the fit's warnings are returned with
    the base instead of issued, for a caller that decides which to pass on (a kernel whose run
    checks the base's coverage itself, say) and reads what they found.

    :return: :class:`BaseFit`.

    **Example:**

    .. code-block:: python

        fitted = fit_base_with_warnings(jax.random.PRNGKey(0), model, (x, y))
        missed = [w for w in fitted.warnings if isinstance(w, nx.BaseCoverageWarning)]
    """
    check_rng_key(rng_key)
    if model is not None:
        check_model(model)
    model_args, model_kwargs = check_model_arguments(model_args, model_kwargs)
    check_fit_base_settings(
        method=method,
        num_starts=num_starts,
        num_steps=num_steps,
        learning_rate=learning_rate,
        num_particles=num_particles,
        elbo_particles=elbo_particles,
        guide=guide,
        init_radius=init_radius,
        duplicate_tolerance=duplicate_tolerance,
        importance_draws=importance_draws,
        defensive_weight=defensive_weight,
        num_optima=num_optima,
        bootstrap_rounds=bootstrap_rounds,
        bootstrap_num_warmup=bootstrap_num_warmup,
        bootstrap_num_samples=bootstrap_num_samples,
        bootstrap_num_chains=bootstrap_num_chains,
        progress_bar=progress_bar,
        flat_model=flat_model,
    )
    if bootstrap_rounds is None:
        bootstrap_rounds = 4 if method == "mixture" else 0
    # Keys as NumPy arrays: slicing them then compiles nothing.
    init_key, fits_key, bootstrap_key = np.asarray(split_key(rng_key, 3))
    if flat_model is None:
        flat_model = flatten_model(
            init_key, model, model_args, model_kwargs, kernel_name="fit_base"
        )
    settings = dict(
        num_steps=num_steps,
        learning_rate=learning_rate,
        num_particles=num_particles,
        elbo_particles=elbo_particles if method == "gaussian" else 0,
        init_radius=init_radius,
        importance_draws=importance_draws,
        defensive_weight=defensive_weight,
        progress_bar=progress_bar,
    )
    fit_gaussians = _variational_fitter(flat_model, guide == "multivariate", settings)
    fits, prior_positions, issued, fallback = _first_fits(
        fits_key,
        fit_gaussians,
        model,
        model_args,
        model_kwargs,
        flat_model,
        method,
        num_starts,
        init_radius,
    )
    if fallback is not None:
        return BaseFit(fallback, tuple(issued))
    if method == "gaussian":
        base = _bootstrap(
            bootstrap_key,
            flat_model,
            _best_gaussian(fits, flat_model.initial_position.dtype),
            bootstrap_rounds,
            bootstrap_num_warmup,
            bootstrap_num_samples,
            bootstrap_num_chains,
            issued,
        )
        return BaseFit(base, tuple(issued))
    search = _MixtureSearch(
        fit_gaussians,
        vectorized_potential(flat_model.potential_fn),
        prior_positions,
        settings,
        flat_model.initial_position.dtype,
        flat_model.dimension,
        num_starts,
        duplicate_tolerance,
        numpy_rng(bootstrap_key),
    )
    base, coverage_in_doubt = _mixture_search(
        bootstrap_key, search, flat_model, fits, num_optima, bootstrap_rounds, issued
    )
    return BaseFit(_kernel_base(base, coverage_in_doubt), tuple(issued))


def _first_fits(
    fits_key, fit_gaussians, model, model_args, model_kwargs, flat_model, method, num_starts, radius
):
    """The first Gaussian VI fits: ``num_starts`` from dispersed starts, half of them prior
    draws, for ``"mixture"``; ``GAUSSIAN_STARTS`` from uniform starts for ``"gaussian"``.

    :param fits_key: the key of the starts and the fits.
    :param fit_gaussians: the fitter, from :func:`_variational_fitter`.
    :param model: the model, with its ``model_args``, ``model_kwargs`` and ``flat_model``.
    :param str method: ``"mixture"`` or ``"gaussian"``.
    :param int num_starts: the number of fits of ``"mixture"``.
    :param float radius: the radius of the uniform starts.
    :return: ``(fits, prior_positions, issued, fallback)``: the fits that stayed finite, the
        prior draws among the starts (none for ``"gaussian"``), the warnings of diverged fits,
        and the base when every fit diverged (from prior draws' moments; else ``None``).
    """
    num_fits = GAUSSIAN_STARTS if method == "gaussian" else num_starts
    starts_key, prior_key, fits_key = np.asarray(jax.random.split(fits_key, 3))
    prior_positions = (
        _prior_positions(prior_key, flat_model, num_draws=1000, stacklevel=4)
        if method == "mixture"
        else np.zeros((0, flat_model.dimension))
    )
    starts = _dispersed_starts(
        numpy_rng(starts_key), num_fits, flat_model.dimension, radius, prior_positions
    )
    fits = fit_gaussians(fits_key, starts)
    if not fits:
        diverged = UserWarning(
            "Every variational fit of the base diverged (a Gaussian on the unconstrained "
            "space cannot follow a support that depends on another latent site, for "
            "example); the base is the Gaussian with the moments of prior draws on the "
            "unconstrained space, and log zeta comes from importance sampling with it."
        )
        fallback = _prior_moment_base(
            fits_key, model, model_args, model_kwargs, flat_model, stacklevel=4
        )
        return fits, prior_positions, [diverged], fallback
    issued = []
    if len(fits) < num_fits:
        issued.append(
            UserWarning(
                f"{num_fits - len(fits)} of {num_fits} variational fits diverged and were dropped."
            )
        )
    return fits, prior_positions, issued, None


def _best_gaussian(fits, dtype):
    """The :class:`GaussianBase` of the fit with the highest ELBO, ``log zeta`` its ELBO.

    :param list fits: the fits.
    :param dtype: the base's dtype.
    :return: :class:`GaussianBase`.
    """
    # The best fit alone: fits of one mode from several starts would be counted once each
    # in a sum of their ELBOs.
    loc, covariance, log_zeta = _elbo_moment_match([max(fits, key=lambda fit: fit.elbo)])
    return GaussianBase(
        jnp.asarray(loc, dtype),
        jnp.asarray(_cholesky(covariance), dtype),
        jnp.asarray(log_zeta, dtype),
    )


class _MixtureSearch(NamedTuple):
    """What the rounds of a ``"mixture"`` fit share.

    :param fit_gaussians: the fitter, from :func:`_variational_fitter`.
    :param batched_potential: the potential on a batch of points (:func:`vectorized_potential`).
    :param prior_positions: prior draws on the flat space, for dispersed starts.
    :param dict settings: the fit's settings.
    :param dtype: the model's dtype.
    :param int dimension: the model's flat dimension.
    :param int num_starts: fits per round.
    :param float duplicate_tolerance: as for :func:`fit_base`.
    :param rng: the NumPy generator of the rounds' starts.
    """

    fit_gaussians: Callable
    batched_potential: Callable
    prior_positions: np.ndarray
    settings: dict
    dtype: object
    dimension: int
    num_starts: int
    duplicate_tolerance: float
    rng: np.random.Generator


def _mixture_search(bootstrap_key, search, flat_model, fits, num_optima, bootstrap_rounds, issued):
    """The mixture of ``"mixture"``: the first fits' mixture, then up to ``bootstrap_rounds``
    refitting rounds (:func:`_refitting_round`) until a round adds no new component and no
    local minimum of ``phi`` is left uncovered; warnings on what the search left in doubt are
    appended to ``issued``.

    :param bootstrap_key: the key of the rounds.
    :param _MixtureSearch search: what the rounds share.
    :param FlatModel flat_model: the model's flat potential.
    :param list fits: the first fits.
    :param int num_optima: minimisations of ``phi`` whose minima seed the rounds.
    :param int bootstrap_rounds: the most rounds.
    :param list issued: the fit's warnings, appended to.
    :return: ``(base, coverage_in_doubt)``: the mixture of the fits, and whether the search
        warned that it may miss mass.
    """
    settings, rng, batched_potential = search.settings, search.rng, search.batched_potential
    prior_positions = search.prior_positions
    round_keys = np.asarray(split_key(bootstrap_key, bootstrap_rounds + 1))
    fits = _drop_duplicates(fits, search.duplicate_tolerance, batched_potential)
    base, estimate = _mixture_base(
        round_keys[0], batched_potential, fits, prior_positions, settings, search.dtype
    )
    optima = _local_optima(
        flat_model.potential_fn,
        _dispersed_starts(
            rng,
            num_optima if bootstrap_rounds else 0,
            flat_model.dimension,
            settings["init_radius"],
            prior_positions[rng.permutation(len(prior_positions))],
        ),
        max(settings["num_steps"] // 4, 1),
        search.dtype,
    )
    empty_rounds = 0
    coverage_in_doubt = False
    for round_key in round_keys[1:]:
        refit = _refitting_round(search, round_key, fits, base, estimate, optima)
        if refit is None:
            break
        num_components = base.component_locs.shape[0]
        fits, base, estimate = refit
        empty_rounds = empty_rounds + 1 if base.component_locs.shape[0] <= num_components else 0
        # With the minima, every mode that hundreds of starts reached has been tried, so one
        # round that finds nothing new ends the search; without them, two in a row.
        settled = 1 if len(optima.positions) else min(2, bootstrap_rounds)
        if empty_rounds >= settled and not len(_uncovered_optima(optima, base)):
            break  # no new region of target mass was found, nor is one known
    else:
        # Rounds that ran out while still finding modes leave coverage in doubt, unless every
        # local minimum found has a component on it.
        uncovered = optima.positions[_uncovered_optima(optima, base)]
        if bootstrap_rounds and (not len(optima.positions) or len(uncovered)):
            coverage_in_doubt = True
            issued.append(
                _mode_search_warning(
                    base, uncovered, batched_potential, flat_model, bootstrap_rounds
                )
            )
    if estimate.pareto_k > UNRELIABLE_PARETO_K:
        coverage_in_doubt = True
        issued.append(
            BaseCoverageWarning(
                f"fit_base: the importance weights of its mass estimate have a heavy tail "
                f"(Pareto k = {estimate.pareto_k:.2f} > {UNRELIABLE_PARETO_K}): a few draws in "
                "regions the fits do not cover carry much of the weight (a tail heavier than "
                "the Gaussian components', or modes they missed), so its component weights "
                "and log zeta are unreliable; raise num_starts or bootstrap_rounds "
                "(fit_base_kwargs of the kernels)"
            )
        )
    return base, coverage_in_doubt


def _refitting_round(search, round_key, fits, base, estimate, optima):
    """One refitting round: ``num_starts`` new fits of ``num_steps / 4`` steps, half started
    from local minima of ``phi`` that the base does not cover (then from new dispersed
    starts), half from importance draws that only the defensive component reaches, and the
    mixture of all fits.

    :param _MixtureSearch search: what the rounds share.
    :param round_key: the round's key.
    :param list fits: the fits so far.
    :param MixtureBase base: their mixture, with its importance ``estimate``.
    :param LocalOptima optima: the local minima; those tried are marked.
    :return: ``(fits, base, estimate)`` after the round, or ``None`` when no importance draw
        had a finite score (the round is not run).
    """
    # Importance draws with target weight where only the defensive component reaches show
    # mass that no fit covers; new fits start there.
    log_scores = estimate.log_weights + estimate.log_uncovered
    finite = np.isfinite(log_scores)
    if not np.any(finite):
        return None
    fit_key, importance_key = jax.random.split(round_key)
    rng, prior_positions = search.rng, search.prior_positions
    # Half the starts are new dispersed ones: with many modes (2^d sign patterns, say) a
    # fit from a random point lands in a mode no fit has found yet about as often as that
    # mode's share of the basins, while the importance draws in uncovered modes are too few
    # to seed more than a handful of fits per round.
    num_dispersed = search.num_starts // 2
    uncovered = _uncovered_optima(optima, base)[:num_dispersed]
    optima.tried[uncovered] = True
    starts = np.concatenate(
        [
            optima.positions[uncovered],
            _new_starts(
                estimate.positions[finite],
                log_scores[finite],
                np.asarray(base.component_locs, dtype=np.float64)[:-1],
                np.asarray(base.component_scale_trils, dtype=np.float64)[-1],
                search.num_starts - num_dispersed,
                rng,
            ),
            _dispersed_starts(
                rng,
                num_dispersed - len(uncovered),
                search.dimension,
                search.settings["init_radius"],
                prior_positions[rng.permutation(len(prior_positions))],
            ),
        ]
    )
    # Started inside a region of target mass, a fit needs a fraction of the first steps.
    new_fits = search.fit_gaussians(fit_key, starts, steps=search.settings["num_steps"] // 4)
    fits = _drop_duplicates(fits + new_fits, search.duplicate_tolerance, search.batched_potential)
    base, estimate = _mixture_base(
        importance_key,
        search.batched_potential,
        fits,
        prior_positions,
        search.settings,
        search.dtype,
    )
    return fits, base, estimate


def _mode_search_warning(base, uncovered, batched_potential, flat_model, bootstrap_rounds):
    """The :class:`ModeSearchWarning` of refitting rounds that ran out while still finding
    modes: of a scale that changes across the posterior's mass (a funnel) when the components'
    and the uncovered minima's scales differ more than ``SCALE_CHANGE_RATIO``-fold, else of
    modes the base may miss.

    :param MixtureBase base: the mixture found.
    :param uncovered: the local minima of ``phi`` that no component covers.
    :param batched_potential: the potential on a batch of points.
    :param FlatModel flat_model: the model's flat potential, for the coordinates' names.
    :param int bootstrap_rounds: the rounds run.
    :return: :class:`ModeSearchWarning`.
    """
    num_modes = base.component_locs.shape[0] - 1
    ratio, coordinate = _largest_scale_ratio(
        base, _local_scales(batched_potential, uncovered, base)
    )
    if ratio > SCALE_CHANGE_RATIO:
        fold = f"{ratio:,.0f}" if ratio >= 10 else f"{ratio:.1f}"
        message = (
            f"fit_base: its {bootstrap_rounds} refitting rounds were still finding "
            f"regions of mass ({num_modes} component{'s' * (num_modes != 1)} so far), "
            "and the posterior's "
            f"standard deviation in {_coordinate_name(flat_model, coordinate)} differs "
            f"{fold}-fold between them (its components, and the local minima of the "
            "potential that none covers): the scale changes across its mass (a funnel, "
            "as a hierarchical scale makes), which Gaussian components follow only "
            "piece by piece, so the base under-covers where the scale is extreme, "
            "whether or not there are separate modes too; reparameterise (non-centred), "
            "or raise num_starts or bootstrap_rounds (fit_base_kwargs of the kernels)"
        )
    else:
        message = (
            f"fit_base: its {bootstrap_rounds} refitting rounds were still finding new "
            f"modes ({num_modes} so far), so the posterior may have modes the base does "
            "not cover, whose mass a tempering run can miss without any other sign; "
            "raise num_starts or bootstrap_rounds (fit_base_kwargs of the kernels)"
        )
    return ModeSearchWarning(message, num_modes)


# fit_base forwards its arguments; it shows (and checks) those of the fit itself.
fit_base.__signature__ = inspect.signature(fit_base_with_warnings).replace(
    return_annotation="GaussianBase | MixtureBase"
)


# Fitted components whose standard deviations in one coordinate differ more than this many
# times are pieces of a region whose scale changes (a funnel) more often than copies of one
# shape, as the modes of a mixture or of a symmetric posterior are.
SCALE_CHANGE_RATIO = 3.0


def _local_scales(batched_potential, positions, base: MixtureBase, relative_step=1e-3):
    """The target's standard deviation per coordinate at each of ``positions`` (local minima of
    ``phi``), from its curvature there: ``phi``'s second differences along each coordinate,
    with steps ``relative_step`` times the broad component's standard deviations."""
    if len(positions) == 0:
        return np.zeros((0, base.component_locs.shape[-1]))
    broad = np.asarray(base.component_scale_trils[-1], dtype=np.float64)
    steps = relative_step * np.sqrt(np.sum(broad**2, axis=-1))
    dimension = len(steps)
    offsets = np.concatenate([np.zeros((1, dimension)), np.diag(steps), -np.diag(steps)])
    points = positions[:, None, :] + offsets[None]
    values = batched_potential(points.reshape(-1, dimension)).reshape(len(positions), -1)
    curvature = (values[:, 1 : dimension + 1] + values[:, dimension + 1 :] - 2 * values[:, :1]) / (
        steps**2
    )
    # Where phi does not curve upwards (a flat or not quite converged direction) the local scale
    # is unknown, not infinite.
    return np.where(curvature > 0, 1.0 / np.sqrt(np.where(curvature > 0, curvature, 1.0)), np.nan)


def _largest_scale_ratio(base: MixtureBase, other_scales=None) -> tuple[float, int]:
    """``(ratio, coordinate)``: the largest ratio between two standard deviations in one
    coordinate among the fitted components (the broad last component left out) and the rows of
    ``other_scales`` (the target's local ones at minima no component covers), and that
    coordinate."""
    trils = np.asarray(base.component_scale_trils[:-1], dtype=np.float64)
    scales = np.sqrt(np.sum(trils**2, axis=-1))  # (component, coordinate)
    if other_scales is not None:
        scales = np.concatenate([scales, np.asarray(other_scales, dtype=np.float64)])
    if len(scales) < 2:
        return 1.0, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a coordinate with no known scale
        ratios = np.nanmax(scales, axis=0) / np.maximum(np.nanmin(scales, axis=0), 1e-300)
    ratios = np.where(np.isfinite(ratios), ratios, 1.0)
    coordinate = int(np.argmax(ratios))
    return float(ratios[coordinate]), coordinate


def _coordinate_name(flat_model, coordinate: int) -> str:
    """The site a flat unconstrained coordinate belongs to, as ``"site 'name'"``."""
    unit = np.zeros(flat_model.dimension)
    unit[coordinate] = 1.0
    sites = flat_model.unravel_fn(jnp.asarray(unit, flat_model.initial_position.dtype))
    if not isinstance(sites, dict):  # the flat model of a potential_fn has no sites
        return f"coordinate {coordinate}"
    for name, value in sites.items():
        if np.any(np.asarray(value) != 0):
            return f"site {name!r}"
    return f"coordinate {coordinate}"


def _kernel_base(base: MixtureBase, coverage_in_doubt: bool) -> MixtureBase:
    """The base the kernels run with: the fits with their masses and, only while the fit knows
    of target mass that no fit covers, the broad component, now the Gaussian with the moments of
    the fits' mixture (paper eq. 25) instead of the prior-wide one of the rounds.

    The broad component spans every mode found, so a chain near ``beta = 0`` reaches the
    regions between them, where uncovered modes lie. It costs precision: under the base its
    draws mostly land where the target is negligible, with ``Delta`` in the tens to thousands of
    nats, and the base weight ``w0`` (eq. 20) grows linearly with ``Delta``, so those rare draws
    carry most of the denominator of the ``log Z`` estimate, whose error bar, from the few seen,
    comes out too small. With a component on every mode the fits alone jump between the modes.
    """
    locs = np.asarray(base.component_locs[:-1], dtype=np.float64)
    trils = np.asarray(base.component_scale_trils[:-1], dtype=np.float64)
    log_weights = np.asarray(base.component_log_weights, dtype=np.float64)
    dtype = base.component_locs.dtype
    if not coverage_in_doubt:
        fit_log_weights = log_weights[:-1] - logsumexp(log_weights[:-1])
        return base._replace(
            component_locs=base.component_locs[:-1],
            component_scale_trils=base.component_scale_trils[:-1],
            component_log_weights=jnp.asarray(fit_log_weights, dtype),
        )
    masses = np.exp(log_weights[:-1] - logsumexp(log_weights[:-1]))
    loc, covariance = _moment_match(masses, locs, trils @ np.swapaxes(trils, -1, -2))
    return base._replace(
        component_locs=jnp.asarray(np.concatenate([locs, loc[None]]), dtype),
        component_scale_trils=jnp.asarray(
            np.concatenate([trils, _cholesky(covariance)[None]]), dtype
        ),
    )


def _prior_moment_base(
    rng_key, model, model_args, model_kwargs, flat_model, num_draws=2000, stacklevel=3
):
    """A base from the prior's moments on the flat space; ``log zeta`` by importance sampling.

    ``log zeta = log mean(exp(-phi(x) - log q(x)))`` with ``x ~ q``, an unbiased estimate of
    ``Z`` under the base ``q`` (only its log enters the kernels, which adapt it in warm-up).
    A failure to draw from the prior warns with ``stacklevel`` counted from
    :func:`_prior_positions`.
    """
    prior_key, draw_key = jax.random.split(rng_key)
    positions = _prior_positions(prior_key, flat_model, num_draws, stacklevel)
    if positions.shape[0] < 2 * flat_model.dimension + 2:
        raise FitsDivergedError(
            "Every variational fit of the base diverged and too few prior draws map to finite "
            "unconstrained values to fit a base from the prior; pass a base."
        )
    loc = positions.mean(0)
    covariance = np.atleast_2d(np.cov(positions, rowvar=False))
    scale_tril = np.linalg.cholesky(covariance + 1e-8 * np.eye(len(loc)) * np.trace(covariance))
    dtype = flat_model.initial_position.dtype
    base = GaussianBase(jnp.asarray(loc, dtype), jnp.asarray(scale_tril, dtype), jnp.asarray(0.0))
    draws = base.sample(draw_key, (num_draws,))
    log_weights = -jax.vmap(flat_model.potential_fn)(draws) - jax.vmap(base.potential)(draws)
    log_weights = np.asarray(log_weights, dtype=np.float64)
    log_weights = log_weights[np.isfinite(log_weights)]
    log_zeta = logsumexp(log_weights) - np.log(max(len(log_weights), 1))
    return base._replace(log_zeta=jnp.asarray(log_zeta, dtype))


def _bootstrap(rng_key, flat_model, base, rounds, num_warmup, num_samples, num_chains, issued):
    """Bootstrap rounds of ``method="gaussian"``: each is a short run of Gibbs continuous
    tempering with the current base, then the Gaussian with the run's target-weighted moments
    (eq. 21) and ``log zeta`` = its ``log Z`` estimate (eq. 20). A round whose run did not
    reach both ends adds a :class:`~numpyro_extras.BaseCoverageWarning` to ``issued``."""
    for round_key in jax.random.split(rng_key, rounds):
        base = _bootstrap_round(
            round_key, flat_model, base, num_warmup, num_samples, num_chains, issued
        )
    return base


def _bootstrap_round(rng_key, flat_model, base, num_warmup, num_samples, num_chains, issued):
    # The functional core with the Gibbs kernel's defaults (20 leapfrog steps, adapted step
    # size, mass and log zeta); no replica, whose draws the refit does not use. Each chain
    # carries on the key its init and transitions leave unused, as the kernel's chains do.
    algo, settings = hmc_settings(HMC, num_steps=20)
    settings = {"num_warmup": num_warmup, "algo": algo, "replica_moves": False, **settings}
    potential_fn = flat_model.potential_fn
    kernel = jax.vmap(build_gibbs_kernel(potential_fn, base, **settings))
    draw_key, chain_key = jax.random.split(rng_key)
    chain_keys = jax.random.split(chain_key, num_chains)
    states = jax.vmap(
        lambda position, key: gibbs_init(position, potential_fn, base, key, **settings)
    )(base.sample(draw_key, (num_chains,)), chain_keys)
    keys = jax.vmap(lambda key: jax.random.split(key, INIT_KEYS)[-1])(chain_keys)

    def transition(carry, _):
        states, keys = carry
        states, _ = kernel(keys, states)
        keys = jax.vmap(lambda key: jax.random.split(key, GIBBS_KEYS)[0])(keys)
        trace = (states.tempered.position, states.delta, states.log_zeta, states.beta)
        return (states, keys), trace

    _, trace = jax.lax.scan(transition, (states, keys), None, length=num_warmup + num_samples)
    draws, delta, log_zeta, beta = (
        np.asarray(values[num_warmup:], dtype=np.float64) for values in trace
    )
    unreached = unreached_ends(beta.T)
    if unreached:
        issued.append(
            BaseCoverageWarning(
                "fit_base: in a bootstrap round's tempering run "
                + "; ".join(unreached)
                + ", so the refitted log zeta may be far off; start from a better base (more "
                "num_steps) or use method='mixture'."
            )
        )
    log_w1 = log_zeta + np.asarray(log_target_weight(delta), dtype=np.float64)
    log_z = logsumexp(log_w1) - logsumexp(np.asarray(log_base_weight(delta), dtype=np.float64))
    return weighted_gaussian(
        draws.reshape(-1, flat_model.dimension), log_w1.ravel(), log_z, base.loc.dtype
    )


class KernelBaseFit(NamedTuple):
    """A base fitted by a kernel, and what the fit warned about its coverage.

    :param base: the fitted base.
    :param coverage_problems: the messages of its :class:`~numpyro_extras.BaseCoverageWarning`
        warnings.
    :param unfinished_search_modes: the modes found by a fit that was still finding more (its
        :class:`~numpyro_extras.ModeSearchWarning`), 0 if it was not.
    """

    base: GaussianBase | MixtureBase
    coverage_problems: tuple[str, ...]
    unfinished_search_modes: int


def fit_base_for_kernel(
    model, model_args, model_kwargs, seed, fit_kwargs, coverage_checked_by_run=False
) -> KernelBaseFit:
    """:func:`fit_base` as a kernel runs it in ``init``: with a fixed seed (every chain method,
    a traced key under ``pmap`` included, fits one base), and the fit's warnings passed on to
    the user and kept, so that a run's diagnostics can repeat that the base may miss modes.

    :param model: the NumPyro model.
    :param tuple model_args: its positional arguments.
    :param dict model_kwargs: its keyword arguments.
    :param int seed: the fit's seed.
    :param dict fit_kwargs: keyword arguments of :func:`fit_base` (``progress_bar`` among them).
    :param bool coverage_checked_by_run: the kernel's run itself checks whether the base missed
        modes (a stabilised replica exchange compares its two legs), so the fit's
        :class:`~numpyro_extras.BaseCoverageWarning` is kept but not passed on.
    :return: :class:`KernelBaseFit`.
    """
    fitted = fit_base_with_warnings(
        jax.random.PRNGKey(seed), model, model_args, model_kwargs, **fit_kwargs
    )
    coverage = [w for w in fitted.warnings if isinstance(w, BaseCoverageWarning)]
    for warning in fitted.warnings:
        if not (coverage_checked_by_run and warning in coverage):
            warnings.warn(warning, stacklevel=6)
    unfinished_search_modes = max(
        (w.num_modes for w in coverage if isinstance(w, ModeSearchWarning)), default=0
    )
    return KernelBaseFit(fitted.base, tuple(map(str, coverage)), unfinished_search_modes)
