"""Naive VAE-SLMC against NUTS on the four targets of the VAE-SLMC paper's Table 6 (Ichikawa et
al., App. E.5): a VAE trained once on NUTS draws, no annealing (the paper's Algorithm 1).

Targets (all with a closed-form ``log Z``):

* ``ICG 100D``: a zero-mean Gaussian whose covariance has eigenvalues log-spaced in
  ``[1e-2, 1e2]`` on a random orthonormal basis (seeded); ``log Z = 0``;
* ``SCG 2D``: variances ``1e2`` and ``1e-2`` rotated by ``pi / 4``; ``log Z = 0``;
* ``BANANA 2D``: ``x1 ~ N(0, 10^2)``, ``x2 ~ N(0.03 (x1^2 - 100), 1)``; ``log Z = 0``;
* ``RW 2D``, the rough well: ``p~(x) = exp(-x.x / 2 + eta sum_i cos(x_i / eta))``,
  ``eta = 0.01``; ``log Z = 2 log(sqrt(2 pi) I_0(eta))`` up to ``exp(-1 / (2 eta^2))``.

Methods, each on 4 vectorised chains x (1000 + 5000) draws:

* ``nuts``: ``MCMC(NUTS(model), ...)`` with its defaults (the paper ran HMC with 10 leapfrog
  steps); its 20,000 draws are the VAE's training data, as the paper's 20,000 HMC draws;
* ``slmc/<network>``: ``train_vae`` on those draws for 150 epochs (Table 7; every epoch, as the
  annealing's final training), then ``MCMC(nx.VAESLMC(model, proposal=...), ...)``, for each
  ``--vae`` network: ``learned`` (the package's default network), ``learned-whitened``
  (``whiten=True``) and ``paper`` (eq. 2's fixed decoder noise; run with the exact and with the
  paper's isometric acceptance).

Per target and method it prints the acceptance rate, ``ESS / N`` (the paper's measure: the
smallest ESS over ``x`` and ``x^2`` of every coordinate, NumPyro's ``effective_sample_size`` over
all chains, divided by the 20,000 draws) and its ratio to NUTS's, ESS per target-density
evaluation (a gradient counts as one; the slmc rows count NUTS's run that made the training data
and their own steps), the ``log Z`` error and stderr of ``nx.log_marginal_likelihood``, and the
training and sampling seconds, next to the paper's Table 6.

Usage::

    python benchmarks/slmc_naive_benchmark.py
    python benchmarks/slmc_naive_benchmark.py --targets scg banana --vae learned
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings

# As in slmc_benchmark.py: single-threaded Eigen never deadlocked on the benchmark machine.
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import numpyro  # noqa: E402

numpyro.enable_x64()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from common import (  # noqa: E402
    elapsed_seconds,
    environment_lines,
    fmt,
    log,
    markdown_table,
    publish_report,
)
from numpyro.diagnostics import effective_sample_size  # noqa: E402
from scipy.special import i0  # noqa: E402
from slmc_benchmark import (  # noqa: E402
    NUM_CHAINS,
    NUM_SAMPLES,
    NUM_WARMUP,
    VAE_VARIANTS,
    nuts_run,
    train_once,
    user_mcmc,
)

import numpyro_extras as nx  # noqa: E402
from numpyro_extras.slmc.vae import VAEConfig  # noqa: E402

EPOCHS = 150
ROUGHNESS = 1e-2

# Table 6 of the paper: ESS / N of HMC and of naive VAE-SLMC (mean over 10 runs).
PAPER = {
    "icg": (2.58e-2, 5.20e-1),
    "scg": (1.50e-2, 9.65e-1),
    "banana": (9.32e-2, 2.30e-1),
    "rough_well": (5.22e-4, 3.89e-3),
}


def gaussian_model(scale_tril):
    numpyro.sample(
        "x", dist.MultivariateNormal(jnp.zeros(scale_tril.shape[0]), scale_tril=scale_tril)
    )


def banana_model():
    x1 = numpyro.sample("x1", dist.Normal(0.0, 10.0))
    numpyro.sample("x2", dist.Normal(0.03 * (x1**2 - 100.0), 1.0))


def rough_well_model(roughness):
    x = numpyro.sample("x", dist.ImproperUniform(dist.constraints.real, (), (2,)))
    numpyro.factor("energy", -0.5 * jnp.sum(x**2) + roughness * jnp.sum(jnp.cos(x / roughness)))


def ill_conditioned_cholesky(dimension, seed=0):
    """The ICG covariance's Cholesky factor: eigenvalues log-spaced in [1e-2, 1e2] on a random
    orthonormal basis."""
    basis, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((dimension, dimension)))
    covariance = basis @ np.diag(np.logspace(-2, 2, dimension)) @ basis.T
    return jnp.asarray(np.linalg.cholesky(covariance))


def rotated_cholesky():
    """The SCG covariance: variances 1e2 and 1e-2 rotated by pi / 4."""
    angle = math.pi / 4
    rotation = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    return jnp.asarray(np.linalg.cholesky(rotation @ np.diag([1e2, 1e-2]) @ rotation.T))


TARGETS = {
    "icg": ("ICG 100D", gaussian_model, lambda: (ill_conditioned_cholesky(100),), 0.0),
    "scg": ("SCG 2D", gaussian_model, lambda: (rotated_cholesky(),), 0.0),
    "banana": ("BANANA 2D", banana_model, lambda: (), 0.0),
    "rough_well": (
        "RW 2D",
        rough_well_model,
        lambda: (ROUGHNESS,),
        2 * math.log(math.sqrt(2 * math.pi) * i0(ROUGHNESS)),
    ),
}


def flat_draws(samples):
    """The sites' draws side by side, ``(chains, draws, D)``, in sorted site order."""
    shape = (NUM_CHAINS, NUM_SAMPLES, -1)
    columns = [np.asarray(samples[site]).reshape(shape) for site in sorted(samples)]
    return np.concatenate(columns, -1)


def ess_over_n(draws):
    """The paper's ``ESS / N``: the smallest ESS over ``x`` and ``x^2`` of every coordinate."""
    ess = effective_sample_size(np.concatenate([draws, draws**2], -1))
    return float(np.min(ess)) / (draws.shape[0] * draws.shape[1])


def run_target(key, variants, seed):
    name, model, make_args, log_z = TARGETS[key]
    model_args = make_args()
    log(f"{name}: nuts")
    nuts, nuts_evaluations, nuts_seconds = nuts_run(model, model_args, seed, ("accept_prob",))
    nuts_samples = nuts.get_samples(group_by_chain=True)
    nuts_draws = flat_draws(nuts_samples)
    # every site is real, so its unconstrained shape is its shape
    sites = tuple((site, nuts_samples[site].shape[2:]) for site in sorted(nuts_samples))
    nuts_ess = ess_over_n(nuts_draws)
    rows = [
        {
            "target": name,
            "method": "nuts",
            "accept": float(np.mean(nuts.get_extra_fields()["accept_prob"])),
            "ess_over_n": nuts_ess,
            "ess_per_evaluation": nuts_ess * NUM_CHAINS * NUM_SAMPLES / nuts_evaluations,
            "evaluations": nuts_evaluations,
            "training_seconds": math.nan,
            "seconds": nuts_seconds,
            "paper": PAPER[key][0],
        }
    ]
    # The VAE sees flat unconstrained points in the order the kernel ravels the sites.
    data = jnp.asarray(nuts_draws.reshape(-1, nuts_draws.shape[-1]))
    dimension = data.shape[1]
    runs = [(variant, "exact") for variant in variants]
    if "paper" in variants:
        runs.append(("paper", "isometric"))
    proposals = {}
    for variant, acceptance in runs:
        if variant not in proposals:
            config = VAEConfig(dimension=dimension, latent_dim=dimension, **VAE_VARIANTS[variant])
            start = time.perf_counter()
            proposal, _ = train_once(config, sites, data, EPOCHS, seed + 1)
            proposals[variant] = (proposal, time.perf_counter() - start)
        proposal, training_seconds = proposals[variant]
        log(f"{name}: slmc/{variant} ({acceptance})")
        kernel = nx.VAESLMC(model, proposal=proposal, acceptance=acceptance)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mcmc = user_mcmc(kernel)
            start = time.perf_counter()
            mcmc.run(jax.random.PRNGKey(seed + 3), *model_args)
            jax.block_until_ready(mcmc.get_samples())
            seconds = time.perf_counter() - start
            evidence = nx.log_marginal_likelihood(mcmc, warn=False)
        draws = flat_draws(mcmc.get_samples(group_by_chain=True))
        ess = ess_over_n(draws)
        evaluations = nuts_evaluations + NUM_CHAINS * (1 + NUM_WARMUP + NUM_SAMPLES)
        rows.append(
            {
                "target": name,
                "method": f"slmc/{variant}"
                + ("" if acceptance == "exact" else " (isometric, approximate)"),
                "accept": float(np.mean(mcmc.get_extra_fields()["accept_prob"])),
                "ess_over_n": ess,
                "ess_per_evaluation": ess * NUM_CHAINS * NUM_SAMPLES / evaluations,
                "evaluations": evaluations,
                "log_z_error": float(evidence.log_z - log_z),
                "stderr": float(evidence.stderr),
                "pareto_k": float(evidence.pareto_k),
                "training_seconds": training_seconds,
                "seconds": seconds,
                "paper": PAPER[key][1],
            }
        )
        log(f"  {rows[-1]}")
    for row in rows[1:]:
        row["ratio"] = row["ess_over_n"] / nuts_ess
    rows[0]["ratio"] = 1.0
    return rows


def table(rows):
    header = [
        "target",
        "method",
        "acceptance",
        "ESS / N",
        "x NUTS",
        "paper's ESS / N (HMC; naive VAE-SLMC)",
        "ESS / eval (training counted)",
        "log Z error",
        "stderr",
        "training s",
        "sampling s",
    ]
    body = [
        [
            r["target"],
            r["method"],
            fmt(r["accept"], 3),
            fmt(r["ess_over_n"], 3),
            fmt(r["ratio"], 3),
            fmt(r["paper"], 3),
            fmt(r["ess_per_evaluation"], 3),
            f"{r['log_z_error']:+.3f}" if "log_z_error" in r else "-",
            fmt(r["stderr"], 2) if "stderr" in r else "-",
            "-" if math.isnan(r["training_seconds"]) else f"{r['training_seconds']:.0f}",
            f"{r['seconds']:.0f}",
        ]
        for r in rows
    ]
    return [markdown_table(header, body)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", nargs="+", choices=tuple(TARGETS), default=list(TARGETS))
    parser.add_argument(
        "--vae",
        nargs="+",
        choices=tuple(VAE_VARIANTS),
        default=["learned", "learned-whitened", "paper"],
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=None, help="also write the report here")
    args = parser.parse_args(argv)
    rows = []
    for key in args.targets:
        rows += run_target(key, args.vae, args.seed)
    lines = table(rows) + [""]
    lines += environment_lines(
        "slmc_naive_benchmark.py",
        sys.argv[1:] if argv is None else argv,
        elapsed_seconds(),
        settings=(
            f"{NUM_CHAINS} chains x ({NUM_WARMUP} + {NUM_SAMPLES}) draws per method; VAE "
            f"trained {EPOCHS} epochs, batch 512, Adam 1e-3"
        ),
    )
    publish_report("\n".join(lines), args.output)


if __name__ == "__main__":
    main()
