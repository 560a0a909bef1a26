"""Benchmark continuous tempering against NumPyro NUTS and BlackJAX adaptive tempered SMC.

Joint and Gibbs continuous tempering (``numpyro_extras``), NumPyro's NUTS and BlackJAX's adaptive
tempered SMC run side by side on the targets of the continuous tempering paper (Graham &
Storkey, 2017, Sec. 7: the bimodal toy, Boltzmann machine relaxations, hierarchical radon), and
the script prints markdown tables: log Z errors with standard errors, mode weights, gradient
evaluations per estimate, wall time per gradient evaluation relative to NUTS, and whether the
accuracy and cost targets were met.

Cost is counted in gradient evaluations (wall time on a shared machine is noise), warm-up
included:

* NUTS: the ``num_steps`` of every transition (leapfrog steps);
* joint tempering: ``num_steps + replica_num_steps + 2`` (the tempered chain's NUTS move, the
  posterior replica's own, and ``phi`` at the moved ``x`` and at a draw from the base);
* Gibbs tempering: the same, ``20 + 20 + 2`` per transition (the tempered and the replica's HMC
  moves have 20 steps each);
* SMC: particles x (mutation steps x leapfrog steps + 1) per temperature (``blackjax.hmc.init``
  evaluates one gradient per particle when a mutation starts).

Base fits (``fit_base``, its bootstrap round, the mean-field fits of the Boltzmann machines) and
the SMC pilot runs that size the particle count are set-up costs and are not counted.

Usage::

    python benchmarks/tempering_benchmark.py --quick            # smoke-size run, 2-3 minutes
    python benchmarks/tempering_benchmark.py > full.log 2>&1    # full run (docs/benchmarks.md)
    python benchmarks/tempering_benchmark.py --targets bimodal boltzmann --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
import os
import platform
import sys
import time
import types
from collections.abc import Callable
from typing import Any, NamedTuple

import numpyro

# log Z to a few hundredths of a nat needs double precision; set it before any array exists.
numpyro.enable_x64()

import arviz  # noqa: E402
import blackjax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from common import (  # noqa: E402
    COMPILE_SECONDS,
    RADON_LOG_Z,
    TEMPERING_EVALUATIONS_BESIDE_MOVES,
    compile_clock,
    compile_table,
    elapsed_seconds,
    log,
    package_commit,
    verdict,
)
from numpyro.infer import MCMC, NUTS  # noqa: E402
from scipy.special import logsumexp  # noqa: E402
from smc_anchor import SMCSettings, TemperedSMC  # noqa: E402

import numpyro_extras as nx  # noqa: E402
from numpyro_extras import targets  # noqa: E402

TARGET_NAMES = ("bimodal", "bimodal_fitted", "boltzmann", "linear_regression", "radon")
# Compilation dominates a smoke-size run: --quick covers the two headline targets by default
# (about 2-3 minutes; all five take about 7).
QUICK_TARGETS = ("bimodal", "boltzmann")

# Acceptance thresholds (our choice), checked in the report's "Acceptance targets" table.
MAX_COST_RATIO = 1.2
MAX_BOLTZMANN_RMSE = 0.1
MAX_MODE_WEIGHT_ERROR = 0.03

# Separate random streams for the methods, so that adding one leaves the others unchanged.
STREAM_JOINT, STREAM_GIBBS, STREAM_NUTS, STREAM_SMC, STREAM_BASE = range(5)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Run lengths of one benchmark size (``--quick`` or full)."""

    num_chains: int
    # Bimodal targets (Graham & Storkey, 2017, Sec. 7.1; full size: 10 chains x 5000 draws,
    # our choice).
    bimodal_warmup: int
    bimodal_samples: int
    # Boltzmann relaxation: budget per estimate, warm-up of the tempering runs and of NUTS.
    boltzmann_budget: int
    boltzmann_warmup: int
    # Linear regression and radon: fixed run lengths; SMC gets joint tempering's budget.
    regression_warmup: int
    regression_samples: int
    radon_warmup: int
    radon_samples: int
    radon_max_seeds: int
    # BlackJAX SMC.
    smc_pilot_particles: int = 256
    smc_mutation_steps: int = 5
    smc_leapfrog_steps: int = 10
    smc_target_ess: float = 0.5
    smc_target_acceptance: float = 0.65
    # Wall-time comparison: seconds of a timed NUTS run, rounds (each method's fastest counts),
    # warm-up of the NUTS runs that only serve as the timing baseline.
    timing_seconds: float = 1.0
    timing_repeats: int = 5
    nuts_timing_warmup: int = 500


FULL = Settings(
    num_chains=10,
    bimodal_warmup=1000,
    bimodal_samples=5000,
    boltzmann_budget=1_000_000,
    boltzmann_warmup=500,
    regression_warmup=500,
    regression_samples=2000,
    radon_warmup=500,
    radon_samples=1000,
    radon_max_seeds=2,
)

QUICK = Settings(
    num_chains=4,
    bimodal_warmup=300,
    bimodal_samples=500,
    boltzmann_budget=60_000,
    boltzmann_warmup=200,
    regression_warmup=200,
    regression_samples=300,
    radon_warmup=150,
    radon_samples=150,
    radon_max_seeds=1,
    smc_pilot_particles=64,
    smc_mutation_steps=3,
    timing_seconds=0.2,
    timing_repeats=2,
    nuts_timing_warmup=150,
)

# ------------------------------------------------------------------------------------------------
# Problems
# ------------------------------------------------------------------------------------------------


class Problem(NamedTuple):
    """One target: a NumPyro model (or a flat potential), its base and its exact or reference log Z.

    :param name: one of :data:`TARGET_NAMES`.
    :param title: the label in the tables.
    :param model: the NumPyro model, or ``None`` for a ``potential_fn`` target.
    :param model_kwargs: the model's keyword arguments.
    :param potential_fn: ``phi`` on the flat unconstrained space (always set: SMC uses it).
    :param base: the :class:`~numpyro_extras.GaussianBase` shared by the tempering runs and SMC.
    :param log_z: exact log Z, or ``None`` when a reference is computed.
    :param smc_potential: ``(params, x) -> phi(x)`` with the target's arrays as a traced argument,
        so that one compiled SMC step serves every Boltzmann system.
    :param smc_params: the ``params`` of ``smc_potential``.
    """

    name: str
    title: str
    model: Callable | None
    model_kwargs: dict
    potential_fn: Callable
    base: nx.GaussianBase
    log_z: float | None
    smc_potential: Callable
    smc_params: Any = None

    @property
    def dimension(self):
        return self.base.dimension

    def kernel_target(self):
        """``(model, potential_fn)`` arguments of the tempering kernels."""
        return (self.model, None) if self.model is not None else (None, self.potential_fn)


def model_problem(name, title, model, model_kwargs, base, log_z):
    flat_model = nx.flatten_model(jax.random.PRNGKey(0), model, (), model_kwargs)

    def smc_potential(params, x):
        return flat_model.potential_fn(x)

    return Problem(
        name, title, model, model_kwargs, flat_model.potential_fn, base, log_z, smc_potential
    )


def bimodal_exact_base():
    """The Gaussian with the target's exact mean and variance, ``log zeta = log Z``.

    The base of Graham & Storkey (2017), Sec. 7.1.
    """
    weights = np.array(targets.BIMODAL_WEIGHTS)
    locs = np.array(targets.BIMODAL_LOCS)
    scales = np.array(targets.BIMODAL_SCALES)
    mean = weights @ locs
    variance = weights @ (scales**2 + locs**2) - mean**2
    return nx.GaussianBase(jnp.array([mean]), jnp.array([[math.sqrt(variance)]]), jnp.array(0.0))


def meanfield_mixture_base(relaxation, seed, num_starts=100, num_steps=1000, learning_rate=0.2):
    """The base of Graham & Storkey (2017), Sec. 7.2 and Sec. 6 (eq. 25): mean-field fits of the
    discrete Boltzmann machine, moment-matched.

    Gradient descent on the mean-field free energy ``F(a)`` from ``num_starts`` starts
    ``a ~ N(0, 0.5^2)``; duplicates (``|m_i - m_j| < 1e-4``) dropped; components ``N(Q^T m_i, I)``
    (as in the authors' code; the exact ``I + Q^T diag(1 - m_i^2) Q`` is wider) weighted by
    ``exp(-F_i)`` and moment-matched into one Gaussian;
    ``log zeta = (D/2) log 2 pi - D_B log 2 + Tr(D)/2 + logsumexp(-F_i)`` (eq. 52 with
    ``log Z_B`` replaced by the mixture's bound).
    """
    couplings, biases = relaxation.weights, relaxation.biases
    projection = relaxation.projection  # Q^T, shape [D, D_B]
    rng = np.random.default_rng(seed)
    activations = 0.5 * rng.standard_normal((num_starts, len(biases)))
    for _ in range(num_steps):
        means = np.tanh(activations)
        probabilities = 0.5 * (1.0 + means)  # sigmoid(2 a)
        gradient = (
            (activations - biases - means @ couplings) * 4 * probabilities * (1 - probabilities)
        )
        activations = activations - learning_rate * gradient
    means = np.tanh(activations)
    probabilities = np.clip(0.5 * (1.0 + means), 1e-300, 1.0)
    complements = np.clip(0.5 * (1.0 - means), 1e-300, 1.0)
    negative_entropy = np.sum(
        probabilities * np.log(probabilities) + complements * np.log(complements), axis=1
    )
    free_energies = (
        -0.5 * np.einsum("ni,ij,nj->n", means, couplings, means) - means @ biases + negative_entropy
    )
    kept = []
    for index in np.argsort(free_energies):
        if all(np.linalg.norm(means[index] - means[other]) >= 1e-4 for other in kept):
            kept.append(index)
    log_weights = -free_energies[kept]
    log_bound = logsumexp(log_weights)
    weights = np.exp(log_weights - log_bound)
    component_locs = means[kept] @ projection.T
    mean = weights @ component_locs
    dimension, num_units = projection.shape
    covariance = np.eye(dimension) + (component_locs * weights[:, None]).T @ component_locs
    covariance -= np.outer(mean, mean)
    log_zeta = (
        0.5 * dimension * math.log(2 * math.pi)
        - num_units * math.log(2.0)
        + 0.5 * np.sum(relaxation.diagonal)
        + log_bound
    )
    return nx.GaussianBase(
        jnp.asarray(mean), jnp.asarray(np.linalg.cholesky(covariance)), jnp.asarray(log_zeta)
    )


def boltzmann_smc_potential(params, x):
    # boltzmann_relaxation_potential reads only ``projection`` and ``biases``; passing them as
    # traced arrays lets one compiled SMC step serve all systems.
    projection, biases = params
    relaxation = types.SimpleNamespace(projection=projection, biases=biases)
    return targets.boltzmann_relaxation_potential(relaxation)(x)


def boltzmann_problem(seed, num_units=16, relaxation=None):
    """System ``seed`` (or the given ``relaxation`` of it) with the mean-field mixture base.

    That base is Graham & Storkey (2017), Sec. 7.2; see :func:`meanfield_mixture_base`.
    """
    if relaxation is None:
        relaxation = targets.make_boltzmann_relaxation(seed, num_units)
    base = meanfield_mixture_base(relaxation, seed)
    return Problem(
        "boltzmann",
        f"Boltzmann relaxation D_B={num_units}",
        None,
        {},
        targets.boltzmann_relaxation_potential(relaxation),
        base,
        relaxation.log_z,
        boltzmann_smc_potential,
        (jnp.asarray(relaxation.projection), jnp.asarray(relaxation.biases)),
    )


# ------------------------------------------------------------------------------------------------
# Runs
# ------------------------------------------------------------------------------------------------


class Estimate(NamedTuple):
    """One method's result on one seed."""

    log_z: float
    stderr: float
    gradient_evaluations: int
    negative_mode_weight: float = float("nan")


class MethodRuns(NamedTuple):
    """One method on one problem: estimates per seed, and the final state for the timing runs.

    ``steps_per_transition`` is the mean number of gradient evaluations per kept transition
    (for SMC, the mean number of temperatures).
    """

    estimates: dict
    final_state: Any = None
    kernel: Any = None
    steps_per_transition: float = float("nan")


def chain_keys(seeds, num_chains, stream):
    """Keys of ``num_chains`` chains per seed; seed ``s`` owns chains ``[i C, (i + 1) C)``."""
    return jnp.stack(
        [
            jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), stream), chain)
            for seed in seeds
            for chain in range(num_chains)
        ]
    )


def chain_groups(seeds, num_chains):
    return {seed: slice(i * num_chains, (i + 1) * num_chains) for i, seed in enumerate(seeds)}


def negative_mode_weight(draws, weights=None):
    return float(targets.bimodal_mode_weights(np.ravel(draws), weights)[0])


def tempering_estimates(mcmc, problem, seeds, settings, gradient_evaluations):
    """Per-seed log Z (eq. 20, pooled over the seed's chains) and bimodal mode weights."""
    fields = mcmc.get_extra_fields(group_by_chain=True)
    deltas, log_zetas = np.asarray(fields["delta"]), np.asarray(fields["log_zeta"])[:, 0]
    log_weights = np.asarray(nx.target_log_weights(mcmc))
    estimates = {}
    for seed, chains in chain_groups(seeds, settings.num_chains).items():
        evidence = nx.tempering_log_normalizer(deltas[chains], log_zetas[chains])
        mode_weight = float("nan")
        if problem.name.startswith("bimodal"):
            draws = np.asarray(nx.tempered_samples(mcmc, group_by_chain=True)["x"])[chains]
            mode_weight = negative_mode_weight(draws, np.exp(log_weights[chains]))
        estimates[seed] = Estimate(
            evidence.log_z, evidence.stderr, int(gradient_evaluations[chains].sum()), mode_weight
        )
    return estimates


# The leapfrog steps of a tempering transition: the tempered chain's move and the posterior
# replica's own move.
STEP_FIELDS = ("num_steps", "replica_num_steps")


def gradient_evaluations_per_transition(mcmc):
    """Gradient evaluations per chain and transition of a tempering run: both moves' leapfrog
    steps and the evaluations beside them."""
    fields = mcmc.get_extra_fields(group_by_chain=True)
    steps = sum(np.asarray(fields[name], np.int64) for name in STEP_FIELDS)
    return steps + TEMPERING_EVALUATIONS_BESIDE_MOVES


def run_joint(problem, seeds, settings, num_warmup, num_samples=None, budget=None):
    """Joint tempering (NUTS on the extended space), warm-up run separately to count its steps.

    With ``budget``, the number of draws is chosen after warm-up so that each seed's chains use
    about ``budget`` gradient evaluations in all.
    """
    model, potential_fn = problem.kernel_target()
    kernel = nx.JointContinuousTempering(model, potential_fn, base=problem.base)
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples or 1,
        num_chains=len(seeds) * settings.num_chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    keys = chain_keys(seeds, settings.num_chains, STREAM_JOINT)
    with compile_clock("joint CT"):
        mcmc.warmup(keys, extra_fields=STEP_FIELDS, collect_warmup=True, **problem.model_kwargs)
    warmup_steps = gradient_evaluations_per_transition(mcmc)
    if budget is not None:
        recent_per_transition = warmup_steps[:, -max(1, num_warmup // 5) :].mean()
        remaining = budget / settings.num_chains - warmup_steps.sum(axis=1).mean()
        mcmc.num_samples = max(50, round(remaining / recent_per_transition))
    run_keys = jax.vmap(lambda key: jax.random.fold_in(key, 1))(keys)
    with compile_clock("joint CT"):
        mcmc.run(run_keys, extra_fields=STEP_FIELDS, **problem.model_kwargs)
    sample_steps = gradient_evaluations_per_transition(mcmc)
    gradient_evaluations = warmup_steps.sum(axis=1) + sample_steps.sum(axis=1)
    estimates = tempering_estimates(mcmc, problem, seeds, settings, gradient_evaluations)
    return MethodRuns(estimates, mcmc.last_state, kernel, float(sample_steps.mean()))


def run_gibbs(problem, seeds, settings, num_warmup, num_samples=None, budget=None):
    """Gibbs tempering: HMC with 20 leapfrog steps on ``x | beta``, then the exact ``beta | x``,
    and the replica's own 20-step HMC move."""
    model, potential_fn = problem.kernel_target()
    kernel = nx.GibbsContinuousTempering(model, potential_fn, base=problem.base)
    leapfrog_steps = 20  # the kernel's default, as in the paper
    # The tempered move, the replica's move, and phi at the moved x and at a base draw.
    per_transition = 2 * leapfrog_steps + TEMPERING_EVALUATIONS_BESIDE_MOVES
    if budget is not None:
        per_chain = budget / settings.num_chains / per_transition
        num_samples = max(50, round(per_chain - num_warmup))
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=len(seeds) * settings.num_chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    keys = chain_keys(seeds, settings.num_chains, STREAM_GIBBS)
    with compile_clock("Gibbs CT"):
        mcmc.run(keys, extra_fields=STEP_FIELDS, **problem.model_kwargs)
    sample_steps = gradient_evaluations_per_transition(mcmc)
    if not np.all(sample_steps == per_transition):
        raise RuntimeError("Gibbs tempering did not run a fixed number of leapfrog steps.")
    # Every transition, warm-up included, costs the same.
    per_chain = per_transition * (num_warmup + num_samples)
    gradient_evaluations = np.full(sample_steps.shape[0], per_chain, np.int64)
    estimates = tempering_estimates(mcmc, problem, seeds, settings, gradient_evaluations)
    return MethodRuns(estimates, mcmc.last_state, kernel, float(per_transition))


def run_nuts(problem, seeds, settings, num_warmup, num_samples):
    """Plain NUTS on the target (mode weights on the bimodal targets; the wall-time baseline)."""
    if problem.model is not None:
        kernel = NUTS(problem.model)
        init_params = None
    else:
        kernel = NUTS(potential_fn=problem.potential_fn)
        init_keys = chain_keys(seeds, settings.num_chains, STREAM_NUTS)
        init_params = jax.vmap(problem.base.sample)(init_keys)
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=len(seeds) * settings.num_chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    keys = chain_keys(seeds, settings.num_chains, STREAM_NUTS)
    with compile_clock("NUTS"):
        mcmc.run(keys, extra_fields=("num_steps",), init_params=init_params, **problem.model_kwargs)
    steps = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_steps"], np.int64)
    estimates = {}
    if problem.name.startswith("bimodal"):
        draws = np.asarray(mcmc.get_samples(group_by_chain=True)["x"])
        for seed, chains in chain_groups(seeds, settings.num_chains).items():
            estimates[seed] = Estimate(
                float("nan"),
                float("nan"),
                int(steps[chains].sum()),
                negative_mode_weight(draws[chains]),
            )
    return MethodRuns(estimates, mcmc.last_state, kernel, float(steps.mean()))


class SMCRunner:
    """BlackJAX adaptive tempered SMC from the base (``lambda = 0``) to the target (``lambda = 1``).

    The tempered density is ``base(x)^(1 - lambda) exp(-phi(x))^lambda``: log prior ``-psi``,
    log likelihood ``psi - phi``. The base is normalised, so ``log Z`` is the sum of BlackJAX's
    ``log_likelihood_increment`` (:class:`smc_anchor.TemperedSMC`). Mutations are HMC with the
    base covariance as inverse mass matrix; the step size adapts between temperatures towards an
    acceptance rate of 0.65. One jitted step per problem shape (the target's arrays and the base
    are an argument), compiled once per particle count.
    """

    def __init__(self, smc_potential, settings: Settings):
        self.settings = settings
        self._smc = TemperedSMC(
            lambda params, x: -params[1].potential(x),
            lambda params, x: params[1].potential(x) - smc_potential(params[0], x),
            SMCSettings(
                pilot_particles=settings.smc_pilot_particles,
                mutation_steps=settings.smc_mutation_steps,
                leapfrog_steps=settings.smc_leapfrog_steps,
                target_ess=settings.smc_target_ess,
                target_acceptance=settings.smc_target_acceptance,
            ),
        )

    def gradient_evaluations_per_particle_and_temperature(self):
        return self._smc.gradient_evaluations_per_particle_and_temperature()

    def run(self, rng_key, problem, num_particles, step_size=0.5):
        """One SMC run: ``(log Z, number of temperatures, gradient evaluations, final step
        size, particles, weights)``."""
        init_key, rng_key = jax.random.split(rng_key)
        return self._smc.run(
            rng_key,
            problem.base.sample(init_key, (num_particles,)),
            (problem.smc_params, problem.base),
            inverse_mass_matrix=problem.base.covariance,
            step_size=step_size,
        )

    def particles_for_budget(self, rng_key, problem, budget):
        """Particle count for ``budget`` gradient evaluations and the pilot's final step size
        (:meth:`smc_anchor.TemperedSMC.particles_for_budget`)."""
        return self._smc.particles_for_budget(
            rng_key,
            lambda key, n: problem.base.sample(key, (n,)),
            (problem.smc_params, problem.base),
            budget,
            inverse_mass_matrix=problem.base.covariance,
        )


def run_smc(runner, problem, seeds, budgets):
    """SMC per seed, each with its own gradient budget ``budgets[seed]``."""
    estimates = {}
    temperatures = []
    for seed in seeds:
        key = jax.random.fold_in(jax.random.PRNGKey(seed), STREAM_SMC)
        pilot_key, run_key = jax.random.split(key)
        num_particles, step_size = runner.particles_for_budget(pilot_key, problem, budgets[seed])
        log_z, num_temperatures, gradients, _, particles, weights = runner.run(
            run_key, problem, num_particles, step_size
        )
        temperatures.append(num_temperatures)
        mode_weight = float("nan")
        if problem.name.startswith("bimodal"):
            mode_weight = negative_mode_weight(particles[:, 0], weights)
        estimates[seed] = Estimate(log_z, float("nan"), gradients, mode_weight)
        log(f"  SMC seed {seed}: {num_particles} particles, {num_temperatures} temperatures")
    return MethodRuns(estimates, steps_per_transition=float(np.mean(temperatures)))


# ------------------------------------------------------------------------------------------------
# Wall time per gradient evaluation
# ------------------------------------------------------------------------------------------------


def first_chains(state, num_chains):
    return jax.tree.map(lambda leaf: leaf[:num_chains], state)


class Timing(NamedTuple):
    """Wall-time measurements of one method on one target.

    :param seconds_per_gradient: wall time per counted gradient evaluation, ``num_chains``
        chains vectorized (as with ``chain_method="vectorized"``).
    :param gradients_per_transition: counted gradient evaluations per transition and chain.
    :param lockstep_factor: gradient evaluations the vectorized chains run in lockstep (each
        transition lasts as long as its longest trajectory: ``max`` over chains of ``num_steps``
        times the number of chains) over the counted ones (the sum of ``num_steps``).
    :param one_chain_seconds_per_gradient: wall time per gradient evaluation of the same chains
        run one after another (as with ``chain_method="sequential"``, or one chain per device
        with ``"parallel"``), where every counted gradient evaluation is one evaluated.
    """

    seconds_per_gradient: float
    gradients_per_transition: float
    lockstep_factor: float
    one_chain_seconds_per_gradient: float


class TransitionTimer:
    """Timed, compiled runs of a kernel's transitions from fixed warmed-up states.

    ``num_transitions`` transitions of every chain run in one compiled loop around
    ``kernel.sample`` (what ``MCMC`` does per draw): all chains at once when the kernel was
    initialised for a batch of chains, else one chain after another (``lax.map``). The loop is
    compiled ahead of time with the length as an argument, so compilation never enters a timing
    and one compilation serves every length. Gradient evaluations are the summed ``num_steps``
    and, for the tempering kernels, ``replica_num_steps`` and the evaluations beside the moves.
    """

    def __init__(self, kernel, state, problem, one_chain_at_a_time=False):
        tempering = isinstance(kernel, nx.JointContinuousTempering | nx.GibbsContinuousTempering)
        extra_per_transition = TEMPERING_EVALUATIONS_BESIDE_MOVES if tempering else 0

        def transitions(state, num_transitions):
            num_chains = jnp.size(state.num_steps)

            def one_transition(_, carry):
                state, counted, lockstep = carry
                state = kernel.sample(state, (), problem.model_kwargs)
                # Vectorized chains wait for the longest tempered move, then the longest
                # replica move.
                moves = [state.num_steps]
                if tempering:
                    moves.append(state.replica_num_steps)
                counted += sum(jnp.sum(steps) for steps in moves)
                counted += extra_per_transition * num_chains
                lockstep += (sum(jnp.max(steps) for steps in moves) + extra_per_transition) * (
                    num_chains
                )
                return state, counted, lockstep

            zero = jnp.zeros((), jnp.int64)
            _, counted, lockstep = jax.lax.fori_loop(
                0, num_transitions, one_transition, (state, zero, zero)
            )
            return counted, lockstep

        def run(state, num_transitions):
            if not one_chain_at_a_time:
                return transitions(state, num_transitions)
            counted, lockstep = jax.lax.map(
                lambda chain: transitions(chain, num_transitions), state
            )
            return jnp.sum(counted), jnp.sum(lockstep)

        self._state = state
        self._run = jax.jit(run).lower(state, 1).compile()

    def __call__(self, num_transitions):
        """``(seconds, counted, lockstep)``: wall time and gradient evaluations of
        ``num_transitions`` transitions."""
        start = time.perf_counter()
        counted, lockstep = jax.block_until_ready(self._run(self._state, num_transitions))
        return time.perf_counter() - start, int(counted), int(lockstep)


def one_chain_kernel(method, problem):
    """A fresh kernel of ``method`` on ``problem``, initialised for a single chain (so that its
    ``sample`` takes one chain's state) and without warm-up (the states it is given are warm)."""
    model, potential_fn = problem.kernel_target()
    if method == "NUTS":
        kernel = NUTS(model) if model is not None else NUTS(potential_fn=potential_fn)
        init_params = None if model is not None else problem.base.loc
    else:
        kernel_class = {"joint CT": nx.JointContinuousTempering}.get(
            method, nx.GibbsContinuousTempering
        )
        kernel = kernel_class(model, potential_fn, base=problem.base)
        init_params = None
    kernel.init(jax.random.PRNGKey(0), 0, init_params, (), problem.model_kwargs)
    return kernel


def potential_gradient_ratio(problem, settings):
    """Wall time of the extended potential's value and gradient over the target potential's.

    Both are evaluated alone (no sampler), vmapped over ``num_chains`` base draws (``u = 0`` for
    the extended one) in a compiled loop, fastest of ``timing_repeats``: the part of joint
    tempering's cost per gradient evaluation that comes from its potential.
    """
    extended = nx.extended_potential(problem.potential_fn, problem.base)
    positions = problem.base.sample(jax.random.PRNGKey(0), (settings.num_chains,))
    extended_positions = jnp.concatenate([positions, jnp.zeros((settings.num_chains, 1))], 1)

    def timed_loop(potential, points):
        def run(points, num_evaluations):
            def one_evaluation(_, carry):
                points, total = carry
                values, gradients = jax.vmap(jax.value_and_grad(potential))(points)
                # The tiny move keeps the evaluations from being hoisted out of the loop.
                return points + 1e-12 * gradients, total + jnp.sum(values)

            return jax.lax.fori_loop(0, num_evaluations, one_evaluation, (points, 0.0))

        compiled = jax.jit(run).lower(points, 1).compile()

        def seconds(num_evaluations):
            start = time.perf_counter()
            jax.block_until_ready(compiled(points, num_evaluations))
            return time.perf_counter() - start

        return seconds

    with compile_clock("joint CT (timing loop)"):
        timers = {
            "target": timed_loop(problem.potential_fn, positions),
            "extended": timed_loop(extended, extended_positions),
        }
    pilot_seconds = timers["target"](100)
    num_evaluations = max(100, math.ceil(100 * settings.timing_seconds / max(pilot_seconds, 1e-6)))
    fastest = {name: math.inf for name in timers}
    for _ in range(settings.timing_repeats):
        for name, seconds in timers.items():
            fastest[name] = min(fastest[name], seconds(num_evaluations))
    return fastest["extended"] / fastest["target"]


def timing_comparison(problem, settings, runs_by_method):
    """Wall time per gradient evaluation of each method, same chains and same transitions.

    Every method runs ``num_chains`` chains from its warmed-up final state for the same number
    of transitions, chosen so that a NUTS run lasts about ``timing_seconds``, twice: vectorized
    (all chains in lockstep) and one chain at a time. The methods take
    turns over ``timing_repeats`` rounds and each keeps its fastest round (the machine may be
    shared with other work, which only ever slows a run down).

    :return: dict method -> :class:`Timing`, and ``"potential ratio"`` ->
        :func:`potential_gradient_ratio`.
    """
    timers, one_chain_timers = {}, {}
    for method, runs in runs_by_method.items():
        state = first_chains(runs.final_state, settings.num_chains)
        with compile_clock(f"{method} (timing loop)"):
            timers[method] = TransitionTimer(runs.kernel, state, problem)
            one_chain_timers[method] = TransitionTimer(
                one_chain_kernel(method, problem), state, problem, one_chain_at_a_time=True
            )
    fastest = {}
    for label, group in (("vectorized", timers), ("one chain at a time", one_chain_timers)):
        pilot_seconds = group["NUTS"](10)[0]
        num_transitions = max(
            10, math.ceil(10 * settings.timing_seconds / max(pilot_seconds, 1e-6))
        )
        best = {method: (math.inf, 1, 1) for method in group}
        for _ in range(settings.timing_repeats):
            for method, timer in group.items():
                measurement = timer(num_transitions)
                if measurement[0] < best[method][0]:
                    best[method] = measurement
        fastest[label] = (best, num_transitions)
    results = {}
    vectorized, num_transitions = fastest["vectorized"]
    one_chain, _ = fastest["one chain at a time"]
    for method, (seconds, counted, lockstep) in vectorized.items():
        per_transition = counted / (num_transitions * settings.num_chains)
        one_chain_seconds, one_chain_counted, _ = one_chain[method]
        results[method] = Timing(
            seconds / counted,
            per_transition,
            lockstep / counted,
            one_chain_seconds / one_chain_counted,
        )
        log(
            f"  {method}: {1e6 * seconds / counted:.2f} us per gradient evaluation "
            f"({num_transitions} transitions x {settings.num_chains} chains vectorized, lockstep "
            f"factor {lockstep / counted:.2f}); one chain at a time "
            f"{1e6 * one_chain_seconds / one_chain_counted:.2f} us"
        )
    results["potential ratio"] = potential_gradient_ratio(problem, settings)
    log(
        f"  extended / target potential, value and gradient alone: {results['potential ratio']:.2f}"
    )
    return results


# ------------------------------------------------------------------------------------------------
# Benchmarks per target
# ------------------------------------------------------------------------------------------------


class TargetResult(NamedTuple):
    """Everything the report needs about one target."""

    title: str
    dimension: int
    log_z: float | dict  # exact, or per seed {seed: exact log Z}
    reference_note: str
    base_error: float  # mean |log zeta - log Z|
    methods: dict  # method name -> {seed: Estimate}
    timing: dict  # from timing_comparison
    notes: list


def method_budgets(estimates):
    return {seed: estimate.gradient_evaluations for seed, estimate in estimates.items()}


def benchmark_batched(problem, seeds, settings, num_warmup, num_samples, notes, timed=True):
    """A target whose seeds share the model: each tempering method runs all seeds in one
    vectorized run (``num_chains`` chains per seed), so it compiles once.

    NUTS runs all seeds on the bimodal targets (for its mode weights) and one seed elsewhere
    (it is only the wall-time baseline there). ``timed=False`` skips NUTS and the wall-time
    comparison (for a second variant of an already timed model).
    """
    log(f"{problem.title}: joint tempering")
    joint = run_joint(problem, seeds, settings, num_warmup, num_samples)
    log(f"{problem.title}: Gibbs tempering")
    gibbs = run_gibbs(problem, seeds, settings, num_warmup, num_samples)
    bimodal = problem.name.startswith("bimodal")
    nuts = None
    if timed:
        log(f"{problem.title}: NUTS")
        nuts = (
            run_nuts(problem, seeds, settings, num_warmup, num_samples)
            if bimodal
            else run_nuts(problem, seeds[:1], settings, settings.nuts_timing_warmup, 100)
        )
    log(f"{problem.title}: BlackJAX SMC")
    smc_runner = SMCRunner(problem.smc_potential, settings)
    smc = run_smc(smc_runner, problem, seeds, method_budgets(joint.estimates))
    timing = {}
    if timed:
        log(f"{problem.title}: wall time per gradient evaluation")
        timing = timing_comparison(
            problem, settings, {"NUTS": nuts, "joint CT": joint, "Gibbs CT": gibbs}
        )
    methods = {"joint CT": joint.estimates, "Gibbs CT": gibbs.estimates, "SMC": smc.estimates}
    if bimodal and nuts is not None:
        methods["NUTS"] = nuts.estimates
    nuts_steps = f"NUTS {nuts.steps_per_transition:.1f}, " if nuts is not None else ""
    notes.append(
        f"{problem.title}: mean gradient evaluations per transition: {nuts_steps}"
        f"joint CT {joint.steps_per_transition:.1f}; SMC used {smc.steps_per_transition:.1f}"
        " temperatures on average."
    )
    return methods, timing


def benchmark_bimodal(seeds, settings, fitted):
    if fitted:
        log_scale = 3.0
        start = time.perf_counter()
        base = nx.fit_base(
            jax.random.PRNGKey(0),
            targets.bimodal_model,
            (),
            {"log_scale": log_scale},
            progress_bar=False,
        )
        title = "Bimodal 1-D, fit_base, log Z = 3"
        notes = [
            f"{title}: base from nx.fit_base (default mixture recipe, "
            f"{time.perf_counter() - start:.0f} s): mean {float(base.loc[0]):.2f}, "
            f"sd {float(base.scale_tril[0, 0]):.2f}, log zeta {float(base.log_zeta):.3f}."
        ]
    else:
        log_scale = 0.0
        base = bimodal_exact_base()
        title = "Bimodal 1-D, exact-moment base"
        notes = [
            f"{title}: base N(-1.6, 63.64) with log zeta = log Z = 0 "
            "(Graham & Storkey, 2017, Sec. 7.1)."
        ]
    problem = model_problem(
        "bimodal_fitted" if fitted else "bimodal",
        title,
        targets.bimodal_model,
        {"log_scale": log_scale},
        base,
        log_scale,
    )
    methods, timing = benchmark_batched(
        problem,
        seeds,
        settings,
        settings.bimodal_warmup,
        settings.bimodal_samples,
        notes,
        timed=not fitted,
    )
    return TargetResult(
        title,
        1,
        log_scale,
        "exact",
        abs(float(base.log_zeta) - log_scale),
        methods,
        timing,
        notes,
    )


def benchmark_linear_regression(seeds, settings):
    features, responses = targets.make_linear_regression_data(0)
    log_z = targets.linear_regression_log_evidence(features, responses)
    model_kwargs = {"features": features, "targets": responses}
    start = time.perf_counter()
    base = nx.fit_base(
        jax.random.PRNGKey(0), targets.linear_regression_model, (), model_kwargs, progress_bar=False
    )
    title = f"Linear regression N={features.shape[0]}, P={features.shape[1]}"
    notes = [
        f"{title}: base from nx.fit_base (default mixture recipe, "
        f"{time.perf_counter() - start:.0f} s), log zeta - log Z = "
        f"{float(base.log_zeta) - log_z:+.3f}."
    ]
    problem = model_problem(
        "linear_regression", title, targets.linear_regression_model, model_kwargs, base, log_z
    )
    methods, timing = benchmark_batched(
        problem,
        seeds,
        settings,
        settings.regression_warmup,
        settings.regression_samples,
        notes,
    )
    return TargetResult(
        title,
        problem.dimension,
        log_z,
        "closed form",
        abs(float(base.log_zeta) - log_z),
        methods,
        timing,
        notes,
    )


def radon_bootstrapped_base(data):
    """The radon base: full-rank Gaussian VI, then one bootstrap round (the iterative refit of
    ``log zeta`` and the base from a tempering run, Graham & Storkey, 2017, Sec. 6).

    This is what ``fit_base(..., bootstrap_rounds=1)`` does, spelled out to report both
    ``log zeta``: the VI bound is ~9 nats below log Z here, which leaves the joint chains near
    ``beta = 1`` without the bootstrap. Returns ``(base, note)``.
    """
    start = time.perf_counter()
    vi_base = nx.fit_base(
        jax.random.PRNGKey(0), targets.radon_model, (), data, method="gaussian", progress_bar=False
    )
    bootstrap = MCMC(
        nx.GibbsContinuousTempering(targets.radon_model, base=vi_base),
        num_warmup=500,
        num_samples=1000,
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    bootstrap.run(jax.random.fold_in(jax.random.PRNGKey(0), STREAM_BASE), **data)
    base = nx.refit_base(bootstrap)
    note = (
        "base = nx.fit_base(method='gaussian') (full-rank VI), then one bootstrap round "
        "(nx.refit_base after Gibbs CT, 4 chains x 1500 transitions; "
        f"{time.perf_counter() - start:.0f} s in all): VI log zeta "
        f"{float(vi_base.log_zeta):.2f}, after the bootstrap round {float(base.log_zeta):.2f}."
    )
    return base, note


RADON_NOTE = (
    "Radon hierarchical regression: exact log Z "
    f"{RADON_LOG_Z:.4f} by quadrature over the three scales "
    "(numpyro_extras.targets.radon_log_marginal_likelihood; the rest of the model is linear and "
    "Gaussian)."
)


def benchmark_radon(seeds, settings):
    data = targets.load_radon()
    seeds = seeds[: settings.radon_max_seeds]
    base, base_note = radon_bootstrapped_base(data)
    title = "Radon hierarchical regression"
    notes = [f"{title}: {base_note}"]
    problem = model_problem("radon", title, targets.radon_model, data, base, None)
    notes.append(RADON_NOTE)
    methods, timing = benchmark_batched(
        problem,
        seeds,
        settings,
        settings.radon_warmup,
        settings.radon_samples,
        notes,
    )
    return TargetResult(
        title,
        problem.dimension,
        RADON_LOG_Z,
        "exact (quadrature)",
        abs(float(base.log_zeta) - RADON_LOG_Z),
        methods,
        timing,
        notes,
    )


def benchmark_boltzmann(seeds, settings):
    """One Boltzmann machine per seed (``make_boltzmann_relaxation(seed, 16)``); every method gets
    about ``boltzmann_budget`` gradient evaluations per estimate."""
    budget = settings.boltzmann_budget
    methods = {"joint CT": {}, "Gibbs CT": {}, "SMC": {}}
    base_errors, smc_temperatures, joint_steps, exact_log_z = [], [], [], {}
    smc_runner = SMCRunner(boltzmann_smc_potential, settings)
    timing = {}
    for seed in seeds:
        problem = boltzmann_problem(seed)
        exact_log_z[seed] = problem.log_z
        base_errors.append(abs(float(problem.base.log_zeta) - problem.log_z))
        log(f"{problem.title} system {seed}: joint tempering")
        joint = run_joint(problem, [seed], settings, settings.boltzmann_warmup, budget=budget)
        joint_steps.append(joint.steps_per_transition)
        log(f"{problem.title} system {seed}: Gibbs tempering")
        gibbs = run_gibbs(problem, [seed], settings, settings.boltzmann_warmup, budget=budget)
        log(f"{problem.title} system {seed}: BlackJAX SMC")
        smc = run_smc(smc_runner, problem, [seed], {seed: budget})
        smc_temperatures.append(smc.steps_per_transition)
        for name, runs in (("joint CT", joint), ("Gibbs CT", gibbs), ("SMC", smc)):
            methods[name].update(runs.estimates)
        if seed == seeds[0]:
            log(f"{problem.title} system {seed}: NUTS and wall time per gradient evaluation")
            nuts = run_nuts(problem, [seed], settings, settings.nuts_timing_warmup, 100)
            timing = timing_comparison(
                problem, settings, {"NUTS": nuts, "joint CT": joint, "Gibbs CT": gibbs}
            )
            nuts_steps = nuts.steps_per_transition
    title = "Boltzmann relaxation D_B=16 (D=15)"
    notes = [
        f"{title}: one system per seed (make_boltzmann_relaxation(seed, 16), diagonal-shift "
        "relaxation). Base = the recipe of Graham & Storkey (2017), Sec. 7.2: 100 mean-field "
        "fits of the discrete machine, moment-matched (its log zeta is within 0.3-1.8 nats of "
        "log Z; nx.fit_base on boltzmann_relaxation_model was 1.5-6.2 nats below log Z, so it is "
        "not used). "
        f"Mean |log zeta - log Z| over the systems {np.mean(base_errors):.2f}.",
        f"{title}: mean gradient evaluations per transition: NUTS {nuts_steps:.1f} (system "
        f"{seeds[0]}), joint CT {np.mean(joint_steps):.1f}; SMC used "
        f"{np.mean(smc_temperatures):.1f} temperatures on average.",
    ]
    return TargetResult(
        title,
        15,
        exact_log_z,
        "exact per system",
        float(np.mean(base_errors)),
        methods,
        timing,
        notes,
    )


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------


class Summary(NamedTuple):
    mean_error: float
    error_sd: float
    rmse: float
    mean_stderr: float
    coverage: float  # fraction of seeds with |error| <= 2 stderr
    gradient_evaluations: float


def summarise(estimates, exact_log_z):
    """Errors over seeds; ``exact_log_z`` is a float or a dict seed -> log Z (Boltzmann)."""
    seeds = sorted(estimates)
    truth = np.array(
        [exact_log_z[seed] if isinstance(exact_log_z, dict) else exact_log_z for seed in seeds]
    )
    errors = np.array([estimates[seed].log_z for seed in seeds]) - truth
    stderrs = np.array([estimates[seed].stderr for seed in seeds])
    return Summary(
        float(np.mean(errors)),
        float(np.std(errors, ddof=1)) if len(errors) > 1 else float("nan"),
        float(np.sqrt(np.mean(errors**2))),
        float(np.mean(stderrs)),
        float(np.mean(np.abs(errors) <= 2 * stderrs)) if np.all(np.isfinite(stderrs)) else np.nan,
        float(np.mean([estimates[seed].gradient_evaluations for seed in seeds])),
    )


def fmt(value, digits=3):
    return "-" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def log_z_table(results):
    lines = [
        "| Target | log Z | Method | Seeds | Grad. evals / estimate | Error: mean +- sd "
        "| RMSE | Mean reported stderr | abs(error) <= 2 stderr | RMSE / SMC's |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        truth = result.log_z
        truth_label = (
            result.reference_note
            if isinstance(truth, dict)
            else f"{truth:.3f} ({result.reference_note})"
        )
        summaries = {
            method: summarise(estimates, truth)
            for method, estimates in result.methods.items()
            if method != "NUTS"
        }
        for method, summary in summaries.items():
            ratio = summary.rmse / summaries["SMC"].rmse if "SMC" in summaries else float("nan")
            lines.append(
                f"| {result.title} | {truth_label} | {method} | {len(result.methods[method])} "
                f"| {summary.gradient_evaluations:.3g} "
                f"| {summary.mean_error:+.3f} +- {fmt(summary.error_sd)} | {summary.rmse:.3f} "
                f"| {fmt(summary.mean_stderr)} "
                f"| {fmt(100 * summary.coverage, 0)}{'%' if np.isfinite(summary.coverage) else ''} "
                f"| {'-' if method == 'SMC' else fmt(ratio, 2)} |"
            )
    return "\n".join(lines)


def mode_weight_table(results):
    true_weight = targets.BIMODAL_WEIGHTS[0]
    lines = [
        f"| Target | Method | Mean P(x < 0) (true {true_weight}) | RMSE | Max abs. error |",
        "|---|---|---|---|---|",
    ]
    for result in results:
        if not result.title.startswith("Bimodal"):
            continue
        for method, estimates in result.methods.items():
            weights = np.array([estimate.negative_mode_weight for estimate in estimates.values()])
            errors = weights - true_weight
            lines.append(
                f"| {result.title} | {method} | {np.mean(weights):.3f} "
                f"| {np.sqrt(np.mean(errors**2)):.3f} | {np.max(np.abs(errors)):.3f} |"
            )
    return "\n".join(lines)


def timing_table(results):
    lines = [
        "| Target | D | One chain at a time: NUTS us/grad | Joint CT us/grad | Joint / NUTS "
        "| Gibbs / NUTS | 10 chains vectorized: NUTS us/grad | Joint CT us/grad | Joint / NUTS "
        "| Gibbs / NUTS | Grad. evals per transition: NUTS / joint / Gibbs "
        "| Lockstep factor: NUTS / joint | Extended potential / target potential, alone |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        if not result.timing:
            continue
        nuts, joint, gibbs = (result.timing[m] for m in ("NUTS", "joint CT", "Gibbs CT"))
        one_nuts = nuts.one_chain_seconds_per_gradient
        lines.append(
            f"| {result.title} | {result.dimension} | {1e6 * one_nuts:.2f} "
            f"| {1e6 * joint.one_chain_seconds_per_gradient:.2f} "
            f"| {joint.one_chain_seconds_per_gradient / one_nuts:.2f} "
            f"| {gibbs.one_chain_seconds_per_gradient / one_nuts:.2f} "
            f"| {1e6 * nuts.seconds_per_gradient:.2f} "
            f"| {1e6 * joint.seconds_per_gradient:.2f} "
            f"| {joint.seconds_per_gradient / nuts.seconds_per_gradient:.2f} "
            f"| {gibbs.seconds_per_gradient / nuts.seconds_per_gradient:.2f} "
            f"| {nuts.gradients_per_transition:.1f} / {joint.gradients_per_transition:.1f} / "
            f"{gibbs.gradients_per_transition:.0f} "
            f"| {nuts.lockstep_factor:.2f} / {joint.lockstep_factor:.2f} "
            f"| {result.timing['potential ratio']:.2f} |"
        )
    return "\n".join(lines)


def targets_table(results, settings):
    lines = ["| Acceptance target | Measured | Verdict |", "|---|---|---|"]
    for result in results:
        if result.timing:
            joint, nuts = result.timing["joint CT"], result.timing["NUTS"]
            ratio = joint.one_chain_seconds_per_gradient / nuts.one_chain_seconds_per_gradient
            vectorized = joint.seconds_per_gradient / nuts.seconds_per_gradient
            lines.append(
                f"| Joint CT cost per gradient evaluation <= {MAX_COST_RATIO}x NUTS "
                f"({result.title}) | {ratio:.2f}x (vectorized chains: {vectorized:.2f}x) "
                f"| {verdict(ratio <= MAX_COST_RATIO)} |"
            )
    for result in results:
        if result.title.startswith("Boltzmann"):
            smc = summarise(result.methods["SMC"], result.log_z)
            for method in ("joint CT", "Gibbs CT"):
                summary = summarise(result.methods[method], result.log_z)
                lines.append(
                    f"| Boltzmann log Z RMSE <= {MAX_BOLTZMANN_RMSE} at ~"
                    f"{settings.boltzmann_budget:.0e} grad. evals ({method}, "
                    f"{len(result.methods[method])} seeds) | {summary.rmse:.3f} "
                    f"({summary.gradient_evaluations:.3g} evals) "
                    f"| {verdict(summary.rmse <= MAX_BOLTZMANN_RMSE)} |"
                )
                lines.append(
                    f"| Boltzmann log Z RMSE below BlackJAX SMC's at the same budget ({method}) "
                    f"| {summary.rmse:.3f} vs SMC {smc.rmse:.3f} "
                    f"| {verdict(summary.rmse < smc.rmse)} |"
                )
    for result in results:
        if result.title.startswith("Bimodal"):
            for method in ("joint CT", "Gibbs CT"):
                weights = np.array(
                    [estimate.negative_mode_weight for estimate in result.methods[method].values()]
                )
                errors = weights - targets.BIMODAL_WEIGHTS[0]
                rmse = float(np.sqrt(np.mean(errors**2)))
                lines.append(
                    f"| Mode-weight error <= {MAX_MODE_WEIGHT_ERROR} ({result.title}, {method}; "
                    f"RMSE over seeds, max) | {rmse:.3f}, max {np.max(np.abs(errors)):.3f} "
                    f"| {verdict(rmse <= MAX_MODE_WEIGHT_ERROR)} |"
                )
    return "\n".join(lines)


def environment_lines(arguments, settings, elapsed, script="tempering_benchmark.py"):
    versions = ", ".join(
        f"{module.__name__} {module.__version__}"
        for module in (jax, numpyro, blackjax, nx, np, arviz)
    )
    command = " ".join([f"python benchmarks/{script}", *arguments])
    return [
        f"- Command: `{command}`",
        f"- Date: {datetime.datetime.now().isoformat(timespec='minutes')}",
        f"- Machine: {platform.machine()}, {os.cpu_count()} CPU cores, {platform.platform()}, "
        f"Python {platform.python_version()}, x64 enabled",
        f"- Versions: {versions} (repository commit {package_commit()})",
        f"- Settings: {settings}",
        f"- Total wall time: {elapsed / 60:.1f} min, of which "
        f"{sum(COMPILE_SECONDS.values()) / 60:.1f} min JAX tracing and compilation",
    ]


def report(results, arguments, settings, elapsed):
    sections = ["## Environment", "", *environment_lines(arguments, settings, elapsed), ""]
    sections += ["## log Z", "", log_z_table(results), ""]
    if any(result.title.startswith("Bimodal") for result in results):
        sections += ["## Mode weights (bimodal targets)", "", mode_weight_table(results), ""]
    if any(result.timing for result in results):
        sections += [
            "## Wall time per gradient evaluation (compile excluded)",
            "",
            timing_table(results),
            "",
        ]
    sections += ["## Acceptance targets", "", targets_table(results, settings), ""]
    sections += ["## JAX tracing and compilation time, summed over all targets", ""]
    sections += [compile_table(), ""]
    sections += ["## Notes", ""] + [f"- {note}" for result in results for note in result.notes]
    return "\n".join(sections) + "\n"


# ------------------------------------------------------------------------------------------------
# Entry point
# ------------------------------------------------------------------------------------------------


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke-size run (a few minutes)")
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help="seeds (default 0-9; --quick: 0 1). Radon uses at most the first 3 (--quick: 1).",
    )
    parser.add_argument(
        "--targets",
        nargs="+",
        choices=TARGET_NAMES,
        default=None,
        help=f"targets (default all; --quick: {' '.join(QUICK_TARGETS)})",
    )
    parser.add_argument("--output", help="also write the markdown report to this file")
    return parser.parse_args(argv)


def main(argv=None):
    arguments = sys.argv[1:] if argv is None else list(argv)
    options = parse_arguments(arguments)
    settings = QUICK if options.quick else FULL
    seeds = options.seeds or ([0, 1] if options.quick else list(range(10)))
    selected = options.targets or (QUICK_TARGETS if options.quick else TARGET_NAMES)
    runners = {
        "bimodal": lambda: benchmark_bimodal(seeds, settings, fitted=False),
        "bimodal_fitted": lambda: benchmark_bimodal(seeds, settings, fitted=True),
        "boltzmann": lambda: benchmark_boltzmann(seeds, settings),
        "linear_regression": lambda: benchmark_linear_regression(seeds, settings),
        "radon": lambda: benchmark_radon(seeds, settings),
    }
    results = []
    for name in TARGET_NAMES:
        if name in selected:
            results.append(runners[name]())
    text = report(results, arguments, settings, elapsed_seconds())
    print(text)
    if options.output:
        with open(options.output, "w") as output:
            output.write(text)
    log("done")


if __name__ == "__main__":
    main()
