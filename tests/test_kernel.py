"""The kernel shell: what is rebuilt for which model arguments, and the inner HMC/NUTS settings."""

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import HMC, NUTS
from numpyro.infer.gibbs import GIBBS_SITES_KWARG

from numpyro_extras.compiled_chain import evaluated_now
from numpyro_extras.kernel import build_fingerprint, conditioning_values, hmc_settings


def test_build_fingerprint_counts_gibbs_conditioning_values_by_shape_only():
    data = jnp.arange(3.0)

    def fingerprint(data, conditioning):
        return build_fingerprint((data,), {"scale": 2.0, GIBBS_SITES_KWARG: conditioning})

    first = fingerprint(data, {"mu": jnp.array(1.0)})
    assert first == fingerprint(data, {"mu": jnp.array(-4.0)})
    assert first != fingerprint(data, {"mu": jnp.zeros(2)})
    assert first != fingerprint(data + 1.0, {"mu": jnp.array(1.0)})
    assert first != build_fingerprint((data,), {"scale": 2.0})
    assert conditioning_values({GIBBS_SITES_KWARG: {"mu": 1.0}}) == {"mu": 1.0}
    assert conditioning_values(None) == {}


def test_hmc_settings_from_a_class_or_an_instance():
    def model():
        numpyro.sample("x", dist.Normal())

    algo, settings = hmc_settings(NUTS, target_accept_prob=0.9)
    assert algo == "NUTS" and settings["target_accept_prob"] == 0.9
    assert settings["max_tree_depth"] == 10
    algo, settings = hmc_settings(HMC(model, num_steps=7, dense_mass=True), owner_model=model)
    assert algo == "HMC" and settings["num_steps"] == 7 and settings["dense_mass"] is True
    algo, settings = hmc_settings(HMC)
    assert settings["trajectory_length"] == pytest.approx(2 * 3.141592653589793)

    with pytest.raises(TypeError, match="Unknown inner kernel settings"):
        hmc_settings(NUTS, trajectory_lenght=1.0)
    with pytest.raises(ValueError, match="to the instance itself"):
        hmc_settings(NUTS(model), owner_model=model, step_size=0.1)
    # The enclosing kernel's own defaults give way to the instance's; a changed one does not.
    defaults = {"step_size": 1.0}
    _, settings = hmc_settings(
        NUTS(model, step_size=0.5), owner_model=model, owner_defaults=defaults, step_size=1.0
    )
    assert settings["step_size"] == 0.5
    with pytest.raises(ValueError, match=r"got \['step_size'\]"):
        hmc_settings(NUTS(model), owner_model=model, owner_defaults=defaults, step_size=0.1)
    # An instance's model must be the enclosing kernel's: else it would be silently ignored.
    with pytest.raises(ValueError, match="built on a potential_fn, but this kernel samples model"):
        hmc_settings(NUTS(potential_fn=lambda x: 0.5 * x @ x), owner_model=model)
    with pytest.raises(ValueError, match="this kernel samples a potential_fn"):
        hmc_settings(NUTS(model))
    with pytest.raises(ValueError, match="inner_kernel must be"):
        hmc_settings(dist.Normal)
    with pytest.raises(ValueError, match="target_accept_prob"):
        hmc_settings(NUTS, target_accept_prob=1.5)


def test_evaluated_now_computes_under_a_trace_and_stages_jit_traces_outside_one():
    """Inside a trace (init under pmap) concrete work is computed; outside one, a jit traced
    within the context keeps its constant operations in the program instead of compiling each
    one eagerly."""

    def staged_primitives():
        jaxpr = jax.make_jaxpr(lambda x: x + jnp.sin(jnp.arange(3.0)))(1.0)
        return {equation.primitive.name for equation in jaxpr.jaxpr.eqns}

    with evaluated_now(jax.random.PRNGKey(0)):
        assert "sin" in staged_primitives()

    def init(rng_key):
        with evaluated_now(rng_key):
            value = jnp.sin(1.0)
        assert not isinstance(value, jax.core.Tracer)
        return rng_key

    jax.jit(init)(jax.random.PRNGKey(0))
