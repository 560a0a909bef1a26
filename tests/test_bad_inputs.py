"""Bad input to every family's entry points: each gets an error that names the argument or
site, what was given and what is accepted."""

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

import numpyro_extras as nx


def _one_site():
    numpyro.sample("x", dist.Normal(0.0, 1.0))


@pytest.mark.parametrize(
    "kernel_class",
    [
        nx.JointContinuousTempering,
        nx.GibbsContinuousTempering,
        nx.ReplicaExchange,
        nx.AiSampler,
        nx.VAESLMC,
    ],
)
def test_an_init_strategy_given_by_name_is_refused_when_the_kernel_is_built(kernel_class):
    with pytest.raises(TypeError, match=r"init_strategy must be .*numpyro.infer.init_to_uniform"):
        kernel_class(_one_site, init_strategy="uniform")


def test_model_args_that_are_not_a_tuple_are_named():
    data = jnp.array([0.5, 1.5])

    def regression(y):
        loc = numpyro.sample("loc", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(loc, 1.0), obs=y)

    for call in (
        lambda: nx.fit_base(jax.random.PRNGKey(0), regression, data),
        lambda: nx.flatten_model(jax.random.PRNGKey(0), regression, data),
        lambda: nx.ais(
            jax.random.PRNGKey(0), regression, data, num_particles=8, num_temperatures=4
        ),
    ):
        with pytest.raises(TypeError, match=r"model_args must be a tuple .* e.g. \(y,\)"):
            call()
    with pytest.raises(TypeError, match="model_kwargs must be a dict"):
        nx.flatten_model(jax.random.PRNGKey(0), regression, (data,), [1])


def test_non_finite_observed_data_is_named():
    def regression(y):
        loc = numpyro.sample("loc", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(loc, 1.0), obs=y)

    data = jnp.array([0.5, jnp.nan, jnp.inf])
    words = r"observed data of site 'y' \(2 of 3 values\) contain NaN or infinite values"
    with pytest.raises(ValueError, match=words):
        nx.flatten_model(jax.random.PRNGKey(0), regression, (data,))
    with pytest.raises(ValueError, match=words):
        nx.ais(jax.random.PRNGKey(0), regression, (data,), num_particles=8, num_temperatures=4)
    with pytest.raises(ValueError, match=words):
        MCMC(nx.JointContinuousTempering(regression), num_warmup=5, num_samples=5).run(
            jax.random.PRNGKey(0), data
        )


def test_ais_of_a_model_without_latent_sites_says_so():
    def observed_only():
        numpyro.sample("y", dist.Normal(0.0, 1.0), obs=0.5)

    with pytest.raises(ValueError, match="needs a model with at least one latent sample site"):
        nx.ais(jax.random.PRNGKey(0), observed_only, num_particles=8, num_temperatures=4)


def test_ais_refuses_an_improper_prior():
    def improper_location(y):
        a = numpyro.sample("a", dist.ImproperUniform(dist.constraints.real, (), ()))
        numpyro.sample("obs", dist.Normal(a, 1.0), obs=y)

    for base in ("auto", "prior"):
        with pytest.raises(ValueError, match=r"nx.ais estimates .* sites \['a'\] have one"):
            nx.ais(
                jax.random.PRNGKey(0),
                improper_location,
                (1.5,),
                base=base,
                num_particles=8,
                num_temperatures=4,
            )


def test_a_seed_or_none_in_place_of_a_prng_key_is_named():
    for call in (
        lambda key: nx.ais(key, _one_site, num_particles=8, num_temperatures=4),
        lambda key: nx.fit_base(key, _one_site),
        lambda key: nx.flatten_model(key, _one_site),
        lambda key: nx.random_rbm(key, 3, 3),
        lambda key: nx.train_ai_sampler(key, _one_site),
        lambda key: nx.fit_vae_proposal(key, _one_site),
    ):
        with pytest.raises(TypeError, match=r"rng_key must be a JAX PRNG key \(not a seed: "):
            call(0)
        with pytest.raises(TypeError, match=r"rng_key must be a JAX PRNG key .* got None"):
            call(None)
    machine = nx.random_rbm(jax.random.PRNGKey(0), 3, 3)
    with pytest.raises(TypeError, match="rng_key must be a JAX PRNG key"):
        nx.marginalized_ais_boltzmann(7, machine, num_particles=8, num_temperatures=4)


def test_a_model_that_is_not_callable_is_named():
    for call in (
        lambda: nx.ais(jax.random.PRNGKey(0), "model", num_particles=8, num_temperatures=4),
        lambda: nx.flatten_model(jax.random.PRNGKey(0), "model"),
        lambda: nx.fit_base(jax.random.PRNGKey(0), "model"),
    ):
        with pytest.raises(TypeError, match=r"model must be a NumPyro model.* got 'model' \(str\)"):
            call()


@pytest.mark.parametrize(
    "reader",
    [
        nx.log_marginal_likelihood,
        nx.to_inference_data,
        nx.bridge_sampling,
        nx.tempering_diagnostics,
        nx.exchange_diagnostics,
        nx.tempered_samples,
    ],
)
def test_a_reader_of_runs_given_something_else_names_what_it_expects(reader):
    with pytest.raises(TypeError, match=r"xpected a numpyro.infer.MCMC run .* got dict"):
        reader({"x": jnp.zeros(3)})


def test_inference_data_of_a_run_not_yet_run_says_so():
    mcmc = MCMC(nx.JointContinuousTempering(_one_site), num_warmup=5, num_samples=5)
    with pytest.raises(ValueError, match="nx.to_inference_data: run the MCMC first"):
        nx.to_inference_data(mcmc)


def test_learned_kernels_check_their_training_settings_when_built():
    with pytest.raises(TypeError, match=r"AiSampler\(train_kwargs=...\) got unknown settings"):
        nx.AiSampler(_one_site, train_kwargs={"num_epochs": 3})
    with pytest.raises(ValueError, match=r"AiSampler\(train_kwargs=...\): epochs must be a pos"):
        nx.AiSampler(_one_site, train_kwargs={"epochs": 0})
    with pytest.raises(TypeError, match=r"hidden must be a positive integer, got 2.5"):
        nx.AiSampler(_one_site, train_kwargs={"hidden": 2.5})
    # The kernel passes its own potential to the training.
    with pytest.raises(TypeError, match=r"unknown settings \['potential_fn'\]"):
        nx.AiSampler(_one_site, train_kwargs={"potential_fn": lambda x: x})
    with pytest.raises(TypeError, match=r"VAESLMC\(fit_kwargs=...\) got unknown settings"):
        nx.VAESLMC(_one_site, fit_kwargs={"epoch": 3})
    with pytest.raises(TypeError, match=r"unknown settings \['num_models'\]"):
        nx.VAESLMC(_one_site, fit_kwargs={"num_models": 2})


def test_sizes_and_labels_of_the_wrong_kind_are_named():
    with pytest.raises(TypeError, match=r"size must be an even integer >= 2 .* got 2.5 \(float\)"):
        nx.ising_model(2.5)
    with pytest.raises(ValueError, match="even lattice size >= 2, got 3"):
        nx.ising_model(3)
    with pytest.raises(TypeError, match=r"num_visible must be a positive integer, got 2.5"):
        nx.random_rbm(jax.random.PRNGKey(0), 2.5, 3)
    with pytest.raises(TypeError, match="labels must be numeric mode labels"):
        nx.mode_switch_rate("abc")
    with pytest.raises(ValueError, match="labels need at least 2 draws per chain"):
        nx.mode_switch_rate([1])
