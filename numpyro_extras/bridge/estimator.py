"""Bridge sampling of ``log Z`` from posterior draws and an unnormalised log density: the
iterative scheme of Meng and Wong (1996, eq. 4.1) with a proposal fitted to half of the draws,
its error from the relative mean squared error of Fruehwirth-Schnatter (2004), as the R package
``bridgesampling`` (Gronau, Singmann and Wagenmakers 2020) computes them, and warp-3 (Meng and
Schilling 2002, eq. 3.4) as an option.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import numpy as np
import scipy.stats
from scipy.special import logsumexp

from numpyro_extras.bridge.proposals import component_log_densities, fit_gaussian, fit_mixture
from numpyro_extras.model.base_fit import numpy_rng, vectorized_potential
from numpyro_extras.results import arviz_adapter
from numpyro_extras.results.evidence import (
    Evidence,
    agreement_of,
    chains_disagree,
    pareto_tail_index,
)

__all__ = [
    "BridgeTerms",
    "bridge_estimate",
    "bridge_evidence",
    "bridge_terms",
    "iterate_bridge",
    "METHODS",
]

METHODS = ("auto", "normal", "warp3")
MIN_DRAWS_PER_CHAIN = 16
# The bridge's terms are bounded (Meng and Wong 1996, eq. 4.1), so a heavy tail of the importance
# weights q / g does not spoil it as it spoils importance sampling; what does is an overlap of the
# proposal and the posterior carried by few draws. Fewer effective draws than this in either
# sum, and its error bar is no guide.
MIN_OVERLAP_DRAWS = 100
# The two halves' estimates are independent; a difference of more than this many of its
# standard errors says the halves are not draws of one distribution.
HALVES_AGREEMENT_Z = 4.0
# Draws of the proposal per posterior draw in the iteration: they cost a density evaluation
# each, far less than a posterior draw, and lower the proposal's share of the error.
PROPOSAL_DRAWS_PER_DRAW = 2


class BridgeTerms(NamedTuple):
    """The log ratios ``log q / g`` the bridge estimator is a function of.

    :param posterior: at the posterior draws kept for the iteration, ``(chains, draws)``.
    :param proposal: at the proposal's draws, ``(N2,)``.
    :param proposal_draws: the proposal's draws, ``(N2, D)`` (on the warped space for warp-3).
    :param fitted: the fitted proposal (a :class:`~numpyro_extras.MixtureBase`).
    """

    posterior: np.ndarray
    proposal: np.ndarray
    proposal_draws: np.ndarray
    fitted: object


def _log_mean_exp(values, axis=None):
    return logsumexp(values, axis=axis) - math.log(
        np.size(values) if axis is None else values.shape[axis]
    )


def iterate_bridge(posterior_terms, proposal_terms, posterior_size, max_iterations, tolerance):
    """The optimal bridge's fixed point ``r = Z``, in logs (Meng and Wong 1996, eq. 4.1):
    ``r <- mean_j[l2_j / (s1 l2_j + s2 r)] / mean_i[1 / (s1 l1_i + s2 r)]``.

    :param posterior_terms: ``log l1``, ``log q / g`` at the posterior draws (any shape).
    :param proposal_terms: ``log l2``, the same at the proposal's draws.
    :param float posterior_size: the posterior draws' effective number, in ``s1``.
    :param int max_iterations: most iterations.
    :param float tolerance: relative change of ``r`` that ends the iteration.
    :return: ``(log_z, converged, (log_s1, log_s2))``.
    """
    posterior_terms = np.ravel(posterior_terms)
    proposal_terms = np.ravel(proposal_terms)
    total = posterior_size + proposal_terms.size
    log_s1 = math.log(posterior_size / total)
    log_s2 = math.log(proposal_terms.size / total)
    # The starting r: the median of l1, where the two means balance for a perfect proposal.
    log_r = float(np.median(posterior_terms))
    for _ in range(max_iterations):
        numerator = _log_mean_exp(
            proposal_terms - np.logaddexp(log_s1 + proposal_terms, log_s2 + log_r)
        )
        denominator = _log_mean_exp(-np.logaddexp(log_s1 + posterior_terms, log_s2 + log_r))
        new_log_r = float(numerator - denominator)
        if abs(math.expm1(log_r - new_log_r)) < tolerance:
            return new_log_r, True, (log_s1, log_s2)
        log_r = new_log_r
    return log_r, False, (log_s1, log_s2)


def _log_bridge_terms(log_z, terms: BridgeTerms, log_s1, log_s2):
    """``log f1`` at the proposal's draws and ``log f2`` at the posterior's (same shapes as
    ``terms``): ``f1 = p / (s1 p + s2 g)``, ``f2 = g / (s1 p + s2 g)``, ``p`` the target
    normalised by ``exp(log_z)``; both depend on the draws only through ``log q / g``."""
    log_f1 = -np.logaddexp(log_s1, log_s2 - (terms.proposal - log_z))
    log_f2 = -np.logaddexp(log_s1 + terms.posterior - log_z, log_s2)
    return log_f1, log_f2


def _relative_error(log_z, terms: BridgeTerms, log_s1, log_s2):
    """``sqrt(RE^2)``, the relative error of ``Z``, hence the error of ``log Z`` to first order
    (Fruehwirth-Schnatter 2004, eq. 15): the proposal draws' term with their independence, the
    posterior draws' with their autocorrelation and the spread between chains (ArviZ's MCSE of
    the mean). Returns ``(stderr, ess of the posterior term)``."""
    f1, f2 = (np.exp(values) for values in _log_bridge_terms(log_z, terms, log_s1, log_s2))
    proposal_part = np.var(f1) / np.mean(f1) ** 2 / f1.size
    if terms.posterior.shape[-1] < 4 or not np.std(f2) > 0:
        posterior_part, ess = 0.0, float(f2.size)
    else:
        posterior_part = (arviz_adapter.mcse(f2) / np.mean(f2)) ** 2
        ess = arviz_adapter.ess(f2, method="mean")
    return math.sqrt(proposal_part + posterior_part), ess


def _overlap_draws(log_z, terms: BridgeTerms, log_s1, log_s2):
    """The effective number of draws, ``(sum f)^2 / sum f^2``, in the smaller of the bridge's
    two sums (:func:`_log_bridge_terms`)."""

    def effective(log_terms):
        log_terms = np.ravel(log_terms)
        return math.exp(2 * logsumexp(log_terms) - logsumexp(2 * log_terms))

    return min(map(effective, _log_bridge_terms(log_z, terms, log_s1, log_s2)))


def _log_potentials(batched_potential, points):
    log_q = -batched_potential(points)
    return np.where(np.isnan(log_q), -np.inf, log_q)


def bridge_terms(
    rng_key, potential_fn, fit_draws, iteration_draws, method="auto", num_proposal_draws=None
) -> BridgeTerms:
    """Fit the proposal to ``fit_draws`` and evaluate ``log q / g`` at ``iteration_draws`` and
    at draws of the proposal.

    :param jax.random.PRNGKey rng_key: for the proposal's draws and the mixture's EM.
    :param potential_fn: ``x -> -log q(x)`` for one flat point.
    :param fit_draws: ``(N, D)`` posterior draws the proposal is fitted to.
    :param iteration_draws: ``(chains, draws, D)`` posterior draws of the iteration.
    :param str method: ``"auto"`` (a Gaussian mixture, its components chosen by BIC; warp-3
        when it picks one), ``"normal"`` or ``"warp3"``.
    :param int num_proposal_draws: draws of the proposal (default: as many as
        ``iteration_draws``).
    :return: :class:`BridgeTerms`.
    """
    draw_key, fit_key = jax.random.split(rng_key)
    batched_potential = vectorized_potential(potential_fn)
    chains, draws, dimension = iteration_draws.shape
    flat_iteration = iteration_draws.reshape(-1, dimension)
    num_proposal_draws = num_proposal_draws or flat_iteration.shape[0]
    if method == "auto":
        fitted = fit_mixture(fit_draws, numpy_rng(fit_key))
    else:
        fitted = fit_gaussian(fit_draws)
    if method == "warp3" or (method == "auto" and fitted.component_locs.shape[0] == 1):
        # q_w(eta) = |L| / 2 (q(mu + L eta) + q(mu - L eta)) has the target's Z and is symmetric,
        # so a standard normal proposal matches its mean, covariance and skew (Meng and
        # Schilling 2002, eq. 3.4).
        loc = np.asarray(fitted.component_locs[0])
        scale_tril = np.asarray(fitted.component_scale_trils[0])
        log_determinant = float(np.sum(np.log(np.diagonal(scale_tril))))

        def warped_log_density(eta):
            plus = _log_potentials(batched_potential, loc + eta @ scale_tril.T)
            minus = _log_potentials(batched_potential, loc - eta @ scale_tril.T)
            return np.logaddexp(plus, minus) + log_determinant - math.log(2.0)

        def standard_normal_log_density(eta):
            return np.sum(scipy.stats.norm.logpdf(eta), axis=-1)

        eta_posterior = np.linalg.solve(scale_tril, (flat_iteration - loc).T).T
        eta_proposal = np.asarray(
            jax.random.normal(draw_key, (num_proposal_draws, dimension)), dtype=np.float64
        )
        posterior = warped_log_density(eta_posterior) - standard_normal_log_density(eta_posterior)
        proposal = warped_log_density(eta_proposal) - standard_normal_log_density(eta_proposal)
        return BridgeTerms(posterior.reshape(chains, draws), proposal, eta_proposal, fitted)
    proposal_draws = np.asarray(fitted.sample(draw_key, (num_proposal_draws,)), dtype=np.float64)

    def log_proposal(points):
        return logsumexp(component_log_densities(fitted, points), axis=1)

    posterior = _log_potentials(batched_potential, flat_iteration) - log_proposal(flat_iteration)
    proposal = _log_potentials(batched_potential, proposal_draws) - log_proposal(proposal_draws)
    return BridgeTerms(posterior.reshape(chains, draws), proposal, proposal_draws, fitted)


def _median_ess(draws):
    """The median over coordinates of the draws' bulk ESS, ``draws`` ``(chains, draws, D)``."""
    varying = np.flatnonzero(np.std(draws, axis=(0, 1)) > 0)
    if draws.shape[1] < 4 or not len(varying):
        return float(draws.shape[0] * draws.shape[1])
    return float(np.median([arviz_adapter.ess(draws[..., index]) for index in varying]))


def bridge_evidence(
    rng_key,
    potential_fn,
    draws,
    *,
    method="auto",
    max_iterations=1000,
    tolerance=1e-10,
) -> Evidence:
    """``log Z`` of an unnormalised density ``q = exp(-potential_fn)`` from draws of ``q / Z``
    by bridge sampling.

    The draws are split into each chain's first and second halves; each half fits a proposal
    ``g`` for the other (cross-fitting, so that every draw enters an estimate and no proposal is
    tested on the draws it was fitted to), and the two estimates are averaged. Each estimate is
    the optimal bridge's fixed point (Meng and Wong 1996, eq. 4.1) over one half's draws and
    twice as many draws of ``g``, with ``s1`` from the draws' effective sample size (the median
    of their coordinates' bulk ESS), as ``bridgesampling``'s ``use_neff``; its standard error is
    the relative mean squared error of Fruehwirth-Schnatter (2004, eq. 15), with the posterior
    term's autocorrelation and chain spread (ArviZ's MCSE). The checks, each a sentence in
    ``problems``: the two halves' estimates agree; each chain's own estimate agrees with the
    others' (chi-square test); the bridge's two sums each rest on at least 100 effective draws
    (its terms are bounded, so the overlap of ``g`` and the posterior, not a heavy tail of
    ``q / g``, is what can make its error bar wrong); the iteration converges.

    :param jax.random.PRNGKey rng_key: for the proposal's draws and fit.
    :param potential_fn: ``x -> -log q(x)`` for one flat point ``x`` of shape ``(D,)``.
    :param draws: posterior draws ``(chains, draws, D)`` (or ``(draws, D)`` for one chain).
    :param str method: the proposal: ``"auto"`` (default; a Gaussian mixture fitted by EM with
        as many components, 1 to 8, as the Bayesian information criterion picks: one Gaussian
        on a unimodal posterior, a component per mode the draws visited), ``"normal"`` (one
        Gaussian, ``bridgesampling``'s default) or ``"warp3"`` (one Gaussian after warp-3,
        Meng and Schilling 2002: it matches skew too, at twice the density evaluations).
        ``"auto"`` uses warp-3 when the criterion picks one component.
    :param int max_iterations: most iterations of the scheme.
    :param float tolerance: relative change of ``Z`` that ends the iteration.
    :return: :class:`~numpyro_extras.Evidence`: ``log_weights`` are ``log q / g`` at the
        proposal's draws, ``pareto_k`` their tail index (for information: importance sampling
        with ``g`` would be unreliable above 0.7), ``ess`` the effective number of the
        posterior draws in the error, ``problems`` what the checks found.

    **Example:**

    .. code-block:: python

        draws = np.random.default_rng(0).normal(size=(4, 1000, 2))
        potential_fn = lambda x: 0.5 * jnp.sum(x**2)  # Z = 2 pi
        nx.bridge_evidence(jax.random.PRNGKey(0), potential_fn, draws).log_z  # about 1.838
    """
    return bridge_estimate(
        rng_key,
        potential_fn,
        draws,
        method=method,
        max_iterations=max_iterations,
        tolerance=tolerance,
    )[0]


def bridge_estimate(
    rng_key, potential_fn, draws, *, method="auto", max_iterations=1000, tolerance=1e-10
) -> tuple[Evidence, BridgeTerms]:
    """:func:`bridge_evidence` and the terms behind it (the fitted proposal among them), for
    callers that check the estimate further.

    :return: ``(evidence, terms)``: :class:`~numpyro_extras.Evidence` and :class:`BridgeTerms`.
    """
    draws = np.asarray(draws, dtype=np.float64)
    if draws.ndim == 2:
        draws = draws[None]
    if draws.ndim != 3:
        raise ValueError(
            f"bridge_evidence: draws must have shape (chains, draws, D), got {draws.shape}."
        )
    if method not in METHODS:
        raise ValueError(f"bridge_evidence: method must be one of {METHODS}, got {method!r}.")
    if draws.shape[1] < MIN_DRAWS_PER_CHAIN:
        raise ValueError(
            f"bridge_evidence: needs at least {MIN_DRAWS_PER_CHAIN} draws per chain (half fit "
            f"the proposal, half enter the estimate), got {draws.shape[1]}."
        )
    if not np.all(np.isfinite(draws)):
        raise ValueError("bridge_evidence: the draws contain NaN or infinite values.")
    half = draws.shape[1] // 2
    first, second = draws[:, :half], draws[:, half : 2 * half]
    # Each half fits a proposal for the other (cross-fitting): every draw enters an estimate,
    # and no proposal is fitted to the draws it is tested on.
    directions = [
        _one_direction(
            key, potential_fn, fit_half, iteration_half, method, max_iterations, tolerance
        )
        for key, (fit_half, iteration_half) in zip(
            jax.random.split(rng_key), ((first, second), (second, first)), strict=True
        )
    ]
    log_z = float(np.mean([direction.log_z for direction in directions]))
    stderr = 0.5 * math.hypot(*(direction.stderr for direction in directions))
    problems = []
    non_finite = sum(direction.non_finite for direction in directions)
    if non_finite:
        problems.append(
            f"the density is not finite at {non_finite} posterior draws, so they are not draws "
            "of this density"
        )
    if not all(direction.converged for direction in directions):
        problems.append(
            f"the bridge iteration did not converge in {max_iterations} iterations, so its "
            "estimate is unreliable"
        )
    pareto_k = max(direction.pareto_k for direction in directions)
    overlap_draws = min(direction.overlap_draws for direction in directions)
    if overlap_draws < MIN_OVERLAP_DRAWS:
        problems.append(
            f"the proposal fitted to the draws and the posterior overlap little: about "
            f"{overlap_draws:.0f} draws carry the estimate (fewer than {MIN_OVERLAP_DRAWS}), so "
            "its error bar is no guide; the posterior is far from the proposal's Gaussian "
            "shape (method='warp3' follows skew), or the draws are too few"
        )
    first_log_z, second_log_z = (direction.log_z for direction in directions)
    if abs(first_log_z - second_log_z) > HALVES_AGREEMENT_Z * 2 * stderr:
        problems.append(
            f"the estimates from the two halves of the draws disagree ({second_log_z:.3f} from "
            f"the first half's draws, {first_log_z:.3f} from the second's): the chains were "
            "still moving between the halves (not yet stationary), or the proposals fitted to "
            "each half differ; run longer"
        )
    if draws.shape[0] >= 2:
        per_chain = np.mean([direction.per_chain for direction in directions], axis=0)
        per_chain_stderr = 0.5 * np.hypot(*(direction.per_chain_stderr for direction in directions))
        agreement = agreement_of(per_chain, per_chain_stderr)
        if chains_disagree(agreement, stderr):
            estimates = ", ".join(f"{value:.3f}" for value in agreement.log_z)
            problems.append(
                f"the chains' own bridge estimates disagree ({estimates}): the chains sampled "
                "different parts of the posterior (modes one chain never left, say), so no "
                "chain's draws, nor their pool, may represent the whole of it"
            )
    if not math.isfinite(log_z):
        problems.append("the estimate is not a finite number")
    evidence = Evidence(
        log_z=log_z,
        stderr=float(stderr),
        log_weights=np.concatenate([direction.terms.proposal for direction in directions]),
        ess=float(sum(direction.ess for direction in directions)),
        pareto_k=float(pareto_k),
        problems=tuple(problems),
    )
    return evidence, directions[0].terms


class _Direction(NamedTuple):
    """The estimate from one half of the draws with the proposal fitted to the other."""

    log_z: float
    stderr: float
    ess: float
    converged: bool
    non_finite: int
    pareto_k: float
    overlap_draws: float
    per_chain: np.ndarray
    per_chain_stderr: np.ndarray
    terms: BridgeTerms


def _one_direction(
    rng_key, potential_fn, fit_half, iteration_half, method, max_iterations, tolerance
):
    terms = bridge_terms(
        rng_key,
        potential_fn,
        fit_half.reshape(-1, fit_half.shape[-1]),
        iteration_half,
        method,
        num_proposal_draws=PROPOSAL_DRAWS_PER_DRAW * iteration_half[..., 0].size,
    )
    non_finite = int(np.sum(~np.isfinite(terms.posterior)))
    terms = terms._replace(
        posterior=np.where(np.isfinite(terms.posterior), terms.posterior, -np.inf)
    )
    posterior_size = min(_median_ess(iteration_half), float(terms.posterior.size))
    log_z, converged, (log_s1, log_s2) = iterate_bridge(
        terms.posterior, terms.proposal, posterior_size, max_iterations, tolerance
    )
    stderr, ess = _relative_error(log_z, terms, log_s1, log_s2)
    pareto_k = pareto_tail_index(terms.proposal)
    overlap_draws = _overlap_draws(log_z, terms, log_s1, log_s2)
    per_chain, per_chain_stderr = np.array(
        [
            _chain_estimate(terms, chain, max_iterations, tolerance)
            for chain in range(len(terms.posterior))
        ]
    ).T
    return _Direction(
        log_z,
        stderr,
        ess,
        converged,
        non_finite,
        pareto_k,
        overlap_draws,
        per_chain,
        per_chain_stderr,
        terms,
    )


def _chain_estimate(terms: BridgeTerms, chain, max_iterations, tolerance):
    """One chain's ``(log Z, stderr)`` from its iteration draws and all the proposal's."""
    chain_terms = terms._replace(posterior=terms.posterior[chain : chain + 1])
    posterior_size = float(chain_terms.posterior.size)
    log_z, _, (log_s1, log_s2) = iterate_bridge(
        chain_terms.posterior, chain_terms.proposal, posterior_size, max_iterations, tolerance
    )
    return log_z, _relative_error(log_z, chain_terms, log_s1, log_s2)[0]
