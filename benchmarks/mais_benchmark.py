"""Benchmark marginalized AIS against AIS on random RBMs: the mAIS paper's Table I setting.

Random +-1 RBMs with ``|V| = 20``, ``|H| = 40`` (mAIS paper Sec. IV, spec 3.1: biases
``U[-0.001, 0.001]``, weights ``N(0, 1 / 60)``), ``1 / T`` in {1, 4, 8}, ``K`` in {10, 30, 60}
with the linear schedule, ``N = 1000`` particles. Every run computes AIS (the eq. 42 kernel,
three half-sweeps) and mAIS-V (the eq. 41 collapsed block-Gibbs kernel) on the same
``v``-trajectories (``numpyro_extras.annealing.boltzmann.paired_log_weights``). The exact free
energy comes from enumerating the ``2^20`` visible states with the hidden layer summed
analytically (eq. 39).

The report gives the per-spin free-energy bias ``E[f_app] - f`` (``f = F / n``, ``n = 60``) of
both methods with standard errors over RBMs x trials, their ratio, the mean absolute percentage
error (eq. 44), the paper's Table I values, the issue's target (mAIS bias at ``1/T = 8``,
``K = 10`` at most 0.025 per spin, AIS's about 4 times larger), and the throughput in
particles x temperatures per second for N = 100, 1000, 10000.

Usage::

    python benchmarks/mais_benchmark.py --quick                  # smoke size, about a minute
    python benchmarks/mais_benchmark.py --output report.md       # full size, under 10 minutes
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys
import time

import numpyro

# Per-spin biases of 1e-4 need double precision; set it before any array exists.
numpyro.enable_x64()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.scipy.special import logsumexp  # noqa: E402

import numpyro_extras as nx  # noqa: E402
from numpyro_extras.annealing import boltzmann  # noqa: E402
from numpyro_extras.annealing.driver import inverse_temperature_schedule  # noqa: E402

NUM_VISIBLE, NUM_HIDDEN = 20, 40
INVERSE_TEMPERATURES = (1.0, 4.0, 8.0)
NUM_TEMPERATURES = (10, 30, 60)
NUM_PARTICLES = 1000
THROUGHPUT_PARTICLES = (100, 1000, 10000)
# The target: mAIS bias per spin at 1/T = 8, K = 10, and AIS's about 4 times larger.
TARGET_MAIS_BIAS = 0.025
TARGET_SETTING = (8.0, 10)
# Table I of the mAIS paper (average of 30 trials x 1000 RBMs): per 1/T, the true f and, per K,
# E[f_app] of AIS and of mAIS.
PAPER_TRUE_F = {1.0: -0.80306, 4.0: -1.95593, 8.0: -3.80281}
PAPER_AIS = {
    1.0: {10: -0.80300, 30: -0.80305, 60: -0.80305},
    4.0: {10: -1.93328, 30: -1.95345, 60: -1.95545},
    8.0: {10: -3.70846, 30: -3.78813, 60: -3.79920},
}
PAPER_MAIS = {
    1.0: {10: -0.80305, 30: -0.80306, 60: -0.80306},
    4.0: {10: -1.95143, 30: -1.95535, 60: -1.95575},
    8.0: {10: -3.78087, 30: -3.79925, 60: -3.80186},
}


def progress(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def draw_machines(seed, inverse_temperature, num_machines):
    """``num_machines`` random RBMs stacked along a leading axis (one pytree)."""
    stream = jax.random.fold_in(jax.random.PRNGKey(seed), int(inverse_temperature * 1000))
    machines = [
        nx.random_rbm(key, NUM_VISIBLE, NUM_HIDDEN, inverse_temperature)
        for key in jax.random.split(stream, num_machines)
    ]
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *machines)


def exact_free_energies(machines):
    """``F = -log Z`` of each machine: 2^20 visible states, hidden layer summed analytically."""
    num_machines = machines.weights.shape[0]
    return np.array(
        [
            float(jax.tree.map(lambda leaf, i=i: leaf[i], machines).free_energy())
            for i in range(num_machines)
        ]
    )


def make_paired_runner(num_temperatures, num_particles):
    """A compiled ``(keys, machines) -> (F_AIS, F_mAIS)`` over a batch of runs."""
    betas = inverse_temperature_schedule("linear", num_temperatures)

    def one_run(key, machine):
        weights = boltzmann.paired_log_weights(key, machine, betas, num_particles, side="V")
        log_z0 = machine.base_log_partition()
        log_mean = [logsumexp(w) - math.log(num_particles) for w in (weights.ais, weights.mais)]
        return -(log_z0 + log_mean[0]), -(log_z0 + log_mean[1])

    return jax.jit(jax.vmap(one_run))


def accuracy_rows(args):
    """Per (1/T, K): per-spin errors of AIS and mAIS over machines x trials."""
    rows = []
    runners = {k: make_paired_runner(k, NUM_PARTICLES) for k in NUM_TEMPERATURES}
    for inverse_temperature in INVERSE_TEMPERATURES:
        start = time.perf_counter()
        machines = draw_machines(args.seed, inverse_temperature, args.machines)
        exact = exact_free_energies(machines)
        progress(
            f"1/T={inverse_temperature:g}: exact F of {args.machines} RBMs "
            f"in {time.perf_counter() - start:.1f} s"
        )
        # Every machine is run ``trials`` times with independent keys.
        batch = jax.tree.map(lambda leaf: jnp.repeat(leaf, args.trials, axis=0), machines)
        exact_batch = np.repeat(exact, args.trials)
        for num_temperatures in NUM_TEMPERATURES:
            start = time.perf_counter()
            keys = jax.random.split(
                jax.random.PRNGKey(args.seed + 7919 * num_temperatures), exact_batch.size
            )
            ais, mais = (np.asarray(f) for f in runners[num_temperatures](keys, batch))
            seconds = time.perf_counter() - start
            num_units = NUM_VISIBLE + NUM_HIDDEN
            rows.append(
                {
                    "inverse_temperature": inverse_temperature,
                    "num_temperatures": num_temperatures,
                    "exact_f": exact.mean() / num_units,
                    "ais_error": (ais - exact_batch) / num_units,
                    "mais_error": (mais - exact_batch) / num_units,
                    "exact_batch": exact_batch / num_units,
                    "seconds": seconds,
                }
            )
            progress(
                f"1/T={inverse_temperature:g} K={num_temperatures}: {exact_batch.size} paired "
                f"runs in {seconds:.1f} s (compile included)"
            )
    return rows


def time_call(function, key, repeats):
    """Best wall time of ``function(key)`` over ``repeats`` calls after one compile call."""
    jax.block_until_ready(function(key))
    times = []
    for repeat in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(function(jax.random.fold_in(key, repeat)))
        times.append(time.perf_counter() - start)
    return min(times)


def throughput_rows(args):
    """Particles x temperatures per second of mAIS, AIS and the paired run, against N."""
    machine = nx.random_rbm(jax.random.PRNGKey(args.seed), NUM_VISIBLE, NUM_HIDDEN, 4.0)
    num_temperatures = args.throughput_temperatures
    betas = inverse_temperature_schedule("linear", num_temperatures)
    methods = {
        "mAIS (eq. 41, 2 half-sweeps)": boltzmann.mais_log_weights,
        "AIS (eq. 42, 3 half-sweeps)": boltzmann.ais_log_weights,
        "paired AIS + mAIS": boltzmann.paired_log_weights,
    }
    rows = []
    for num_particles in args.throughput_particles:
        for name, method in methods.items():
            function = jax.jit(
                lambda key, method=method, n=num_particles: method(key, machine, betas, n)
            )
            seconds = time_call(function, jax.random.PRNGKey(1), repeats=3)
            rows.append((num_particles, name, seconds, num_particles * num_temperatures / seconds))
        progress(f"throughput N={num_particles} done")
    return rows


def mean_and_stderr(values):
    values = np.asarray(values)
    return values.mean(), values.std(ddof=1) / math.sqrt(values.size)


def accuracy_table(rows):
    lines = [
        "| 1/T | exact f (mean) | K | AIS bias / spin | mAIS bias / spin | AIS / mAIS bias "
        "| mean APE % AIS / mAIS | mAIS closer | paper bias AIS / mAIS |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ais_bias, ais_stderr = mean_and_stderr(row["ais_error"])
        mais_bias, mais_stderr = mean_and_stderr(row["mais_error"])
        # A ratio of biases means something only when both are positive.
        ratio = f"{ais_bias / mais_bias:.1f}" if min(ais_bias, mais_bias) > 0 else "-"
        scale = 100 / np.abs(row["exact_batch"])
        ais_ape = np.mean(np.abs(row["ais_error"]) * scale)
        mais_ape = np.mean(np.abs(row["mais_error"]) * scale)
        closer = np.mean(np.abs(row["mais_error"]) < np.abs(row["ais_error"]))
        inverse_temperature, k = row["inverse_temperature"], row["num_temperatures"]
        paper_f = PAPER_TRUE_F[inverse_temperature]
        paper_ais, paper_mais = PAPER_AIS[inverse_temperature], PAPER_MAIS[inverse_temperature]
        lines.append(
            f"| {row['inverse_temperature']:g} | {row['exact_f']:.5f} | {k} "
            f"| {ais_bias:.2e} ± {ais_stderr:.1e} | {mais_bias:.2e} ± {mais_stderr:.1e} "
            f"| {ratio} | {ais_ape:.3f} / {mais_ape:.3f} | {100 * closer:.0f} % "
            f"| {paper_ais[k] - paper_f:.2e} / {paper_mais[k] - paper_f:.2e} |"
        )
    return "\n".join(lines)


def target_lines(rows):
    row = next(
        row
        for row in rows
        if (row["inverse_temperature"], row["num_temperatures"]) == TARGET_SETTING
    )
    ais_bias, ais_stderr = mean_and_stderr(row["ais_error"])
    mais_bias, mais_stderr = mean_and_stderr(row["mais_error"])
    met = mais_bias <= TARGET_MAIS_BIAS
    return [
        f"- mAIS bias per spin at 1/T = 8, K = 10: {mais_bias:.4f} ± {mais_stderr:.4f} "
        f"(target at most {TARGET_MAIS_BIAS}; paper 0.0219): **{'met' if met else 'NOT met'}**.",
        f"- AIS bias per spin there: {ais_bias:.4f} ± {ais_stderr:.4f} (paper 0.0944), "
        f"{ais_bias / mais_bias:.1f} times mAIS's (target about 4; paper 4.3).",
    ]


def throughput_table(rows, num_temperatures):
    lines = [
        f"| N | method | wall time (s, K = {num_temperatures}) | particles x temperatures / s |",
        "|---|---|---|---|",
    ]
    for num_particles, name, seconds, rate in rows:
        lines.append(f"| {num_particles} | {name} | {seconds:.4f} | {rate:.3g} |")
    return "\n".join(lines)


def environment_lines(argv, args, elapsed):
    versions = ", ".join(f"{m.__name__} {m.__version__}" for m in (jax, numpyro, np, nx))
    return [
        f"- Command: `{' '.join(['python benchmarks/mais_benchmark.py', *argv])}`",
        f"- Date: {datetime.datetime.now(datetime.UTC).isoformat(timespec='minutes')}",
        f"- Machine: {platform.machine()}, {os.cpu_count()} CPU cores, Python "
        f"{platform.python_version()}, {versions}, x64 enabled",
        f"- Setting: |V| = {NUM_VISIBLE}, |H| = {NUM_HIDDEN}, N = {NUM_PARTICLES}, linear "
        f"schedule, {args.machines} random RBMs x {args.trials} trials per 1/T (seed {args.seed})",
        f"- Total wall time: {elapsed / 60:.1f} min",
    ]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke size (4 RBMs x 1 trial)")
    parser.add_argument("--machines", type=int, default=None, help="random RBMs per 1/T")
    parser.add_argument("--trials", type=int, default=None, help="runs per RBM")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=None, help="also write the report to this file")
    args = parser.parse_args(argv)
    if args.machines is None:
        args.machines = 4 if args.quick else 40
    if args.trials is None:
        args.trials = 1 if args.quick else 5
    args.throughput_particles = (100, 1000) if args.quick else THROUGHPUT_PARTICLES
    args.throughput_temperatures = 30
    if args.machines < 2 or args.trials < 1:
        parser.error("--machines must be at least 2 and --trials at least 1.")
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    start = time.perf_counter()
    rows = accuracy_rows(args)
    throughput = throughput_rows(args)
    elapsed = time.perf_counter() - start
    report = "\n".join(
        [
            "# mAIS vs AIS on random RBMs (mAIS paper Table I setting)",
            "",
            "## Environment",
            "",
            *environment_lines(argv, args, elapsed),
            "",
            "## Free-energy bias per spin (E[f_app] - f, ± standard error over RBMs x trials)",
            "",
            "AIS uses the eq. 42 kernel, mAIS-V the eq. 41 kernel, on the same v-trajectories. "
            "'mAIS closer': share of runs where mAIS's |error| is the smaller.",
            "",
            accuracy_table(rows),
            "",
            "## Issue target",
            "",
            *target_lines(rows),
            "",
            "## Throughput (compile excluded, best of 3, 1/T = 4)",
            "",
            throughput_table(throughput, args.throughput_temperatures),
            "",
        ]
    )
    print(report)
    if args.output:
        with open(args.output, "w") as handle:
            handle.write(report)


if __name__ == "__main__":
    main()
