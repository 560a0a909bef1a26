"""Replica exchange with its defaults on real models, against continuous tempering and AIS, and
its cost against NUTS.

Part 1, evidences: ``MCMC(nx.ReplicaExchange(model), num_warmup=1000, num_samples=2000,
num_chains=4)`` with its defaults (``exchange auto``: two legs, fitted and prior, joined at the
posterior; NUTS moves on cheap potentials, 16-step HMC on dear ones), with NUTS moves on every
potential (``exchange auto NUTS``), and with the prior and the fitted reference alone, beside
``nx.JointContinuousTempering(model)`` at the same run length and ``nx.ais(..., num_particles=1000,
num_temperatures=200)``, each with its defaults, on

* a Bayesian linear regression (N = 50, P = 5) with its closed-form evidence;
* the non-centred eight schools model, whose evidence is a two-dimensional integral once the
  school offsets are integrated out (``y_j ~ N(mu, sigma_j^2 + tau^2)``), done by quadrature;
* the hierarchical radon regression, whose evidence is a three-dimensional integral over its
  scales (``common.RADON_LOG_Z``, by quadrature).

Part 2, cost: seconds per scan of ``nx.ReplicaExchange`` with 4, 8, 16 and 32 replicas
(vectorized over the replicas; compilation excluded: timed on a second call) divided by
seconds per transition of NumPyro's NUTS on the same model, on the linear regression or the
models of ``--cost-models`` (one ladder from the prior, so that the count is the replicas a scan
moves).

Usage::

    python benchmarks/exchange_benchmark.py --output report.md
    python benchmarks/exchange_benchmark.py --quick       # linear regression only, 1 seed
    python benchmarks/exchange_benchmark.py --models radon --methods "exchange auto" --seeds 0
    python benchmarks/exchange_benchmark.py --methods --cost-models radon   # cost on radon only
    python benchmarks/exchange_benchmark.py --methods --skip-cost \
        --gradient-cost-models schools radon      # the defaults' seconds per gradient

Part 3 (``--gradient-cost-models``): seconds per gradient evaluation of the defaults' compiled
scan (4 chains, vectorized, after 300 warm-up scans, 500 timed) against a NUTS transition's,
the gradients counted from every moving rung's leapfrog steps plus the evaluations a scan adds
(one per moved rung, the reference renewals, the junction of two legs).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import numpyro  # noqa: E402

numpyro.set_host_device_count(1)
numpyro.enable_x64()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from common import (  # noqa: E402
    RADON_LOG_Z,
    environment_lines,
    log,
    markdown_table,
    publish_report,
    read_runs,
    readme_ais,
    save_run,
)
from numpyro.infer import MCMC, NUTS  # noqa: E402

import numpyro_extras as nx  # noqa: E402
from numpyro_extras.targets import (  # noqa: E402
    linear_regression_log_evidence,
    linear_regression_model,
    load_radon,
    make_linear_regression_data,
    radon_model,
)

NUM_WARMUP, NUM_SAMPLES, NUM_CHAINS = 1000, 2000, 4
EIGHT_SCHOOLS_Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
EIGHT_SCHOOLS_SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def eight_schools_noncentred(sigma, y=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    with numpyro.plate("schools", sigma.shape[0]):
        offset = numpyro.sample("theta_offset", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(mu + tau * offset, sigma), obs=y)


def eight_schools_log_evidence():
    """``log p(y)`` of :func:`eight_schools_noncentred` by adaptive quadrature over ``(mu, tau)``
    (``tau = u / (1 - u)``), the offsets integrated out in closed form."""
    from scipy import integrate, stats

    shift = 31.0  # keeps the integrand near 1

    def integrand(mu, u):
        tau = u / (1 - u)
        scale = np.sqrt(EIGHT_SCHOOLS_SIGMA**2 + tau**2)
        log_density = (
            stats.norm.logpdf(EIGHT_SCHOOLS_Y, mu, scale).sum()
            + stats.norm.logpdf(mu, 0.0, 5.0)
            + stats.halfcauchy.logpdf(tau, scale=5.0)
        )
        return np.exp(log_density + shift) / (1 - u) ** 2

    value, _ = integrate.dblquad(integrand, 0, 1, -60, 60, epsabs=1e-12, epsrel=1e-10)
    return float(np.log(value) - shift)


def problems(quick, models=None):
    features, targets = make_linear_regression_data(0, num_data=50, num_features=5)
    regression = dict(
        name="Linear regression N=50, P=5",
        model=linear_regression_model,
        args=(features, targets),
        kwargs={},
        truth=(linear_regression_log_evidence(features, targets), 0.0),
    )
    if quick:
        return [regression]
    schools = dict(
        name="Eight schools (non-centred)",
        model=eight_schools_noncentred,
        args=(jnp.asarray(EIGHT_SCHOOLS_SIGMA), jnp.asarray(EIGHT_SCHOOLS_Y)),
        kwargs={},
        truth=(eight_schools_log_evidence(), 0.0),
    )
    radon = dict(
        name="Radon hierarchical regression",
        model=radon_model,
        args=(),
        kwargs=load_radon(),
        truth=(RADON_LOG_Z, 0.0),
    )
    chosen = {"regression": regression, "schools": schools, "radon": radon}
    return [chosen[name] for name in (models or chosen)]


def run_mcmc(kernel, problem, seed):
    mcmc = MCMC(
        kernel,
        num_warmup=NUM_WARMUP,
        num_samples=NUM_SAMPLES,
        num_chains=NUM_CHAINS,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(seed), *problem["args"], **problem["kwargs"])
    return mcmc


def evidence_row(method, problem, seed):
    start = time.perf_counter()
    extra = "-"
    problems = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if method == "ais":
            evidence = readme_ais(seed, problem["model"], problem["args"], problem["kwargs"])
        elif method == "joint CT":
            kernel = nx.JointContinuousTempering(
                problem["model"], fit_base_kwargs={"progress_bar": False}
            )
            mcmc = run_mcmc(kernel, problem, seed)
            evidence = nx.log_marginal_likelihood(mcmc)
        else:
            # "exchange auto NUTS": the defaults but NUTS moves on every potential.
            reference = method.split()[1]
            moves = {"inner_kernel": NUTS} if method.endswith("NUTS") else {}
            kernel = nx.ReplicaExchange(problem["model"], reference=reference, **moves)
            mcmc = run_mcmc(kernel, problem, seed)
            evidence = nx.log_marginal_likelihood(mcmc)
            diagnostics = nx.exchange_diagnostics(mcmc)
            extra = (
                f"barrier {np.mean(diagnostics.barrier):.1f}, ESS {diagnostics.posterior_ess:.0f}"
            )
            if diagnostics.prior_leg is not None:
                extra += (
                    f", prior leg barrier {np.mean(diagnostics.prior_leg.barrier):.1f}, replicas "
                    f"{kernel.num_replicas} + {kernel.num_prior_replicas}"
                )
            divergent = np.mean(np.asarray(mcmc.get_extra_fields()["diverging"]))
            extra += f", divergent {divergent:.1%}, move {kernel.inner_algo}"
            problems = list(diagnostics.problems)
    seconds = time.perf_counter() - start
    warned = any(
        "trouble" in str(w.message) or isinstance(w.message, nx.BaseCoverageWarning) for w in caught
    )
    return dict(
        problem=problem["name"],
        method=method,
        seed=seed,
        log_z=evidence.log_z,
        stderr=evidence.stderr,
        seconds=seconds,
        warned=warned,
        extra=extra,
        problems=problems,
    )


def evidence_table(rows, problem_list):
    header = ["Model", "Method", "Seed", "log Z", "stderr", "error (z)", "Warned", "s", "Notes"]
    lines = []
    truths = {p["name"]: p["truth"] for p in problem_list}
    for row in rows:
        truth = truths[row["problem"]]
        if truth is None:
            error = "-"
        else:
            difference = row["log_z"] - truth[0]
            scale = np.hypot(row["stderr"], truth[1])
            error = f"{difference:+.3f} ({difference / scale:+.1f})" if scale > 0 else "-"
        lines.append(
            [
                row["problem"],
                row["method"],
                row["seed"],
                f"{row['log_z']:.3f}",
                f"{row['stderr']:.3f}",
                error,
                "yes" if row["warned"] else "no",
                f"{row['seconds']:.0f}",
                row["extra"],
            ]
        )
    return markdown_table(header, lines)


def seconds_per_transition(kernel, problem, num_samples):
    """Seconds per transition of a second, identical call (compiled), one chain."""
    mcmc = MCMC(kernel, num_warmup=50, num_samples=num_samples, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), *problem["args"], **problem["kwargs"])
    jax.block_until_ready(mcmc.get_samples())
    start = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(0), *problem["args"], **problem["kwargs"])
    jax.block_until_ready(mcmc.get_samples())
    return (time.perf_counter() - start) / (50 + num_samples)


def cost_table(problem, replica_counts):
    nuts = seconds_per_transition(NUTS(problem["model"]), problem, 2000)
    rows = [["NUTS", "1", f"{nuts * 1e3:.3f}", "1.0", "-"]]
    for count in replica_counts:
        log(f"cost: {count} replicas")
        seconds = seconds_per_transition(
            nx.ReplicaExchange(problem["model"], num_replicas=count, reference="prior"),
            problem,
            1000,
        )
        rows.append(
            [
                "nx.ReplicaExchange",
                str(count),
                f"{seconds * 1e3:.3f}",
                f"{seconds / nuts:.1f}",
                f"{seconds / nuts / count:.2f}",
            ]
        )
    header = ["Kernel", "Replicas", "ms per scan", "/ NUTS transition", "/ (NUTS x replicas)"]
    return markdown_table(header, rows)


def gradients_per_scan(state):
    """Gradient evaluations of one scan of a batch of replica-exchange chains (the leapfrog
    steps of every moving rung, one gradient of ``l`` per moved rung, and, for two legs, the
    reference renewals and the junction's evaluations), and of a NUTS state its leapfrog steps."""
    legs = (state.fit_leg, state.prior_leg) if hasattr(state, "fit_leg") else (state,)
    total = 0
    for leg in legs:
        steps = leg.inner_state.num_steps[..., 1:]
        total += jnp.sum(steps) + steps.size + leg.betas.shape[0]
    return total + (2 * legs[0].betas.shape[0] if len(legs) == 2 else 0)


def seconds_per_gradient(kernel, problem, num_scans=500, num_warmup=300):
    """Seconds per gradient evaluation of ``kernel``'s compiled step (4 chains, vectorized),
    measured after a warm-up of ``num_warmup`` (its step sizes settled; the cost of a gradient
    is what is measured): ``(seconds, gradients per scan, seconds per scan)``."""
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=10,
        num_chains=NUM_CHAINS,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(0), *problem["args"], **problem["kwargs"])
    args, kwargs = problem["args"], problem["kwargs"]
    nuts = isinstance(kernel, NUTS)

    def step(states):
        # Both kernels' sample take the batch of chains of a vectorized run.
        return kernel.sample(states, args, kwargs)

    def count(states):
        return jnp.sum(states.num_steps) if nuts else gradients_per_scan(states)

    @jax.jit
    def loop(states):
        def body(_, carry):
            states, gradients = carry
            states = step(states)
            return states, gradients + count(states)

        return jax.lax.fori_loop(0, num_scans, body, (states, 0))

    jax.block_until_ready(loop(mcmc.last_state))
    start = time.perf_counter()
    _, gradients = jax.block_until_ready(loop(mcmc.last_state))
    seconds = time.perf_counter() - start
    return seconds / float(gradients), float(gradients) / num_scans, seconds / num_scans


def gradient_cost_table(problem):
    """Seconds per gradient evaluation of the defaults' scan against a NUTS transition's."""
    rows = []
    nuts = None
    for name, kernel in (
        ("NUTS", NUTS(problem["model"])),
        ("nx.ReplicaExchange (defaults)", nx.ReplicaExchange(problem["model"])),
    ):
        log(f"gradient cost: {name}")
        per_gradient, gradients, per_scan = seconds_per_gradient(kernel, problem)
        nuts = nuts or per_gradient
        counts = (
            f"{kernel.num_replicas} + {kernel.num_prior_replicas}"
            if isinstance(kernel, nx.ReplicaExchange)
            else "-"
        )
        rows.append(
            [
                name,
                counts,
                f"{per_scan * 1e3:.2f}",
                f"{gradients:.0f}",
                f"{per_gradient * 1e6:.2f}",
                f"{per_gradient / nuts:.2f}",
            ]
        )
    header = [
        "Kernel",
        "Replicas",
        "ms per scan (4 chains)",
        "gradients per scan",
        "us per gradient",
        "/ NUTS's",
    ]
    return markdown_table(header, rows)


# "exchange auto" is nx.ReplicaExchange(model) as a user builds it: the defaults row.
METHODS = (
    "exchange auto",
    "exchange auto NUTS",
    "exchange prior",
    "exchange fit",
    "joint CT",
    "ais",
)
MODELS = ("regression", "schools", "radon")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=METHODS)
    parser.add_argument(
        "--models", nargs="+", default=None, choices=MODELS, help="default: all (--quick: one)"
    )
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument(
        "--cost-models",
        nargs="+",
        default=None,
        choices=MODELS,
        help="models of the cost tables (default: the first model run)",
    )
    parser.add_argument(
        "--gradient-cost-models",
        nargs="*",
        default=[],
        choices=MODELS,
        help="models of the seconds-per-gradient table of the defaults against NUTS",
    )
    parser.add_argument("--output", default=None)
    parser.add_argument("--json", default=None, help="append one JSON line per run here")
    parser.add_argument(
        "--report-from", default=None, help="only print the evidence table of a --json file"
    )
    args = parser.parse_args(argv)
    if args.report_from:
        print(evidence_table(read_runs(args.report_from), problems(quick=False)))
        return
    start = time.perf_counter()
    problem_list = problems(args.quick, args.models)
    seeds = args.seeds[:1] if args.quick else args.seeds
    rows = []
    for problem in problem_list:
        for seed in seeds:
            for method in args.methods:
                log(f"{problem['name']} seed {seed}: {method}")
                row = evidence_row(method, problem, seed)
                log(f"  log Z {row['log_z']:.3f} +- {row['stderr']:.3f} in {row['seconds']:.0f} s")
                rows.append(row)
                if args.json:
                    save_run(args.json, row)
    table = evidence_table(rows, problem_list)
    sections = ["## Evidences (each method with its defaults)", "", table]
    cost_problems = problems(False, args.cost_models) if args.cost_models else problem_list[:1]
    for problem in [] if args.skip_cost else cost_problems:
        sections += [
            "",
            f"## Cost per scan against one NUTS transition ({problem['name']}, compiled)",
            "",
            cost_table(problem, (4, 8, 16, 32)),
        ]
    for problem in problems(False, args.gradient_cost_models) if args.gradient_cost_models else []:
        sections += [
            "",
            f"## Seconds per gradient evaluation against NUTS ({problem['name']}, compiled)",
            "",
            gradient_cost_table(problem),
        ]
    environment = environment_lines(
        "exchange_benchmark.py",
        argv if argv is not None else __import__("sys").argv[1:],
        time.perf_counter() - start,
        f"{NUM_CHAINS} chains x ({NUM_WARMUP} + {NUM_SAMPLES}), vectorized; AIS 1000 particles x "
        f"200 temperatures; seeds {seeds}",
    )
    report = "\n".join(["## Environment", "", *environment, "", *sections, ""])
    publish_report(report, args.output)


if __name__ == "__main__":
    main()
