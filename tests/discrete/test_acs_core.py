"""ACS functional core: exact transition matrices, proposal formulas, schedules."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import numpyro_extras as nx
from numpyro_extras.discrete import (
    ACSInfo,
    ChainState,
    DiscreteVariable,
    TuningSettings,
    acceptance_probability,
    acs_step,
    acs_transition,
    cosine_balancing,
    cyclical_step_sizes,
    init_chain,
    local_differences_fn,
    proposal_log_prob,
    proposal_logits,
    squared_jump,
    tune_schedule,
    tuning_cost,
)
from numpyro_extras.discrete.proposal import build_kernel, init

STEP_SETTINGS = [(0.05, 0.5), (1.0, 0.7), (5.0, 0.95), (1575.0, 0.5)]


def _rbm_target():
    """Marginal of a binary RBM over 8 visibles (4 hidden summed out): 256 states."""
    machine = nx.random_rbm(jax.random.PRNGKey(3), 8, 4, inverse_temperature=3.0, units="binary")
    variables = {"v": DiscreteVariable((8,), 2, "binary")}
    return variables, lambda values: machine.visible_log_density(values["v"])


def _categorical_matrix():
    return jax.random.normal(jax.random.PRNGKey(5), (3, 4, 3, 4))


def _onehot_log_density(onehot):
    """A pairwise model on 3 categorical coordinates with 4 classes, written on one-hots."""
    unary = jnp.array([[0.5, -1.0, 0.3, 1.2], [0.0, 0.8, -0.4, 0.1], [1.0, -0.5, 0.2, 0.0]])
    return jnp.sum(unary * onehot) + jnp.einsum(
        "ia,iajb,jb->", onehot, _categorical_matrix(), onehot
    )


def _one_hot_target():
    variables = {"c": DiscreteVariable((3,), 4, "one_hot")}
    return variables, lambda values: _onehot_log_density(values["c"])


def _categorical_exact_target():
    """The same distribution on integer classes, which the density indexes (no gradient)."""
    variables = {"c": DiscreteVariable((3,), 4, "categorical", gradient=False)}
    return variables, lambda values: _onehot_log_density(jax.nn.one_hot(values["c"], 4))


def _ordinal_target():
    """Two ordinal coordinates in {0..5} with three smooth modes (the ACS paper's synthetic
    target's form, smoothed)."""
    modes = jnp.array([[1.0, 1.0], [4.0, 2.0], [2.0, 5.0]])

    def log_density(values):
        offsets = values["x"][None, :] - modes
        distances = jnp.sqrt(jnp.sum(offsets**2, -1) + 0.1)
        return jax.nn.logsumexp(-distances / 0.6)

    return {"x": DiscreteVariable((2,), 6, "ordinal")}, log_density


def _kinked_ordinal_target():
    """The multimodal target's unsmoothed distance: its gradient is NaN at each mode's centre."""
    modes = jnp.array([[1.0, 1.0], [4.0, 4.0]])

    def log_density(values):
        distances = jnp.linalg.norm(values["x"][None, :] - modes, axis=-1)
        return jax.nn.logsumexp(-distances / 0.6)

    return {"x": DiscreteVariable((2,), 6, "ordinal")}, log_density


TARGETS = {
    "rbm": _rbm_target,
    "one_hot": _one_hot_target,
    "categorical_exact": _categorical_exact_target,
    "ordinal": _ordinal_target,
    "kinked_ordinal": _kinked_ordinal_target,
}


def _all_states(variables):
    ((name, variable),) = variables.items()
    grid = itertools.product(range(variable.num_values), repeat=variable.size)
    return {name: jnp.asarray(list(grid), jnp.int32).reshape((-1,) + tuple(variable.shape))}


@functools.lru_cache
def _transition_parts(target):
    """Compiled once per target: (Q(y | x), A(y | x)) for all pairs, alpha and beta traced."""
    variables, _ = TARGETS[target]()

    def parts(states, alpha, beta):
        def row(state_x):
            logits = proposal_logits(variables, state_x.indices, state_x.differences, alpha, beta)

            def entry(state_y):
                log_q = proposal_log_prob(logits, state_y.indices)
                acceptance = acceptance_probability(variables, state_x, state_y, alpha, beta)
                return jnp.exp(log_q), acceptance

            return jax.vmap(entry)(states)

        return jax.vmap(row)(states)

    return jax.jit(parts)


def _transition_matrix(target, states: ChainState, alpha, beta):
    """P(x, y) = Q(y | x) A(y | x) off the diagonal, the remainder on it."""
    proposal, acceptance = _transition_parts(target)(states, alpha, beta)
    moves = np.array(proposal * acceptance)
    np.fill_diagonal(moves, 0.0)
    matrix = moves + np.diag(1.0 - moves.sum(1))
    return np.asarray(proposal), matrix


def _enumerated(target):
    variables, log_density = TARGETS[target]()
    evaluate = local_differences_fn(log_density, variables)
    states = jax.vmap(lambda indices: init_chain(evaluate, indices))(_all_states(variables))
    log_pi = np.asarray(states.log_density)
    pi = np.exp(log_pi - log_pi.max())
    return variables, evaluate, states, pi / pi.sum()


@pytest.mark.parametrize("target", list(TARGETS))
def test_fixed_step_kernel_is_reversible_and_invariant(target):
    """The ACS kernel (eq. 5-6) leaves pi invariant: pi P = pi and detailed balance to 1e-10
    at every (alpha, beta); Q sums to 1."""
    variables, _, states, pi = _enumerated(target)
    assert pi.size <= 256
    for alpha, beta in STEP_SETTINGS:
        proposal, matrix = _transition_matrix(target, states, alpha, beta)
        np.testing.assert_allclose(proposal.sum(1), 1.0, atol=1e-12)
        assert np.all(np.diag(matrix) >= -1e-12)
        flow = pi[:, None] * matrix
        assert np.max(np.abs(flow - flow.T)) < 1e-10, (alpha, beta)
        assert np.max(np.abs(pi @ matrix - pi)) < 1e-10, (alpha, beta)
        if alpha >= 1.0:  # the kernel moves (not the identity), so the check has teeth
            assert np.trace(matrix) < pi.size - 1.0


@pytest.mark.parametrize("target", ["rbm", "categorical_exact", "ordinal"])
def test_cycle_product_and_mixture_preserve_target(target):
    """The product over a cycle of s = 5 kernels and their mixture preserve pi."""
    variables, _, states, pi = _enumerated(target)
    alpha_max = 1575.0 if target == "ordinal" else 5.0
    alphas = np.asarray(cyclical_step_sizes(alpha_max, 0.05, 5))
    betas = np.asarray(cosine_balancing(0.95, 0.5, 5))
    matrices = [
        _transition_matrix(target, states, a, b)[1] for a, b in zip(alphas, betas, strict=True)
    ]
    product = np.linalg.multi_dot(matrices)
    mixture = np.mean(matrices, 0)
    assert np.max(np.abs(pi @ product - pi)) < 1e-10
    assert np.max(np.abs(pi @ mixture - pi)) < 1e-10
    # The cycle product is not reversible in general, but the mixture is.
    flow = pi[:, None] * mixture
    assert np.max(np.abs(flow - flow.T)) < 1e-10


def test_step_draws_follow_the_transition_matrix():
    """The core's kernel itself, without NumPyro: its next-state frequencies from one state
    match the row of P, and its info describes each transition."""
    variables, evaluate, states, _ = _enumerated("one_hot")
    alpha, beta = 1.0, 0.7
    _, matrix = _transition_matrix("one_hot", states, alpha, beta)
    start = 17
    state = init(jax.tree.map(lambda leaf: leaf[start], states.indices), evaluate)
    num_draws = 40_000
    keys = jax.random.split(jax.random.PRNGKey(11), num_draws)
    kernel = build_kernel(evaluate, variables)
    moved, info = jax.jit(jax.vmap(lambda key: kernel(key, state, alpha, beta)))(keys)
    assert isinstance(info, ACSInfo)
    accepted = np.asarray(info.is_accepted)
    np.testing.assert_array_equal(
        np.asarray(moved.indices["c"])[accepted], np.asarray(info.proposal.indices["c"])[accepted]
    )
    assert np.all(np.asarray(moved.indices["c"])[~accepted] == np.asarray(state.indices["c"]))
    np.testing.assert_allclose(
        np.asarray(moved.log_density)[accepted], np.asarray(info.proposal.log_density)[accepted]
    )
    # the proposal's probability of acceptance, against eq. 6 computed apart
    hand = jax.vmap(
        lambda proposal: acceptance_probability(variables, state, proposal, alpha, beta)
    )(info.proposal)
    np.testing.assert_allclose(info.accept_prob, hand, rtol=1e-12)
    codes = np.asarray(moved.indices["c"]) @ np.array([16, 4, 1])
    frequencies = np.bincount(codes, minlength=64) / num_draws
    expected = matrix[start]
    stderr = np.sqrt(expected * (1 - expected) / num_draws)
    assert np.all(np.abs(frequencies - expected) <= 4.5 * stderr + 1e-12)
    assert np.sum(expected > 0.01) >= 5  # several destinations are actually tested


def test_binary_flip_probability_formula():
    """The flip probability of eq. 5 for binary sites:
    p_flip,i = sigmoid(beta (1 - 2 x_i) dU/dx_i - 1 / (2 alpha))."""
    variables, log_density = _rbm_target()
    evaluate = local_differences_fn(log_density, variables)
    x = jnp.array([1, 0, 0, 1, 1, 0, 1, 0], jnp.int32)
    state = init_chain(evaluate, {"v": x})
    gradient = jax.grad(lambda v: log_density({"v": v}))(x.astype(float))
    for alpha, beta in STEP_SETTINGS:
        logits = proposal_logits(variables, state.indices, state.differences, alpha, beta)["v"]
        flip = jax.nn.softmax(logits, -1)[jnp.arange(8), 1 - x]
        expected = jax.nn.sigmoid(beta * (1 - 2 * x) * gradient - 1 / (2 * alpha))
        np.testing.assert_allclose(flip, expected, rtol=1e-12, atol=1e-15)


def test_categorical_logits_match_equation_5():
    """Eq. 5 with the Hamming distance, for one-hot gradients and exact
    differences of integer classes."""
    current = jnp.array([2, 0, 3], jnp.int32)
    alpha, beta = 0.8, 0.7

    @jax.jit
    def logits_and_expected():
        onehot = jax.nn.one_hot(current, 4)
        gradient = jax.grad(_onehot_log_density)(onehot)
        hamming = (jnp.arange(4)[None, :] != current[:, None]).astype(float)
        first_order = gradient - gradient[jnp.arange(3), current][:, None]
        moves = [(i, k) for i in range(3) for k in range(4)]
        moved = jnp.stack([jax.nn.one_hot(current.at[i].set(k), 4) for i, k in moves])
        exact = jax.vmap(_onehot_log_density)(moved) - _onehot_log_density(onehot)
        results = []
        for make_target, differences in [
            (_one_hot_target, first_order),
            (_categorical_exact_target, exact.reshape(3, 4)),
        ]:
            variables, log_density = make_target()
            state = init_chain(local_differences_fn(log_density, variables), {"c": current})
            logits = proposal_logits(variables, state.indices, state.differences, alpha, beta)
            results.append((logits["c"], beta * differences - hamming / (2 * alpha)))
        return results

    for logits, expected in logits_and_expected():
        np.testing.assert_allclose(logits, expected, rtol=1e-12, atol=1e-12)


def _linear_target():
    bias = jax.random.normal(jax.random.PRNGKey(2), (10,))
    variables = {"x": DiscreteVariable((10,), 2, "binary")}
    return bias, variables, lambda values: jnp.dot(bias, values["x"])


@jax.jit
def _flip_acceptance(alpha, beta, x, i):
    """A(x with x_i flipped | x) for the linear target."""
    _, variables, log_density = _linear_target()
    evaluate = local_differences_fn(log_density, variables)
    state = init_chain(evaluate, {"x": x})
    flipped = init_chain(evaluate, {"x": x.at[i].set(1 - x[i])})
    return acceptance_probability(variables, state, flipped, alpha, beta)


def test_linear_target_identities():
    """One flip of U = b.x has ratio e^d (1 + e^(c - beta d)) / (1 + e^(c + beta d)),
    which is 1 at (beta=1, alpha=inf) (then Q = pi) and tends to 1 at (beta=.5, alpha->0)."""
    x = jnp.array([0, 1, 1, 0, 0, 1, 0, 1, 1, 0], jnp.int32)
    bias, _, _ = _linear_target()
    for alpha, beta in STEP_SETTINGS + [(np.inf, 1.0), (1e-3, 0.5), (np.inf, 0.5), (1e-3, 1.0)]:
        for i in range(10):
            acceptance = _flip_acceptance(alpha, beta, x, i)
            delta = float(bias[i] * (1 - 2 * x[i]))
            c = 1 / (2 * alpha)
            log_ratio = (
                delta + np.logaddexp(0, c - beta * delta) - np.logaddexp(0, c + beta * delta)
            )
            np.testing.assert_allclose(acceptance, min(1.0, np.exp(log_ratio)), rtol=1e-10)
    # Far from 1 where the ratio is not 1: some flip is rejected with probability.
    for alpha, beta in [(np.inf, 0.5), (1e-3, 1.0)]:
        assert min(float(_flip_acceptance(alpha, beta, x, i)) for i in range(10)) < 0.9
    for i in range(10):
        assert float(_flip_acceptance(1e-3, 0.5, x, i)) > 1 - 1e-6

    # beta = 1, alpha = inf: the proposal is pi itself and every move is accepted.
    bias, variables, log_density = _linear_target()
    evaluate = local_differences_fn(log_density, variables)
    everything = _all_states(variables)
    states = jax.vmap(lambda indices: init_chain(evaluate, indices))(everything)
    log_pi = states.log_density - jax.nn.logsumexp(states.log_density)
    start = init_chain(evaluate, {"x": x})
    logits = proposal_logits(variables, start.indices, start.differences, np.inf, 1.0)
    log_q = jax.vmap(lambda indices: proposal_log_prob(logits, indices))(everything)
    np.testing.assert_allclose(log_q, log_pi, atol=1e-10)
    acceptance = jax.vmap(lambda y: acceptance_probability(variables, start, y, np.inf, 1.0))(
        states
    )
    np.testing.assert_allclose(acceptance, 1.0, atol=1e-10)


def test_step_size_schedule_properties():
    """The cyclical step size schedule: alpha_0 = alpha_max, non-increasing, >= alpha_min,
    period s (corrected eq. 7); the naive balancing schedule starts at beta_max, decreases,
    stays in [0.5, beta_max]."""
    s = 20
    alphas = np.asarray(cyclical_step_sizes(3.0, 0.2, s))
    assert alphas.shape == (s,)
    assert alphas[0] == pytest.approx(3.0)
    assert np.all(np.diff(alphas) <= 0) and np.all(alphas >= 0.2)
    assert alphas[-1] == pytest.approx(0.2)
    k = np.arange(3 * s)
    periodic = np.maximum(1.5 * (np.cos(np.pi * (k % s) / s) + 1), 0.2)
    np.testing.assert_allclose(alphas[k % s], periodic)
    betas = np.asarray(cosine_balancing(0.95, 0.5, s))
    assert betas[0] == pytest.approx(0.95)
    assert np.all(np.diff(betas) <= 0) and np.all((betas >= 0.5) & (betas <= 0.95))


def test_non_finite_proposal_is_rejected():
    """A proposal where U is -inf or NaN is rejected, never accepted and never a NaN state."""
    variables = {"x": DiscreteVariable((4,), 2, "binary")}

    def log_density(values):
        x = values["x"]
        # Any state with x_0 = 1 has log density NaN, any with x_1 = 1 has -inf.
        return jnp.where(x[0] > 0.5, jnp.nan, jnp.where(x[1] > 0.5, -jnp.inf, jnp.sum(x)))

    evaluate = local_differences_fn(log_density, variables)
    state = init_chain(evaluate, {"x": jnp.zeros(4, jnp.int32)})
    keys = jax.random.split(jax.random.PRNGKey(0), 2000)
    moved, accept_prob = jax.jit(
        jax.vmap(lambda key: acs_step(key, state, 5.0, 0.5, evaluate, variables))
    )(keys)
    assert np.all(np.isfinite(np.asarray(moved.log_density)))
    assert np.all(np.asarray(moved.indices["x"])[:, :2] == 0)
    assert np.all(np.isfinite(np.asarray(accept_prob)))
    assert np.any(np.asarray(moved.indices["x"])[:, 2:] == 1)  # finite moves still happen


def test_states_with_a_non_finite_gradient_stay_reachable():
    # At a mode's centre the unsquared distance has a NaN gradient; the kernel must still move
    # out of and into that state, or the chain is exact but not irreducible (silently wrong).
    variables, _, states, pi = _enumerated("kinked_ordinal")
    centre = int(np.flatnonzero((np.asarray(states.indices["x"]) == [1, 1]).all(-1))[0])
    _, matrix = _transition_matrix("kinked_ordinal", states, 2.0, 0.5)
    np.testing.assert_allclose(pi @ matrix, pi, atol=1e-10)
    assert 1.0 - matrix[centre, centre] > 0.05
    assert matrix[:, centre].sum() - matrix[centre, centre] > 0.05
    power = np.linalg.matrix_power(matrix, 4 * len(pi))
    assert np.all(power > 0), "some state cannot be reached from another"


def test_squared_jump_is_the_proposal_distance():
    """Squared offsets for binary and ordinal coordinates, changed coordinates for categorical
    ones (ACS paper eq. 5, with the reference code's Hamming distance); a transition's expected
    jump is A times the distance moved."""
    variables = {
        "b": DiscreteVariable((3,), 2, "binary"),
        "o": DiscreteVariable((2,), 10, "ordinal"),
        "c": DiscreteVariable((2,), 4, "categorical"),
    }
    here = {"b": jnp.array([0, 1, 1]), "o": jnp.array([2, 7]), "c": jnp.array([0, 3])}
    there = {"b": jnp.array([1, 1, 0]), "o": jnp.array([5, 6]), "c": jnp.array([2, 3])}
    assert float(squared_jump(variables, here, there)) == 2 + (9 + 1) + 1
    assert float(squared_jump(variables, here, here)) == 0

    ordinal, log_density = _ordinal_target()
    evaluate = local_differences_fn(log_density, ordinal)
    state = init_chain(evaluate, {"x": jnp.array([3, 3])})
    keys = jax.random.split(jax.random.PRNGKey(0), 200)
    new_states, accept_probs, jumps = jax.vmap(
        lambda key: acs_transition(key, state, 2.0, 0.6, evaluate, ordinal)
    )(keys)
    same_states, same_accepts = jax.vmap(
        lambda key: acs_step(key, state, 2.0, 0.6, evaluate, ordinal)
    )(keys)
    np.testing.assert_array_equal(new_states.indices["x"], same_states.indices["x"])
    np.testing.assert_array_equal(accept_probs, same_accepts)
    distances = np.sum((np.asarray(new_states.indices["x"]) - 3) ** 2, -1)
    moved = distances > 0
    assert moved.sum() >= 20
    np.testing.assert_allclose(jumps[moved], accept_probs[moved] * distances[moved], rtol=1e-12)


def _two_far_modes():
    """Two ordinal coordinates in {0..59} with two sharp modes 39 apart along both axes."""
    modes = jnp.array([[10.0, 10.0], [49.0, 49.0]])

    def log_density(values):
        distances = jnp.sqrt(jnp.sum((values["x"][None, :] - modes) ** 2, -1) + 1.0)
        return jax.nn.logsumexp(-distances / 2.0)

    return {"x": DiscreteVariable((2,), 60, "ordinal")}, log_density


def test_jump_rule_keeps_the_step_that_crosses_between_modes():
    """From chains all in one of two far modes, the paper's acceptance rule picks an alpha_max
    whose moves stay in the mode; the jump rule keeps a step whose rarely accepted moves land in
    the other mode, and every chain run with its schedule visits both modes."""
    variables, log_density = _two_far_modes()
    evaluate = local_differences_fn(log_density, variables)
    starts = {"x": jnp.full((16, 2), 10, jnp.int32)}
    copies = jax.vmap(functools.partial(init_chain, evaluate))(starts)

    def tuned(rule):
        settings = TuningSettings(alpha_max_rule=rule)
        return jax.jit(lambda k, c: tune_schedule(k, c, evaluate, variables, settings)[0])(
            jax.random.PRNGKey(0), copies
        )

    by_acceptance, by_jump = tuned("acceptance"), tuned("jump")
    assert float(by_jump.alpha_max) > 5 * float(by_acceptance.alpha_max)
    assert float(by_jump.accept_at_max) < float(by_acceptance.accept_at_max)

    def run(schedule):
        steps, betas = schedule.step_sizes, schedule.balancing

        def one(chains, inputs):
            key, k = inputs
            keys = jax.random.split(key, 16)
            step = lambda key, chain: acs_step(  # noqa: E731
                key, chain, steps[k % 20], betas[k % 20], evaluate, variables
            )[0]
            chains = jax.vmap(step)(keys, chains)
            return chains, chains.indices["x"][:, 0]

        inputs = (jax.random.split(jax.random.PRNGKey(1), 2000), jnp.arange(2000))
        return np.asarray(jax.jit(lambda c: jax.lax.scan(one, c, inputs)[1])(copies))

    in_far_mode = run(by_jump.schedule) > 29.5  # (steps, chains)
    assert np.all(in_far_mode.any(0)) and np.all((~in_far_mode).any(0))
    # By symmetry each mode holds half the mass; 16 chains x 2000 steps estimate it.
    assert abs(in_far_mode.mean() - 0.5) < 0.2
    trapped = run(by_acceptance.schedule) > 29.5
    assert trapped.mean() < 0.01


def test_tuner_counts_the_evaluations_it_makes():
    """TuningResult.num_steps is the number of model evaluations per copy, counted here by a
    callback inside the log density; it stays within tuning_cost, below it when the
    searches stop early."""
    variables, rbm_log_density = _rbm_target()
    calls = [0]

    def log_density(values):
        value = rbm_log_density(values)
        jax.debug.callback(lambda u: calls.__setitem__(0, calls[0] + np.size(u)), value)
        return value

    evaluate = local_differences_fn(log_density, variables)
    states = jax.vmap(functools.partial(init_chain, evaluate))({"v": jnp.zeros((3, 8), jnp.int32)})
    calls[0] = 0
    settings = TuningSettings()
    result, _ = jax.jit(lambda k, s: tune_schedule(k, s, evaluate, variables, settings))(
        jax.random.PRNGKey(0), states
    )
    jax.block_until_ready(result)
    assert calls[0] == 3 * int(result.num_steps)
    assert settings.num_burnin < int(result.num_steps) < tuning_cost(settings)
