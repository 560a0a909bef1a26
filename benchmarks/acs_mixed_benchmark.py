"""ACS on models with discrete AND continuous latents, against NumPyro's ``DiscreteHMCGibbs``.

Side by side in one run, each kernel as a user builds it (every setting at its default):

* ``nx.ACS(model, inner_kernel=NUTS)``: ACS on the discrete sites, one NUTS move of the
  continuous ones per step;
* ``Gibbs([(nx.ACS(model), discrete_latent_sites), (NUTS(model), None)])``: the same split
  through NumPyro's own composite kernel;
* ``DiscreteHMCGibbs(NUTS(model))``: NumPyro's Gibbs updates of the discrete sites, one at a
  time from their exact conditionals, with NUTS on the rest.

Targets:

* a spike-and-slab regression (8 predictors, 60 observations, known noise; the indicator picks
  the prior scale of its coefficient with ``jnp.where``, as a NumPyro user writes it), whose
  inclusion probabilities are exact by enumerating the 256 indicator patterns with the
  coefficients integrated out;
* a 7 x 7 periodic Ising lattice of Bernoulli latents (49 sites, coupling near the critical
  0.44) observed with noise, with an unknown positive signal scale: many coupled discrete sites,
  where a joint move of all sites (ACS) should beat one site at a time.

Reported per kernel, each in a new Python process: the first call's wall time (tracing and
compilation included, what a user waits for in a new session) and an identical second call's
(the run alone), the ArviZ ESS of the statistics below over 2 chains x 5000 draws, ESS per
second of each, and for the spike-and-slab the largest error of an inclusion probability
against the exact value, in Monte Carlo standard errors.

Usage::

    python benchmarks/acs_mixed_benchmark.py --output report.md
    python benchmarks/acs_mixed_benchmark.py --quick      # 1000 draws, a smoke test
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

import numpyro

numpyro.set_host_device_count(1)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arviz  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from common import (  # noqa: E402
    environment_lines,
    fmt,
    in_fresh_process,
    log,
    markdown_table,
    publish_report,
)
from numpyro.infer import MCMC, NUTS, DiscreteHMCGibbs, Gibbs  # noqa: E402
from numpyro.infer.gibbs import discrete_latent_sites  # noqa: E402

import numpyro_extras as nx  # noqa: E402

NUM_CHAINS = 2
NUM_WARMUP = 1000

# Spike-and-slab regression: y = X beta + noise, beta_j ~ N(0, slab^2) if gamma_j else
# N(0, spike^2), gamma_j ~ Bernoulli(inclusion).
SLAB, SPIKE, INCLUSION, NOISE = 2.0, 0.05, 0.25, 1.0


def spike_and_slab_model(features, labels):
    with numpyro.plate("predictors", features.shape[1]):
        gamma = numpyro.sample("gamma", dist.Bernoulli(INCLUSION))
        beta = numpyro.sample("beta", dist.Normal(0.0, jnp.where(gamma == 1, SLAB, SPIKE)))
    numpyro.sample("y", dist.Normal(features @ beta, NOISE), obs=labels)


def spike_and_slab_data(num_observations=60, seed=0):
    rng = np.random.default_rng(seed)
    true_beta = np.array([1.5, -1.0, 0.0, 0.0, 0.3, 0.0, 0.0, 0.0])
    features = rng.normal(size=(num_observations, len(true_beta)))
    labels = features @ true_beta + NOISE * rng.normal(size=num_observations)
    return features, labels


def exact_inclusion(features, labels):
    """Posterior inclusion probabilities: every indicator pattern, coefficients integrated out
    (``y | gamma ~ N(0, noise^2 I + X D_gamma X^T)``)."""
    num_observations, num_predictors = features.shape
    patterns = np.array(list(itertools.product([0, 1], repeat=num_predictors)))
    log_weights = []
    for pattern in patterns:
        variances = np.where(pattern == 1, SLAB, SPIKE) ** 2
        covariance = NOISE**2 * np.eye(num_observations) + (features * variances) @ features.T
        log_det = np.linalg.slogdet(covariance)[1]
        log_weights.append(
            -0.5 * labels @ np.linalg.solve(covariance, labels)
            - 0.5 * log_det
            + pattern.sum() * np.log(INCLUSION)
            + (num_predictors - pattern.sum()) * np.log(1 - INCLUSION)
        )
    weights = np.exp(np.array(log_weights) - max(log_weights))
    return weights @ patterns / weights.sum()


# Ising-coupled latent layer: spins s = 2 z - 1 on a periodic side x side lattice with coupling
# J, observed as y_i ~ N(mu s_i, noise^2), mu ~ HalfNormal(2).
SIDE, COUPLING, LATTICE_NOISE = 7, 0.4, 2.0


def ising_latent_model(observations):
    scale = numpyro.sample("mu", dist.HalfNormal(2.0))
    with numpyro.plate("sites", SIDE * SIDE):
        z = numpyro.sample("z", dist.Bernoulli(0.5))
    spins = 2.0 * z - 1.0
    lattice = spins.reshape(SIDE, SIDE)
    neighbours = jnp.sum(lattice * jnp.roll(lattice, 1, 0)) + jnp.sum(
        lattice * jnp.roll(lattice, 1, 1)
    )
    numpyro.factor("coupling", COUPLING * neighbours)
    numpyro.sample("y", dist.Normal(scale * spins, LATTICE_NOISE), obs=observations)


def ising_latent_data(seed=0):
    rng = np.random.default_rng(seed)
    spins = np.where(np.arange(SIDE * SIDE) % SIDE < SIDE // 2, 1.0, -1.0)
    return (1.0 * spins + LATTICE_NOISE * rng.normal(size=SIDE * SIDE),)


def kernels():
    return {
        "nx.ACS(model, inner_kernel=NUTS)": lambda model: nx.ACS(model, inner_kernel=NUTS),
        "Gibbs([(nx.ACS, discrete), (NUTS, None)])": lambda model: Gibbs(
            [(nx.ACS(model), discrete_latent_sites), (NUTS(model), None)]
        ),
        "DiscreteHMCGibbs(NUTS(model))": lambda model: DiscreteHMCGibbs(NUTS(model)),
    }


def timed_runs(kernel, model_args, num_samples, seed):
    """The first call (compile included) and an identical second one on the same ``MCMC``."""
    mcmc = MCMC(
        kernel,
        num_warmup=NUM_WARMUP,
        num_samples=num_samples,
        num_chains=NUM_CHAINS,
        chain_method="sequential",
        progress_bar=False,
    )
    seconds = []
    for repeat in range(2):
        started = time.perf_counter()
        mcmc.run(jax.random.PRNGKey(seed + repeat), *model_args)
        jax.block_until_ready(mcmc.get_samples())
        seconds.append(time.perf_counter() - started)
    return mcmc, seconds


def ess(draws):
    """ArviZ bulk ESS of ``(chains, draws)``; NaN for a constant statistic."""
    draws = np.asarray(draws, dtype=np.float64)
    if np.ptp(draws) == 0:
        return float("nan")
    return float(arviz.ess(draws))


def spike_and_slab_row(name, mcmc, seconds, exact):
    gamma = np.asarray(mcmc.get_samples(group_by_chain=True)["gamma"], dtype=np.float64)
    per_site = np.array([ess(gamma[..., j]) for j in range(gamma.shape[-1])])
    means = gamma.mean((0, 1))
    # Monte Carlo stderr of each inclusion probability from its ESS (exact p for the variance).
    stderr = np.sqrt(exact * (1 - exact) / np.where(np.isfinite(per_site), per_site, 1.0))
    z_scores = np.abs(means - exact) / np.maximum(stderr, 1e-12)
    ess_min, ess_median = np.nanmin(per_site), np.nanmedian(per_site)
    return [
        name,
        f"{seconds[0]:.1f}",
        f"{seconds[1]:.1f}",
        fmt(ess_min, 4),
        fmt(ess_median, 4),
        fmt(ess_median / seconds[1], 3),
        fmt(ess_median / seconds[0], 3),
        f"{np.max(np.abs(means - exact)):.3f}",
        f"{np.max(z_scores):.1f}",
    ]


def ising_row(name, mcmc, seconds):
    samples = mcmc.get_samples(group_by_chain=True)
    z = np.asarray(samples["z"], dtype=np.float64)
    magnetisation = (2 * z - 1).mean(-1)
    per_site = np.array([ess(z[..., i]) for i in range(z.shape[-1])])
    ess_magnetisation = ess(magnetisation)
    stderr = magnetisation.std() / np.sqrt(ess_magnetisation)
    return [
        name,
        f"{seconds[0]:.1f}",
        f"{seconds[1]:.1f}",
        fmt(ess_magnetisation, 4),
        fmt(np.nanmedian(per_site), 4),
        fmt(ess(samples["mu"]), 4),
        fmt(ess_magnetisation / seconds[1], 3),
        fmt(ess_magnetisation / seconds[0], 3),
        f"{magnetisation.mean():+.3f} +- {stderr:.3f}",
    ]


def measure(target, kernel_name, num_samples):
    """One kernel on one target, in a process of its own: the table row."""
    make = kernels()[kernel_name]
    if target == "spike_and_slab":
        features, labels = spike_and_slab_data()
        mcmc, seconds = timed_runs(
            make(spike_and_slab_model), (features, labels), num_samples, seed=1
        )
        return spike_and_slab_row(kernel_name, mcmc, seconds, exact_inclusion(features, labels))
    mcmc, seconds = timed_runs(make(ising_latent_model), ising_latent_data(), num_samples, seed=1)
    return ising_row(kernel_name, mcmc, seconds)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1000 draws per chain")
    parser.add_argument("--output", default=None, help="also write the report here")
    args = parser.parse_args(argv)
    num_samples = 1000 if args.quick else 5000
    started = time.perf_counter()

    log(f"spike-and-slab exact inclusion {np.round(exact_inclusion(*spike_and_slab_data()), 3)}")
    rows = {}
    for target in ("spike_and_slab", "ising"):
        rows[target] = []
        for name in kernels():
            rows[target].append(in_fresh_process(measure, target, name, num_samples))
            log(f"{target} {name}: {rows[target][-1][1:]}")
    slab_rows, ising_rows = rows["spike_and_slab"], rows["ising"]

    report = [
        "### Environment",
        "",
        *environment_lines(
            "acs_mixed_benchmark.py",
            sys.argv[1:] if argv is None else argv,
            time.perf_counter() - started,
            f"{NUM_CHAINS} chains (sequential) x ({NUM_WARMUP} warm-up + {num_samples} draws)",
        ),
        "",
        "### Spike-and-slab regression (8 indicators, exact inclusion by enumeration)",
        "",
        markdown_table(
            [
                "kernel (defaults)",
                "first call s",
                "second call s",
                "ESS min",
                "ESS median",
                "median ESS / s (second call)",
                "median ESS / s (first call)",
                "max abs error",
                "max error / stderr",
            ],
            slab_rows,
        ),
        "",
        f"### Ising-coupled latent layer ({SIDE} x {SIDE} sites, coupling {COUPLING})",
        "",
        markdown_table(
            [
                "kernel (defaults)",
                "first call s",
                "second call s",
                "ESS magnetisation",
                "ESS per site, median",
                "ESS mu",
                "ESS magn. / s (second call)",
                "ESS magn. / s (first call)",
                "magnetisation",
            ],
            ising_rows,
        ),
    ]
    text = "\n".join(report) + "\n"
    publish_report(text, args.output)


if __name__ == "__main__":
    main()
