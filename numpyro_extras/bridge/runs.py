"""``log Z`` from a finished run of any kernel over continuous latent sites (NUTS included) by
bridge sampling, and the checks that keep a run stuck in one mode from giving a confident
number."""

from __future__ import annotations

import math
import warnings
import weakref

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.diagnostics import split_gelman_rubin
from numpyro.infer import HMC
from scipy.special import logsumexp

from numpyro_extras.bridge.estimator import bridge_estimate
from numpyro_extras.bridge.proposals import component_log_densities
from numpyro_extras.model.base_fit import posterior_modes, same_basin, vectorized_potential
from numpyro_extras.model.potential import check_proper_prior, flatten_model, split_model
from numpyro_extras.results.evidence import Evidence
from numpyro_extras.results.prior_check import check_against_prior, prior_log_likelihoods_fn
from numpyro_extras.results.runs import MAX_DIVERGENT_FRACTION, divergence_problem
from numpyro_extras.shell.compilation import fold_in_key, quick_jit
from numpyro_extras.shell.validation import check_mcmc

__all__ = ["bridge_sampling", "missed_modes", "MISSED_MASS"]

# A mode the draws never visited whose Laplace mass is at least this share of the posterior's
# makes the estimate wrong by more than its error bar.
MISSED_MASS = 0.01
# A local maximum where the posterior density is this many times the proposal's is one the
# draws do not cover.
_UNCOVERED_RATIO = 10.0
# Chains whose split R-hat exceeds this sampled different parts of the posterior or have not
# converged (Vehtari et al. 2021, "Rank-normalization, folding, and localization").
MAX_RHAT = 1.01
# Prior draws for the check against importance sampling from the prior.
PRIOR_CHECK_DRAWS = 10_000


def _run_model(mcmc, model_args, model_kwargs):
    """The run's model and the arguments it ran with."""
    kernel = check_mcmc(mcmc, "bridge_sampling", finished=False).sampler
    model = getattr(kernel, "model", None)
    if model is None:
        raise TypeError(
            f"bridge_sampling needs a run of a kernel built on a NumPyro model; this "
            f"{type(kernel).__name__} was built on a potential_fn. For a potential, call "
            "nx.bridge_evidence(rng_key, potential_fn, draws) with the flat draws."
        )
    if mcmc.last_state is None:
        raise ValueError("bridge_sampling: run the MCMC first: `mcmc.run(rng_key, ...)`.")
    # NumPyro's MCMC keeps the arguments of its last run (ArviZ's from_numpyro reads them too).
    if model_args is None:
        model_args = getattr(mcmc, "_args", ())
    if model_kwargs is None:
        model_kwargs = getattr(mcmc, "_kwargs", {})
    return model, tuple(model_args), dict(model_kwargs)


def _flat_draws(flat_model, samples):
    """The run's draws of the latent sites on the flat unconstrained space, ``(C, S, D)``."""
    missing = [name for name in flat_model.latent_sites if name not in samples]
    if missing:
        raise ValueError(
            f"bridge_sampling: the run's samples have no draws of the latent sites {missing}; "
            "bridge sampling needs every latent site's draws."
        )
    latent = {name: jnp.asarray(samples[name]) for name in flat_model.latent_sites}
    chains, draws = next(iter(latent.values())).shape[:2]
    flat_values = {name: value.reshape((-1,) + value.shape[2:]) for name, value in latent.items()}
    flat = quick_jit(jax.vmap(flat_model.ravel_fn))(flat_values)
    return np.asarray(flat, dtype=np.float64).reshape(chains, draws, -1)


def missed_modes(rng_key, model, model_args, model_kwargs, flat_model, evidence, proposal):
    """Modes of the posterior that the draws behind ``evidence`` never visited, with the share
    of the posterior mass each holds (Laplace's approximation at the mode, normalised with
    ``evidence.log_z``).

    A mode counts as missed where the posterior density is more than 10 times ``proposal``'s
    (the Gaussian mixture fitted to the draws) and a barrier of the potential (a rise of more
    than one nat) separates it from every component of ``proposal``: a point in the tail of a
    mode the draws did visit is none. A missed mode as dense as a funnel's neck but as narrow
    holds almost none of the mass and is left out.

    :return: list of ``(position, mass share)``, largest first.
    """
    modes = posterior_modes(rng_key, model, model_args, model_kwargs, flat_model)
    if not len(modes.positions):
        return []
    log_posterior = -modes.potentials - evidence.log_z
    log_proposal = logsumexp(component_log_densities(proposal, modes.positions), axis=1)
    uncovered = np.flatnonzero(log_posterior - log_proposal > math.log(_UNCOVERED_RATIO))
    if not len(uncovered):
        return []
    locs = np.asarray(proposal.component_locs, dtype=np.float64)
    batched_potential = vectorized_potential(flat_model.potential_fn)
    separated = [
        index
        for index in uncovered
        if not same_basin(batched_potential, np.vstack([locs, modes.positions[index]]))[
            -1, :-1
        ].any()
    ]
    hessian = quick_jit(jax.hessian(flat_model.potential_fn))
    found = []
    for index in separated:
        curvature = np.asarray(hessian(jnp.asarray(modes.positions[index])), dtype=np.float64)
        sign, log_determinant = np.linalg.slogdet(0.5 * (curvature + curvature.T))
        if sign <= 0 or not np.isfinite(log_determinant):
            continue
        log_mass = (
            log_posterior[index]
            + 0.5 * flat_model.dimension * math.log(2 * math.pi)
            - 0.5 * log_determinant
        )
        if log_mass > math.log(MISSED_MASS):
            found.append((modes.positions[index], float(math.exp(min(log_mass, 0.0)))))
    return sorted(found, key=lambda mode: -mode[1])


def bridge_sampling(
    mcmc,
    model_args=None,
    model_kwargs=None,
    *,
    method="auto",
    check_modes=True,
    seed=0,
    warn=True,
    max_iterations=1000,
    tolerance=1e-10,
) -> Evidence:
    """``log Z``, the log marginal likelihood of the model, from the posterior draws of a
    finished run of any kernel over continuous latent sites: NUTS, HMC, the tempering and
    replica-exchange kernels (a second estimate beside their own), the Ai-sampler, VAE-SLMC.
    Discrete latent sites with finite supports are summed out of the potential by NumPyro's
    enumeration (as its NUTS does), so the draws of the continuous sites are bridged.

    The draws are mapped to the model's flat unconstrained space (where the potential includes
    the transforms' Jacobians) and handed to :func:`~numpyro_extras.bridge_evidence`: each
    chain's halves fit a proposal for each other, the optimal bridge iteration (Meng and Wong
    1996, eq. 4.1) over the other half, the error with the draws' autocorrelation (Gronau et al.
    2017, eq. 17). The estimate is checked, and each problem is a ``UserWarning`` and in
    ``Evidence.problems``: halves or chains whose own estimates disagree, an overlap of proposal
    and posterior carried by few draws, an iteration that did not converge, divergent
    transitions of the run (any of NUTS or HMC: their draws then under-represent the region they
    cannot enter), chains whose split R-hat exceeds ``MAX_RHAT`` on some site (they hold the
    posterior's modes in the wrong proportion, or have not converged), and (``check_modes``)
    modes the draws never visited: 64 minimisations of the potential from dispersed starts, the
    mass of each uncovered mode from Laplace's approximation, so that chains stuck together in
    one mode give a warning, not a confident number. Last, the estimate is compared with
    importance sampling from the prior
    (:func:`~numpyro_extras.results.prior_check.check_against_prior`, ``PRIOR_CHECK_DRAWS``
    draws): where the prior's estimate lies above it beyond their errors, the stderr is raised
    to the gap (and a large gap is a problem).

    A second call on the same finished run with the same arguments and settings (as
    :func:`~numpyro_extras.compare` makes after a user's call) returns the estimate of the
    first, and warns again; a new ``mcmc.run`` is estimated afresh.

    :param mcmc: a finished :class:`~numpyro.infer.MCMC` run of a kernel built on a model.
    :param tuple model_args: the model's arguments (default: those of the run).
    :param dict model_kwargs: its keyword arguments (default: those of the run).
    :param str method: the proposal, as :func:`~numpyro_extras.bridge_evidence`'s.
    :param bool check_modes: search for modes the draws missed (a few seconds).
    :param int seed: seed of the proposal's draws and the mode search.
    :param bool warn: emit the problems found as a ``UserWarning``.
    :param int max_iterations: most iterations of the bridge scheme.
    :param float tolerance: relative change of ``Z`` that ends the iteration.
    :return: :class:`~numpyro_extras.Evidence`.
    :raises TypeError: for a run built on a ``potential_fn``.
    :raises ValueError: for a model with an improper prior, discrete latent sites that cannot
        be summed out (an infinite support) or no continuous site, a run not yet made, or too
        few draws.

    **Example:**

    .. code-block:: python

        mcmc = MCMC(NUTS(model), num_warmup=1000, num_samples=2000, num_chains=4)
        mcmc.run(jax.random.PRNGKey(0), x, y)
        evidence = nx.bridge_sampling(mcmc)
        print(f"log Z = {evidence.log_z:.3f} +- {evidence.stderr:.3f}")
    """
    model, model_args, model_kwargs = _run_model(mcmc, model_args, model_kwargs)
    check_proper_prior(model, model_args, model_kwargs, "nx.bridge_sampling")
    settings = (method, check_modes, seed, max_iterations, tolerance)
    cached = _CACHE.get(mcmc)
    if cached is not None and _same_run(cached, mcmc, model_args, model_kwargs, settings):
        evidence = cached[-1]
    else:
        evidence = _bridge_run(mcmc, model, model_args, model_kwargs, *settings)
        _CACHE[mcmc] = (mcmc.last_state, model_args, model_kwargs, settings, evidence)
    if warn and evidence.problems:
        warnings.warn(
            "bridge_sampling: the estimate may be unreliable: "
            + "; ".join(evidence.problems)
            + ".",
            stacklevel=2,
        )
    return evidence


# A finished run's estimate by its MCMC, so that a second call on the same run with the same
# settings (nx.compare after nx.bridge_sampling) returns it instead of computing it again.
_CACHE = weakref.WeakKeyDictionary()


def _same_run(cached, mcmc, model_args, model_kwargs, settings):
    """Whether ``cached`` is the estimate of this run (its last state, the very same argument
    objects) with these settings."""
    last_state, cached_args, cached_kwargs, cached_settings, _ = cached
    return (
        last_state is mcmc.last_state
        and cached_settings == settings
        and len(cached_args) == len(model_args)
        and all(a is b for a, b in zip(cached_args, model_args, strict=True))
        and cached_kwargs.keys() == model_kwargs.keys()
        and all(cached_kwargs[name] is model_kwargs[name] for name in model_kwargs)
    )


def _bridge_run(
    mcmc, model, model_args, model_kwargs, method, check_modes, seed, max_iterations, tolerance
):
    """The estimate of :func:`bridge_sampling` and its checks, its problems not yet warned of."""
    flatten_key, evidence_key, modes_key = jax.random.split(jax.random.PRNGKey(seed), 3)
    flat_model = flatten_model(
        flatten_key,
        model,
        model_args,
        model_kwargs,
        kernel_name="bridge_sampling",
        discrete_advice=(
            "Bridge sampling sums discrete sites with finite supports out of the potential "
            "(NumPyro's enumeration), and needs continuous sites beside them; estimate log Z of "
            "this model with nx.ReplicaExchange(model, inner_kernel=nx.ACS)."
        ),
        sum_out_discrete=True,
    )
    draws = _flat_draws(flat_model, mcmc.get_samples(group_by_chain=True))
    evidence, terms = bridge_estimate(
        evidence_key,
        flat_model.potential_fn,
        draws,
        method=method,
        max_iterations=max_iterations,
        tolerance=tolerance,
    )
    problems = list(evidence.problems)
    diverged = _divergences_problem(mcmc)
    if diverged:
        problems.append(diverged)
    unmixed = _rhat_problem(mcmc, flat_model.latent_sites)
    if unmixed:
        problems.append(unmixed)
    if math.isfinite(evidence.log_z):
        # Its own key, so that the other checks' draws are those of a run without it.
        prior_key = fold_in_key(jax.random.PRNGKey(seed), 1)
        split = split_model(prior_key, model, model_args, model_kwargs)
        if split.log_likelihood_fn is not None:
            checked, missed_mass = check_against_prior(
                evidence,
                prior_log_likelihoods_fn(split)(prior_key, PRIOR_CHECK_DRAWS),
                estimate_name="the bridge estimate's",
                cause=(
                    "the draws miss posterior mass that the prior reaches (a mode no chain "
                    "visited, or a region where the posterior's scale shrinks, as in the neck "
                    "of a centred hierarchical model's funnel, which NUTS does not enter), so "
                    "the estimate is low; run a kernel that crosses between modes "
                    "(nx.ReplicaExchange) and bridge its draws, or reparameterise a funnel "
                    "(non-centred)"
                ),
            )
            evidence = evidence._replace(stderr=checked.stderr)
            if missed_mass:
                problems.append(missed_mass)
    if check_modes and math.isfinite(evidence.log_z):
        # The proposal, fitted to the draws, stands for the region the chains covered.
        missed = missed_modes(
            modes_key, model, model_args, model_kwargs, flat_model, evidence, terms.fitted
        )
        if missed:
            shares = ", ".join(f"{share:.2g}" for _, share in missed[:3])
            where = _site_values(flat_model, missed[0][0])
            problems.append(
                f"the posterior has {len(missed)} mode{'s' * (len(missed) > 1)} that the "
                f"draws never visited, holding about {shares} of its mass by Laplace's "
                f"approximation (the largest at {where}): log Z counts only the mass the "
                "chains saw, so it is too low by about that share; run a kernel that crosses "
                "between modes (nx.ReplicaExchange) and bridge its draws"
            )
    return evidence._replace(problems=tuple(problems))


def _divergences_problem(mcmc):
    """The sentence reporting the run's divergent transitions, or ``None``.

    Where NUTS or HMC diverges it cannot enter the region (a funnel's neck): the draws
    under-represent it, and an evidence bridged from them is low by the mass they miss though
    the chains agree. Any divergence of theirs is reported (Betancourt 2017, "A conceptual
    introduction to Hamiltonian Monte Carlo"); the other kernels' moves, of tempered chains
    among them, above 1%.
    """
    diverging = mcmc.get_extra_fields().get("diverging")
    if diverging is None:
        return None
    max_fraction = 0.0 if isinstance(mcmc.sampler, HMC) else MAX_DIVERGENT_FRACTION
    problem = divergence_problem(diverging, max_fraction=max_fraction)
    if problem is None:
        return None
    return problem + (
        ", or run longer with a higher target_accept_prob: the draws under-represent the "
        "region the sampler cannot enter, so log Z bridged from them is biased, usually low"
    )


def _rhat_problem(mcmc, sites):
    """The sentence reporting chains that disagree by their split R-hat, or ``None``."""
    samples = mcmc.get_samples(group_by_chain=True)
    rhats = {
        name: float(np.max(split_gelman_rubin(np.asarray(samples[name], dtype=np.float64))))
        for name in sites
        if name in samples and np.shape(samples[name])[1] >= 4
    }
    if not rhats:
        return None
    name = max(rhats, key=lambda site: -math.inf if math.isnan(rhats[site]) else rhats[site])
    if rhats[name] <= MAX_RHAT:
        return None
    return (
        f"the chains disagree: the split R-hat of '{name}' is {rhats[name]:.3f} (above "
        f"{MAX_RHAT}), so they sampled different parts of the posterior (a mode some chains "
        "never visited, say) or have not converged, and their pooled draws may not represent "
        "it; run longer, or a kernel that crosses between modes (nx.ReplicaExchange), and "
        "bridge its draws"
    )


def _site_values(flat_model, position):
    """``site = value`` of a flat point's constrained values, shortened for a message."""
    values = flat_model.constrain_fn(flat_model.unravel_fn(jnp.asarray(position)))
    parts = []
    for name in flat_model.latent_sites:
        value = np.round(np.asarray(values[name], dtype=np.float64), 3)
        text = str(value.tolist()) if value.size <= 4 else f"{value.ravel()[:4].tolist()}..."
        parts.append(f"{name} = {text}")
    return ", ".join(parts)
