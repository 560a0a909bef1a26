"""How a continuous tempering run mixed, every reason to doubt it, and ``log Z`` checked by them.

:func:`log_marginal_likelihood` lives here rather than beside the estimator
(:mod:`numpyro_extras.tempering.evidence`) because it warns about what
:func:`tempering_diagnostics` finds, and the diagnostics themselves use the estimator.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from blackjax.smc.ess import ess as effective_sample_size

from numpyro_extras.results.evidence import Evidence
from numpyro_extras.results.runs import (
    MIN_ROUND_TRIPS,
    convergence_problems,
    divergence_problem,
    posterior_convergence,
    run_report,
)
from numpyro_extras.tempering.base_check import (
    BaseMomentCheck,
    base_check_problem,
    base_moment_check,
)
from numpyro_extras.tempering.chains import NEAR_BASE, NEAR_TARGET, unreached_ends
from numpyro_extras.tempering.evidence import (
    chain_agreement,
    chains_disagree,
    ratio_estimate,
    run_log_normalizer,
)
from numpyro_extras.tempering.run import (
    base_log_weights,
    chain_field,
    tempering_kernel,
    unnormalised_target_log_weights,
)

__all__ = ["TemperingDiagnostics", "tempering_diagnostics", "log_marginal_likelihood"]

# Threshold of the run check behind the warnings of log_marginal_likelihood (the others are
# shared by every family, in numpyro_extras.results.runs).
MIN_TARGET_ESS = 100.0


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

    **Example:**

    .. code-block:: python

        diagnostics = nx.tempering_diagnostics(mcmc)
        diagnostics.fraction_near_base, diagnostics.round_trips, diagnostics.problems
        print(diagnostics)  # a table per chain, the run-wide figures and the problems
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

    def __str__(self):
        check = self.base_moment_check
        if check is None:
            check_text = "not run"
        else:
            verdict = "passed" if check.passed else "FAILED"
            check_text = (
                f"{verdict} (mean error {check.mean_error:.2f} base sd, variance ratios "
                f"{np.min(check.variance_ratio):.2f}-{np.max(check.variance_ratio):.2f})"
            )
        return run_report(
            "Continuous tempering run",
            [
                (f"fraction beta < {NEAR_BASE}", self.fraction_near_base, ".2f"),
                (f"fraction beta > {NEAR_TARGET}", self.fraction_near_target, ".2f"),
                ("round trips", self.round_trips, "d"),
                ("divergences", self.divergences, "d"),
                ("replica swap rate", self.swap_accept_rate, ".2f"),
                ("log Z", self.chain_log_z, ".3f"),
            ],
            [
                ("chains' log Z agree", f"p = {self.chain_agreement_p_value:.3g}"),
                ("target ESS (weights)", f"{self.target_ess:.0f}"),
                ("log Z ESS", f"{self.log_z_ess:.0f}"),
                (
                    "posterior draws",
                    f"min ESS {self.posterior_ess:.0f}, max R-hat {self.posterior_rhat:.3f}",
                ),
                ("base moment check", check_text),
            ],
            self.problems,
        )

    def _repr_pretty_(self, printer, cycle):
        printer.text(str(self))


def _round_trips(beta):
    trips = []
    for chain_beta in beta:
        ends = np.where(chain_beta < NEAR_BASE, 0, np.where(chain_beta > NEAR_TARGET, 1, -1))
        ends = ends[ends >= 0]
        trips.append(int(np.count_nonzero(np.diff(ends) != 0) // 2))
    return np.array(trips)


def tempering_diagnostics(mcmc, check_base=True) -> TemperingDiagnostics:
    """How well the run mixed, and every reason to doubt its ``log Z`` or posterior.

    Problems reported: a chain that never reached ``beta < 0.1`` or ``beta > 0.9``; fewer than
    2 round trips in a chain; divergent transitions above 1%; a target ESS below 100; chains
    whose ``log Z`` estimates disagree beyond their errors (p < 0.001); posterior draws with a
    bulk ESS below 100 or R-hat above 1.05 in some coordinate; a failed base-moment check
    (eq. 22); a base fit that was still finding new modes when it stopped (see
    :func:`~numpyro_extras.fit_base`).

    :param mcmc: a run with a continuous tempering kernel.
    :param bool check_base: run the base-moment check.
    :return: :class:`TemperingDiagnostics`.

    **Example:**

    .. code-block:: python

        diagnostics = nx.tempering_diagnostics(mcmc)
        diagnostics.round_trips, diagnostics.problems
    """
    kernel = tempering_kernel(mcmc)
    beta = np.asarray(chain_field(mcmc, "beta"), dtype=np.float64)
    fraction_near_base = np.mean(beta < NEAR_BASE, axis=1)
    fraction_near_target = np.mean(beta > NEAR_TARGET, axis=1)
    round_trips = _round_trips(beta)
    fields = mcmc.get_extra_fields(group_by_chain=True)
    diverging = np.asarray(fields.get("diverging", np.zeros_like(beta)), dtype=bool)
    divergences = diverging.sum(axis=1)
    swap_accept_rate = np.mean(
        np.asarray(fields.get("swap_accept_prob", np.full_like(beta, np.nan))), axis=1
    )
    log_weights = unnormalised_target_log_weights(mcmc)
    target_ess = float(effective_sample_size(jnp.asarray(log_weights.ravel())))
    log_w0 = base_log_weights(mcmc)
    _, log_z_stderr, log_z_ess = ratio_estimate(log_weights, log_w0)
    agreement = chain_agreement(log_weights, log_w0)
    posterior_ess, posterior_rhat = posterior_convergence(mcmc)
    check = base_moment_check(mcmc, warn=False) if check_base else None

    problems = [problem.removeprefix("fit_base: ") for problem in kernel.base_fit_problems]
    chains = np.arange(beta.shape[0])
    end_problems = unreached_ends(beta)
    problems += end_problems
    few_trips = chains[round_trips < MIN_ROUND_TRIPS]
    if few_trips.size and not end_problems:
        problems.append(
            f"chains {few_trips.tolist()} made fewer than {MIN_ROUND_TRIPS} round trips between "
            "beta near 0 and near 1"
        )
    divergences_problem = divergence_problem(diverging)
    if divergences_problem:
        problems.append(divergences_problem)
    if target_ess < MIN_TARGET_ESS:
        problems.append(f"the target weights' effective sample size is only {target_ess:.0f}")
    if chains_disagree(agreement, log_z_stderr):
        problems.append(
            "the chains' own log Z estimates disagree beyond their errors ("
            + ", ".join(f"{value:.2f}" for value in agreement.log_z)
            + f"; p = {agreement.p_value:.1g}): some chains miss part of the posterior; the "
            "stderr is widened to the spread between chains"
        )
    problems += convergence_problems(posterior_ess, posterior_rhat)
    if check is not None and not check.passed:
        problems.append("the base-moment check (eq. 22) failed: " + base_check_problem(check))
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


def log_marginal_likelihood(mcmc, check_base=True, warn=True) -> Evidence:
    """``log Z`` (log marginal likelihood of a model) with its standard error from a tempering run.

    The run is checked first (:func:`tempering_diagnostics`); each problem found (a chain that
    never reaches one end of ``beta``, few round trips, a failed base-moment check, divergent
    transitions, a tiny effective sample size, chains that disagree) is reported in a
    ``UserWarning`` that says why the estimate may be unreliable.

    :param mcmc: a :class:`~numpyro.infer.MCMC` run with a continuous tempering kernel.
    :param bool check_base: include the base-moment check (eq. 22) among the checks.
    :param bool warn: emit the warnings.
    :return: :class:`~numpyro_extras.Evidence` (``log_z``, ``stderr``, ``log_weights``, ``ess``,
        and the ``problems`` found).

    **Example:**

    .. code-block:: python

        mcmc = MCMC(nx.JointContinuousTempering(model), num_warmup=1000, num_samples=2000)
        mcmc.run(jax.random.PRNGKey(0), x, y)
        nx.log_marginal_likelihood(mcmc)  # Evidence(log_z=..., stderr=...)
    """
    kernel = tempering_kernel(mcmc)
    problems = tuple(tempering_diagnostics(mcmc, check_base=check_base).problems)
    if warn and problems:
        advice = ""
        if kernel.base_fit_problems:
            advice = (
                " Where a fitted base misses part of the posterior (modes it did not find, or "
                "a region whose scale it cannot follow), nx.ReplicaExchange(model) is the "
                "better sampler: its prior leg reaches what the fit missed."
            )
        warnings.warn(
            "The continuous tempering run shows trouble, so log Z and its standard error "
            "may be unreliable: " + "; ".join(problems) + "." + advice,
            stacklevel=2,
        )
    return run_log_normalizer(mcmc)._replace(problems=problems)
