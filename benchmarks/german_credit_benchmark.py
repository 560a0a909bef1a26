"""Benchmark ``nx.ais`` at its defaults on Bayesian logistic regression of the German credit data.

The log evidence of ``targets.logistic_regression_model`` on ``targets.load_german_credit``
(N(0, 1) priors on every coefficient, 1000 observations) is computed twice:

* a **reference made without the package**, with NumPy and SciPy only: the mode of the log
  posterior (``scipy.optimize``, exact gradient and Hessian), then importance sampling from a
  multivariate Student-t (5 degrees of freedom) centred at the mode with the inverse Hessian as
  its scale matrix, ``10^6`` draws in chunks. Its heavier tails than the posterior's keep the
  importance weights bounded; the stderr (delta method) and the ESS of the weights are reported;
* ``nx.ais`` **exactly as a user calls it**, all defaults except ``num_particles=1000,
  num_temperatures=200`` (so the base is the default Gaussian VI fit), and the same with
  ``base="prior"``, over several seeds.

For 24 predictors + intercept (25 coefficients) and the first 8 predictors + intercept (9) it
prints a markdown table per seed: log Z, its error against the reference, stderr, ESS, and the
wall time of the first call (base fit, compilation and run, as a user meets it) and of an
identical second call (the fitted base and the compiled run come from the caches: the run
alone); their difference is the fit plus compilation. A run that ``nx.ais`` warned about (final
ESS below 5% of the particles) is flagged.

Usage::

    python benchmarks/german_credit_benchmark.py --quick        # smoke test, ~1 min on 2 cores
    python benchmarks/german_credit_benchmark.py --output report.md    # docs/benchmarks.md, ~8 min
    python benchmarks/german_credit_benchmark.py --seeds 0 1 --predictors 8
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys
import time
import warnings

import numpyro

# log Z to a few thousandths of a nat needs double precision; set it before any array exists.
numpyro.enable_x64()
import jax  # noqa: E402
import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.optimize  # noqa: E402
import scipy.special  # noqa: E402
import scipy.stats  # noqa: E402

import numpyro_extras as nx  # noqa: E402
from numpyro_extras.targets import load_german_credit, logistic_regression_model  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import elapsed_seconds, log, package_commit, publish_report  # noqa: E402

TARGET_ERROR = 0.05  # nats
TARGET_SECONDS = 30.0
STUDENT_DOF = 5.0
# ------------------------------------------------------------------------------------------------
# Reference: Laplace fit and Student-t importance sampling, NumPy and SciPy only
# ------------------------------------------------------------------------------------------------


def log_joint(coefficients, features, labels):
    """``log p(w) + log p(labels | w)`` for draws ``coefficients`` of shape ``(..., P)``."""
    logits = coefficients @ features.T
    log_likelihood = np.sum(labels * logits - np.logaddexp(0.0, logits), axis=-1)
    dimension = coefficients.shape[-1]
    log_prior = -0.5 * np.sum(coefficients**2, axis=-1) - 0.5 * dimension * math.log(2 * math.pi)
    return log_prior + log_likelihood


def reference_log_evidence(features, labels, num_draws, chunk_size=20_000, seed=0):
    """The reference log evidence and its diagnostics (see the module docstring)."""
    started = time.perf_counter()

    def negative_log_joint(w):
        return -float(log_joint(w, features, labels))

    def gradient(w):
        probabilities = scipy.special.expit(features @ w)
        return -(features.T @ (labels - probabilities) - w)

    def hessian(w):
        probabilities = scipy.special.expit(features @ w)
        curvature = probabilities * (1.0 - probabilities)
        return (features * curvature[:, None]).T @ features + np.eye(w.shape[0])

    # Newton's method with the exact Hessian: the log joint is strictly concave, so it converges
    # quadratically from zero, to a gradient far below what trust-region tolerances reach.
    mode = np.zeros(features.shape[1])
    for _ in range(100):
        step = np.linalg.solve(hessian(mode), gradient(mode))
        mode = mode - step
        if np.max(np.abs(gradient(mode))) < 1e-9:
            break
    else:
        raise RuntimeError("The mode search (Newton's method) did not converge.")
    precision = hessian(mode)
    dimension = mode.shape[0]
    laplace = (
        -negative_log_joint(mode)
        + 0.5 * dimension * math.log(2 * math.pi)
        - 0.5 * np.linalg.slogdet(precision)[1]
    )
    proposal = scipy.stats.multivariate_t(loc=mode, shape=np.linalg.inv(precision), df=STUDENT_DOF)
    rng = np.random.default_rng(seed)
    log_weights = []
    for start in range(0, num_draws, chunk_size):
        draws = proposal.rvs(size=min(chunk_size, num_draws - start), random_state=rng)
        draws = draws.reshape(-1, dimension)
        log_weights.append(log_joint(draws, features, labels) - proposal.logpdf(draws))
    log_weights = np.concatenate(log_weights)
    weights = np.exp(log_weights - log_weights.max())
    log_z = float(log_weights.max() + math.log(weights.mean()))
    stderr = float(weights.std(ddof=1) / (math.sqrt(weights.size) * weights.mean()))
    ess = float(weights.sum() ** 2 / np.sum(weights**2))
    return dict(
        log_z=log_z,
        stderr=stderr,
        ess=ess,
        num_draws=int(weights.size),
        laplace=float(laplace),
        seconds=time.perf_counter() - started,
    )


# ------------------------------------------------------------------------------------------------
# nx.ais as a user calls it
# ------------------------------------------------------------------------------------------------


def timed_ais(key, features, labels, settings):
    """One ``nx.ais`` call: its evidence, wall time and whether it warned about the ESS."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        started = time.perf_counter()
        evidence = nx.ais(key, logistic_regression_model, (features, labels), **settings)
        seconds = time.perf_counter() - started
    messages = [str(warning.message) for warning in caught]
    for message in messages:
        log(f"warning: {message}")
    warned = any("AIS final ESS" in message for message in messages)
    return evidence, seconds, warned


def run_rows(title, features, labels, reference, seeds, runs):
    rows = []
    for label, settings in runs:
        for seed in seeds:
            key = jax.random.PRNGKey(seed)
            evidence, first, warned = timed_ais(key, features, labels, settings)
            again, repeat, _ = timed_ais(key, features, labels, settings)
            if again.log_z != evidence.log_z:
                raise RuntimeError("An identical second call gave another estimate.")
            error = evidence.log_z - reference["log_z"]
            rows.append(
                dict(
                    model=title,
                    base=label,
                    seed=seed,
                    log_z=evidence.log_z,
                    error=error,
                    stderr=evidence.stderr,
                    ess=evidence.ess,
                    first=first,
                    repeat=repeat,
                    warned=warned,
                )
            )
            log(
                f"{title}, {label}, seed {seed}: error {error:+.4f} +- {evidence.stderr:.4f}, "
                f"ESS {evidence.ess:.0f}, {first:.1f} s then {repeat:.1f} s"
            )
    return rows


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------


def report(arguments, references, rows, settings_by_label, load_before, load_after, elapsed):
    versions = ", ".join(
        f"{module.__name__} {module.__version__}" for module in (jax, numpyro, nx, np, scipy)
    )
    lines = [
        "### Environment",
        "",
        f"- Command: `{' '.join(['python benchmarks/german_credit_benchmark.py', *arguments])}`",
        f"- Date: {datetime.datetime.now().isoformat(timespec='minutes')}",
        f"- Machine: {platform.machine()}, {os.cpu_count()} CPU cores, {platform.platform()}, "
        f"Python {platform.python_version()}, x64 enabled",
        f"- Load average (1 min) at start and end: {load_before:.1f}, {load_after:.1f}",
        f"- Versions: {versions} (repository commit {package_commit()})",
        "- Calls: "
        + "; ".join(
            f"{label}: `nx.ais(key, logistic_regression_model, (features, labels), "
            + ", ".join(f"{name}={value!r}" for name, value in settings.items())
            + ")`"
            for label, settings in settings_by_label.items()
        ),
        f"- Total wall time: {elapsed / 60:.1f} min",
        "",
        "### Reference log evidence (Laplace mode + Student-t importance sampling, NumPy/SciPy)",
        "",
        "| model | coefficients | reference log Z | stderr | draws | ESS | Laplace log Z | "
        "seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for title, (dimension, reference) in references.items():
        lines.append(
            f"| {title} | {dimension} | {reference['log_z']:.4f} | {reference['stderr']:.4f} | "
            f"{reference['num_draws']:.0e} | {reference['ess']:.3g} | "
            f"{reference['laplace']:.4f} | {reference['seconds']:.0f} |"
        )
    lines += [
        "",
        "### nx.ais per seed",
        "",
        "| model | base | seed | log Z | error | stderr | ESS | first call (s) | "
        "identical second call (s) | fit + compile (s) | ESS warning |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['model']} | {row['base']} | {row['seed']} | {row['log_z']:.4f} | "
            f"{row['error']:+.4f} | {row['stderr']:.4f} | {row['ess']:.0f} | {row['first']:.1f} | "
            f"{row['repeat']:.1f} | {row['first'] - row['repeat']:.1f} | "
            f"{'yes' if row['warned'] else 'no'} |"
        )
    lines += [
        "",
        "### Summary against the targets "
        f"(|error| < {TARGET_ERROR} nats, first call < {TARGET_SECONDS:.0f} s)",
        "",
        "| model | base | mean error | max abs error | mean stderr | mean ESS | "
        "max first call (s) | mean second call (s) | warned | targets |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for title in references:
        for label in settings_by_label:
            group = [row for row in rows if row["model"] == title and row["base"] == label]
            if not group:
                continue
            errors = np.array([row["error"] for row in group])
            worst_time = max(row["first"] for row in group)
            accurate = bool(np.max(np.abs(errors)) < TARGET_ERROR)
            fast = worst_time < TARGET_SECONDS
            verdict = (
                "met"
                if accurate and fast
                else (
                    "**not met**: "
                    + ", ".join(
                        text
                        for text, failed in (("error", not accurate), ("time", not fast))
                        if failed
                    )
                )
            )
            lines.append(
                f"| {title} | {label} | {errors.mean():+.4f} | {np.max(np.abs(errors)):.4f} | "
                f"{np.mean([row['stderr'] for row in group]):.4f} | "
                f"{np.mean([row['ess'] for row in group]):.0f} | {worst_time:.1f} | "
                f"{np.mean([row['repeat'] for row in group]):.1f} | "
                f"{sum(row['warned'] for row in group)}/{len(group)} | {verdict} |"
            )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke-test sizes (~1 min)")
    parser.add_argument("--seeds", type=int, nargs="+", help="seeds of the nx.ais runs")
    parser.add_argument(
        "--predictors",
        type=int,
        nargs="+",
        default=[24, 8],
        help="numbers of predictors (the intercept is added)",
    )
    parser.add_argument("--reference-draws", type=int, help="Student-t draws of the reference")
    parser.add_argument("--output", help="also write the report to this file")
    arguments = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(arguments)

    seeds = args.seeds or ([0] if args.quick else [0, 1, 2, 3, 4])
    reference_draws = args.reference_draws or (100_000 if args.quick else 1_000_000)
    sizes = (
        dict(num_particles=200, num_temperatures=50)
        if args.quick
        else dict(num_particles=1000, num_temperatures=200)
    )
    # The user's call: every other argument at its default (the base is the default fit).
    settings_by_label = {
        "defaults": dict(sizes),
        'base="prior"': dict(sizes, base="prior"),
    }
    load_before = os.getloadavg()[0]

    references, rows = {}, []
    for num_predictors in args.predictors:
        features, labels = load_german_credit(num_predictors)
        title = f"German credit, {num_predictors} predictors + intercept"
        log(f"{title}: reference from {reference_draws} Student-t draws")
        reference = reference_log_evidence(features, labels, reference_draws)
        log(
            f"{title}: reference log Z {reference['log_z']:.4f} +- {reference['stderr']:.4f} "
            f"(ESS {reference['ess']:.3g}, Laplace {reference['laplace']:.4f})"
        )
        references[title] = (features.shape[1], reference)
        rows += run_rows(
            title,
            features,
            labels,
            reference,
            seeds,
            list(settings_by_label.items()),
        )
    text = report(
        arguments,
        references,
        rows,
        settings_by_label,
        load_before,
        os.getloadavg()[0],
        elapsed_seconds(),
    )
    publish_report(text + "\n", args.output)


if __name__ == "__main__":
    main()
