"""The base-moment check (eq. 22) of a tempering run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import MCMC

import numpyro_extras as nx


def test_base_moment_check_warns_for_a_wrong_base():
    """log zeta far too small keeps the chain at beta near 1, far from the base: the base end is
    never visited, and the eq. 22 check says so."""

    def potential(position):
        return 0.5 * jnp.sum(position**2) + 0.5 * jnp.log(2 * jnp.pi)

    base = nx.GaussianBase(jnp.array([4.0]), jnp.array([[0.3]]), jnp.asarray(-30.0))
    mcmc = MCMC(
        nx.GibbsContinuousTempering(
            potential_fn=potential, base=base, num_steps=3, adapt_log_zeta=False
        ),
        num_warmup=100,
        num_samples=300,
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(0))
    assert np.mean(mcmc.get_extra_fields()["beta"] > 0.9) > 0.9
    with pytest.warns(UserWarning, match="base-moment check"):
        nx.log_marginal_likelihood(mcmc)
    assert not nx.base_moment_check(mcmc, warn=False).passed
    # the run's log Z rests on no base-end visit, so a refit from it would carry a wrong log zeta
    with pytest.warns(UserWarning, match=r"refit_base: chains \[0\] never reached beta < 0.1"):
        nx.refit_base(mcmc)
