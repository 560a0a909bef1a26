"""Saving and loading a trained VAE proposal with flax serialization (msgpack), never pickle.

The file is one msgpack map: a JSON header (format version, the VAE's configuration, the model's
site names and unconstrained shapes, the annealing history) and the parameters and
standardisation as flax state dicts. Loading rebuilds the network from the header and restores
the arrays into it, so a file whose arrays do not fit its header is refused.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import serialization

from numpyro_extras.slmc.annealing import AnnealingHistory, AnnealingRung
from numpyro_extras.slmc.vae import VAEConfig, VAEProposal, init_proposal

__all__ = ["save_proposal", "load_proposal", "FORMAT"]

FORMAT = "numpyro_extras.VAEProposal/1"


def _header(proposal: VAEProposal) -> str:
    history = proposal.history
    return json.dumps(
        {
            "format": FORMAT,
            "config": dataclasses.asdict(proposal.config),
            "sites": [[name, list(shape)] for name, shape in proposal.sites],
            "history": None
            if history is None
            else {
                **history._asdict(),
                "rungs": [list(rung) for rung in history.rungs],
            },
        }
    )


def save_proposal(path, proposal: VAEProposal):
    """Write ``proposal`` to ``path`` (msgpack via :mod:`flax.serialization`).

    :param path: file path (``str`` or ``Path``).
    :param VAEProposal proposal: the proposal.

    **Example:**

    .. code-block:: python

        nx.save_proposal("gmm.msgpack", proposal)
        proposal = nx.load_proposal("gmm.msgpack")
    """
    if not isinstance(proposal, VAEProposal):
        raise TypeError(f"save_proposal needs a VAEProposal, got {type(proposal).__name__}.")
    arrays = jax.tree.map(
        lambda leaf: jax.device_get(leaf),
        {"params": proposal.params, "loc": proposal.loc, "scale": proposal.scale},
    )
    payload = {"header": _header(proposal), "arrays": serialization.to_state_dict(arrays)}
    Path(path).write_bytes(serialization.msgpack_serialize(payload))


def load_proposal(path) -> VAEProposal:
    """Read a proposal written by :func:`save_proposal`.

    :param path: file path.
    :return: :class:`~numpyro_extras.slmc.vae.VAEProposal` (its sites are checked against the
        model when a kernel uses it).
    :raises ValueError: when the file is not a saved proposal, or its arrays do not match its
        configuration.
    """
    try:
        payload = serialization.msgpack_restore(Path(path).read_bytes())
        header = json.loads(payload["header"])
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path} is not a VAE proposal saved by nx.save_proposal.") from error
    if header.get("format") != FORMAT:
        raise ValueError(
            f"{path} has format {header.get('format')!r}; this version reads {FORMAT!r}."
        )
    config = header["config"]
    config = VAEConfig(
        **{
            **config,
            "encoder_sizes": tuple(config["encoder_sizes"]),
            "decoder_sizes": tuple(config["decoder_sizes"]),
        }
    )
    sites = tuple((name, tuple(shape)) for name, shape in header["sites"])
    template = init_proposal(jax.random.PRNGKey(0), config, sites=sites)
    target = {"params": template.params, "loc": template.loc, "scale": template.scale}
    try:
        arrays = serialization.from_state_dict(target, payload["arrays"])
    except (ValueError, KeyError) as error:
        raise ValueError(f"{path}: the saved arrays do not match its configuration.") from error
    for (key_path, expected), actual in zip(
        jax.tree_util.tree_leaves_with_path(target), jax.tree.leaves(arrays), strict=True
    ):
        if jnp.shape(expected) != jnp.shape(actual):
            raise ValueError(
                f"{path}: array {jax.tree_util.keystr(key_path)} has shape {jnp.shape(actual)}, "
                f"its configuration needs {jnp.shape(expected)}."
            )
    history = header.get("history")
    if history is not None:
        history = AnnealingHistory(
            **{
                **history,
                "rungs": tuple(AnnealingRung(*rung) for rung in history["rungs"]),
                "final_accept_rates": tuple(history["final_accept_rates"]),
                "final_log_z": tuple(history["final_log_z"]),
            }
        )
    arrays = jax.tree.map(jnp.asarray, arrays)
    return VAEProposal(
        arrays["params"], arrays["loc"], arrays["scale"], config, sites, history=history
    )
