"""The conformance suite's zoo: small NumPyro models with exact answers.

Every answer is an expectation of a statistic of one posterior draw (a coordinate, an
indicator of a mode, a deviation from a symmetric average) whose exact value comes from
quadrature, enumeration or a closed form, so that one check (:class:`Check`) serves every model:
the sample mean of the statistic against its exact value, in units of its Monte Carlo standard
error. Where the model's log normalizer is known, ``log_z`` holds it (the log marginal
likelihood of the model on NumPyro's unconstrained space, Jacobians included, which is the same
number as on the constrained space).

Models and answers that exist elsewhere in the repository are imported, not copied: the
latency benchmark's zoo (``benchmarks/latency_benchmark.py``: the two-mode regression, the
mixture with unknown means, the non-centred eight schools, Neal's funnel, the Ising chain, with
their quadrature and enumeration), the built-in targets (the 1-D bimodal mixture with its
``numpyro.factor`` scale, linear regression's closed-form evidence) and the VAE-SLMC tests' 2-D
mixture (``tests/slmc/slmc_targets.py``).
"""

from __future__ import annotations

import itertools
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from scipy.special import log_ndtr, logsumexp

from numpyro_extras.targets import (
    BIMODAL_LOCS,
    BIMODAL_WEIGHTS,
    bimodal_model,
    linear_regression_log_evidence,
    make_linear_regression_data,
)

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _folder in (os.path.join(os.path.dirname(_TESTS), "benchmarks"), os.path.join(_TESTS, "slmc")):
    if _folder not in sys.path:
        sys.path.append(_folder)

import latency_benchmark  # noqa: E402
import slmc_targets  # noqa: E402

CONTINUOUS, DISCRETE, MIXED = "continuous", "discrete", "mixed"


@dataclass(frozen=True)
class Check:
    """``E[statistic(draw)] = exact`` under the posterior.

    :param name: what is checked, for the failure message.
    :param statistic: ``samples -> values``: the site values with leading ``(chain, draw)``
        axes to one value per draw, shape ``(chain, draw)``.
    :param exact: the exact posterior expectation.
    :param max_stderr: the largest Monte Carlo standard error at which the check still tells a
        working sampler from a broken one (one stuck in a mode, or in one labelling, or biased
        by a good fraction of a posterior standard deviation): a run less precise than this
        fails whatever its estimate.
    """

    name: str
    statistic: Callable
    exact: float
    max_stderr: float


@dataclass(frozen=True)
class ZooModel:
    """One model of the zoo.

    :param name: its id in the parametrised tests.
    :param model: the NumPyro model.
    :param args: its arguments.
    :param kind: ``"continuous"``, ``"discrete"`` or ``"mixed"`` (the latent sites' kinds).
    :param checks: the :class:`Check` s of its posterior.
    :param log_z: the exact log normalizer, or ``None`` where none is known.
    :param other_args: a second data set of the same shapes, for ``jit_model_args=True``, with
        the checks and the log Z that hold for it.
    """

    name: str
    model: Callable
    args: tuple
    kind: str
    checks: tuple
    log_z: float | None = None
    other_args: tuple | None = None
    other_checks: tuple = field(default=())
    other_log_z: float | None = None


def _site(name, index=None):
    """The statistic reading one coordinate of one site."""
    if index is None:
        return lambda samples: np.asarray(samples[name], np.float64)
    return lambda samples: np.asarray(samples[name], np.float64)[..., index]


def _quadrature(log_density, grid):
    """``(log Z, normalised weights)`` of ``exp(log_density)`` on an evenly spaced 1-D grid
    (the trapezoid rule, which is spectrally accurate for a smooth density that is negligible
    at both ends of the grid)."""
    log_total = logsumexp(log_density)
    return float(log_total + math.log(grid[1] - grid[0])), np.exp(log_density - log_total)


# --- 1-D: two modes of unequal weight -------------------------------------------------------
# x ~ N(1, 3), y_i ~ N(x^2, 1), three observations near 9: modes near +-3 with sd about 0.1;
# the prior's mean of 1 makes the right one heavier. P(x > 0) and log Z by the benchmark's
# quadrature, E[x] by the same on its grid.


def _two_mode():
    model, args = latency_benchmark.model_and_data("two_mode_regression")
    right, log_z = latency_benchmark.two_mode_quadrature()
    y = np.asarray(args[0])
    grid = np.linspace(-8, 10, 360_001)
    log_density = -0.5 * ((grid - 1.0) / 3.0) ** 2 - 0.5 * np.sum(
        (y[:, None] - grid[None] ** 2) ** 2, axis=0
    )
    _, weights = _quadrature(log_density, grid)
    mean = float(weights @ grid)
    sd = math.sqrt(float(weights @ grid**2) - mean**2)
    checks = (
        Check("P(x > 0)", lambda s: np.asarray(s["x"]) > 0, right, 0.05),
        Check("E[x]", _site("x"), mean, 0.1 * sd),
    )
    return ZooModel("two_mode", model, args, CONTINUOUS, checks, log_z)


# --- 1-D: two far modes with a numpyro.factor term ------------------------------------------
# 0.6 N(-8, 1) + 0.4 N(8, 2^2) times exp(log_scale) by a numpyro.factor site: log Z = log_scale.

BIMODAL_LOG_SCALE = 2.0


def _bimodal_factor():
    left = BIMODAL_WEIGHTS[0]
    mean = float(np.dot(BIMODAL_WEIGHTS, BIMODAL_LOCS))
    checks = (
        Check("P(x < 0)", lambda s: np.asarray(s["x"]) < 0, left, 0.05),
        Check("E[x]", _site("x"), mean, 0.8),
    )
    return ZooModel(
        "bimodal_factor",
        bimodal_model,
        (BIMODAL_LOG_SCALE,),
        CONTINUOUS,
        checks,
        BIMODAL_LOG_SCALE,
    )


# --- 2-D: two far modes of unequal weight ----------------------------------------------------
# slmc_targets.mixture_model: WEIGHT at (-2, -2), the rest at (2, 2), sd 0.3 (19 sd apart),
# normalised and shifted by a numpyro.factor to log Z = log_z.

MIXTURE_2D_LOG_Z = -1.5


def _mixture_2d():
    weight = slmc_targets.WEIGHT
    checks = (
        Check("P(x_0 < 0)", lambda s: np.asarray(s["x"])[..., 0] < 0, weight, 0.05),
        Check("E[x_1]", _site("x", 1), -2 * weight + 2 * (1 - weight), 0.2),
    )
    return ZooModel(
        "mixture_2d",
        slmc_targets.mixture_model,
        (MIXTURE_2D_LOG_Z,),
        CONTINUOUS,
        checks,
        MIXTURE_2D_LOG_Z,
    )


# --- logistic regression, exact by 2-D quadrature ----------------------------------------------
# An intercept and one slope, 60 labels: small enough for a quadrature grid, so every moment
# and log Z are exact.


def logistic_model(features, labels):
    intercept = numpyro.sample("intercept", dist.Normal(0.0, 2.0))
    slope = numpyro.sample("slope", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", features.shape[0]):
        numpyro.sample("labels", dist.Bernoulli(logits=intercept + slope * features), obs=labels)


def _logistic_data(seed):
    rng = np.random.default_rng(seed)
    features = rng.standard_normal(60)
    labels = (rng.uniform(size=60) < 1 / (1 + np.exp(-(0.5 + 1.2 * features)))).astype(float)
    return features, labels


def _logistic_exact(features, labels):
    """Posterior means, sds and log Z of :func:`logistic_model` on a 2-D grid."""
    a = np.linspace(-4.0, 5.0, 451)
    b = np.linspace(-3.0, 6.0, 451)
    intercept, slope = np.meshgrid(a, b, indexing="ij")
    logits = intercept[..., None] + slope[..., None] * features
    log_likelihood = np.sum(labels * logits - np.logaddexp(0.0, logits), axis=-1)
    log_density = (
        log_likelihood
        - 0.5 * (intercept / 2.0) ** 2
        - math.log(2.0 * math.sqrt(2 * math.pi))
        - 0.5 * slope**2
        - 0.5 * math.log(2 * math.pi)
    )
    log_total = logsumexp(log_density)
    weights = np.exp(log_density - log_total)
    # The density must be negligible at the grid's edges for the rule to be exact.
    edge = max(weights[0].max(), weights[-1].max(), weights[:, 0].max(), weights[:, -1].max())
    assert edge < 1e-12, edge
    log_z = float(log_total + math.log((a[1] - a[0]) * (b[1] - b[0])))
    moments = {}
    for name, values in (("intercept", intercept), ("slope", slope)):
        mean = float(np.sum(weights * values))
        moments[name] = (mean, math.sqrt(float(np.sum(weights * values**2)) - mean**2))
    return moments, log_z


def _logistic_checks(moments):
    return tuple(
        Check(f"E[{name}]", _site(name), mean, 0.1 * sd) for name, (mean, sd) in moments.items()
    )


def _logistic():
    features, labels = _logistic_data(0)
    moments, log_z = _logistic_exact(features, labels)
    other = _logistic_data(1)
    other_moments, other_log_z = _logistic_exact(*other)
    return ZooModel(
        "logistic",
        logistic_model,
        (jnp.asarray(features), jnp.asarray(labels)),
        CONTINUOUS,
        _logistic_checks(moments),
        log_z,
        other_args=tuple(jnp.asarray(value) for value in other),
        other_checks=_logistic_checks(other_moments),
        other_log_z=other_log_z,
    )


# --- a mixture with unknown means: label switching -------------------------------------------
# Three unit-variance components, equal weights, 60 points around -4, 0, 4. The posterior is
# symmetric under relabelling, so each mean's posterior mean equals that of the three means'
# average: E[means_k - average] = 0 exactly. A sampler that keeps one labelling is off by ~4.


def _mixture_means():
    model, args = latency_benchmark.model_and_data("mixture_means")
    checks = tuple(
        Check(
            f"E[means_{k} - mean(means)]",
            lambda s, k=k: np.asarray(s["means"])[..., k] - np.asarray(s["means"]).mean(-1),
            0.0,
            0.5,
        )
        for k in range(3)
    )
    return ZooModel("mixture_means", model, args, CONTINUOUS, checks)


# --- eight schools, centred and non-centred ------------------------------------------------
# Given tau the model is linear and Gaussian: y ~ N(0, 25 11^T + diag(sigma^2 + tau^2)) with mu
# and theta integrated out, so log Z and every posterior mean are 1-D integrals over tau.

EIGHT_SCHOOLS_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
EIGHT_SCHOOLS_SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def eight_schools_centred(sigma, y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    with numpyro.plate("schools", y.shape[0]):
        theta = numpyro.sample("theta", dist.Normal(mu, tau))
        numpyro.sample("obs", dist.Normal(theta, sigma), obs=y)


def _eight_schools_exact():
    """``(posterior means and sds by name, log Z)``: mu, tau, log tau, theta_0 and eta_0."""
    y, sigma = EIGHT_SCHOOLS_Y, EIGHT_SCHOOLS_SIGMA
    log_tau = np.linspace(-25.0, 15.0, 400_001)
    tau = np.exp(log_tau)[:, None]
    variance = sigma**2 + tau**2  # (grid, school)
    # mu | tau, y ~ N(m, v); log p(y | tau) by the Sherman-Morrison form of the marginal.
    precision = 1 / 25.0 + np.sum(1 / variance, 1)
    v = 1 / precision
    m = v * np.sum(y / variance, 1)
    log_det = np.sum(np.log(variance), 1) + np.log(1 + 25.0 * np.sum(1 / variance, 1))
    quadratic = np.sum(y**2 / variance, 1) - m**2 * precision
    log_marginal = -0.5 * (quadratic + log_det + y.size * math.log(2 * math.pi))
    half_cauchy = math.log(2 / (math.pi * 5.0)) - np.log1p((tau[:, 0] / 5.0) ** 2)
    # The density of log tau: the Jacobian tau.
    log_z, weights = _quadrature(log_marginal + half_cauchy + log_tau, log_tau)
    assert weights[0] < 1e-14 and weights[-1] < 1e-14
    tau = tau[:, 0]
    # E[theta_0 | tau, y] and E[eta_0 | tau, y] with eta_0 = (theta_0 - mu) / tau.
    shrink = tau**2 / (tau**2 + sigma[0] ** 2)
    theta_0 = m + shrink * (y[0] - m)
    eta_0 = (y[0] - m) * tau / (tau**2 + sigma[0] ** 2)
    # Conditional variances for the sds (the tolerances' scale): theta_0 | mu, tau, y is
    # N(shrink y_0 + (1 - shrink) mu, sigma_0^2 shrink) and mu | tau, y is N(m, v).
    theta_var = (1 - shrink) ** 2 * v + sigma[0] ** 2 * shrink
    eta_var = (shrink**2 * v + sigma[0] ** 2 * shrink) / tau**2
    answers = {}
    for name, mean_given_tau, var_given_tau in (
        ("mu", m, v),
        ("tau", tau, 0.0),
        ("log_tau", log_tau, 0.0),
        ("theta_0", theta_0, theta_var),
        ("eta_0", eta_0, eta_var),
    ):
        mean = float(weights @ mean_given_tau)
        second = float(weights @ (mean_given_tau**2 + var_given_tau))
        answers[name] = (mean, math.sqrt(second - mean**2))
    return answers, log_z


def _eight_schools(centred):
    answers, log_z = _eight_schools_exact()
    statistics = {
        "mu": _site("mu"),
        "tau": _site("tau"),
        "log_tau": lambda s: np.log(np.asarray(s["tau"], np.float64)),
    }
    if centred:
        model = eight_schools_centred
        args = (jnp.asarray(EIGHT_SCHOOLS_SIGMA), jnp.asarray(EIGHT_SCHOOLS_Y))
        statistics["theta_0"] = _site("theta", 0)
    else:
        model, args = latency_benchmark.model_and_data("eight_schools")
        statistics["eta_0"] = _site("eta", 0)
    checks = tuple(
        Check(f"E[{name}]", statistic, answers[name][0], 0.1 * answers[name][1])
        for name, statistic in statistics.items()
    )
    name = "eight_schools_centred" if centred else "eight_schools_noncentred"
    return ZooModel(name, model, args, CONTINUOUS, checks, log_z)


# --- Neal's funnel -----------------------------------------------------------------------------
# v ~ N(0, 3), five x_i ~ N(0, exp(v / 2)): v's marginal is its prior, log Z = 0. The neck
# (v below its 5% quantile) is where samplers lose mass.


def _funnel():
    model, args = latency_benchmark.model_and_data("funnel")
    checks = (
        Check("E[v]", _site("v"), 0.0, 0.3),
        Check("E[v^2]", lambda s: np.asarray(s["v"], np.float64) ** 2, 9.0, 1.3),
        Check(
            "P(v < q_0.05)",
            lambda s: np.asarray(s["v"]) < latency_benchmark.FUNNEL_V_Q05,
            0.05,
            0.012,
        ),
    )
    return ZooModel("funnel", model, args, CONTINUOUS, checks, 0.0)


# --- discrete: an Ising chain of Bernoulli sites, exact by enumeration -------------------------


def _indicator_checks(name, marginals, indices):
    """``P(name_i = 1)`` of binary sites, each to a tenth of its posterior sd."""
    return tuple(
        Check(
            f"P({name}_{i} = 1)",
            _site(name, i),
            float(marginals[i]),
            0.1 * math.sqrt(marginals[i] * (1 - marginals[i])),
        )
        for i in indices
    )


def _ising():
    model, args = latency_benchmark.model_and_data("ising_chain")
    marginals, log_z = latency_benchmark.ising_enumeration()
    checks = _indicator_checks("spins", marginals, (0, 4)) + (
        Check(
            "E[sum(spins)]",
            lambda s: np.asarray(s["spins"], np.float64).sum(-1),
            float(marginals.sum()),
            0.3,
        ),
    )
    return ZooModel("ising_chain", model, args, DISCRETE, checks, log_z)


# --- mixed discrete and continuous: outlier indicators with an unknown location ----------------
# z_i ~ Bernoulli(0.3) marks observation i as shifted by SHIFT; mu ~ N(0, 2); y_i ~ N(mu +
# SHIFT z_i, 1). Exact by enumerating the 2^4 indicator vectors, mu integrated out.

MIXED_Y = np.array([0.1, 1.5, 3.1, 3.4])
MIXED_SHIFT = 3.0


def mixed_model(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 2.0))
    with numpyro.plate("data", y.shape[0]):
        z = numpyro.sample("z", dist.Bernoulli(0.3))
        numpyro.sample("y", dist.Normal(mu + MIXED_SHIFT * z, 1.0), obs=y)


def _mixed_exact():
    y = MIXED_Y
    n = y.size
    states = np.array(list(itertools.product([0, 1], repeat=n)), float)
    covariance = np.eye(n) + 4.0 * np.ones((n, n))
    inverse = np.linalg.inv(covariance)
    log_det = np.linalg.slogdet(2 * np.pi * covariance)[1]
    residuals = y - MIXED_SHIFT * states  # (state, n)
    log_evidence = -0.5 * np.einsum("si,ij,sj->s", residuals, inverse, residuals) - 0.5 * log_det
    log_prior = states.sum(1) * math.log(0.3) + (n - states.sum(1)) * math.log(0.7)
    log_joint = log_prior + log_evidence
    log_z = float(logsumexp(log_joint))
    p = np.exp(log_joint - log_z)
    # mu | z, y ~ N(sum(r) / (n + 1/4), 1 / (n + 1/4)).
    mu_mean = residuals.sum(1) / (n + 0.25)
    mu_var = 1 / (n + 0.25)
    mean = float(p @ mu_mean)
    sd = math.sqrt(float(p @ (mu_mean**2 + mu_var)) - mean**2)
    return p @ states, mean, sd, log_z


def _mixed():
    marginals, mu_mean, mu_sd, log_z = _mixed_exact()
    checks = _indicator_checks("z", marginals, (1, 2)) + (
        Check("E[mu]", _site("mu"), mu_mean, 0.1 * mu_sd),
    )
    return ZooModel("mixed", mixed_model, (jnp.asarray(MIXED_Y),), MIXED, checks, log_z)


# --- value-dependent support: a truncated site whose bound is another latent --------------------
# theta ~ N(0, 1); x ~ N(0, 1) truncated to x > theta (its support moves with theta, and so does
# its unconstrained transform); y ~ N(x, 0.5) observed. Exact by 2-D quadrature.

TRUNCATED_Y = 1.0


def truncated_model(y):
    theta = numpyro.sample("theta", dist.Normal(0.0, 1.0))
    x = numpyro.sample("x", dist.TruncatedNormal(0.0, 1.0, low=theta))
    numpyro.sample("y", dist.Normal(x, 0.5), obs=y)


def _truncated_exact():
    """Posterior means and sds of theta and x, and log Z. Given theta, x's density times the
    likelihood is N(x; 0, 1) N(y; x, 0.5) / Phi(-theta) on x > theta, and N(x; 0, 1) N(y; x, 0.5)
    = N(y; 0, sqrt(1.25)) N(x; c, s) with c = 0.8 y, s^2 = 0.2: the integral over x is closed
    form (a normal tail and its first two moments), which leaves a smooth 1-D integral over
    theta (a 2-D grid would straddle the support's edge and be only first-order accurate)."""
    theta = np.linspace(-12.0, 8.0, 200_001)
    c, s = 0.8 * TRUNCATED_Y, math.sqrt(0.2)
    alpha = (c - theta) / s
    log_mass = log_ndtr(alpha)  # log P(x > theta) under N(c, s)
    log_y = -0.5 * TRUNCATED_Y**2 / 1.25 - 0.5 * math.log(2 * math.pi * 1.25)
    log_prior = -0.5 * theta**2 - 0.5 * math.log(2 * math.pi)
    log_z, weights = _quadrature(log_prior - log_ndtr(-theta) + log_mass + log_y, theta)
    assert weights[0] < 1e-14 and weights[-1] < 1e-14
    # The mean and second moment of x | theta: a normal truncated below at theta.
    ratio = np.exp(-0.5 * alpha**2 - 0.5 * math.log(2 * math.pi) - log_mass)  # phi / Phi
    x_mean = c + s * ratio
    x_second = c**2 + s**2 + s * (c + theta) * ratio
    answers = {}
    for name, first, second in (("theta", theta, theta**2), ("x", x_mean, x_second)):
        mean = float(weights @ first)
        answers[name] = (mean, math.sqrt(float(weights @ second) - mean**2))
    return answers, log_z


def _truncated():
    answers, log_z = _truncated_exact()
    checks = tuple(
        Check(f"E[{name}]", _site(name), mean, 0.1 * sd) for name, (mean, sd) in answers.items()
    ) + (
        # The support itself: every draw of x above its draw of theta.
        Check(
            "P(x <= theta)",
            lambda s: np.asarray(s["x"]) <= np.asarray(s["theta"]),
            0.0,
            0.01,
        ),
    )
    return ZooModel("truncated", truncated_model, (TRUNCATED_Y,), CONTINUOUS, checks, log_z)


# --- a deterministic site and a plate: conjugate linear regression ----------------------------
# w ~ N(0, I_2); mean = deterministic X w; targets ~ N(mean, 1) in a plate. The posterior is
# N((I + X^T X)^-1 X^T y, (I + X^T X)^-1) and log Z is linear regression's closed form.


def regression_model(features, targets):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([features.shape[1]]).to_event(1))
    with numpyro.plate("data", features.shape[0]):
        mean = numpyro.deterministic("mean", features @ w)
        numpyro.sample("targets", dist.Normal(mean, 1.0), obs=targets)


def _regression_checks(features, targets):
    covariance = np.linalg.inv(np.eye(features.shape[1]) + features.T @ features)
    mean = covariance @ features.T @ targets
    sds = np.sqrt(np.diag(covariance))
    checks = [Check(f"E[w_{i}]", _site("w", i), float(mean[i]), 0.1 * sds[i]) for i in range(2)]
    mean_0_sd = math.sqrt(float(features[0] @ covariance @ features[0]))
    checks.append(Check("E[mean_0]", _site("mean", 0), float(features[0] @ mean), 0.1 * mean_0_sd))
    return tuple(checks)


def _regression():
    data = make_linear_regression_data(0, num_data=20, num_features=2)
    other = make_linear_regression_data(1, num_data=20, num_features=2)
    return ZooModel(
        "regression",
        regression_model,
        tuple(jnp.asarray(value) for value in data),
        CONTINUOUS,
        _regression_checks(*data),
        linear_regression_log_evidence(*data),
        other_args=tuple(jnp.asarray(value) for value in other),
        other_checks=_regression_checks(*other),
        other_log_z=linear_regression_log_evidence(*other),
    )


ZOO = {
    zoo_model.name: zoo_model
    for zoo_model in (
        _two_mode(),
        _bimodal_factor(),
        _mixture_2d(),
        _logistic(),
        _mixture_means(),
        _eight_schools(centred=True),
        _eight_schools(centred=False),
        _funnel(),
        _ising(),
        _mixed(),
        _truncated(),
        _regression(),
    )
}
