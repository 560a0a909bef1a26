"""The plot of a replica-exchange run: swap rates along the ladder, the communication barrier,
and the posterior replica's trace."""

from __future__ import annotations

import numpy as np

from numpyro_extras.exchange.diagnostics import exchange_diagnostics, exchange_kernel
from numpyro_extras.shell.plotting import pyplot

__all__ = ["plot_exchange"]


def plot_exchange(mcmc, site=None, axes=None):
    """Plot each chain's swap acceptance per gap of its ladder (a tuned ladder makes it flat),
    its cumulative communication barrier ``Lambda(beta)`` (Syed et al. eq. 12), and the
    posterior replica's trace of one coordinate (jumps between modes are states that came up
    the ladder). A stabilised run draws its prior leg dashed beside its fitted leg.

    :param mcmc: a run with :class:`~numpyro_extras.ReplicaExchange`.
    :param str site: a latent site for the trace (its first coordinate); default the first.
    :param axes: three matplotlib axes, or ``None`` for a new figure.
    :return: the matplotlib figure.

    **Example:**

    .. code-block:: python

        nx.plot_exchange(exchange_mcmc).savefig("exchange.png")  # a finished nx.ReplicaExchange run
    """
    plt = pyplot("plot_exchange")

    kernel = exchange_kernel(mcmc)
    diagnostics = exchange_diagnostics(mcmc)
    if axes is None:
        figure, axes = plt.subplots(1, 3, figsize=(13, 3.5))
    else:
        figure = axes[0].figure
    legs = [("", "-", diagnostics.betas, diagnostics.swap_accept_rate)]
    if diagnostics.prior_leg is not None:
        legs = [
            ("fitted leg, ", "-", diagnostics.betas, diagnostics.swap_accept_rate),
            (
                "prior leg, ",
                "--",
                diagnostics.prior_leg.betas,
                diagnostics.prior_leg.swap_accept_rate,
            ),
        ]
    for leg, style, leg_betas, leg_rates in legs:
        for chain, (betas, rates) in enumerate(zip(leg_betas, leg_rates, strict=True)):
            line = axes[0].plot(
                np.arange(rates.size),
                rates,
                style,
                marker="o",
                ms=3,
                lw=0.8,
                label=f"{leg}chain {chain}",
            )
            barrier = np.concatenate([[0.0], np.cumsum(1.0 - rates)])
            axes[1].plot(betas, barrier, style, marker="o", ms=3, lw=0.8, color=line[0].get_color())
    axes[0].set(xlabel="gap i (beta_i to beta_i+1)", ylabel="swap acceptance")
    axes[0].set(ylim=(0, 1.02), title="Swap rate along the ladder")
    axes[0].legend(fontsize="small")
    axes[1].set(xlabel="beta", ylabel="Lambda(beta)", title="Communication barrier")
    samples = mcmc.get_samples(group_by_chain=True)
    if isinstance(samples, dict):
        site = site or kernel.latent_sites[0]
        values = samples[site]
    else:
        site = site or "x[0]"
        values = samples
    values = np.asarray(values)
    values = values.reshape(values.shape[:2] + (-1,))[..., 0]
    for chain, trace in enumerate(values):
        axes[2].plot(trace, lw=0.5, label=f"chain {chain}")
    axes[2].set(xlabel="draw", ylabel=site, title="Posterior replica")
    figure.tight_layout()
    return figure
