"""Replica exchange over ACS moves for models whose latent sites are all discrete: the tempered
rungs and one whole scan checked exactly on three binary sites, then a cold Ising lattice against
exact enumeration."""

import itertools

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from exchange_targets import run, swap_matrix
from numpyro.infer import HMC, DiscreteHMCGibbs

import numpyro_extras as nx
from numpyro_extras.discrete import ChainState, proposal_log_prob, proposal_logits
from numpyro_extras.discrete.proposal import log_acceptance_ratio
from numpyro_extras.exchange.discrete_moves import (
    NUM_TUNED_RUNGS,
    acs_moves,
    discrete_evaluation_fn,
    schedule_at,
    tuned_rungs,
)
from numpyro_extras.exchange.path import prior_path
from numpyro_extras.shell.metropolis import acceptance_probability

PROBS = np.array([0.3, 0.5, 0.8])
STATES = np.array(list(itertools.product([0, 1], repeat=3)))


def _energy(z):
    return 1.5 * z[..., 0] * z[..., 1] - 2.0 * z[..., 1] * z[..., 2] + 0.7 * z[..., 0]


def three_site_model():
    z = numpyro.sample("z", dist.Bernoulli(probs=jnp.asarray(PROBS)).to_event(1))
    numpyro.factor("energy", _energy(z))


def _log_prior(z):
    return np.sum(z * np.log(PROBS) + (1 - z) * np.log1p(-PROBS), -1)


def _tempered(betas):
    """pi_beta over the 8 states, one row per beta."""
    log_pi = _log_prior(STATES)[None] + np.asarray(betas)[:, None] * _energy(STATES)[None]
    pi = np.exp(log_pi - log_pi.max(1, keepdims=True))
    return pi / pi.sum(1, keepdims=True)


@pytest.fixture(scope="module")
def three_sites():
    target = nx.ACS(three_site_model).discrete_target()
    path = prior_path(target.split)
    evaluations = jax.vmap(discrete_evaluation_fn(path, target.variables))(
        {"z": jnp.asarray(STATES, jnp.int32)}
    )
    return target, path, evaluations


def test_tempered_rung_is_prior_times_tempered_factor(three_sites):
    """log p0 + beta l and its differences per coordinate, from the cached parts, against the
    hand-written density; l is the factor alone (sample sites untempered)."""
    _, _, evaluations = three_sites
    np.testing.assert_allclose(evaluations.log_likelihood, _energy(STATES), atol=1e-12)
    np.testing.assert_allclose(-evaluations.reference_potential, _log_prior(STATES), atol=1e-12)
    for beta in (0.0, 0.37, 1.0):
        log_density, differences = jax.vmap(lambda e, b=beta: e.tempered(b))(evaluations)
        exact = _log_prior(STATES) + beta * _energy(STATES)
        np.testing.assert_allclose(log_density, exact, atol=1e-12)
        # moving coordinate i to value v: the log density of that state minus this one's
        index = {tuple(state): i for i, state in enumerate(STATES)}
        for s, state in enumerate(STATES):
            for i, v in itertools.product(range(3), range(2)):
                moved = state.copy()
                moved[i] = v
                expected = exact[index[tuple(moved)]] - exact[s]
                np.testing.assert_allclose(differences["z"][s, i, v], expected, atol=1e-12)


def _acs_matrix(evaluations, variables, beta, alpha, balancing):
    """The exact transition matrix of one ACS step (eq. 5 proposal, eq. 6 test) on pi_beta,
    built from the rung's cached parts."""

    def chain(evaluation):
        return ChainState(evaluation.position, *evaluation.tempered(beta))

    chains = jax.vmap(chain)(evaluations)

    def row(x):
        logits = proposal_logits(variables, x.indices, x.differences, alpha, balancing)

        def entry(y):
            accept = acceptance_probability(log_acceptance_ratio(variables, x, y, alpha, balancing))
            return jnp.exp(proposal_log_prob(logits, y.indices)) * accept

        return jax.vmap(entry)(chains)

    moves = np.array(jax.vmap(row)(chains))
    np.fill_diagonal(moves, 0.0)
    return moves + np.diag(1.0 - moves.sum(1))


@pytest.mark.parametrize("parity", [0, 1])
def test_a_whole_scan_leaves_the_product_of_tempered_targets_invariant(three_sites, parity):
    """Prior draw on rung 0, an ACS step on rungs 1 and 2 at their own beta, then the swaps:
    pi_0 x pi_1 x pi_2 is invariant, and each rung's move alone keeps its own pi_beta."""
    target, _, evaluations = three_sites
    betas = np.array([0.0, 0.4, 1.0])
    pi = _tempered(betas)
    prior_draw = np.tile(pi[0], (8, 1))
    rung_moves = [
        _acs_matrix(evaluations, target.variables, beta, 1.3, balancing)
        for beta, balancing in ((0.4, 0.8), (1.0, 0.6))
    ]
    for rung, matrix in enumerate(rung_moves, start=1):
        np.testing.assert_allclose(pi[rung] @ matrix, pi[rung], atol=1e-12)
        assert np.max(np.abs(matrix - np.eye(8))) > 0.05  # the move does move
    explore = np.kron(np.kron(prior_draw, rung_moves[0]), rung_moves[1])
    scan = explore @ swap_matrix(betas, np.asarray(evaluations.log_likelihood), parity)
    product = np.kron(np.kron(pi[0], pi[1]), pi[2])
    np.testing.assert_allclose(product @ scan, product, atol=1e-12)


@pytest.mark.parametrize("discrete_steps", [1, 2])
def test_moves_draw_from_the_exact_rows_and_prior(three_sites, discrete_steps):
    """The rung move as the core calls it follows the exact ACS row (with two steps per scan,
    the row of the two steps' product, at consecutive positions of the cycle); the reference
    renewal draws from the prior. 20000 draws each, 4 binomial standard errors."""
    target, path, evaluations = three_sites
    schedule = nx.CyclicalSchedule(jnp.array([1.3, 0.5]), jnp.array([0.8, 0.5]))
    moves = acs_moves(path, target.variables, schedule=schedule, discrete_steps=discrete_steps)
    betas = jnp.array([0.0, 0.4, 1.0])
    start = jnp.broadcast_to(jnp.array([1, 0, 1], jnp.int32), (3, 3))
    replicas, inner = moves.init({"z": start}, betas, jax.random.PRNGKey(0), 10)
    rung = jax.tree.map(lambda leaf: leaf[1], (replicas, inner))
    num_draws = 20_000
    keys = jax.random.split(jax.random.PRNGKey(1), num_draws)
    moved, moved_inner = jax.vmap(lambda key: moves.explore(key, *rung, 0.4, 0, 10))(keys)
    state_index = np.asarray(moved.position["z"]) @ np.array([4, 2, 1])
    frequencies = np.bincount(state_index, minlength=8) / num_draws
    exact = _acs_matrix(evaluations, target.variables, 0.4, 1.3, 0.8)
    if discrete_steps == 2:
        exact = exact @ _acs_matrix(evaluations, target.variables, 0.4, 0.5, 0.5)
    exact = exact[0b101]
    stderr = np.sqrt(exact * (1 - exact) / num_draws)
    np.testing.assert_array_less(np.abs(frequencies - exact), 4 * stderr + 1e-9)
    np.testing.assert_allclose(moved.log_likelihood, _energy(np.asarray(moved.position["z"])))
    assert np.all(np.asarray(moved_inner.alpha) == (1.3 if discrete_steps == 1 else 0.5))

    renewed = jax.vmap(lambda key: moves.renew(key, rung[0]))(keys)
    state_index = np.asarray(renewed.position["z"]) @ np.array([4, 2, 1])
    frequencies = np.bincount(state_index, minlength=8) / num_draws
    prior = _tempered([0.0])[0]
    stderr = np.sqrt(prior * (1 - prior) / num_draws)
    np.testing.assert_array_less(np.abs(frequencies - prior), 4 * stderr)


# A cold periodic 4 x 4 Ising lattice: at coupling 0.6 nearly all mass is in the two mirror
# modes (every spin up, every spin down), between which single-site moves do not pass.
COUPLING = 0.6


def _ising_exact():
    """Exact P(z_i = 1) per site ("white" then "black"), the masses of positive and negative
    magnetisation, and log Z, by enumerating the 2^16 lattice states."""
    machine = nx.ising_lattice(4, COUPLING)
    units = 2.0 * np.array(list(itertools.product([0, 1], repeat=16))) - 1.0
    white, black = units[:, :8], units[:, 8:]
    log_p = np.asarray(machine.log_density(jnp.asarray(white), jnp.asarray(black)))
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    magnetisation = units.sum(1)
    return (
        p @ (units > 0),
        np.array([p[magnetisation > 0].sum(), p[magnetisation < 0].sum()]),
        float(machine.log_partition()),
    )


def _mean_and_mcse(draws):
    """Mean over chains and draws of every coordinate, and ArviZ's MCSE of it."""
    dataset = az.convert_to_dataset({"x": draws})
    return draws.mean((0, 1)), np.asarray(az.mcse(dataset, method="mean")["x"])


@pytest.fixture(scope="module")
def ising_run():
    kernel = nx.ReplicaExchange(nx.ising_model, inner_kernel=nx.ACS, num_replicas=8)
    return run(kernel, 4, num_warmup=500, num_samples=12_000, num_chains=4, coupling=COUPLING)


def test_cold_ising_marginals_modes_and_log_z(ising_run):
    marginals, mode_masses, log_z = _ising_exact()
    samples = ising_run.get_samples(group_by_chain=True)
    z = np.concatenate([samples["white"], samples["black"]], -1).astype(float)
    estimate, stderr = _mean_and_mcse(z)
    print("marginals", estimate, "stderr", stderr)
    assert np.all(np.abs(estimate - marginals) < np.minimum(4 * stderr, 0.03))

    magnetisation = (2 * z - 1).sum(-1)
    masses = np.stack([magnetisation > 0, magnetisation < 0], -1).astype(float)
    mass_estimate, mass_stderr = _mean_and_mcse(masses)
    print("mode masses", mass_estimate, "exact", mode_masses, "stderr", mass_stderr)
    assert np.all(np.abs(mass_estimate - mode_masses) < np.minimum(4 * mass_stderr, 0.04))
    # every chain visits both modes: the posterior replica is carried across by swaps
    assert np.all((masses[..., 0].mean(1) > 0.2) & (masses[..., 1].mean(1) > 0.2))

    evidence = nx.log_marginal_likelihood(ising_run)
    print("log Z", evidence, "exact", log_z)
    assert evidence.stderr < 0.15
    assert abs(evidence.log_z - log_z) < 4 * evidence.stderr


def test_diagnostics_and_plot_of_a_discrete_run(ising_run):
    diagnostics = nx.exchange_diagnostics(ising_run)
    assert np.all(diagnostics.round_trips >= 10)
    assert np.all(diagnostics.swap_accept_rate > 0.3)
    assert not diagnostics.problems
    # the schedule follows beta (a hot rung's small steps are larger); each rung reads it at its
    # final beta from the tuned ones
    inner = ising_run.last_state.inner_state
    step_sizes = np.asarray(inner.schedule.step_sizes)
    assert np.all(step_sizes[:, 1, -1] > 2 * step_sizes[:, -1, -1])
    # rung 0 never moves: it is not tuned, and the others' schedules are read from rungs 1, ...
    tuned = jax.tree.map(lambda leaf: leaf[:, 1:], (inner.tuned_beta, inner.tuning.schedule))
    interpolated = jax.vmap(schedule_at)(*tuned, ising_run.last_state.betas)
    np.testing.assert_allclose(step_sizes, interpolated.step_sizes)
    np.testing.assert_allclose(inner.schedule.balancing, interpolated.balancing)
    # the tuner ran on four rungs spread over the ladder, ends included; the others read their
    # schedules from those at their starting betas
    tuned = tuned_rungs(8, NUM_TUNED_RUNGS)
    np.testing.assert_array_equal(tuned, [1, 3, 5, 7])
    ran = np.asarray(inner.tuning.num_steps) > 0
    assert np.all(ran[:, tuned]) and not np.any(np.delete(ran, tuned, axis=1))
    read = np.setdiff1d(np.arange(1, 8), tuned)
    tuned_tables = jax.tree.map(
        lambda leaf: leaf[:, tuned], (inner.tuned_beta, inner.tuning.schedule)
    )
    at_start = jax.vmap(schedule_at)(*tuned_tables, inner.tuned_beta[:, read])
    np.testing.assert_allclose(inner.tuning.schedule.step_sizes[:, read], at_start.step_sizes)
    np.testing.assert_allclose(inner.tuning.schedule.balancing[:, read], at_start.balancing)
    figure = nx.plot_exchange(ising_run)
    assert len(figure.axes[2].lines) == 4


@pytest.mark.slow
def test_chain_methods_give_the_same_draws():
    draws = {}
    for method in ("sequential", "vectorized", "parallel"):
        mcmc = run(
            nx.ReplicaExchange(nx.ising_model, inner_kernel=nx.DMALA, num_replicas=4),
            4,
            num_warmup=30,
            num_samples=60,
            chain_method=method,
            seed=3,
            coupling=COUPLING,
        )
        draws[method] = np.asarray(mcmc.get_samples(group_by_chain=True)["white"])
    np.testing.assert_array_equal(draws["sequential"], draws["vectorized"])
    np.testing.assert_array_equal(draws["sequential"], draws["parallel"])
    assert not np.array_equal(draws["sequential"][0], draws["sequential"][1])


def test_bad_input_gets_a_clear_error():
    with pytest.raises(ValueError, match="inner_kernel=nx.ACS"):
        run(nx.ReplicaExchange(three_site_model, num_replicas=2), num_warmup=2, num_samples=2)
    with pytest.raises(ValueError, match="cannot take a tempered potential"):
        nx.ReplicaExchange(three_site_model, inner_kernel=DiscreteHMCGibbs)
    with pytest.raises(ValueError, match="cannot take a tempered potential"):
        nx.ReplicaExchange(three_site_model, inner_kernel=DiscreteHMCGibbs(HMC(three_site_model)))
    with pytest.raises(ValueError, match="reference must be 'prior'"):
        nx.ReplicaExchange(three_site_model, inner_kernel=nx.ACS, reference="fit")
    with pytest.raises(ValueError, match="give a model"):
        nx.ReplicaExchange(
            potential_fn=lambda x: 0.0,
            inner_kernel=nx.ACS,
            reference=nx.GaussianBase(jnp.zeros(1), jnp.eye(1), log_zeta=0.0),
        )
