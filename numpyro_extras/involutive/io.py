"""Saving and loading a trained Ai-sampler involution (flax msgpack, never pickle)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from numpyro_extras.involutive.networks import InvolutionConfig, InvolutiveProposal, init_proposal
from numpyro_extras.involutive.training import TrainingHistory
from numpyro_extras.model.bases import MixtureBase
from numpyro_extras.shell.serialization import (
    header_field,
    read_header,
    restore_arrays,
    save_arrays,
    saved_config,
    saved_record,
    saved_sites,
)

__all__ = ["save_involution", "load_involution", "FORMAT"]

FORMAT = "numpyro_extras.InvolutiveProposal/1"


def save_involution(path, params: InvolutiveProposal):
    """Write a trained involution to ``path``.

    :param path: file path (``str`` or ``Path``).
    :param InvolutiveProposal params: from :func:`~numpyro_extras.train_ai_sampler`.

    **Example:**

    .. code-block:: python

        nx.save_involution("involution.msgpack", params)
        params = nx.load_involution("involution.msgpack")
    """
    if not isinstance(params, InvolutiveProposal):
        raise TypeError(
            f"save_involution needs an InvolutiveProposal, got {type(params).__name__}."
        )
    history = params.history
    header = {
        "format": FORMAT,
        "config": dataclasses.asdict(params.config),
        "sites": [[name, list(shape)] for name, shape in params.sites],
        "num_starts": int(params.starts.shape[0]),
        "full_scale": jnp.ndim(params.scale) == 2,
        "history": None if history is None else history._asdict(),
        "mixture_components": (
            None if params.mixture is None else int(params.mixture.component_locs.shape[0])
        ),
    }
    arrays = {
        "params": params.params,
        "loc": params.loc,
        "scale": params.scale,
        "starts": params.starts,
    }
    if params.mixture is not None:
        arrays["mixture"] = _mixture_arrays(params.mixture)
    save_arrays(path, header, arrays)


def _mixture_arrays(mixture: MixtureBase) -> dict:
    return {
        "locs": mixture.component_locs,
        "scale_trils": mixture.component_scale_trils,
        "log_weights": mixture.component_log_weights,
    }


def load_involution(path) -> InvolutiveProposal:
    """Read an involution written by :func:`save_involution`.

    :param path: file path.
    :return: :class:`~numpyro_extras.involutive.networks.InvolutiveProposal` (its sites are
        checked against the model when a kernel uses it).
    :raises ValueError: when the file is not a saved involution, or its arrays do not match its
        configuration.

    **Example:**

    .. code-block:: python

        nx.save_involution("involution.msgpack", params)
        kernel = nx.AiSampler(model, params=nx.load_involution("involution.msgpack"))
    """
    saved_by = "nx.save_involution"
    header, payload = read_header(path, FORMAT, saved_by)
    # Files written before the swap option hold the plain flow, whose parameters mean another map.
    config = saved_config(
        path, InvolutionConfig, header_field(path, header, "config", saved_by), {"swap": False}
    )
    sites = saved_sites(path, header_field(path, header, "sites", saved_by), config.dimension)
    num_starts = header_field(path, header, "num_starts", saved_by)
    if not isinstance(num_starts, int) or num_starts < 1:
        raise ValueError(f"{path}: its saved num_starts {num_starts!r} is not a positive count.")
    n = config.dimension
    template = init_proposal(
        jax.random.PRNGKey(0),
        config,
        scale=jnp.zeros((n, n) if header.get("full_scale", False) else (n,)),
        starts=jnp.zeros((num_starts, n)),
        sites=sites,
    )
    templates = {
        "params": template.params,
        "loc": template.loc,
        "scale": template.scale,
        "starts": template.starts,
    }
    # Files written before the mixture was added have none.
    components = header.get("mixture_components")
    if components is not None:
        templates["mixture"] = {
            "locs": jnp.zeros((components, n)),
            "scale_trils": jnp.zeros((components, n, n)),
            "log_weights": jnp.zeros((components,)),
        }
    arrays = restore_arrays(path, templates, payload)
    mixture = None
    if components is not None:
        restored = arrays["mixture"]
        mixture = MixtureBase(
            restored["locs"], restored["scale_trils"], restored["log_weights"], jnp.zeros(())
        )
    history = header.get("history")
    if history is not None:
        history = saved_record(
            path,
            "training history",
            lambda: TrainingHistory(
                **{
                    name: tuple(value) if isinstance(value, list) else value
                    for name, value in history.items()
                }
            ),
        )
    return InvolutiveProposal(
        arrays["params"],
        arrays["loc"],
        arrays["scale"],
        arrays["starts"],
        config,
        sites,
        history=history,
        mixture=mixture,
    )
