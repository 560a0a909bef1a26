"""Saving and loading a VAE proposal (flax msgpack), and the checks that a proposal fits the
model it is used on."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from flax import serialization
from numpyro.infer import MCMC

import numpyro_extras as nx
from numpyro_extras.slmc.annealing import AnnealingHistory, AnnealingRung
from numpyro_extras.slmc.vae import VAEConfig, encode, init_proposal, sample_extended


def model():
    numpyro.sample("loc", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    numpyro.sample("scale", dist.LogNormal(0.0, 0.5))


def other_model():
    numpyro.sample("loc", dist.Normal(0.0, 1.0).expand([3]).to_event(1))


def proposal_for_model():
    config = VAEConfig(dimension=3, latent_dim=3, encoder_sizes=(8, 4), decoder_sizes=(4, 8))
    history = AnnealingHistory(
        rungs=(AnnealingRung(0, 0, 0.1, float("nan"), False, 1.5, float("nan")),),
        num_models=1,
        final_accept_rates=(0.4,),
        final_log_z=(1.2,),
        chosen_model=0,
        ar_min=0.1,
    )
    proposal = init_proposal(
        jax.random.PRNGKey(0),
        config,
        loc=jnp.array([0.1, -0.2, 0.0]),
        scale=jnp.array([1.0, 0.8, 0.5]),
        sites=(("loc", (2,)), ("scale", ())),
    )
    return proposal.replace(history=history)


def whitened_proposal_for_model():
    """A proposal with a learned decoder noise and a whitening factor: more arrays to restore."""
    config = VAEConfig(
        dimension=3,
        latent_dim=3,
        encoder_sizes=(8, 4),
        decoder_sizes=(4, 8),
        learn_decoder_scale=True,
        whiten=True,
    )
    proposal = init_proposal(
        jax.random.PRNGKey(0),
        config,
        loc=jnp.array([0.1, -0.2, 0.0]),
        scale=jnp.array([[1.0, 0.0, 0.0], [0.3, 0.8, 0.0], [0.0, -0.2, 0.5]]),
        sites=(("loc", (2,)), ("scale", ())),
    )
    params = {**proposal.params, "decoder_log_var": jnp.array([-1.0, -2.0, -0.5])}
    return proposal.replace(params=params, history=proposal_for_model().history)


@pytest.mark.parametrize(
    "make_proposal", [proposal_for_model, whitened_proposal_for_model], ids=["paper", "whitened"]
)
def test_round_trip(tmp_path, make_proposal):
    proposal = make_proposal()
    path = tmp_path / "proposal.msgpack"
    nx.save_proposal(path, proposal)
    assert set(serialization.msgpack_restore(path.read_bytes())) == {"header", "arrays"}
    loaded = nx.load_proposal(path)
    assert loaded.config == proposal.config
    assert loaded.sites == proposal.sites
    assert loaded.history.rungs[0].beta == 0.1
    assert loaded.history.final_accept_rates == (0.4,)
    for a, b in zip(jax.tree.leaves(proposal), jax.tree.leaves(loaded), strict=True):
        np.testing.assert_array_equal(a, b)
    x = sample_extended(jax.random.PRNGKey(1), loaded)[0]
    np.testing.assert_allclose(encode(loaded, x)[0], encode(proposal, x)[0])


def test_loaded_proposal_runs_on_its_model(tmp_path):
    path = tmp_path / "proposal.msgpack"
    nx.save_proposal(path, proposal_for_model())
    kernel = nx.VAESLMC(model, proposal=nx.load_proposal(path))
    mcmc = MCMC(kernel, num_warmup=10, num_samples=50, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0))
    samples = mcmc.get_samples()
    assert samples["loc"].shape == (50, 2) and bool(jnp.all(samples["scale"] > 0))


def test_mismatched_model_is_refused():
    kernel = nx.VAESLMC(other_model, proposal=proposal_for_model())
    mcmc = MCMC(kernel, num_warmup=10, num_samples=10, progress_bar=False)
    with pytest.raises(ValueError, match="trained for other latent sites"):
        mcmc.run(jax.random.PRNGKey(0))


def test_corrupt_or_foreign_files_are_refused(tmp_path):
    path = tmp_path / "junk.msgpack"
    path.write_bytes(b"not a proposal")
    with pytest.raises(ValueError, match="not a file saved by nx.save_proposal"):
        nx.load_proposal(path)
    proposal = proposal_for_model()
    nx.save_proposal(path, proposal)
    other = tmp_path / "other.msgpack"
    wider = proposal.replace(config=VAEConfig(3, 3, (16, 4), (4, 8)))
    nx.save_proposal(other, wider)
    # The header of one file with the arrays of the other: shapes do not fit.
    header = serialization.msgpack_restore(other.read_bytes())["header"]
    arrays = serialization.msgpack_restore(path.read_bytes())["arrays"]
    other.write_bytes(serialization.msgpack_serialize({"header": header, "arrays": arrays}))
    with pytest.raises(ValueError, match="shape"):
        nx.load_proposal(other)


def test_bad_arguments():
    with pytest.raises(ValueError, match="acceptance"):
        nx.VAESLMC(model, acceptance="approximate")
    with pytest.raises(ValueError, match="proposal="):
        nx.VAESLMC(potential_fn=lambda x: jnp.sum(x**2))
    with pytest.raises(TypeError, match="VAEProposal"):
        nx.VAESLMC(model, proposal={"params": 1})
    with pytest.raises(TypeError, match=r"fit_vae_proposal got unknown settings \['epoch'\]"):
        nx.fit_vae_proposal(jax.random.PRNGKey(0), model, epoch=3)
    with pytest.raises(ValueError, match="num_latents must be a positive integer"):
        nx.VAESLMC(model, num_latents=0)
    with pytest.raises(TypeError, match="num_latents must be a positive integer"):
        nx.VAESLMC(model, num_latents=2.5)
    with pytest.raises(ValueError, match="num_latents > 1 needs acceptance='exact'"):
        nx.VAESLMC(model, acceptance="isometric", num_latents=4)


def test_discrete_sites_are_refused():
    def discrete_model():
        numpyro.sample("k", dist.Bernoulli(0.5))

    with pytest.raises(ValueError, match="discrete latent sites"):
        nx.fit_vae_proposal(jax.random.PRNGKey(0), discrete_model, progress_bar=False)
