"""What a user waits for: every public kernel's first ``mcmc.run`` against NUTS's, on small models.

Each (kernel, model) pair runs in a fresh Python process, as a user's first call does:
``MCMC(kernel(model), num_warmup=1000, num_samples=2000, num_chains=4,
chain_method="vectorized")`` with the kernel at its defaults, float64, then a second
``mcmc.run`` with a new key on the same object (what is left once everything is compiled and
fitted). ``nx.ais`` runs as the README calls it (1000 particles x 200 temperatures), twice the
same way, and ``nx.fit_base`` (every default, no progress bar) as a kernel's set-up calls it,
twice with keys 0 and 1. Per pair the report gives the first and second call's seconds, the
first call's ratio to NUTS's on the same model (to plain ``nx.ACS``'s on the discrete model,
which NUTS cannot sample), the smallest bulk ESS of the posterior draws over every coordinate
per second of the first call, the accuracy against the model's exact or reference answer, and
the warnings raised.

The models (``MODELS``), each with the error its row reports:

- ``two_mode_regression``: ``x ~ N(1, 3)``, ``y_i ~ N(x^2, 1)`` (three observations near 9), two
  modes at about +-3 with sd about 0.1: the error of ``P(x > 0)`` against quadrature.
- ``logistic_regression``: 6 standardised features and an intercept, 200 synthetic labels: the
  largest error of a coefficient's posterior mean in units of its posterior sd, against a long
  NUTS reference run in its own process.
- ``eight_schools``: the non-centred eight schools model: the same, for ``mu``, ``tau`` and the
  school effects.
- ``mixture_means``: three unit-variance components with equal weights and unknown means
  (60 points around -4, 0, 4): the posterior is symmetric under relabelling, so each mean's
  posterior mean equals that of the three means' average; the error is the largest difference
  (about 4 for a sampler that stays in one labelling).
- ``funnel``: Neal's funnel with ``v ~ N(0, 3)`` and 5 coordinates ``x_i ~ N(0, exp(v / 2))``:
  the error of the 5% quantile of ``v`` against the exact -4.935.
- ``ising_chain``: 10 spins in a chain (coupling 0.6, field 0.1) as Bernoulli sites: the largest
  error of a spin's marginal against enumeration.

Usage::

    python benchmarks/latency_benchmark.py --output report.md > run.log 2>&1
    python benchmarks/latency_benchmark.py --repeats 3 --output report.md   # medians of 3
    python benchmarks/latency_benchmark.py --kernels NUTS JointContinuousTempering \
        --models eight_schools funnel
    python benchmarks/latency_benchmark.py --quick   # 250 + 500 draws, for a smoke test
    python benchmarks/latency_benchmark.py --kernels JointContinuousTempering \
        --models mixture_means --error-keys 6   # the error's spread over six run keys

``--error-keys N`` runs each pair again with keys 2, 3, ... until the error (the table's is the
second call's, key 1) is known for N keys, and reports its mean and range below the table.

``--repeats N`` runs each pair in N fresh processes and keeps the run with the median first
call (every run's first call is stored in ``first_calls``): a pair's seconds move by 20-40%
between runs on a shared machine, more than some ratios' distance to their targets.

Results are written to ``benchmarks/results/latency.json`` (one record per pair, and the run's
environment) and the report is printed as Markdown; ``python benchmarks/render_page.py`` puts
the table into ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import os
import subprocess
import sys
import time
import warnings

import numpy as np

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "latency.json")

CONTINUOUS_MODELS = (
    "two_mode_regression",
    "logistic_regression",
    "eight_schools",
    "mixture_means",
    "funnel",
)
DISCRETE_MODELS = ("ising_chain",)
MODELS = CONTINUOUS_MODELS + DISCRETE_MODELS
CONTINUOUS_KERNELS = (
    "NUTS",
    "JointContinuousTempering",
    "GibbsContinuousTempering",
    "ReplicaExchange",
    "AiSampler",
    "VAESLMC",
    "ais",
    "fit_base",
)
DISCRETE_KERNELS = ("ACS", "DMALA", "ReplicaExchange(ACS)")
KERNELS = CONTINUOUS_KERNELS + DISCRETE_KERNELS
# What each kernel's first call is held against: NUTS, and plain ACS on the discrete model.
ANCHOR = {"continuous": "NUTS", "discrete": "ACS"}
REFERENCE_SIZES = dict(num_warmup=2000, num_samples=20_000, num_chains=4)
FUNNEL_V_Q05 = 3.0 * -1.6448536269514722


# --- the models ------------------------------------------------------------------------------


def model_and_data(name):
    """``(model, args)`` of a zoo model, its data made with a fixed seed."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    rng = np.random.default_rng(0)
    if name == "two_mode_regression":

        def model(y):
            x = numpyro.sample("x", dist.Normal(1.0, 3.0))
            with numpyro.plate("data", y.shape[0]):
                numpyro.sample("y", dist.Normal(x**2, 1.0), obs=y)

        return model, (jnp.asarray(_two_mode_data()),)
    if name == "logistic_regression":
        features = rng.standard_normal((200, 6))
        coefficients = np.array([1.0, -0.5, 0.8, 0.0, 0.3, -1.2])
        logits = 0.2 + features @ coefficients
        labels = (rng.uniform(size=200) < 1 / (1 + np.exp(-logits))).astype(float)

        def model(features, labels):
            intercept = numpyro.sample("intercept", dist.Normal(0.0, 2.0))
            weights = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([6]).to_event(1))
            with numpyro.plate("data", features.shape[0]):
                numpyro.sample(
                    "labels", dist.Bernoulli(logits=intercept + features @ weights), obs=labels
                )

        return model, (jnp.asarray(features), jnp.asarray(labels))
    if name == "eight_schools":
        y = jnp.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
        sigma = jnp.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])

        def model(sigma, y):
            mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
            tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
            with numpyro.plate("schools", y.shape[0]):
                eta = numpyro.sample("eta", dist.Normal(0.0, 1.0))
                numpyro.sample("obs", dist.Normal(mu + tau * eta, sigma), obs=y)

        return model, (sigma, y)
    if name == "mixture_means":
        data = np.concatenate([rng.normal(loc, 1.0, 20) for loc in (-4.0, 0.0, 4.0)])

        def model(data):
            means = numpyro.sample("means", dist.Normal(0.0, 5.0).expand([3]).to_event(1))
            log_densities = dist.Normal(means, 1.0).log_prob(data[:, None]) - jnp.log(3.0)
            numpyro.factor("likelihood", jax_logsumexp(log_densities, axis=1).sum())

        return model, (jnp.asarray(data),)
    if name == "funnel":

        def model():
            v = numpyro.sample("v", dist.Normal(0.0, 3.0))
            numpyro.sample("x", dist.Normal(0.0, jnp.exp(v / 2)).expand([5]).to_event(1))

        return model, ()
    if name == "ising_chain":

        def model():
            spins = numpyro.sample("spins", dist.Bernoulli(0.5).expand([10]).to_event(1))
            signs = 2.0 * spins - 1.0
            numpyro.factor("energy", 0.6 * jnp.sum(signs[1:] * signs[:-1]) + 0.1 * signs.sum())

        return model, ()
    raise ValueError(f"unknown model {name!r}; choose from {MODELS}")


def jax_logsumexp(values, axis):
    from jax.scipy.special import logsumexp

    return logsumexp(values, axis=axis)


def _two_mode_data():
    """The two-mode regression's three observations near 9."""
    return 9.0 + np.random.default_rng(0).standard_normal(3)


@functools.cache
def two_mode_quadrature():
    """``(P(x > 0), log Z)`` of the two-mode regression by quadrature on a fine grid."""
    from scipy.special import logsumexp

    y = _two_mode_data()
    grid = np.linspace(-8, 10, 1_800_001)
    log_prior = -0.5 * ((grid - 1.0) / 3.0) ** 2 - math.log(3.0 * math.sqrt(2 * math.pi))
    log_likelihood = np.sum(
        -0.5 * (y[:, None] - grid[None] ** 2) ** 2 - 0.5 * math.log(2 * math.pi), axis=0
    )
    log_density = log_prior + log_likelihood
    log_total = logsumexp(log_density)
    right = float(np.exp(logsumexp(log_density[grid > 0]) - log_total))
    return right, float(log_total + math.log(grid[1] - grid[0]))


@functools.cache
def ising_enumeration():
    """``(P(spin_i = 1) per spin, log Z)`` of the Ising chain (uniform Bernoulli prior times
    the factor) by enumeration."""
    from scipy.special import logsumexp, softmax

    states = np.array(list(itertools.product([0, 1], repeat=10)), dtype=float)
    signs = 2 * states - 1
    energy = 0.6 * np.sum(signs[:, 1:] * signs[:, :-1], axis=1) + 0.1 * signs.sum(1)
    return softmax(energy) @ states, float(logsumexp(energy) - 10 * math.log(2.0))


# Exact log Z where the model has one: the funnel is its own normalised prior.
EXACT_LOG_Z = {
    "two_mode_regression": lambda: two_mode_quadrature()[1],
    "funnel": lambda: 0.0,
    "ising_chain": lambda: ising_enumeration()[1],
}


# --- one run, in its own process --------------------------------------------------------------


def _kernel(name, model):
    from numpyro.infer import NUTS

    import numpyro_extras as nx

    if name == "NUTS":
        return NUTS(model)
    if name == "ReplicaExchange(ACS)":
        return nx.ReplicaExchange(model, inner_kernel=nx.ACS)
    return getattr(nx, name)(model)


def _flat_draws(samples):
    """``(chains, draws, coordinates)`` of every sample site."""
    columns = [
        np.asarray(value, dtype=np.float64).reshape(value.shape[:2] + (-1,))
        for value in samples.values()
    ]
    return np.concatenate(columns, axis=-1)


def _accuracy(model_name, samples, reference):
    """The row's error (see the module docstring) from ``(chains, draws, ...)`` samples."""
    if model_name == "two_mode_regression":
        return abs(float(np.mean(np.asarray(samples["x"]) > 0)) - two_mode_quadrature()[0])
    if model_name == "mixture_means":
        means = np.asarray(samples["means"]).reshape(-1, 3)
        return float(np.max(np.abs(means.mean(0) - means.mean())))
    if model_name == "funnel":
        return abs(float(np.quantile(np.asarray(samples["v"]), 0.05)) - FUNNEL_V_Q05)
    if model_name == "ising_chain":
        spins = np.asarray(samples["spins"]).reshape(-1, 10)
        return float(np.max(np.abs(spins.mean(0) - ising_enumeration()[0])))
    if reference is None:
        return float("nan")
    draws = _flat_draws(samples).reshape(-1, len(reference["mean"]))
    return float(np.max(np.abs(draws.mean(0) - reference["mean"]) / reference["sd"]))


def _min_ess(samples):
    from numpyro_extras.results.arviz_adapter import ess

    draws = _flat_draws(samples)
    varying = np.std(draws, axis=(0, 1)) > 0
    return min(ess(draws[..., i]) for i in np.flatnonzero(varying))


SIZES = dict(num_warmup=1000, num_samples=2000, num_chains=4)


def user_call(kernel_name, model, args, sizes=SIZES):
    """``call(seed)``: one call of the pair as a user makes it, returning its result: the
    ``Evidence`` of ``nx.ais`` as the README calls it, the base of ``nx.fit_base`` (every
    default, no progress bar), else the ``MCMC`` object after ``run`` (the same object at every
    call, as a user's second ``run`` reuses it)."""
    import jax
    from numpyro.infer import MCMC

    import numpyro_extras as nx

    if kernel_name == "ais":
        from common import readme_ais

        return lambda seed: readme_ais(seed, model, args)
    if kernel_name == "fit_base":
        return lambda seed: nx.fit_base(jax.random.PRNGKey(seed), model, args, progress_bar=False)
    mcmc = MCMC(_kernel(kernel_name, model), chain_method="vectorized", progress_bar=False, **sizes)

    def call(seed):
        mcmc.run(jax.random.PRNGKey(seed), *args)
        jax.block_until_ready(mcmc.get_samples())
        return mcmc

    return call


def run_pair(kernel_name, model_name, sizes, reference, error_keys=1):
    """Both calls of one (kernel, model) pair; the record of :func:`main`'s table (with
    ``error_keys > 1``, also the error for that many run keys, from key 1 on)."""
    import numpyro

    import numpyro_extras as nx

    numpyro.enable_x64()
    model, args = model_and_data(model_name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call = user_call(kernel_name, model, args, sizes)
        seconds = []
        for seed in (0, 1):
            start = time.perf_counter()
            result = call(seed)
            seconds.append(time.perf_counter() - start)
        if kernel_name in ("ais", "fit_base"):
            record = dict(first=seconds[0], second=seconds[1], error=math.nan, min_ess=math.nan)
            if kernel_name == "ais":
                record.update(
                    min_ess=float(result.ess), log_z=result.log_z, log_z_stderr=result.stderr
                )
        else:
            samples = result.get_samples(group_by_chain=True)
            record = dict(
                first=seconds[0],
                second=seconds[1],
                min_ess=_min_ess(samples),
                error=_accuracy(model_name, samples, reference),
            )
            if kernel_name not in ("NUTS", "ACS", "DMALA", "AiSampler"):
                evidence = nx.log_marginal_likelihood(result, warn=False)
                record.update(log_z=evidence.log_z, log_z_stderr=evidence.stderr)
            if error_keys > 1:
                record["errors_over_keys"] = [record["error"]] + [
                    _accuracy(model_name, call(seed).get_samples(group_by_chain=True), reference)
                    for seed in range(2, error_keys + 1)
                ]
    record["warnings"] = sorted({str(w.message)[:160] for w in caught})
    return record


def reference_moments(model_name):
    """Posterior means and sds of every coordinate from a long NUTS run."""
    import jax
    import numpyro
    from numpyro.infer import MCMC, NUTS

    numpyro.enable_x64()
    model, args = model_and_data(model_name)
    mcmc = MCMC(NUTS(model), chain_method="vectorized", progress_bar=False, **REFERENCE_SIZES)
    mcmc.run(jax.random.PRNGKey(123), *args)
    draws = _flat_draws(mcmc.get_samples(group_by_chain=True))
    draws = draws.reshape(-1, draws.shape[-1])
    return {"mean": draws.mean(0).tolist(), "sd": draws.std(0).tolist()}


# --- the driver --------------------------------------------------------------------------------


def _in_fresh_process(arguments, timeout=None):
    """Run this script with ``arguments`` in a new interpreter; its last stdout line is JSON."""
    try:
        completed = subprocess.run(
            [sys.executable, os.path.abspath(__file__), *arguments],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"failed": f"stopped after {timeout:.0f} s"}
    if completed.returncode != 0:
        return {"failed": completed.stderr.strip().splitlines()[-1][:300]}
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _middle_run(runs):
    """The record of the run with the median first call (of two middle runs, the slower), with
    every run's first call in ``first_calls``; a failed run where every run failed.

    A pair's seconds move by a fifth or more between runs on a shared machine; the median of a
    few fresh processes is what a user meets most of the time."""
    finished = sorted((run for run in runs if "failed" not in run), key=lambda run: run["first"])
    if not finished:
        return runs[0]
    record = dict(finished[len(finished) // 2])
    if len(runs) > 1:
        record["first_calls"] = [run["first"] for run in finished]
    return record


def _pairs(kernels, models):
    for model_name in models:
        kind = "discrete" if model_name in DISCRETE_MODELS else "continuous"
        allowed = DISCRETE_KERNELS if kind == "discrete" else CONTINUOUS_KERNELS
        for kernel_name in kernels:
            if kernel_name in allowed:
                yield kernel_name, model_name, kind


def _table(records):
    lines = [
        "| model | kernel | first call (s) | second call (s) | first / anchor | min ESS / s "
        "(first call) | error | log Z | warnings |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    anchors = {
        (record["model"]): record["first"]
        for record in records
        if record["kernel"] == ANCHOR[record["kind"]] and "first" in record
    }
    for record in records:
        if "failed" in record:
            lines.append(
                f"| {record['model']} | {record['kernel']} | failed: {record['failed']} "
                "| | | | | | |"
            )
            continue
        anchor = anchors.get(record["model"], float("nan"))
        log_z = "-"
        if "log_z" in record:
            log_z = f"{record['log_z']:.3f} ± {record['log_z_stderr']:.3f}"
            if record["model"] in EXACT_LOG_Z:
                exact = EXACT_LOG_Z[record["model"]]()
                log_z += f" (exact {exact:.3f}: error {record['log_z'] - exact:+.3f})"
        lines.append(
            f"| {record['model']} | {record['kernel']} | {record['first']:.1f} "
            f"| {record['second']:.1f} | {record['first'] / anchor:.1f} "
            f"| {record['min_ess'] / record['first']:.0f} | {record['error']:.3f} | {log_z} "
            f"| {len(record['warnings'])} |"
        )
    spreads = [
        f"- Error over {len(record['errors_over_keys'])} run keys, {record['model']} "
        f"{record['kernel']}: mean {np.mean(record['errors_over_keys']):.3f}, "
        f"{np.min(record['errors_over_keys']):.3f}-{np.max(record['errors_over_keys']):.3f}"
        for record in records
        if "errors_over_keys" in record
    ]
    return "\n".join(lines + ([""] + spreads if spreads else []))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=KERNELS)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--quick", action="store_true", help="250 + 500 draws per chain")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="fresh processes per pair; the table keeps the run with the median first call",
    )
    parser.add_argument("--output", help="also write the Markdown report here")
    parser.add_argument(
        "--error-keys", type=int, default=1, help="run keys over which to report the error"
    )
    parser.add_argument(
        "--timeout", type=float, help="stop a pair after this many seconds (reported as failed)"
    )
    parser.add_argument(
        "--append", action="store_true", help="add to the records of the results file"
    )
    parser.add_argument("--worker", nargs=2, metavar=("KERNEL", "MODEL"), help=argparse.SUPPRESS)
    parser.add_argument("--reference", metavar="MODEL", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", help=argparse.SUPPRESS)
    parser.add_argument("--reference-moments", help=argparse.SUPPRESS)
    arguments = parser.parse_args()

    if arguments.reference:
        print(json.dumps(reference_moments(arguments.reference)))
        return
    if arguments.worker:
        reference = json.loads(arguments.reference_moments or "null")
        if reference is not None:
            reference = {key: np.asarray(value) for key, value in reference.items()}
        record = run_pair(
            *arguments.worker, json.loads(arguments.sizes), reference, arguments.error_keys
        )
        print(json.dumps(record))
        return

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from common import environment_lines, log, run_environment

    started = time.perf_counter()
    sizes = dict(SIZES)
    if arguments.quick:
        sizes.update(num_warmup=250, num_samples=500)
    references = {}
    for model_name in ("logistic_regression", "eight_schools"):
        if model_name in arguments.models:
            log(f"reference NUTS run for {model_name}")
            references[model_name] = _in_fresh_process(["--reference", model_name])
    records = []
    for kernel_name, model_name, kind in _pairs(arguments.kernels, arguments.models):
        log(f"{kernel_name} on {model_name}")
        worker = ["--worker", kernel_name, model_name, "--sizes", json.dumps(sizes)]
        worker += ["--error-keys", str(arguments.error_keys)]
        if model_name in references:
            worker += ["--reference-moments", json.dumps(references[model_name])]
        record = _middle_run(
            [_in_fresh_process(worker, arguments.timeout) for _ in range(arguments.repeats)]
        )
        record.update(kernel=kernel_name, model=model_name, kind=kind)
        records.append(record)
        log(f"  {json.dumps({k: v for k, v in record.items() if k != 'warnings'})}")
    if arguments.append and os.path.exists(RESULTS):
        with open(RESULTS) as file:
            earlier = json.load(file)["records"]
        new_pairs = {(record["kernel"], record["model"]) for record in records}
        kept = [r for r in earlier if (r["kernel"], r["model"]) not in new_pairs]
        records = sorted(
            kept + records,
            key=lambda r: (MODELS.index(r["model"]), KERNELS.index(r["kernel"])),
        )
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    environment = run_environment(
        "latency_benchmark.py", sys.argv[1:], time.perf_counter() - started
    )
    with open(RESULTS, "w") as file:
        json.dump({"sizes": sizes, "environment": environment, "records": records}, file, indent=1)
    report = "\n".join(
        [
            "## First call against NUTS",
            "",
            _table(records),
            "",
            *environment_lines(
                "latency_benchmark.py",
                sys.argv[1:],
                time.perf_counter() - started,
                f"{sizes} per run, float64, chain_method='vectorized'",
            ),
        ]
    )
    print(report)
    if arguments.output:
        with open(arguments.output, "w") as file:
            file.write(report + "\n")


if __name__ == "__main__":
    main()
