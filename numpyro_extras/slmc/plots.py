"""The plot of a VAE proposal's annealing: the beta path, the acceptance rate per rung and the
retrains."""

from __future__ import annotations

import numpy as np

from numpyro_extras.shell.plotting import pyplot
from numpyro_extras.slmc.vae import VAEProposal

__all__ = ["plot_annealing"]


def plot_annealing(proposal: VAEProposal, axes=None):
    """Plot each model's beta path (retrains marked) and the acceptance rate the beta search
    measured at every new rung, against the floor ``ar_min``.

    :param VAEProposal proposal: a proposal from :func:`~numpyro_extras.fit_vae_proposal`.
    :param axes: two matplotlib axes, or ``None`` for a new figure.
    :return: the matplotlib figure.

    **Example:**

    .. code-block:: python

        nx.plot_annealing(proposal).savefig("annealing.png")
    """
    plt = pyplot("plot_annealing")

    history = getattr(proposal, "history", None)
    if history is None:
        raise ValueError("This proposal has no annealing history (it was not trained here).")
    if axes is None:
        figure, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    else:
        figure = axes[0].figure
    for model in range(history.num_models):
        rungs = [rung for rung in history.rungs if rung.model == model]
        rounds = np.array([rung.round for rung in rungs])
        betas = np.array([rung.beta for rung in rungs])
        rates = np.array([rung.accept_rate for rung in rungs])
        retrained = np.array([rung.retrained for rung in rungs])
        chosen = " (returned)" if model == history.chosen_model else ""
        (line,) = axes[0].plot(rounds, betas, marker="o", label=f"model {model}{chosen}")
        axes[0].scatter(
            rounds[retrained], betas[retrained], marker="x", s=80, color=line.get_color()
        )
        axes[1].plot(rounds[1:], rates[1:], marker="o", color=line.get_color())
    axes[0].set(xlabel="round", ylabel="beta", title="Annealing path (x: retrained)")
    axes[0].legend(fontsize="small")
    axes[1].axhline(history.ar_min, color="gray", ls="--", label="ar_min")
    axes[1].set(xlabel="round", ylabel="acceptance rate", title="Acceptance at each new rung")
    axes[1].legend(fontsize="small")
    figure.tight_layout()
    return figure
