"""Bridge sampling of finished runs against exact references and against the package's own
estimators on the same runs.

Per model, one run of each kernel at its defaults, ``MCMC(kernel(model), num_warmup=1000,
num_samples=2000, num_chains=4, chain_method="vectorized")``, then ``nx.bridge_sampling(mcmc)``
at its defaults on it (and, for the estimating kernels, ``nx.log_marginal_likelihood(mcmc)``);
``nx.ais`` at the README's call beside them. The models and their references:

- ``regression``: Bayesian linear regression, N = 50, P = 5 (closed form);
- ``schools``: eight schools, non-centred (two-dimensional quadrature over ``mu`` and ``tau``);
- ``radon``: the README's hierarchical regression (three-dimensional quadrature);
- ``german``: logistic regression of the German credit data, 25 coefficients (Laplace mode and
  10^6 Student-t importance draws, NumPy and SciPy only: ``german_credit_benchmark.py``);
- ``two_mode``: ``x ~ N(1, 3)``, ``y_i ~ N(x^2, 1)``, two modes of unequal mass (quadrature);
  plus a NUTS run whose chains all start in one mode (``init_to_value(x=3)``), which must warn.

Each row gives the estimate, its stderr, the error in stderrs, the seconds of the bridge call
(its compilation and mode search included) beside the run's, and the warnings.

``--calibration N`` instead bridges N NUTS runs (seeds 0 to N - 1) of each chosen model with
an exact reference and reports how often the error is within 1 and 2 standard errors, and the
errors' root mean square in standard errors (1 for a calibrated error bar).

Usage::

    python benchmarks/bridge_benchmark.py --output bridge.md
    python benchmarks/bridge_benchmark.py --models regression two_mode --kernels NUTS
    python benchmarks/bridge_benchmark.py --models regression schools --calibration 12
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, NUTS, init_to_value
from scipy import integrate, stats

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import environment_lines, markdown_table, publish_report, readme_ais  # noqa: E402
from exchange_benchmark import problems as exchange_problems  # noqa: E402
from german_credit_benchmark import reference_log_evidence  # noqa: E402

import numpyro_extras as nx  # noqa: E402
from numpyro_extras.targets import load_german_credit, logistic_regression_model  # noqa: E402

KERNELS = ("NUTS", "JointContinuousTempering", "ReplicaExchange", "ais")
MODELS = ("regression", "schools", "radon", "german", "two_mode")
TWO_MODE_DATA = np.array([8.6, 9.4, 9.1])


def two_mode_model(y):
    x = numpyro.sample("x", dist.Normal(1.0, 3.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(x**2, 1.0), obs=y)


def two_mode_log_z():
    def joint(x):
        return stats.norm.pdf(x, 1.0, 3.0) * np.prod(stats.norm.pdf(TWO_MODE_DATA, x**2, 1.0))

    value = sum(
        integrate.quad(joint, low, high, epsabs=0, epsrel=1e-12, limit=500)[0]
        for low, high in ((-20, -1), (-1, 1), (1, 20))
    )
    return math.log(value)


def problem_list(models):
    chosen = {}
    by_key = dict(zip(("regression", "schools", "radon"), exchange_problems(False), strict=True))
    for name in models:
        if name in by_key:
            chosen[name] = by_key[name]
        elif name == "german":
            features, labels = load_german_credit()
            reference = reference_log_evidence(np.asarray(features), np.asarray(labels), 10**6)
            chosen[name] = dict(
                name="German credit, 25 coefficients",
                model=logistic_regression_model,
                args=(features, labels),
                kwargs={},
                truth=(reference["log_z"], reference["stderr"]),
            )
        else:
            chosen[name] = dict(
                name="Two-mode regression",
                model=two_mode_model,
                args=(jnp.asarray(TWO_MODE_DATA),),
                kwargs={},
                truth=(two_mode_log_z(), 0.0),
            )
    return chosen


def run(kernel, problem, seed=0):
    mcmc = MCMC(
        kernel,
        num_warmup=1000,
        num_samples=2000,
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    start = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(seed), *problem["args"], **problem["kwargs"])
    jax.block_until_ready(mcmc.get_samples())
    return mcmc, time.perf_counter() - start


def _row(problem, label, estimator, evidence, seconds, run_seconds, caught):
    truth, truth_stderr = problem["truth"]
    error = evidence.log_z - truth
    combined = math.hypot(evidence.stderr, truth_stderr)
    # The estimators' own problems in full; other warnings (the run's) shortened.
    warned = list(evidence.problems) + sorted(
        {
            str(w.message)[:160]
            for w in caught
            if not any(problem in str(w.message) for problem in evidence.problems)
        }
    )
    return [
        problem["name"],
        label,
        estimator,
        f"{evidence.log_z:.4f} ± {evidence.stderr:.4f}",
        f"{error:+.4f}",
        f"{error / combined:+.1f}" if combined > 0 else "-",
        f"{seconds:.1f}",
        "-" if math.isnan(run_seconds) else f"{run_seconds:.1f}",
        "; ".join(warned) if warned else "none",
    ]


def measured(function):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        value = function()
        return value, time.perf_counter() - start, caught


def rows_for(problem, kernels):
    rows = []
    model = problem["model"]
    for kernel_name in kernels:
        if kernel_name == "ais":
            evidence, seconds, caught = measured(
                lambda: readme_ais(0, model, problem["args"], problem["kwargs"])
            )
            rows.append(_row(problem, "nx.ais", "AIS", evidence, seconds, float("nan"), caught))
            continue
        if kernel_name == "NUTS":
            kernel = NUTS(model)
        else:
            kernel = getattr(nx, kernel_name)(model)
        (mcmc, run_seconds), _, run_caught = measured(lambda kernel=kernel: run(kernel, problem))
        evidence, seconds, caught = measured(lambda mcmc=mcmc: nx.bridge_sampling(mcmc))
        rows.append(_row(problem, kernel_name, "bridge", evidence, seconds, run_seconds, caught))
        if kernel_name != "NUTS":
            own, seconds, caught = measured(lambda mcmc=mcmc: nx.log_marginal_likelihood(mcmc))
            rows.append(_row(problem, kernel_name, "own", own, seconds, run_seconds, caught))
    if problem["name"] == "Two-mode regression" and "NUTS" in kernels:
        stuck = NUTS(model, init_strategy=init_to_value(values={"x": 3.0}))
        (mcmc, run_seconds), _, _ = measured(lambda: run(stuck, problem))
        evidence, seconds, caught = measured(lambda: nx.bridge_sampling(mcmc))
        rows.append(
            _row(
                problem,
                "NUTS, chains started at x = 3",
                "bridge",
                evidence,
                seconds,
                run_seconds,
                caught,
            )
        )
    return rows


def calibration_rows(problem, num_seeds):
    """Per seed, a NUTS run at the defaults and its bridge estimate's error in standard errors."""
    z_scores = []
    mcmc = None
    for seed in range(num_seeds):
        if mcmc is None:
            mcmc, _ = run(NUTS(problem["model"]), problem, seed)
        else:
            mcmc.run(jax.random.PRNGKey(seed), *problem["args"], **problem["kwargs"])
        evidence = nx.bridge_sampling(mcmc, warn=False, seed=seed)
        z_scores.append((evidence.log_z - problem["truth"][0]) / evidence.stderr)
        print(f"  seed {seed}: {evidence}, z {z_scores[-1]:+.2f}", file=sys.stderr, flush=True)
    z_scores = np.array(z_scores)
    return [
        problem["name"],
        str(num_seeds),
        f"{np.mean(np.abs(z_scores) < 1):.2f}",
        f"{np.mean(np.abs(z_scores) < 2):.2f}",
        f"{math.sqrt(np.mean(z_scores**2)):.2f}",
        f"{np.mean(z_scores):+.2f}",
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=KERNELS)
    parser.add_argument("--output", help="also write the Markdown report here")
    parser.add_argument("--calibration", type=int, metavar="N", help="N NUTS runs per model")
    arguments = parser.parse_args(argv)
    numpyro.enable_x64()
    start = time.perf_counter()
    if arguments.calibration:
        rows = [
            calibration_rows(problem, arguments.calibration)
            for problem in problem_list(arguments.models).values()
        ]
        header = [
            "model",
            "NUTS runs",
            "within 1 stderr",
            "within 2 stderr",
            "RMS error / stderr",
            "mean error / stderr",
        ]
        title = "Calibration of the error bar (NUTS at its defaults, one run per seed)"
        publish_report(_report(argv, start, title, header, rows), arguments.output)
        return
    rows = []
    for name, problem in problem_list(arguments.models).items():
        print(f"{name}: {problem['truth'][0]:.4f}", file=sys.stderr, flush=True)
        rows += rows_for(problem, arguments.kernels)
        print(markdown_table(HEADER, rows[-1:]), file=sys.stderr, flush=True)
    title = "log Z from each run (reference: closed form, quadrature or importance sampling)"
    publish_report(_report(argv, start, title, HEADER, rows), arguments.output)


def _report(argv, start, title, header, rows):
    """The Markdown report: the run's environment, then one titled table."""
    return "\n".join(
        [
            "#### Environment",
            "",
            *environment_lines(
                "bridge_benchmark.py", argv or sys.argv[1:], time.perf_counter() - start
            ),
            "",
            f"#### {title}",
            "",
            markdown_table(header, rows),
        ]
    )


HEADER = [
    "model",
    "run",
    "estimator",
    "log Z",
    "error",
    "error / stderr",
    "estimator (s)",
    "run (s)",
    "warnings",
]


if __name__ == "__main__":
    main()
