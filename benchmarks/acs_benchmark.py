"""Benchmark the Automatic Cyclical Sampler (ACS) against DMALA and NumPyro's discrete kernels.

Side by side in one run (the ACS paper: Pynadath et al., 2024):

* ``nx.ACS`` with its automatic tuner at its defaults (8 tuning copies per chain, budget 500,
  ``rho* = 0.5``, ``s = 20``; binary variables: ``beta_max = 0.95`` and the paper's
  acceptance rule for ``alpha_max``; ordinal ones: ``beta_max = 0.5`` and the jump rule), and
  with the other ``alpha_max`` rule for comparison;
* ``nx.DMALA`` at the DMALA paper's (Zhang et al., 2022) RBM step size ``alpha = 0.2`` (Boltzmann
  targets) or at the step size tuned to acceptance 0.574 (synthetic targets, as in the ACS
  paper, App. D.1);
* NumPyro's ``DiscreteGibbs`` (one Gibbs sweep per step), ``DiscreteHMCGibbs(NUTS)`` with Gibbs
  and with random-walk proposals, and ``MixedHMC(HMC)``.

Part 1, Boltzmann targets (a random 20 x 20 +-1 RBM at inverse temperature 1 and 3, a periodic
4 x 4 Ising model at coupling 0.3 and 0.6), all through ``nx.rbm_model``: ArviZ bulk ESS of the
log density ``U``, of an order parameter ``q`` (the Ising magnetisation; for the RBM the
projection of the spins on the top singular vectors of ``W``, whose sign flips between the two
mirror modes) and of every unit's mean, per energy evaluation and per second, and a check of
the means of ``U``, ``q``, ``q^2`` and every unit against exact enumeration (so a fast but wrong
sampler shows up).

Part 2, the ACS paper's synthetic 2-D ordinal target (Sec. 4.1, App. D.1) at a size for a CPU
(our choice: 25 modes, spacing 25, 150 values per coordinate) and at the paper's size (spacing
75, 450 values), even and with the uneven modes of its Table 3, and a variant with 5 modes on the
diagonal (one per row and column, which a one-coordinate Gibbs update cannot walk along), every
chain started in the top-left mode: modes visited (by any chain and per chain), KL(empirical ||
exact) and the mode-weight error against the exact distribution over all states.

Energy evaluations (one evaluation of the model's log density, with or without its gradient),
warm-up and tuning included:

* ACS / DMALA: one value-and-grad per step; ACS's tuner adds ``num_tuning_chains x
  (tuning.num_steps + 1)`` per chain, the evaluations it made (its searches stop at the target;
  vectorised chains also execute the skipped steps as masked lanes, up to
  ``nx.discrete.tuning_cost``);
* ``DiscreteGibbs``: one sweep per step, ``K - 1`` evaluations per coordinate (Gibbs; the
  current value's is cached) or 1 (random walk);
* ``DiscreteHMCGibbs``: the sweep, plus the HMC block's refresh after the discrete sites moved
  (one value-and-grad) and the NUTS leapfrog steps (``block_states.1.num_steps``);
* ``MixedHMC``: its leapfrog steps (``hmc_state.num_steps``) plus, per discrete update
  (``num_discrete_updates`` = number of coordinates), ``K - 1`` evaluations for the Gibbs
  proposal and one value-and-grad for the refraction refresh, which a Gibbs proposal always
  triggers.

Usage::

    python benchmarks/acs_benchmark.py --quick                       # smoke size, ~4 min
    python benchmarks/acs_benchmark.py --output report.md > run.log 2>&1   # docs/benchmarks.md
    python benchmarks/acs_benchmark.py --targets rbm_cold grid_even
    python benchmarks/acs_benchmark.py --targets rbm_mild rbm_cold --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from typing import Any, NamedTuple

import numpyro

# Exact enumeration and the MH ratios of the ordinal target are compared in double precision.
numpyro.enable_x64()
# Progress, compile-time accounting and the report's environment lines (benchmarks/common.py).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arviz  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from common import (  # noqa: E402
    compile_clock,
    compile_table,
    elapsed_seconds,
    environment_lines,
    log,
    verdict,
)
from numpyro.infer import HMC, MCMC, NUTS, DiscreteGibbs, DiscreteHMCGibbs, MixedHMC  # noqa: E402

import numpyro_extras as nx  # noqa: E402
from numpyro_extras import discrete, targets  # noqa: E402

BOLTZMANN_TARGETS = ("rbm_mild", "rbm_cold", "ising_mild", "ising_cold")
GRID_TARGETS = (
    "grid_even",
    "grid_uneven",
    "grid_even_paper",
    "grid_uneven_paper",
    "diagonal_paper",
)
TARGET_NAMES = BOLTZMANN_TARGETS + GRID_TARGETS
QUICK_TARGETS = ("rbm_cold", "grid_even_paper")
# The DMALA paper's RBM step size (as used for DMALA in the ACS paper, App. D.2) and the
# acceptance DMALA is tuned to on the synthetic target (ACS paper, App. D.1).
DMALA_STEP_SIZE = 0.2
DMALA_TARGET_ACCEPT = 0.574
# A draw within this fraction of the spacing from a mode centre counts as a visit of the mode.
VISIT_RADIUS = 0.2
# A sampler "stays in one mode" when its chains visit fewer modes than this on average.
STAYS_PER_CHAIN = 1.5
# |mean - exact| / (sd / sqrt(ESS)) above this flags a sampler whose draws disagree with the
# exact moments.
MAX_Z = 5.0


@dataclasses.dataclass(frozen=True)
class Settings:
    """Run lengths of one benchmark size."""

    num_chains: int
    num_warmup: int
    num_samples: int
    grid_chains: int
    grid_steps: int
    # NumPyro's Gibbs sweeps cost 2 (N - 1) evaluations each (898 at N = 450): fewer chains.
    grid_gibbs_chains: int
    rbm_visible: int = 20
    rbm_hidden: int = 20
    ising_size: int = 4
    num_tuning_chains: int = 8  # nx.ACS's default
    dmala_tuning_rounds: int = 12
    dmala_tuning_steps: int = 100
    timing_steps: int = 2000


FULL = Settings(
    num_chains=4,
    num_warmup=1000,
    num_samples=20_000,
    grid_chains=128,
    grid_steps=2000,
    grid_gibbs_chains=16,
)
QUICK = Settings(
    num_chains=4,
    num_warmup=200,
    num_samples=2000,
    grid_chains=32,
    grid_steps=500,
    grid_gibbs_chains=8,
    timing_steps=500,
)


# ------------------------------------------------------------------------------------------------
# Runs
# ------------------------------------------------------------------------------------------------


class Run(NamedTuple):
    """One sampler on one target.

    :param samples: dict site -> array ``(chains, draws, ...)``.
    :param evaluations: energy evaluations per chain, warm-up and tuning included.
    :param overhead: of which tuning and warm-up.
    :param seconds: wall time of the run (all chains, tuning and warm-up included), compile
        excluded: see :func:`seconds_per_step`.
    :param accept: mean acceptance probability of the kept draws (NaN if not reported).
    :param note: how the evaluations were counted.
    """

    name: str
    samples: dict
    evaluations: float
    overhead: float
    seconds: float
    accept: float
    note: str = ""


def run_mcmc(label, kernel, key, model_args, num_chains, num_warmup, num_samples, **run_kwargs):
    """``MCMC.run`` of ``num_chains`` chains, its compilation time attributed to ``label``.

    Kernels that take a batch of keys (``nx.ACS``, ``nx.DMALA``) run
    ``chain_method="vectorized"``; NumPyro's Gibbs-type kernels only take one key, so their
    chains run under ``jax.vmap`` (a callable ``chain_method``), which vectorises them the same
    way.
    """
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method="vectorized" if isinstance(kernel, nx.ACS) else jax.vmap,
        progress_bar=False,
    )
    with compile_clock(label):
        mcmc.run(key, *model_args, **run_kwargs)
        jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
    return mcmc


def seconds_per_step(label, kernel, state, model_args, num_steps):
    """Wall time of one transition of all chains, compile excluded: ``num_steps`` transitions
    from ``state`` in one compiled loop, timed on its second call (the MCMC run itself cannot
    be timed without its compilation, which dominates short runs)."""
    step = lambda batch: kernel.sample(batch, model_args, {})  # noqa: E731
    if not isinstance(kernel, nx.ACS):
        step = jax.vmap(step)
    loop = jax.jit(lambda batch: jax.lax.fori_loop(0, num_steps, lambda _, b: step(b), batch))
    with compile_clock(label):
        jax.block_until_ready(loop(state))
    start = time.perf_counter()
    jax.block_until_ready(loop(state))
    return (time.perf_counter() - start) / num_steps


def acs_tuning_evaluations(num_tuning_chains, settings=None):
    """Evaluations per chain of the ACS kernel's tuner: copies x (tuning steps + 1 at init)."""
    settings = settings or discrete.TuningSettings()
    return num_tuning_chains * (discrete.tuning_cost(settings) + 1)


class Sampler(NamedTuple):
    """A kernel of the Boltzmann comparison and how its energy evaluations are counted.

    :param cost: ``extra_fields dict -> (evaluations per step, how)``.
    :param init_evaluations: evaluations per chain before the first step (tuning included).
    """

    name: str
    make_kernel: Any
    extra_fields: tuple
    cost: Any
    init_evaluations: int = 1


def field_mean(extra, name):
    return float(np.mean(np.asarray(extra[name])))


def boltzmann_samplers(num_units, settings):
    """ACS, DMALA and NumPyro's discrete kernels on ``nx.rbm_model`` (all ``K = 2``)."""
    model, d = nx.rbm_model, num_units

    def one_per_step(extra):
        return 1.0, "1 value-and-grad per step"

    def hmc_gibbs_cost(extra):
        leapfrog = field_mean(extra, "block_states.1.num_steps")
        return d + 1 + leapfrog, f"{d} (sweep) + 1 (HMC refresh) + {leapfrog:.2g} (NUTS) per step"

    def mixed_hmc_cost(extra):
        leapfrog = field_mean(extra, "hmc_state.num_steps")
        return leapfrog + 2 * d, f"{leapfrog:.3g} (leapfrog) + {d} x (1 Gibbs + 1 refresh) per step"

    return [
        Sampler(
            "ACS (tuned)",
            lambda: nx.ACS(model, num_tuning_chains=settings.num_tuning_chains),
            ("accept_prob",),
            one_per_step,
            acs_tuning_evaluations(settings.num_tuning_chains),
        ),
        Sampler(
            "ACS (tuned, jump rule)",
            lambda: nx.ACS(
                model,
                num_tuning_chains=settings.num_tuning_chains,
                tuning_settings={"alpha_max_rule": "jump"},
            ),
            ("accept_prob",),
            one_per_step,
            acs_tuning_evaluations(settings.num_tuning_chains),
        ),
        Sampler(
            f"DMALA (alpha={DMALA_STEP_SIZE})",
            lambda: nx.DMALA(model, step_size=DMALA_STEP_SIZE),
            ("accept_prob",),
            one_per_step,
        ),
        Sampler(
            "NumPyro DiscreteGibbs",
            lambda: DiscreteGibbs(model),
            (),
            lambda extra: (float(d), f"{d} per step (a sweep, 1 per binary coordinate)"),
        ),
        Sampler(
            "NumPyro DiscreteHMCGibbs(NUTS)",
            lambda: DiscreteHMCGibbs(NUTS(model)),
            ("block_states.1.num_steps",),
            hmc_gibbs_cost,
            3,
        ),
        Sampler(
            "NumPyro DiscreteHMCGibbs(NUTS, random_walk=True)",
            lambda: DiscreteHMCGibbs(NUTS(model), random_walk=True),
            ("block_states.1.num_steps",),
            hmc_gibbs_cost,
            3,
        ),
        Sampler(
            "NumPyro MixedHMC(HMC)",
            lambda: MixedHMC(HMC(model)),
            ("hmc_state.num_steps", "accept_prob"),
            mixed_hmc_cost,
            2,
        ),
    ]


def boltzmann_runs(target, settings, seed):
    """Every sampler of :func:`boltzmann_samplers` on one Boltzmann target."""
    model_args = (target.machine,)
    chains, warmup, draws = settings.num_chains, settings.num_warmup, settings.num_samples
    runs = []
    for stream, sampler in enumerate(boltzmann_samplers(target.machine.num_units, settings)):
        log(f"{target.title}: {sampler.name}")
        kernel = sampler.make_kernel()
        key = jax.random.fold_in(jax.random.PRNGKey(seed), stream)
        label = sampler.name.split(" (")[0]
        mcmc = run_mcmc(
            label, kernel, key, model_args, chains, warmup, draws, extra_fields=sampler.extra_fields
        )
        extra = mcmc.get_extra_fields()
        per_step, how = sampler.cost(extra)
        seconds = seconds_per_step(
            label, kernel, mcmc.last_state, model_args, settings.timing_steps
        ) * (warmup + draws)
        note = how
        init_evaluations = sampler.init_evaluations
        if isinstance(kernel, nx.ACS) and not isinstance(kernel, nx.DMALA):
            # The tuner runs in init; a second init reuses the compiled tuner, so it is timed.
            keys = jax.random.split(jax.random.fold_in(key, 1), chains)
            start = time.perf_counter()
            jax.block_until_ready(kernel.init(keys, warmup, None, model_args, {}))
            seconds += time.perf_counter() - start
            tuned = mcmc.last_state.tuning
            copies = settings.num_tuning_chains
            init_evaluations = copies * (float(np.mean(tuned.num_steps)) + 1)
            note = (
                f"{how}; tuner {init_evaluations:.0f} per chain ({copies} copies x "
                f"{fmt_range(tuned.num_steps)} steps; at most {sampler.init_evaluations}); "
                f"tuned alpha {fmt_range(tuned.alpha_max)} -> {fmt_range(tuned.alpha_min)}"
            )
        accept = field_mean(extra, "accept_prob") if "accept_prob" in extra else float("nan")
        runs.append(
            Run(
                sampler.name,
                mcmc.get_samples(group_by_chain=True),
                init_evaluations + (warmup + draws) * per_step,
                init_evaluations + warmup * per_step,
                seconds,
                accept,
                note,
            )
        )
    return runs


def fmt_range(values):
    values = np.asarray(values, float)
    low, high = np.min(values), np.max(values)
    return f"{low:.3g}" if np.isclose(low, high) else f"{low:.3g}-{high:.3g}"


# ------------------------------------------------------------------------------------------------
# Boltzmann targets: statistics, exact moments, ESS
# ------------------------------------------------------------------------------------------------


class BoltzmannTarget(NamedTuple):
    """A Boltzmann machine sampled through ``nx.rbm_model`` and the order direction of ``q``."""

    name: str
    title: str
    machine: Any
    order_visible: np.ndarray
    order_hidden: np.ndarray
    order_label: str


def make_boltzmann_target(name, settings):
    if name.startswith("rbm"):
        beta = 1.0 if name == "rbm_mild" else 3.0
        machine = nx.random_rbm(
            jax.random.PRNGKey(0), settings.rbm_visible, settings.rbm_hidden, beta
        )
        left, _, right = np.linalg.svd(np.asarray(machine.weights))
        title = (
            f"RBM {settings.rbm_visible}x{settings.rbm_hidden} +-1 units, "
            f"inverse temperature {beta:g}"
        )
        return BoltzmannTarget(
            name, title, machine, left[:, 0], right[0], "q = u1.v + w1.h (top singular vectors)"
        )
    coupling = 0.3 if name == "ising_mild" else 0.6
    size = settings.ising_size
    machine = nx.ising_lattice(size, coupling)
    n = size * size
    title = f"Ising {size}x{size} periodic, J={coupling:g}"
    uniform_v = np.full(machine.num_visible, 1.0 / n)
    uniform_h = np.full(machine.num_hidden, 1.0 / n)
    return BoltzmannTarget(name, title, machine, uniform_v, uniform_h, "q = magnetisation")


def exact_moments(target, chunk_size=2**15):
    """Exact means of ``U``, ``q``, ``q^2`` and every unit (visible then hidden), by enumerating
    the visible layer and summing the hidden one analytically (``h_j | v`` independent, mean
    ``tanh`` of its field)."""
    machine = target.machine
    num_visible = machine.num_visible
    u = jnp.asarray(target.order_visible)
    w = jnp.asarray(target.order_hidden)

    @jax.jit
    def chunk_moments(indices):
        v = 2.0 * ((indices[:, None] >> jnp.arange(num_visible)) & 1) - 1.0
        log_weight = machine.visible_log_density(v)
        fields = machine.hidden_fields(v)
        t = jnp.tanh(fields)
        log_density = v @ machine.visible_bias / machine.temperature + jnp.sum(fields * t, -1)
        q = v @ u + t @ w
        q2 = q**2 + jnp.sum(w**2 * (1.0 - t**2), -1)
        values = jnp.concatenate([log_density[:, None], q[:, None], q2[:, None], v, t], -1)
        return log_weight, values

    shifts, sums = [], []
    chunk_size = min(chunk_size, 2**num_visible)
    for start in range(0, 2**num_visible, chunk_size):
        log_weight, values = chunk_moments(start + jnp.arange(chunk_size))
        shift = float(jnp.max(log_weight))
        weights = jnp.exp(log_weight - shift)
        shifts.append(shift)
        sums.append((float(jnp.sum(weights)), np.asarray(weights @ values)))
    scales = [math.exp(shift - max(shifts)) for shift in shifts]
    normaliser = sum(scale * mass for scale, (mass, _) in zip(scales, sums, strict=True))
    total = sum(scale * moment for scale, (_, moment) in zip(scales, sums, strict=True))
    total = total / normaliser
    return {"U": total[0], "q": total[1], "q2": total[2], "units": total[3:]}


def boltzmann_statistics(target, samples):
    """Scalar statistics ``(chains, draws)`` and unit spins ``(chains, draws, n)`` of draws."""
    v = 2.0 * np.asarray(samples["v"], float) - 1.0
    h = 2.0 * np.asarray(samples["h"], float) - 1.0
    machine = target.machine
    log_density = np.asarray(machine.log_density(jnp.asarray(v), jnp.asarray(h)))
    q = v @ target.order_visible + h @ target.order_hidden
    return {"U": log_density, "q": q, "q2": q**2}, np.concatenate([v, h], -1)


def ess(values):
    """ArviZ bulk ESS of ``(chains, draws)`` or, per last-axis entry, of ``(chains, draws, n)``."""
    values = np.asarray(values, float)
    if values.ndim == 2:
        return float(arviz.ess(values, method="bulk"))
    dataset = arviz.convert_to_dataset({"x": values})
    return np.asarray(arviz.ess(dataset, method="bulk")["x"], float)


class BoltzmannRow(NamedTuple):
    run: Run
    ess_u: float
    ess_q: float
    ess_units_min: float
    ess_units_median: float
    max_z: float
    worst: str
    max_unit_error: float
    rhat_q: float
    mean_q2: float
    ess_q2: float

    @property
    def ess_min(self):
        return min(self.ess_u, self.ess_q, self.ess_units_min)

    @property
    def ess_symmetric(self):
        """min(ESS U, ESS q^2): the statistics the mirror flip (every spin negated) leaves
        unchanged, which measure mixing within a mode even when no chain crosses between the
        mirror modes."""
        return min(self.ess_u, self.ess_q2)

    def per_thousand(self, effective, kept_only=False):
        """ESS per 1000 energy evaluations of all chains (tuning and warm-up included, or only
        the kept draws')."""
        evaluations = self.run.evaluations - (self.run.overhead if kept_only else 0.0)
        chains = next(iter(self.run.samples.values())).shape[0]
        return 1000.0 * effective / (chains * evaluations)


def z_score(values, exact, effective):
    """``|mean - exact| / (sd / sqrt(ESS))`` over all draws; 0 if the draws are constant and
    equal to ``exact``, inf if constant and different."""
    values = np.asarray(values, float)
    error = abs(float(np.mean(values)) - float(exact))
    sd = float(np.std(values))
    if sd == 0.0 or not np.isfinite(effective) or effective <= 0:
        return 0.0 if error < 1e-12 else float("inf")
    return error / (sd / math.sqrt(effective))


def mirror_symmetric(exact):
    """Whether the exact mean of q is negligible against its spread: the two mirror modes
    then hold (nearly) equal mass."""
    return abs(exact["q"]) < 0.05 * np.sqrt(exact["q2"])


def boltzmann_row(target, run, exact):
    scalars, units = boltzmann_statistics(target, run.samples)
    effective = {name: ess(values) for name, values in scalars.items()}
    unit_ess = ess(units)
    scores = {name: z_score(scalars[name], exact[name], effective[name]) for name in scalars}
    unit_means = units.reshape(-1, units.shape[-1]).mean(0)
    for i in range(units.shape[-1]):
        scores[f"unit {i}"] = z_score(units[..., i], exact["units"][i], unit_ess[i])
    worst = max(scores, key=scores.get)
    return BoltzmannRow(
        run,
        effective["U"],
        effective["q"],
        float(np.min(unit_ess)),
        float(np.median(unit_ess)),
        scores[worst],
        worst,
        float(np.max(np.abs(unit_means - exact["units"]))),
        float(arviz.rhat(scalars["q"])),
        float(np.mean(scalars["q2"])),
        effective["q2"],
    )


def benchmark_boltzmann(name, settings, seeds):
    """``[(target, exact, rows)]``, one per seed of the samplers' keys (the target is the same)."""
    target = make_boltzmann_target(name, settings)
    log(f"{target.title}: exact moments")
    exact = exact_moments(target)
    results = []
    for seed in seeds:
        runs = boltzmann_runs(target, settings, seed)
        rows = [boltzmann_row(target, run, exact) for run in runs]
        for row in rows:
            log(
                f"{target.title}, seed {seed}: {row.run.name}: ESS U {row.ess_u:.0f} q "
                f"{row.ess_q:.0f} units min {row.ess_units_min:.0f}, evals/chain "
                f"{row.run.evaluations:.3g}, {row.run.seconds:.1f} s, max z {row.max_z:.1f} "
                f"({row.worst})"
            )
        results.append((target, exact, rows))
    return results


# ------------------------------------------------------------------------------------------------
# Synthetic multimodal ordinal target (Pynadath et al., 2024, Sec. 4.1, App. D.1, Table 3)
# ------------------------------------------------------------------------------------------------

# The paper's fixed ACS schedule for its synthetic target (App. D.1: alpha_max = 1575 at spacing
# 75, alpha_min = 3, s = 20, beta = 0.5); alpha_max is scaled by (spacing / 75)^2, so that a jump
# of one spacing has the same proposal penalty.
PAPER_SPACING = 75
PAPER_ALPHA_MAX = 1575.0
GRID_ALPHA_MIN = 3.0
GRID_STEPS_PER_CYCLE = 20


class GridTarget(NamedTuple):
    name: str
    title: str
    grid: targets.MultimodalGrid
    spacing: int
    neighbour_distance: float  # between neighbouring mode centres
    probabilities: np.ndarray  # (N, N)
    cells: np.ndarray  # (N, N): index of the nearest mode
    mode_weights: np.ndarray  # (L,): exact mass of each mode's cell


def make_grid_target(name):
    """``grid_even`` / ``grid_uneven``: a size for a CPU (spacing 25, N = 150);
    ``..._paper``: the paper's size (spacing 75, N = 450, 202,500 states); ``diagonal_paper``:
    the paper's size with 5 modes on the diagonal (spacing 75 along each axis, neighbours 106
    apart), one mode per row and column, each as wide as the paper's."""
    uneven = name.startswith("grid_uneven")
    if name == "diagonal_paper":
        spacing, num_values = PAPER_SPACING, 450
        # sigma^2 L = 3.75 as in the paper's 25-mode target, so each mode is as wide.
        grid = targets.make_multimodal_grid(
            5, spacing, num_values, sigma2=0.15 * 25 / 5, layout="diagonal"
        )
        neighbour_distance = spacing * np.sqrt(2.0)
    else:
        spacing, num_values = (PAPER_SPACING, 450) if name.endswith("_paper") else (25, 150)
        grid = targets.make_multimodal_grid(spacing=spacing, num_values=num_values, uneven=uneven)
        neighbour_distance = float(spacing)
    values = np.arange(grid.num_values)
    states = np.stack(np.meshgrid(values, values, indexing="ij"), -1)
    cells, _ = targets.multimodal_grid_nearest_mode(grid, states)
    probabilities = targets.multimodal_grid_probabilities(grid)
    mode_weights = np.bincount(cells.ravel(), probabilities.ravel(), len(grid.modes))
    kind = "uneven modes (top-left weight 1.0, others 0.4, sigma^2 0.2)" if uneven else "even"
    layout = "on the diagonal" if name == "diagonal_paper" else "on a square grid"
    title = (
        f"Synthetic 2-D ordinal, {len(grid.modes)} modes {layout}, spacing {spacing}, "
        f"N={grid.num_values}, {kind}"
    )
    return GridTarget(
        name, title, grid, spacing, neighbour_distance, probabilities, cells, mode_weights
    )


def grid_variable(grid):
    return nx.DiscreteVariable((2,), grid.num_values, "ordinal")


def grid_starts(grid, num_chains):
    """Every chain in the top-left mode (the heavy one in the uneven case)."""
    return np.tile(grid.modes[0].astype(np.int64), (num_chains, 1))


def grid_core(grid, num_chains):
    """The functional ACS core on the grid: variables, ``evaluate`` and states at the start."""
    variables = {"x": grid_variable(grid)}
    evaluate = discrete.local_differences_fn(
        lambda values: targets.multimodal_grid_log_density(grid, values["x"]), variables
    )
    starts = jnp.asarray(grid_starts(grid, num_chains), jnp.int32)
    states = jax.vmap(lambda x: discrete.init_chain(evaluate, {"x": x}))(starts)
    return variables, evaluate, states


def tune_dmala_step_size(grid, settings, key):
    """Bisection on log alpha for DMALA's mean acceptance probability 0.574 (ACS paper,
    App. D.1), each round ``dmala_tuning_steps`` steps of ``grid_chains`` chains from the starting
    mode.
    Returns ``(alpha, acceptance, evaluations per chain)``."""
    chains = settings.grid_chains
    variables, evaluate, states = grid_core(grid, chains)

    @jax.jit
    def mean_accept(key, log_alpha):
        alpha = jnp.exp(log_alpha)

        def step(batch, step_key):
            keys = jax.random.split(step_key, chains)
            batch, accept = jax.vmap(
                lambda k, s: discrete.acs_step(k, s, alpha, 0.5, evaluate, variables)
            )(keys, batch)
            return batch, jnp.mean(accept)

        _, accepts = jax.lax.scan(step, states, jax.random.split(key, settings.dmala_tuning_steps))
        return jnp.mean(accepts)

    low, high = math.log(0.1), math.log(1000.0)
    best = None
    for round_index in range(settings.dmala_tuning_rounds):
        middle = 0.5 * (low + high)
        accept = float(mean_accept(jax.random.fold_in(key, round_index), middle))
        if best is None or abs(accept - DMALA_TARGET_ACCEPT) < abs(best[1] - DMALA_TARGET_ACCEPT):
            best = (math.exp(middle), accept)
        # Acceptance falls as alpha grows.
        if accept > DMALA_TARGET_ACCEPT:
            low = middle
        else:
            high = middle
    evaluations = 1 + settings.dmala_tuning_rounds * settings.dmala_tuning_steps
    return best[0], best[1], evaluations


def run_grid_tuned(target, settings, key, tuning_settings):
    """ACS tuned as ``nx.ACS`` tunes: per chain, the tuner (``nx.discrete.tune_schedule`` with
    ``tuning_settings``) on
    ``num_tuning_chains`` copies, here all started in the top-left mode; then every chain
    restarts in the mode and runs ``grid_steps`` steps with its own frozen schedule (the
    functional core, vectorised over chains). Returns ``(draws (chains, steps, 2), mean
    acceptance, evaluations per chain, note)``."""
    grid, chains, copies = target.grid, settings.grid_chains, settings.num_tuning_chains
    variables, evaluate, starts = grid_core(grid, chains)
    rule = tuning_settings.alpha_max_rule or "default"

    def tune(key, start):
        copies_of_chain = jax.tree.map(lambda leaf: jnp.repeat(leaf[None], copies, 0), start)
        return discrete.tune_schedule(key, copies_of_chain, evaluate, variables, tuning_settings)[0]

    def run(key, start, schedule):
        def one(chain, inputs):
            step_key, k = inputs
            s = schedule.step_sizes.shape[0]
            chain, accept = discrete.acs_step(
                step_key,
                chain,
                schedule.step_sizes[k % s],
                schedule.balancing[k % s],
                evaluate,
                variables,
            )
            return chain, (chain.indices["x"], accept)

        inputs = (jax.random.split(key, settings.grid_steps), jnp.arange(settings.grid_steps))
        return jax.lax.scan(one, start, inputs)[1]

    tune_keys, run_keys = jnp.split(jax.random.split(key, 2 * chains), 2)
    with compile_clock(f"grid ACS tuned ({rule})"):
        results = jax.jit(jax.vmap(tune))(tune_keys, starts)
        draws, accept = jax.jit(jax.vmap(run))(run_keys, starts, results.schedule)
        draws = np.asarray(draws)
    cost = copies * (float(jnp.mean(results.num_steps)) + 1)
    note = (
        f"{copies} tuning copies per chain; alpha_max {fmt_range(results.alpha_max)}, alpha_min "
        f"{fmt_range(results.alpha_min)} (median {float(jnp.median(results.alpha_max)):.3g} -> "
        f"{float(jnp.median(results.alpha_min)):.3g}); tuner {cost:.0f} per chain (at most "
        f"{copies * (discrete.tuning_cost(tuning_settings) + 1)})"
    )
    return draws, float(jnp.mean(accept)), cost + settings.grid_steps, note


def run_grid_acs(target, settings, key, label, schedule):
    """``nx.ACS`` (potential_fn entry, ordinal variable) with a frozen schedule, every chain
    started in the top-left mode; returns ``(draws (chains, steps, 2), mean acceptance)``."""
    grid = target.grid
    kernel = nx.ACS(
        potential_fn=lambda x: -targets.multimodal_grid_log_density(grid, x),
        variables=grid_variable(grid),
        schedule=schedule,
    )
    mcmc = run_mcmc(
        label,
        kernel,
        key,
        (),
        settings.grid_chains,
        0,
        settings.grid_steps,
        init_params=jnp.asarray(grid_starts(grid, settings.grid_chains)),
        extra_fields=("accept_prob",),
    )
    accept = field_mean(mcmc.get_extra_fields(), "accept_prob")
    return np.asarray(mcmc.get_samples(group_by_chain=True)), accept


def run_grid_gibbs(target, settings, key, label, random_walk, num_steps):
    """NumPyro's ``DiscreteGibbs`` on the two-site ``Categorical(N)`` model from the mode,
    ``grid_gibbs_chains`` chains; returns ``(draws (chains, steps, 2), NaN)`` (no acceptance
    reported)."""
    starts = grid_starts(target.grid, settings.grid_gibbs_chains)
    mcmc = run_mcmc(
        label,
        DiscreteGibbs(targets.multimodal_grid_model, random_walk=random_walk),
        key,
        (target.grid,),
        settings.grid_gibbs_chains,
        0,
        num_steps,
        init_params={"a": jnp.asarray(starts[:, 0]), "b": jnp.asarray(starts[:, 1])},
    )
    samples = mcmc.get_samples(group_by_chain=True)
    return np.stack([np.asarray(samples["a"]), np.asarray(samples["b"])], -1), float("nan")


class GridRow(NamedTuple):
    name: str
    chains: int
    steps: int
    evaluations: float  # per chain, tuning included
    accept: float
    modes_any: int
    modes_per_chain_mean: float
    modes_per_chain_min: int
    kl: float
    kl_iid: float
    weight_tv: float
    first_weight: float
    note: str = ""


def empirical_kl(target, flat_indices):
    """KL(empirical || exact) of draws given as flat state indices ``a N + b``."""
    counts = np.bincount(flat_indices, minlength=target.grid.num_values**2)
    empirical = counts / counts.sum()
    seen = empirical > 0
    exact = target.probabilities.ravel()[seen]
    return float(np.sum(empirical[seen] * np.log(empirical[seen] / exact))), empirical


def grid_row(target, name, draws, evaluations, accept, note="", seed=0):
    """Modes visited (a draw within ``VISIT_RADIUS x spacing`` of the centre), KL(empirical ||
    exact) over all states and the total-variation error of the mode weights (nearest-mode
    cells), from all draws of all chains; and the KL that as many exact i.i.d. draws give (the
    floor set by sampling noise alone)."""
    grid = target.grid
    draws = np.asarray(draws, np.int64)
    num_values, num_modes = grid.num_values, len(grid.modes)
    flat = draws.reshape(-1, 2)
    kl, empirical = empirical_kl(target, flat[:, 0] * num_values + flat[:, 1])
    iid = np.random.default_rng(seed).choice(
        num_values**2, size=len(flat), p=target.probabilities.ravel()
    )
    weights = np.bincount(target.cells.ravel(), empirical, num_modes)
    radius = VISIT_RADIUS * target.spacing
    visited = np.zeros((draws.shape[0], num_modes), bool)
    for m, centre in enumerate(grid.modes):
        visited[:, m] = (np.sum((draws - centre) ** 2, -1) <= radius**2).any(1)
    per_chain = visited.sum(1)
    return GridRow(
        name,
        draws.shape[0],
        draws.shape[1],
        evaluations,
        accept,
        int(visited.any(0).sum()),
        float(per_chain.mean()),
        int(per_chain.min()),
        kl,
        empirical_kl(target, iid)[0],
        float(0.5 * np.sum(np.abs(weights - target.mode_weights))),
        float(weights[0]),
        note,
    )


def benchmark_grid(name, settings, seed):
    target = make_grid_target(name)
    grid = target.grid
    key = jax.random.PRNGKey(seed)
    steps = settings.grid_steps
    per_sweep = 2 * (grid.num_values - 1)
    budget_sweeps = max(1, round(steps / per_sweep))

    def acs_fixed():
        alpha_max = PAPER_ALPHA_MAX * (target.neighbour_distance / PAPER_SPACING) ** 2
        step_sizes = discrete.cyclical_step_sizes(alpha_max, GRID_ALPHA_MIN, GRID_STEPS_PER_CYCLE)
        schedule = (np.asarray(step_sizes), np.full(GRID_STEPS_PER_CYCLE, 0.5))
        draws, accept = run_grid_acs(target, settings, keys[0], "grid ACS fixed", schedule)
        note = f"alpha {alpha_max:.0f} -> {GRID_ALPHA_MIN:g}, beta 0.5, s = {GRID_STEPS_PER_CYCLE}"
        return draws, 1 + steps, accept, note

    def acs_tuned(tuning_settings, stream):
        def run():
            draws, accept, evaluations, note = run_grid_tuned(
                target, settings, keys[stream], tuning_settings
            )
            return draws, evaluations, accept, note

        return run

    def dmala():
        alpha, tuned_accept, tuning = tune_dmala_step_size(grid, settings, keys[3])
        draws, accept = run_grid_acs(target, settings, keys[4], "grid DMALA", ([alpha], [0.5]))
        note = f"alpha {alpha:.3g} (bisection: acceptance {tuned_accept:.3f}; {tuning} per chain)"
        return draws, tuning + steps, accept, note

    def gibbs(random_walk, sweeps, stream):
        cost = 2 if random_walk else per_sweep

        def run():
            label = "grid DiscreteGibbs"
            draws, accept = run_grid_gibbs(
                target, settings, keys[stream], label, random_walk, sweeps
            )
            return draws, 1 + sweeps * cost, accept, f"{cost} evaluations per sweep"

        return run

    keys = [jax.random.fold_in(key, stream) for stream in range(8)]
    methods = {
        "ACS, fixed schedule (the paper's setting)": acs_fixed,
        "ACS, tuned (defaults: jump rule, beta_max 0.5)": acs_tuned(discrete.TuningSettings(), 1),
        "ACS, tuned (paper's tuner: acceptance rule, beta_max 0.95)": acs_tuned(
            discrete.TuningSettings(alpha_max_rule="acceptance", beta_max=0.95), 2
        ),
        f"DMALA, alpha tuned to acceptance {DMALA_TARGET_ACCEPT}": dmala,
        "NumPyro DiscreteGibbs (Gibbs)": gibbs(False, steps, 5),
        "NumPyro DiscreteGibbs (random walk)": gibbs(True, steps, 6),
        f"NumPyro DiscreteGibbs (Gibbs), {budget_sweeps} sweep(s) = ACS's budget": gibbs(
            False, budget_sweeps, 7
        ),
    }
    rows = []
    for method, run in methods.items():
        log(f"{target.title}: {method}")
        draws, evaluations, accept, note = run()
        rows.append(grid_row(target, method, draws, evaluations, accept, note, seed))
    for row in rows:
        log(
            f"{target.title}: {row.name}: modes {row.modes_any}/{len(grid.modes)}, per chain "
            f"{row.modes_per_chain_mean:.1f} (min {row.modes_per_chain_min}), KL {row.kl:.3f} "
            f"(i.i.d. {row.kl_iid:.3f}), "
            f"weight TV {row.weight_tv:.3f}; {row.note}"
        )
    return target, rows


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------


def fmt(value, digits=3):
    """Three significant digits (``-`` for NaN)."""
    return "-" if value is None or not np.isfinite(value) else f"{value:.{digits}g}"


def ess_table(results):
    lines = [
        "| Target | Sampler | Evals / chain (tuning + warm-up) | Accept | ESS U | ESS q | "
        "ESS units min / median | min ESS | min ESS / 1k evals | ... kept draws only | "
        "ESS U / 1k evals | min(ESS U, ESS q^2) / 1k evals | min ESS / s | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for target, _, rows in results:
        for row in rows:
            run = row.run
            lines.append(
                f"| {target.title} | {run.name} | {run.evaluations:.3g} ({run.overhead:.3g}) | "
                f"{fmt(run.accept, 2)} | {row.ess_u:.0f} | {row.ess_q:.0f} | "
                f"{row.ess_units_min:.0f} / {row.ess_units_median:.0f} | {row.ess_min:.0f} | "
                f"{fmt(row.per_thousand(row.ess_min))} | "
                f"{fmt(row.per_thousand(row.ess_min, kept_only=True))} | "
                f"{fmt(row.per_thousand(row.ess_u))} | "
                f"{fmt(row.per_thousand(row.ess_symmetric))} | {fmt(row.ess_min / run.seconds)} | "
                f"{fmt(run.seconds, 2)} |"
            )
    return "\n".join(lines)


def exactness_table(results):
    lines = [
        "| Target | Sampler | E[U] exact / sampled | E[q^2] exact / sampled | R-hat q | "
        "max abs(unit mean error) | max z (statistic) | Agrees with enumeration |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for target, exact, rows in results:
        for row in rows:
            scalars, _ = boltzmann_statistics(target, row.run.samples)
            if row.max_z <= MAX_Z:
                verdict = "yes"
            elif row.rhat_q > 1.05:
                verdict = f"**no** (z > {MAX_Z:g}; chains not mixed, R-hat q > 1.05)"
            elif mirror_symmetric(exact) and len(set(np.sign(scalars["q"].mean(1)))) == 1:
                verdict = (
                    f"**no** (z > {MAX_Z:g}: every chain in the same mirror mode, where exact "
                    f"E[q] = {exact['q']:.2g}; slow mixing)"
                )
            else:
                verdict = f"**no** (z > {MAX_Z:g} with R-hat q <= 1.05)"
            lines.append(
                f"| {target.title} | {row.run.name} | {exact['U']:.3f} / "
                f"{np.mean(scalars['U']):.3f} | {exact['q2']:.3f} / {row.mean_q2:.3f} | "
                f"{row.rhat_q:.3f} | {row.max_unit_error:.3f} | {row.max_z:.1f} ({row.worst}) | "
                f"{verdict} |"
            )
    return "\n".join(lines)


def grid_table(target, rows):
    modes = len(target.grid.modes)
    lines = [
        f"**{target.title}** (exact top-left mode weight {target.mode_weights[0]:.4f})",
        "",
        "| Sampler | Chains x steps | Evals / chain | Accept | Modes visited (any chain) | "
        "Modes per chain: mean (min) | KL(empirical ‖ exact) | ... of as many i.i.d. draws | "
        "Mode-weight error (TV) | Top-left weight | Settings |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.name} | {row.chains} x {row.steps} | {row.evaluations:.3g} | "
            f"{fmt(row.accept, 2)} | {row.modes_any}/{modes} | {row.modes_per_chain_mean:.1f} "
            f"({row.modes_per_chain_min}) | {row.kl:.3f} | {row.kl_iid:.3f} | "
            f"{row.weight_tv:.3f} | {row.first_weight:.4f} | {row.note} |"
        )
    return "\n".join(lines)


def seeds_table(seeds, per_seed_results):
    """Min ESS per 1k evaluations of every sampler on every Boltzmann target, one column per
    seed of the samplers' keys and their mean."""
    header = "| Target | Sampler | " + " | ".join(f"seed {seed}" for seed in seeds) + " | mean |"
    lines = [header, "|---|---|" + "---|" * (len(seeds) + 1)]
    for per_seed in per_seed_results:
        target = per_seed[0][0]
        for index, row in enumerate(per_seed[0][2]):
            values = [rows[index].per_thousand(rows[index].ess_min) for _, _, rows in per_seed]
            cells = " | ".join(fmt(value) for value in values)
            lines.append(f"| {target.title} | {row.run.name} | {cells} | {fmt(np.mean(values))} |")
    return "\n".join(lines)


def seeds_targets(seeds, per_seed_results):
    """The RBM rows of the acceptance targets, on the mean over the seeds."""
    lines = []
    for per_seed in per_seed_results:
        target = per_seed[0][0]
        if not target.name.startswith("rbm"):
            continue
        means = {}
        for label in ("ACS", "DMALA"):
            # The first row of each label: ACS at its defaults, DMALA.
            labelled = [
                next(row for row in rows if row.run.name.startswith(label)) for *_, rows in per_seed
            ]
            means[label] = np.mean([row.per_thousand(row.ess_min) for row in labelled])
        lines.append(
            f"| ACS min ESS per evaluation >= DMALA's, mean over seeds "
            f"{', '.join(map(str, seeds))} ({target.title}) | {fmt(means['ACS'])} vs "
            f"{fmt(means['DMALA'])} per 1k evals | {verdict(means['ACS'] >= means['DMALA'])} |"
        )
    return lines


def targets_table(boltzmann_results, grid_results, extra_lines=()):
    lines = ["| Acceptance target | Measured | Verdict |", "|---|---|---|"]
    for target, rows in grid_results:
        by_name = {row.name.split(",")[0].split(" (")[0]: row for row in rows}
        modes = len(target.grid.modes)
        acs = [row for row in rows if row.name.startswith("ACS")]
        dmala = by_name["DMALA"]
        gibbs = [row for row in rows if row.name.startswith("NumPyro") and "budget" not in row.name]
        default = next(row for row in acs if "default" in row.name)
        lines.append(
            f"| ACS (default tuning) finds all modes, all chains started in one ({target.title}) | "
            + "; ".join(
                f"{row.name}: {row.modes_any}/{modes} (per chain {row.modes_per_chain_mean:.1f})"
                for row in acs
            )
            + f" | {verdict(default.modes_any == modes)} |"
        )
        # A chain "stays" when it visits fewer than 1.5 modes on average: with 128 chains a few
        # that reach a neighbouring mode do not make a sampler explore.
        stays = dmala.modes_per_chain_mean < STAYS_PER_CHAIN
        lines.append(
            f"| ... where DMALA stays in one mode ({target.title}) | {dmala.modes_any}/{modes} "
            f"visited, per chain {dmala.modes_per_chain_mean:.1f} | "
            f"{'yes' if stays else '**no**: DMALA leaves the mode too'} |"
        )
        for row in gibbs:
            stays = row.modes_per_chain_mean < STAYS_PER_CHAIN
            lines.append(
                f"| ... and {row.name} stays in one ({target.title}) | {row.modes_any}/{modes} "
                f"visited, per chain {row.modes_per_chain_mean:.1f} | "
                f"{'yes' if stays else '**no**: it finds the modes too'} |"
            )
        lines.append(
            f"| ACS KL(empirical ‖ exact) below DMALA's ({target.title}) | "
            + "; ".join(f"{row.name.split(' (')[0]}: {row.kl:.3f}" for row in acs)
            + f" vs DMALA {dmala.kl:.3f} | {verdict(min(row.kl for row in acs) < dmala.kl)} |"
        )
    for target, _, rows in boltzmann_results:
        if not target.name.startswith("rbm"):
            continue
        acs, dmala = rows[0], next(row for row in rows if row.run.name.startswith("DMALA"))
        lines.append(
            f"| ACS min ESS per evaluation >= DMALA's ({target.title}; tuning and warm-up "
            f"counted) | {fmt(acs.per_thousand(acs.ess_min))} vs "
            f"{fmt(dmala.per_thousand(dmala.ess_min))} per 1k evals (kept draws only: "
            f"{fmt(acs.per_thousand(acs.ess_min, True))} vs "
            f"{fmt(dmala.per_thousand(dmala.ess_min, True))}; ESS U: "
            f"{fmt(acs.per_thousand(acs.ess_u))} vs {fmt(dmala.per_thousand(dmala.ess_u))}) | "
            f"{verdict(acs.per_thousand(acs.ess_min) >= dmala.per_thousand(dmala.ess_min))} |"
        )
        acs_symmetric = acs.per_thousand(acs.ess_symmetric)
        dmala_symmetric = dmala.per_thousand(dmala.ess_symmetric)
        lines.append(
            f"| ... of the mirror-symmetric statistics, min(ESS U, ESS q^2) ({target.title}) | "
            f"{fmt(acs_symmetric)} vs {fmt(dmala_symmetric)} per 1k evals | "
            f"{verdict(acs_symmetric >= dmala_symmetric)} |"
        )
    for target, _, rows in boltzmann_results:
        if target.name.endswith("cold"):
            gibbs = [row for row in rows if row.run.name.startswith("NumPyro")]
            lines.append(
                f"| (the benchmark's premise) NumPyro's kernels stall at the cold setting: ESS of "
                f"a few dozen ({target.title}, {rows[0].run.samples['v'].shape[1]} draws x "
                f"{rows[0].run.samples['v'].shape[0]} chains) | min ESS "
                + ", ".join(
                    f"{row.run.name.removeprefix('NumPyro ')}: {row.ess_min:.0f}" for row in gibbs
                )
                + " | - |"
            )
    everyone = [row for _, _, rows in boltzmann_results for row in rows]
    if everyone:
        worst = max(everyone, key=lambda row: row.max_z)
        lines.append(
            f"| Every sampler agrees with exact enumeration (max z <= {MAX_Z:g}) | worst: "
            f"{worst.run.name} z = {worst.max_z:.1f} ({worst.worst}, R-hat q "
            f"{worst.rhat_q:.2f}) | {verdict(worst.max_z <= MAX_Z)} |"
        )
    lines += extra_lines
    return "\n".join(lines)


def counting_notes(settings):
    tuning = acs_tuning_evaluations(settings.num_tuning_chains)
    return [
        "An energy evaluation is one evaluation of the model's log density, with or without its "
        "gradient (a value-and-grad costs more than a value: ESS per second is the tie-breaker).",
        f"ACS: its tuner runs in `init` on {settings.num_tuning_chains} copies per chain and "
        "makes `num_tuning_chains x (tuning.num_steps + 1)` evaluations per chain (counted by "
        "the tuner; its step-size searches stop once they reach the target), at most "
        f"{tuning} (`num_tuning_chains x (tuning_cost + 1)`, which vectorised chains execute: "
        "the skipped steps run as masked lanes of the vmapped tuner); then one value-and-grad "
        "per step. DMALA: one value-and-grad per step.",
        "NumPyro's `DiscreteGibbs` (this NumPyro's standalone discrete kernel): a sweep over all "
        "d coordinates per step, K - 1 = 1 evaluation per binary coordinate (the current value's "
        "potential is cached). `DiscreteHMCGibbs` = `Gibbs([(DiscreteGibbs, discrete sites), "
        "(NUTS, the rest)])`: the sweep, one value-and-grad refresh of the NUTS block after the "
        "discrete sites moved, and the NUTS leapfrog steps. `MixedHMC`: the leapfrog steps of "
        "its sub-trajectories plus, per discrete update (d per step), one Gibbs evaluation and "
        "one value-and-grad refresh (a Gibbs proposal always refracts).",
        "This NumPyro accepts all-discrete models in `DiscreteHMCGibbs` and `MixedHMC` (their "
        "HMC part then has no coordinates), so no dummy continuous site was added; the "
        "idle NUTS/HMC steps are still evaluations of the model and are counted.",
        "NumPyro's Gibbs-type kernels evaluate the full joint log density for every proposed "
        "coordinate value (they do not exploit the model's locality); that is their cost as "
        "implemented.",
        f"Seconds: {settings.timing_steps} transitions of all chains in one compiled loop, "
        "timed on its second call, times the run's transitions, plus (ACS) a second, "
        "already compiled call of `init` for the tuner. The 2 cores were shared with other "
        "work: wall times are noisy, ESS per evaluation is the robust number.",
        "ESS: ArviZ bulk ESS over all chains of the kept draws. U = the joint log density "
        "-E(v, h); q = the order parameter (Ising: magnetisation; RBM: u1.v + w1.h with u1, w1 "
        "the top singular vectors of W, which flips sign between the two mirror modes of the "
        "+-1 RBM); 'units' = each spin's mean. min ESS = min(ESS U, ESS q, min over units). "
        "Negating every spin maps each Ising target to itself (no field) and each RBM nearly "
        "so (biases of order 1e-3; the cold RBM's exact E[q] is -0.06 against a spread of "
        "sqrt(E[q^2]) = 6.6), so q and the units' means measure how often chains cross "
        "between the two mirror modes; U and q^2 barely change under the flip and measure "
        "mixing within a mode.",
        "A z flag with a large ESS of q can still be slow mixing: when every chain sits in the "
        "same mirror mode, the chains agree with one another (R-hat near 1, ESS of q large) and "
        "all miss the other mode, which holds half the mass.",
        f"Exactness: z = abs(mean - exact) / (sd / sqrt(ESS)) for U, q, q^2 and every unit; "
        f"flagged above {MAX_Z:g}. A flag with R-hat q > 1.05 means the chains have not mixed "
        "between the modes (an exact but slow sampler), not a wrong sampler.",
        f"Synthetic targets: a sampler stays in one mode when its chains visit fewer than "
        f"{STAYS_PER_CHAIN:g} modes each on average. "
        f"All chains start at the top-left mode centre; a mode is visited when "
        f"a draw lies within {VISIT_RADIUS:g} x spacing of its centre; KL and mode weights use "
        "all draws (no burn-in removed: the chains start in a mode); mode weights are the masses "
        "of the nearest-mode cells. The gradient of the unsquared distance is taken as 0 at a "
        "mode centre (`targets.multimodal_grid_log_density`), where it is NaN, which would "
        "freeze a gradient-based chain started there.",
    ]


def report(boltzmann_results, grid_results, arguments, settings, elapsed, seeds, seed_results):
    sections = ["## Environment", ""]
    sections += environment_lines(
        "acs_benchmark.py", arguments, elapsed, settings, compile_time=True
    )
    if boltzmann_results:
        sections += ["", "## ESS per energy evaluation and per second (Boltzmann targets)", ""]
        sections += [ess_table(boltzmann_results), ""]
        sections += ["## Agreement with exact enumeration", "", exactness_table(boltzmann_results)]
        sections += [""]
        sections += ["### ACS and sampler details", ""]
        sections += [
            f"- {target.title}, {row.run.name}: {row.run.note}"
            for target, _, rows in boltzmann_results
            for row in rows
            if row.run.note
        ]
    if grid_results:
        sections += [
            "",
            "## Synthetic multimodal ordinal targets (Pynadath et al., 2024, Sec. 4.1, "
            "App. D.1, Table 3)",
            "",
        ]
        for target, rows in grid_results:
            sections += [grid_table(target, rows), ""]
    extra_targets = []
    if len(seeds) > 1 and seed_results:
        sections += [
            "",
            "## Min ESS per 1k evaluations over seeds (Boltzmann targets)",
            "",
            "The samplers' keys differ by seed; the target is the same. The tables above are "
            f"seed {seeds[0]}'s.",
            "",
            seeds_table(seeds, seed_results),
            "",
        ]
        extra_targets = seeds_targets(seeds, seed_results)
    sections += [
        "## Acceptance targets",
        "",
        targets_table(boltzmann_results, grid_results, extra_targets),
        "",
    ]
    sections += ["## JAX tracing and compilation time", "", compile_table(), ""]
    sections += ["## Notes", ""] + [f"- {note}" for note in counting_notes(settings)]
    return "\n".join(sections) + "\n"


# ------------------------------------------------------------------------------------------------
# Entry point
# ------------------------------------------------------------------------------------------------


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke-size run (about 4 minutes)")
    parser.add_argument(
        "--targets",
        nargs="+",
        choices=TARGET_NAMES,
        default=None,
        help=f"targets (default all; --quick: {' '.join(QUICK_TARGETS)})",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0],
        help="seeds of the samplers' keys; with several, the Boltzmann targets run on each and "
        "a table gives min ESS per evaluation per seed (the other tables are the first seed's)",
    )
    parser.add_argument("--output", help="also write the markdown report to this file")
    return parser.parse_args(argv)


def main(argv=None):
    arguments = sys.argv[1:] if argv is None else list(argv)
    options = parse_arguments(arguments)
    settings = QUICK if options.quick else FULL
    selected = options.targets or (QUICK_TARGETS if options.quick else TARGET_NAMES)
    seeds = options.seeds
    seed_results = [
        benchmark_boltzmann(name, settings, seeds) for name in BOLTZMANN_TARGETS if name in selected
    ]
    boltzmann_results = [per_seed[0] for per_seed in seed_results]
    grid_results = [
        benchmark_grid(name, settings, seeds[0]) for name in GRID_TARGETS if name in selected
    ]
    elapsed = elapsed_seconds()
    text = report(
        boltzmann_results, grid_results, arguments, settings, elapsed, seeds, seed_results
    )
    print(text)
    if options.output:
        with open(options.output, "w") as output:
            output.write(text)
    log("done")


if __name__ == "__main__":
    main()
