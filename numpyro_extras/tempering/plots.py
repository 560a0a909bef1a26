"""The plot of a continuous tempering run: temperature traces, the ``beta`` marginal and a target
marginal."""

from __future__ import annotations

import numpy as np

from numpyro_extras.shell.plotting import pyplot
from numpyro_extras.tempering.evidence import target_log_weights
from numpyro_extras.tempering.posterior import tempered_samples
from numpyro_extras.tempering.run import chain_field, tempering_kernel

__all__ = ["plot_tempering"]


def plot_tempering(mcmc, site=None, axes=None):
    """Plot the inverse-temperature traces, the ``beta`` histogram and a target marginal.

    The marginal panel shows the posterior draws (``mcmc.get_samples()``) over the tempered
    draws and their target-weighted histogram (eq. 21).

    :param mcmc: a run with a continuous tempering kernel.
    :param str site: a scalar site (or first coordinate of a site) for the marginal panel;
        default the first latent site.
    :param axes: three matplotlib axes, or ``None`` for a new figure.
    :return: the matplotlib figure.

    **Example:**

    .. code-block:: python

        nx.plot_tempering(mcmc, site="slope").savefig("tempering.png")
    """
    plt = pyplot("plot_tempering")

    kernel = tempering_kernel(mcmc)
    if axes is None:
        figure, axes = plt.subplots(1, 3, figsize=(13, 3.5))
    else:
        figure = axes[0].figure
    beta = np.asarray(chain_field(mcmc, "beta"))
    for chain, chain_beta in enumerate(beta):
        axes[0].plot(chain_beta, lw=0.6, label=f"chain {chain}")
    axes[0].set(xlabel="draw", ylabel="inverse temperature beta", title="Temperature traces")
    axes[1].hist(beta.ravel(), bins=40, range=(0, 1), density=True, color="tab:gray")
    axes[1].set(xlabel="beta", ylabel="density", title="Marginal of beta")
    tempered = tempered_samples(mcmc)
    posterior = mcmc.get_samples()
    if isinstance(tempered, dict):
        site = site or kernel.flat_model.latent_sites[0]
        tempered, posterior = tempered[site], posterior[site]
    else:
        site = site or "x[0]"
    num_draws = beta.size
    tempered = np.asarray(tempered).reshape(num_draws, -1)[:, 0]
    posterior = np.asarray(posterior).reshape(num_draws, -1)[:, 0]
    weights = np.exp(target_log_weights(mcmc)).ravel()
    axes[2].hist(tempered, bins=60, density=True, alpha=0.3, label="tempered draws")
    axes[2].hist(
        tempered, bins=60, weights=weights, density=True, histtype="step", label="weighted (eq. 21)"
    )
    axes[2].hist(posterior, bins=60, density=True, alpha=0.5, label="posterior draws")
    axes[2].set(xlabel=site, ylabel="density", title="Target marginal")
    axes[2].legend(fontsize="small")
    figure.tight_layout()
    return figure
