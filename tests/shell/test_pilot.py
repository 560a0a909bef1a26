"""The pilot NUTS chains shared by the learned proposals."""

import jax
import jax.numpy as jnp
import numpy as np

from numpyro_extras.shell.pilot import dispersed_nuts_draws, dispersed_starts, nuts_draws


def _gaussian_potential(x):
    # N(mean, diag(scale^2)) in two dimensions.
    mean = jnp.array([1.0, -2.0])
    scale = jnp.array([0.5, 2.0])
    return 0.5 * jnp.sum(((x - mean) / scale) ** 2)


def test_nuts_draws_match_a_gaussian_within_monte_carlo_error():
    starts = jnp.array([[3.0, 3.0], [-3.0, -3.0], [0.0, 0.0], [1.0, -1.0]])
    pilot = nuts_draws(
        jax.random.PRNGKey(0),
        _gaussian_potential,
        starts,
        num_warmup=300,
        num_samples=1000,
        progress_bar=False,
    )
    assert pilot.draws.shape == (4, 1000, 2)
    # Every transition takes at least one leapfrog step, warm-up included.
    assert pilot.gradient_evaluations >= 4 * 1300
    assert pilot.num_divergent == 0 and pilot.max_depth_share == 0.0
    draws = pilot.draws.reshape(-1, 2)
    # NUTS on a Gaussian: nearly independent draws; 4 sds of the mean of 4000 draws, with
    # the error bar doubled for autocorrelation.
    stderr = 2 * np.array([0.5, 2.0]) / np.sqrt(draws.shape[0])
    assert np.all(np.abs(draws.mean(0) - np.array([1.0, -2.0])) < 4 * stderr)
    assert np.allclose(draws.std(0), [0.5, 2.0], rtol=0.1)


def test_the_share_of_trees_cut_at_the_maximum_depth_is_counted_after_warm_up():
    """Neal's funnel at beta = 0.1 puts its mass at v near 200, where the x scale e^(v / 2) is
    vast: NUTS's trees run to the maximum depth (2^9 or more leapfrog steps)."""

    def tempered_funnel_potential(x):
        v, rest = x[0], x[1:]
        return 0.1 * (v**2 / 18 + jnp.sum(rest**2 / (2 * jnp.exp(v)) + v / 2))

    pilot = nuts_draws(
        jax.random.PRNGKey(0),
        tempered_funnel_potential,
        jnp.zeros((2, 6)),
        num_warmup=60,
        num_samples=30,
        progress_bar=False,
    )
    assert pilot.max_depth_share > 0.5
    assert pilot.gradient_evaluations >= 2 * 30 * 2**9 * pilot.max_depth_share


def test_dispersed_starts_replace_non_finite_points_by_the_initial_position():
    # Finite only on x > 0: the starts in the negative half are replaced.
    def potential(x):
        return jnp.where(x[0] > 0, 0.5 * jnp.sum(x**2), jnp.inf)

    initial = jnp.array([0.5, 0.5])
    starts = dispersed_starts(jax.random.PRNGKey(1), potential, initial, num_chains=64)
    assert starts.shape == (64, 2)
    assert np.all(np.abs(starts) <= 2.0)
    replaced = np.all(np.asarray(starts) == np.asarray(initial), axis=1)
    assert np.all(np.asarray(starts[~replaced, 0]) > 0)
    # About half of 64 uniform draws fall in the negative half.
    assert 10 < replaced.sum() < 54


def test_dispersed_nuts_draws_is_nuts_draws_from_dispersed_starts():
    key = jax.random.PRNGKey(2)
    initial = jnp.zeros(2)
    start_key, run_key = jax.random.split(key)
    expected = nuts_draws(
        run_key,
        _gaussian_potential,
        dispersed_starts(start_key, _gaussian_potential, initial, 3),
        num_warmup=50,
        num_samples=20,
        progress_bar=False,
    )
    pilot = dispersed_nuts_draws(
        key,
        _gaussian_potential,
        initial,
        num_chains=3,
        num_warmup=50,
        num_samples=20,
        progress_bar=False,
    )
    np.testing.assert_array_equal(pilot.draws, expected.draws)
    assert pilot.gradient_evaluations == expected.gradient_evaluations
