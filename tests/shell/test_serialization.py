"""Saved files that are damaged or contradict themselves are refused with an error that names
the problem, for both formats (nx.load_proposal, nx.load_involution)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import serialization

import numpyro_extras as nx
from numpyro_extras.involutive.networks import InvolutionConfig
from numpyro_extras.involutive.networks import init_proposal as init_involution
from numpyro_extras.slmc.vae import VAEConfig
from numpyro_extras.slmc.vae import init_proposal as init_vae

SITES = (("loc", (2,)), ("scale", ()))


def vae_proposal():
    config = VAEConfig(dimension=3, latent_dim=2, encoder_sizes=(4,), decoder_sizes=(4,))
    return init_vae(jax.random.PRNGKey(0), config, sites=SITES)


def involution():
    config = InvolutionConfig(dimension=3, num_layers=2, hidden=4, discriminator_hidden=4)
    return init_involution(jax.random.PRNGKey(0), config, sites=SITES)


FORMATS = {
    "vae": (vae_proposal, nx.save_proposal, nx.load_proposal),
    "involution": (involution, nx.save_involution, nx.load_involution),
}


def saved(tmp_path, kind):
    make, save, _ = FORMATS[kind]
    path = tmp_path / f"{kind}.msgpack"
    save(path, make())
    return path


def rewrite(path, edit_header=None, edit_arrays=None):
    """Rewrite a saved file with its header and arrays edited in place."""
    payload = serialization.msgpack_restore(path.read_bytes())
    header = json.loads(payload["header"])
    if edit_header is not None:
        edit_header(header)
    if edit_arrays is not None:
        edit_arrays(payload["arrays"])
    payload["header"] = json.dumps(header)
    path.write_bytes(serialization.msgpack_serialize(payload))


@pytest.mark.parametrize("kind", FORMATS)
def test_an_untouched_file_loads(tmp_path, kind):
    path = saved(tmp_path, kind)
    loaded = FORMATS[kind][2](path)
    assert loaded.sites == SITES


@pytest.mark.parametrize("kind", FORMATS)
@pytest.mark.parametrize("field", ["config", "sites"])
def test_a_header_without_a_field_names_it(tmp_path, kind, field):
    path = saved(tmp_path, kind)
    rewrite(path, edit_header=lambda header: header.pop(field))
    with pytest.raises(ValueError, match=f"no '{field}' field"):
        FORMATS[kind][2](path)


@pytest.mark.parametrize("kind", FORMATS)
def test_an_unknown_configuration_field_is_named(tmp_path, kind):
    path = saved(tmp_path, kind)
    rewrite(path, edit_header=lambda header: header["config"].update(bogus=1))
    with pytest.raises(ValueError, match=r"unknown fields \['bogus'\]"):
        FORMATS[kind][2](path)


@pytest.mark.parametrize("kind", FORMATS)
def test_sites_that_contradict_the_network_are_refused(tmp_path, kind):
    path = saved(tmp_path, kind)
    rewrite(path, edit_header=lambda header: header.update(sites=[["loc", [5]]]))
    with pytest.raises(ValueError, match="hold 5 unconstrained values.*dimension 3"):
        FORMATS[kind][2](path)


@pytest.mark.parametrize("kind", FORMATS)
def test_nan_in_the_arrays_is_refused(tmp_path, kind):
    path = saved(tmp_path, kind)

    def poison(arrays):
        arrays["loc"] = np.full_like(np.asarray(arrays["loc"]), np.nan)

    rewrite(path, edit_arrays=poison)
    with pytest.raises(ValueError, match=r"array \['loc'\] holds NaN or inf"):
        FORMATS[kind][2](path)


@pytest.mark.parametrize("kind, record", [("vae", "annealing"), ("involution", "training")])
def test_a_malformed_history_is_named(tmp_path, kind, record):
    path = saved(tmp_path, kind)
    rewrite(path, edit_header=lambda header: header.update(history={"unknown_field": 3}))
    with pytest.raises(ValueError, match=f"{record} history is not valid"):
        FORMATS[kind][2](path)


def test_a_log_weight_of_minus_infinity_is_kept(tmp_path):
    """A mixture component of zero mass has log weight -inf: a file may hold it."""
    proposal = involution()
    mixture = nx.MixtureBase(
        jnp.zeros((2, 3)),
        jnp.broadcast_to(jnp.eye(3), (2, 3, 3)),
        jnp.array([0.0, -jnp.inf]),
        jnp.zeros(()),
    )
    path = tmp_path / "mixture.msgpack"
    nx.save_involution(path, proposal.replace(mixture=mixture))
    loaded = nx.load_involution(path)
    assert np.isneginf(np.asarray(loaded.mixture.component_log_weights)[1])
