"""What a finished replica-exchange run says about itself: swap rates, round trips, the
communication barrier, ``log Z`` and every reason to doubt them."""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

from numpyro_extras.exchange.evidence import (
    SteppingStone,
    joined_legs_evidence,
    stepping_stone,
)
from numpyro_extras.exchange.kernels import ReplicaExchange
from numpyro_extras.results.evidence import Evidence
from numpyro_extras.results.runs import (
    MIN_ROUND_TRIPS,
    convergence_problems,
    divergence_problem,
    finished_kernel,
    inference_data,
    posterior_convergence,
    run_report,
)
from numpyro_extras.shell.devices import gathered

__all__ = [
    "ExchangeDiagnostics",
    "PriorLegDiagnostics",
    "exchange_kernel",
    "exchange_diagnostics",
    "exchange_log_marginal_likelihood",
    "exchange_inference_data",
]

# A gap whose swaps are accepted less often than this hardly lets states through.
MIN_SWAP_RATE = 0.05


class PriorLegDiagnostics(NamedTuple):
    """How the prior leg of a stabilised run (``reference="stabilized"``) communicated, per
    chain.

    :param betas: its ladder, shape ``(num_chains, N_prior)``.
    :param swap_accept_rate: its mean swap acceptance per gap.
    :param barrier: its communication barrier.
    :param round_trips: states that travelled from the prior to the posterior and back.
    :param stepping_stone: its own estimate of ``log Z``.
    """

    betas: np.ndarray
    swap_accept_rate: np.ndarray
    barrier: np.ndarray
    round_trips: np.ndarray
    stepping_stone: SteppingStone


class ExchangeDiagnostics(NamedTuple):
    """How a replica-exchange run communicated, per chain, and what looks wrong.

    :param betas: per chain, the ladder used for sampling, shape ``(num_chains, N)``.
    :param swap_accept_rate: per chain and gap, the mean swap acceptance probability over the
        draws, shape ``(num_chains, N - 1)``.
    :param barrier: per chain, the communication barrier ``Lambda = sum_i (1 - swap rate_i)``
        (Syed et al. eq. 12); about ``2 Lambda`` replicas is enough.
    :param round_trips: per chain, states that travelled from the reference to the posterior and
        back during sampling.
    :param divergences: per chain, divergent moves of the posterior replica.
    :param posterior_ess: the smallest ArviZ bulk ESS of the posterior draws over every
        coordinate.
    :param posterior_rhat: the largest R-hat of the posterior draws.
    :param stepping_stone: the :class:`~numpyro_extras.exchange.evidence.SteppingStone`
        estimate of ``log Z`` (for a stabilised run, the fitted leg's; the ladder, swap rates,
        barrier and round trips above are that leg's too).
    :param problems: one sentence per problem found; empty for a run that looks fine.
    :param pilot_barrier: the barrier the pilot run of ``num_replicas="auto"`` measured before
        the run chose its count (``None`` for a given count).

    **Example:**

    .. code-block:: python

        diagnostics = nx.exchange_diagnostics(exchange_mcmc)  # a finished nx.ReplicaExchange run
        diagnostics.swap_accept_rate.min(), diagnostics.round_trips, diagnostics.problems
        print(diagnostics)  # a table per chain, the run-wide figures and the problems
    """

    betas: np.ndarray
    swap_accept_rate: np.ndarray
    barrier: np.ndarray
    round_trips: np.ndarray
    divergences: np.ndarray
    posterior_ess: float
    posterior_rhat: float
    stepping_stone: SteppingStone
    problems: tuple[str, ...]
    pilot_barrier: float | None = None
    prior_leg: PriorLegDiagnostics | None = None
    evidence: Evidence | None = None

    def __str__(self):
        num_replicas = np.full(self.betas.shape[0], self.betas.shape[1])
        leg = "fitted leg: " if self.prior_leg is not None else ""
        rows = [
            (f"{leg}replicas", num_replicas, "d"),
            (f"{leg}round trips", self.round_trips, "d"),
            (f"{leg}barrier", self.barrier, ".2f"),
            (f"{leg}lowest swap rate", self.swap_accept_rate.min(axis=-1), ".2f"),
            (f"{leg}log Z", self.stepping_stone.chain_log_z, ".3f"),
        ]
        if self.prior_leg is not None:
            prior = self.prior_leg
            rows += [
                ("prior leg: replicas", np.full(prior.betas.shape[0], prior.betas.shape[1]), "d"),
                ("prior leg: round trips", prior.round_trips, "d"),
                ("prior leg: barrier", prior.barrier, ".2f"),
                ("prior leg: lowest swap rate", prior.swap_accept_rate.min(axis=-1), ".2f"),
                ("prior leg: log Z", prior.stepping_stone.chain_log_z, ".3f"),
            ]
        rows.append(("divergences", self.divergences, "d"))
        evidence = self.evidence or self.stepping_stone.evidence()
        lines = [
            ("log Z (stepping stone)", f"{evidence.log_z:.3f} +- {evidence.stderr:.3f}"),
            (
                "posterior draws",
                f"min ESS {self.posterior_ess:.0f}, max R-hat {self.posterior_rhat:.3f}",
            ),
        ]
        if self.pilot_barrier is not None:
            lines.append(("pilot's barrier", f"{self.pilot_barrier:.2f}"))
        title = "Replica exchange run" + (
            " (stabilised: a fitted leg and a prior leg)" if self.prior_leg is not None else ""
        )
        return run_report(title, rows, lines, self.problems)

    def _repr_pretty_(self, printer, cycle):
        printer.text(str(self))


def exchange_kernel(mcmc) -> ReplicaExchange:
    """The replica-exchange kernel of a finished run.

    :raises TypeError: if the run used another kernel.
    :raises ValueError: if the MCMC has not been run yet.
    """
    return finished_kernel(mcmc, ReplicaExchange, "nx.ReplicaExchange")


def _chain_fields(mcmc, name):
    fields = mcmc.get_extra_fields(group_by_chain=True)
    if name not in fields:
        raise ValueError(
            f"The run did not collect {name!r}; keep the kernel's default fields (do not "
            "exclude them with extra_fields)."
        )
    return np.asarray(fields[name], dtype=np.float64)


def _per_chain(mcmc, values, trailing_ndim):
    values = np.asarray(values)
    return values.reshape((-1,) + values.shape[values.ndim - trailing_ndim :])


def exchange_diagnostics(mcmc) -> ExchangeDiagnostics:
    """How well the replicas communicated, and every reason to doubt the run's posterior or
    ``log Z``.

    Problems reported: a fitted reference that may miss modes (its fit's
    :class:`~numpyro_extras.BaseCoverageWarning`); a chain with fewer than 2 round trips (the
    posterior replica may not have been carried between modes); a gap whose swaps are accepted
    less than 5% of the time; divergent moves of the posterior replica above 1%; a posterior ESS
    below 100; chains whose posterior draws (R-hat above 1.05) or ``log Z`` estimates disagree;
    a stepping-stone bracket wider than its Monte Carlo error.

    :param mcmc: a run with :class:`~numpyro_extras.ReplicaExchange`.
    :return: :class:`ExchangeDiagnostics`.

    **Example:**

    .. code-block:: python

        diagnostics = nx.exchange_diagnostics(exchange_mcmc)  # a finished nx.ReplicaExchange run
        diagnostics.barrier, diagnostics.round_trips, diagnostics.problems
    """
    kernel = exchange_kernel(mcmc)
    # Read on every process, where the run's replicas were split over several processes.
    state = gathered(mcmc.last_state)
    betas = _per_chain(mcmc, state.betas, 1).astype(np.float64)
    log_likelihood = _chain_fields(mcmc, "log_likelihood")
    swap_rates = _chain_fields(mcmc, "swap_accept_prob").mean(axis=1)
    barrier = np.sum(1.0 - swap_rates, axis=-1)
    round_trips = _per_chain(mcmc, state.statistics.num_round_trips, 0)
    fields = mcmc.get_extra_fields(group_by_chain=True)
    diverging = np.asarray(fields.get("diverging", np.zeros(log_likelihood.shape[:2])), bool)
    divergences = diverging.sum(axis=1)
    posterior_ess, posterior_rhat = posterior_convergence(mcmc)
    estimate = stepping_stone(log_likelihood, betas)
    evidence = estimate.evidence()

    fit_problems = [problem.removeprefix("fit_base: ") for problem in kernel.reference_fit_problems]
    problems = [] if kernel.stabilized else fit_problems
    prior_leg = None
    if kernel.stabilized:
        prior_leg = _prior_leg_diagnostics(mcmc, state)
        evidence, disagree = joined_legs_evidence(estimate, prior_leg.stepping_stone)
        if disagree:
            problems.append(
                f"the fitted leg's log Z ({estimate.log_z:.3f} +- {estimate.stderr:.3f}) and the "
                f"prior leg's ({prior_leg.stepping_stone.log_z:.3f} +- "
                f"{prior_leg.stepping_stone.stderr:.3f}) disagree: the fitted reference missed "
                "part of the posterior, or a leg did not mix; the stderr covers both"
            )
            problems.extend(fit_problems)
        few_prior_trips = np.arange(betas.shape[0])[prior_leg.round_trips < MIN_ROUND_TRIPS]
        if few_prior_trips.size:
            problems.append(
                f"the prior legs of chains {few_prior_trips.tolist()} made fewer than "
                f"{MIN_ROUND_TRIPS} round trips, so modes the fitted reference missed may not "
                "have reached the posterior"
            )
    chains = np.arange(betas.shape[0])
    few_trips = chains[round_trips < MIN_ROUND_TRIPS]
    if few_trips.size:
        suggested = int(np.ceil(2 * np.max(barrier))) + 1
        problems.append(
            f"chains {few_trips.tolist()} made fewer than {MIN_ROUND_TRIPS} round trips between "
            "the reference and the posterior, so their posterior replica may not have visited "
            f"every mode (communication barrier {np.max(barrier):.1f}: try num_replicas >= "
            f"{max(suggested, kernel.num_replicas + 1)} or a longer run)"
        )
    slow_chain, slow_gap = np.unravel_index(np.argmin(swap_rates), swap_rates.shape)
    if swap_rates[slow_chain, slow_gap] < MIN_SWAP_RATE:
        low, high = betas[slow_chain, slow_gap], betas[slow_chain, slow_gap + 1]
        problems.append(
            f"swaps between beta = {low:.3g} and {high:.3g} (chain {slow_chain}) are accepted "
            f"with probability {swap_rates[slow_chain, slow_gap]:.3f}: the ladder is too coarse "
            "there (more replicas, or a longer warm-up to tune it)"
        )
    divergences_problem = divergence_problem(diverging, "moves of the posterior replica")
    if divergences_problem:
        problems.append(divergences_problem)
    problems += convergence_problems(posterior_ess, posterior_rhat)
    if estimate.chains_disagree:
        problems.append(
            "the chains' own log Z estimates disagree beyond their errors ("
            + ", ".join(f"{value:.2f}" for value in estimate.chain_log_z)
            + "): some chains miss part of the posterior; the stderr is widened to the spread "
            "between chains"
        )
    widths = estimate.reverse - estimate.forward
    if np.max(np.abs(widths)) > 4 * np.max(estimate.chain_stderr):
        problems.append(
            f"the stepping-stone bracket is {np.max(np.abs(widths)):.2g} nats wide, more than its "
            "Monte Carlo error allows: the ladder is coarse for this run's length (the stderr "
            "covers half the bracket)"
        )
    return ExchangeDiagnostics(
        betas=betas,
        swap_accept_rate=swap_rates,
        barrier=barrier,
        round_trips=round_trips,
        divergences=divergences,
        posterior_ess=posterior_ess,
        posterior_rhat=posterior_rhat,
        stepping_stone=estimate,
        problems=tuple(problems),
        pilot_barrier=kernel.pilot_barrier,
        prior_leg=prior_leg,
        evidence=evidence,
    )


def _prior_leg_diagnostics(mcmc, state) -> PriorLegDiagnostics:
    betas = _per_chain(mcmc, state.prior_betas, 1).astype(np.float64)
    swap_rates = _chain_fields(mcmc, "prior_swap_accept_prob").mean(axis=1)
    return PriorLegDiagnostics(
        betas=betas,
        swap_accept_rate=swap_rates,
        barrier=np.sum(1.0 - swap_rates, axis=-1),
        round_trips=_per_chain(mcmc, state.prior_leg.statistics.num_round_trips, 0),
        stepping_stone=stepping_stone(_chain_fields(mcmc, "prior_log_likelihood"), betas),
    )


def exchange_log_marginal_likelihood(mcmc, warn=True) -> Evidence:
    """``log Z`` of a replica-exchange run by stepping stone, after checking the run.

    :param mcmc: a run with :class:`~numpyro_extras.ReplicaExchange`.
    :param bool warn: warn with every problem :func:`exchange_diagnostics` finds.
    :return: :class:`~numpyro_extras.Evidence`.
    """
    diagnostics = exchange_diagnostics(mcmc)
    if warn and diagnostics.problems:
        warnings.warn(
            "The replica exchange run shows trouble, so its posterior draws or log Z may be "
            "unreliable: " + "; ".join(diagnostics.problems) + ".",
            stacklevel=3,
        )
    return diagnostics.evidence._replace(problems=tuple(diagnostics.problems))


def exchange_inference_data(mcmc):
    """ArviZ ``InferenceData`` of a replica-exchange run: :func:`arviz.from_numpyro`'s groups
    (the posterior replica's draws, ``log_likelihood``, ``observed_data``), every rung's ``l`` and
    swap rates in ``sample_stats``, the ladder, barrier, round trips, ``log Z``, the number of
    replicas and (for ``num_replicas="auto"``) the pilot's barrier in ``attrs``.

    :param mcmc: a run with :class:`~numpyro_extras.ReplicaExchange`.
    :return: what the installed ArviZ's :func:`arviz.from_numpyro` returns: ``InferenceData``
        (ArviZ 0.2x) or ``xarray.DataTree`` (ArviZ 1.x).
    """
    kernel = exchange_kernel(mcmc)
    idata = inference_data(mcmc, kernel.model is not None)
    diagnostics = exchange_diagnostics(mcmc)
    evidence = diagnostics.evidence
    idata.attrs.update(
        {
            "sampler": type(kernel).__name__,
            "log_marginal_likelihood": evidence.log_z,
            "log_marginal_likelihood_stderr": evidence.stderr,
            "betas": diagnostics.betas.tolist(),
            "communication_barrier": diagnostics.barrier.tolist(),
            "round_trips": diagnostics.round_trips.tolist(),
            "num_replicas": int(diagnostics.betas.shape[-1]),
        }
    )
    if diagnostics.pilot_barrier is not None:
        idata.attrs["pilot_communication_barrier"] = diagnostics.pilot_barrier
    prior_leg = diagnostics.prior_leg
    if prior_leg is not None:
        idata.attrs.update(
            {
                "prior_leg_betas": prior_leg.betas.tolist(),
                "prior_leg_communication_barrier": prior_leg.barrier.tolist(),
                "prior_leg_round_trips": prior_leg.round_trips.tolist(),
                "fitted_leg_log_marginal_likelihood": diagnostics.stepping_stone.log_z,
                "prior_leg_log_marginal_likelihood": prior_leg.stepping_stone.log_z,
            }
        )
    return idata
