"""The target and small annealing settings the VAE-SLMC tests share."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

WEIGHT = 0.7  # of the mode at (-2, -2)

# A small network and little data, so that the annealing runs in seconds; every other setting
# is the default (Table 7's beta_0 = 0.1, ar_min = 0.1 for one model).
TINY = dict(
    encoder_sizes=(32, 32),
    decoder_sizes=(32, 32),
    training_size=1000,
    epochs=20,
    initial_epochs=60,
    num_data_chains=20,
    num_check_chains=5,
    num_check_steps=200,
    batch_size=256,
    beta_step=0.05,
)


def mixture_model(log_z=0.0):
    """Two uneven modes in 2-D, ``WEIGHT`` at (-2, -2) and the rest at (2, 2), sd 0.3, with
    ``log Z = log_z``."""
    mixture = dist.MixtureSameFamily(
        dist.Categorical(jnp.array([WEIGHT, 1 - WEIGHT])),
        dist.Independent(dist.Normal(jnp.array([[-2.0, -2.0], [2.0, 2.0]]), 0.3), 1),
    )
    numpyro.sample("x", mixture)
    numpyro.factor("offset", log_z)


def correlated_gaussian(dimension):
    """A zero-mean Gaussian model on a random orthonormal basis with variances log-spaced from
    0.01 to 100 (condition number 1e4, ``log Z = 0``: the paper's ICG at a small size): the
    model, its covariance and 1000 exact draws of it at beta = 0.1."""
    rng = np.random.default_rng(0)
    basis, _ = np.linalg.qr(rng.normal(size=(dimension, dimension)))
    variances = np.logspace(-2, 2, dimension)
    covariance = basis @ np.diag(variances) @ basis.T
    covariance = jnp.asarray((covariance + covariance.T) / 2)

    def model():
        numpyro.sample("x", dist.MultivariateNormal(jnp.zeros(dimension), covariance))

    draws = jax.random.multivariate_normal(
        jax.random.PRNGKey(1), jnp.zeros(dimension), covariance / 0.1, (1000,)
    )
    return model, covariance, draws
