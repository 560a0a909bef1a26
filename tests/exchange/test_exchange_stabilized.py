"""Stabilised replica exchange: a fitted leg and a prior leg joined at the posterior."""

import arviz as az
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from exchange_targets import (
    BIMODAL_LOG_Z,
    CONJUGATE_DATA,
    CONJUGATE_LOG_Z,
    LEFT_WEIGHT,
    bimodal_likelihood_model,
    conjugate_model,
    run,
)
from numpyro.infer import HMC

import numpyro_extras as nx
import numpyro_extras.exchange.kernels as exchange_kernels
from numpyro_extras.exchange.evidence import SteppingStone, joined_legs_evidence
from numpyro_extras.exchange.ladder import MIN_AUTO_LEG_REPLICAS
from numpyro_extras.exchange.stabilized import junction_parity

pytestmark = pytest.mark.slow

# A single Gaussian fitted by variational inference sits on one mode of the bimodal target.
ONE_MODE_FIT = {"method": "gaussian", "progress_bar": False}


def _stepping_stone(log_z, stderr, ess=500.0):
    empty = np.zeros(1)
    return SteppingStone(log_z, stderr, empty, empty, empty, empty, empty, empty, ess, False)


def test_legs_that_agree_are_pooled_and_legs_that_disagree_widen_the_error():
    evidence, disagree = joined_legs_evidence(_stepping_stone(1.0, 0.1), _stepping_stone(1.2, 0.2))
    assert not disagree
    # Inverse-variance weights 100 and 25.
    np.testing.assert_allclose(evidence.log_z, (100 * 1.0 + 25 * 1.2) / 125)
    np.testing.assert_allclose(evidence.stderr, 125**-0.5)
    assert evidence.ess == 500.0

    evidence, disagree = joined_legs_evidence(_stepping_stone(0.0, 0.01), _stepping_stone(1.0, 0.1))
    assert disagree
    assert evidence.log_z == pytest.approx(0.5)
    # The interval covers both legs' estimates.
    assert evidence.log_z - evidence.stderr <= 0.0 and evidence.log_z + evidence.stderr >= 1.0


@pytest.mark.parametrize("num_fit", [2, 3, 4, 5])
def test_the_junction_is_offered_when_its_neighbouring_gaps_are_not(num_fit):
    for num_prior in (num_fit, num_fit + 2):
        fit_top_gap, prior_top_gap = num_fit - 2, num_prior - 2
        assert junction_parity(num_fit) != fit_top_gap % 2
        assert junction_parity(num_fit) != prior_top_gap % 2


def test_different_parities_are_refused():
    from numpyro_extras.exchange.chains import hmc_moves
    from numpyro_extras.exchange.stabilized import stabilized_exchange

    with pytest.raises(ValueError, match="same parity"):
        stabilized_exchange(hmc_moves(None), None, num_fit_replicas=4, num_prior_replicas=5)


@pytest.fixture(scope="module")
def one_mode_fit_run():
    kernel = nx.ReplicaExchange(
        bimodal_likelihood_model,
        reference="stabilized",
        num_replicas=6,
        fit_base_kwargs=ONE_MODE_FIT,
    )
    return run(kernel, num_warmup=400, num_samples=1200)


def test_a_mode_the_fit_missed_enters_through_the_prior_leg(one_mode_fit_run):
    mcmc = one_mode_fit_run
    kernel = mcmc.sampler
    # The fitted reference is one Gaussian on one mode: alone, it never reaches the other.
    assert kernel.reference.loc.size == 1 and abs(float(kernel.reference.loc[0])) > 4
    x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"])
    left = (x < 0).astype(float)
    weight = left.mean()
    stderr = np.sqrt(weight * (1 - weight) / float(az.ess(left)))
    assert stderr < 0.04
    assert abs(weight - LEFT_WEIGHT) < 4 * stderr

    diagnostics = nx.exchange_diagnostics(mcmc)
    evidence = nx.log_marginal_likelihood(mcmc)
    assert evidence == diagnostics.evidence
    assert evidence.stderr < 0.15
    assert abs(evidence.log_z - BIMODAL_LOG_Z) < 4 * evidence.stderr
    prior_leg = diagnostics.prior_leg
    assert prior_leg.betas.shape == (2, kernel.num_prior_replicas)
    assert np.all(prior_leg.round_trips >= 2)
    assert abs(prior_leg.stepping_stone.log_z - BIMODAL_LOG_Z) < 4 * prior_leg.stepping_stone.stderr

    report = str(diagnostics).splitlines()
    assert report[0].startswith("Replica exchange run (stabilised")
    trips = next(line for line in report if line.startswith("prior leg: round trips"))
    assert trips.split()[4:] == [str(count) for count in prior_leg.round_trips]
    log_z = next(line for line in report if line.startswith("log Z (stepping stone)"))
    assert log_z.split()[-3:] == [f"{evidence.log_z:.3f}", "+-", f"{evidence.stderr:.3f}"]


def test_stabilized_fields_and_arviz(one_mode_fit_run):
    mcmc = one_mode_fit_run
    fields = mcmc.get_extra_fields(group_by_chain=True)
    assert fields["log_likelihood"].shape == (2, 1200, 6)
    assert fields["prior_log_likelihood"].shape == (2, 1200, 6)
    idata = nx.to_inference_data(mcmc)
    assert "prior_leg_log_marginal_likelihood" in idata.attrs
    assert "prior_log_likelihood" in idata.sample_stats
    with pytest.raises(AttributeError, match="prior_log_likelihood"):
        _ = mcmc.last_state.no_such_field
    figure = nx.plot_exchange(mcmc)
    labels = figure.axes[0].get_legend_handles_labels()[1]
    assert labels == [
        f"{leg} leg, chain {chain}" for leg in ("fitted", "prior") for chain in (0, 1)
    ]


def test_conjugate_log_z_from_both_legs_and_chain_methods():
    # Fixed-length HMC moves: the legs' logic is the same as with NUTS, and it compiles faster.
    kernel = nx.ReplicaExchange(
        conjugate_model,
        reference="stabilized",
        num_replicas=6,
        fit_base_kwargs=ONE_MODE_FIT,
        inner_kernel=HMC,
        num_steps=5,
    )
    mcmc = run(kernel, CONJUGATE_DATA, num_warmup=300, num_samples=1000)
    diagnostics = nx.exchange_diagnostics(mcmc)
    assert not diagnostics.problems
    for estimate in (diagnostics.stepping_stone, diagnostics.prior_leg.stepping_stone):
        assert estimate.stderr < 0.15
        assert abs(estimate.log_z - CONJUGATE_LOG_Z) < 4 * estimate.stderr
    evidence = diagnostics.evidence
    assert evidence.stderr <= min(
        diagnostics.stepping_stone.stderr, diagnostics.prior_leg.stepping_stone.stderr
    )
    assert abs(evidence.log_z - CONJUGATE_LOG_Z) < 4 * evidence.stderr

    short = {"num_warmup": 20, "num_samples": 10}
    vectorized = run(kernel, CONJUGATE_DATA, chain_method="vectorized", **short)
    sequential = run(kernel, CONJUGATE_DATA, chain_method="sequential", **short)
    # (parallel chains run the same core under pmap: test_exchange_kernels checks them)
    np.testing.assert_allclose(
        vectorized.get_samples()["x"], sequential.get_samples()["x"], rtol=1e-5, atol=1e-6
    )


def test_stabilized_needs_a_model():
    with pytest.raises(ValueError, match="potential_fn"):
        nx.ReplicaExchange(potential_fn=lambda x: x @ x, reference="stabilized")
    with pytest.raises(ValueError, match="'prior'"):
        nx.ReplicaExchange(nx.ising_model, inner_kernel=nx.ACS, reference="stabilized")


def test_auto_counts_each_leg_from_its_own_pilot(monkeypatch):
    # The pilot even on this cheap potential (which runs without one by default).
    monkeypatch.setattr(exchange_kernels, "PILOT_FREE_POTENTIAL_FLOPS", -1.0)
    kernel = nx.ReplicaExchange(
        bimodal_likelihood_model,
        reference="stabilized",
        fit_base_kwargs=ONE_MODE_FIT,
        inner_kernel=HMC,
        num_steps=3,
    )
    mcmc = run(kernel, num_warmup=4, num_samples=4, num_chains=1)
    fit_pilot, prior_pilot = kernel.pilot, kernel.prior_leg_pilot
    assert fit_pilot is not None and prior_pilot is not None
    assert kernel.num_replicas >= MIN_AUTO_LEG_REPLICAS
    assert kernel.num_prior_replicas >= MIN_AUTO_LEG_REPLICAS
    assert (kernel.num_replicas - kernel.num_prior_replicas) % 2 == 0
    # From the prior the path crosses the gap between the bumps; from the fit it does not.
    assert prior_pilot.barrier > fit_pilot.barrier
    fields = mcmc.get_extra_fields()
    assert fields["log_likelihood"].shape == (4, kernel.num_replicas)
    assert fields["prior_log_likelihood"].shape == (4, kernel.num_prior_replicas)


def _improper_model(y):
    x = numpyro.sample("x", dist.ImproperUniform(dist.constraints.real, (), (3,)))
    numpyro.sample("y", dist.Normal(x, 0.5), obs=y)


def test_auto_is_stabilized_and_falls_back_where_it_cannot_be(monkeypatch):
    short = {"num_warmup": 4, "num_samples": 4, "num_chains": 1}
    settings = {"num_replicas": 2, "inner_kernel": HMC, "num_steps": 2}
    settings["fit_base_kwargs"] = ONE_MODE_FIT
    kernel = nx.ReplicaExchange(conjugate_model, **settings)
    assert kernel.stabilized and "prior_log_likelihood" in kernel.default_fields
    run(kernel, CONJUGATE_DATA, **short)
    assert kernel.stabilized and isinstance(kernel.reference, nx.GaussianBase)

    # An improper prior has no prior leg: the fitted reference alone.
    kernel = nx.ReplicaExchange(_improper_model, **settings)
    mcmc = run(kernel, CONJUGATE_DATA, **short)
    assert not kernel.stabilized and isinstance(kernel.reference, nx.GaussianBase)
    assert mcmc.get_extra_fields()["prior_log_likelihood"].shape == (4, 0)
    assert nx.exchange_diagnostics(mcmc).prior_leg is None

    # A fit that fails leaves the prior.
    def failing_fit(*args, **kwargs):
        raise RuntimeError("every variational fit diverged")

    monkeypatch.setattr("numpyro_extras.tempering.base_fit.fit_base_with_warnings", failing_fit)
    kernel = nx.ReplicaExchange(conjugate_model, **settings)
    with pytest.warns(UserWarning, match="fit of the reference failed"):
        run(kernel, CONJUGATE_DATA, **short)
    assert kernel.reference == "prior" and not kernel.stabilized
    with pytest.raises(RuntimeError, match="diverged"):
        run(nx.ReplicaExchange(conjugate_model, reference="stabilized", **settings), CONJUGATE_DATA)

    # A given base serves as the fitted leg's reference: nothing is fitted.
    base = nx.GaussianBase(np.full(3, 0.5), 0.6 * np.eye(3), 0.0)
    kernel = nx.ReplicaExchange(conjugate_model, base=base, **settings)
    run(kernel, CONJUGATE_DATA, **short)
    assert kernel.stabilized and kernel.reference is not None
    np.testing.assert_allclose(kernel.reference.loc, base.loc)
    assert kernel.reference_fit_problems == ()
    kernel = nx.ReplicaExchange(conjugate_model, base=base, reference="fit", **settings)
    run(kernel, CONJUGATE_DATA, **short)
    assert not kernel.stabilized
    np.testing.assert_allclose(kernel.reference.scale_tril, base.scale_tril)
    with pytest.raises(ValueError, match="fitted leg's reference"):
        nx.ReplicaExchange(conjugate_model, base=base, reference="prior")
    with pytest.raises(ValueError, match="no place"):
        nx.ReplicaExchange(nx.ising_model, base=base, inner_kernel=nx.ACS)
