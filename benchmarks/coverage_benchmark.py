"""Calibration of the log Z error bars: over many seeds, how often the exact value lies within
1.96 standard errors of each estimator's estimate at its defaults.

Each (target, estimator) pair builds its kernel once and runs it with one key per seed (a
user's kernel fits its base, its ladder or its proposal with the fixed ``fit_seed``, so the
error a user meets is the run's); with ``--vary-fit`` the fit's seed follows the run's too.
Every target has an exact ``log Z`` (closed form, quadrature or enumeration):

* ``regression``: conjugate linear regression, 50 rows, 3 coefficients (closed form);
* ``wide_prior``: ``x ~ N(0, 1e4^2)``, ``y = 3 ~ N(x, 1e4^2)`` (closed form);
* ``narrow_likelihood``: ``x ~ N(0, 1)``, ``y = 0.5 ~ N(x, 1e-4^2)`` (closed form);
* ``unequal_mixture``: a 2-D two-component mixture with weights near 0.7 / 0.3 under a broad
  prior (``gaussian_mixture_target``, closed form);
* ``sign_product``: four sign-ambiguous parameters, 16 modes (``sign_product_target``,
  quadrature);
* ``funnel``: the centred hierarchy ``v ~ N(0, 3^2)``, ``x_i ~ N(0, e^v)``, ``y_i ~ N(x_i, 1)``
  for five small observations, whose posterior pulls ``v`` into the funnel's neck
  (``centred_funnel_model``, quadrature over ``v``);
* ``ising_chain``: twelve +-1 spins with coupling 1.2 (cold), enumeration of the 4,096 states;
* ``rbm``: a random 12 x 20 restricted Boltzmann machine at 1/T = 4 (``nx.random_rbm``), its
  ``log Z`` by enumeration of the visible layer.

The estimators: ``joint`` and ``gibbs`` (the continuous tempering kernels' estimator),
``exchange`` (replica exchange's stepping stones; with ``nx.ACS`` inside on the discrete
target), ``ais`` (the README's call, 1000 particles x 200 temperatures), ``vaeslmc`` (the
importance weights of the trained proposal), ``bridge`` (``nx.bridge_sampling`` of a NUTS
run) and, on the RBM only, ``mais`` (``nx.marginalized_ais_boltzmann`` at the README's 1000
particles x 100 temperatures). The MCMC runs are 4 chains x (500 + 1000) draws, vectorized.

A row reports the seeds run, the share within 1.96 standard errors (the promise of a 95%
interval; goal 0.90-0.98), the mean and standard deviation of error / stderr, the seeds that
warned, and the seeds that were wrong and silent: more than 4 standard errors off (or an
infinite error bar's absent estimate) with no warning and no listed problem (goal none).

Records are appended, one JSON line per seed, to ``--json`` (default
``benchmarks/results/coverage.jsonl``), so the study grows over several invocations;
``--report-from`` prints the table of a file.

Commands::

    python benchmarks/coverage_benchmark.py --estimators ais bridge --seeds 0-19
    python benchmarks/coverage_benchmark.py --targets ising_chain --estimators exchange ais
    python benchmarks/coverage_benchmark.py --report-from benchmarks/results/coverage.jsonl
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from common import (
    environment_lines,
    log,
    markdown_table,
    publish_report,
    read_runs,
    readme_ais,
)
from numpyro.infer import MCMC, NUTS
from scipy import stats
from scipy.special import logsumexp

import numpyro_extras as nx
from numpyro_extras.targets import (
    FUNNEL_DATA,
    centred_funnel_log_evidence,
    centred_funnel_model,
    gaussian_mixture_target,
    linear_regression_log_evidence,
    linear_regression_model,
    sign_product_target,
)

ESTIMATORS = ("joint", "gibbs", "exchange", "ais", "vaeslmc", "bridge", "mais")
DISCRETE_ESTIMATORS = ("exchange", "ais")
BOLTZMANN_ESTIMATORS = ("mais",)
MCMC_SIZES = dict(num_warmup=500, num_samples=1000, num_chains=4)
COVERAGE_Z = 1.96
SILENT_WRONG_Z = 4.0
DEFAULT_JSON = Path(__file__).parent / "results" / "coverage.jsonl"
ISING_SPINS, ISING_COUPLING, ISING_FIELD = 12, 1.2, 0.1
TARGETS = (
    "regression",
    "wide_prior",
    "narrow_likelihood",
    "unequal_mixture",
    "sign_product",
    "funnel",
    "ising_chain",
    "rbm",
)


def wide_prior_model(y=3.0):
    x = numpyro.sample("x", dist.Normal(0.0, 1e4))
    numpyro.sample("y", dist.Normal(x, 1e4), obs=y)


def narrow_likelihood_model(y=0.5):
    x = numpyro.sample("x", dist.Normal(0.0, 1.0))
    numpyro.sample("y", dist.Normal(x, 1e-4), obs=y)


def ising_chain_model():
    spins = numpyro.sample("spins", dist.Bernoulli(0.5).expand([ISING_SPINS]).to_event(1))
    signs = 2.0 * spins - 1.0
    numpyro.factor(
        "energy",
        ISING_COUPLING * jnp.sum(signs[1:] * signs[:-1]) + ISING_FIELD * jnp.sum(signs),
    )


def ising_chain_log_z():
    """Enumeration of the chain's states, the uniform prior included."""
    states = 2.0 * np.array(list(itertools.product((0, 1), repeat=ISING_SPINS))) - 1.0
    energies = ISING_COUPLING * np.sum(states[:, 1:] * states[:, :-1], 1)
    energies = energies + ISING_FIELD * states.sum(1)
    return float(logsumexp(energies) - ISING_SPINS * math.log(2.0))


def targets():
    """``name -> (model, args, exact log Z, kind)``, the kind ``"continuous"``, ``"discrete"``
    or ``"boltzmann"`` (a :class:`~numpyro_extras.BipartiteBoltzmann` in place of the model)."""
    rng = np.random.default_rng(0)
    features = rng.standard_normal((50, 3))
    responses = features @ np.array([0.5, -1.0, 0.3]) + rng.standard_normal(50)
    mixture = gaussian_mixture_target(0, 2)
    signs = sign_product_target(0, 4)
    machine = nx.random_rbm(jax.random.PRNGKey(0), 12, 20, inverse_temperature=4.0)
    return {
        "regression": (
            linear_regression_model,
            (jnp.asarray(features), jnp.asarray(responses)),
            linear_regression_log_evidence(features, responses),
            "continuous",
        ),
        "wide_prior": (
            wide_prior_model,
            (),
            float(stats.norm(0, 2**0.5 * 1e4).logpdf(3.0)),
            "continuous",
        ),
        "narrow_likelihood": (
            narrow_likelihood_model,
            (),
            float(stats.norm(0, (1 + 1e-8) ** 0.5).logpdf(0.5)),
            "continuous",
        ),
        "unequal_mixture": (mixture.model, mixture.model_args, mixture.log_z, "continuous"),
        "sign_product": (signs.model, signs.model_args, signs.log_z, "continuous"),
        "funnel": (
            centred_funnel_model,
            (jnp.asarray(FUNNEL_DATA),),
            centred_funnel_log_evidence(FUNNEL_DATA),
            "continuous",
        ),
        "ising_chain": (ising_chain_model, (), ising_chain_log_z(), "discrete"),
        "rbm": (machine, (), float(machine.log_partition()), "boltzmann"),
    }


def _kernel(estimator, model, discrete, fit_seed):
    if estimator == "joint":
        return nx.JointContinuousTempering(model, fit_base_seed=fit_seed)
    if estimator == "gibbs":
        return nx.GibbsContinuousTempering(model, fit_base_seed=fit_seed)
    if estimator == "exchange":
        if discrete:
            return nx.ReplicaExchange(model, inner_kernel=nx.ACS, fit_base_seed=fit_seed)
        return nx.ReplicaExchange(model, fit_base_seed=fit_seed)
    if estimator == "vaeslmc":
        return nx.VAESLMC(model, fit_seed=fit_seed)
    return NUTS(model)


def seed_records(target_name, estimator, seeds, vary_fit):
    """One record per seed, yielded as each seed finishes: the estimate, its error in standard
    errors, and what warned."""
    model, args, exact, kind = targets()[target_name]
    mcmc = None
    for seed in seeds:
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if estimator == "ais":
                evidence = readme_ais(seed, model, args)
            elif estimator == "mais":
                evidence = nx.marginalized_ais_boltzmann(
                    jax.random.PRNGKey(seed), model, num_particles=1000, num_temperatures=100
                )
            else:
                if mcmc is None or vary_fit:
                    kernel = _kernel(estimator, model, kind == "discrete", seed if vary_fit else 0)
                    mcmc = MCMC(kernel, chain_method="vectorized", progress_bar=False, **MCMC_SIZES)
                mcmc.run(jax.random.PRNGKey(seed), *args)
                if estimator == "bridge":
                    evidence = nx.bridge_sampling(mcmc, seed=seed)
                else:
                    evidence = nx.log_marginal_likelihood(mcmc)
        log_z, stderr = float(evidence.log_z), float(evidence.stderr)
        error = log_z - exact
        z = error / stderr if stderr > 0 else math.copysign(math.inf, error)
        messages = sorted({str(w.message)[:200] for w in caught} | set(evidence.problems))
        record = dict(
            target=target_name,
            estimator=estimator,
            seed=seed,
            vary_fit=vary_fit,
            exact=exact,
            log_z=log_z,
            stderr=stderr,
            error=error,
            z=None if math.isnan(z) else z,
            warned=bool(messages),
            messages=messages,
            seconds=round(time.perf_counter() - start, 2),
        )
        log(f"{target_name} {estimator} seed {seed}: {log_z:.4f} +- {stderr:.4f}, z {z:+.2f}")
        yield record


def coverage_rows(records):
    """One row per (target, estimator): calibration over its seeds."""
    groups = {}
    for record in records:
        groups.setdefault((record["target"], record["estimator"]), []).append(record)
    rows = []
    for (target_name, estimator), group in sorted(groups.items()):
        z = np.array([np.nan if r["z"] is None else r["z"] for r in group], dtype=float)
        finite = z[np.isfinite(z)]
        silent_wrong = [
            r["seed"]
            for r, value in zip(group, z, strict=True)
            if not r["warned"] and not abs(value) <= SILENT_WRONG_Z
        ]
        rows.append(
            [
                target_name,
                estimator,
                str(len(group)),
                f"{np.mean(np.abs(z) < COVERAGE_Z):.2f}",
                f"{np.mean(finite):+.2f}" if finite.size else "-",
                f"{np.std(finite):.2f}" if finite.size else "-",
                f"{np.median([r['stderr'] for r in group]):.4f}",
                str(sum(r["warned"] for r in group)),
                ", ".join(map(str, silent_wrong)) or "none",
                f"{np.mean([r['seconds'] for r in group]):.1f}",
            ]
        )
    return rows


HEADER = [
    "target",
    "estimator",
    "seeds",
    "within 1.96 stderr",
    "mean error / stderr",
    "sd of error / stderr",
    "median stderr",
    "seeds that warned",
    "wrong and silent (seeds)",
    "seconds per seed",
]


def _seed_list(text):
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(text)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="+", default=list(TARGETS), choices=TARGETS)
    parser.add_argument("--estimators", nargs="+", default=list(ESTIMATORS), choices=ESTIMATORS)
    parser.add_argument("--seeds", default="0-19", type=_seed_list, help="a seed or a range a-b")
    parser.add_argument("--vary-fit", action="store_true", help="the fit's seed follows the run's")
    parser.add_argument("--json", default=str(DEFAULT_JSON), help="records are appended here")
    parser.add_argument("--report-from", help="print the table of this records file")
    parser.add_argument("--output", help="also write the Markdown report here")
    arguments = parser.parse_args(argv)
    start = time.perf_counter()
    if arguments.report_from:
        records = read_runs(arguments.report_from)
    else:
        numpyro.enable_x64()
        records = []
        path = Path(arguments.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        for target_name in arguments.targets:
            kind = targets()[target_name][3]
            for estimator in arguments.estimators:
                if (estimator in BOLTZMANN_ESTIMATORS) != (kind == "boltzmann"):
                    continue
                if kind == "discrete" and estimator not in DISCRETE_ESTIMATORS:
                    continue
                # Each record is written as its seed finishes, so a long study that stops
                # keeps the seeds it ran.
                for record in seed_records(
                    target_name, estimator, arguments.seeds, arguments.vary_fit
                ):
                    with path.open("a") as stream:
                        stream.write(json.dumps(record) + "\n")
                    records.append(record)
    report = "\n".join(
        [
            "## Calibration of the log Z error bars",
            "",
            markdown_table(HEADER, coverage_rows(records)),
            "",
            *environment_lines(
                "coverage_benchmark.py",
                sys.argv[1:] if argv is None else argv,
                time.perf_counter() - start,
                f"MCMC runs: {MCMC_SIZES}, 4 chains vectorized, float64",
            ),
        ]
    )
    publish_report(report, arguments.output)


if __name__ == "__main__":
    main()
