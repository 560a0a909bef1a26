"""The Ai-sampler against NUTS, fixed-trajectory HMC and flowMC: 2-D multimodal energies and
Bayesian logistic regression.

Each run is what a user writes, ``MCMC(nx.AiSampler(model), num_warmup=1000, num_samples=5000,
num_chains=4)`` with the defaults (the involution trained in ``init``), beside ``NUTS(model)`` and
HMC with the paper's fixed trajectory (40 leapfrog steps of 0.05), in one process.

- ``--part planar``: mog2, mog6, ring, ring5 (the reference code's constants) and an uneven
  three-component mixture; exact mode weights (``numpyro_extras.targets.planar``). Reports the
  chains that visit every mode, the mode-switch rate, the mode-weight error, the minimum ESS per
  second with and without training. flowMC (``pip install -e ".[bench]"``; RQSpline flow +
  MALA, the settings of ``common.FLOWMC``, 20 chains) trains during its run: its seconds are
  all counted as sampling. ``--methods`` and ``--targets`` choose a subset.
- ``--part blr``: heart, australian and german; the reference is a long NUTS run (4 x 5000):
  every posterior mean within 4 Monte Carlo standard errors (the run's and the reference's
  combined), and the minimum ESS per second.
- ``--part cost``: the wall time of one Ai-sampler step against one gradient of the potential
  on german (the paper's Fig. 6), for 1, 100 and 1000 chains.

Run: ``python benchmarks/ai_sampler_benchmark.py --part planar --seeds 0 1 2``.
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from common import (
    FLOWMC,
    elapsed_seconds,
    environment_lines,
    fmt,
    log,
    markdown_table,
    publish_report,
    run_flowmc,
)
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import HMC, MCMC, NUTS

import numpyro_extras as nx
from numpyro_extras.targets import load_logistic_regression_data, logistic_regression_model
from numpyro_extras.targets.planar import PLANAR_TARGETS, planar_target

NUM_WARMUP, NUM_SAMPLES, NUM_CHAINS = 1000, 5000, 4
METHODS = ("ai", "nuts", "hmc", "flowmc")


def planar_model(potential_fn):
    def model():
        x = numpyro.sample("x", dist.ImproperUniform(dist.constraints.real, (), (2,)))
        numpyro.factor("energy", -potential_fn(x))

    return model


def make_kernel(method, model, seed):
    if method == "ai":
        return nx.AiSampler(model, fit_seed=seed)
    if method == "nuts":
        return NUTS(model)
    return HMC(model, step_size=0.05, num_steps=40, adapt_step_size=False)


def run(method, model, model_args, seed, site):
    if method == "flowmc":
        return run_flowmc_planar(model, model_args, seed)
    kernel = make_kernel(method, model, seed)
    mcmc = MCMC(
        kernel,
        num_warmup=NUM_WARMUP,
        num_samples=NUM_SAMPLES,
        num_chains=NUM_CHAINS,
        chain_method="vectorized",
        progress_bar=False,
    )
    start = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(seed), *model_args)
    draws = np.asarray(mcmc.get_samples(group_by_chain=True)[site])
    total = time.perf_counter() - start
    training = kernel.params.history.seconds if method == "ai" else 0.0
    ess = float(np.min(effective_sample_size(draws)))
    return {
        "draws": draws,
        "training_seconds": training,
        "sampling_seconds": total - training,
        "min_ess": ess,
        "accept": float(np.mean(mcmc.get_extra_fields()["accept_prob"]))
        if method == "ai"
        else float("nan"),
    }


def run_flowmc_planar(model, model_args, seed):
    """flowMC on a planar model, whose only site ``x`` is the flat space itself; it trains
    during its run, so its whole wall time counts as sampling and there is no training column.
    ``None`` when flowMC is not installed."""
    flowmc = run_flowmc(model, model_args, seed)
    if flowmc is None:
        return None
    return {
        "draws": flowmc.draws,
        "training_seconds": float("nan"),
        "sampling_seconds": flowmc.seconds,
        "min_ess": float(np.min(effective_sample_size(flowmc.draws))),
        "accept": flowmc.global_accept_rate,
    }


def planar_rows(seeds, methods=METHODS, names=PLANAR_TARGETS):
    rows = []
    for name in names:
        target = planar_target(name)
        model = planar_model(target.potential_fn)
        for seed in seeds:
            for method in methods:
                log(f"{name} seed {seed} {method}")
                result = run(method, model, (), seed, "x")
                if result is None:
                    log("flowMC is not installed (pip install -e '.[bench]'): no flowMC rows")
                    continue
                labels = target.label_fn(result["draws"])
                weights = np.bincount(labels.ravel(), minlength=len(target.mode_weights))
                weights = weights / labels.size
                visiting = sum(
                    len(np.unique(chain)) == len(target.mode_weights) for chain in labels
                )
                rows.append(
                    {
                        "target": name,
                        "seed": seed,
                        "method": method,
                        "visiting": visiting,
                        "num_chains": labels.shape[0],
                        "switch_rate": nx.mode_switch_rate(labels),
                        "weight_error": float(np.max(np.abs(weights - target.mode_weights))),
                        **{k: v for k, v in result.items() if k != "draws"},
                    }
                )
    return rows


SAMPLING_COLUMNS = (
    "Accept",
    "Min ESS",
    "Training s",
    "Sampling s",
    "Min ESS / s (sampling)",
    "Min ESS / s (training counted)",
)


def method_label(row):
    labels = {"ai": "Ai-sampler (defaults)", "flowmc": "flowMC (RQSpline + MALA)"}
    return labels.get(row["method"], row["method"].upper())


def sampling_cells(row):
    """The cells of :data:`SAMPLING_COLUMNS` for one run."""
    return [
        fmt(row["accept"], 2),
        fmt(row["min_ess"], 4),
        fmt(row["training_seconds"], 3),
        f"{row['sampling_seconds']:.1f}",
        fmt(row["min_ess"] / row["sampling_seconds"], 3),
        fmt(row["min_ess"] / (row["sampling_seconds"] + np.nan_to_num(row["training_seconds"])), 3),
    ]


def planar_table(rows):
    header = [
        "Target",
        "Seed",
        "Method",
        "Chains visiting every mode",
        "Mode switches per step",
        "Mode-weight error",
        *SAMPLING_COLUMNS,
    ]
    body = [
        [
            row["target"],
            row["seed"],
            method_label(row),
            f"{row['visiting']}/{row['num_chains']}",
            f"{row['switch_rate']:.3f}",
            f"{row['weight_error']:.3f}",
            *sampling_cells(row),
        ]
        for row in rows
    ]
    return markdown_table(header, body)


def blr_rows(seeds, datasets):
    rows = []
    for name in datasets:
        features, labels = load_logistic_regression_data(name)
        args = (jnp.asarray(features), jnp.asarray(labels))
        log(f"{name}: reference NUTS")
        reference = MCMC(
            NUTS(logistic_regression_model),
            num_warmup=1000,
            num_samples=5000,
            num_chains=4,
            chain_method="vectorized",
            progress_bar=False,
        )
        reference.run(jax.random.PRNGKey(1000), *args)
        reference_draws = np.asarray(reference.get_samples(group_by_chain=True)["w"])
        reference_mean = reference_draws.mean((0, 1))
        reference_var = reference_draws.var((0, 1))
        reference_ess = np.asarray(effective_sample_size(reference_draws))
        for seed in seeds:
            for method in ("ai", "nuts"):
                log(f"{name} seed {seed} {method}")
                result = run(method, logistic_regression_model, args, seed, "w")
                draws = result.pop("draws")
                ess = np.asarray(effective_sample_size(draws))
                stderr = np.sqrt(reference_var / ess + reference_var / reference_ess)
                z = np.abs(draws.mean((0, 1)) - reference_mean) / stderr
                rows.append(
                    {
                        "dataset": name,
                        "seed": seed,
                        "method": method,
                        "max_z": float(np.max(z)),
                        **result,
                    }
                )
    return rows


def blr_table(rows):
    header = [
        "Data",
        "Seed",
        "Method",
        "Max abs(mean - reference) / MCSE",
        *SAMPLING_COLUMNS,
    ]
    body = [
        [
            row["dataset"],
            row["seed"],
            method_label(row),
            f"{row['max_z']:.2f}",
            *sampling_cells(row),
        ]
        for row in rows
    ]
    return markdown_table(header, body)


def cost_rows(batch_sizes):
    """Seconds per Ai-sampler step and per gradient of the potential (german), for a batch of
    chains, compile excluded, best of 5 repetitions of 200 calls."""
    from numpyro_extras.involutive.chains import build_kernel, init
    from numpyro_extras.involutive.networks import InvolutionConfig, init_proposal
    from numpyro_extras.model.potential import flatten_model

    features, labels = load_logistic_regression_data("german")
    flat = flatten_model(jax.random.PRNGKey(0), logistic_regression_model, (features, labels))
    dimension = flat.dimension
    proposal = init_proposal(
        jax.random.PRNGKey(1), InvolutionConfig(dimension, hidden=64, discriminator_hidden=256)
    )
    rows = []
    for batch in batch_sizes:
        positions = 0.1 * jax.random.normal(jax.random.PRNGKey(2), (batch, dimension))
        states = jax.vmap(lambda x: init(x, flat.potential_fn))(positions)
        keys = jax.random.split(jax.random.PRNGKey(3), batch)
        step = jax.jit(
            functools.partial(
                lambda kernel, keys, states: kernel(keys, states)[0],
                jax.vmap(build_kernel(proposal, flat.potential_fn)),
                keys,
            )
        )
        gradient = jax.jit(jax.vmap(jax.grad(flat.potential_fn)))

        def timed(function, argument):
            jax.block_until_ready(function(argument))
            best = float("inf")
            for _ in range(5):
                start = time.perf_counter()
                for _ in range(200):
                    result = function(argument)
                jax.block_until_ready(result)
                best = min(best, (time.perf_counter() - start) / 200)
            return best

        step_seconds = timed(step, states)
        gradient_seconds = timed(gradient, positions)
        rows.append(
            [
                batch,
                f"{step_seconds * 1e6:.0f}",
                f"{gradient_seconds * 1e6:.0f}",
                f"{step_seconds / gradient_seconds:.2f}",
            ]
        )
    header = ["Chains", "Ai step (us)", "One gradient of U (us)", "Ai step / gradient"]
    return markdown_table(header, rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=("planar", "blr", "cost"), default="planar")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--datasets", nargs="+", default=["heart", "australian", "german"])
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--targets", nargs="+", choices=PLANAR_TARGETS, default=None)
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    numpyro.enable_x64(False)
    if args.part == "planar":
        table = planar_table(planar_rows(args.seeds, args.methods, args.targets or PLANAR_TARGETS))
    elif args.part == "cost":
        table = cost_rows([1, 100, 1000])
    else:
        table = blr_table(blr_rows(args.seeds, args.datasets))
    report = "\n".join(
        [
            "### Environment",
            "",
            *environment_lines(
                "ai_sampler_benchmark.py",
                ["--part", args.part, "--seeds", *map(str, args.seeds)]
                + (["--datasets", *args.datasets] if args.part == "blr" else [])
                + (["--methods", *args.methods] if args.part == "planar" else [])
                + (["--targets", *args.targets] if args.targets else []),
                elapsed_seconds(),
                f"{NUM_CHAINS} chains x ({NUM_WARMUP} + {NUM_SAMPLES}), vectorized; flowMC "
                f"{FLOWMC}",
            ),
            "",
            table,
        ]
    )
    publish_report(report, args.output)


if __name__ == "__main__":
    main()
