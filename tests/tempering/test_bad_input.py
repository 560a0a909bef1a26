"""Bad input gets a clear error naming the problem; numerical failure mid-run is a rejected,
divergent step, never a NaN estimate."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

import numpyro_extras as nx

BASE_2D = nx.GaussianBase(jnp.zeros(2), jnp.eye(2), jnp.asarray(0.0))


def _standard_normal_potential(position):
    return 0.5 * jnp.sum(position**2)


def _mcmc(kernel, num_samples=200, num_chains=1):
    return MCMC(
        kernel, num_warmup=100, num_samples=num_samples, num_chains=num_chains, progress_bar=False
    )


def mixture_with_assignments(data):
    weight = numpyro.sample("weight", dist.Beta(1.0, 1.0))
    with numpyro.plate("data", data.shape[0]):
        assignment = numpyro.sample("assignment", dist.Bernoulli(weight))
        numpyro.sample("obs", dist.Normal(assignment * 3.0, 1.0), obs=data)


@pytest.mark.parametrize("kernel_class", [nx.JointContinuousTempering, nx.GibbsContinuousTempering])
def test_discrete_latent_sites_are_named(kernel_class):
    mcmc = _mcmc(kernel_class(mixture_with_assignments, base=BASE_2D))
    with pytest.raises(ValueError, match=r"discrete latent sites \['assignment'\]") as error:
        mcmc.run(jax.random.PRNGKey(0), jnp.array([0.1, 2.9, 3.2]))
    # The error points to the package's kernels for discrete sites.
    assert "nx.ReplicaExchange(model, inner_kernel=nx.ACS)" in str(error.value)


def _normal_model():
    numpyro.sample("x", dist.Normal(0.0, 1.0))


def _other_model():
    numpyro.sample("y", dist.Normal(0.0, 1.0))


@pytest.mark.parametrize("kernel_class", [nx.JointContinuousTempering, nx.GibbsContinuousTempering])
def test_an_inner_kernel_instance_on_the_same_model_is_used(kernel_class):
    kernel = kernel_class(
        _normal_model,
        base=nx.GaussianBase(jnp.zeros(1), jnp.eye(1), jnp.asarray(0.0)),
        inner_kernel=numpyro.infer.NUTS(_normal_model, target_accept_prob=0.95),
    )
    assert kernel._hmc_settings["target_accept_prob"] == 0.95
    mcmc = _mcmc(kernel, num_samples=50)
    mcmc.run(jax.random.PRNGKey(0))
    assert mcmc.get_samples()["x"].shape == (50,)


def test_gibbs_settings_beside_an_inner_kernel_instance_are_named():
    with pytest.raises(ValueError, match=r"to the instance itself, got \['step_size'\]"):
        nx.GibbsContinuousTempering(
            _normal_model, inner_kernel=numpyro.infer.NUTS(_normal_model), step_size=0.1
        )


@pytest.mark.parametrize(
    "kernel_class",
    [nx.JointContinuousTempering, nx.GibbsContinuousTempering, nx.ReplicaExchange],
)
def test_an_inner_kernel_instance_on_another_model_is_refused(kernel_class):
    with pytest.raises(ValueError, match="built on another model, _other_model"):
        kernel_class(_normal_model, inner_kernel=numpyro.infer.NUTS(_other_model))


def test_fit_base_rejects_discrete_sites():
    with pytest.raises(ValueError, match="assignment"):
        nx.fit_base(jax.random.PRNGKey(0), mixture_with_assignments, (jnp.zeros(3),))


def _one_site():
    numpyro.sample("x", dist.Normal(0.0, 1.0))


@pytest.mark.parametrize(
    "setting, value, error, words",
    [
        ("num_optima", -1, ValueError, "num_optima must be an integer >= 0, got -1"),
        ("num_optima", 2.5, TypeError, "num_optima must be an integer >= 0, got 2.5"),
        ("num_optima", "512", TypeError, "num_optima must be an integer >= 0, got '512'"),
        ("num_optima", True, TypeError, "num_optima must be an integer >= 0, got True"),
        ("num_starts", 0, ValueError, "num_starts must be a positive integer, got 0"),
        ("num_starts", -2, ValueError, "num_starts must be a positive integer, got -2"),
        ("num_steps", 50.5, TypeError, "num_steps must be a positive integer, got 50.5"),
        ("num_steps", "10", TypeError, "num_steps must be a positive integer, got '10'"),
        ("importance_draws", 0, ValueError, "importance_draws must be a positive integer"),
        ("learning_rate", -1.0, ValueError, "learning_rate must be a positive number, got -1.0"),
        ("learning_rate", "0.1", TypeError, "learning_rate must be a positive number"),
        ("defensive_weight", 1.5, ValueError, r"defensive_weight must be a number in \(0, 1\)"),
        ("init_radius", float("inf"), ValueError, "init_radius must be a positive number"),
        ("bootstrap_rounds", -1, ValueError, "bootstrap_rounds must be an integer >= 0"),
        ("progress_bar", "no", TypeError, "progress_bar must be True or False, got 'no'"),
        ("method", "laplace", ValueError, "method must be one of"),
        ("guide", "full", ValueError, "guide must be one of"),
        ("flat_model", 3, TypeError, "flat_model must be a FlatModel"),
    ],
)
def test_fit_base_checks_every_setting_before_any_work(setting, value, error, words):
    with pytest.raises(error, match=words):
        nx.fit_base(jax.random.PRNGKey(0), _one_site, **{setting: value})


@pytest.mark.parametrize("kernel_class", [nx.JointContinuousTempering, nx.ReplicaExchange])
def test_fit_base_kwargs_are_checked_when_the_kernel_is_built(kernel_class):
    with pytest.raises(
        TypeError, match=r"fit_base_kwargs=...\): unknown fit_base setting \['num_start'\]"
    ):
        kernel_class(_one_site, fit_base_kwargs={"num_start": 8})
    with pytest.raises(ValueError, match=r"fit_base_kwargs=...\): num_steps must be a positive"):
        kernel_class(_one_site, fit_base_kwargs={"num_steps": 0})


def test_potential_fn_needs_base():
    with pytest.raises(ValueError, match="base"):
        nx.JointContinuousTempering(potential_fn=_standard_normal_potential)


def test_model_or_potential_not_both():
    with pytest.raises(ValueError, match="exactly one"):
        nx.GibbsContinuousTempering()


def test_base_must_be_a_gaussian_base():
    with pytest.raises(TypeError, match="GaussianBase"):
        nx.GibbsContinuousTempering(
            potential_fn=_standard_normal_potential, base=dist.Normal(jnp.zeros(2))
        )


@pytest.mark.parametrize(
    ("base", "message"),
    [
        (nx.GaussianBase(jnp.zeros(2), jnp.eye(3), jnp.asarray(0.0)), "scale_tril must have"),
        (nx.GaussianBase(jnp.zeros(2), -jnp.eye(2), jnp.asarray(0.0)), "not a normalised"),
        (nx.GaussianBase(jnp.zeros(2), jnp.ones((2, 2)), jnp.asarray(0.0)), "lower triangular"),
        (nx.GaussianBase(jnp.zeros(2), jnp.eye(2), jnp.asarray(jnp.nan)), "log_zeta"),
        (nx.GaussianBase(jnp.zeros((2, 1)), jnp.eye(2), jnp.asarray(0.0)), "vector"),
    ],
)
def test_malformed_base_fails_at_construction(base, message):
    with pytest.raises(ValueError, match=message):
        nx.JointContinuousTempering(potential_fn=_standard_normal_potential, base=base)


def test_base_of_wrong_dimension_for_the_model():
    def model():
        numpyro.sample("x", dist.Normal(jnp.zeros(3)).to_event(1))

    mcmc = _mcmc(nx.JointContinuousTempering(model, base=BASE_2D))
    with pytest.raises(ValueError, match="dimension 2 but the model has 3"):
        mcmc.run(jax.random.PRNGKey(0))


def test_non_finite_potential_at_initial_point():
    def broken_potential(position):
        return jnp.where(position[0] > -100, jnp.nan, 0.0) + jnp.sum(position**2)

    mcmc = _mcmc(nx.GibbsContinuousTempering(potential_fn=broken_potential, base=BASE_2D))
    with pytest.raises(ValueError, match="not finite at the initial point"):
        mcmc.run(jax.random.PRNGKey(0))


@pytest.mark.parametrize("kernel_class", [nx.JointContinuousTempering, nx.GibbsContinuousTempering])
def test_nan_inside_trajectories_is_a_rejected_divergent_step(kernel_class):
    """A potential that is NaN on part of the space: steps into it are rejected and counted as
    divergent, the draws never enter it, and log Z stays finite."""

    def potential_with_hole(position):
        return jnp.where(position[0] > 1.5, jnp.nan, 0.5 * jnp.sum(position**2))

    mcmc = _mcmc(kernel_class(potential_fn=potential_with_hole, base=BASE_2D), num_samples=1000)
    mcmc.run(jax.random.PRNGKey(1))
    fields = mcmc.get_extra_fields()
    assert np.any(fields["diverging"])
    assert np.all(np.isfinite(fields["delta"]))
    assert np.all(np.asarray(mcmc.get_samples())[:, 0] <= 1.5)
    evidence = nx.log_marginal_likelihood(mcmc, check_base=False)
    assert np.isfinite(evidence.log_z) and np.isfinite(evidence.stderr)


def test_estimators_need_a_tempering_run():
    from numpyro.infer import NUTS

    mcmc = _mcmc(NUTS(potential_fn=_standard_normal_potential))
    mcmc.run(jax.random.PRNGKey(0), init_params=jnp.zeros(2))
    with pytest.raises(TypeError, match="JointContinuousTempering"):
        nx.log_marginal_likelihood(mcmc)


def test_init_params_of_wrong_dimension():
    mcmc = _mcmc(nx.GibbsContinuousTempering(potential_fn=_standard_normal_potential, base=BASE_2D))
    with pytest.raises(ValueError, match="3 unconstrained dimensions"):
        mcmc.run(jax.random.PRNGKey(0), init_params=jnp.zeros(3))


def test_non_finite_delta_cannot_reach_the_estimator():
    with pytest.raises(ValueError, match="non-finite"):
        nx.tempering_log_normalizer(np.array([0.0, np.nan, 1.0, 2.0]), 0.0)


@pytest.mark.parametrize("chain_method", ["sequential", "parallel", "vectorized"])
def test_base_is_fitted_once_per_run_and_refitted_for_new_data(monkeypatch, chain_method):
    from numpyro_extras.tempering import base_fit

    fitted_for = []

    def counting_fit(rng_key, model, model_args=(), model_kwargs=None, **kwargs):
        fitted_for.append(float(model_args[0]))
        return base_fit.BaseFit(nx.GaussianBase(jnp.zeros(1), jnp.eye(1), jnp.asarray(0.0)), ())

    monkeypatch.setattr(base_fit, "fit_base_with_warnings", counting_fit)

    def model(shift):
        numpyro.sample("x", dist.Normal(shift, 1.0))

    mcmc = MCMC(
        nx.GibbsContinuousTempering(model, num_steps=2),
        num_warmup=5,
        num_samples=5,
        num_chains=2,
        chain_method=chain_method,
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(0), 0.5)
    mcmc.run(jax.random.PRNGKey(1), 0.5)
    assert fitted_for == [0.5]
    mcmc.run(jax.random.PRNGKey(2), 1.5)
    assert fitted_for == [0.5, 1.5]


# The build cache is the kernels' shared shell: one kernel class exercises it.
@pytest.mark.parametrize("kernel_class", [nx.GibbsContinuousTempering])
def test_parallel_reruns_reuse_the_built_kernel(kernel_class):
    """Under pmap init is traced: nothing cached on the kernel may hold a tracer into a re-run."""

    def model(shift):
        numpyro.sample("x", dist.Normal(shift, 1.0))

    base = nx.GaussianBase(jnp.zeros(1), jnp.eye(1), jnp.asarray(0.0))
    mcmc = MCMC(
        kernel_class(model, base=base),
        num_warmup=20,
        num_samples=20,
        num_chains=2,
        chain_method="parallel",
        progress_bar=False,
    )
    for seed, shift in [(0, 0.5), (1, 0.5), (2, 1.5)]:
        mcmc.run(jax.random.PRNGKey(seed), shift)
        assert mcmc.get_samples()["x"].shape == (40,)


@pytest.mark.parametrize("flag", ["adapt_log_zeta", "base_proposals", "replica_moves"])
def test_a_flag_given_as_a_string_is_refused(flag):
    with pytest.raises(TypeError, match=f"{flag} must be True or False, got 'no'"):
        nx.JointContinuousTempering(_one_site, **{flag: "no"})
