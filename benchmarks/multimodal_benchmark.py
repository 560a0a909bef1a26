"""Continuous tempering and replica exchange with their defaults on multimodal targets with exact
answers.

Runs, exactly as a user would, ``MCMC(nx.JointContinuousTempering(model), num_warmup=1000,
num_samples=2000, num_chains=4, chain_method=...)`` (the base fitted by the kernel with
``nx.fit_base``'s defaults), the same with ``nx.GibbsContinuousTempering`` and with
``nx.ReplicaExchange`` (method ``exchange``: its defaults, NUTS inside), plain NUTS, and
BlackJAX adaptive tempered SMC from the prior (method ``smc``, HMC mutations, given the gradient
evaluations of the same seed's ``exchange`` run, split over 4 independent runs) as anchors, and
the tempering kernels run long enough to spend that same budget (methods ``joint-budget`` and
``gibbs-budget``), on the three families of :mod:`numpyro_extras.targets.multimodal`:

* ``mixture``: separated two-component Gaussian mixture posteriors, ``D`` from 6 to 20, minor
  weight 0.25-0.35, minor mode twice as narrow;
* ``signs``: products of 4-6 independent sign-ambiguous parameters (16-64 modes);
* ``boltzmann``: Boltzmann machine relaxations with 16 units, one machine per seed, modes read
  on the signs of the two leading principal components (4 labels).

Per family and method it prints the mode-weight error ``max_k |w_hat_k - w_k|`` (tempered draws
weighted by ``nx.target_log_weights``; for replica exchange, ``mcmc.get_samples()``), the log Z
error, the reported stderr, the coverage ``|error| < 3 stderr``, and the wall times of the base
fit and of the run (compilation included). The base fit is timed by wrapping the ``fit_base``
the kernels call; the joint and Gibbs kernels of one target fit the same base (same seed and
settings), so the second fit is served from the first.

Usage::

    python benchmarks/multimodal_benchmark.py --quick                # 1 seed per family
    python benchmarks/multimodal_benchmark.py --output report.md     # 10 seeds per family
    python benchmarks/multimodal_benchmark.py --families mixture --seeds 0 1 \\
        --fit-base-kwargs '{"bootstrap_rounds": 0}'
    python benchmarks/multimodal_benchmark.py --report-from runs.jsonl   # tables of saved runs
    python benchmarks/multimodal_benchmark.py --methods exchange smc      # SMC at exchange's budget
    python benchmarks/multimodal_benchmark.py --methods joint exchange joint-budget  # CT too
    python benchmarks/multimodal_benchmark.py --methods joint gibbs exchange smc-time \\
        --json runs.jsonl                # time to the accuracy targets beside SMC's
    python benchmarks/multimodal_benchmark.py --fit-times    # only the kernels' base fits, timed

Method ``smc-time`` measures SMC's time to the accuracy targets: the runs of ``smc`` with 64,
128, 256, ... particles per run (up to ``--smc-time-max-particles``) until one meets them all; a
"time to accuracy" table then sets every method's first-call seconds (compilation included)
against that attempt's seconds and against the whole doubling search's.

``--fit-times`` times ``nx.fit_base`` as the tempering kernels call it (their fit seed 0, the
defaults, no progress bar) on every target, one after another in this process, so the first fit
of each new model shape includes its compilation.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time
import warnings

# XLA's multi-threaded Eigen runtime deadlocked (all threads idle in futex waits) in about one
# run in three on the benchmark machine; single-threaded Eigen never did.
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import numpyro  # noqa: E402

numpyro.set_host_device_count(2)
# log Z to a few hundredths of a nat needs double precision; set it before any array exists.
numpyro.enable_x64()

import jax  # noqa: E402
import numpy as np  # noqa: E402
from common import (  # noqa: E402
    TEMPERING_EVALUATIONS_BESIDE_MOVES,
    markdown_table,
    publish_report,
    read_runs,
    save_run,
)
from numpyro.infer import MCMC, NUTS  # noqa: E402
from scipy.special import logsumexp  # noqa: E402
from smc_anchor import TemperedSMC  # noqa: E402

import numpyro_extras as nx  # noqa: E402
import numpyro_extras.exchange.kernels as exchange_kernels_module  # noqa: E402
import numpyro_extras.tempering.kernels as kernels_module  # noqa: E402
from numpyro_extras.model.potential import split_model  # noqa: E402
from numpyro_extras.shell.kernel import arguments_fingerprint  # noqa: E402
from numpyro_extras.targets import (  # noqa: E402
    boltzmann_target,
    gaussian_mixture_target,
    mode_weight_error,
    sign_product_target,
)

FAMILIES = ("mixture", "signs", "boltzmann")
# "joint-budget" and "gibbs-budget": the tempering kernels run long enough to spend the gradient
# evaluations of the same seed's exchange run (4 chains x (1000 + n) with n scaled from the same
# seed's default run).
# "smc-time": SMC with doubling particle counts until it meets the targets (run_smc_time). New
# methods go last: a method's random key is derived from its index.
METHODS = (
    "joint",
    "gibbs",
    "exchange",
    "nuts",
    "smc",
    "joint-budget",
    "gibbs-budget",
    "smc-time",
)
# Mixture dimensions of seeds 0-9: the range 6-20, twice at the top.
MIXTURE_DIMENSIONS = (6, 8, 10, 12, 14, 16, 18, 20, 12, 20)

# Our acceptance targets for the defaults (checked in the report).
MAX_MODE_WEIGHT_ERROR = 0.03
MAX_STDERR = 0.15
MAX_Z_SCORE = 3.0
MAX_FIT_SECONDS = 20.0

NUM_WARMUP, NUM_SAMPLES, NUM_CHAINS = 1000, 2000, 4
# Particles per run of smc-time's first attempt and its default cap (the counts double).
SMC_TIME_MIN_PARTICLES, SMC_TIME_MAX_PARTICLES = 64, 16384


def make_target(family, seed):
    if family == "mixture":
        return gaussian_mixture_target(seed, MIXTURE_DIMENSIONS[seed % len(MIXTURE_DIMENSIONS)])
    if family == "signs":
        return sign_product_target(seed, 4 + seed % 3)
    if family == "boltzmann":
        return boltzmann_target(seed, 16)
    raise ValueError(family)


def weighted_mode_weights(mcmc, target):
    """The target's mode weights estimated from a tempering run (eq. 21 weights).

    The one place that knows where a tempering run keeps its tempered draws and their weights.
    """
    weights = np.exp(nx.target_log_weights(mcmc)).ravel()
    return target.empirical_mode_weights(nx.tempered_samples(mcmc), weights)


class TimedFit:
    """Wraps the ``fit_base`` the kernels call: times each fit, serves repeats from a cache
    (with the fit's warnings).

    ``progress_bar`` is turned off (it does not change the fit).
    """

    def __init__(self, original):
        self.original = original
        self.cache = {}
        self.fit_seconds = 0.0
        self.spent_seconds = 0.0

    def __call__(self, rng_key, model, model_args=(), model_kwargs=None, **kwargs):
        kwargs = {**kwargs, "progress_bar": False}
        key = (
            id(model),
            arguments_fingerprint(model_args, model_kwargs),
            repr(sorted(kwargs.items())),
            tuple(np.asarray(jax.random.key_data(rng_key)).ravel().tolist()),
        )
        start = time.perf_counter()
        if key not in self.cache:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                base = self.original(rng_key, model, model_args, model_kwargs, **kwargs)
                jax.block_until_ready(base)
            self.cache[key] = (base, time.perf_counter() - start, caught)
        base, self.fit_seconds, caught = self.cache[key]
        # A served base warns as the fit did, so that each kernel records the same problems.
        for caught_warning in caught:
            warnings.warn(caught_warning.message, stacklevel=2)
        self.spent_seconds += time.perf_counter() - start
        return base


def exchange_gradient_evaluations(mcmc):
    """Gradient evaluations of a replica-exchange run, warm-up included: the sampling phase's
    leapfrog steps over every rung (the reference rung makes no move), scaled by the run's
    length over the sampling phase's."""
    fields = mcmc.get_extra_fields()
    steps = np.asarray(fields["inner_state.num_steps"])[..., 1:].sum()
    if "prior_leg.inner_state.num_steps" in fields:
        steps += np.asarray(fields["prior_leg.inner_state.num_steps"])[..., 1:].sum()
    return int(steps * (NUM_WARMUP + NUM_SAMPLES) / NUM_SAMPLES)


def tempering_gradient_evaluations(mcmc, num_samples):
    """Gradient evaluations of a tempering run, warm-up included: the leapfrog steps of the
    tempered chain's moves and of the posterior replica's own moves during sampling (the last of
    each draw's ``moves_per_draw`` transitions) with the evaluations beside them, scaled by the
    run's number of transitions over the sampling phase's draws."""
    fields = mcmc.get_extra_fields()
    tempered_steps = np.asarray(fields["num_steps"])
    steps = tempered_steps.sum() + TEMPERING_EVALUATIONS_BESIDE_MOVES * tempered_steps.size
    steps += np.asarray(fields["replica_inner_state.num_steps"]).sum()
    moves_per_draw = mcmc.sampler.moves_per_draw
    return int(steps * (NUM_WARMUP + moves_per_draw * num_samples) / num_samples)


def budget_num_samples(budget, default_run):
    """Draws per chain after the default warm-up that make a tempering run spend ``budget``
    gradient evaluations, at the rate of the same kernel's default run on the seed (whose
    ``moves_per_draw`` the budget run repeats)."""
    moves = default_run.get("moves_per_draw", 1)
    transitions = NUM_CHAINS * (NUM_WARMUP + moves * NUM_SAMPLES)
    per_transition = default_run["gradient_evaluations"] / transitions
    sampling_transitions = budget / (NUM_CHAINS * per_transition) - NUM_WARMUP
    return max(NUM_SAMPLES, round(sampling_transitions / moves))


def smc_anchor(target):
    """The SMC anchor on ``target``'s prior and likelihood, with its exact prior draws
    ``(rng_key, n) -> [n, D]``. Each call jits its own step, so its first run of each particle
    count compiles."""
    split = split_model(jax.random.PRNGKey(0), target.model, target.model_args, target.model_kwargs)
    smc = TemperedSMC(
        lambda _, x: split.log_prior_fn(x, {}), lambda _, x: split.log_likelihood_fn(x, {})
    )

    def draw_prior(rng_key, num_particles):
        return split.sample_prior_fn(rng_key, num_particles)[0]

    return smc, draw_prior


def run_smc_particles(target, smc, draw_prior, rng_key, num_particles, step_size):
    """``NUM_CHAINS`` independent SMC runs of ``num_particles`` each from the prior, started at
    ``step_size`` (as replica exchange runs chains): ``log Z`` is the log of the runs' mean ``Z``
    estimate (each unbiased), its stderr the runs' spread (delta method); the mode weights pool
    the runs' weighted particles, each run weighted by its ``Z`` estimate.

    Returns the measurements of :func:`run_method`, ``run_seconds`` the runs' wall seconds
    (compilation included when ``smc`` has not run ``num_particles`` before)."""
    start = time.perf_counter()
    runs = []
    for run_key in jax.random.split(rng_key, NUM_CHAINS):
        init_key, run_key = jax.random.split(run_key)
        runs.append(
            smc.run(run_key, draw_prior(init_key, num_particles), None, step_size=step_size)
        )
    seconds = time.perf_counter() - start
    log_zs = np.array([run.log_z for run in runs])
    log_z = logsumexp(log_zs) - math.log(len(runs))
    relative = np.exp(log_zs - log_z)
    stderr = float(np.std(relative, ddof=1) / math.sqrt(len(runs)))
    run_weights = np.exp(log_zs - logsumexp(log_zs))
    particles = np.concatenate([run.particles for run in runs])
    weights = np.concatenate([w * run.weights for w, run in zip(run_weights, runs, strict=True)])
    mode_weights = target.empirical_mode_weights(particles, weights)
    return {
        "run_seconds": seconds,
        "fit_seconds": 0.0,
        "mode_weights": mode_weights.tolist(),
        "mode_weight_error": mode_weight_error(mode_weights, target.mode_weights),
        "posterior_mode_weight_error": mode_weight_error(mode_weights, target.mode_weights),
        "log_z_error": log_z - target.log_z,
        "stderr": stderr,
        "log_zeta_error": float("nan"),
        "near_base": float("nan"),
        "near_target": float("nan"),
        "gradient_evaluations": int(sum(run.gradient_evaluations for run in runs)),
        "num_particles": num_particles,
        "num_temperatures": int(np.mean([run.num_temperatures for run in runs])),
        "warned": False,
        "warnings": [],
    }


def run_smc(target, seed, budget):
    """BlackJAX adaptive tempered SMC from the prior with ``budget`` gradient evaluations,
    split over ``NUM_CHAINS`` independent runs (:func:`run_smc_particles`) whose particle count
    and starting step size come from a pilot run; ``run_seconds`` includes the pilot."""
    smc, draw_prior = smc_anchor(target)
    key = jax.random.fold_in(jax.random.PRNGKey(seed), METHODS.index("smc"))
    pilot_key, key = jax.random.split(key)
    start = time.perf_counter()
    num_particles, step_size = smc.particles_for_budget(
        pilot_key, draw_prior, None, budget / NUM_CHAINS, multiple=64
    )
    result = run_smc_particles(target, smc, draw_prior, key, num_particles, step_size)
    result.update(method="smc", run_seconds=time.perf_counter() - start)
    return result


def run_smc_time(target, seed, max_particles=SMC_TIME_MAX_PARTICLES):
    """SMC's time to the accuracy targets: :func:`run_smc_particles` with 64, 128, 256, ...
    particles per run, up to ``max_particles``, until a result meets every target (:func:`met`).

    The starting step size is a pilot run's (as in :func:`run_smc`). JAX's caches are cleared
    before the pilot and before every attempt, so that each is timed as in a fresh process,
    all its compilation included and nothing reused from the pilot, an earlier attempt or an
    earlier method: ``run_seconds`` (the meeting attempt alone) is what a user who knew the
    count and the step size would wait for, ``search_seconds`` (the pilot and every attempt up
    to the meeting one) what a user who does not know the count spends, each step of the search
    started afresh. Methods run after it in this process start from cleared caches too. When no
    count up to ``max_particles`` meets, the last attempt is recorded with ``targets_met``
    false."""
    key = jax.random.fold_in(jax.random.PRNGKey(seed), METHODS.index("smc-time"))
    pilot_key, key = jax.random.split(key)
    smc, draw_prior = smc_anchor(target)
    jax.clear_caches()
    start = time.perf_counter()
    pilot = smc.pilot(pilot_key, draw_prior, None)
    pilot_seconds = time.perf_counter() - start
    attempts, num_particles = [], SMC_TIME_MIN_PARTICLES
    while True:
        jax.clear_caches()
        result = run_smc_particles(
            target,
            smc,
            draw_prior,
            jax.random.fold_in(key, num_particles),
            num_particles,
            pilot.step_size,
        )
        result["method"] = "smc-time"
        attempts.append(
            {
                "num_particles": num_particles,
                "seconds": result["run_seconds"],
                "met": met(result),
                **{
                    name: result[name]
                    for name in (
                        "mode_weight_error",
                        "log_z_error",
                        "stderr",
                        "gradient_evaluations",
                    )
                },
            }
        )
        print(
            f"  smc-time {num_particles} particles x {NUM_CHAINS}: mode-weight error "
            f"{result['mode_weight_error']:.3f}, log Z error {result['log_z_error']:+.3f} +- "
            f"{result['stderr']:.3f}, {result['run_seconds']:.1f} s",
            file=sys.stderr,
        )
        if attempts[-1]["met"] or 2 * num_particles > max_particles:
            break
        num_particles *= 2
    result.update(
        targets_met=attempts[-1]["met"],
        pilot_seconds=pilot_seconds,
        search_seconds=pilot_seconds + sum(attempt["seconds"] for attempt in attempts),
        pilot_gradient_evaluations=pilot.gradient_evaluations,
        search_gradient_evaluations=pilot.gradient_evaluations
        + sum(attempt["gradient_evaluations"] for attempt in attempts),
        step_size=pilot.step_size,
        max_particles=max_particles,
        attempts=attempts,
    )
    return result


def run_method(
    method,
    target,
    seed,
    chain_method,
    fit_base_kwargs,
    timed_fit,
    exchange_reference="auto",
    tempering_kwargs=None,
    num_samples=NUM_SAMPLES,
):
    """One run of ``method`` on ``target`` (``num_samples`` draws per chain for the tempering
    kernels); returns a dict of measurements."""
    if method == "nuts":
        kernel = NUTS(target.model)
    elif method == "exchange":
        kernel = nx.ReplicaExchange(
            target.model,
            reference=exchange_reference,
            fit_base_kwargs={"progress_bar": False, **fit_base_kwargs},
        )
    else:
        kernel_class = {
            "joint": nx.JointContinuousTempering,
            "gibbs": nx.GibbsContinuousTempering,
        }[method.removesuffix("-budget")]
        kernel = kernel_class(
            target.model, fit_base_kwargs=fit_base_kwargs, **(tempering_kwargs or {})
        )
    mcmc = MCMC(
        kernel,
        num_warmup=NUM_WARMUP,
        num_samples=num_samples if method not in ("nuts", "exchange") else NUM_SAMPLES,
        num_chains=NUM_CHAINS,
        chain_method=chain_method,
        progress_bar=False,
    )
    # The leapfrog steps of every rung: the gradient budget SMC gets beside replica exchange.
    extra_fields = ("inner_state.num_steps",) if method == "exchange" else ()
    if method == "exchange" and exchange_reference in ("auto", "stabilized"):
        extra_fields += ("prior_leg.inner_state.num_steps",)
    if method not in ("nuts", "exchange"):
        extra_fields = ("num_steps", "replica_inner_state.num_steps")
    timed_fit.fit_seconds = timed_fit.spent_seconds = 0.0
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(
            jax.random.fold_in(jax.random.PRNGKey(seed), METHODS.index(method)),
            *target.model_args,
            extra_fields=extra_fields,
            **target.model_kwargs,
        )
        jax.block_until_ready(mcmc.get_samples())
    total = time.perf_counter() - start
    result = {"method": method, "run_seconds": total - timed_fit.spent_seconds}
    if method == "nuts":
        weights = target.empirical_mode_weights(mcmc.get_samples())
        result.update(fit_seconds=0.0)
    elif method == "exchange":
        weights = target.empirical_mode_weights(mcmc.get_samples())
        with warnings.catch_warnings(record=True) as estimate_warnings:
            warnings.simplefilter("always")
            evidence = nx.log_marginal_likelihood(mcmc)
        caught += estimate_warnings
        diagnostics = nx.exchange_diagnostics(mcmc)
        result.update(
            fit_seconds=timed_fit.fit_seconds if exchange_reference != "prior" else 0.0,
            posterior_mode_weight_error=mode_weight_error(weights, target.mode_weights),
            log_z_error=evidence.log_z - target.log_z,
            stderr=evidence.stderr,
            log_zeta_error=float("nan"),
            near_base=float("nan"),
            near_target=float("nan"),
            round_trips=int(np.sum(diagnostics.round_trips)),
            barrier=float(np.mean(diagnostics.barrier)),
            posterior_ess=diagnostics.posterior_ess,
            gradient_evaluations=exchange_gradient_evaluations(mcmc),
        )
    else:
        weights = weighted_mode_weights(mcmc, target)
        posterior = target.empirical_mode_weights(mcmc.get_samples())
        result.update(posterior_mode_weight_error=mode_weight_error(posterior, target.mode_weights))
        with warnings.catch_warnings(record=True) as estimate_warnings:
            warnings.simplefilter("always")
            evidence = nx.log_marginal_likelihood(mcmc, check_base=False)
        caught += estimate_warnings
        diagnostics = nx.tempering_diagnostics(mcmc)
        result.update(
            fit_seconds=timed_fit.fit_seconds,
            log_z_error=evidence.log_z - target.log_z,
            stderr=evidence.stderr,
            log_zeta_error=float(kernel.base.log_zeta) - target.log_z,
            near_base=float(np.mean(diagnostics["fraction_near_base"])),
            near_target=float(np.mean(diagnostics["fraction_near_target"])),
            round_trips=int(np.sum(diagnostics["round_trips"])),
            gradient_evaluations=tempering_gradient_evaluations(mcmc, num_samples),
            num_samples=num_samples,
            moves_per_draw=kernel.moves_per_draw,
        )
    # What a user is told: the base fit's and the estimate's warnings.
    told = [
        str(caught_warning.message)
        for caught_warning in caught
        if issubclass(caught_warning.category, UserWarning)
        and (
            issubclass(caught_warning.category, nx.BaseCoverageWarning)
            or "shows trouble" in str(caught_warning.message)
        )
    ]
    result.update(
        mode_weights=weights.tolist(),
        mode_weight_error=mode_weight_error(weights, target.mode_weights),
        warned=bool(told),
        warnings=told,
    )
    return result


def met(result):
    if result["method"] == "nuts":
        return result["mode_weight_error"] <= MAX_MODE_WEIGHT_ERROR
    return (
        result["mode_weight_error"] <= MAX_MODE_WEIGHT_ERROR
        and abs(result["log_z_error"]) <= MAX_Z_SCORE * result["stderr"]
        and result["stderr"] <= MAX_STDERR
    )


def summary_table(results):
    lines = [
        "| Family | Method | Seeds | Mode-weight error: mean / max | log Z RMSE | Mean abs(err) "
        "| Stderr: mean / max | abs(err) < 3 stderr | All targets met | Missed and silent "
        "| get_samples mode-weight error: max (<= 0.03) "
        "| log zeta - log Z: mean | Base fit s: mean / max | Run s: mean |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for family in FAMILIES:
        for method in METHODS:
            rows = [r for r in results if r["family"] == family and r["method"] == method]
            if not rows:
                continue
            mode = np.array([r["mode_weight_error"] for r in rows])
            cells = [family, method, str(len(rows)), f"{mode.mean():.3f} / {mode.max():.3f}"]
            if method == "nuts":
                cells += ["-"] * 5
            else:
                errors = np.array([r["log_z_error"] for r in rows])
                stderrs = np.array([r["stderr"] for r in rows])
                covered = np.abs(errors) < MAX_Z_SCORE * stderrs
                cells += [
                    f"{math.sqrt(np.mean(errors**2)):.3f}",
                    f"{np.mean(np.abs(errors)):.3f}",
                    f"{stderrs.mean():.3f} / {stderrs.max():.3f}",
                    f"{covered.sum()}/{len(rows)}",
                ]
            cells.append(f"{sum(met(r) for r in rows)}/{len(rows)}")
            silent = sum(not met(r) and not r.get("warned", False) for r in rows)
            cells.append("-" if method == "nuts" else f"{silent}/{len(rows)}")
            posterior = [
                r["posterior_mode_weight_error"] for r in rows if "posterior_mode_weight_error" in r
            ]
            within = sum(error <= MAX_MODE_WEIGHT_ERROR for error in posterior)
            cells.append(f"{max(posterior):.3f} ({within}/{len(posterior)})" if posterior else "-")
            if method == "nuts":
                cells += ["-", "-"]
            else:
                zeta = np.mean([r["log_zeta_error"] for r in rows])
                fits = np.array([r["fit_seconds"] for r in rows])
                cells += [f"{zeta:+.2f}", f"{fits.mean():.1f} / {fits.max():.1f}"]
            cells.append(f"{np.mean([r['run_seconds'] for r in rows]):.0f}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_seed_table(results):
    lines = [
        "| Family | Target | Seed | Method | Mode-weight error: weighted / get_samples "
        "| log Z error | Stderr | Warned | log zeta - log Z | Near beta 0 / 1 | Base fit s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if r["method"] == "nuts":
            mode = f"{r['mode_weight_error']:.3f}"
            extra = ["-", "-", "-", "-", "-", "-"]
        else:
            mode = f"{r['mode_weight_error']:.3f} / {r['posterior_mode_weight_error']:.3f}"
            extra = [
                f"{r['log_z_error']:+.3f}",
                f"{r['stderr']:.3f}",
                "yes" if r.get("warned") else "no",
                f"{r['log_zeta_error']:+.2f}",
                f"{r['near_base']:.2f} / {r['near_target']:.2f}",
                f"{r['fit_seconds']:.1f}",
            ]
        lines.append(
            "| "
            + " | ".join([r["family"], r["target"], str(r["seed"]), r["method"], mode] + extra)
            + " |"
        )
    return "\n".join(lines)


def budget_table(results):
    """Every method per seed that counted its gradient evaluations, with that count."""
    lines = [
        "| Family | Target | Seed | Method | Mode-weight error | log Z error | Stderr "
        "| Gradient evaluations | Particles x runs, temperatures | Run s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "gradient_evaluations" not in r:
            continue
        cells = [
            r["family"],
            r["target"],
            str(r["seed"]),
            r["method"],
            f"{r['mode_weight_error']:.3f}",
            f"{r['log_z_error']:+.3f}",
            f"{r['stderr']:.3f}",
            f"{r['gradient_evaluations'] / 1e6:.2f} M",
            f"{r['num_particles']} x {NUM_CHAINS}, {r['num_temperatures']}"
            if r["method"] in ("smc", "smc-time")
            else "-",
            f"{r['run_seconds']:.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def first_call_seconds(result):
    """Wall seconds of one run as a user's first call waits for them, compilation included: the
    base fit and the run for our kernels (a fit served from the benchmark's cache counts as the
    fit it repeats), the pilot and the runs for ``smc``, the meeting attempt alone for
    ``smc-time``."""
    return result["fit_seconds"] + result["run_seconds"]


def time_to_accuracy_tables(results):
    """Per family and seed, every method's first-call seconds beside SMC's time to the targets
    (``smc-time``) on the same seed, and per family and method the median ratios; as lines.

    Seeds without an ``smc-time`` run are left out; of repeated runs of a method on a seed the
    last counts."""
    latest = {(r["family"], r["seed"], r["method"]): r for r in results}
    anchors = {(f, seed): r for (f, seed, method), r in latest.items() if method == "smc-time"}
    rows, ratios = [], {}
    for family in FAMILIES:
        for seed in sorted(seed for f, seed in anchors if f == family):
            anchor = anchors[family, seed]
            attempt, search = first_call_seconds(anchor), anchor["search_seconds"]
            for method in METHODS:
                r = latest.get((family, seed, method))
                if r is None:
                    continue
                seconds = first_call_seconds(r)
                ratios.setdefault((family, method), []).append(
                    (seconds / attempt, seconds / search, met(r))
                )
                particles = "-"
                if method == "smc-time":
                    tries = len(r["attempts"])
                    particles = f"{r['num_particles']} x {NUM_CHAINS} ({tries} attempts)"
                elif method == "smc":
                    particles = f"{r['num_particles']} x {NUM_CHAINS}"
                rows.append(
                    [
                        family,
                        r["target"],
                        seed,
                        method,
                        "yes" if met(r) else "**no**",
                        f"{seconds:.1f}",
                        f"{search:.1f}" if method == "smc-time" else "-",
                        particles,
                        f"{seconds / attempt:.2f}",
                        f"{seconds / search:.2f}",
                    ]
                )
    header = [
        "Family",
        "Target",
        "Seed",
        "Method",
        "Targets met",
        "First call s",
        "smc-time search s",
        "SMC particles x runs",
        "s / smc-time attempt s",
        "s / smc-time search s",
    ]
    summary = []
    for (family, method), values in ratios.items():
        attempt_ratios, search_ratios, met_flags = zip(*values, strict=True)
        summary.append(
            [
                family,
                method,
                len(values),
                f"{sum(met_flags)}/{len(values)}",
                f"{np.median(attempt_ratios):.2f}",
                f"{np.median(search_ratios):.2f}",
            ]
        )
    summary_header = [
        "Family",
        "Method",
        "Seeds",
        "Targets met",
        "Median s / smc-time attempt s",
        "Median s / smc-time search s",
    ]
    return [
        "## Time to accuracy",
        "",
        "First call s: base fit + run for our kernels, compilation included; for smc-time the "
        "attempt that first met the targets alone, timed from cleared JAX caches (all its "
        "compilation included; not the pilot that set its step size); smc-time search s: the "
        "pilot and every attempt of the doubling search (64, 128, ... particles per run) up to "
        "it, each timed from cleared caches. Where smc-time did "
        "not meet the targets, its seconds are those of its last attempt (a lower bound). A "
        "ratio of a method that missed the targets is not a time to accuracy.",
        "",
        markdown_table(header, rows),
        "",
        markdown_table(summary_header, summary),
        "",
    ]


def result_tables(results):
    """The report's summary and per-seed tables, and the time-to-accuracy tables when there are
    ``smc-time`` runs, as lines."""
    lines = ["## Summary", "", summary_table(results), ""]
    if any(r["method"] in ("smc", "joint-budget", "gibbs-budget", "smc-time") for r in results):
        lines += ["## Per seed, with the gradient budget", "", budget_table(results), ""]
    else:
        lines += ["## Per seed", "", per_seed_table(results), ""]
    if any(r["method"] == "smc-time" for r in results):
        lines += time_to_accuracy_tables(results)
    return lines


def environment(args):
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "numpyro_extras"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        commit, dirty = "unknown", ""
    return [
        f"- Command: `python {' '.join(sys.argv)}`",
        f"- Date: {datetime.datetime.now().isoformat(timespec='minutes')}",
        f"- Machine: {platform.machine()}, {jax.local_device_count()} CPU devices, Python "
        f"{platform.python_version()}, jax {jax.__version__}, numpyro {numpyro.__version__}",
        f"- Repository commit {commit}{' (numpyro_extras modified)' if dirty else ''}",
        f"- Runs: {NUM_CHAINS} chains x ({NUM_WARMUP} warm-up + {NUM_SAMPLES}) draws, "
        f"chain_method={args.chain_method!r}, fit_base_kwargs={args.fit_base_kwargs}, "
        f"exchange reference={args.exchange_reference!r}",
    ]


def fit_times(families, seeds):
    """The seconds of each target's default base fit, as the kernels make it, with the classes
    of the warnings it gave; a markdown table."""
    rows, seen_shapes = [], set()
    for family in families:
        for seed in seeds:
            target = make_target(family, seed)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                start = time.perf_counter()
                base = nx.fit_base(
                    jax.random.PRNGKey(0),
                    target.model,
                    target.model_args,
                    target.model_kwargs,
                    progress_bar=False,
                )
                jax.block_until_ready(base)
                seconds = time.perf_counter() - start
            shape = (family, target.name)
            compiles = "yes" if shape not in seen_shapes else "no"
            seen_shapes.add(shape)
            names = sorted({type(w.message).__name__ for w in caught if w.category is not None})
            rows.append(
                [family, target.name, seed, compiles, f"{seconds:.1f}", " ".join(names) or "-"]
            )
            print(" ".join(str(cell) for cell in rows[-1]), file=sys.stderr)
    header = ["Family", "Target", "Seed", "First of its shape", "Fit s", "Warnings"]
    return markdown_table(header, rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 seed per family")
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=METHODS,
        default=[method for method in METHODS if method != "smc-time"],
        help="smc-time (only when named): SMC with 64, 128, ... particles per run until it "
        "meets the targets, timed, beside every method's first-call seconds",
    )
    parser.add_argument(
        "--smc-time-max-particles",
        type=int,
        default=SMC_TIME_MAX_PARTICLES,
        help="particles per run at which smc-time's doubling search stops unmet",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=None)
    parser.add_argument("--chain-method", default="vectorized")
    parser.add_argument("--fit-base-kwargs", default="{}", help="JSON dict for the kernels")
    parser.add_argument(
        "--tempering-kwargs",
        default="{}",
        help="JSON dict of settings for the tempering kernels (methods joint and gibbs)",
    )
    parser.add_argument(
        "--exchange-reference",
        default="auto",
        choices=("auto", "prior", "fit", "stabilized"),
        help="reference of nx.ReplicaExchange (method exchange)",
    )
    parser.add_argument(
        "--budget-from",
        "--smc-budget-from",
        dest="budget_from",
        default=None,
        help="a --json file of exchange runs whose gradient evaluations set the budget of smc, "
        "joint-budget and gibbs-budget (and default joint/gibbs runs that set their rates)",
    )
    parser.add_argument("--output", default=None, help="also write the report here")
    parser.add_argument("--json", default=None, help="append one JSON line per run here")
    parser.add_argument(
        "--report-from", default=None, help="only print the tables of a --json file's runs"
    )
    parser.add_argument(
        "--fit-times", action="store_true", help="only time the kernels' default base fits"
    )
    args = parser.parse_args(argv)
    if args.fit_times:
        seeds = args.seeds if args.seeds is not None else list(range(10))
        table = fit_times(args.families, seeds)
        publish_report(
            "\n".join(["## Environment", ""] + environment(args) + ["", table]), args.output
        )
        return
    if args.report_from:
        print("\n".join(result_tables(read_runs(args.report_from))))
        return
    seeds = args.seeds if args.seeds is not None else ([0] if args.quick else list(range(10)))
    fit_base_kwargs = json.loads(args.fit_base_kwargs)
    timed_fit = TimedFit(kernels_module.fit_base)
    kernels_module.fit_base = exchange_kernels_module.fit_base = timed_fit
    exchange_budgets, default_runs = {}, {}
    if args.budget_from:
        for run in read_runs(args.budget_from):
            if "gradient_evaluations" not in run:
                continue
            if run["method"] == "exchange":
                exchange_budgets[run["family"], run["seed"]] = run["gradient_evaluations"]
            if run["method"] in ("joint", "gibbs"):
                default_runs[run["family"], run["seed"], run["method"]] = run
    results = []
    start = time.perf_counter()
    for family in args.families:
        for seed in seeds:
            target = make_target(family, seed)
            for method in sorted(args.methods, key=METHODS.index):
                if method == "smc":
                    budget = exchange_budgets.get((family, seed))
                    if budget is None:
                        raise SystemExit(
                            f"smc needs the gradient budget of an exchange run of {family} seed "
                            f"{seed}: add --methods exchange, or --budget-from runs.jsonl."
                        )
                    result = run_smc(target, seed, budget)
                elif method == "smc-time":
                    result = run_smc_time(target, seed, args.smc_time_max_particles)
                else:
                    num_samples = NUM_SAMPLES
                    if method.endswith("-budget"):
                        budget = exchange_budgets.get((family, seed))
                        default_method = method.removesuffix("-budget")
                        default_run = default_runs.get((family, seed, default_method))
                        if budget is None or default_run is None:
                            raise SystemExit(
                                f"{method} needs the gradient budget of an exchange run of "
                                f"{family} seed {seed} (--methods exchange or --budget-from) "
                                f"and the default run of {default_method} (--methods)."
                            )
                        num_samples = budget_num_samples(budget, default_run)
                    result = run_method(
                        method,
                        target,
                        seed,
                        args.chain_method,
                        fit_base_kwargs,
                        timed_fit,
                        args.exchange_reference,
                        json.loads(args.tempering_kwargs),
                        num_samples=num_samples,
                    )
                if method == "exchange":
                    exchange_budgets[family, seed] = result["gradient_evaluations"]
                if method in ("joint", "gibbs"):
                    default_runs[family, seed, method] = result
                result.update(family=family, seed=seed, target=target.name)
                if method == "exchange":
                    result.update(reference=args.exchange_reference)
                if method.removesuffix("-budget") in ("joint", "gibbs") and (
                    args.tempering_kwargs != "{}"
                ):
                    result.update(tempering_kwargs=args.tempering_kwargs)
                results.append(result)
                message = (
                    f"{family} {target.name} seed {seed} {method}: mode-weight error "
                    f"{result['mode_weight_error']:.3f}"
                )
                if method == "exchange":
                    message += (
                        f", log Z error {result['log_z_error']:+.3f} +- {result['stderr']:.3f}"
                        f", barrier {result['barrier']:.1f}, round trips {result['round_trips']}"
                    )
                elif method in ("smc", "smc-time"):
                    message += (
                        f", log Z error {result['log_z_error']:+.3f} +- {result['stderr']:.3f}"
                        f", {result['num_particles']} particles x {NUM_CHAINS} runs, "
                        f"{result['num_temperatures']} temperatures"
                    )
                    if method == "smc-time":
                        message += (
                            f", targets {'met' if result['targets_met'] else 'NOT met'}, "
                            f"search {result['search_seconds']:.0f} s"
                        )
                elif method != "nuts":
                    message += (
                        f", log Z error {result['log_z_error']:+.3f} +- {result['stderr']:.3f}"
                        f", log zeta - log Z {result['log_zeta_error']:+.2f}, fit "
                        f"{result['fit_seconds']:.1f} s"
                    )
                print(message + f", run {result['run_seconds']:.0f} s", file=sys.stderr)
                if args.json:
                    save_run(args.json, result)
    report = "\n".join(
        ["## Environment", ""]
        + environment(args)
        + [f"- Wall time: {(time.perf_counter() - start) / 60:.1f} min", ""]
        + result_tables(results)
    )
    publish_report(report, args.output)


if __name__ == "__main__":
    main()
