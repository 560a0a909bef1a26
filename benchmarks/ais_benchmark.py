"""Benchmark nx.ais against BlackJAX adaptive tempered SMC: log Z RMSE at a fixed gradient budget.

On Bayesian linear regression (closed-form log Z) and the radon hierarchical model (reference:
one long ``nx.ais`` run from the fitted base, on a seed that is not a benchmark seed), per seed:

* ``nx.ais`` from the prior (``base="prior"``);
* ``nx.ais`` from a Gaussian base fitted by ``nx.fit_base`` (the geometric path);
* BlackJAX adaptive tempered SMC from the same base (the runner of ``tempering_benchmark.py``),
  its particle count sized from a pilot run so that it spends the same gradient budget as AIS.

Cost is counted in gradient evaluations: AIS spends ``num_particles x (num_temperatures - 1 +
pilot steps) x (leapfrog steps + 1)`` (``blackjax.hmc.init`` evaluates one gradient per move,
then one per leapfrog step); SMC as in ``tempering_benchmark.py``. Base fits are set-up costs.

Usage::

    python benchmarks/ais_benchmark.py --quick          # smoke-size run
    python benchmarks/ais_benchmark.py > ais.log        # 10 seeds (radon: --radon-seeds)
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpyro

# log Z to a few hundredths of a nat needs double precision; set it before any array exists.
numpyro.enable_x64()
# The SMC runner and the problem type of the tempering benchmark, next to this file.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax  # noqa: E402
import numpy as np  # noqa: E402
import tempering_benchmark as tb  # noqa: E402

import numpyro_extras as nx  # noqa: E402
from numpyro_extras import targets  # noqa: E402

NUM_LEAPFROG_STEPS = 5
NUM_PILOT_STEPS = 10


def ais_gradient_evaluations(num_particles, num_temperatures):
    return num_particles * (num_temperatures - 1 + NUM_PILOT_STEPS) * (NUM_LEAPFROG_STEPS + 1)


def run_ais(problem, seed, base, num_particles, num_temperatures):
    key = jax.random.fold_in(jax.random.PRNGKey(seed), 7)
    evidence = nx.ais(
        key,
        problem.model,
        (),
        problem.model_kwargs,
        num_particles=num_particles,
        num_temperatures=num_temperatures,
        base=base,
        num_leapfrog_steps=NUM_LEAPFROG_STEPS,
        num_pilot_steps=NUM_PILOT_STEPS,
        progress_bar=False,
    )
    return evidence.log_z, evidence.stderr


def benchmark_target(problem, reference, seeds, num_particles, num_temperatures, smc_settings):
    budget = ais_gradient_evaluations(num_particles, num_temperatures)
    runner = tb.SMCRunner(problem.smc_potential, smc_settings)
    rows = []
    methods = {
        "AIS from the prior": lambda seed: run_ais(
            problem, seed, "prior", num_particles, num_temperatures
        ),
        "AIS from the fitted base": lambda seed: run_ais(
            problem, seed, problem.base, num_particles, num_temperatures
        ),
    }

    def run_smc(seed):
        key = jax.random.fold_in(jax.random.PRNGKey(seed), tb.STREAM_SMC)
        pilot_key, run_key = jax.random.split(key)
        particles, step_size = runner.particles_for_budget(pilot_key, problem, budget)
        log_z, _, gradients, *_ = runner.run(run_key, problem, particles, step_size)
        run_smc.gradients.append(gradients)
        return log_z, math.nan

    run_smc.gradients = []
    methods["BlackJAX adaptive tempered SMC"] = run_smc
    for name, method in methods.items():
        start = time.perf_counter()
        estimates = []
        for seed in seeds:
            estimates.append(method(seed))
            tb.log(f"  {problem.title} / {name} seed {seed}: log Z = {estimates[-1][0]:.3f}")
        errors = np.array([log_z for log_z, _ in estimates]) - reference
        gradients = np.mean(run_smc.gradients) if run_smc.gradients else budget
        rows.append(
            (
                problem.title,
                name,
                float(np.sqrt(np.mean(errors**2))),
                float(np.mean(errors)),
                # SMC reports no stderr of its own (nan).
                float(np.mean([stderr for _, stderr in estimates])),
                float(gradients),
                (time.perf_counter() - start) / len(seeds),
            )
        )
    return rows


def linear_regression_problem():
    features, responses = targets.make_linear_regression_data(0)
    model_kwargs = {"features": features, "targets": responses}
    base = nx.fit_base(
        jax.random.PRNGKey(0), targets.linear_regression_model, (), model_kwargs, progress_bar=False
    )
    log_z = targets.linear_regression_log_evidence(features, responses)
    title = f"Linear regression N={features.shape[0]}, P={features.shape[1]}"
    problem = tb.model_problem(
        "linear_regression", title, targets.linear_regression_model, model_kwargs, base, log_z
    )
    return problem, log_z, "closed form"


def radon_problem(reference_particles, reference_temperatures):
    data = targets.load_radon()
    base = nx.fit_base(
        jax.random.PRNGKey(0), targets.radon_model, (), data, method="gaussian", progress_bar=False
    )
    problem = tb.model_problem(
        "radon", "Radon hierarchical regression", targets.radon_model, data, base, None
    )
    reference = nx.ais(
        jax.random.PRNGKey(1000),
        targets.radon_model,
        (),
        data,
        num_particles=reference_particles,
        num_temperatures=reference_temperatures,
        base=base,
        progress_bar=False,
    )
    note = (
        f"reference nx.ais from the fitted base, {reference_particles} particles x "
        f"{reference_temperatures} temperatures: {reference.log_z:.3f} +- {reference.stderr:.3f}"
    )
    return problem, reference.log_z, note


def fmt(value):
    return "-" if math.isnan(value) else f"{value:.3f}"


def table(rows):
    lines = [
        "| target | method | log Z RMSE | mean error | mean reported stderr | gradient evals | "
        "s / seed |",
        "|---|---|---|---|---|---|---|",
    ]
    for title, name, rmse, bias, stderr, gradients, seconds in rows:
        lines.append(
            f"| {title} | {name} | {rmse:.3f} | {bias:+.3f} | {fmt(stderr)} | {gradients:.2e} | "
            f"{seconds:.1f} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke-size run")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--radon-seeds", type=int, default=10)
    arguments = parser.parse_args(argv)
    seeds = arguments.seeds[:2] if arguments.quick else arguments.seeds
    settings = tb.QUICK if arguments.quick else tb.FULL
    sizes = (
        dict(num_particles=200, num_temperatures=100)
        if arguments.quick
        else dict(num_particles=1000, num_temperatures=500)
    )
    reference_size = (500, 500) if arguments.quick else (2000, 2000)
    rows, notes = [], []
    problem, log_z, note = linear_regression_problem()
    notes.append(f"{problem.title}: {note} log Z = {log_z:.3f}.")
    rows += benchmark_target(problem, log_z, seeds, smc_settings=settings, **sizes)
    problem, reference, note = radon_problem(*reference_size)
    notes.append(f"{problem.title}: {note}.")
    radon_seeds = seeds[: arguments.radon_seeds]
    rows += benchmark_target(problem, reference, radon_seeds, smc_settings=settings, **sizes)
    print(table(rows))
    print()
    for line in notes:
        print(f"- {line}")


if __name__ == "__main__":
    main()
