"""Benchmark marginalized AIS against AIS on random RBMs: the mAIS paper's Table I setting.

Random +-1 RBMs with ``|V| = 20``, ``|H| = 40`` (Yasuda & Takahashi, the mAIS paper, Sec. IV:
biases ``U[-0.001, 0.001]``, weights ``N(0, 1 / n)`` with ``n = |V| + |H| = 60``), ``1 / T`` in
{1, 4, 8}, ``K`` in {10, 30, 60} with the linear schedule, ``N = 1000`` particles. Every run
computes AIS (the eq. 42 kernel, three half-sweeps) and mAIS-V (the eq. 41 collapsed block-Gibbs
kernel) on the same ``v``-trajectories (``numpyro_extras.annealing.mais.paired_log_weights``).
The exact free energy comes from enumerating the ``2^20`` visible states with the hidden layer
summed analytically (eq. 39).

The report gives the per-spin free-energy bias ``E[f_app] - f`` (``f = F / n``, ``n = 60``) of
both methods with standard errors over RBMs x trials, their ratio, the mean absolute percentage
error (eq. 44), the paper's Table I values, our acceptance target (mAIS bias at ``1/T = 8``,
``K = 10`` at most 0.025 per spin, AIS's about 4 times larger), and the throughput in
particles x temperatures per second for N = 100, 1000, 10000.

The defaults table calls the public functions as a user does, with only the required arguments
at the README's marginalized-AIS run length (``N = 1000``, ``K = 100``):
``nx.marginalized_ais_boltzmann`` and ``nx.ais_boltzmann`` (linear schedule, ``side="auto"``,
``kernel="paired"``), the README's generic line ``nx.ais(key, nx.rbm_model, (machine,),
marginalize=("h",))`` on the first few machines, and beside them this script's paired runner at
the same ``K`` on the same machines.

Usage::

    python benchmarks/mais_benchmark.py --quick                  # smoke size, about a minute
    python benchmarks/mais_benchmark.py --output report.md       # full size, under 10 minutes
    python benchmarks/mais_benchmark.py --defaults-only          # the defaults table, ~12 min
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

# Per-spin biases of 1e-4 need double precision; set it before any array exists.
numpyro.enable_x64()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from common import publish_report  # noqa: E402
from jax.scipy.special import logsumexp  # noqa: E402

import numpyro_extras as nx  # noqa: E402
from numpyro_extras.annealing import mais  # noqa: E402
from numpyro_extras.annealing.driver import inverse_temperature_schedule  # noqa: E402

NUM_VISIBLE, NUM_HIDDEN = 20, 40
INVERSE_TEMPERATURES = (1.0, 4.0, 8.0)
NUM_TEMPERATURES = (10, 30, 60)
NUM_PARTICLES = 1000
THROUGHPUT_PARTICLES = (100, 1000, 10000)
# The README's marginalized-AIS call: nx.ais(..., num_particles=1000, num_temperatures=100).
README_PARTICLES = 1000
README_TEMPERATURES = 100
# The README's nx.ais line compiles per call (seconds each): it runs on this many machines only.
README_NX_AIS_MACHINES = 10
# Our acceptance target: mAIS bias per spin at 1/T = 8, K = 10, and AIS's about 4 times larger.
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
        weights = mais.paired_log_weights(key, machine, betas, num_particles, side="V")
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


def public_run(method, key, machine):
    """One public call as a user makes it: ``(log Z, stderr, ESS warning fired)``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if method == "nx.ais_boltzmann":
            evidence = nx.ais_boltzmann(
                key, machine, num_particles=README_PARTICLES, num_temperatures=README_TEMPERATURES
            )
        elif method == "nx.marginalized_ais_boltzmann":
            evidence = nx.marginalized_ais_boltzmann(
                key, machine, num_particles=README_PARTICLES, num_temperatures=README_TEMPERATURES
            )
        else:
            evidence = nx.ais(
                key,
                nx.rbm_model,
                (machine,),
                num_particles=README_PARTICLES,
                num_temperatures=README_TEMPERATURES,
                marginalize=("h",),
                progress_bar=False,
            )
    warned = any("ESS" in str(warning.message) for warning in caught)
    return float(evidence.log_z), float(evidence.stderr), warned


DEFAULT_METHODS = (
    "nx.ais_boltzmann",
    "nx.marginalized_ais_boltzmann",
    'nx.ais(rbm_model, marginalize=("h",))',
)


def defaults_rows(args):
    """Per 1/T: per-spin errors of the public calls at their defaults, and of the paired runner
    (this script's path) at the same K on the same machines."""
    rows = []
    runner = make_paired_runner(README_TEMPERATURES, README_PARTICLES)
    num_units = NUM_VISIBLE + NUM_HIDDEN
    for inverse_temperature in INVERSE_TEMPERATURES:
        machines = draw_machines(args.seed, inverse_temperature, args.machines)
        exact = exact_free_energies(machines)
        batch = jax.tree.map(lambda leaf: jnp.repeat(leaf, args.trials, axis=0), machines)
        exact_batch = np.repeat(exact, args.trials)
        keys = jax.random.split(
            jax.random.PRNGKey(args.seed + 7919 * README_TEMPERATURES), exact_batch.size
        )
        paired = [np.asarray(f) for f in runner(keys, batch)]
        for label, free_energy in zip(
            ("paired runner, AIS", "paired runner, mAIS-V"), paired, strict=True
        ):
            rows.append(
                {
                    "inverse_temperature": inverse_temperature,
                    "method": label,
                    "error": (free_energy - exact_batch) / num_units,
                    "exact_batch": exact_batch / num_units,
                    "stderr": None,
                    "warned": 0,
                }
            )
        for method in DEFAULT_METHODS:
            start = time.perf_counter()
            runs = args.trials if method in DEFAULT_METHODS[:2] else 1
            machine_count = args.machines if runs > 1 else README_NX_AIS_MACHINES
            errors, stderrs, truths, warned = [], [], [], 0
            for index in range(min(machine_count, args.machines)):
                machine = jax.tree.map(lambda leaf, i=index: leaf[i], machines)
                for trial in range(runs):
                    key = jax.random.fold_in(keys[index * args.trials + trial], 1)
                    log_z, stderr, fired = public_run(method, key, machine)
                    # F = -log Z; the error of the free energy, as in the tables above.
                    errors.append(-log_z - exact[index])
                    stderrs.append(stderr)
                    truths.append(exact[index])
                    warned += fired
            rows.append(
                {
                    "inverse_temperature": inverse_temperature,
                    "method": method,
                    "error": np.array(errors) / num_units,
                    "exact_batch": np.array(truths) / num_units,
                    "stderr": np.array(stderrs),
                    "warned": warned,
                }
            )
            progress(
                f"1/T={inverse_temperature:g} {method}: {len(errors)} runs "
                f"in {time.perf_counter() - start:.1f} s"
            )
    return rows


def defaults_table(rows):
    lines = [
        "| 1/T | exact f (mean) | K | N | call | runs | bias / spin | mean APE % "
        "| mean reported stderr (nats) | abs(error) <= 2 stderr | ESS warnings |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        bias, stderr = mean_and_stderr(row["error"])
        ape = np.mean(np.abs(row["error"]) * 100 / np.abs(row["exact_batch"]))
        if row["stderr"] is None:
            reported, coverage, warned = "-", "-", "-"
        else:
            # Coverage in nats: the per-spin error times the number of units.
            error_nats = np.abs(row["error"]) * (NUM_VISIBLE + NUM_HIDDEN)
            reported = f"{np.mean(row['stderr']):.3f}"
            coverage = f"{100 * np.mean(error_nats <= 2 * row['stderr']):.0f} %"
            warned = str(row["warned"])
        lines.append(
            f"| {row['inverse_temperature']:g} | {np.mean(row['exact_batch']):.5f} "
            f"| {README_TEMPERATURES} | {README_PARTICLES} | {row['method']} "
            f"| {row['error'].size} | {bias:.2e} ± {stderr:.1e} | {ape:.3f} | {reported} "
            f"| {coverage} | {warned} |"
        )
    return "\n".join(lines)


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
        "mAIS (eq. 41, 2 half-sweeps)": mais.mais_log_weights,
        "AIS (eq. 42, 3 half-sweeps)": mais.ais_log_weights,
        "paired AIS + mAIS": mais.paired_log_weights,
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
    parser.add_argument(
        "--defaults-only",
        action="store_true",
        help="only the defaults table (public calls, N = 1000, K = 100; 40 RBMs x 2 trials)",
    )
    args = parser.parse_args(argv)
    if args.machines is None:
        args.machines = 4 if args.quick else 40
    if args.trials is None:
        args.trials = 1 if args.quick else (2 if args.defaults_only else 5)
    args.throughput_particles = (100, 1000) if args.quick else THROUGHPUT_PARTICLES
    args.throughput_temperatures = 30
    if args.machines < 2 or args.trials < 1:
        parser.error("--machines must be at least 2 and --trials at least 1.")
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    start = time.perf_counter()
    if args.defaults_only:
        defaults = defaults_rows(args)
        elapsed = time.perf_counter() - start
        report = "\n".join(
            [
                "# Defaults: the public calls on random RBMs (mAIS paper Table I setting)",
                "",
                "## Environment",
                "",
                *environment_lines(argv, args, elapsed),
                "",
                "## Free-energy bias per spin at the defaults (E[f_app] - f, ± standard error)",
                "",
                "Public calls with only the required arguments at the README's run length; the "
                "paired runner rows are this script's path (eq. 41 and 42 kernels on the same "
                f"v-trajectories) on the same machines. The README's nx.ais line runs on the "
                f"first {README_NX_AIS_MACHINES} RBMs, one trial each.",
                "",
                defaults_table(defaults),
                "",
            ]
        )
        publish_report(report, args.output)
        return
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
            "## Acceptance target",
            "",
            *target_lines(rows),
            "",
            "## Throughput (compile excluded, best of 3, 1/T = 4)",
            "",
            throughput_table(throughput, args.throughput_temperatures),
            "",
        ]
    )
    publish_report(report, args.output)


if __name__ == "__main__":
    main()
