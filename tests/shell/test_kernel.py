"""The kernel shell: what is rebuilt for which model arguments, and the inner HMC/NUTS settings."""

import warnings

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
import pytest
from jax.random import PRNGKey
from numpyro.infer import HMC, MCMC, NUTS
from numpyro.infer.gibbs import GIBBS_SITES_KWARG

import numpyro_extras as nx
from numpyro_extras.shell.compiled_chain import evaluated_now
from numpyro_extras.shell.kernel import build_fingerprint, conditioning_values, hmc_settings


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


# Small training, so that the learned kernels build in seconds.
AI_TRAINING = dict(epochs=2, seed_epochs=1, seed_chains=2, seed_warmup=100, seed_samples=100)
VAE_TRAINING = dict(
    encoder_sizes=(16,),
    decoder_sizes=(16,),
    training_size=500,
    epochs=5,
    initial_epochs=10,
    num_data_chains=10,
    num_check_chains=5,
    num_check_steps=50,
    initial_exchange_scans=50,
    initial_warmup=50,
)
KERNELS = {
    "JointContinuousTempering": lambda model: nx.JointContinuousTempering(model),
    "GibbsContinuousTempering": lambda model: nx.GibbsContinuousTempering(model),
    "ReplicaExchange": lambda model: nx.ReplicaExchange(model),
    "AiSampler": lambda model: nx.AiSampler(model, train_kwargs=AI_TRAINING),
    "VAESLMC": lambda model: nx.VAESLMC(model, fit_kwargs=VAE_TRAINING),
}
# The model's Python runs in a first run beyond NUTS's: NUTS runs it in NumPyro's initialisation
# and once more to compile its potential, as every kernel does (the potential recorded once);
# the tempering kernels also record a prior draw for the base fit, and replica exchange records
# the prior and likelihood terms of its prior leg beside that draw.
RUNS_BEYOND_NUTS = {
    "JointContinuousTempering": 1,
    "GibbsContinuousTempering": 1,
    "ReplicaExchange": 2,
    "AiSampler": 0,
    "VAESLMC": 0,
}
SLOW_TO_BUILD = ("GibbsContinuousTempering", "AiSampler", "VAESLMC")


def first_run_model_runs(kernel, model_calls, y):
    """How often the model's Python runs in a first ``mcmc.run`` of ``kernel``."""
    before = model_calls["model"]
    sizes = dict(num_warmup=50, num_samples=50, num_chains=2, progress_bar=False)
    MCMC(kernel, chain_method="vectorized", **sizes).run(PRNGKey(0), y)
    return model_calls["model"] - before


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.slow) if name in SLOW_TO_BUILD else name
        for name in KERNELS
    ],
)
def test_the_model_runs_while_a_kernel_reads_it_and_never_in_its_programs(name, counted_model):
    """The model's Python runs while the kernel reads the model: as often as NUTS's first run
    plus one recorded program per further view of the model (prior draws, the prior and
    likelihood split), and never again in later runs, whatever new programs they compile."""
    model, calls = counted_model
    y = jnp.array([0.3, -1.2, 2.0, 0.7, 1.1, -0.4])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nuts_runs = first_run_model_runs(NUTS(model), calls, y)
        kernel = KERNELS[name](model)
        assert first_run_model_runs(kernel, calls, y) == nuts_runs + RUNS_BEYOND_NUTS[name]
        first = calls["model"]
        sizes = dict(num_warmup=50, num_samples=50, progress_bar=False)
        MCMC(kernel, num_chains=2, chain_method="vectorized", **sizes).run(PRNGKey(1), y)
        sizes.update(num_warmup=20, num_samples=30)
        MCMC(kernel, **sizes).run(PRNGKey(2), y)
    assert calls["model"] == first
