"""Benchmark nx.ais against continuous tempering and BlackJAX SMC at one gradient budget.

On the targets of the continuous-tempering benchmark (``tempering_benchmark.py``, next to this
file) every method gets the same number of gradient evaluations per log Z estimate, and the
script prints one markdown table of log Z errors over the seeds:

* ``nx.ais`` from the prior (``base="prior"``: the likelihood is annealed in);
* ``nx.ais`` from the Gaussian base the tempering kernels use (the geometric path);
* joint and Gibbs continuous tempering (``nx.JointContinuousTempering``,
  ``nx.GibbsContinuousTempering``), 10 chains per estimate, run lengths set from the budget;
* BlackJAX adaptive tempered SMC from the same base, its particle count sized from a pilot run;
* the defaults row: ``nx.ais`` exactly as a user calls it, at the README's run length
  (``num_particles=1000, num_temperatures=500``, every other setting at its default: the fitted
  Gaussian base, 5 leapfrog steps, 10 pilot steps), outside the gradient budget.

Targets: Boltzmann machine relaxations D_B = 16 (one system per seed, exact log Z), Bayesian
linear regression (closed form) and the radon hierarchical regression (reference: long
tempering runs, with a bidirectional AIS sandwich beside it). Cost is counted as in the
tempering benchmark; AIS spends ``num_particles x (num_temperatures - 1 + pilot steps) x
(leapfrog steps + 1)`` (``blackjax.hmc.init`` evaluates one gradient per move, then one per
leapfrog step), and its temperature count is set from the budget. Base fits, the SMC pilot and
the reference runs are set-up costs.

A second table gives AIS throughput, particles x temperatures per second (compile excluded),
and how it scales with the number of particles.

Usage::

    python benchmarks/ais_benchmark.py --quick                       # smoke size, ~5 min
    python benchmarks/ais_benchmark.py --output report.md > run.log 2>&1   # docs/benchmarks.md
    python benchmarks/ais_benchmark.py --targets linear_regression --seeds 0 1 2
    python benchmarks/ais_benchmark.py --defaults-only --output defaults.md   # ~15 min, 1 core
    python benchmarks/ais_benchmark.py --radon-sandwich 5000   # the radon sandwich alone, ~15 min

``--defaults-only`` runs the defaults row alone. Radon's log Z is exact, by quadrature
(``common.RADON_LOG_Z``).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
import warnings

import numpyro

# log Z to a few hundredths of a nat needs double precision; set it before any array exists.
numpyro.enable_x64()
# The problems, runners and report helpers of the tempering benchmark, next to this file.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax  # noqa: E402
import tempering_benchmark as tb  # noqa: E402
from common import RADON_LOG_Z, elapsed_seconds, log  # noqa: E402
from numpyro.infer import MCMC, NUTS  # noqa: E402

import numpyro_extras as nx  # noqa: E402
from numpyro_extras import targets  # noqa: E402

TARGET_NAMES = ("boltzmann", "linear_regression", "radon")
NUM_LEAPFROG_STEPS = 5
NUM_PILOT_STEPS = 10
STREAM_AIS = 7
# The README's nx.ais call: the run length a user copies.
README_PARTICLES = 1000
README_TEMPERATURES = 500
DEFAULTS_LABEL = "AIS defaults (README call)"
# Radon's reference log Z and stderr from the full run at commit 2b604dc (long joint and Gibbs CT
# runs, see docs/benchmarks.md); --defaults-only reuses it rather than spend minutes on new ones.


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Budgets (gradient evaluations per estimate) and AIS particle counts per target."""

    tempering: tb.Settings
    boltzmann_budget: int
    boltzmann_particles: int
    regression_budget: int
    regression_particles: int
    radon_budget: int
    radon_particles: int
    radon_sandwich_particles: int
    radon_sandwich_temperatures: int
    throughput_particles: tuple[int, ...]
    throughput_temperatures: int


FULL = Sizes(
    tempering=tb.FULL,
    boltzmann_budget=1_000_000,
    boltzmann_particles=1000,
    regression_budget=200_000,
    regression_particles=256,
    radon_budget=600_000,
    radon_particles=500,
    radon_sandwich_particles=1000,
    radon_sandwich_temperatures=1000,
    throughput_particles=(100, 1000, 10_000),
    throughput_temperatures=50,
)

QUICK = Sizes(
    tempering=tb.QUICK,
    boltzmann_budget=60_000,
    boltzmann_particles=200,
    regression_budget=30_000,
    regression_particles=100,
    radon_budget=150_000,
    radon_particles=200,
    radon_sandwich_particles=300,
    radon_sandwich_temperatures=300,
    throughput_particles=(100, 1000),
    throughput_temperatures=50,
)


def ais_temperatures(budget, num_particles):
    """The number of annealing steps that spends ``budget`` gradient evaluations."""
    per_step = num_particles * (NUM_LEAPFROG_STEPS + 1)
    return max(2, round(budget / per_step) + 1 - NUM_PILOT_STEPS)


def ais_gradient_evaluations(num_particles, num_temperatures):
    return num_particles * (num_temperatures - 1 + NUM_PILOT_STEPS) * (NUM_LEAPFROG_STEPS + 1)


def run_ais(model, model_args, model_kwargs, seeds, base, budget, num_particles):
    """``nx.ais`` per seed, sized to ``budget``; returns ``{seed: Estimate}``."""
    num_temperatures = ais_temperatures(budget, num_particles)
    estimates = {}
    for seed in seeds:
        key = jax.random.fold_in(jax.random.PRNGKey(seed), STREAM_AIS)
        evidence = nx.ais(
            key,
            model,
            model_args,
            model_kwargs,
            num_particles=num_particles,
            num_temperatures=num_temperatures,
            base=base,
            num_leapfrog_steps=NUM_LEAPFROG_STEPS,
            num_pilot_steps=NUM_PILOT_STEPS,
            progress_bar=False,
        )
        gradients = ais_gradient_evaluations(num_particles, num_temperatures)
        estimates[seed] = tb.Estimate(evidence.log_z, evidence.stderr, gradients)
    return estimates


def run_ais_defaults(model, model_args, model_kwargs, seeds):
    """``nx.ais`` per seed as a user calls it; returns ``({seed: Estimate}, seeds that warned)``.

    Only the required arguments and the README's run length are given; ``progress_bar=False``
    changes nothing but the terminal output.
    """
    estimates, warned = {}, []
    for seed in seeds:
        key = jax.random.fold_in(jax.random.PRNGKey(seed), STREAM_AIS)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            evidence = nx.ais(
                key,
                model,
                model_args,
                model_kwargs,
                num_particles=README_PARTICLES,
                num_temperatures=README_TEMPERATURES,
                progress_bar=False,
            )
        if any("ESS" in str(warning.message) for warning in caught):
            warned.append(seed)
        # The defaults are 5 leapfrog steps and 10 pilot steps, as this script's constants; the
        # base fit is a set-up cost, not counted.
        gradients = ais_gradient_evaluations(README_PARTICLES, README_TEMPERATURES)
        estimates[seed] = tb.Estimate(evidence.log_z, evidence.stderr, gradients)
        log(f"defaults seed {seed}: log Z {evidence.log_z:.3f} +- {evidence.stderr:.3f}")
    return estimates, warned


@dataclasses.dataclass
class TargetRows:
    """One target's estimates per method, its exact (or reference) log Z and notes."""

    title: str
    log_z: dict | float
    log_z_label: str
    methods: dict = dataclasses.field(default_factory=dict)
    seconds: dict = dataclasses.field(default_factory=dict)
    notes: list = dataclasses.field(default_factory=list)
    # Seeds on which the defaults row's ESS warning fired.
    warned: list = dataclasses.field(default_factory=list)

    def add(self, name, estimates, seconds):
        self.methods.setdefault(name, {}).update(estimates)
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds


def timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def add_defaults_row(rows, seeds, ais_target):
    """The defaults row of ``rows`` (``ais_target`` as in :func:`run_methods`)."""
    log(f"{rows.title} seeds {seeds}: AIS at its defaults")
    (estimates, warned), seconds = timed(run_ais_defaults, *ais_target, seeds)
    rows.add(DEFAULTS_LABEL, estimates, seconds)
    rows.warned += warned


def defaults_note(rows):
    warned = rows.warned
    count = len(rows.methods.get(DEFAULTS_LABEL, {}))
    return (
        f"{rows.title}: {DEFAULTS_LABEL}: nx.ais(key, model, args, "
        f"num_particles={README_PARTICLES}, num_temperatures={README_TEMPERATURES}); its ESS "
        f"warning fired on {len(warned)} of {count} seeds{f' ({warned})' if warned else ''}."
    )


def run_methods(rows, problem, seeds, sizes, budget, num_particles, warmup, ais_target):
    """Every method on ``problem`` for ``seeds``, each at ``budget`` gradient evaluations.

    ``ais_target`` is ``(model, model_args, model_kwargs)`` for ``nx.ais``.
    """
    settings = sizes.tempering
    model, model_args, model_kwargs = ais_target
    add_defaults_row(rows, seeds, ais_target)
    log(f"{problem.title} seeds {seeds}: AIS")
    for label, base in (("AIS from the prior", "prior"), ("AIS from the base", problem.base)):
        estimates, seconds = timed(
            run_ais, model, model_args, model_kwargs, seeds, base, budget, num_particles
        )
        rows.add(label, estimates, seconds)
    log(f"{problem.title} seeds {seeds}: joint and Gibbs tempering")
    joint, seconds = timed(tb.run_joint, problem, seeds, settings, warmup, budget=budget)
    rows.add("joint CT", joint.estimates, seconds)
    gibbs, seconds = timed(tb.run_gibbs, problem, seeds, settings, warmup, budget=budget)
    rows.add("Gibbs CT", gibbs.estimates, seconds)
    log(f"{problem.title} seeds {seeds}: BlackJAX SMC")
    runner = tb.SMCRunner(problem.smc_potential, settings)
    smc, seconds = timed(tb.run_smc, runner, problem, seeds, {seed: budget for seed in seeds})
    rows.add("SMC", smc.estimates, seconds)


def benchmark_boltzmann(seeds, sizes):
    title = "Boltzmann relaxation D_B=16 (D=15)"
    rows = TargetRows(title, {}, "exact per system")
    settings = sizes.tempering
    for seed in seeds:
        relaxation = targets.make_boltzmann_relaxation(seed, 16)
        problem = tb.boltzmann_problem(seed, relaxation=relaxation)
        rows.log_z[seed] = relaxation.log_z
        run_methods(
            rows,
            problem,
            [seed],
            sizes,
            sizes.boltzmann_budget,
            sizes.boltzmann_particles,
            settings.boltzmann_warmup,
            (targets.boltzmann_relaxation_model, (relaxation,), {}),
        )
    rows.notes.append(
        f"{title}: one system per seed; the base is the tempering benchmark's mean-field "
        "mixture (Graham & Storkey, 2017, Sec. 7.2); AIS from the prior anneals the log cosh "
        "factor into N(0, I). "
        f"AIS: {sizes.boltzmann_particles} particles x "
        f"{ais_temperatures(sizes.boltzmann_budget, sizes.boltzmann_particles)} temperatures."
    )
    rows.notes.append(defaults_note(rows))
    return rows


def benchmark_linear_regression(seeds, sizes):
    features, responses = targets.make_linear_regression_data(0)
    log_z = targets.linear_regression_log_evidence(features, responses)
    model_kwargs = {"features": features, "targets": responses}
    base = nx.fit_base(
        jax.random.PRNGKey(0), targets.linear_regression_model, (), model_kwargs, progress_bar=False
    )
    title = f"Linear regression N={features.shape[0]}, P={features.shape[1]}"
    problem = tb.model_problem(
        "linear_regression", title, targets.linear_regression_model, model_kwargs, base, log_z
    )
    rows = TargetRows(title, log_z, "closed form")
    run_methods(
        rows,
        problem,
        seeds,
        sizes,
        sizes.regression_budget,
        sizes.regression_particles,
        sizes.tempering.regression_warmup,
        (targets.linear_regression_model, (), model_kwargs),
    )
    rows.notes.append(
        f"{title}: base nx.fit_base (log zeta - log Z = {float(base.log_zeta) - log_z:+.3f}); "
        f"AIS: {sizes.regression_particles} particles x "
        f"{ais_temperatures(sizes.regression_budget, sizes.regression_particles)} temperatures."
    )
    rows.notes.append(defaults_note(rows))
    return rows


def radon_sandwich(problem, data, sizes):
    """Bidirectional AIS on radon: a forward run (stochastic lower bound) and a reverse run from
    NUTS posterior draws (stochastic upper bound), both from the tempering base."""
    num_particles = sizes.radon_sandwich_particles
    num_temperatures = sizes.radon_sandwich_temperatures
    common = dict(
        num_particles=num_particles,
        num_temperatures=num_temperatures,
        base=problem.base,
        progress_bar=False,
    )
    lower = nx.ais(jax.random.PRNGKey(2000), targets.radon_model, (), data, **common)
    nuts = MCMC(
        NUTS(targets.radon_model),
        num_warmup=500,
        num_samples=max(250, num_particles // 4),
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    nuts.run(jax.random.PRNGKey(2001), **data)
    upper = nx.ais(
        jax.random.PRNGKey(2002),
        targets.radon_model,
        (),
        data,
        reverse=True,
        init_samples=nuts.get_samples(),
        **common,
    )
    return lower, upper


def sandwich_distance(value, stderr, lower, upper):
    """Where ``value`` lies against the bounds, in standard errors of the difference."""
    if lower.log_z <= value <= upper.log_z:
        return "between them"
    bound, side = (lower, "below the lower") if value < lower.log_z else (upper, "above the upper")
    distance = abs(value - bound.log_z) / math.hypot(stderr, bound.stderr)
    return f"{abs(value - bound.log_z):.3f} {side} bound's estimate ({distance:.1f} stderr)"


def benchmark_radon(seeds, sizes):
    settings = sizes.tempering
    data = targets.load_radon()
    base, base_note = tb.radon_bootstrapped_base(data)
    title = "Radon hierarchical regression"
    problem = tb.model_problem("radon", title, targets.radon_model, data, base, None)
    rows = TargetRows(title, RADON_LOG_Z, "exact (quadrature)")
    rows.notes += [f"{title}: {base_note}", tb.RADON_NOTE]
    log(f"{title}: bidirectional AIS sandwich")
    lower, upper = radon_sandwich(problem, data, sizes)
    rows.notes.append(
        f"{title}: bidirectional AIS from the same base, {sizes.radon_sandwich_particles} "
        f"particles x {sizes.radon_sandwich_temperatures} temperatures each way: forward "
        f"(lower bound) {lower.log_z:.3f} +- {lower.stderr:.3f} (ESS {lower.ess:.0f}), reverse "
        f"from NUTS draws (upper bound) {upper.log_z:.3f} +- {upper.stderr:.3f} "
        f"(ESS {upper.ess:.0f}); the exact {RADON_LOG_Z:.3f} is "
        f"{sandwich_distance(RADON_LOG_Z, 0.0, lower, upper)}."
    )
    run_methods(
        rows,
        problem,
        seeds,
        sizes,
        sizes.radon_budget,
        sizes.radon_particles,
        settings.radon_warmup,
        (targets.radon_model, (), data),
    )
    rows.notes.append(
        f"{title}: AIS: {sizes.radon_particles} particles x "
        f"{ais_temperatures(sizes.radon_budget, sizes.radon_particles)} temperatures."
    )
    rows.notes.append(defaults_note(rows))
    return rows


def defaults_only(name, seeds):
    """The defaults row alone on target ``name``: no base fit, tempering runs or SMC."""
    if name == "boltzmann":
        rows = TargetRows("Boltzmann relaxation D_B=16 (D=15)", {}, "exact per system")
        for seed in seeds:
            relaxation = targets.make_boltzmann_relaxation(seed, 16)
            rows.log_z[seed] = relaxation.log_z
            add_defaults_row(rows, [seed], (targets.boltzmann_relaxation_model, (relaxation,), {}))
    elif name == "linear_regression":
        features, responses = targets.make_linear_regression_data(0)
        log_z = targets.linear_regression_log_evidence(features, responses)
        title = f"Linear regression N={features.shape[0]}, P={features.shape[1]}"
        rows = TargetRows(title, log_z, "closed form")
        model_kwargs = {"features": features, "targets": responses}
        add_defaults_row(rows, seeds, (targets.linear_regression_model, (), model_kwargs))
    else:
        rows = TargetRows("Radon hierarchical regression", RADON_LOG_Z, "exact (quadrature)")
        rows.notes.append(tb.RADON_NOTE)
        add_defaults_row(rows, seeds, (targets.radon_model, (), targets.load_radon()))
    rows.notes.append(defaults_note(rows))
    return rows


def throughput(sizes):
    """AIS particles x temperatures per second (compile excluded) against the particle count."""
    features, responses = targets.make_linear_regression_data(0)
    models = {
        "Linear regression (P=5)": (
            targets.linear_regression_model,
            {"features": features, "targets": responses},
            (),
        ),
        "Radon (D=92)": (targets.radon_model, targets.load_radon(), ()),
        "Ising 4x4 (16 spins, exact Gibbs)": (nx.ising_model, {"coupling": 0.3}, (4,)),
    }
    lines = [
        "| model | particles | temperatures | seconds | particle-temperatures / s | "
        "throughput / smallest run's |",
        "|---|---|---|---|---|---|",
    ]
    for title, (model, model_kwargs, model_args) in models.items():
        smallest = None
        for num_particles in sizes.throughput_particles:
            settings = dict(
                num_particles=num_particles,
                num_temperatures=sizes.throughput_temperatures,
                num_pilot_steps=0,
                progress_bar=False,
                # The prior path: the default fitted base would refit for the timed call's key.
                base="prior",
            )
            # The first call compiles; the second, on the cached compiled scan, is timed.
            nx.ais(jax.random.PRNGKey(0), model, model_args, model_kwargs, **settings)
            _, seconds = timed(
                nx.ais, jax.random.PRNGKey(1), model, model_args, model_kwargs, **settings
            )
            rate = num_particles * sizes.throughput_temperatures / seconds
            smallest = smallest or rate
            lines.append(
                f"| {title} | {num_particles} | {sizes.throughput_temperatures} | "
                f"{seconds:.2f} | {rate:.3g} | {rate / smallest:.2f} |"
            )
            log(f"throughput {title}, {num_particles} particles: {rate:.3g} / s")
    return "\n".join(lines)


def log_z_table(results):
    lines = [
        "| target | log Z | method | seeds | grad. evals / estimate | error: mean +- sd | RMSE | "
        "mean reported stderr | abs(error) <= 2 stderr | RMSE / SMC's | s / estimate |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rows in results:
        truth = rows.log_z
        smc_rmse = None
        if "SMC" in rows.methods:
            smc_rmse = tb.summarise(rows.methods["SMC"], truth).rmse
        for name, estimates in rows.methods.items():
            summary = tb.summarise(estimates, truth)
            label = rows.log_z_label
            if not isinstance(truth, dict):
                label = f"{truth:.3f} ({label})"
            ratio = "-"
            if smc_rmse and name != "SMC":
                ratio = f"{summary.rmse / smc_rmse:.2f}"
            coverage = "-" if math.isnan(summary.coverage) else f"{summary.coverage:.0%}"
            lines.append(
                f"| {rows.title} | {label} | {name} | {len(estimates)} | "
                f"{summary.gradient_evaluations:.3g} | "
                f"{summary.mean_error:+.3f} +- {tb.fmt(summary.error_sd)} | {summary.rmse:.3f} | "
                f"{tb.fmt(summary.mean_stderr)} | {coverage} | {ratio} | "
                f"{rows.seconds[name] / len(estimates):.1f} |"
            )
    return "\n".join(lines)


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke-size run")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0-9")
    parser.add_argument("--targets", nargs="+", choices=TARGET_NAMES, default=None)
    parser.add_argument("--no-throughput", action="store_true", help="skip the throughput table")
    parser.add_argument(
        "--defaults-only",
        action="store_true",
        help="only the defaults row (nx.ais at the README's run length); no throughput table",
    )
    parser.add_argument(
        "--radon-sandwich",
        type=int,
        metavar="TEMPERATURES",
        help="only the radon bidirectional AIS sandwich, at this many temperatures each way",
    )
    parser.add_argument(
        "--sandwich-particles", type=int, default=None, help="particles each way (default 1000)"
    )
    parser.add_argument("--output", help="also write the markdown report to this file")
    return parser.parse_args(argv)


def radon_sandwich_only(sizes, num_temperatures, num_particles):
    """The radon sandwich alone, from the bootstrapped base, as an independent reference."""
    data = targets.load_radon()
    base, base_note = tb.radon_bootstrapped_base(data)
    problem = tb.model_problem("radon", "Radon", targets.radon_model, data, base, None)
    sizes = dataclasses.replace(
        sizes,
        radon_sandwich_temperatures=num_temperatures,
        radon_sandwich_particles=num_particles or sizes.radon_sandwich_particles,
    )
    start = time.perf_counter()
    lower, upper = radon_sandwich(problem, data, sizes)
    midpoint = (lower.log_z + upper.log_z) / 2
    return "\n".join(
        [
            f"- {base_note}",
            f"- {sizes.radon_sandwich_particles} particles x {num_temperatures} temperatures "
            f"each way ({time.perf_counter() - start:.0f} s): forward (lower bound) "
            f"{lower.log_z:.3f} +- {lower.stderr:.3f} (ESS {lower.ess:.0f}), reverse from NUTS "
            f"draws (upper bound) {upper.log_z:.3f} +- {upper.stderr:.3f} "
            f"(ESS {upper.ess:.0f}); gap {upper.log_z - lower.log_z:.3f}, midpoint "
            f"{midpoint:.3f}.",
        ]
    )


def main(argv=None):
    arguments = sys.argv[1:] if argv is None else list(argv)
    options = parse_arguments(arguments)
    sizes = QUICK if options.quick else FULL
    seeds = options.seeds or ([0, 1] if options.quick else list(range(10)))
    runners = {
        "boltzmann": benchmark_boltzmann,
        "linear_regression": benchmark_linear_regression,
        "radon": benchmark_radon,
    }
    names = options.targets or TARGET_NAMES
    if options.radon_sandwich:
        print(radon_sandwich_only(sizes, options.radon_sandwich, options.sandwich_particles))
        log("done")
        return
    if options.defaults_only:
        results = [defaults_only(name, seeds) for name in names]
    else:
        results = [runners[name](seeds, sizes) for name in names]
    sections = []
    if not (options.no_throughput or options.defaults_only):
        sections += ["## AIS throughput (compile excluded)", "", throughput(sizes), ""]
    elapsed = elapsed_seconds()
    environment = tb.environment_lines(arguments, sizes, elapsed, script="ais_benchmark.py")
    heading = "log Z at one gradient budget"
    if options.defaults_only:
        heading = "log Z of nx.ais at its defaults (README run length, outside the budget)"
    text = "\n".join(
        ["## Environment", "", *environment, "", f"## {heading}", ""]
        + [log_z_table(results), ""]
        + sections
        + ["## Notes", ""]
        + [f"- {note}" for rows in results for note in rows.notes]
    )
    print(text)
    if options.output:
        with open(options.output, "w") as output:
            output.write(text + "\n")
    log("done")


if __name__ == "__main__":
    main()
