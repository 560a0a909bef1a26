"""Replica exchange over ACS moves on cold discrete models, against plain ACS and NumPyro's
``DiscreteGibbs``.

Targets, both through ``nx.rbm_model`` (Bernoulli sites ``v`` and ``h``, the energy in
``numpyro.factor`` terms) and small enough to enumerate exactly (every joint state):

* the periodic 4 x 4 Ising lattice at coupling 0.6 (``nx.ising_lattice(4, 0.6)``), where
  nearly all mass sits in the two mirror modes (all spins up, all down);
* a random 10 x 10 RBM with +-1 units at inverse temperature 3 (``nx.random_rbm`` with this
  script's seed), whose mirror modes are told apart by the sign of ``q = u1.v + w1.h`` (the top
  singular vectors of ``W``).

Samplers, each with its defaults, 4 chains x (1000 warm-up + 5000 kept draws):
``nx.ReplicaExchange(model, inner_kernel=nx.ACS)`` (16 replicas: the defaults row),
``nx.ACS(model)`` and NumPyro's ``DiscreteGibbs(model)`` (a Gibbs sweep per step).

Columns: the largest error of a site marginal ``P(z_i = 1)``; the error of the mass of the
positive mirror mode ``P(q > 0)``; ArviZ bulk ESS of ``q`` (it changes sign only between the
mirror modes: this ESS counts mode switches) and of the log density ``U``, per 1000 energy
evaluations of all chains (tuning and warm-up included) and per second; ``log Z`` of the
replica-exchange run by stepping stone against the enumerated value.

Energy evaluations: one evaluation of the model's log density (with its gradient where the
sampler differentiates). A replica-exchange rung step evaluates the prior part and the rest of
the model apart (two each), so a scan costs ``2 N`` (``N - 1`` moving rungs and the reference
draw), and its tuner ``2 x num_tuning_chains x (steps + 1)`` per tuned rung (every rung but the
reference one); ACS one per step plus ``num_tuning_chains x (steps + 1)`` for its tuner;
``DiscreteGibbs`` one per coordinate per sweep. Seconds are the wall time of a second identical
``mcmc.run`` (JAX compiles the first).

A mixed target, discrete and continuous latent sites (``--sections mixed``): the spike-and-slab
regression of ``acs_mixed_benchmark.py`` (8 indicators beside 8 coefficients, exact inclusion
probabilities and ``log Z`` by enumerating the 256 indicator patterns with the coefficients
integrated out), with that script's settings, rows and timing (2 chains run sequentially x
(1000 + 5000), each sampler in a new process: first call with compilation, second without):
``nx.ReplicaExchange(model, inner_kernel=nx.ACS)`` (defaults: 16 replicas, NUTS on the
continuous sites), ``nx.ACS(model, inner_kernel=NUTS)`` and NumPyro's
``DiscreteHMCGibbs(NUTS(model))``.

Usage::

    python benchmarks/exchange_discrete_benchmark.py --output report.md
    python benchmarks/exchange_discrete_benchmark.py --sections mixed --output report.md
    python benchmarks/exchange_discrete_benchmark.py --quick   # 200 + 1000 draws
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from typing import Any, NamedTuple

import numpyro

numpyro.enable_x64()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import acs_mixed_benchmark  # noqa: E402
import arviz  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from acs_mixed_benchmark import (  # noqa: E402
    INCLUSION,
    NOISE,
    SLAB,
    SPIKE,
    exact_inclusion,
    kernels,
    spike_and_slab_data,
    spike_and_slab_model,
    spike_and_slab_row,
    timed_runs,
)
from common import (  # noqa: E402
    elapsed_seconds,
    environment_lines,
    fmt,
    in_fresh_process,
    log,
    markdown_table,
    publish_report,
)
from numpyro.infer import MCMC, DiscreteGibbs  # noqa: E402
from scipy.special import logsumexp  # noqa: E402

import numpyro_extras as nx  # noqa: E402

NUM_CHAINS = 4
RBM_SEED = 11
RBM_UNITS = 10


class Target(NamedTuple):
    name: str
    machine: Any
    order_visible: np.ndarray  # q = order_visible . v + order_hidden . h (spins)
    order_hidden: np.ndarray
    marginals: np.ndarray  # exact P(z_i = 1), visible then hidden
    positive_mass: float  # exact P(q > 0)
    log_z: float


def enumerate_target(name, machine, order_visible, order_hidden):
    """Exact site marginals, ``P(q > 0)`` and ``log Z`` over every joint state."""
    n = machine.num_units
    states = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1).astype(float)
    spins = 2.0 * states - 1.0 if machine.units == "spin" else states
    v, h = spins[:, : machine.num_visible], spins[:, machine.num_visible :]
    log_p = np.asarray(machine.log_density(jnp.asarray(v), jnp.asarray(h)))
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    q = v @ order_visible + h @ order_hidden
    return Target(
        name,
        machine,
        order_visible,
        order_hidden,
        p @ states,
        float(p[q > 0].sum()),
        float(machine.log_partition()),
    )


def make_targets():
    ising = nx.ising_lattice(4, 0.6)
    uniform = np.full(8, 1.0 / 16)
    rbm = nx.random_rbm(jax.random.PRNGKey(RBM_SEED), RBM_UNITS, RBM_UNITS, 3.0)
    left, _, right = np.linalg.svd(np.asarray(rbm.weights))
    return [
        enumerate_target("Ising 4x4 periodic, J = 0.6", ising, uniform, uniform),
        enumerate_target(
            f"RBM {RBM_UNITS}x{RBM_UNITS} +-1 units, inverse temperature 3 (seed {RBM_SEED})",
            rbm,
            left[:, 0],
            right[0],
        ),
    ]


def samplers():
    return {
        "nx.ReplicaExchange(inner_kernel=nx.ACS) (defaults, 16 replicas)": lambda: (
            nx.ReplicaExchange(nx.rbm_model, inner_kernel=nx.ACS)
        ),
        "nx.ACS": lambda: nx.ACS(nx.rbm_model),
        "NumPyro DiscreteGibbs": lambda: DiscreteGibbs(nx.rbm_model),
    }


def evaluations_per_chain(kernel, state, num_units, num_steps):
    """Energy evaluations per chain, tuning and warm-up included (see the module docstring)."""
    if isinstance(kernel, nx.ReplicaExchange):
        tuning = state.inner_state.tuning
        copies = kernel.acs_kernel.num_tuning_chains
        # rung 0 (renewed by prior draws) is not tuned
        tuned_steps = np.asarray(tuning.num_steps)[:, 1:]
        tuner = 2 * copies * float(np.sum(np.mean(tuned_steps + 1, 0)))
        replicas = kernel.num_replicas
        return tuner + 2 * replicas + num_steps * 2 * replicas
    if isinstance(kernel, nx.ACS):
        copies = kernel.num_tuning_chains
        return copies * (float(np.mean(state.tuning.num_steps)) + 1) + num_steps
    return num_steps * num_units


def one_run(target, label, make_kernel, num_warmup, num_samples, seed):
    kernel = make_kernel()
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=NUM_CHAINS,
        chain_method="vectorized" if isinstance(kernel, nx.ACS | nx.ReplicaExchange) else jax.vmap,
        progress_bar=False,
    )
    key = jax.random.PRNGKey(seed)
    mcmc.run(key, target.machine)
    jax.block_until_ready(mcmc.get_samples())
    start = time.perf_counter()
    mcmc.run(key, target.machine)
    samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
    seconds = time.perf_counter() - start

    z = np.concatenate([np.asarray(samples["v"]), np.asarray(samples["h"])], -1).astype(float)
    spins = 2.0 * z - 1.0
    machine = target.machine
    v, h = spins[..., : machine.num_visible], spins[..., machine.num_visible :]
    q = v @ target.order_visible + h @ target.order_hidden
    log_density = np.asarray(machine.log_density(jnp.asarray(v), jnp.asarray(h)))
    evaluations = evaluations_per_chain(
        kernel, mcmc.last_state, machine.num_units, num_warmup + num_samples
    )
    ess_q = float(arviz.ess(q, method="bulk"))
    ess_u = float(arviz.ess(log_density, method="bulk"))
    row = {
        "sampler": label,
        "marginal_error": float(np.max(np.abs(z.mean((0, 1)) - target.marginals))),
        "mode_error": float(np.mean(q > 0) - target.positive_mass),
        "per_chain_positive": np.mean(q > 0, 1).round(2).tolist(),
        "ess_q": ess_q,
        "ess_u": ess_u,
        "evaluations": evaluations,
        "seconds": seconds,
        "log_z": None,
    }
    if isinstance(kernel, nx.ReplicaExchange):
        evidence = nx.log_marginal_likelihood(mcmc, warn=False)
        diagnostics = nx.exchange_diagnostics(mcmc)
        row["log_z"] = (evidence.log_z, evidence.stderr)
        row["note"] = (
            f"barrier {np.mean(diagnostics.barrier):.1f}, round trips "
            f"{int(np.min(diagnostics.round_trips))}-{int(np.max(diagnostics.round_trips))} "
            "per chain"
        )
    log(
        f"{target.name}: {label}: marginal error {row['marginal_error']:.3f}, mode error "
        f"{row['mode_error']:+.3f}, ESS q {ess_q:.0f} U {ess_u:.0f}, {seconds:.1f} s"
    )
    return row


def table(target, rows):
    header = [
        "Sampler",
        "max marginal error",
        "P(q > 0) error",
        "P(q > 0) per chain",
        "ESS q",
        "ESS U",
        "ESS q / 1000 evals",
        "ESS q / s",
        "evals per chain",
        "s",
        f"log Z (exact {target.log_z:.3f})",
    ]
    body = []
    for row in rows:
        chains_evaluations = NUM_CHAINS * row["evaluations"]
        log_z = row["log_z"]
        body.append(
            [
                row["sampler"],
                f"{row['marginal_error']:.3f}",
                f"{row['mode_error']:+.3f}",
                " ".join(f"{value:.2f}" for value in row["per_chain_positive"]),
                fmt(row["ess_q"], 4),
                fmt(row["ess_u"], 4),
                fmt(1000 * row["ess_q"] / chains_evaluations),
                fmt(row["ess_q"] / row["seconds"]),
                fmt(row["evaluations"]),
                f"{row['seconds']:.1f}",
                "-"
                if log_z is None
                else f"{log_z[0]:.3f} +- {log_z[1]:.3f} ({row.get('note', '')})",
            ]
        )
    return markdown_table(header, body)


def spike_and_slab_log_z(features, labels):
    """Exact ``log p(y)``: every indicator pattern ``gamma``, the coefficients integrated out,
    ``y | gamma ~ N(0, noise^2 I + X D_gamma X^T)``."""
    num_observations, num_predictors = features.shape
    patterns = np.array(list(itertools.product([0, 1], repeat=num_predictors)))
    variances = np.where(patterns == 1, SLAB, SPIKE) ** 2
    covariances = NOISE**2 * np.eye(num_observations) + np.einsum(
        "ij,pj,kj->pik", features, variances, features
    )
    log_dets = np.linalg.slogdet(covariances)[1]
    solved = np.linalg.solve(covariances, labels[:, None])[..., 0]
    included = patterns.sum(1)
    log_terms = (
        included * np.log(INCLUSION)
        + (num_predictors - included) * np.log(1 - INCLUSION)
        - 0.5 * np.einsum("i,pi->p", labels, solved)
        - 0.5 * log_dets
        - 0.5 * num_observations * np.log(2 * np.pi)
    )
    return float(logsumexp(log_terms))


def mixed_samplers():
    plain = kernels()
    return {
        "nx.ReplicaExchange(model, inner_kernel=nx.ACS) (defaults, 16 replicas)": lambda model: (
            nx.ReplicaExchange(model, inner_kernel=nx.ACS)
        ),
        "nx.ACS(model, inner_kernel=NUTS)": plain["nx.ACS(model, inner_kernel=NUTS)"],
        "DiscreteHMCGibbs(NUTS(model))": plain["DiscreteHMCGibbs(NUTS(model))"],
    }


def measure_mixed(label, num_samples, seed):
    """One sampler on the spike-and-slab regression, in a process of its own: the table row,
    with the replica-exchange ``log Z`` and its diagnostics."""
    features, labels = spike_and_slab_data()
    kernel = mixed_samplers()[label](spike_and_slab_model)
    mcmc, seconds = timed_runs(kernel, (features, labels), num_samples, seed)
    row = spike_and_slab_row(label, mcmc, seconds, exact_inclusion(features, labels))
    if isinstance(kernel, nx.ReplicaExchange):
        evidence = nx.log_marginal_likelihood(mcmc, warn=False)
        diagnostics = nx.exchange_diagnostics(mcmc)
        row.append(
            f"{evidence.log_z:.3f} +- {evidence.stderr:.3f} (barrier "
            f"{np.mean(diagnostics.barrier):.1f}, round trips "
            f"{int(np.min(diagnostics.round_trips))}-{int(np.max(diagnostics.round_trips))} per "
            "chain)"
        )
    else:
        row.append("-")
    return row


def mixed_section(num_samples, seed):
    features, labels = spike_and_slab_data()
    log_z = spike_and_slab_log_z(features, labels)
    log(f"spike-and-slab: exact inclusion {np.round(exact_inclusion(features, labels), 3)}")
    log(f"spike-and-slab: exact log Z {log_z:.4f}")
    rows = []
    for label in mixed_samplers():
        rows.append(in_fresh_process(measure_mixed, label, num_samples, seed))
        log(f"spike-and-slab {label}: {rows[-1][1:]}")
    columns = (
        "kernel | first call s | second call s | ESS min | ESS median | median ESS / s (second "
        "call) | median ESS / s (first call) | max abs inclusion error | max error / stderr"
    )
    header = [*columns.split(" | "), f"log Z (exact {log_z:.3f})"]
    return [
        "### Spike-and-slab regression (mixed: 8 indicators, 8 coefficients)",
        "",
        markdown_table(header, rows),
        "",
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 + 1000 draws per chain")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--sections",
        nargs="+",
        choices=("discrete", "mixed"),
        default=("discrete", "mixed"),
        help="the cold discrete targets, the mixed one, or both",
    )
    parser.add_argument("--output", help="also write the report to this file")
    arguments = parser.parse_args(argv)
    num_warmup, num_samples = (200, 1000) if arguments.quick else (1000, 5000)
    sections, settings = [], []
    if "discrete" in arguments.sections:
        settings.append(f"{NUM_CHAINS} chains x ({num_warmup} + {num_samples})")
        for target in make_targets():
            log(
                f"{target.name}: exact P(q > 0) {target.positive_mass:.4f}, log Z "
                f"{target.log_z:.4f}"
            )
            rows = [
                one_run(target, label, make, num_warmup, num_samples, arguments.seed)
                for label, make in samplers().items()
            ]
            sections += [f"### {target.name}", "", table(target, rows), ""]
    if "mixed" in arguments.sections:
        settings.append(
            f"mixed: {acs_mixed_benchmark.NUM_CHAINS} chains (sequential) x "
            f"({acs_mixed_benchmark.NUM_WARMUP} + {num_samples})"
        )
        sections += mixed_section(num_samples, arguments.seed)
    report = "\n".join(
        [
            "## Cold discrete models",
            "",
            *environment_lines(
                "exchange_discrete_benchmark.py",
                argv if argv is not None else sys.argv[1:],
                elapsed_seconds(),
                f"{'; '.join(settings)}, seed {arguments.seed}",
            ),
            "",
            *sections,
        ]
    )
    publish_report(report, arguments.output)


if __name__ == "__main__":
    main()
