"""VAE self-learning Monte Carlo (``nx.VAESLMC``) with its defaults, NUTS and flowMC on Gaussian
mixtures with uneven weights and exact answers.

The targets are the paper's mixtures (Ichikawa et al., App. F.1): ``C`` isotropic components
``N(c_k 1_D, sigma^2 I_D)`` with centres ``c_k`` spaced 2 apart and symmetric about 0 (adjacent
means ``2 sqrt(D)`` apart) and ``sigma^2 = 0.5 sqrt(D / 100)``, but with uneven weights ``w_k``
proportional to ``k + 1``, and a factor that makes ``log Z = 1.5``. A draw belongs to the cluster of
the nearest mean (misclassification is below ``1e-12`` at these separations).

Methods, each as a user runs it:

* ``slmc``: ``MCMC(nx.VAESLMC(model), num_warmup=1000, num_samples=5000, num_chains=4)``, every
  setting at its default (the proposal trained in ``init``, timed and counted);
* ``nuts``: ``MCMC(NUTS(model), ...)`` with the same chains and draws;
* ``nuts-spread``: the same, but chain ``i`` started at the mean of cluster ``i mod C``: every
  chance NUTS can be given. Its chains still never switch, so ArviZ's (NumPyro's) ESS over the
  chains sees them disagree: this is NUTS's ESS on the mixture, and the ``x NUTS`` ratio is
  taken against it where it was run. Plain ``nuts`` puts every chain in the cluster nearest
  its uniform starts, and its ESS is that of sampling one cluster (an answer that is wrong);
* ``flowmc``: flowMC 0.6.4's ``RQSpline_MALA_Bundle`` (a normalising flow trained on MALA draws,
  proposing globally; the anchor for learned proposals in JAX), 20 chains, 20 training loops and
  10 production loops of 100 MALA + 100 flow steps, 20 epochs per training loop; skipped with a
  message when flowMC is not installed (``pip install -e ".[bench]"``).

Per configuration and method it prints the largest cluster-weight error ``max_k |w_hat_k - w_k|``
of the pooled draws, whether every chain visited every cluster, ``log Z`` error and stderr
(``nx.log_marginal_likelihood``, ours only), the smallest ESS over coordinates (NumPyro's
``effective_sample_size`` over all chains), the target-density evaluations (a gradient evaluation
counts as one; training and warm-up included: NUTS's first rung and every proposal of the
annealing for ``slmc``, every MALA and flow step for ``flowmc``), ESS per evaluation and its ratio
to NUTS's, and the wall time with training and compilation.

``--experiment training`` instead trains ``nx.fit_vae_proposal`` with its defaults and any
``--fit-kwargs`` (``'{"patience": null}'``: every epoch, as in the paper) on a 4-D sign-product
target and a 10-D uneven two-component mixture (:mod:`numpyro_extras.targets.multimodal`), then
samples 4 chains x (1000 + 5000) with the trained proposal: training time, epochs and Adam steps,
acceptance rate, mode-weight error and ``log Z``.

Usage::

    python benchmarks/slmc_benchmark.py --quick                            # D = 10, C = 3
    python benchmarks/slmc_benchmark.py --configs 10:3 20:2 20:5 50:3 --json runs.jsonl
    python benchmarks/slmc_benchmark.py --report-from runs.jsonl           # tables of saved runs
    python benchmarks/slmc_benchmark.py --configs 20:5 --methods slmc --save-proposals trained
    python benchmarks/slmc_benchmark.py --experiment training --fit-kwargs '{"patience": null}'
    python benchmarks/slmc_benchmark.py --experiment acceptance --configs 10:3 20:2
    python benchmarks/slmc_benchmark.py --experiment acceptance --configs 20:2 --vae paper learned

``--experiment first-rung --configs 100:5 --seeds 0 1 2 3 4`` runs the first rung alone
(``initial_draws``: the replica exchanges and the NUTS chains at ``beta_0``) and prints the
cluster shares of its draws: a cluster with no share is one the annealing never learns.
``--vague-prior`` makes the mixture a likelihood under a vague prior, whose draws lie far from
every cluster (a start from them, or from a fit seeded by them, misses the outer clusters).

``--experiment acceptance`` separates the network from the annealing: per ``D:C`` it trains a
VAE (``train_vae``, every epoch, no early stopping) on 15,000 exact draws of the mixture at
``beta = 1``, for each of ``--epochs`` (150 and 600), ``--beta-vae`` and ``--vae`` (``paper``:
eq. 2's fixed decoder noise; ``learned``: the package's learned noise; ``learned-whitened``:
also whitened data), then runs 4 chains x (200 + 2000) of ``nx.VAESLMC`` with that proposal
under each acceptance (the exact one with each ``--num-latents``; the isometric one for the
paper's network), and prints the mean acceptance probability (the exact kernel's ``log Z``
error and stderr beside it).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time
import warnings

# XLA's multi-threaded Eigen runtime deadlocked now and then on the benchmark machine;
# single-threaded Eigen never did.
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import numpyro  # noqa: E402

# log Z to a few hundredths of a nat needs double precision; set it before any array exists.
numpyro.enable_x64()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from common import (  # noqa: E402
    FLOWMC,
    elapsed_seconds,
    environment_lines,
    fmt,
    log,
    markdown_table,
    publish_report,
    read_runs,
    run_flowmc,
    save_run,
    verdict,
)
from numpyro.diagnostics import effective_sample_size  # noqa: E402
from numpyro.infer import MCMC, NUTS  # noqa: E402

import numpyro_extras as nx  # noqa: E402
import numpyro_extras.slmc.kernels as slmc_kernels_module  # noqa: E402
from numpyro_extras.model.potential import flatten_model  # noqa: E402
from numpyro_extras.slmc.annealing import initial_draws  # noqa: E402
from numpyro_extras.slmc.vae import (  # noqa: E402
    VAEConfig,
    init_proposal,
    sample_extended,
    train_vae,
)
from numpyro_extras.targets import (  # noqa: E402
    gaussian_mixture_target,
    mode_weight_error,
    sign_product_target,
)

METHODS = ("slmc", "nuts", "nuts-spread", "flowmc")
LOG_Z = 1.5
NUM_WARMUP, NUM_SAMPLES, NUM_CHAINS = 1000, 5000, 4

# Our acceptance targets (checked in the report).
MAX_WEIGHT_ERROR = 0.04
MAX_STDERR = 0.1
MAX_Z_SCORE = 3.0
MIN_ESS_RATIO = 5.0


def mixture_model(centres, scale, log_weights, log_z):
    """``x`` from the uneven mixture ``sum_k w_k N(c_k 1_D, scale^2 I)``, times ``exp(log_z)``."""
    components = dist.Independent(dist.Normal(centres, scale), 1)
    mixture = dist.MixtureSameFamily(dist.Categorical(logits=log_weights), components)
    numpyro.sample("x", mixture)
    numpyro.factor("evidence", log_z)


# The prior scale of ``vague_prior_mixture_model``: its draws lie far from every cluster.
VAGUE_PRIOR_SCALE = 5.0


def vague_prior_mixture_model(centres, scale, log_weights, log_z):
    """The posterior of ``mixture_model`` with a vague prior on ``x``, ``N(0, 5^2 I)``, and the
    mixture over it as a likelihood term: the same target, whose prior draws lie far from every
    cluster instead of in them."""
    prior = dist.Normal(0.0, VAGUE_PRIOR_SCALE).expand([centres.shape[-1]]).to_event(1)
    x = numpyro.sample("x", prior)
    components = dist.Independent(dist.Normal(centres, scale), 1)
    mixture = dist.MixtureSameFamily(dist.Categorical(logits=log_weights), components)
    numpyro.factor("evidence", mixture.log_prob(x) - prior.log_prob(x) + log_z)


class Mixture:
    """The paper's Gaussian mixture with weights proportional to ``k + 1`` (App. F.1)."""

    def __init__(self, dimension, clusters):
        self.dimension, self.clusters = dimension, clusters
        self.offsets = 2.0 * np.arange(clusters) - (clusters - 1.0)
        self.weights = (np.arange(clusters) + 1.0) / np.sum(np.arange(clusters) + 1.0)
        self.scale = math.sqrt(0.5 * math.sqrt(dimension / 100.0))
        self.model = mixture_model
        self.model_args = (
            jnp.asarray(np.outer(self.offsets, np.ones(dimension))),
            self.scale,
            jnp.asarray(np.log(self.weights)),
            LOG_Z,
        )
        self.name = f"D={dimension} C={clusters}"

    def labels(self, x):
        """The cluster of the nearest mean, for draws ``(..., D)``."""
        projection = np.mean(np.asarray(x), -1)
        return np.argmin(np.abs(projection[..., None] - self.offsets), -1)


def ess_per_evaluation(draws, evaluations):
    """The smallest ESS over coordinates of ``draws`` ``(chains, draws, D)``, and per evaluation."""
    ess = float(np.min(effective_sample_size(np.asarray(draws))))
    return ess, ess / evaluations


def summary(target, draws, evaluations, seconds):
    """What every method reports, from its draws ``(chains, draws, D)``."""
    labels = target.labels(draws)
    weights = np.bincount(labels.ravel(), minlength=target.clusters) / labels.size
    every_chain = all(len(np.unique(chain)) == target.clusters for chain in labels)
    ess, per_evaluation = ess_per_evaluation(draws, evaluations)
    return {
        "weights": weights.tolist(),
        "weight_error": mode_weight_error(weights, target.weights),
        "every_chain_every_cluster": bool(every_chain),
        "ess": ess,
        "evaluations": int(evaluations),
        "ess_per_evaluation": per_evaluation,
        "seconds": seconds,
    }


class TimedFit:
    """Wraps the ``fit_vae_proposal`` the kernel calls, to time the training inside ``init``."""

    def __init__(self, original):
        self.original = original
        self.seconds = 0.0

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        proposal = jax.block_until_ready(self.original(*args, **kwargs))
        self.seconds = time.perf_counter() - start
        return proposal


def user_mcmc(kernel):
    """``MCMC`` as this benchmark runs every method: 4 vectorised chains x (1000 + 5000) draws."""
    return MCMC(
        kernel,
        num_warmup=NUM_WARMUP,
        num_samples=NUM_SAMPLES,
        num_chains=NUM_CHAINS,
        chain_method="vectorized",
        progress_bar=False,
    )


def run_slmc(target, seed, fit_kwargs, save_to=None):
    """``nx.VAESLMC`` with its defaults (and ``fit_kwargs``) as a user runs it, its training and
    its chains seeded by ``seed``; with ``save_to``, its trained proposal is written to that
    directory (``nx.save_proposal``)."""
    timed_fit = TimedFit(slmc_kernels_module.fit_vae_proposal)
    slmc_kernels_module.fit_vae_proposal = timed_fit
    start = time.perf_counter()
    try:
        kernel = nx.VAESLMC(target.model, fit_kwargs=fit_kwargs, fit_seed=seed)
        mcmc = user_mcmc(kernel)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mcmc.run(jax.random.PRNGKey(seed), *target.model_args)
            evidence = nx.log_marginal_likelihood(mcmc)
    finally:
        slmc_kernels_module.fit_vae_proposal = timed_fit.original
    seconds = time.perf_counter() - start
    history = kernel.proposal.history
    if save_to:
        os.makedirs(save_to, exist_ok=True)
        name = f"mixture_d{target.dimension}_c{target.clusters}_seed{seed}.msgpack"
        nx.save_proposal(os.path.join(save_to, name), kernel.proposal)
    evaluations = history.density_evaluations + NUM_CHAINS * (NUM_WARMUP + NUM_SAMPLES)
    draws = mcmc.get_samples(group_by_chain=True)["x"]
    result = summary(target, draws, evaluations, seconds)
    result.update(
        log_z_error=float(evidence.log_z - LOG_Z),
        stderr=float(evidence.stderr),
        pareto_k=float(evidence.pareto_k),
        training_seconds=timed_fit.seconds,
        training_evaluations=history.density_evaluations,
        accept_rate=float(np.mean(mcmc.get_extra_fields()["accept_prob"])),
        rounds=len(history.betas(history.chosen_model)) - 1,
        epochs=[rung.epochs for rung in history.rungs],
        round_seconds=[round(rung.seconds, 1) for rung in history.rungs],
        warnings=sorted({str(w.message)[:200] for w in caught}),
    )
    return result


def nuts_run(model, model_args, seed, extra_fields=(), init_params=None):
    """``MCMC(NUTS(model))`` as a user runs it (:func:`user_mcmc`), from ``init_params`` if
    given: the run, its gradient evaluations (warm-up included) and its seconds."""
    start = time.perf_counter()
    mcmc = user_mcmc(NUTS(model))
    warmup_key, run_key = jax.random.split(jax.random.PRNGKey(seed))
    mcmc.warmup(
        warmup_key,
        *model_args,
        init_params=init_params,
        collect_warmup=True,
        extra_fields=("num_steps",),
    )
    evaluations = int(np.sum(mcmc.get_extra_fields()["num_steps"]))
    mcmc.run(run_key, *model_args, extra_fields=("num_steps",) + tuple(extra_fields))
    evaluations += int(np.sum(mcmc.get_extra_fields()["num_steps"]))
    jax.block_until_ready(mcmc.get_samples())
    return mcmc, evaluations, time.perf_counter() - start


def run_nuts(target, seed, spread=False):
    """NUTS on the mixture; with ``spread``, chain ``i`` starts at the mean of cluster
    ``i mod C``."""
    init_params = None
    if spread:
        clusters = np.arange(NUM_CHAINS) % target.clusters
        init_params = {"x": np.asarray(target.model_args[0])[clusters]}
    mcmc, evaluations, seconds = nuts_run(
        target.model, target.model_args, seed, init_params=init_params
    )
    return summary(target, mcmc.get_samples(group_by_chain=True)["x"], evaluations, seconds)


def flowmc_summary(target, seed):
    run = run_flowmc(target.model, target.model_args, seed)
    if run is None:
        return None
    result = summary(target, run.draws, run.evaluations, run.seconds)
    result["global_accept_rate"] = run.global_accept_rate
    return result


def parse_config(text):
    dimension, clusters = (int(part) for part in text.split(":"))
    return dimension, clusters


def comparison_rows(results):
    """One row per configuration and method, with the ratio of ESS per evaluation to NUTS's
    (to ``nuts-spread``'s where it was run, else to ``nuts``'s)."""
    nuts = {}
    for method in ("nuts", "nuts-spread"):
        nuts.update(
            {
                (r["dimension"], r["clusters"]): r["ess_per_evaluation"]
                for r in results
                if r["method"] == method
            }
        )
    rows = []
    for r in sorted(
        results, key=lambda r: (r["dimension"], r["clusters"], METHODS.index(r["method"]))
    ):
        reference = nuts.get((r["dimension"], r["clusters"]))
        ratio = r["ess_per_evaluation"] / reference if reference else float("nan")
        ours = r["method"] == "slmc"
        rows.append(
            [
                r["dimension"],
                r["clusters"],
                r["method"] + (" (defaults)" if ours else ""),
                " ".join(f"{w:.3f}" for w in r["weights"]),
                fmt(r["weight_error"], 2),
                "yes" if r["every_chain_every_cluster"] else "**no**",
                fmt(r["log_z_error"], 2) if ours else "-",
                fmt(r["stderr"], 2) if ours else "-",
                fmt(r["ess"], 3),
                f"{r['evaluations']:.3g}",
                f"{r['ess_per_evaluation']:.2e}",
                fmt(ratio, 3),
                f"{r['training_seconds']:.0f}" if ours else "-",
                f"{r['seconds']:.0f}",
            ]
        )
    return rows, nuts


def target_rows(results, nuts):
    rows = []
    for r in results:
        if r["method"] != "slmc":
            continue
        reference = nuts.get((r["dimension"], r["clusters"]))
        ratio = r["ess_per_evaluation"] / reference if reference else float("nan")
        z_score = abs(r["log_z_error"]) / r["stderr"] if r["stderr"] > 0 else float("inf")
        rows.append(
            [
                r["dimension"],
                r["clusters"],
                verdict(r["weight_error"] <= MAX_WEIGHT_ERROR),
                verdict(r["every_chain_every_cluster"]),
                verdict(z_score <= MAX_Z_SCORE and r["stderr"] <= MAX_STDERR),
                verdict(ratio >= MIN_ESS_RATIO) if reference else "-",
                "; ".join(r["warnings"]) or "-",
            ]
        )
    return rows


def mixture_tables(results):
    rows, nuts = comparison_rows(results)
    header = [
        "D",
        "C",
        "method",
        "weights (exact: prop. to k+1)",
        "weight error",
        "every chain every cluster",
        "log Z error",
        "stderr",
        "min ESS",
        "density evals",
        "ESS / eval",
        "x NUTS",
        "training s",
        "wall s",
    ]
    lines = [
        markdown_table(header, rows),
        "",
        "Acceptance targets (nx.VAESLMC at its defaults):",
        "",
    ]
    lines.append(
        markdown_table(
            [
                "D",
                "C",
                f"weight error <= {MAX_WEIGHT_ERROR}",
                "every chain every cluster",
                f"log Z within {MAX_Z_SCORE:g} stderr, stderr <= {MAX_STDERR}",
                f"ESS / eval >= {MIN_ESS_RATIO:g} x NUTS",
                "warnings",
            ],
            target_rows(results, nuts),
        )
    )
    details = [
        f"- {r['dimension']}:{r['clusters']} slmc: acceptance {r['accept_rate']:.2f}, "
        f"{r['rounds']} annealing rounds, epochs per training {r['epochs']}, training density "
        f"evaluations {r['training_evaluations']}"
        + (f", seconds per round {r['round_seconds']}" if "round_seconds" in r else "")
        for r in results
        if r["method"] == "slmc"
    ]
    details += [
        f"- {r['dimension']}:{r['clusters']} flowmc: global acceptance "
        f"{fmt(r['global_accept_rate'], 2)}"
        for r in results
        if r["method"] == "flowmc"
    ]
    return lines + [""] + details


def adam_steps(history, settings):
    """Model 0's Adam steps over the annealing: epochs times batches per epoch of each training
    (the held-out share set aside, except in the full final training)."""
    last_round = history.rungs[-1].round
    steps = 0
    for rung in history.rungs:
        if rung.model != 0:
            continue
        points = settings.initial_size if rung.round == 0 else settings.training_size
        full = rung.round == last_round and rung.round > 0 and settings.full_final_training
        if settings.patience is not None and not full:
            points -= max(1, int(settings.validation_fraction * points))
        steps += rung.epochs * max(1, points // min(settings.batch_size, points))
    return steps


def training_experiment(fit_kwargs, seed):
    """Train with the defaults and ``fit_kwargs`` on two targets, then sample with the proposal."""
    results = []
    for target in (sign_product_target(0, 4), gaussian_mixture_target(0, 10)):
        log(f"training on {target.name} with {fit_kwargs}")
        proposal, training_seconds = fit_timed(target, seed, **fit_kwargs)
        history = proposal.history
        mcmc = user_mcmc(nx.VAESLMC(target.model, proposal=proposal))
        mcmc.run(jax.random.PRNGKey(seed + 1), *target.model_args)
        evidence = nx.log_marginal_likelihood(mcmc, warn=False)
        draws = mcmc.get_samples(group_by_chain=True)
        labels = target.mode_labels(draws)
        settings = nx.AnnealingSettings(**fit_kwargs).checked(1, target.dimension)
        epochs = [rung.epochs for rung in history.rungs if rung.model == 0]
        results.append(
            {
                "target": target.name,
                "fit_kwargs": fit_kwargs,
                "training_seconds": training_seconds,
                "betas": history.betas(0),
                "epochs": epochs,
                "adam_steps": adam_steps(history, settings),
                "accept_rate": float(np.mean(mcmc.get_extra_fields()["accept_prob"])),
                "weight_error": mode_weight_error(
                    target.empirical_mode_weights(draws), target.mode_weights
                ),
                "every_chain_every_mode": bool(
                    all(len(np.unique(chain)) == target.num_modes for chain in labels)
                ),
                "log_z_error": float(evidence.log_z - target.log_z),
                "stderr": float(evidence.stderr),
                "pareto_k": float(evidence.pareto_k),
            }
        )
        log(f"  {results[-1]}")
    return results


def sample_with_proposal(target, proposal, seed):
    """4 chains x (1000 + 5000) of ``nx.VAESLMC`` with a trained proposal: the mixture summary
    (:func:`summary`, sampling evaluations only) and ``log Z``."""
    mcmc = user_mcmc(nx.VAESLMC(target.model, proposal=proposal))
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.PRNGKey(seed), *target.model_args)
        evidence = nx.log_marginal_likelihood(mcmc, warn=False)
    draws = mcmc.get_samples(group_by_chain=True)["x"]
    evaluations = NUM_CHAINS * (1 + NUM_WARMUP + NUM_SAMPLES)
    result = summary(target, draws, evaluations, time.perf_counter() - start)
    result.update(
        log_z_error=float(evidence.log_z - LOG_Z),
        stderr=float(evidence.stderr),
        pareto_k=float(evidence.pareto_k),
        accept_rate=float(np.mean(mcmc.get_extra_fields()["accept_prob"])),
    )
    return result


def annealing_record(proposal, seconds):
    """The annealing's path per model, from its history."""
    history = proposal.history
    return {
        "training_seconds": seconds,
        "density_evaluations": history.density_evaluations,
        "chosen_model": history.chosen_model,
        "final_log_z_error": [value - LOG_Z for value in history.final_log_z],
        "models": [
            {
                "betas": [rung.beta for rung in history.rungs if rung.model == j],
                "accept_rates": [rung.accept_rate for rung in history.rungs if rung.model == j],
                "epochs": [rung.epochs for rung in history.rungs if rung.model == j],
                "swap_rates": [rung.swap_rate for rung in history.rungs if rung.model == j],
            }
            for j in range(history.num_models)
        ],
    }


# The paper's Fig. 4(a) runs (3 clusters, D = 20): adaptive annealing (AA) and constant annealing
# (CA, beta 0.1, 0.2, ..., 1) with 20 epochs per stage, every epoch (no early stopping), and AA
# with the package's defaults.
SCHEDULES = {
    "AA, 20 epochs": dict(epochs=20, initial_epochs=20, patience=None),
    "CA, 20 epochs": dict(epochs=20, initial_epochs=20, patience=None, constant_step=0.1),
    "AA, defaults": dict(),
}


def schedule_experiment(seed, dimension=20, clusters=3):
    """Adaptive against constant annealing (Fig. 4a): the beta path and each rung's acceptance
    rate, then sampling with the trained proposal."""
    target = Mixture(dimension, clusters)
    results = []
    for name, fit_kwargs in SCHEDULES.items():
        log(f"{target.name}: {name}")
        proposal, seconds = fit_timed(target, seed, **fit_kwargs)
        record = annealing_record(proposal, seconds)
        record.update(
            experiment="schedule",
            target=target.name,
            schedule=name,
            sampling=sample_with_proposal(target, proposal, seed + 1),
        )
        log(f"  {json.dumps(record)[:600]}")
        results.append(record)
    return results


def tempered_component_draws(target, beta, count, rng, clusters=None):
    """Approximate draws of the mixture tempered to ``beta``: each cluster widened to
    ``sigma / sqrt(beta)`` with weight proportional to ``w_k^beta`` (exact for separated
    clusters), drawn only from ``clusters`` when given."""
    clusters = np.arange(target.clusters) if clusters is None else np.asarray(clusters)
    weights = target.weights[clusters] ** beta
    picked = rng.choice(clusters, count, p=weights / weights.sum())
    noise = rng.standard_normal((count, target.dimension))
    return target.offsets[picked][:, None] + target.scale / math.sqrt(beta) * noise


def collapse_experiment(seed, dimension=20, clusters=3, beta_0=0.1):
    """Parallel annealing repairing a collapsed model (Fig. 4b,c): two models, model 0 trained
    at ``beta_0`` on one cluster only, model 1 on all; with and without exchange. Per model, the
    ``log Z`` its proposals find at ``beta = 1`` (a model that misses clusters finds the log of
    the weight it covers), and the share of the chosen model's proposals in each cluster."""
    target = Mixture(dimension, clusters)
    rng = np.random.default_rng(seed)
    count = nx.AnnealingSettings().checked(2, dimension).initial_size
    collapsed = tempered_component_draws(target, beta_0, count, rng, clusters=[clusters - 1])
    healthy = tempered_component_draws(target, beta_0, count, rng)
    initial_data = jnp.asarray(np.stack([collapsed, healthy]))
    results = []
    for exchange in (True, False):
        log(f"{target.name}: two models, exchange={exchange}")
        proposal, seconds = fit_timed(
            target, seed, num_models=2, initial_data=initial_data, exchange=exchange
        )
        record = annealing_record(proposal, seconds)
        draws = jax.vmap(lambda key, proposal=proposal: sample_extended(key, proposal)[0])(
            jax.random.split(jax.random.PRNGKey(seed + 2), 20_000)
        )
        labels = target.labels(draws)
        shares = (np.bincount(labels, minlength=clusters) / labels.size).tolist()
        record.update(
            experiment="collapse",
            target=target.name,
            exchange=exchange,
            chosen_proposal_cluster_shares=shares,
            sampling=sample_with_proposal(target, proposal, seed + 1),
        )
        log(f"  {json.dumps(record)[:600]}")
        results.append(record)
    return results


def exact_draws(target, count, rng):
    """``count`` exact draws ``(count, D)`` of the mixture at ``beta = 1``."""
    clusters = rng.choice(target.clusters, count, p=target.weights)
    noise = rng.standard_normal((count, target.dimension))
    return target.offsets[clusters][:, None] + target.scale * noise


# The acceptance experiment's networks: eq. 2's fixed decoder noise with per-coordinate
# standardisation (the paper's), a learned noise, and a learned noise on whitened data.
VAE_VARIANTS = {
    "paper": dict(learn_decoder_scale=False),
    "learned": dict(learn_decoder_scale=True),
    "learned-whitened": dict(learn_decoder_scale=True, whiten=True),
}


def train_once(config, sites, data, epochs, seed):
    """A fresh VAE of ``config`` trained by ``train_vae`` on ``data`` for every one of ``epochs``
    (batch 512, Adam 1e-3, Table 7), no annealing: the proposal and the losses per epoch."""
    proposal, losses = jax.jit(
        lambda key, proposal, data: train_vae(
            key, proposal, data, epochs=epochs, batch_size=512, learning_rate=1e-3
        )
    )(
        jax.random.PRNGKey(seed),
        init_proposal(jax.random.PRNGKey(seed + 1), config, sites=sites),
        data,
    )
    return jax.block_until_ready(proposal), losses


def fit_timed(target, seed, **fit_kwargs):
    """``nx.fit_vae_proposal`` on ``target`` with ``fit_kwargs``, silently: the proposal and the
    seconds it took."""
    start = time.perf_counter()
    proposal = nx.fit_vae_proposal(
        jax.random.PRNGKey(seed), target.model, target.model_args, progress_bar=False, **fit_kwargs
    )
    return jax.block_until_ready(proposal), time.perf_counter() - start


def acceptance_experiment(
    configs,
    beta_vaes,
    seed,
    epoch_counts=(150, 600),
    latent_counts=(1,),
    variants=("paper",),
):
    """The acceptance of VAE-SLMC's kernels with a VAE trained on exact draws (no annealing):
    the exact kernel with each number of latents, and the isometric one."""
    results = []
    rng = np.random.default_rng(seed)
    for dimension, clusters in configs:
        target = Mixture(dimension, clusters)
        data = jnp.asarray(exact_draws(target, 15_000, rng))
        sites = (("x", (dimension,)),)
        for beta_vae, epochs, variant in itertools.product(beta_vaes, epoch_counts, variants):
            config = VAEConfig(
                dimension=dimension,
                latent_dim=dimension,
                beta_vae=beta_vae,
                **VAE_VARIANTS[variant],
            )
            start = time.perf_counter()
            proposal, losses = train_once(config, sites, data, epochs, seed)
            trained = {
                "experiment": "acceptance",
                "target": target.name,
                "beta_vae": beta_vae,
                "vae": variant,
                "epochs": epochs,
                "training_seconds": time.perf_counter() - start,
                "final_loss": float(losses[-1]),
            }
            runs = [("exact", count) for count in latent_counts]
            if not config.learn_decoder_scale:
                runs.append(("isometric", 1))
            by_latents = {}
            for acceptance, num_latents in runs:
                result = by_latents.setdefault(num_latents, {**trained, "num_latents": num_latents})
                kernel = nx.VAESLMC(
                    target.model,
                    proposal=proposal,
                    acceptance=acceptance,
                    num_latents=num_latents,
                )
                mcmc = MCMC(
                    kernel,
                    num_warmup=200,
                    num_samples=2000,
                    num_chains=NUM_CHAINS,
                    chain_method="vectorized",
                    progress_bar=False,
                )
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    mcmc.run(jax.random.PRNGKey(seed + 2), *target.model_args)
                result[f"{acceptance}_accept"] = float(
                    np.mean(mcmc.get_extra_fields()["accept_prob"])
                )
                if acceptance == "exact":
                    evidence = nx.log_marginal_likelihood(mcmc, warn=False)
                    result["log_z_error"] = float(evidence.log_z - LOG_Z)
                    result["stderr"] = float(evidence.stderr)
                    result["weight_ess"] = float(evidence.ess)
                    result["pareto_k"] = float(evidence.pareto_k)
            for result in by_latents.values():
                log(f"  {json.dumps(result)}")
                results.append(result)
    return results


def acceptance_table(results):
    rows = [
        [
            r["target"],
            r.get("vae", "paper"),
            fmt(r["beta_vae"], 3),
            r["epochs"],
            f"{r['final_loss']:.3f}",
            f"{r['training_seconds']:.0f}",
            r.get("num_latents", 1),
            fmt(r["exact_accept"], 3),
            f"{r['log_z_error']:+.2f} +- {r['stderr']:.2f}",
            f"{r['weight_ess']:.0f}",
            fmt(r.get("isometric_accept", float("nan")), 3),
        ]
        for r in results
    ]
    header = [
        "target",
        "network",
        "beta_VAE",
        "epochs",
        "final loss",
        "training s",
        "latents K",
        "exact acceptance",
        "exact: log Z error +- stderr",
        "exact: importance ESS of 8000",
        "isometric acceptance (approximate kernel)",
    ]
    return [markdown_table(header, rows)]


def first_rung_experiment(configs, seeds, fit_kwargs, vague_prior=False):
    """The first rung alone (``initial_draws`` with the defaults and ``fit_kwargs``, one model,
    with the key ``nx.VAESLMC(model, fit_seed=seed)`` gives it, so that seed ``s`` here is the
    first rung of the ``slmc`` method's run with ``--seed s``): per ``D:C`` and seed, the
    cluster shares of its NUTS draws,
    which are the shares of its chains' starts, since a NUTS chain stays in its cluster. With
    ``vague_prior``, the model is :func:`vague_prior_mixture_model`."""
    results = []
    for dimension, clusters in configs:
        target = Mixture(dimension, clusters)
        if vague_prior:
            target.model = vague_prior_mixture_model
            target.name += " (vague prior)"
        settings = nx.AnnealingSettings(**fit_kwargs).checked(1, dimension)
        for seed in seeds:
            log(f"{target.name}: first rung, seed {seed}")
            key = jax.random.PRNGKey(seed)
            flat_model = flatten_model(key, target.model, target.model_args)
            # fit_vae_proposal's second key is its first rung's.
            data_key = jax.random.split(key, 4)[1]
            start = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                draws, evaluations = initial_draws(data_key, flat_model, settings, 1, False)
            seconds = time.perf_counter() - start
            labels = target.labels(draws[0])
            shares = np.bincount(labels, minlength=clusters) / labels.size
            record = dict(
                experiment="first-rung",
                target=target.name,
                seed=seed,
                shares=[round(float(share), 3) for share in shares],
                seconds=round(seconds, 1),
                evaluations=evaluations,
                warnings=sorted({str(w.message)[:200] for w in caught}),
            )
            log(f"  {json.dumps(record)}")
            results.append(record)
    return results


def first_rung_table(results):
    """One row per first-rung run."""
    rows = [
        [
            r["target"],
            r["seed"],
            " ".join(f"{share:.3f}" for share in r["shares"]),
            "yes" if min(r["shares"]) > 0 else "**no**",
            r["seconds"],
            f"{r['evaluations']:.3g}",
            "; ".join(r["warnings"]) or "-",
        ]
        for r in results
    ]
    header = [
        "target",
        "seed",
        "cluster shares of the NUTS draws",
        "every cluster",
        "seconds",
        "density evals",
        "warnings",
    ]
    return [markdown_table(header, rows)]


def annealing_table(results):
    """One row per model of each annealing run (schedule and collapse experiments)."""
    rows = []
    for r in results:
        run = r["schedule"] if r["experiment"] == "schedule" else f"exchange={r['exchange']}"
        sampling = r["sampling"]
        for j, path in enumerate(r["models"]):
            chosen = j == r["chosen_model"]
            rows.append(
                [
                    r["target"],
                    run,
                    j,
                    " ".join(f"{beta:.2f}" for beta in path["betas"]),
                    " ".join(fmt(rate, 2) for rate in path["accept_rates"][1:]),
                    sum(path["epochs"]),
                    f"{r['final_log_z_error'][j]:+.3f}",
                    "yes" if chosen else "",
                    " ".join(f"{w:.3f}" for w in sampling["weights"]) if chosen else "",
                    fmt(sampling["accept_rate"], 2) if chosen else "",
                    f"{sampling['log_z_error']:+.3f} +- {sampling['stderr']:.3f}" if chosen else "",
                    f"{r['training_seconds']:.0f}" if chosen else "",
                ]
            )
    header = [
        "target",
        "run",
        "model",
        "beta path",
        "acceptance per rung",
        "epochs",
        "its proposals' log Z error at beta = 1",
        "chosen",
        "sampled cluster weights",
        "sampling acceptance",
        "sampled log Z error +- stderr",
        "training s",
    ]
    return [markdown_table(header, rows)]


def training_table(results):
    rows = [
        [
            r["target"],
            json.dumps(r["fit_kwargs"]) if r["fit_kwargs"] else "defaults",
            f"{r['training_seconds']:.0f}",
            " ".join(str(e) for e in r["epochs"]),
            r["adam_steps"],
            " ".join(f"{b:.2f}" for b in r["betas"]),
            fmt(r["accept_rate"], 2),
            fmt(r["weight_error"], 2),
            "yes" if r["every_chain_every_mode"] else "**no**",
            f"{r['log_z_error']:+.3f}",
            fmt(r["stderr"], 2),
        ]
        for r in results
    ]
    header = [
        "target",
        "settings",
        "training s",
        "epochs per training",
        "Adam steps",
        "beta path",
        "acceptance",
        "mode-weight error",
        "every chain every mode",
        "log Z error",
        "stderr",
    ]
    return [markdown_table(header, rows)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="only D = 10, C = 3")
    parser.add_argument(
        "--configs",
        nargs="+",
        default=["10:2", "10:5", "20:3", "50:3", "100:3"],
        help="D:C pairs",
    )
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument(
        "--experiment",
        choices=("mixtures", "training", "acceptance", "schedule", "collapse", "first-rung"),
        default="mixtures",
    )
    parser.add_argument(
        "--beta-vae", nargs="+", type=float, default=[1 / 120], help="acceptance experiment"
    )
    parser.add_argument(
        "--num-latents",
        nargs="+",
        type=int,
        default=[1],
        help="acceptance experiment: latents per state of the exact kernel",
    )
    parser.add_argument(
        "--vae",
        nargs="+",
        choices=tuple(VAE_VARIANTS),
        default=["paper"],
        help="acceptance experiment: the network's decoder noise and standardisation",
    )
    parser.add_argument("--epochs", nargs="+", type=int, default=[150, 600], help="acceptance")
    parser.add_argument("--fit-kwargs", default="{}", help="JSON settings of fit_vae_proposal")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="first-rung seeds")
    parser.add_argument(
        "--vague-prior",
        action="store_true",
        help="first rung: the mixture as a likelihood under a vague N(0, 5^2) prior",
    )
    parser.add_argument("--output", default=None, help="also write the report here")
    parser.add_argument("--json", default=None, help="append one JSON line per run here")
    parser.add_argument(
        "--save-proposals", default=None, help="write each slmc run's trained proposal here"
    )
    parser.add_argument("--report-from", default=None, help="only the tables of a --json file")
    args = parser.parse_args(argv)
    fit_kwargs = json.loads(args.fit_kwargs)
    if args.report_from:
        runs = read_runs(args.report_from)
        mixtures = [r for r in runs if "method" in r]
        accepting = [r for r in runs if r.get("experiment") == "acceptance"]
        annealing = [r for r in runs if r.get("experiment") in ("schedule", "collapse")]
        first_rungs = [r for r in runs if r.get("experiment") == "first-rung"]
        training = [
            r
            for r in runs
            if "method" not in r
            and r.get("experiment") not in ("acceptance", "schedule", "collapse", "first-rung")
        ]
        lines = mixture_tables(mixtures) if mixtures else []
        lines += training_table(training) if training else []
        lines += acceptance_table(accepting) if accepting else []
        lines += annealing_table(annealing) if annealing else []
        lines += first_rung_table(first_rungs) if first_rungs else []
        publish_report("\n".join(lines), args.output)
        return
    if args.experiment in ("acceptance", "training", "schedule", "collapse", "first-rung"):
        if args.experiment == "first-rung":
            configs = [parse_config(c) for c in args.configs]
            results = first_rung_experiment(
                configs, args.seeds or [args.seed], fit_kwargs, args.vague_prior
            )
            lines = first_rung_table(results)
        elif args.experiment in ("schedule", "collapse"):
            experiment = (
                schedule_experiment if args.experiment == "schedule" else collapse_experiment
            )
            results = experiment(args.seed)
            lines = annealing_table(results)
        elif args.experiment == "acceptance":
            configs = [parse_config(c) for c in args.configs]
            results = acceptance_experiment(
                configs,
                args.beta_vae,
                args.seed,
                epoch_counts=args.epochs,
                latent_counts=args.num_latents,
                variants=args.vae,
            )
            lines = acceptance_table(results)
        else:
            results = training_experiment(fit_kwargs, args.seed)
            lines = training_table(results)
        for result in results:
            if args.json:
                save_run(args.json, result)
    else:
        configs = [(10, 3)] if args.quick else [parse_config(c) for c in args.configs]
        results, failures = [], []
        for dimension, clusters in configs:
            target = Mixture(dimension, clusters)
            for method in args.methods:
                log(f"{target.name}: {method}")
                if method == "slmc":
                    try:
                        result = run_slmc(target, args.seed, fit_kwargs, args.save_proposals)
                    except RuntimeError as error:
                        # The annealing's own error (no progress): a result, not a crash.
                        failures.append(f"- {target.name} slmc failed: {error}")
                        log(failures[-1])
                        continue
                elif method in ("nuts", "nuts-spread"):
                    result = run_nuts(target, args.seed, spread=method == "nuts-spread")
                else:
                    result = flowmc_summary(target, args.seed)
                    if result is None:
                        log("flowMC is not installed (pip install -e '.[bench]'): skipped")
                        continue
                result.update(method=method, dimension=dimension, clusters=clusters)
                log(f"  {json.dumps(result)[:400]}")
                results.append(result)
                if args.json:
                    save_run(args.json, result)
        lines = mixture_tables(results) + [""] + failures
    lines += [""] + environment_lines(
        "slmc_benchmark.py",
        sys.argv[1:] if argv is None else argv,
        elapsed_seconds(),
        settings=(
            f"{NUM_CHAINS} chains x (200 + 2000) draws per kernel"
            if args.experiment == "acceptance"
            else f"{NUM_CHAINS} chains x ({NUM_WARMUP} + {NUM_SAMPLES}) draws; flowMC {FLOWMC}"
        ),
    )
    publish_report("\n".join(lines), args.output)


if __name__ == "__main__":
    main()
