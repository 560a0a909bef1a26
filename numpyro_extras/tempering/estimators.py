"""Estimators from continuous tempering draws: ``log Z`` (eq. 20), target (eq. 21) and base (eq. 22)
expectations, ArviZ export, mixing diagnostics and warnings, plots and the base refit.

The kernels' sample field is an exact posterior chain (the target replica), so
``mcmc.get_samples()`` needs no weights. The tempered chain, in the extra fields
``tempered_z``, ``beta``, ``delta`` and ``log_zeta``, gives ``log Z`` and Rao-Blackwellised target
expectations: draw ``t`` of chain ``c`` has target weight ``zeta_c w1(Delta_t)`` and base weight
``w0(Delta_t)``, ``w1 = p(beta = 1 | x)`` and ``w0 = p(beta = 0 | x)``. Since
``E_c[w1] = Z / (C_c zeta_c)`` and ``E_c[w0] = 1 / C_c`` (eq. 19), sums pooled over chains give
``Z`` even when each chain adapted its own ``zeta_c`` during warm-up.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
from blackjax.smc.ess import ess as effective_sample_size
from blackjax.smc.resampling import systematic
from jax.flatten_util import ravel_pytree
from scipy.special import logsumexp
from scipy.stats import chi2

from numpyro_extras.bases import GaussianBase, weighted_gaussian
from numpyro_extras.evidence import Evidence
from numpyro_extras.tempering.chains import NEAR_BASE, NEAR_TARGET
from numpyro_extras.tempering.kernels import GibbsContinuousTempering, JointContinuousTempering
from numpyro_extras.tempering.weights import log_base_weight, log_target_weight

__all__ = [
    "tempering_log_normalizer",
    "log_marginal_likelihood",
    "target_log_weights",
    "tempered_samples",
    "posterior_samples",
    "to_inference_data",
    "BaseMomentCheck",
    "base_moment_check",
    "TemperingDiagnostics",
    "tempering_diagnostics",
    "plot_tempering",
    "refit_base",
]

# Thresholds of the run checks behind the warnings of log_marginal_likelihood.
MIN_ROUND_TRIPS = 2
MAX_DIVERGENT_FRACTION = 0.01
MIN_TARGET_ESS = 100.0
MAX_RHAT = 1.05
CHAIN_AGREEMENT_LEVEL = 1e-3
DISAGREEMENT_FACTOR = 1.5


def _as_chains(values):
    values = np.asarray(values, dtype=np.float64)
    return values[None] if values.ndim == 1 else values


def _log_mean_and_influence(log_values):
    """``log mean(v)`` and the influence ``v / mean(v)`` of each value."""
    log_mean = logsumexp(log_values) - np.log(log_values.size)
    return log_mean, np.exp(log_values - log_mean)


def _ratio_estimate(log_w1, log_w0):
    """``log(mean w1 / mean w0)`` and its delta-method standard error and ESS (ArviZ MCSE)."""
    log_mean_w1, influence_w1 = _log_mean_and_influence(log_w1)
    log_mean_w0, influence_w0 = _log_mean_and_influence(log_w0)
    influence = influence_w1 - influence_w0
    if log_w1.shape[-1] >= 4 and np.std(influence) > 0:
        stderr = float(az.mcse(influence, method="mean"))
        ess = float(az.ess(influence, method="mean"))
    else:
        stderr, ess = float("nan"), float("nan")
    return float(log_mean_w1 - log_mean_w0), stderr, ess


class _ChainAgreement(NamedTuple):
    log_z: np.ndarray
    stderr: np.ndarray
    p_value: float
    between_stderr: float


def _chain_agreement(log_w1, log_w0) -> _ChainAgreement | None:
    """Per-chain ``log Z`` estimates and a chi-square test that they agree."""
    num_chains = log_w1.shape[0]
    if num_chains < 2 or log_w1.shape[1] < 4:
        return None
    estimates = [_ratio_estimate(log_w1[c : c + 1], log_w0[c : c + 1]) for c in range(num_chains)]
    log_z = np.array([estimate[0] for estimate in estimates])
    stderr = np.array([estimate[1] for estimate in estimates])
    if not np.all(np.isfinite(stderr) & (stderr > 0)):
        return _ChainAgreement(log_z, stderr, 0.0, float(np.std(log_z, ddof=1) / num_chains**0.5))
    precision = stderr**-2
    pooled = np.sum(precision * log_z) / np.sum(precision)
    statistic = float(np.sum(precision * (log_z - pooled) ** 2))
    p_value = float(chi2.sf(statistic, num_chains - 1))
    return _ChainAgreement(log_z, stderr, p_value, float(np.std(log_z, ddof=1) / num_chains**0.5))


def tempering_log_normalizer(delta, log_zeta) -> Evidence:
    """``log Z`` from the ``Delta`` of tempered draws (paper eq. 20, in log space).

    ``log Z = logsumexp(log zeta_c + log w1) - logsumexp(log w0)``, pooled over chains. The
    standard error is the delta-method error of the ratio: the Monte Carlo standard error (ArviZ,
    which accounts for autocorrelation and between-chain spread) of the mean of
    ``zeta_c w1 / mean(zeta w1) - w0 / mean(w0)``. When the chains' own estimates disagree
    beyond their errors (a chi-square test at level 0.001), the standard error is widened to the
    spread between chains.

    :param delta: ``Delta`` of every draw, shape ``(num_chains, num_draws)`` or ``(num_draws,)``.
    :param log_zeta: ``log zeta``: a scalar, one value per chain (shape ``(num_chains,)``) or
        one per draw (the shape of ``delta``).
    :return: :class:`~numpyro_extras.Evidence` with ``log_weights`` = ``log zeta_c + log w1`` per
        draw.

    **Example:**

    .. code-block:: python

        tempering_log_normalizer(np.zeros((4, 100)), log_zeta=1.5).log_z  # 1.5
    """
    delta = _as_chains(delta)
    if not np.all(np.isfinite(delta)):
        raise ValueError("Delta contains non-finite values; the draws cannot give log Z.")
    log_zeta = np.asarray(log_zeta, dtype=np.float64)
    if log_zeta.ndim == 1 and log_zeta.shape[0] == delta.shape[0] and delta.shape[0] > 1:
        log_zeta = log_zeta[:, None]
    log_zeta = np.broadcast_to(log_zeta.reshape(log_zeta.shape[-delta.ndim :]), delta.shape)
    log_w1 = log_zeta + np.asarray(log_target_weight(delta), dtype=np.float64)
    log_w0 = np.asarray(log_base_weight(delta), dtype=np.float64)
    log_z, stderr, ess = _ratio_estimate(log_w1, log_w0)
    agreement = _chain_agreement(log_w1, log_w0)
    if _chains_disagree(agreement, stderr):
        stderr = agreement.between_stderr
    return Evidence(log_z=log_z, stderr=stderr, log_weights=log_w1, ess=ess)


def _chains_disagree(agreement: _ChainAgreement | None, stderr) -> bool:
    """The chains' ``log Z`` estimates differ beyond their own errors (chi-square test) AND by
    enough to matter: their spread gives a standard error of the pooled estimate more than
    1.5 times the reported one. The second condition keeps single-chain errors, which are
    noisy for a ratio estimator, from raising alarms on good runs with many chains."""
    if agreement is None:
        return False
    significant = agreement.p_value < CHAIN_AGREEMENT_LEVEL
    return bool(significant and not agreement.between_stderr <= DISAGREEMENT_FACTOR * stderr)


_KERNELS = (JointContinuousTempering, GibbsContinuousTempering)


def _kernel_of(mcmc):
    kernel = mcmc.sampler
    if not isinstance(kernel, _KERNELS):
        raise TypeError(
            "Expected an MCMC run with nx.JointContinuousTempering or "
            f"nx.GibbsContinuousTempering, got {type(kernel).__name__}."
        )
    if kernel.base is None or mcmc.last_state is None:
        raise ValueError("Run the MCMC first: `mcmc.run(rng_key, ...)`.")
    return kernel


def _field(mcmc, name):
    fields = mcmc.get_extra_fields(group_by_chain=True)
    if name not in fields:
        raise ValueError(
            f"The run did not collect {name!r}; keep the kernel's default fields "
            "(do not exclude them with extra_fields)."
        )
    return fields[name]


def _deltas(mcmc):
    return np.asarray(_field(mcmc, "delta"), dtype=np.float64)


def _log_target_weights(mcmc):
    """``log zeta_c + log w1`` per tempered draw, shape ``(num_chains, num_draws)``."""
    log_zeta = np.asarray(_field(mcmc, "log_zeta"), dtype=np.float64)
    return log_zeta + np.asarray(log_target_weight(_deltas(mcmc)), dtype=np.float64)


def _evidence(mcmc) -> Evidence:
    return tempering_log_normalizer(_deltas(mcmc), np.asarray(_field(mcmc, "log_zeta")))


def log_marginal_likelihood(mcmc, check_base=True, warn=True) -> Evidence:
    """``log Z`` (log marginal likelihood of a model) with its standard error from a tempering run.

    The run is checked first (:func:`tempering_diagnostics`); each problem found (a chain that
    never reaches one end of ``beta``, few round trips, a failed base-moment check, divergent
    transitions, a tiny effective sample size, chains that disagree) is reported in a
    ``UserWarning`` that says why the estimate may be unreliable.

    :param mcmc: a :class:`~numpyro.infer.MCMC` run with a continuous tempering kernel.
    :param bool check_base: include the base-moment check (eq. 22) among the checks.
    :param bool warn: emit the warnings.
    :return: :class:`~numpyro_extras.Evidence` (``log_z``, ``stderr``, ``log_weights``, ``ess``).

    **Example:**

    .. code-block:: python

        mcmc = MCMC(nx.JointContinuousTempering(model), num_warmup=1000, num_samples=2000)
        mcmc.run(jax.random.PRNGKey(0), x, y)
        nx.log_marginal_likelihood(mcmc)  # Evidence(log_z=..., stderr=...)
    """
    _kernel_of(mcmc)
    if warn:
        diagnostics = tempering_diagnostics(mcmc, check_base=check_base)
        if diagnostics.problems:
            warnings.warn(
                "The continuous tempering run shows trouble, so log Z and its standard error "
                "may be unreliable: " + "; ".join(diagnostics.problems) + ".",
                stacklevel=2,
            )
    return _evidence(mcmc)


def target_log_weights(mcmc):
    """Self-normalised log weights of every tempered draw for target expectations (eq. 21).

    :return: array ``(num_chains, num_draws)`` whose exponentials sum to 1 over all chains,
        aligned with :func:`tempered_samples`.
    """
    _kernel_of(mcmc)
    log_weights = _log_target_weights(mcmc)
    return log_weights - logsumexp(log_weights)


def _tempered_unconstrained(mcmc, group_by_chain):
    return _field(mcmc, "tempered_z") if group_by_chain else mcmc.get_extra_fields()["tempered_z"]


def tempered_samples(mcmc, group_by_chain=False):
    """The tempered chain's draws (every inverse temperature), constrained, by site name.

    They are not posterior draws; weighted by :func:`target_log_weights` they give target
    expectations (eq. 21).

    :param mcmc: a run with a continuous tempering kernel.
    :param bool group_by_chain: keep a leading chain dimension.
    :return: dict of arrays (a flat array for a ``potential_fn`` kernel).
    """
    kernel = _kernel_of(mcmc)
    draws = _tempered_unconstrained(mcmc, group_by_chain)
    if kernel.model is None:
        return np.asarray(draws)
    constrain = kernel.flat_model.constrain_fn
    if group_by_chain:
        constrain = jax.vmap(constrain)
    return jax.tree.map(np.asarray, jax.vmap(constrain)(draws))


def _numpy_rng(rng_key):
    return np.random.default_rng(np.asarray(jax.random.key_data(rng_key)).ravel().tolist())


def posterior_samples(mcmc, rng_key, num_samples=None):
    """Equally weighted posterior draws resampled from the tempered chain (eq. 21).

    ``mcmc.get_samples()`` already holds exact posterior draws; this resamples ALL tempered
    draws, pooled over chains, with their target weights by systematic resampling, which often
    uses more of the run.

    :param mcmc: a run with a continuous tempering kernel.
    :param jax.random.PRNGKey rng_key: key for the resampling.
    :param int num_samples: number of draws; default the number of tempered draws.
    :return: dict of arrays with leading dimension ``num_samples`` (a flat array for a
        ``potential_fn`` kernel), ready for :class:`~numpyro.infer.Predictive`.

    **Example:**

    .. code-block:: python

        draws = nx.posterior_samples(mcmc, jax.random.PRNGKey(1))
        Predictive(model, draws)(jax.random.PRNGKey(2), x)
    """
    probabilities = np.exp(target_log_weights(mcmc)).ravel()
    num_samples = probabilities.size if num_samples is None else int(num_samples)
    indices = np.asarray(systematic(rng_key, jnp.asarray(probabilities), num_samples))
    # Systematic resampling returns sorted indices; shuffle so that slices are not biased.
    indices = _numpy_rng(jax.random.fold_in(rng_key, 1)).permutation(indices)
    return jax.tree.map(lambda values: np.asarray(values)[indices], tempered_samples(mcmc))


def to_inference_data(mcmc, rng_key=None):
    """ArviZ ``InferenceData`` of a tempering run, with the tempered chain beside the posterior.

    ``posterior``, ``log_likelihood`` and ``observed_data`` are those of
    :func:`arviz.from_numpyro` (the kernel's posterior draws), so ``az.summary``, ``az.loo``,
    ``az.waic`` and ``az.compare`` work as after NUTS. ``sample_stats`` holds, per iteration, the
    tempered chain's ``beta``, ``delta``, ``log_zeta``, ``log_weight`` (log target weight,
    self-normalised per chain), ``log_base_weight`` (``log w0``), ``swap_accept_prob`` and any
    other collected field; ``attrs`` records ``log_marginal_likelihood`` and its ``stderr``.

    :param mcmc: a run with a continuous tempering kernel.
    :param rng_key: unused; kept so that existing calls keep working.
    :return: :class:`arviz.InferenceData`.
    """
    kernel = _kernel_of(mcmc)
    if kernel.model is None:
        idata = az.from_dict(
            posterior={"x": np.asarray(mcmc.get_samples(group_by_chain=True))},
            sample_stats={
                name: np.asarray(value)
                for name, value in mcmc.get_extra_fields(group_by_chain=True).items()
                if name != "tempered_z"
            },
        )
    else:
        idata = az.from_numpyro(mcmc)
    log_weights = _log_target_weights(mcmc)
    extra = {
        "log_weight": log_weights - logsumexp(log_weights, axis=1, keepdims=True),
        "log_base_weight": np.asarray(log_base_weight(_deltas(mcmc)), dtype=np.float64),
    }
    stats = idata.sample_stats
    for name, values in extra.items():
        stats[name] = (("chain", "draw"), values)
    if "diverging" in stats:
        stats["diverging"] = stats["diverging"].astype(bool)
    evidence = _evidence(mcmc)
    idata.attrs.update(
        {
            "log_marginal_likelihood": evidence.log_z,
            "log_marginal_likelihood_stderr": evidence.stderr,
            "sampler": type(kernel).__name__,
        }
    )
    return idata


class BaseMomentCheck(NamedTuple):
    """The necessary convergence check of paper eq. 22: base-weighted draws reproduce the base.

    :param mean_error: ``max_i |E_w0[x_i] - loc_i| / sd_i`` in base standard deviations.
    :param variance_ratio: the weighted variances over the base's, per coordinate.
    :param ess: effective number of base-weighted draws (Kish).
    :param passed: every coordinate's weighted mean within 0.5 base standard deviations of the
        base's or within 4 Monte Carlo standard errors of it, and every variance ratio in
        [0.5, 2] or the variance within 4 Monte Carlo standard errors of the base's.
    """

    mean_error: float
    variance_ratio: np.ndarray
    ess: float
    passed: bool


def _unconstrained_draws(mcmc, kernel):
    """The tempered draws as flat unconstrained vectors, ``(num_draws, D)``."""
    draws = mcmc.get_extra_fields()["tempered_z"]
    if kernel.model is None:
        return np.asarray(draws, dtype=np.float64)
    return np.asarray(jax.vmap(lambda values: ravel_pytree(values)[0])(draws), dtype=np.float64)


def base_moment_check(mcmc, warn=True) -> BaseMomentCheck:
    """Compare the ``w0``-weighted moments of the tempered draws with the base's (paper eq. 22).

    Passing is necessary, not sufficient, for convergence: a chain that never visits ``beta``
    near 0 fails it, and so does a run whose base was not normalised.

    :param mcmc: a run with a continuous tempering kernel.
    :param bool warn: emit a ``UserWarning`` when the check fails.
    :return: :class:`BaseMomentCheck`.
    """
    kernel = _kernel_of(mcmc)
    draws = _unconstrained_draws(mcmc, kernel)
    log_w0 = np.asarray(log_base_weight(_deltas(mcmc)), dtype=np.float64).ravel()
    weights = np.exp(log_w0 - logsumexp(log_w0))
    mean = weights @ draws
    squared_deviations = (draws - mean) ** 2
    variance = weights @ squared_deviations
    base_variance = np.diagonal(np.asarray(kernel.base.covariance, dtype=np.float64))
    base_loc = np.asarray(kernel.base.loc, dtype=np.float64)
    mean_errors = np.abs(mean - base_loc) / np.sqrt(base_variance)
    mean_error = float(np.max(mean_errors))
    variance_ratio = variance / base_variance
    ess = float(effective_sample_size(jnp.asarray(log_w0)))
    # Monte Carlo standard errors of the weighted moments: a broad base component (a mixture
    # base's defensive one) is visited by few draws, and its share of the variance is then
    # uncertain without anything being wrong.
    mean_stderr = np.sqrt(weights**2 @ squared_deviations)
    variance_stderr = np.sqrt(weights**2 @ (squared_deviations - variance) ** 2)
    mean_off = (mean_errors >= 0.5) & (np.abs(mean - base_loc) > 4 * mean_stderr)
    variance_off = ((variance_ratio <= 0.5) | (variance_ratio >= 2.0)) & (
        np.abs(variance - base_variance) > 4 * variance_stderr
    )
    passed = not bool(np.any(mean_off) or np.any(variance_off))
    if warn and not passed:
        warnings.warn(
            "Continuous tempering base-moment check (eq. 22) failed: "
            + _base_check_problem(mean_error, variance_ratio, ess)
            + ". The chains have not converged or rarely reach beta near 0; run longer or "
            "improve the base.",
            stacklevel=2,
        )
    return BaseMomentCheck(mean_error, variance_ratio, ess, passed)


def _base_check_problem(mean_error, variance_ratio, ess):
    return (
        f"the base-weighted draws miss the base mean by {mean_error:.2f} sd, variance ratios in "
        f"[{variance_ratio.min():.2f}, {variance_ratio.max():.2f}], ESS {ess:.0f}"
    )


def refit_base(mcmc) -> GaussianBase:
    """One bootstrap round: a new base from a tempering run.

    The new base is the Gaussian with the run's target-weighted (eq. 21) mean and covariance on
    the unconstrained space, and ``log zeta`` is the run's ``log Z`` estimate (eq. 20).
    Rerunning with it flattens the temperature marginal, like simulated tempering's weight
    iteration.

    :param mcmc: a run with a continuous tempering kernel.
    :return: :class:`~numpyro_extras.GaussianBase`.

    **Example:**

    .. code-block:: python

        mcmc.run(rng_key, data)
        better = MCMC(nx.GibbsContinuousTempering(model, base=nx.refit_base(mcmc)), ...)
    """
    kernel = _kernel_of(mcmc)
    return weighted_gaussian(
        _unconstrained_draws(mcmc, kernel),
        target_log_weights(mcmc).ravel(),
        _evidence(mcmc).log_z,
        kernel.base.loc.dtype,
    )


class TemperingDiagnostics(NamedTuple):
    """How a continuous tempering run mixed, per chain, and what looks wrong.

    :param fraction_near_base: per chain, the fraction of draws with ``beta < 0.1``.
    :param fraction_near_target: per chain, the fraction with ``beta > 0.9``.
    :param round_trips: per chain, moves from the base end to the target end and back.
    :param divergences: per chain, the number of divergent transitions.
    :param swap_accept_rate: per chain, the mean acceptance of the target replica's swaps.
    :param target_ess: Kish effective sample size of the pooled target weights.
    :param log_z_ess: ArviZ effective sample size behind the ``log Z`` estimate.
    :param posterior_ess: the smallest ArviZ bulk ESS of the posterior draws (the replica) over
        every latent coordinate.
    :param posterior_rhat: the largest R-hat of the posterior draws over every coordinate.
    :param chain_log_z: per chain, its own ``log Z`` estimate.
    :param chain_agreement_p_value: p-value of the chi-square test that the chains' ``log Z``
        estimates agree (NaN with one chain).
    :param base_moment_check: :class:`BaseMomentCheck` (``None`` if not run).
    :param problems: one sentence per problem found; empty for a run that looks fine.
    """

    fraction_near_base: np.ndarray
    fraction_near_target: np.ndarray
    round_trips: np.ndarray
    divergences: np.ndarray
    swap_accept_rate: np.ndarray
    target_ess: float
    log_z_ess: float
    posterior_ess: float
    posterior_rhat: float
    chain_log_z: np.ndarray
    chain_agreement_p_value: float
    base_moment_check: BaseMomentCheck | None
    problems: tuple[str, ...]

    def __getitem__(self, key):
        # The diagnostics used to be a dict: keep `diagnostics["round_trips"]` working.
        if isinstance(key, str):
            return getattr(self, key)
        return tuple.__getitem__(self, key)


def _round_trips(beta):
    trips = []
    for chain_beta in beta:
        ends = np.where(chain_beta < NEAR_BASE, 0, np.where(chain_beta > NEAR_TARGET, 1, -1))
        ends = ends[ends >= 0]
        trips.append(int(np.count_nonzero(np.diff(ends) != 0) // 2))
    return np.array(trips)


def _posterior_convergence(mcmc):
    """Smallest bulk ESS and largest R-hat of the replica draws over every coordinate."""
    samples = mcmc.get_samples(group_by_chain=True)
    leaves = [np.asarray(leaf, dtype=np.float64) for leaf in jax.tree.leaves(samples)]
    columns = [leaf.reshape(leaf.shape[:2] + (-1,)) for leaf in leaves if leaf.ndim >= 2]
    if not columns:
        return float("nan"), float("nan")
    draws = np.concatenate(columns, axis=-1)
    draws = draws[..., np.std(draws, axis=(0, 1)) > 0]
    if draws.shape[1] < 4 or draws.shape[-1] == 0:
        return float("nan"), float("nan")
    ess = min(float(az.ess(draws[..., i], method="bulk")) for i in range(draws.shape[-1]))
    if draws.shape[0] < 2:
        return ess, float("nan")
    rhat = max(float(az.rhat(draws[..., i])) for i in range(draws.shape[-1]))
    return ess, rhat


def tempering_diagnostics(mcmc, check_base=True) -> TemperingDiagnostics:
    """How well the run mixed, and every reason to doubt its ``log Z`` or posterior.

    Problems reported: a chain that never reached ``beta < 0.1`` or ``beta > 0.9``; fewer than
    2 round trips in a chain; divergent transitions above 1%; a target ESS below 100; chains
    whose ``log Z`` estimates disagree beyond their errors (p < 0.001); posterior draws with
    R-hat above 1.05; a failed base-moment check (eq. 22); a base fit that was still finding new
    modes when it stopped (see :func:`~numpyro_extras.fit_base`).

    :param mcmc: a run with a continuous tempering kernel.
    :param bool check_base: run the base-moment check.
    :return: :class:`TemperingDiagnostics`.

    **Example:**

    .. code-block:: python

        diagnostics = nx.tempering_diagnostics(mcmc)
        diagnostics.round_trips, diagnostics.problems
    """
    kernel = _kernel_of(mcmc)
    beta = np.asarray(_field(mcmc, "beta"), dtype=np.float64)
    fraction_near_base = np.mean(beta < NEAR_BASE, axis=1)
    fraction_near_target = np.mean(beta > NEAR_TARGET, axis=1)
    round_trips = _round_trips(beta)
    fields = mcmc.get_extra_fields(group_by_chain=True)
    diverging = np.asarray(fields.get("diverging", np.zeros_like(beta)), dtype=bool)
    divergences = diverging.sum(axis=1)
    swap_accept_rate = np.mean(
        np.asarray(fields.get("swap_accept_prob", np.full_like(beta, np.nan))), axis=1
    )
    log_weights = _log_target_weights(mcmc)
    target_ess = float(effective_sample_size(jnp.asarray(log_weights.ravel())))
    log_w0 = np.asarray(log_base_weight(_deltas(mcmc)), dtype=np.float64)
    _, log_z_stderr, log_z_ess = _ratio_estimate(log_weights, log_w0)
    agreement = _chain_agreement(log_weights, log_w0)
    posterior_ess, posterior_rhat = _posterior_convergence(mcmc)
    check = base_moment_check(mcmc, warn=False) if check_base else None

    problems = [problem.removeprefix("fit_base: ") for problem in kernel.base_fit_problems]
    chains = np.arange(beta.shape[0])
    never_base = chains[fraction_near_base == 0]
    never_target = chains[fraction_near_target == 0]
    if never_base.size:
        problems.append(f"chains {never_base.tolist()} never reached beta < {NEAR_BASE}")
    if never_target.size:
        problems.append(f"chains {never_target.tolist()} never reached beta > {NEAR_TARGET}")
    few_trips = chains[round_trips < MIN_ROUND_TRIPS]
    if few_trips.size and not (never_base.size or never_target.size):
        problems.append(
            f"chains {few_trips.tolist()} made fewer than {MIN_ROUND_TRIPS} round trips between "
            "beta near 0 and near 1"
        )
    divergent_fraction = diverging.mean()
    if divergent_fraction > MAX_DIVERGENT_FRACTION:
        problems.append(
            f"{int(divergences.sum())} divergent transitions ({divergent_fraction:.1%}): the "
            "sampler cannot follow the posterior's geometry (a funnel?); reparameterise"
        )
    if target_ess < MIN_TARGET_ESS:
        problems.append(f"the target weights' effective sample size is only {target_ess:.0f}")
    if _chains_disagree(agreement, log_z_stderr):
        problems.append(
            "the chains' own log Z estimates disagree beyond their errors ("
            + ", ".join(f"{value:.2f}" for value in agreement.log_z)
            + f"; p = {agreement.p_value:.1g}): some chains miss part of the posterior; the "
            "stderr is widened to the spread between chains"
        )
    if np.isfinite(posterior_rhat) and posterior_rhat > MAX_RHAT:
        problems.append(
            f"the chains' posterior draws disagree (R-hat {posterior_rhat:.2f} > {MAX_RHAT})"
        )
    if check is not None and not check.passed:
        problems.append(
            "the base-moment check (eq. 22) failed: "
            + _base_check_problem(check.mean_error, check.variance_ratio, check.ess)
        )
    return TemperingDiagnostics(
        fraction_near_base=fraction_near_base,
        fraction_near_target=fraction_near_target,
        round_trips=round_trips,
        divergences=divergences,
        swap_accept_rate=swap_accept_rate,
        target_ess=target_ess,
        log_z_ess=log_z_ess,
        posterior_ess=posterior_ess,
        posterior_rhat=posterior_rhat,
        chain_log_z=np.array([]) if agreement is None else agreement.log_z,
        chain_agreement_p_value=float("nan") if agreement is None else agreement.p_value,
        base_moment_check=check,
        problems=tuple(problems),
    )


def plot_tempering(mcmc, site=None, axes=None):
    """Plot the inverse-temperature traces, the ``beta`` histogram and a target marginal.

    The marginal panel shows the posterior draws (``mcmc.get_samples()``) over the tempered
    draws and their target-weighted histogram (eq. 21).

    :param mcmc: a run with a continuous tempering kernel.
    :param str site: a scalar site (or first coordinate of a site) for the marginal panel;
        default the first latent site.
    :param axes: three matplotlib axes, or ``None`` for a new figure.
    :return: the matplotlib figure.
    """
    import matplotlib.pyplot as plt

    kernel = _kernel_of(mcmc)
    if axes is None:
        figure, axes = plt.subplots(1, 3, figsize=(13, 3.5))
    else:
        figure = axes[0].figure
    beta = np.asarray(_field(mcmc, "beta"))
    for chain, chain_beta in enumerate(beta):
        axes[0].plot(chain_beta, lw=0.6, label=f"chain {chain}")
    axes[0].set(xlabel="draw", ylabel="inverse temperature beta", title="Temperature traces")
    axes[1].hist(beta.ravel(), bins=40, range=(0, 1), density=True, color="tab:gray")
    axes[1].set(xlabel="beta", ylabel="density", title="Marginal of beta")
    tempered = tempered_samples(mcmc)
    posterior = mcmc.get_samples()
    if isinstance(tempered, dict):
        site = site or kernel.flat_model.latent_sites[0]
        tempered, posterior = tempered[site], posterior[site]
    else:
        site = site or "x[0]"
    num_draws = beta.size
    tempered = np.asarray(tempered).reshape(num_draws, -1)[:, 0]
    posterior = np.asarray(posterior).reshape(num_draws, -1)[:, 0]
    weights = np.exp(target_log_weights(mcmc)).ravel()
    axes[2].hist(tempered, bins=60, density=True, alpha=0.3, label="tempered draws")
    axes[2].hist(
        tempered, bins=60, weights=weights, density=True, histtype="step", label="weighted (eq. 21)"
    )
    axes[2].hist(posterior, bins=60, density=True, alpha=0.5, label="posterior draws")
    axes[2].set(xlabel=site, ylabel="density", title="Target marginal")
    axes[2].legend(fontsize="small")
    figure.tight_layout()
    return figure
