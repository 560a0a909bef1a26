"""Bayesian model comparison in one call: the log evidence of each model, its Bayes factor
against the best and the posterior model probabilities, each with the Monte Carlo error of the
estimates carried through.

What :func:`arviz.compare` is for leave-one-out cross-validation, :func:`compare` is for the
marginal likelihood: ``p(M_k | y) = p(y | M_k) p(M_k) / sum_j p(y | M_j) p(M_j)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
from numpyro.infer import MCMC
from scipy.special import logsumexp, softmax

from numpyro_extras.bridge import bridge_sampling
from numpyro_extras.estimates import has_own_log_z, log_marginal_likelihood
from numpyro_extras.results.evidence import Evidence
from numpyro_extras.shell.plotting import pyplot
from numpyro_extras.shell.validation import check_count, check_real

__all__ = ["compare", "plot_compare"]

COLUMNS = [
    "rank",
    "log_z",
    "stderr",
    "log_bf",
    "log_bf_stderr",
    "prior_prob",
    "posterior_prob",
    "posterior_prob_lower",
    "posterior_prob_upper",
    "warning",
]


def _evidence_of(name, value) -> Evidence:
    if isinstance(value, Evidence):
        return value
    if isinstance(value, MCMC):
        # A run of a kernel with no log Z of its own (NUTS, say) is bridged.
        estimate = log_marginal_likelihood if has_own_log_z(value) else bridge_sampling
        try:
            return estimate(value, warn=False)
        except (TypeError, ValueError) as error:
            raise type(error)(f"compare: model {name!r}: {error}") from error
    raise TypeError(
        f"compare: model {name!r} must be a finished numpyro.infer.MCMC run (of any kernel over "
        "continuous sites, or of one that estimates log Z) or an nx.Evidence (from nx.ais, "
        f"say), got {type(value).__name__}."
    )


def _prior_log_probs(names, prior_probs):
    if prior_probs is None:
        return np.full(len(names), -math.log(len(names)))
    if not isinstance(prior_probs, Mapping):
        raise TypeError(
            "compare: prior_probs must be a dict of each model's prior probability by name, "
            f"got {type(prior_probs).__name__}."
        )
    if set(prior_probs) != set(names):
        raise ValueError(
            f"compare: prior_probs must name exactly the models {sorted(names)}, "
            f"got {sorted(prior_probs)}."
        )
    probs = np.array(
        [
            check_real(f"prior_probs[{name!r}]", prior_probs[name], "a positive number", low=0.0)
            for name in names
        ]
    )
    return np.log(probs / probs.sum())


def compare(models, prior_probs=None, ci_prob=0.95, num_draws=20_000, seed=0) -> pd.DataFrame:
    """Rank models by their log evidence ``log p(y | M)``, with Bayes factors and posterior model
    probabilities whose intervals carry the estimators' standard errors.

    Each model is a finished :class:`~numpyro.infer.MCMC` run or an
    :class:`~numpyro_extras.Evidence` (from :func:`~numpyro_extras.ais`, say). A run of a
    kernel that estimates ``log Z`` (continuous tempering, replica exchange, VAE-SLMC) gives its
    own (:func:`~numpyro_extras.log_marginal_likelihood`); a run of any other kernel over
    continuous sites (NUTS, HMC, the Ai-sampler) is bridged
    (:func:`~numpyro_extras.bridge_sampling`, its checks included). The posterior probabilities are
    ``softmax(log_z + log prior_prob)``; their interval is that of the same probabilities over
    ``num_draws`` simulated sets of estimates, each ``log_z`` drawn from a normal with its
    standard error, independently between models.

    :param dict models: name to finished run or :class:`~numpyro_extras.Evidence`.
    :param dict prior_probs: name to prior probability (normalised here); default uniform.
    :param float ci_prob: the probability mass of the posterior-probability interval.
    :param int num_draws: simulated sets of estimates behind the interval.
    :param int seed: seed of that simulation (the same seed gives the same table).
    :return: a :class:`pandas.DataFrame` indexed by model name, best ``log_z`` first, with the
        columns ``rank`` (0 for the best), ``log_z``, ``stderr``, ``log_bf`` (``log_z`` minus
        the best's; 0 for the best), ``log_bf_stderr`` (the standard error of that difference),
        ``prior_prob``, ``posterior_prob``, ``posterior_prob_lower``, ``posterior_prob_upper``
        and ``warning`` (the problems each estimator's checks found, ``""`` when none). When a
        model's standard error is not finite no model gets an interval (NaN): every probability
        depends on every estimate. ``table.attrs["ci_prob"]`` records ``ci_prob``.
    :raises TypeError: for a model that is neither a finished run nor an ``Evidence``.

    **Example:**

    .. code-block:: python

        # finished runs (of NUTS too: bridged), and an Evidence (from nx.ais, say)
        table = nx.compare(
            {"tempering": mcmc, "exchange": exchange_mcmc, "ais": nx.Evidence(-3.2, 0.05)}
        )
        table[["log_z", "stderr", "log_bf", "posterior_prob"]]
    """
    if not isinstance(models, Mapping) or not models:
        raise TypeError(
            "compare: models must be a non-empty dict of finished MCMC runs or nx.Evidence "
            f"values by model name, got {models!r:.80}."
        )
    ci_prob = check_real("ci_prob", ci_prob, "a probability in (0, 1)", low=0.0, high=1.0)
    num_draws = check_count("num_draws", num_draws)
    names = list(models)
    evidences = [_evidence_of(name, value) for name, value in models.items()]
    log_z = np.array([float(evidence.log_z) for evidence in evidences])
    stderr = np.array([float(evidence.stderr) for evidence in evidences])
    if not np.all(np.isfinite(log_z)):
        bad = [name for name, value in zip(names, log_z, strict=True) if not np.isfinite(value)]
        raise ValueError(f"compare: the log Z of {bad} is not a finite number.")
    prior_log_probs = _prior_log_probs(names, prior_probs)

    posterior = softmax(log_z + prior_log_probs)
    rng = np.random.default_rng(seed)
    usable = np.isfinite(stderr) & (stderr >= 0)
    simulated = log_z + np.where(usable, stderr, 0.0) * rng.standard_normal((num_draws, len(names)))
    simulated_posterior = softmax(simulated + prior_log_probs, axis=1)
    tail = (1 - ci_prob) / 2
    lower, upper = np.quantile(simulated_posterior, [tail, 1 - tail], axis=0)
    if not usable.all():
        # Every probability depends on every estimate: with one error unknown, no interval holds.
        lower, upper = np.full_like(lower, np.nan), np.full_like(upper, np.nan)

    best = int(np.argmax(log_z))
    log_bf_stderr = np.hypot(stderr, stderr[best])
    log_bf_stderr[best] = 0.0
    warning_texts = []
    for evidence, ok in zip(evidences, usable, strict=True):
        problems = list(evidence.problems)
        if not ok:
            problems.append("no finite standard error, so no model gets a probability interval")
        warning_texts.append("; ".join(problems))
    table = pd.DataFrame(
        {
            "log_z": log_z,
            "stderr": stderr,
            "log_bf": log_z - log_z[best],
            "log_bf_stderr": log_bf_stderr,
            "prior_prob": np.exp(prior_log_probs - logsumexp(prior_log_probs)),
            "posterior_prob": posterior,
            "posterior_prob_lower": lower,
            "posterior_prob_upper": upper,
            "warning": warning_texts,
        },
        index=pd.Index(names, name="model"),
    )
    table = table.sort_values("log_z", ascending=False, kind="stable")
    table.insert(0, "rank", np.arange(len(table)))
    table.attrs["ci_prob"] = ci_prob
    return table[COLUMNS]


def plot_compare(table, axes=None):
    """Plot a :func:`compare` table in the look of :func:`arviz.plot_compare`: each model's log
    Bayes factor against the best with an error bar of two standard errors, and its posterior
    probability with its interval; the best model on top.

    :param table: the :class:`pandas.DataFrame` of :func:`compare`.
    :param axes: two matplotlib axes to draw on (default: a new figure).
    :return: the two axes.

    **Example:**

    .. code-block:: python

        axes = nx.plot_compare(nx.compare({"tempering": mcmc, "exchange": exchange_mcmc}))
    """
    plt = pyplot("plot_compare")

    missing = [column for column in COLUMNS if column not in getattr(table, "columns", ())]
    if missing:
        raise TypeError(f"plot_compare: expected a table of nx.compare, missing {missing}.")
    if axes is None:
        _, axes = plt.subplots(
            1, 2, figsize=(9, 1.0 + 0.5 * len(table)), sharey=True, layout="constrained"
        )
    bf_axis, prob_axis = axes
    positions = np.arange(len(table))[::-1]
    warned = table["warning"].astype(bool).to_numpy()
    colors = np.where(warned, "C3", "k")
    for position, row, color in zip(positions, table.itertuples(), colors, strict=True):
        bf_axis.errorbar(
            row.log_bf, position, xerr=2 * row.log_bf_stderr, fmt="o", color=color, capsize=3
        )
        error = np.array(
            [
                [row.posterior_prob - row.posterior_prob_lower],
                [row.posterior_prob_upper - row.posterior_prob],
            ]
        )
        prob_axis.errorbar(
            row.posterior_prob,
            position,
            xerr=None if np.isnan(error).any() else error,
            fmt="o",
            color=color,
            capsize=3,
        )
    bf_axis.axvline(0.0, color="0.5", linestyle="--", linewidth=1)
    bf_axis.set_yticks(positions, table.index)
    bf_axis.set_xlabel("log Bayes factor against the best (± 2 stderr)")
    ci_prob = table.attrs.get("ci_prob", float("nan"))
    prob_axis.set_xlim(-0.02, 1.02)
    prob_axis.set_xlabel(f"posterior model probability ({ci_prob:.0%} interval)")
    if warned.any():
        bf_axis.set_title("red: the estimator's checks found problems", fontsize="small")
    return axes
