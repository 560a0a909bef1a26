"""The shared model plumbing: what it reports about a potential before anything compiles."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax.flatten_util import ravel_pytree
from numpyro.infer.gibbs import prototype_trace
from numpyro.infer.util import initialize_model
from scipy import stats

import numpyro_extras as nx
from numpyro_extras.model.potential import (
    continuous_latent_sites,
    discrete_latent_sites,
    evaluation_flops,
    trace_once,
)


def test_evaluation_flops_counts_a_product_from_shapes_alone():
    # A dot product of n values: n multiplications and n additions (XLA's count).
    shape = jax.ShapeDtypeStruct((100,), jnp.float32)
    assert evaluation_flops(lambda x: x @ x, shape) == 200.0
    assert evaluation_flops(lambda x: x @ x, jnp.ones(100)) == 200.0


def test_evaluation_flops_grows_with_a_models_data():
    def model(y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    def flops(num_data):
        flat = nx.flatten_model(jax.random.PRNGKey(0), model, (jnp.zeros(num_data),))
        return evaluation_flops(flat.potential_fn, flat.initial_position)

    small, large = flops(10), flops(1000)
    assert 0 < small < large < float("inf")
    # Each observation's log density costs the same few operations.
    assert 50 * small < large < 150 * small


def _mixed_sites_model(y):
    numpyro.sample("k", dist.Bernoulli(0.5))
    scale = numpyro.sample("scale", dist.HalfNormal(1.0))
    numpyro.sample("count", dist.Poisson(3.0))
    numpyro.sample("y", dist.Normal(0.0, scale), obs=y)


def _value_branching_model(y):
    # Python control flow on a drawn value: the abstract trace cannot run it.
    scale = numpyro.sample("scale", dist.HalfNormal(1.0))
    if float(scale) > 0.5:
        numpyro.sample("k", dist.Bernoulli(0.5))
    numpyro.sample("y", dist.Normal(0.0, scale), obs=y)


def test_site_kinds_without_compiling_the_model(caplog):
    # The sites' kinds come from an abstract trace: running the model op by op would compile
    # each of its operations.
    y = jnp.zeros(3)
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        assert discrete_latent_sites(_mixed_sites_model, (y,)) == ["k", "count"]
        assert continuous_latent_sites(_mixed_sites_model, (y,)) == ["scale"]
    assert not [record for record in caplog.records if "Compiling" in record.getMessage()]


def test_site_kinds_of_a_model_branching_on_its_values():
    # A model that needs concrete values is run eagerly, as NumPyro's prototype trace runs it.
    y = jnp.zeros(3)
    model_trace = prototype_trace(_value_branching_model, jax.random.PRNGKey(0), (y,), {})
    assert discrete_latent_sites(_value_branching_model, (y,)) == [
        name for name in ("k",) if name in model_trace
    ]
    assert continuous_latent_sites(_value_branching_model, (y,)) == ["scale"]


def _zebra_first_model(y):
    # Sites out of alphabetical order, one constrained.
    zebra = numpyro.sample("zebra", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    alpha = numpyro.sample("alpha", dist.HalfNormal(1.0))
    numpyro.sample("y", dist.Normal(zebra.sum(), alpha), obs=y)


def test_flat_model_starts_where_numpyro_starts():
    # The initial point is found in one compiled loop over a batch of one key; it is the point
    # NumPyro finds for that key, and latent_sites keep the model's order.
    y = jnp.array([0.3, -1.2])
    key = jax.random.PRNGKey(7)
    flat = nx.flatten_model(key, _zebra_first_model, (y,))
    numpyro_info = initialize_model(key, _zebra_first_model, model_args=(y,))
    expected, _ = ravel_pytree(numpyro_info.param_info.z)
    np.testing.assert_array_equal(flat.initial_position, expected)
    assert flat.latent_sites == ("zebra", "alpha")
    assert flat.potential_fn(flat.initial_position) == numpyro_info.potential_fn(
        numpyro_info.param_info.z
    )


def test_discrete_sites_summed_out_or_refused_by_name():
    def mixture(data):
        mu = numpyro.sample("mu", dist.Normal(0.0, 3.0))
        with numpyro.plate("points", data.shape[0]):
            signal = numpyro.sample("signal", dist.Bernoulli(0.3))
            numpyro.sample("data", dist.Normal(jnp.where(signal, mu, 0.0), 1.0), obs=data)

    data = jnp.array([0.1, 2.9])
    with pytest.raises(ValueError, match=r"discrete latent sites \['signal'\]"):
        nx.flatten_model(jax.random.PRNGKey(0), mixture, (data,))
    flat = nx.flatten_model(jax.random.PRNGKey(0), mixture, (data,), sum_out_discrete=True)
    assert flat.latent_sites == ("mu",)
    # The potential sums the indicators out: -log N(mu; 0, 3) prod_i (0.7 N(y_i; 0, 1) + 0.3
    # N(y_i; mu, 1)) at mu = 1.
    densities = 0.7 * stats.norm.pdf(np.asarray(data)) + 0.3 * stats.norm.pdf(np.asarray(data), 1.0)
    expected = -(stats.norm.logpdf(1.0, 0.0, 3.0) + np.sum(np.log(densities)))
    assert float(flat.potential_fn(jnp.array([1.0]))) == pytest.approx(expected, rel=1e-10)

    def counts(data):
        rate = numpyro.sample("rate", dist.Gamma(2.0, 1.0))
        count = numpyro.sample("count", dist.Poisson(rate))
        numpyro.sample("data", dist.Normal(count, 1.0), obs=data)

    with pytest.raises(ValueError, match=r"discrete latent sites \['count'\]"):
        nx.flatten_model(jax.random.PRNGKey(0), counts, (2.0,), sum_out_discrete=True)

    def flips():
        numpyro.sample("flip", dist.Bernoulli(0.5))

    with pytest.raises(ValueError, match=r"every latent site of the model \(\['flip'\]\)"):
        nx.flatten_model(jax.random.PRNGKey(0), flips, sum_out_discrete=True)


def test_check_finite_potential_names_the_chain_and_the_shape():
    """One compiled check for a batch of starts: the first failing chain is named; a
    potential that is not scalar is refused before anything is evaluated."""
    from numpyro_extras.model.potential import check_finite_potential

    potential_fn = lambda x: jnp.sum(x**2) + jnp.log(x[0])  # noqa: E731
    starts = jnp.array([[1.0, 2.0], [1.0, 0.0], [-1.0, 0.0]])
    check_finite_potential(potential_fn, starts[:2])
    with pytest.raises(ValueError, match="not finite at the start of chain 2"):
        check_finite_potential(potential_fn, starts, "the start")
    with pytest.raises(ValueError, match="not finite at the initial point \\(value nan"):
        check_finite_potential(potential_fn, starts[2])
    with pytest.raises(ValueError, match="must return a scalar, but returned shape \\(2,\\)"):
        check_finite_potential(lambda x: x**2, starts)


def test_flat_potential_runs_the_model_once_for_every_program(counted_model):
    model, calls = counted_model
    y = jnp.array([0.3, -1.2, 2.0, 0.7])
    flat = nx.flatten_model(jax.random.PRNGKey(0), model, (y,))
    built = calls["model"]
    positions = flat.initial_position + jnp.linspace(-1.0, 1.0, 6)[:, None]
    energies = jax.jit(jax.vmap(flat.potential_fn))(positions)
    gradients = jax.vmap(jax.grad(flat.potential_fn))(positions)
    hessian = jax.hessian(flat.potential_fn)(positions[0])
    assert calls["model"] == built

    # NumPyro's own potential, which runs the model at every trace, gives the same numbers.
    def numpyro_energy(position):
        return numpyro.infer.util.potential_energy(model, (y,), {}, flat.unravel_fn(position))

    np.testing.assert_allclose(energies, jax.vmap(numpyro_energy)(positions), rtol=1e-12)
    np.testing.assert_allclose(gradients, jax.vmap(jax.grad(numpyro_energy))(positions), rtol=1e-12)
    np.testing.assert_allclose(hessian, jax.hessian(numpyro_energy)(positions[0]), rtol=1e-12)


def test_trace_once_records_a_program_per_kind_of_argument():
    calls = {"fn": 0}

    def fn(x, values):
        calls["fn"] += 1
        return {"sum": jnp.sum(x * values["k"]), "shape": jnp.zeros(x.shape)}

    replay = trace_once(fn, jnp.ones(3), {"k": jnp.arange(3)})
    assert calls["fn"] == 1
    out = jax.jit(replay)(jnp.array([1.0, 2.0, 3.0]), {"k": jnp.array([1, 0, 2])})
    assert calls["fn"] == 1
    assert float(out["sum"]) == 7.0 and out["shape"].shape == (3,)
    # Integer values given as floats, to differentiate through them: one more program.
    gradient = jax.grad(lambda k: replay(jnp.array([1.0, 2.0, 3.0]), {"k": k})["sum"])(
        jnp.array([1.0, 0.0, 2.0])
    )
    np.testing.assert_array_equal(gradient, [1.0, 2.0, 3.0])
    assert calls["fn"] == 2
    replay(jnp.zeros(3), {"k": jnp.ones(3)})
    assert calls["fn"] == 2


def test_split_views_share_the_flat_models_reading_and_match_numpyro(counted_model):
    """With the flat model handed over, the split records one program for its prior and
    likelihood terms and draws from the prior with the flat model's recorded draw; the terms
    add up to NumPyro's potential, and the draws are Predictive's for the same key."""
    from numpyro_extras.model.potential import split_model

    model, calls = counted_model
    y = jnp.array([0.3, -1.2, 2.0, 0.7])
    flat = nx.flatten_model(jax.random.PRNGKey(0), model, (y,))
    built = calls["model"]
    split = split_model(jax.random.PRNGKey(0), model, (y,), flat_model=flat)
    assert calls["model"] == built + 1
    positions = flat.initial_position + jnp.linspace(-1.0, 1.0, 6)[:, None]
    prior = jax.vmap(lambda x: split.log_prior_fn(x, {}))(positions)
    likelihood = jax.jit(jax.vmap(lambda x: split.log_likelihood_fn(x, {})))(positions)
    scaled = jax.vmap(lambda x: split.scaled_log_density_fn(x, {}, 0.5, 0.25))(positions)
    draws, discrete = split.sample_prior_fn(jax.random.PRNGKey(3), 5)
    assert discrete == {}
    np.testing.assert_array_equal(draws, flat.sample_prior_fn(jax.random.PRNGKey(3), 5))
    assert calls["model"] == built + 2

    def numpyro_energy(position):
        return numpyro.infer.util.potential_energy(model, (y,), {}, flat.unravel_fn(position))

    def numpyro_likelihood(position):
        values = flat.constrain_fn(flat.unravel_fn(position))
        return numpyro.infer.util.log_likelihood(model, values, y, batch_ndims=0)["y"].sum()

    np.testing.assert_allclose(prior + likelihood, -jax.vmap(numpyro_energy)(positions), rtol=1e-12)
    np.testing.assert_allclose(likelihood, jax.vmap(numpyro_likelihood)(positions), rtol=1e-12)
    np.testing.assert_allclose(scaled, 0.5 * prior + 0.25 * likelihood, rtol=1e-12)
    predictive = numpyro.infer.Predictive(model, num_samples=5, parallel=False)
    expected = jax.vmap(flat.ravel_fn)(predictive(jax.random.PRNGKey(3), y))
    np.testing.assert_allclose(draws, expected, rtol=1e-12)
