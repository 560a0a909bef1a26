"""Saving and loading a trained VAE proposal with flax serialization (msgpack), never pickle.

The file is one msgpack map: a JSON header (format version, the VAE's configuration, the model's
site names and unconstrained shapes, the annealing history) and the parameters and
standardisation as flax state dicts. Loading rebuilds the network from the header and restores
the arrays into it, so a file whose arrays do not fit its header is refused.
"""

from __future__ import annotations

import dataclasses

import jax

from numpyro_extras.shell.serialization import (
    header_field,
    read_header,
    restore_arrays,
    save_arrays,
    saved_config,
    saved_record,
    saved_sites,
)
from numpyro_extras.slmc.annealing import AnnealingHistory, AnnealingRung
from numpyro_extras.slmc.vae import VAEConfig, VAEProposal, init_proposal

__all__ = ["save_proposal", "load_proposal", "FORMAT"]

FORMAT = "numpyro_extras.VAEProposal/1"


def _header(proposal: VAEProposal) -> dict:
    history = proposal.history
    return {
        "format": FORMAT,
        "config": dataclasses.asdict(proposal.config),
        "sites": [[name, list(shape)] for name, shape in proposal.sites],
        "history": None
        if history is None
        else {**history._asdict(), "rungs": [list(rung) for rung in history.rungs]},
    }


def save_proposal(path, proposal: VAEProposal):
    """Write ``proposal`` to ``path`` (msgpack via :mod:`flax.serialization`).

    :param path: file path (``str`` or ``Path``).
    :param VAEProposal proposal: the proposal.

    **Example:**

    .. code-block:: python

        nx.save_proposal("proposal.msgpack", proposal)
        proposal = nx.load_proposal("proposal.msgpack")
    """
    if not isinstance(proposal, VAEProposal):
        raise TypeError(f"save_proposal needs a VAEProposal, got {type(proposal).__name__}.")
    arrays = {"params": proposal.params, "loc": proposal.loc, "scale": proposal.scale}
    save_arrays(path, _header(proposal), arrays)


def load_proposal(path) -> VAEProposal:
    """Read a proposal written by :func:`save_proposal`.

    :param path: file path.
    :return: :class:`~numpyro_extras.slmc.vae.VAEProposal` (its sites are checked against the
        model when a kernel uses it).
    :raises ValueError: when the file is not a saved proposal, or its arrays do not match its
        configuration.

    **Example:**

    .. code-block:: python

        nx.save_proposal("proposal.msgpack", proposal)
        kernel = nx.VAESLMC(model, proposal=nx.load_proposal("proposal.msgpack"))
    """
    saved_by = "nx.save_proposal"
    header, payload = read_header(path, FORMAT, saved_by)
    fields = header_field(path, header, "config", saved_by)
    if isinstance(fields, dict):
        fields = {
            **fields,
            **{
                name: tuple(fields[name])
                for name in ("encoder_sizes", "decoder_sizes")
                if isinstance(fields.get(name), list)
            },
        }
    config = saved_config(path, VAEConfig, fields)
    sites = saved_sites(path, header_field(path, header, "sites", saved_by), config.dimension)
    template = init_proposal(jax.random.PRNGKey(0), config, sites=sites)
    target = {"params": template.params, "loc": template.loc, "scale": template.scale}
    arrays = restore_arrays(path, target, payload)
    history = header.get("history")
    if history is not None:
        history = saved_record(
            path,
            "annealing history",
            lambda: AnnealingHistory(
                **{
                    **history,
                    "rungs": tuple(AnnealingRung(*rung) for rung in history["rungs"]),
                    "final_accept_rates": tuple(history["final_accept_rates"]),
                    "final_log_z": tuple(history["final_log_z"]),
                    "problems": tuple(history.get("problems", ())),
                }
            ),
        )
    return VAEProposal(
        arrays["params"], arrays["loc"], arrays["scale"], config, sites, history=history
    )
