"""The Boltzmann-machine estimators warn, as ``nx.ais`` does, when the final ESS is too small.

A short schedule on a cold machine leaves a few particles with almost all the weight; the
estimate then comes with a stderr that understates its error, so the call must say so. A
reasonable schedule on a warm machine must stay quiet, or the warning would be noise.
"""

import re
import warnings

import jax
import pytest

import numpyro_extras as nx
from numpyro_extras.annealing import driver, mais, model_annealing

NUM_PARTICLES = 500


@pytest.fixture(scope="module")
def cold_machine():
    return nx.random_rbm(jax.random.PRNGKey(0), 8, 10, inverse_temperature=6.0)


def _ess_in(message):
    return float(re.search(r"final ESS ([\d.]+) of", message).group(1))


def test_the_threshold_is_the_one_of_nx_ais():
    assert model_annealing.warn_on_small_ess is mais.warn_on_small_ess


@pytest.mark.parametrize(
    "estimator, advice",
    [(nx.ais_boltzmann, "or mAIS"), (nx.marginalized_ais_boltzmann, "more temperatures")],
)
def test_short_schedule_on_cold_machine_warns(cold_machine, estimator, advice):
    pattern = rf"nx\.{estimator.__name__}: final ESS [\d.]+ of {NUM_PARTICLES} particles"
    with pytest.warns(UserWarning, match=pattern) as caught:
        evidence = estimator(
            jax.random.PRNGKey(1), cold_machine, num_particles=NUM_PARTICLES, num_temperatures=2
        )
    assert evidence.ess < driver.MIN_ESS_FRACTION * NUM_PARTICLES
    (warning,) = [w for w in caught if "final ESS" in str(w.message)]
    message = str(warning.message)
    assert _ess_in(message) == pytest.approx(evidence.ess, abs=0.05)
    assert advice in message
    (problem,) = evidence.problems
    assert problem in message
    # Points at the caller's line, not at the library.
    assert warning.filename == __file__


def test_mais_vs_ais_warns_once_per_low_estimator(cold_machine):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        both = nx.mais_vs_ais(
            jax.random.PRNGKey(1), cold_machine, num_particles=NUM_PARTICLES, num_temperatures=2
        )
    messages = {
        name: [
            str(w.message) for w in caught if str(w.message).startswith(f"nx.mais_vs_ais ({name})")
        ]
        for name in ("AIS", "mAIS")
    }
    for name, evidence in (("AIS", both.ais), ("mAIS", both.mais)):
        assert evidence.ess < driver.MIN_ESS_FRACTION * NUM_PARTICLES
        (message,) = messages[name]
        assert _ess_in(message) == pytest.approx(evidence.ess, abs=0.05)
        assert f"of {NUM_PARTICLES} particles" in message
    assert all(w.filename == __file__ for w in caught if "final ESS" in str(w.message))


def test_reasonable_schedule_on_warm_machine_is_quiet():
    machine = nx.random_rbm(jax.random.PRNGKey(0), 4, 6, inverse_temperature=1.0)
    settings = dict(num_particles=200, num_temperatures=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        estimates = [
            nx.ais_boltzmann(jax.random.PRNGKey(1), machine, **settings),
            nx.marginalized_ais_boltzmann(jax.random.PRNGKey(1), machine, **settings),
            *nx.mais_vs_ais(jax.random.PRNGKey(1), machine, **settings)[:2],
        ]
    for evidence in estimates:
        assert evidence.ess > 0.5 * settings["num_particles"]
