"""The shared model plumbing: what it reports about a potential before anything compiles."""

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

import numpyro_extras as nx
from numpyro_extras.potential import evaluation_flops


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
