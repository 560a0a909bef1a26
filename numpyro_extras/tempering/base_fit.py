"""The fit of a base density (:mod:`numpyro_extras.model.bases`) to a model by variational
inference, for continuous tempering.

Continuous tempering bridges a normalised base density ``exp(-psi)`` (inverse temperature 0) and
the target (inverse temperature 1). The closer the base is to the target and ``log zeta`` to
``log Z``, the flatter the marginal of the temperature and the better the chain mixes (paper
section 6, eqs. 23-25). :func:`fit_base` fits the base with Gaussian variational fits on the
model's flat potential (the objective of NumPyro's autoguides under ``Trace_ELBO``); the fits
themselves, and the other numerics that need no tempering run, are in
:mod:`numpyro_extras.model.base_fit`. Here: the rounds that search for modes, the importance
sampling of the mixture's masses, and the bootstrap rounds that run the Gibbs tempering chain.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from blackjax.smc.ess import ess as effective_sample_size
from numpyro.infer import HMC
from scipy.special import logsumexp

from numpyro_extras.model.base_fit import (
    check_fit_base_settings,
    defensive_component,
    drop_duplicates,
    elbo_moment_match,
    gaussian_log_densities,
    jittered_cholesky,
    local_optima,
    moment_match,
    numpy_rng,
    prior_and_uniform_starts,
    sample_prior_positions,
    starts_from_weighted_draws,
    uncovered_optima,
    variational_fitter,
    vectorized_potential,
)
from numpyro_extras.model.bases import (
    BaseCoverageWarning,
    GaussianBase,
    MixtureBase,
    ModeSearchWarning,
    weighted_gaussian,
)
from numpyro_extras.model.potential import flatten_model
from numpyro_extras.results import arviz_adapter
from numpyro_extras.results.evidence import UNRELIABLE_PARETO_K
from numpyro_extras.shell.compilation import quick_jit, split_key
from numpyro_extras.shell.kernel import hmc_settings
from numpyro_extras.shell.validation import check_model, check_model_arguments, check_rng_key
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
    "KernelBaseFit",
    "fit_base_for_kernel",
    "importance_masses",
]


# Fits of method="gaussian", of which the one with the highest ELBO is kept.
GAUSSIAN_STARTS = 4

# One compiled program instead of an eager operation per primitive at every call.
_importance_ess = quick_jit(effective_sample_size)


# The importance sampling of the masses lives here, not beside the fits in
# numpyro_extras.model.base_fit: it smooths its weights with ArviZ's PSIS from
# numpyro_extras.results, which itself imports numpyro_extras.model.
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
    log_components = gaussian_log_densities(positions, locs, scale_trils)
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
    defensive_loc, defensive_covariance = defensive_component(locs, covariances, prior_positions)
    all_locs = np.concatenate([locs, defensive_loc[None]])
    scale_trils = np.stack([jittered_cholesky(c) for c in [*covariances, defensive_covariance]])
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
    fit_gaussians = variational_fitter(flat_model, guide == "multivariate", settings)
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
    :param fit_gaussians: the fitter, from :func:`variational_fitter`.
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
        sample_prior_positions(prior_key, flat_model, num_draws=1000, stacklevel=4)
        if method == "mixture"
        else np.zeros((0, flat_model.dimension))
    )
    starts = prior_and_uniform_starts(
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
    loc, covariance, log_zeta = elbo_moment_match([max(fits, key=lambda fit: fit.elbo)])
    return GaussianBase(
        jnp.asarray(loc, dtype),
        jnp.asarray(jittered_cholesky(covariance), dtype),
        jnp.asarray(log_zeta, dtype),
    )


class _MixtureSearch(NamedTuple):
    """What the rounds of a ``"mixture"`` fit share.

    :param fit_gaussians: the fitter, from :func:`variational_fitter`.
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
    fits = drop_duplicates(fits, search.duplicate_tolerance, batched_potential)
    base, estimate = _mixture_base(
        round_keys[0], batched_potential, fits, prior_positions, settings, search.dtype
    )
    optima = local_optima(
        flat_model.potential_fn,
        prior_and_uniform_starts(
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
        if empty_rounds >= settled and not len(uncovered_optima(optima, base)):
            break  # no new region of target mass was found, nor is one known
    else:
        # Rounds that ran out while still finding modes leave coverage in doubt, unless every
        # local minimum found has a component on it.
        uncovered = optima.positions[uncovered_optima(optima, base)]
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
    uncovered = uncovered_optima(optima, base)[:num_dispersed]
    optima.tried[uncovered] = True
    starts = np.concatenate(
        [
            optima.positions[uncovered],
            starts_from_weighted_draws(
                estimate.positions[finite],
                log_scores[finite],
                np.asarray(base.component_locs, dtype=np.float64)[:-1],
                np.asarray(base.component_scale_trils, dtype=np.float64)[-1],
                search.num_starts - num_dispersed,
                rng,
            ),
            prior_and_uniform_starts(
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
    fits = drop_duplicates(fits + new_fits, search.duplicate_tolerance, search.batched_potential)
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
    loc, covariance = moment_match(masses, locs, trils @ np.swapaxes(trils, -1, -2))
    return base._replace(
        component_locs=jnp.asarray(np.concatenate([locs, loc[None]]), dtype),
        component_scale_trils=jnp.asarray(
            np.concatenate([trils, jittered_cholesky(covariance)[None]]), dtype
        ),
    )


def _prior_moment_base(
    rng_key, model, model_args, model_kwargs, flat_model, num_draws=2000, stacklevel=3
):
    """A base from the prior's moments on the flat space; ``log zeta`` by importance sampling.

    ``log zeta = log mean(exp(-phi(x) - log q(x)))`` with ``x ~ q``, an unbiased estimate of
    ``Z`` under the base ``q`` (only its log enters the kernels, which adapt it in warm-up).
    A failure to draw from the prior warns with ``stacklevel`` counted from
    :func:`sample_prior_positions`.
    """
    prior_key, draw_key = jax.random.split(rng_key)
    positions = sample_prior_positions(prior_key, flat_model, num_draws, stacklevel)
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
