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
