"""num_replicas="auto": the count from a pilot run's communication barrier, within a bound."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from exchange_targets import run
from numpyro.infer import HMC

import numpyro_extras as nx
import numpyro_extras.exchange.kernels as exchange_kernels
from numpyro_extras.exchange.ladder import (
    MAX_AUTO_REPLICAS,
    MIN_AUTO_LEG_REPLICAS,
    MIN_AUTO_REPLICAS,
    communication_barrier,
    equalized_ladder,
    initial_ladder,
    replicas_for_barrier,
)
from numpyro_extras.exchange.pilot import potential_flops

pytestmark = pytest.mark.slow

# HMC with a few leapfrog steps compiles faster than NUTS; the rule does not depend on the move.
# One ladder from the prior: the pilot of each leg of a stabilised run is the same measurement.
MOVES = dict(inner_kernel=HMC, num_steps=5, reference="prior")


def _gaussian_model():
    x = numpyro.sample("x", dist.Normal(0.0, 1.0))
    numpyro.factor("likelihood", dist.Normal(0.5, 1.0).log_prob(x))


def _separated_mixture_model():
    # Two bumps 16 prior-sd/10 apart and 500 times narrower than the prior: the posterior is far
    # from the prior in the sense of the barrier, unlike the Gaussian's.
    x = numpyro.sample("x", dist.Normal(0.0, 10.0))
    numpyro.factor(
        "bumps",
        jnp.logaddexp(dist.Normal(-8.0, 0.03).log_prob(x), dist.Normal(8.0, 0.03).log_prob(x)),
    )


def _count(accept_rates, **bounds):
    barrier = communication_barrier(jnp.asarray(accept_rates, dtype=jnp.float64))[-1]
    return replicas_for_barrier(barrier, **bounds)


def test_the_count_is_twice_the_barrier_rounded_up_with_a_floor():
    # Lambda = 0.5 + 0.5 + 0.75 = 1.75: ceil(3.5) = 4.
    assert _count([0.5, 0.5, 0.25], minimum=2) == 4
    # Lambda = 12 x 0.75 = 9: 18 replicas, above the default floor.
    assert _count(np.full(12, 0.25)) == 18
    # Lambda = 12 x 0.25 = 3 exactly: 6, not 7.
    assert _count(np.full(12, 0.75), minimum=2) == 6
    # Lambda = 3.05: 7.
    assert replicas_for_barrier(3.05, minimum=2) == 7
    # The default floor keeps the stepping stone's rungs on easy paths.
    assert replicas_for_barrier(3.05) == MIN_AUTO_REPLICAS == 16
    # Swaps always accepted: the floor.
    assert _count(np.ones(15), minimum=4) == 4


def test_the_count_is_capped_by_the_maximum_and_the_memory_bound():
    assert replicas_for_barrier(100.0) == MAX_AUTO_REPLICAS == 64
    # 2e6 values per chain / 1e5 values per replica: 20.
    assert replicas_for_barrier(100.0, values_per_replica=100_000) == 20
    # A cap below the floor wins over the floor.
    assert replicas_for_barrier(0.5, values_per_replica=700_000) == 2
    with pytest.raises(ValueError, match="memory bound"):
        replicas_for_barrier(1.0, values_per_replica=1_500_000)
    with pytest.raises(ValueError, match="finite"):
        replicas_for_barrier(float("nan"))


def test_a_tuned_ladder_resized_keeps_equal_rejection():
    betas = jnp.array([0.0, 0.5, 1.0])
    # Lambda(0.5) = 0.1, Lambda(1) = 1.0: the 4-rung ladder splits Lambda in thirds.
    resized = equalized_ladder(betas, jnp.array([0.9, 0.1]), 4)
    np.testing.assert_allclose(
        resized, [0.0, 0.5 + 0.5 * (1 / 3 - 0.1) / 0.9, 0.5 + 0.5 * (2 / 3 - 0.1) / 0.9, 1.0]
    )
    np.testing.assert_allclose(
        equalized_ladder(betas, jnp.array([0.9, 0.1])), [0, 0.5 + 0.5 * 0.4 / 0.9, 1]
    )


@pytest.fixture
def pilot_on_every_model(monkeypatch):
    """The pilot run even on models whose potential is cheap enough to go without it."""
    monkeypatch.setattr(exchange_kernels, "PILOT_FREE_POTENTIAL_FLOPS", -1.0)


def _costly_gaussian_model():
    # The same posterior as _gaussian_model, its potential scored through a 120 x 120 product
    # (about 29,000 floating-point operations, past the pilot-free bound).
    x = numpyro.sample("x", dist.Normal(0.0, 1.0))
    rotation = jnp.eye(120) / jnp.sqrt(120.0)
    spread = rotation @ jnp.full(120, x - 0.5)
    numpyro.factor("likelihood", -0.5 * jnp.sum(spread**2) - 0.5 * jnp.log(2 * jnp.pi))


def test_auto_runs_a_pilot_only_where_the_potential_is_costly():
    cheap = nx.ReplicaExchange(_gaussian_model, **MOVES)
    costly = nx.ReplicaExchange(_costly_gaussian_model, **MOVES)
    cheap_state = cheap.init(jax.random.PRNGKey(0), 10, None, (), {})
    costly.init(jax.random.PRNGKey(0), 10, None, (), {})
    assert potential_flops(cheap.path) <= exchange_kernels.PILOT_FREE_POTENTIAL_FLOPS
    assert potential_flops(costly.path) > exchange_kernels.PILOT_FREE_POTENTIAL_FLOPS
    # Without a pilot: the floor's count, from the initial ladder, and nothing measured.
    assert cheap.pilot is None and cheap.pilot_barrier is None
    assert cheap.num_replicas == MIN_AUTO_REPLICAS
    np.testing.assert_array_equal(cheap_state.betas, initial_ladder(cheap.num_replicas))
    assert costly.pilot is not None and costly.num_replicas == MIN_AUTO_REPLICAS


@pytest.mark.parametrize(
    "model, settings, algo, steps",
    [
        (_gaussian_model, {}, "NUTS", None),
        (_costly_gaussian_model, {}, "HMC", exchange_kernels.DEAR_POTENTIAL_NUM_STEPS),
        # A setting that names the move decides it, whatever the potential costs.
        (_costly_gaussian_model, dict(max_tree_depth=4), "NUTS", None),
        (_gaussian_model, dict(num_steps=3), "HMC", 3),
        (_costly_gaussian_model, dict(inner_kernel=numpyro.infer.NUTS), "NUTS", None),
    ],
)
def test_the_default_move_is_fixed_length_hmc_where_the_potential_is_costly(
    model, settings, algo, steps
):
    kernel = nx.ReplicaExchange(model, num_replicas=4, reference="prior", **settings)
    mcmc = run(kernel, num_warmup=6, num_samples=6, num_chains=1, extra_fields=("num_steps",))
    assert kernel.inner_algo == algo
    num_steps = np.asarray(mcmc.get_extra_fields()["num_steps"])
    if steps is None:
        # NUTS trees end where they turn: their lengths differ from move to move.
        assert np.unique(num_steps).size > 1
    else:
        np.testing.assert_array_equal(num_steps, steps)


def test_auto_without_a_pilot_gives_each_leg_the_floor():
    kernel = nx.ReplicaExchange(_gaussian_model, inner_kernel=HMC, num_steps=5)
    mcmc = run(kernel, num_warmup=4, num_samples=4, num_chains=1)
    assert kernel.stabilized and kernel.pilot is None and kernel.prior_leg_pilot is None
    assert kernel.num_replicas == kernel.num_prior_replicas == MIN_AUTO_LEG_REPLICAS
    assert mcmc.last_state.fit_leg.betas.shape == (MIN_AUTO_LEG_REPLICAS,)


def test_auto_uses_more_replicas_on_a_hard_target_than_on_an_easy_one(capsys, pilot_on_every_model):
    easy = nx.ReplicaExchange(_gaussian_model, **MOVES)
    assert easy.num_replicas is None and easy.pilot is None
    with jax.ensure_compile_time_eval():
        easy._prepare((), {})
    # Outside an MCMC the pilot shows its progress; inside one made with progress_bar=False
    # nothing is printed.
    assert "replica exchange: pilot scans" in capsys.readouterr().err
    hard = nx.ReplicaExchange(_separated_mixture_model, **MOVES)
    mcmc = run(hard, num_warmup=40, num_samples=40, num_chains=1)
    assert "pilot scans" not in capsys.readouterr().err

    assert easy.num_replicas == MIN_AUTO_REPLICAS and easy.pilot_barrier < 1.0
    assert hard.pilot_barrier > 2.0
    assert hard.num_replicas == replicas_for_barrier(hard.pilot_barrier) >= easy.num_replicas
    assert replicas_for_barrier(hard.pilot_barrier, minimum=2) > replicas_for_barrier(
        easy.pilot_barrier, minimum=2
    )
    # The run used the chosen count, and reports what the pilot measured.
    assert mcmc.last_state.betas.shape == (hard.num_replicas,)
    diagnostics = nx.exchange_diagnostics(mcmc)
    assert diagnostics.pilot_barrier == hard.pilot_barrier
    attrs = nx.to_inference_data(mcmc).attrs
    assert attrs["num_replicas"] == hard.num_replicas
    assert attrs["pilot_communication_barrier"] == hard.pilot_barrier
    # The pilot tuned its own ladder to equal rejection: the run starts from it, resized.
    pilot = hard.pilot
    assert pilot.betas.shape == (16,) and pilot.betas[1] > initial_ladder(16)[1]
    np.testing.assert_allclose(
        hard._plan.starting_betas,
        equalized_ladder(
            jnp.asarray(pilot.betas), jnp.asarray(pilot.swap_accept_rate), hard.num_replicas
        ),
    )
    # A second run on the same arguments reuses the pilot.
    first = hard.pilot
    run(hard, num_warmup=40, num_samples=40, num_chains=1, seed=1)
    assert hard.pilot is first


def test_an_integer_count_is_used_as_given():
    kernel = nx.ReplicaExchange(_gaussian_model, num_replicas=6, **MOVES)
    state = kernel.init(jax.random.PRNGKey(0), 10, None, (), {})
    assert kernel.num_replicas == 6 and kernel.pilot is None and kernel.pilot_barrier is None
    np.testing.assert_array_equal(state.betas, initial_ladder(6))


@pytest.mark.parametrize(
    "value, error", [("many", TypeError), (0.5, TypeError), (True, TypeError), (1, ValueError)]
)
def test_a_bad_count_gets_a_clear_error(value, error):
    with pytest.raises(error, match="num_replicas must be"):
        nx.ReplicaExchange(_gaussian_model, num_replicas=value)


@pytest.mark.parametrize("model", [_gaussian_model, _costly_gaussian_model])
def test_auto_chooses_the_same_count_under_every_chain_method(model):
    # Under chain_method="parallel" the kernel's init, and with it the choice, runs inside
    # pmap's trace.
    chosen = {}
    for method in ("sequential", "parallel"):
        kernel = nx.ReplicaExchange(model, **MOVES)
        run(kernel, num_warmup=4, num_samples=4, num_chains=2, chain_method=method)
        chosen[method] = (kernel.num_replicas, kernel.pilot_barrier)
    assert chosen["sequential"] == chosen["parallel"]
    assert (chosen["parallel"][1] is None) == (model is _gaussian_model)


def _funnel_model():
    v = numpyro.sample("v", dist.Normal(0.0, 3.0))
    numpyro.sample("x", dist.Normal(0.0, jnp.exp(v / 2)).expand([5]).to_event(1))


def test_the_default_nuts_rungs_cap_their_trees_where_the_potential_is_cheap():
    # In a funnel's neck NUTS builds trees of NumPyro's full depth 10; the rungs move in
    # lockstep, so the default's cap bounds every scan by 2^7 - 1 leapfrog steps.
    lengths = {}
    for name, settings in (("default", {}), ("depth 10", dict(max_tree_depth=10))):
        kernel = nx.ReplicaExchange(_funnel_model, num_replicas=4, reference="prior", **settings)
        mcmc = run(
            kernel, num_warmup=200, num_samples=200, num_chains=1, extra_fields=("num_steps",)
        )
        assert kernel.inner_algo == "NUTS"
        lengths[name] = int(np.max(mcmc.get_extra_fields()["num_steps"]))
    assert lengths["default"] <= 2**exchange_kernels.CHEAP_POTENTIAL_MAX_TREE_DEPTH - 1
    assert lengths["depth 10"] > 2**exchange_kernels.CHEAP_POTENTIAL_MAX_TREE_DEPTH - 1
