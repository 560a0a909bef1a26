"""What the package reads from NumPyro beyond its public API, checked against the installed
NumPyro: a release that renames one of these fails here, by name."""

import inspect

import jax
import numpyro
import numpyro.distributions as dist
from numpyro.infer import HMC, MCMC, NUTS
from numpyro.infer.hmc import hmc

from numpyro_extras.shell.numpyro_adapter import (
    HMC_DEFAULTS,
    calling_mcmc_progress_bar,
    hmc_instance_settings,
)


def model():
    numpyro.sample("x", dist.Normal())


def test_the_settings_are_those_of_numpyros_functional_initialisation():
    init_kernel, _ = hmc(potential_fn=lambda x: 0.0)
    parameters = inspect.signature(init_kernel).parameters
    assert set(HMC_DEFAULTS) <= set(parameters)


def test_a_default_nuts_instance_reads_as_the_defaults():
    assert hmc_instance_settings(NUTS(model)) == ("NUTS", HMC_DEFAULTS)


def test_an_instances_own_settings_are_read_back():
    algo, settings = hmc_instance_settings(
        NUTS(model, target_accept_prob=0.9, max_tree_depth=7, dense_mass=True, step_size=0.3)
    )
    assert algo == "NUTS"
    changed = {name: value for name, value in settings.items() if value != HMC_DEFAULTS[name]}
    assert changed == dict(target_accept_prob=0.9, max_tree_depth=7, dense_mass=True, step_size=0.3)
    algo, settings = hmc_instance_settings(
        HMC(model, num_steps=5, trajectory_length=None, adapt_mass_matrix=False)
    )
    assert algo == "HMC"
    assert settings["num_steps"] == 5
    assert settings["adapt_mass_matrix"] is False


class RecordingNUTS(NUTS):
    """NUTS that records, at ``init``, the progress bar of the ``MCMC`` running it."""

    seen = []

    def init(self, *args, **kwargs):
        self.seen.append(calling_mcmc_progress_bar(default=None))
        return super().init(*args, **kwargs)


def test_a_kernels_init_sees_the_progress_bar_of_the_mcmc_running_it():
    assert calling_mcmc_progress_bar(default="outside") == "outside"
    for progress_bar in (False, True):
        mcmc = MCMC(RecordingNUTS(model), num_warmup=5, num_samples=5)
        # NumPyro turns the bar off under CI and pytest-xdist; what the kernel reads is the
        # attribute.
        mcmc.progress_bar = progress_bar
        mcmc.run(jax.random.PRNGKey(0))
    assert RecordingNUTS.seen == [False, True]


def test_the_unconstrained_substitution_is_potential_energys_split_per_site():
    from numpyro.infer.util import compute_log_probs, potential_energy

    from numpyro_extras.shell.numpyro_adapter import substitute_unconstrained

    def positive_model():
        scale = numpyro.sample("scale", dist.HalfNormal(2.0))
        numpyro.sample("y", dist.Normal(0.0, scale), obs=1.5)

    params = {"scale": jax.numpy.asarray(0.3)}
    log_probs, _ = compute_log_probs(substitute_unconstrained(positive_model, params), (), {}, {})
    assert list(log_probs) == ["_scale_log_det", "scale", "y"]
    assert float(log_probs["_scale_log_det"]) == 0.3  # log |d exp(u) / du| at u = 0.3
    energy = potential_energy(positive_model, (), {}, params)
    assert float(-sum(log_probs.values(), 0.0)) == float(energy)
