"""nx.ais checks every setting before any work: a bad value is an error naming the argument, never
a silently coerced run or another run's cached result."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import numpyro_extras as nx
from numpyro_extras.annealing import ais
from numpyro_extras.annealing.driver import inverse_temperature_schedule
from numpyro_extras.results.evidence import evidence_from_log_weights

GOOD = dict(num_particles=20, num_temperatures=5, base="prior", progress_bar=False)


def model_that_must_not_run():
    # Validation comes first: tracing the model (or fitting a base, or running) would get here.
    raise AssertionError("nx.ais did work before rejecting its arguments")


def tiny_model(y):
    x = numpyro.sample("x", dist.Normal(0.0, 1.0))
    numpyro.sample("y", dist.Normal(x, 1.0), obs=y)


BAD_SETTINGS = [
    # (override, exception, the argument the message must name)
    (dict(num_particles="100"), TypeError, "num_particles"),
    (dict(num_particles=50.5), TypeError, "num_particles"),
    (dict(num_particles=100.0), TypeError, "num_particles"),
    (dict(num_particles=True), TypeError, "num_particles"),
    (dict(num_particles=0), ValueError, "num_particles"),
    (dict(num_particles=-5), ValueError, "num_particles"),
    (dict(num_temperatures=50.5), TypeError, "num_temperatures"),
    (dict(num_temperatures="100"), TypeError, "num_temperatures"),
    (dict(num_temperatures=True), TypeError, "num_temperatures"),
    (dict(num_temperatures=1), ValueError, "num_temperatures"),
    (dict(num_temperatures=0), ValueError, "num_temperatures"),
    (dict(step_size="0.1"), TypeError, "step_size"),
    (dict(step_size=0.0), ValueError, "step_size"),
    (dict(step_size=-0.1), ValueError, "step_size"),
    (dict(step_size=float("inf")), ValueError, "step_size"),
    (dict(step_size=float("nan")), ValueError, "step_size"),
    (dict(target_accept=0.0), ValueError, "target_accept"),
    (dict(target_accept=1.0), ValueError, "target_accept"),
    (dict(target_accept=1.5), ValueError, "target_accept"),
    (dict(target_accept="0.8"), TypeError, "target_accept"),
    (dict(num_leapfrog_steps=0), ValueError, "num_leapfrog_steps"),
    (dict(num_leapfrog_steps=2.5), TypeError, "num_leapfrog_steps"),
    (dict(num_mcmc_steps=0), ValueError, "num_mcmc_steps"),
    (dict(num_mcmc_steps="2"), TypeError, "num_mcmc_steps"),
    (dict(num_pilot_steps=-1), ValueError, "num_pilot_steps"),
    (dict(num_pilot_steps=1.0), TypeError, "num_pilot_steps"),
    (dict(adaptation_rate=0.0), ValueError, "adaptation_rate"),
    (dict(adaptation_rate=-1.0), ValueError, "adaptation_rate"),
    (dict(adaptation_rate="1"), TypeError, "adaptation_rate"),
    (dict(base="fit"), ValueError, "base"),
    (dict(base=np.eye(2)), TypeError, "GaussianBase"),
    (dict(reverse="yes", init_samples={"x": jnp.zeros(3)}), TypeError, "reverse"),
    (dict(adapt_mass=1), TypeError, "adapt_mass"),
    (dict(progress_bar=None), TypeError, "progress_bar"),
    (dict(transition="hmc"), TypeError, "transition"),
    (dict(schedule="cosine"), ValueError, "schedule"),
    (dict(schedule=np.array([0.0, 0.5, 0.9])), ValueError, "start at 0 and end at 1"),
    (dict(reverse=True), ValueError, "init_samples"),
]


@pytest.mark.parametrize(
    "override, exception, name",
    BAD_SETTINGS,
    ids=[f"{next(iter(o))}={next(iter(o.values()))!r}" for o, _, _ in BAD_SETTINGS],
)
def test_bad_setting_is_rejected_before_any_work(override, exception, name):
    with pytest.raises(exception, match=name):
        ais(jax.random.PRNGKey(0), model_that_must_not_run, **(GOOD | override))


def test_a_rejected_count_never_returns_the_cached_run_of_another():
    y = jnp.array(0.3)
    ais(jax.random.PRNGKey(0), tiny_model, (y,), **GOOD)
    # int(5.5) == 5 would find the run just cached; the float must be refused instead.
    with pytest.raises(TypeError, match="num_temperatures"):
        ais(jax.random.PRNGKey(0), tiny_model, (y,), **(GOOD | dict(num_temperatures=5.5)))
    with pytest.raises(TypeError, match="num_particles"):
        ais(jax.random.PRNGKey(0), tiny_model, (y,), **(GOOD | dict(num_particles="20")))


def test_numpy_integers_and_real_scalars_are_accepted():
    evidence = ais(
        jax.random.PRNGKey(0),
        tiny_model,
        (jnp.array(0.3),),
        **(
            GOOD
            | dict(
                num_particles=np.int64(20),
                num_temperatures=np.int32(5),
                num_leapfrog_steps=np.int16(3),
                step_size=np.float32(0.5),
                target_accept=np.float64(0.7),
                adapt_mass=np.bool_(False),
            )
        ),
    )
    assert evidence.log_weights.shape == (20,)
    assert np.isfinite(evidence.log_z)


@pytest.mark.parametrize(
    "num_temperatures, exception",
    [(2.5, TypeError), ("10", TypeError), (True, TypeError), (0, ValueError), (None, ValueError)],
)
def test_schedule_counts_follow_the_same_rules(num_temperatures, exception):
    with pytest.raises(exception, match="num_temperatures"):
        inverse_temperature_schedule("linear", num_temperatures)


def test_schedule_accepts_numpy_integers_and_one_step():
    np.testing.assert_allclose(
        inverse_temperature_schedule("linear", np.int64(4)), np.arange(5) / 4
    )
    np.testing.assert_array_equal(inverse_temperature_schedule("sigmoid", 1), [0.0, 1.0])


def test_gaussian_base_of_the_wrong_dimension_is_named():
    base = nx.GaussianBase(jnp.zeros(2), jnp.eye(2), jnp.asarray(0.0))
    with pytest.raises(ValueError, match="dimension 2 but the model has 1"):
        ais(jax.random.PRNGKey(0), tiny_model, (jnp.array(0.3),), **(GOOD | dict(base=base)))


def test_weights_carried_by_few_particles_give_no_standard_error():
    """One dominant weight: the delta method would give exactly 1 whatever the error."""
    one_dominant = np.concatenate([[0.0], np.full(999, -50.0)])
    evidence = evidence_from_log_weights(one_dominant)
    assert evidence.ess == pytest.approx(1.0) and evidence.stderr == math.inf
    even = np.random.default_rng(0).normal(0.0, 0.1, 1000)
    evidence = evidence_from_log_weights(even)
    assert evidence.ess > 900 and 0 < evidence.stderr < 0.01
