"""Marginalized AIS against AIS on Boltzmann machines: the eq. 41-42 kernels, and the mAIS
paper's claims on shared trajectories.

Statistical checks use fixed keys and compare against exact values with a margin of 4 standard
errors; each can fail with a broken sampler or a broken weight (e.g. a conditional drawn at the
wrong temperature, a weight missing a factor, or ln 2 dropped from ``Z_0``).
"""

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from boltzmann_checks import (
    LOG2,
    all_states,
    exact_free_energies,
    random_machines,
)
from jax.scipy.special import logsumexp

import numpyro_extras as nx
from numpyro_extras.annealing import mais
from numpyro_extras.annealing.driver import inverse_temperature_schedule


def test_rao_blackwell_identity():
    # Claim 2 (eq. A5): lambda_k(v) = sum_h w_k(v, h) P_{k-1}(h | v), deterministic.
    machine = nx.random_rbm(jax.random.PRNGKey(4), 4, 8, inverse_temperature=3.0)
    v = all_states(4)
    h = all_states(8)
    marginal_increment = mais.marginal_log_weight_increment(machine)
    joint_increment = mais.joint_log_weight_increment(machine)
    for beta_previous, beta in ((0.0, 0.2), (0.4, 0.7), (0.9, 1.0)):
        joint_previous = machine.log_density(v[:, None, :], h[None, :, :], beta_previous)
        log_conditional = joint_previous - logsumexp(joint_previous, axis=1, keepdims=True)
        pairs = (jnp.broadcast_to(v[:, None, :], (16, 256, 4)), jnp.broadcast_to(h, (16, 256, 8)))
        log_w = joint_increment(pairs, beta_previous, beta)
        np.testing.assert_allclose(
            marginal_increment(v, beta_previous, beta),
            logsumexp(log_w + log_conditional, axis=1),
            rtol=0,
            atol=1e-10,
        )


def test_one_step_is_exact_importance_sampling_from_uniform():
    # With K = 1 there is no transition; the expectation of Z_0 Lambda (and of Z_0 W)
    # over the uniform P_0 is exactly Z.
    machine = nx.random_rbm(jax.random.PRNGKey(5), 5, 6, inverse_temperature=2.0)
    v = all_states(5)
    h = all_states(6)
    log_z = machine.log_partition()
    log_lambda = mais.marginal_log_weight_increment(machine)(v, 0.0, 1.0)
    mais_log_z = machine.base_log_partition() + logsumexp(log_lambda) - 5 * LOG2
    np.testing.assert_allclose(mais_log_z, log_z, atol=1e-10)
    pairs = (jnp.broadcast_to(v[:, None, :], (32, 64, 5)), jnp.broadcast_to(h, (32, 64, 6)))
    log_w = mais.joint_log_weight_increment(machine)(pairs, 0.0, 1.0)
    log_z0 = 11 * LOG2  # the mean over the 2^11 joint states is the sum minus 11 ln 2
    np.testing.assert_allclose(log_z0 + logsumexp(log_w) - 11 * LOG2, log_z, atol=1e-10)


# ------------------------------------------------------------------------------------------------
# Kernels: exact transition matrices on |V| = 3, |H| = 2 and the code's samplers against them
# ------------------------------------------------------------------------------------------------


def state_index(states):
    """Row index in :func:`all_states` of each state (bit i, most significant first)."""
    bits = (np.asarray(states) > 0.5).astype(int)
    return bits @ (2 ** np.arange(bits.shape[-1])[::-1])


@pytest.mark.parametrize("units", ["spin", "binary"])
def test_block_gibbs_kernels_leave_the_tempered_model_invariant(units):
    base = nx.random_rbm(jax.random.PRNGKey(6), 3, 2, inverse_temperature=1.0)
    machine = nx.rbm(
        4.0 * base.weights, base.visible_bias + 0.5, base.hidden_bias - 0.3, units=units
    )
    beta = 0.7
    v = all_states(3, units)
    h = all_states(2, units)
    joint = jnp.exp(machine.log_density(v[:, None, :], h[None, :, :], beta))  # (8, 4)
    hidden_given_visible = joint / joint.sum(1, keepdims=True)
    visible_given_hidden = (joint / joint.sum(0, keepdims=True)).T  # (4, 8)
    # Eq. 41 and eq. 42 as matrices; joint states are indexed v * 4 + h.
    collapsed = hidden_given_visible @ visible_given_hidden
    paired = jnp.repeat(collapsed[:, :, None] * hidden_given_visible[None], 4, axis=0)
    paired = paired.reshape(32, 32)
    marginal = joint.sum(1) / joint.sum()
    np.testing.assert_allclose(marginal @ collapsed, marginal, atol=1e-12)
    joint_probabilities = (joint / joint.sum()).reshape(-1)
    np.testing.assert_allclose(joint_probabilities @ paired, joint_probabilities, atol=1e-12)

    # The code's samplers reproduce every row of those matrices.
    copies = 4000
    key = jax.random.PRNGKey(7)
    transition = mais.collapsed_gibbs_transition(machine)
    start = jnp.repeat(v, copies, axis=0)
    moved, _, _ = transition(key, start, beta, None)
    counts = np.zeros((8, 8))
    np.add.at(counts, (np.repeat(np.arange(8), copies), state_index(moved)), 1)
    tolerance = 5 * np.sqrt(collapsed * (1 - collapsed) / copies) + 1e-9
    assert np.all(np.abs(counts / copies - collapsed) < tolerance)

    joint_transition = mais.joint_transition(machine, "paired")
    copies = 1500
    start = (
        jnp.repeat(jnp.repeat(v, 4, axis=0), copies, axis=0),
        jnp.repeat(jnp.tile(h, (8, 1)), copies, axis=0),
    )
    (moved_v, moved_h), _, _ = joint_transition(key, start, beta, None)
    counts = np.zeros((32, 32))
    moved_index = state_index(moved_v) * 4 + state_index(moved_h)
    np.add.at(counts, (np.repeat(np.arange(32), copies), moved_index), 1)
    tolerance = 5 * np.sqrt(paired * (1 - paired) / copies) + 1e-9
    assert np.all(np.abs(counts / copies - paired) < tolerance)


# ------------------------------------------------------------------------------------------------
# AIS and mAIS against exact log Z
# ------------------------------------------------------------------------------------------------


def normalised_weights(log_weights, log_z0, log_z):
    return np.exp(np.asarray(log_weights) + float(log_z0) - float(log_z))


def mean_and_stderr(values):
    values = np.asarray(values)
    return values.mean(), values.std(ddof=1) / math.sqrt(values.size)


def test_both_estimators_of_z_are_unbiased():
    # Claim 4: |V| = |H| = 5, 1/T = 1, K = 5, 20,000 chains with N = 1: mean Z-hat / Z = 1.
    machine = nx.random_rbm(jax.random.PRNGKey(8), 5, 5, inverse_temperature=1.0)
    log_z = machine.log_partition()
    log_z0 = 10 * LOG2
    betas = inverse_temperature_schedule("linear", 5)
    key = jax.random.PRNGKey(9)
    paired = mais.paired_log_weights(key, machine, betas, 20000)
    runs = {
        "paired ais": paired.ais,
        "paired mais": paired.mais,
        "ais": mais.ais_log_weights(key, machine, betas, 20000),
        "gibbs ais": mais.ais_log_weights(key, machine, betas, 20000, kernel="gibbs"),
        "mais-H": mais.mais_log_weights(key, machine, betas, 20000, side="H"),
    }
    for name, log_weights in runs.items():
        mean, stderr = mean_and_stderr(normalised_weights(log_weights, log_z0, log_z))
        assert stderr < 0.01, name
        assert abs(mean - 1.0) < 4 * stderr, (name, mean, stderr)


@pytest.fixture(scope="module")
def paired_runs():
    """Paired runs on one |V| = 10, |H| = 20 RBM (Theorems 1-2): 20,000 chains each (10,000
    for K = 100)."""
    runs = {}
    for inverse_temperature, num_temperatures in ((2.0, 10), (4.0, 10), (4.0, 30), (4.0, 100)):
        machine = nx.random_rbm(jax.random.PRNGKey(10), 10, 20, inverse_temperature)
        betas = inverse_temperature_schedule("linear", num_temperatures)
        num_particles = 10000 if num_temperatures == 100 else 20000
        weights = mais.paired_log_weights(jax.random.PRNGKey(11), machine, betas, num_particles)
        offset = float(machine.base_log_partition() - machine.log_partition())
        runs[inverse_temperature, num_temperatures] = (
            np.asarray(weights.ais) + offset,  # ln(Z_0 W / Z)
            np.asarray(weights.mais) + offset,  # ln(Z_0 Lambda / Z)
        )
    return runs


def test_paired_weights_are_rao_blackwellised(paired_runs):
    # On shared v-trajectories Lambda = E[W | V] (eq. A5), so E[W / Lambda] = 1 exactly; a
    # mismatch of the h draws' temperature or of the trajectories breaks it.
    log_ais, log_mais = paired_runs[2.0, 10]
    mean, stderr = mean_and_stderr(np.exp(log_ais - log_mais))
    assert stderr < 0.05
    assert abs(mean - 1.0) < 4 * stderr


def test_theorem_1_mais_has_the_smaller_variance(paired_runs):
    # Claim 5 at 1/T = 2, K = 10: Var[Z_0 W / Z] > Var[Z_0 Lambda / Z] (calib 10.9 vs 1.5).
    log_ais, log_mais = paired_runs[2.0, 10]
    ais, mais = np.exp(log_ais), np.exp(log_mais)
    for values in (ais, mais):
        mean, stderr = mean_and_stderr(values)
        assert abs(mean - 1.0) < 4 * stderr
    # The difference of variances is E[(W - Lambda)^2] (App. A); its estimate must be clearly
    # positive, not just the ratio of two heavy-tailed variance estimates.
    difference = (ais - 1) ** 2 - (mais - 1) ** 2
    mean, stderr = mean_and_stderr(difference)
    assert mean > 4 * stderr
    assert np.var(log_ais) > 1.5 * np.var(log_mais)


def test_theorem_2_single_particle_bias(paired_runs):
    # Claim 6: E[-ln(Z_0 W / Z)] >= E[-ln(Z_0 Lambda / Z)] >= 0 (calib 1.34 vs 0.51 at 1/T = 2,
    # 4.40 vs 2.38 at 1/T = 4).
    for setting in ((2.0, 10), (4.0, 10)):
        log_ais, log_mais = paired_runs[setting]
        ais_bias, ais_stderr = mean_and_stderr(-log_ais)
        mais_bias, mais_stderr = mean_and_stderr(-log_mais)
        gap, gap_stderr = mean_and_stderr(log_mais - log_ais)
        assert gap > 4 * gap_stderr, setting
        assert mais_bias > 4 * mais_stderr, setting
        assert ais_bias > mais_bias


def test_theorem_2_free_energy_bias_with_100_particles(paired_runs):
    # Claim 7: 200 replicates of N = 100 at 1/T = 4, K = 10 (calib 0.385 vs 0.074).
    log_ais, log_mais = paired_runs[4.0, 10]

    def free_energy_errors(log_weights):
        replicates = log_weights.reshape(200, 100)
        return -(logsumexp(replicates, axis=1) - math.log(100))

    ais_errors, mais_errors = free_energy_errors(log_ais), free_energy_errors(log_mais)
    ais_mean, ais_stderr = mean_and_stderr(ais_errors)
    mais_mean, mais_stderr = mean_and_stderr(mais_errors)
    gap, gap_stderr = mean_and_stderr(np.asarray(ais_errors - mais_errors))
    assert gap > 3 * gap_stderr
    assert ais_mean > -3 * ais_stderr and mais_mean > -3 * mais_stderr
    assert np.mean(np.abs(mais_errors) < np.abs(ais_errors)) > 0.6


def test_bias_falls_with_more_temperatures(paired_runs):
    # Claim 8 and "both upward-biased free energies converge as K grows": the N = 1 bias proxy
    # (calib AIS 3.68 -> 1.38, mAIS 1.77 -> 0.76 from K = 10 to 30) falls with K for both, and
    # with N = 100 both free-energy biases shrink towards zero.
    biases = {}
    for method in (0, 1):
        values = [paired_runs[4.0, k][method] for k in (10, 30, 100)]
        proxies = [mean_and_stderr(-v) for v in values]
        for (bias, stderr), (next_bias, next_stderr) in itertools.pairwise(proxies):
            assert bias - next_bias > 4 * math.hypot(stderr, next_stderr)
        assert proxies[-1][0] > 0
        biases[method] = [
            np.mean(-(logsumexp(v.reshape(-1, 100), axis=1) - math.log(100))) for v in values
        ]
    for method_biases in biases.values():
        assert method_biases[0] > method_biases[1] > method_biases[2] > -0.02
        assert method_biases[2] < 0.05
    assert all(ais > mais for ais, mais in zip(biases[0], biases[1], strict=True))


@functools.partial(jax.jit, static_argnames=("side",))
def batched_free_energy_estimates(keys, machines, betas, side):
    """F-hat of AIS and mAIS with N = 1000 for each machine of a batch (one compile per shape)."""

    def one_run(key, machine):
        weights = mais.paired_log_weights(key, machine, betas, 1000, side=side)
        log_z0 = machine.base_log_partition()
        return [-(log_z0 + logsumexp(w) - math.log(1000)) for w in (weights.ais, weights.mais)]

    return jax.vmap(one_run)(keys, machines)


def paper_errors(key, machines, side="auto"):
    """Per-machine errors of F-hat (AIS, mAIS) with N = 1000, K = 10 for a batch of RBMs, and the
    exact free energies."""
    keys = jax.random.split(key, machines.weights.shape[0])
    betas = jnp.asarray(inverse_temperature_schedule("linear", 10))
    ais, mais = batched_free_energy_estimates(keys, machines, betas, side)
    exact = exact_free_energies(machines)
    return np.asarray(ais - exact), np.asarray(mais - exact), np.asarray(exact)


@pytest.mark.slow
def test_fig4_mais_has_the_lower_mean_error_at_every_temperature():
    # Claim 9: |V| = 10, |H| = 20, K = 10, N = 1000, 50 RBMs; mean APE of mAIS below AIS
    # (calib mean APE % 0.052 / 0.010, 0.111 / 0.038, 0.293 / 0.127, 0.518 / 0.176).
    for index, inverse_temperature in enumerate((0.5, 1.0, 2.0, 4.0)):
        machines = random_machines(20 + index, 50, 10, 20, inverse_temperature)
        ais, mais, exact = paper_errors(jax.random.PRNGKey(30 + index), machines)
        ais_ape, mais_ape = np.abs(ais / exact), np.abs(mais / exact)
        difference, stderr = mean_and_stderr(ais_ape - mais_ape)
        assert difference > 3 * stderr, inverse_temperature


@pytest.mark.slow
def test_alpha_trend_and_side_rule():
    # Claim 10: the relative gain ln r = ln(|err AIS| / |err mAIS|) grows with alpha = |H| / |V|
    # (calib medians 1.14 at alpha = 0.25, 1.97 at alpha = 4; 1/T = 0.5, K = 10; 100 RBMs here);
    # P(r > 1) > 0.6 at each alpha.
    log_ratios = {}
    for alpha, num_hidden in ((0.25, 2), (4, 40)):
        machines = random_machines(40, 100, 10, num_hidden, 0.5)
        # Figs. 5-7 are about mAIS-V whatever alpha (side="auto" would sum v out at 0.25).
        ais_errors, mais_errors, _ = paper_errors(jax.random.PRNGKey(41), machines, side="V")
        log_ratios[alpha] = np.log(np.abs(ais_errors)) - np.log(np.abs(mais_errors))
        assert np.mean(log_ratios[alpha] > 0) > 0.6
    assert np.median(log_ratios[4]) > np.median(log_ratios[0.25])

    # Claim 11: for alpha = 0.25 (|V| = 10, |H| = 2), mAIS-H beats mAIS-V (calib median of
    # ln(err_V / err_H) 0.9-1.5), and "auto" picks H.
    machines = random_machines(42, 100, 10, 2, 1.0)
    key = jax.random.PRNGKey(43)
    _, mais_v, _ = paper_errors(key, machines, side="V")
    _, mais_h, _ = paper_errors(key, machines, side="H")
    assert np.median(np.log(np.abs(mais_v)) - np.log(np.abs(mais_h))) > 0.3
    machine = nx.random_rbm(jax.random.PRNGKey(0), 10, 2)
    assert mais.resolve_side(machine, "auto") == "H"
    assert mais.resolve_side(machine.swap_layers(), "auto") == "V"


def test_ising_checkerboard_theorems():
    # Claim 13 (not in the paper): L = 6 periodic ferromagnet near criticality, white sites
    # annealed and black ones summed out; exact log Z from 2^18 white configurations.
    lattice = nx.ising_lattice(6, temperature=1 / 0.44)
    betas = inverse_temperature_schedule("linear", 10)
    weights = mais.paired_log_weights(jax.random.PRNGKey(12), lattice, betas, 20000)
    offset = float(lattice.base_log_partition() - lattice.log_partition())
    log_ais, log_mais = np.asarray(weights.ais) + offset, np.asarray(weights.mais) + offset
    for log_weights in (log_ais, log_mais):
        mean, stderr = mean_and_stderr(np.exp(log_weights))
        assert stderr < 0.05 and abs(mean - 1.0) < 4 * stderr
    gap, gap_stderr = mean_and_stderr(log_mais - log_ais)
    assert gap > 4 * gap_stderr


# ------------------------------------------------------------------------------------------------
# Public functions
# ------------------------------------------------------------------------------------------------


def test_public_estimators_recover_the_free_energy():
    machine = nx.random_rbm(jax.random.PRNGKey(13), 8, 12, inverse_temperature=2.0)
    exact = float(machine.free_energy())
    both = nx.mais_vs_ais(jax.random.PRNGKey(14), machine, num_particles=2000, num_temperatures=30)
    assert both.side == "V"
    assert both.ais.log_weights.shape == both.mais.log_weights.shape == (2000,)
    for evidence in (
        both.ais,
        both.mais,
        nx.ais_boltzmann(jax.random.PRNGKey(15), machine, num_particles=2000, num_temperatures=30),
        nx.marginalized_ais_boltzmann(
            jax.random.PRNGKey(16), machine, num_particles=2000, num_temperatures=30, side="H"
        ),
    ):
        assert 0 < evidence.stderr < 0.05
        assert 1 < evidence.ess <= 2000
        assert abs(-evidence.log_z - exact) < 4 * evidence.stderr + 1e-3
    assert both.ais_free_energy == -both.ais.log_z
    assert both.mais_free_energy == -both.mais.log_z


def test_bad_input():
    machine = nx.random_rbm(jax.random.PRNGKey(0), 3, 4)
    key = jax.random.PRNGKey(1)
    with pytest.raises(ValueError, match="side"):
        nx.marginalized_ais_boltzmann(key, machine, num_particles=10, num_temperatures=3, side="X")
    with pytest.raises(ValueError, match="side"):
        nx.mais_vs_ais(key, machine, num_particles=10, num_temperatures=3, side="v")
    for method in (nx.marginalized_ais_boltzmann, nx.ais_boltzmann, nx.mais_vs_ais):
        with pytest.raises(ValueError, match="num_particles"):
            method(key, machine, num_particles=0, num_temperatures=3)
        with pytest.raises(ValueError, match="num_temperatures"):
            method(key, machine, num_particles=10)
        with pytest.raises(TypeError, match="BipartiteBoltzmann"):
            method(key, machine.weights, num_particles=10, num_temperatures=3)
    with pytest.raises(ValueError, match="kernel"):
        nx.ais_boltzmann(key, machine, num_particles=10, num_temperatures=3, kernel="nuts")
    with pytest.raises(ValueError, match="weights"):
        nx.rbm(jnp.ones(3))
    with pytest.raises(ValueError, match="visible_bias"):
        nx.rbm(jnp.ones((3, 2)), visible_bias=jnp.ones(2))
    with pytest.raises(ValueError, match="hidden_bias"):
        nx.rbm(jnp.ones((3, 2)), hidden_bias=jnp.ones((2, 1)))
    with pytest.raises(ValueError, match="non-finite"):
        nx.rbm(jnp.full((3, 2), jnp.nan))
    with pytest.raises(ValueError, match="temperature"):
        nx.rbm(jnp.ones((3, 2)), temperature=0.0)
    with pytest.raises(ValueError, match="units"):
        nx.rbm(jnp.ones((3, 2)), units="ising")
    with pytest.raises(ValueError, match="even"):
        nx.ising_lattice(5)
    with pytest.raises(ValueError, match="num_visible must be a positive integer, got 0"):
        nx.random_rbm(key, 0, 3)
    with pytest.raises(ValueError, match="2\\^31"):
        nx.rbm(jnp.zeros((31, 40))).log_partition()
