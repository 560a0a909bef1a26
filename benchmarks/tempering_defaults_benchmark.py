"""The tempering kernels exactly as a user builds them, on the built-in targets.

Each run is the README's path: ``MCMC(nx.JointContinuousTempering(model), num_warmup=1000,
num_samples=2000, num_chains=4, chain_method="vectorized")`` (and the same with
``nx.GibbsContinuousTempering``), the base fitted by the kernel itself, then
``mcmc.get_samples()`` for the posterior and ``nx.log_marginal_likelihood(mcmc)`` for ``log Z``.
NumPyro's NUTS runs beside it on the bimodal target as the anchor for mode weights.

Per target and kernel, over seeds: the ``log Z`` error against the exact value (or a reference),
its reported stderr and coverage, the mode weight of the bimodal target from the posterior draws
and from the weighted tempered draws, the smallest bulk ESS of the posterior draws, how many runs
warned, and the wall time of a run (base fit and compilation included: the user's first run).

Usage::

    python benchmarks/tempering_defaults_benchmark.py --quick      # 2 seeds, small targets
    python benchmarks/tempering_defaults_benchmark.py --seeds 0 1 2 3 4 \
        --output benchmarks/results/tempering_defaults.md
    python benchmarks/tempering_defaults_benchmark.py --targets radon --seeds 1 \
        --kernels "joint CT" --tempering-kwargs '{"moves_per_draw": 8}'
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from typing import NamedTuple

import numpyro

numpyro.enable_x64()

import arviz as az  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
from common import RADON_LOG_Z, environment_lines, publish_report  # noqa: E402
from numpyro.infer import MCMC, NUTS  # noqa: E402

import numpyro_extras as nx  # noqa: E402
from numpyro_extras import targets  # noqa: E402

KERNELS = {"joint CT": nx.JointContinuousTempering, "Gibbs CT": nx.GibbsContinuousTempering}


class Problem(NamedTuple):
    name: str
    model: object
    args: tuple
    kwargs: dict
    log_z: float  # exact


def problem(name, seed):
    if name == "bimodal":
        return Problem("Bimodal 1-D, log Z = 2", targets.bimodal_model, (), {"log_scale": 2.0}, 2.0)
    if name == "boltzmann":
        relaxation = targets.make_boltzmann_relaxation(seed, 16)
        return Problem(
            "Boltzmann relaxation D_B=16",
            targets.boltzmann_relaxation_model,
            (relaxation,),
            {},
            float(relaxation.log_z),
        )
    if name == "linear_regression":
        features, observed = targets.make_linear_regression_data(
            seed=seed, num_data=50, num_features=5
        )
        return Problem(
            "Linear regression N=50, P=5",
            targets.linear_regression_model,
            (features, observed),
            {},
            float(targets.linear_regression_log_evidence(features, observed)),
        )
    if name == "radon":
        return Problem(
            "Radon hierarchical regression",
            targets.radon_model,
            (),
            targets.load_radon(),
            RADON_LOG_Z,
        )
    raise ValueError(name)


class Outcome(NamedTuple):
    error: float
    stderr: float
    mode_weight: float
    weighted_mode_weight: float
    posterior_ess: float
    warned: bool
    run_seconds: float


def run_once(kernel_class, problem, seed, sizes, kernel_kwargs=None):
    start = time.perf_counter()
    kernel = kernel_class(problem.model, fit_base_seed=seed, **(kernel_kwargs or {}))
    mcmc = MCMC(kernel, chain_method="vectorized", progress_bar=False, **sizes)
    mcmc.run(jax.random.PRNGKey(seed), *problem.args, **problem.kwargs)
    jax.block_until_ready(mcmc.get_samples())
    total = time.perf_counter() - start
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        evidence = nx.log_marginal_likelihood(mcmc)
    diagnostics = nx.tempering_diagnostics(mcmc)
    mode_weight = weighted = float("nan")
    if problem.model is targets.bimodal_model:
        mode_weight = float(np.mean(np.asarray(mcmc.get_samples()["x"]) < 0))
        tempered = np.asarray(nx.tempered_samples(mcmc)["x"])
        weights = np.exp(nx.target_log_weights(mcmc)).ravel()
        weighted = float(np.sum(weights * (tempered < 0)))
    return Outcome(
        evidence.log_z - problem.log_z,
        evidence.stderr,
        mode_weight,
        weighted,
        diagnostics.posterior_ess,
        bool(caught),
        total,
    )


def nuts_mode_weight(problem, seed, sizes):
    mcmc = MCMC(NUTS(problem.model), chain_method="vectorized", progress_bar=False, **sizes)
    mcmc.run(jax.random.PRNGKey(seed), *problem.args, **problem.kwargs)
    x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"])
    return float(np.mean(x < 0)), float(az.rhat(x))


def summarise(name, method, outcomes, setting="defaults"):
    errors = np.array([outcome.error for outcome in outcomes])
    stderrs = np.array([outcome.stderr for outcome in outcomes])
    covered2 = np.mean(np.abs(errors) <= 2 * stderrs)
    covered3 = np.mean(np.abs(errors) <= 3 * stderrs)
    mode = [outcome.mode_weight for outcome in outcomes]
    weighted = [outcome.weighted_mode_weight for outcome in outcomes]
    mode_text = "-"
    if np.all(np.isfinite(mode)):
        mode_error = np.max(np.abs(np.array(mode) - 0.6))
        weighted_error = np.max(np.abs(np.array(weighted) - 0.6))
        mode_text = f"{mode_error:.3f} / {weighted_error:.3f}"
    return (
        f"| {name} | {method} ({setting}) | {len(outcomes)} | {errors.mean():+.3f} +- "
        f"{errors.std(ddof=1) if len(errors) > 1 else 0:.3f} | "
        f"{math.sqrt(np.mean(errors**2)):.3f} | {stderrs.mean():.3f} | {covered2:.0%} / "
        f"{covered3:.0%} | {mode_text} | "
        f"{np.median([outcome.posterior_ess for outcome in outcomes]):.0f} | "
        f"{sum(outcome.warned for outcome in outcomes)} | "
        f"{np.mean([outcome.run_seconds for outcome in outcomes]):.1f} |"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds, no radon")
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument(
        "--targets",
        nargs="+",
        default=None,
        choices=["bimodal", "boltzmann", "linear_regression", "radon"],
    )
    parser.add_argument(
        "--kernels", nargs="+", default=list(KERNELS), choices=list(KERNELS), help="which kernels"
    )
    parser.add_argument(
        "--tempering-kwargs",
        default="{}",
        help="JSON dict of kernel settings, e.g. '{\"moves_per_draw\": 8}' (not the defaults row)",
    )
    parser.add_argument("--output", help="also write the Markdown report to this file")
    args = parser.parse_args(argv)
    argv_used = sys.argv[1:] if argv is None else list(argv)
    start = time.perf_counter()
    kernel_kwargs = json.loads(args.tempering_kwargs)
    seeds = args.seeds or (list(range(2)) if args.quick else list(range(10)))
    names = args.targets or (
        ["bimodal", "linear_regression"]
        if args.quick
        else ["bimodal", "boltzmann", "linear_regression", "radon"]
    )
    sizes = dict(num_warmup=1000, num_samples=2000, num_chains=4)
    rows = []
    print(f"devices: {jax.devices()}, seeds {seeds}, sizes {sizes}", flush=True)
    for name in names:
        target_seeds = seeds if name != "radon" else seeds[: max(2, len(seeds) // 2)]
        for method, kernel_class in KERNELS.items():
            if method not in args.kernels:
                continue
            outcomes = []
            for seed in target_seeds:
                target = problem(name, seed)
                outcome = run_once(kernel_class, target, seed, sizes, kernel_kwargs)
                outcomes.append(outcome)
                print(f"{target.name} {method} seed {seed}: {outcome}", flush=True)
            setting = args.tempering_kwargs if kernel_kwargs else "defaults"
            rows.append(summarise(target.name, method, outcomes, setting))
        if name == "bimodal":
            nuts = [nuts_mode_weight(problem(name, seed), seed, sizes) for seed in target_seeds]
            error = np.max(np.abs(np.array([weight for weight, _ in nuts]) - 0.6))
            rhat = np.max([rhat for _, rhat in nuts])
            rows.append(
                f"| {problem(name, 0).name} | NUTS (defaults) | {len(nuts)} | - | - | - | - | "
                f"{error:.3f} (max R-hat {rhat:.2f}) | - | - | - |"
            )
    header = (
        "| Target | Method | Seeds | log Z error: mean +- sd | RMSE | Mean stderr | "
        "abs(error) <= 2 / 3 stderr | Max mode-weight error: get_samples / weighted | "
        "Median posterior ESS | Runs that warned | s / run (fit + compile + run) |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|"
    )
    environment = environment_lines(
        "tempering_defaults_benchmark.py", argv_used, time.perf_counter() - start
    )
    report = "\n".join(
        ["## Environment", "", *environment, "", "## Defaults rows", "", header, *rows, ""]
    )
    print()
    publish_report(report, args.output)


if __name__ == "__main__":
    main()
