"""The Ai-sampler's networks: M is an involution with unit Jacobian for any parameters, each
Henon layer inverts exactly, and the discriminator is C2-equivariant (eqs. 6, 14, 27-28)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import numpyro_extras as nx
from numpyro_extras.involutive.networks import (
    HenonFlow,
    InvolutionConfig,
    discriminator_logit,
    discriminator_module,
    flow_module,
    init_proposal,
    involution,
    swap_involution,
)


def _random_proposal(key, dimension, hidden, dtype, swap=True, full_scale=False):
    """Random kernels, biases and shifts (an untrained proposal has zero biases, eta = 0 and,
    with ``swap``, zero output kernels, which would leave part of the map untested), and a random
    diagonal or lower-triangular standardisation."""
    config = InvolutionConfig(dimension=dimension, hidden=hidden, swap=swap)
    proposal = init_proposal(key, config)
    leaves, treedef = jax.tree.flatten(proposal.params)
    keys = jax.random.split(key, len(leaves) + 2)
    leaves = [
        (
            leaf + jax.random.normal(k, leaf.shape) / np.sqrt(leaf.shape[0] if leaf.ndim > 1 else 4)
        ).astype(dtype)
        for leaf, k in zip(leaves, keys, strict=False)
    ]
    loc = jax.random.normal(keys[-2], (dimension,), dtype)
    scale = jnp.exp(0.5 * jax.random.normal(keys[-1], (dimension,), dtype))
    if full_scale:
        lower = 0.3 * jnp.tril(
            jax.random.normal(jax.random.fold_in(keys[-1], 1), (dimension, dimension), dtype), -1
        )
        scale = jnp.diag(scale) + lower
    return proposal.replace(params=jax.tree.unflatten(treedef, leaves), loc=loc, scale=scale)


@jax.jit
def _round_trip(proposal, states):
    images = involution(proposal, states)
    jacobian = jax.jacfwd(lambda state: involution(proposal, state))(states[0])
    return images, involution(proposal, images), jnp.linalg.slogdet(jacobian)[1]


@pytest.mark.parametrize(
    "dimension,hidden,dtype,tolerance,swap,full_scale",
    [
        (1, 32, jnp.float32, 1e-4, True, False),
        (2, 32, jnp.float64, 1e-10, False, False),
        (14, 64, jnp.float64, 1e-10, True, True),
        (25, 64, jnp.float32, 1e-4, True, True),
    ],
)
def test_involution_and_unit_jacobian_for_random_parameters(
    dimension, hidden, dtype, tolerance, swap, full_scale
):
    proposal = _random_proposal(
        jax.random.PRNGKey(dimension), dimension, hidden, dtype, swap, full_scale
    )
    states = 3.0 * jax.random.normal(jax.random.PRNGKey(1), (64, 2 * dimension), dtype)
    images, round_trip, log_det = _round_trip(proposal, states)
    assert images.dtype == dtype
    # The map moves the states (a test of an identity map would pass trivially).
    assert float(jnp.min(jnp.max(jnp.abs(images - states), axis=1))) > 1e-2
    scale = 1 + float(jnp.max(jnp.abs(images)))
    assert float(jnp.max(jnp.abs(round_trip - states))) < tolerance * scale
    assert abs(float(log_det)) < (1e-4 if dtype == jnp.float32 else 1e-10)


def test_involution_check_reports_the_errors():
    proposal = _random_proposal(jax.random.PRNGKey(8), 3, 32, jnp.float64)
    check = nx.involution_check(proposal, jax.random.PRNGKey(2))
    assert check.max_involution_error < 1e-9
    assert check.max_log_det < 1e-10


def test_each_henon_layer_inverts_and_has_unit_determinant():
    config = InvolutionConfig(dimension=3, num_layers=1)
    proposal = _random_proposal(jax.random.PRNGKey(3), 3, 32, jnp.float64)
    flow = flow_module(config)
    params = {"params": proposal.params}
    layer_params = {
        "params": {
            "potentials_0": proposal.params["potentials_0"],
            "eta_0": proposal.params["eta_0"],
        }
    }
    one_layer = HenonFlow(3, 1, 32)
    state = jax.random.normal(jax.random.PRNGKey(4), (6,), jnp.float64)
    image = one_layer.apply(layer_params, state)
    np.testing.assert_allclose(
        one_layer.apply(layer_params, image, method=HenonFlow.inverse), state, atol=1e-12
    )
    # forward: a' = b + eta, b' = -a + V(b)
    np.testing.assert_allclose(image[:3], state[3:] + proposal.params["eta_0"], atol=1e-12)
    jacobian = jax.jacfwd(lambda s: one_layer.apply(layer_params, s))(state)
    np.testing.assert_allclose(np.linalg.det(np.asarray(jacobian)), 1.0, atol=1e-10)
    # The whole flow too: g^-1(g(s)) = s with the shifts shared by both directions.
    whole = flow.apply(params, flow.apply(params, state), method=HenonFlow.inverse)
    np.testing.assert_allclose(whole, state, atol=1e-10)


def test_discriminator_is_antisymmetric_under_the_involution():
    config = InvolutionConfig(dimension=2, discriminator_hidden=16)
    proposal = _random_proposal(jax.random.PRNGKey(5), 2, 32, jnp.float64)
    states = 2.0 * jax.random.normal(jax.random.PRNGKey(6), (32, 4), jnp.float64)
    images = involution(proposal, states)
    params = discriminator_module(config).init(jax.random.PRNGKey(7), states[0], images[0])[
        "params"
    ]
    logits = discriminator_logit(config, params, states, images)
    swapped = discriminator_logit(config, params, images, involution(proposal, images))
    assert float(jnp.min(jnp.abs(logits))) > 0  # not trivially zero
    np.testing.assert_allclose(swapped, -logits, atol=1e-9)
    # At a fixed point of M (s = M s) the discriminator is 0, as log lambda is.
    np.testing.assert_allclose(discriminator_logit(config, params, states, states), 0.0, atol=0)


def test_configuration_rejects_bad_sizes():
    with pytest.raises(ValueError, match="num_layers"):
        InvolutionConfig(dimension=2, num_layers=0)
    with pytest.raises(TypeError, match="hidden"):
        InvolutionConfig(dimension=2, hidden=3.5)
    with pytest.raises(ValueError, match="swap_probability"):
        InvolutionConfig(dimension=2, swap_probability=1.5)


@pytest.mark.parametrize("num_layers,sign", [(5, 1.0), (4, -1.0)])
def test_untrained_swap_is_an_independence_proposal_from_the_gaussian_fit(num_layers, sign):
    """With the swap start, the untrained ``M`` maps ``(x, v)`` to ``(loc + L v, L^-1 (x - loc))``
    (up to the sign of the image, for an even number of layers): ``x'`` is a draw from
    ``N(loc, L L^T)`` whatever ``x`` is."""
    key_loc, key_scale, key_states = jax.random.split(jax.random.PRNGKey(11), 3)
    loc = jax.random.normal(key_loc, (4,), jnp.float64)
    scale = jnp.diag(jnp.array([0.5, 1.0, 2.0, 3.0])) + jnp.tril(
        jax.random.normal(key_scale, (4, 4), jnp.float64), -1
    )
    config = InvolutionConfig(dimension=4, num_layers=num_layers)
    proposal = init_proposal(jax.random.PRNGKey(0), config, loc=loc, scale=scale)
    states = 2.0 * jax.random.normal(key_states, (16, 8), jnp.float64)
    position, momentum = states[:, :4], states[:, 4:]
    expected_position = loc + sign * momentum @ scale.T
    expected_momentum = sign * jnp.linalg.solve(scale, (position - loc).T).T
    images = involution(proposal, states)
    np.testing.assert_allclose(images[:, :4], expected_position, atol=1e-12)
    np.testing.assert_allclose(images[:, 4:], expected_momentum, atol=1e-12)
    # The plain swap the sampler can mix in is that map with the sign +1, and an involution
    # with unit Jacobian on its own.
    swapped = swap_involution(proposal, states)
    np.testing.assert_allclose(swapped[:, :4], sign * (expected_position - loc) + loc, atol=1e-12)
    np.testing.assert_allclose(swapped[:, 4:], sign * expected_momentum, atol=1e-12)
    np.testing.assert_allclose(swap_involution(proposal, swapped), states, atol=1e-12)
    jacobian = jax.jacfwd(lambda state: swap_involution(proposal, state))(states[0])
    assert abs(float(jnp.linalg.slogdet(jacobian)[1])) < 1e-12


# One flow and one state size for every example, so that the round trip compiles once.
HENON = HenonFlow(dimension=3, num_layers=3, hidden=16, zero_output=False)


@jax.jit
def _henon_parameters(rng_key, shifts):
    # Glorot-normal kernels throughout (an untrained flow's zero output kernels and zero shifts
    # would make every potential vanish), in float64 (flax creates float32 parameters).
    params = HENON.init(rng_key, jnp.zeros(6))
    params = jax.tree.map(lambda leaf: leaf.astype(jnp.float64), params)
    for layer in range(HENON.num_layers):
        params["params"][f"eta_{layer}"] = shifts[layer]
    return params


@jax.jit
def _henon_round_trip(params, state):
    image = HENON.apply(params, state)
    back = HENON.apply(params, image, method=HenonFlow.inverse)
    jacobian = jax.jacfwd(lambda s: HENON.apply(params, s))(state)
    return image, back, jnp.linalg.det(jacobian)


def _signed(magnitudes):
    return st.tuples(st.sampled_from([-1.0, 1.0]), magnitudes).map(lambda pair: pair[0] * pair[1])


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**32 - 1),
    shifts=arrays(np.float64, (3, 3), elements=_signed(st.floats(0.1, 2.0))),
    state=arrays(np.float64, (6,), elements=st.floats(-3.0, 3.0)),
)
def test_henon_flow_inverts_exactly_with_unit_determinant_for_any_parameters(seed, shifts, state):
    params = _henon_parameters(jax.random.PRNGKey(seed), jnp.asarray(shifts))
    image, back, determinant = _henon_round_trip(params, jnp.asarray(state))
    assert image.dtype == jnp.float64
    assert float(jnp.max(jnp.abs(image - state))) > 1e-3
    scale = 1.0 + float(jnp.max(jnp.abs(image)))
    np.testing.assert_allclose(np.asarray(back), state, rtol=0, atol=1e-9 * scale)
    assert abs(float(determinant) - 1.0) < 1e-9
