"""Marginalized AIS against AIS on Boltzmann machines, with the mAIS paper's block-Gibbs kernels.

The annealing path is the mAIS paper's (Sec. III C): ``E_k = beta_k E`` from the uniform
distribution ``P_0`` (``beta_0 = 0``) to the machine (``beta_K = 1``). Marginalized AIS (mAIS)
runs AIS on the marginal energy of eq. 39 (one layer summed out) with the collapsed block-Gibbs
kernel of eq. 41; joint AIS uses the kernel of eq. 42, which satisfies condition (36), so the
paper's Theorems 1-2 (mAIS has the smaller variance of ``Z``-hat and the smaller free-energy
bias) apply to the pair.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from numpyro_extras.annealing.boltzmann import BipartiteBoltzmann, log_unit_sum
from numpyro_extras.annealing.driver import (
    anneal,
    inverse_temperature_schedule,
    warn_on_small_ess,
)
from numpyro_extras.results.evidence import Evidence, evidence_from_log_weights
from numpyro_extras.shell.validation import check_rng_key

__all__ = [
    "AIS_KERNELS",
    "BoltzmannComparison",
    "PairedLogWeights",
    "SIDES",
    "ais_boltzmann",
    "ais_log_weights",
    "collapsed_gibbs_transition",
    "joint_log_weight_increment",
    "joint_transition",
    "mais_log_weights",
    "mais_vs_ais",
    "marginal_log_weight_increment",
    "marginalized_ais_boltzmann",
    "paired_log_weights",
    "resolve_side",
]

SIDES = ("V", "H", "auto")
AIS_KERNELS = ("paired", "gibbs")


def resolve_side(machine, side):
    """The layer the mAIS chain runs on: ``"V"`` (mAIS-V, sums ``h`` out) or ``"H"``.

    :param BipartiteBoltzmann machine: the machine.
    :param str side: ``"V"``, ``"H"`` or ``"auto"`` (the smaller layer).
    :return: ``"V"`` or ``"H"``.
    :raises ValueError: for another ``side``.
    """
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}.")
    if side == "auto":
        # Marginalise the larger layer (the mAIS paper's Sec. IV finds it the better side): the
        # chain runs on the smaller one.
        return "V" if machine.num_hidden >= machine.num_visible else "H"
    return side


def _chain_machine(machine, side):
    """The machine oriented so that the mAIS chain runs on its visible layer."""
    return machine if resolve_side(machine, side) == "V" else machine.swap_layers()


def marginal_log_weight_increment(machine):
    """``ln lambda_k(v) = -E_V(v, beta_k) + E_V(v, beta_{k-1})`` (eq. 26), one matmul per call.

    :param BipartiteBoltzmann machine: the machine, oriented so the chain runs on ``v``.
    :return: ``(v, beta_previous, beta) -> ln lambda_k(v)``, the mAIS weight increment.
    """

    def increment(v, beta_previous, beta):
        hidden_fields = machine.hidden_fields(v, 1.0)
        hidden_terms = log_unit_sum(beta * hidden_fields, machine.units) - log_unit_sum(
            beta_previous * hidden_fields, machine.units
        )
        visible_term = (v @ machine.visible_bias) / machine.temperature
        return (beta - beta_previous) * visible_term + jnp.sum(hidden_terms, -1)

    return increment


def joint_log_weight_increment(machine):
    """``ln w_k(v, h) = -(beta_k - beta_{k-1}) E(v, h)`` (eq. 12 with a uniform ``P_0``).

    :param BipartiteBoltzmann machine: the machine.
    :return: ``((v, h), beta_previous, beta) -> ln w_k``, the joint AIS weight increment.
    """

    def increment(state, beta_previous, beta):
        v, h = state
        return -(beta - beta_previous) * machine.energy(v, h)

    return increment


def _collapsed_gibbs_step(machine, rng_key, v, beta):
    """``v' ~ tau_k(v' | v) = sum_h P_k(v' | h) P_k(h | v)`` (eq. 41): two half-sweeps."""
    hidden_key, visible_key = jax.random.split(rng_key)
    hidden = machine.sample_hidden(hidden_key, v, beta)
    return machine.sample_visible(visible_key, hidden, beta)


def collapsed_gibbs_transition(machine):
    """The mAIS kernel of eq. 41 in the annealing driver's transition signature.

    :param BipartiteBoltzmann machine: the machine, oriented so the chain runs on ``v``.
    :return: ``(rng_key, v, beta, kernel_state) -> (v', kernel_state, 1.0)``.
    """

    def transition(rng_key, v, beta, kernel_state):
        return _collapsed_gibbs_step(machine, rng_key, v, beta), kernel_state, 1.0

    return transition


def joint_transition(machine, kernel):
    """The joint AIS kernels on ``(v, h)``.

    ``"paired"`` is eq. 42, ``P_k(h' | v') tau_k(v' | v)``: three half-sweeps, the old ``h``
    discarded, so condition (36) holds and Theorems 1-2 apply. ``"gibbs"`` is the plain
    two-half-sweep block Gibbs ``v' ~ P_k(v | h)``, ``h' ~ P_k(h | v')``, which reads the old
    ``h`` and is not covered by the theorems.

    :param BipartiteBoltzmann machine: the machine.
    :param str kernel: one of ``AIS_KERNELS``.
    :return: ``(rng_key, (v, h), beta, kernel_state) -> ((v', h'), kernel_state, 1.0)``.
    """

    def transition(rng_key, state, beta, kernel_state):
        v, h = state
        move_key, hidden_key = jax.random.split(rng_key)
        if kernel == "paired":
            v = _collapsed_gibbs_step(machine, move_key, v, beta)
        else:
            v = machine.sample_visible(move_key, h, beta)
        return (v, machine.sample_hidden(hidden_key, v, beta)), kernel_state, 1.0

    return transition


def _check_particles(num_particles):
    if isinstance(num_particles, bool) or int(num_particles) != num_particles:
        raise ValueError(f"num_particles must be an integer, got {num_particles!r}.")
    if int(num_particles) < 1:
        raise ValueError(f"num_particles must be at least 1, got {num_particles}.")
    return int(num_particles)


def _check_machine(machine):
    if not isinstance(machine, BipartiteBoltzmann):
        raise TypeError(
            f"Expected a BipartiteBoltzmann machine (nx.rbm, nx.random_rbm, nx.ising_lattice), "
            f"got {type(machine).__name__}."
        )


def mais_log_weights(rng_key, machine, inverse_temperatures, num_particles, *, side="auto"):
    """Per-particle log weights ``ln Lambda`` of marginalized AIS (eq. 24-26), traceable.

    The chain starts from uniform ``v`` (exact ``P_0(v)``), accumulates ``ln lambda_k(v^(k))``
    and moves with the collapsed block-Gibbs kernel of eq. 41 at ``beta_k`` for ``k < K``.
    ``exp(ln Lambda)`` is an unbiased estimate of ``Z / Z_0`` with
    ``ln Z_0 = machine.base_log_partition()``. Free of Python-side checks on values, so it can
    be used under ``jit`` and ``vmap`` (e.g. over a batch of machines).

    :param rng_key: PRNG key.
    :param BipartiteBoltzmann machine: the model.
    :param inverse_temperatures: the schedule ``(K + 1,)`` from 0 to 1.
    :param int num_particles: ``N``.
    :param str side: ``"V"`` (mAIS-V: the chain runs on ``v``, ``h`` is summed out), ``"H"``
        (mAIS-H) or ``"auto"`` (sum out the larger layer).
    :return: array ``(N,)``.
    """
    machine = _chain_machine(machine, side)
    initial_key, annealing_key = jax.random.split(rng_key)
    initial_v = machine.sample_uniform(initial_key, (num_particles, machine.num_visible))
    result = anneal(
        annealing_key,
        machine.visible_log_density,
        initial_v,
        collapsed_gibbs_transition(machine),
        inverse_temperatures,
        log_weight_increment_fn=marginal_log_weight_increment(machine),
        progress_bar=False,
    )
    return result.log_weights


def ais_log_weights(rng_key, machine, inverse_temperatures, num_particles, *, kernel="paired"):
    """Per-particle log weights ``ln W`` of joint-space AIS (eq. 10-13), traceable.

    The chain starts from uniform ``(v, h)``, accumulates ``ln w_k = -(beta_k - beta_{k-1}) E``
    and moves with the kernel of eq. 42 (``kernel="paired"``, three half-sweeps, condition 36)
    or plain block Gibbs (``"gibbs"``, not covered by the paper's theorems). ``exp(ln W)`` is
    an unbiased estimate of ``Z / Z_0`` with ``ln Z_0 = n ln 2``.

    :param rng_key: PRNG key.
    :param BipartiteBoltzmann machine: the model.
    :param inverse_temperatures: the schedule ``(K + 1,)`` from 0 to 1.
    :param int num_particles: ``N``.
    :param str kernel: ``"paired"`` or ``"gibbs"``.
    :return: array ``(N,)``.
    """
    if kernel not in AIS_KERNELS:
        raise ValueError(f"kernel must be one of {AIS_KERNELS}, got {kernel!r}.")
    visible_key, hidden_key, annealing_key = jax.random.split(rng_key, 3)
    initial = (
        machine.sample_uniform(visible_key, (num_particles, machine.num_visible)),
        machine.sample_uniform(hidden_key, (num_particles, machine.num_hidden)),
    )
    result = anneal(
        annealing_key,
        lambda state, beta: machine.log_density(*state, beta),
        initial,
        joint_transition(machine, kernel),
        inverse_temperatures,
        log_weight_increment_fn=joint_log_weight_increment(machine),
        progress_bar=False,
    )
    return result.log_weights


class PairedLogWeights(NamedTuple):
    """Per-particle log weights of AIS and mAIS on shared trajectories (:func:`paired_log_weights`).

    :param ais: ``ln W`` of joint AIS with the kernel of eq. 42, shape ``(N,)``.
    :param mais: ``ln Lambda`` of mAIS with the kernel of eq. 41, shape ``(N,)``.
    """

    ais: jax.Array
    mais: jax.Array


def paired_log_weights(rng_key, machine, inverse_temperatures, num_particles, *, side="auto"):
    """AIS and mAIS log weights on the same chain trajectories (mAIS paper Sec. III B, App. A).

    Under condition (36) the joint AIS process is exactly the mAIS chain plus, at every ``k``,
    an independent ``h^(k) ~ P_{k-1}(h | v^(k))`` (App. A, eq. A2-A3). So one run gives both:
    the chain moves ``v`` with eq. 41, accumulates ``ln lambda_k(v^(k))`` (mAIS) and
    ``ln w_k(v^(k), h^(k))`` (AIS). Particle ``mu`` of the two outputs shares its
    ``v``-trajectory, so ``Lambda_mu = E[W_mu | V_mu]`` (eq. A5): the comparison of Theorems 1-2
    with common randomness, at about 1.5 times the cost of mAIS alone. Traceable.

    :param rng_key: PRNG key.
    :param BipartiteBoltzmann machine: the model.
    :param inverse_temperatures: the schedule ``(K + 1,)`` from 0 to 1.
    :param int num_particles: ``N``.
    :param str side: ``"V"``, ``"H"`` or ``"auto"``, as in :func:`mais_log_weights` (the AIS
        kernel is the matching eq. 42 with the layers' roles swapped for ``"H"``).
    :return: :class:`PairedLogWeights`.
    """
    machine = _chain_machine(machine, side)
    joint_increment = joint_log_weight_increment(machine)
    visible_key, hidden_key, annealing_key = jax.random.split(rng_key, 3)
    # h^(1) ~ P_0(h | v^(1)) is uniform.
    initial = (
        machine.sample_uniform(visible_key, (num_particles, machine.num_visible)),
        machine.sample_uniform(hidden_key, (num_particles, machine.num_hidden)),
    )
    marginal_increment = marginal_log_weight_increment(machine)

    def transition(rng_key, state, beta, kernel_state):
        # The driver accumulates the mAIS weight (a function of v alone); the AIS weight needs
        # the random h^(k), so it rides in the kernel state with the previous beta.
        ais_log_weights, beta_previous = kernel_state
        ais_log_weights = ais_log_weights + joint_increment(state, beta_previous, beta)
        v, _ = state
        move_key, hidden_key = jax.random.split(rng_key)
        v = _collapsed_gibbs_step(machine, move_key, v, beta)
        # h^(k+1) ~ P_k(h | v^(k+1)): the third half-sweep of eq. 42.
        state = (v, machine.sample_hidden(hidden_key, v, beta))
        return state, (ais_log_weights, beta), 1.0

    betas = jnp.asarray(inverse_temperatures, dtype=jnp.result_type(float))
    result = anneal(
        annealing_key,
        lambda state, beta: machine.visible_log_density(state[0], beta),
        initial,
        transition,
        betas,
        kernel_state=(jnp.zeros(num_particles, betas.dtype), betas[0]),
        log_weight_increment_fn=lambda state, beta_previous, beta: marginal_increment(
            state[0], beta_previous, beta
        ),
        progress_bar=False,
    )
    # The driver transitions only between weight updates, so the last AIS factor, at
    # (v^(K), h^(K)) with h^(K) ~ P_{K-1}(h | v^(K)), is added here.
    ais_log_weights, beta_previous = result.kernel_state
    ais_log_weights = ais_log_weights + joint_increment(result.positions, beta_previous, betas[-1])
    return PairedLogWeights(ais_log_weights, result.log_weights)


def _warn_on_small_ess(estimator, evidence, num_particles, advice):
    return warn_on_small_ess(
        f"{estimator}:",
        evidence,
        num_particles,
        "log Z is biased low on average, the free energy high, and one run can be off by far "
        "more than its stderr",
        advice,
        stacklevel=3,
    )


_MORE_TEMPERATURES = "use more temperatures"
_MORE_TEMPERATURES_OR_MAIS = (
    "use more temperatures, or mAIS (nx.marginalized_ais_boltzmann), whose weights vary less"
)


def _schedule(schedule, num_temperatures):
    if isinstance(schedule, str) and num_temperatures is None:
        raise ValueError(f"num_temperatures (K) is needed with schedule={schedule!r}.")
    return inverse_temperature_schedule(schedule, num_temperatures)


def marginalized_ais_boltzmann(
    rng_key, machine, *, num_particles, num_temperatures=None, schedule="linear", side="auto"
) -> Evidence:
    """``log Z`` of a bipartite Boltzmann machine by marginalized AIS (mAIS paper eq. 24-29).

    AIS on the marginal of the tempered joint (eq. 39) with the collapsed block-Gibbs kernel
    (eq. 41), from the uniform ``P_0`` (``ln Z_0 = n ln 2``) to the model, along
    ``E_k = beta_k E``. ``exp(log_z)`` is unbiased for ``Z``; the free-energy estimate
    ``-log_z`` is biased upward (eq. 31), less than joint AIS's (Theorem 2).

    :param rng_key: PRNG key.
    :param BipartiteBoltzmann machine: the model.
    :param int num_particles: ``N``.
    :param int num_temperatures: ``K``, the number of weight factors (``K - 1`` transitions).
    :param schedule: ``"linear"`` (the paper's ``beta_k = k / K``), another name of
        :func:`~numpyro_extras.annealing.inverse_temperature_schedule`, or an array.
    :param str side: ``"V"`` (mAIS-V), ``"H"`` (mAIS-H) or ``"auto"`` (sum out the larger
        layer, the paper's rule).
    :return: :class:`~numpyro_extras.Evidence`; the free energy is ``F = -log_z``.
    :warns UserWarning: when the final ESS is below 5% of the particles, as
        :func:`~numpyro_extras.ais` does: the estimate and its stderr are then unreliable; use
        more temperatures.

    **Example:**

    .. code-block:: python

        machine = nx.random_rbm(jax.random.PRNGKey(0), 20, 40, inverse_temperature=4.0)
        evidence = nx.marginalized_ais_boltzmann(
            jax.random.PRNGKey(1), machine, num_particles=1000, num_temperatures=30)
        -evidence.log_z / machine.num_units, machine.free_energy() / machine.num_units
    """
    check_rng_key(rng_key)
    _check_machine(machine)
    num_particles = _check_particles(num_particles)
    resolve_side(machine, side)
    betas = _schedule(schedule, num_temperatures)
    log_weights = mais_log_weights(rng_key, machine, betas, num_particles, side=side)
    evidence = evidence_from_log_weights(log_weights, float(machine.base_log_partition()))
    return _warn_on_small_ess(
        "nx.marginalized_ais_boltzmann", evidence, num_particles, _MORE_TEMPERATURES
    )


def ais_boltzmann(
    rng_key,
    machine,
    *,
    num_particles,
    num_temperatures=None,
    schedule="linear",
    kernel="paired",
) -> Evidence:
    """``log Z`` of a bipartite Boltzmann machine by joint-space AIS (mAIS paper eq. 7-16).

    The baseline of the mAIS paper: AIS on ``(v, h)`` with the kernel of eq. 42
    (``kernel="paired"``: ``h~ ~ P_k(h|v)``, ``v' ~ P_k(v|h~)``, ``h' ~ P_k(h|v')``), which
    satisfies condition (36); or plain block Gibbs (``"gibbs"``, not covered by Theorems 1-2).
    Starts from the uniform ``P_0``, ``ln Z_0 = n ln 2``.

    :param rng_key: PRNG key.
    :param BipartiteBoltzmann machine: the model.
    :param int num_particles: ``N``.
    :param int num_temperatures: ``K``.
    :param schedule: ``"linear"`` (default), another schedule name, or an array.
    :param str kernel: ``"paired"`` or ``"gibbs"``.
    :return: :class:`~numpyro_extras.Evidence`; the free energy is ``F = -log_z``.
    :warns UserWarning: when the final ESS is below 5% of the particles, as
        :func:`~numpyro_extras.ais` does: the estimate and its stderr are then unreliable; use
        more temperatures or mAIS.

    **Example:**

    .. code-block:: python

        evidence = nx.ais_boltzmann(rng_key, machine, num_particles=1000, num_temperatures=30)
        evidence.log_z, machine.log_partition()
    """
    check_rng_key(rng_key)
    _check_machine(machine)
    num_particles = _check_particles(num_particles)
    if kernel not in AIS_KERNELS:
        raise ValueError(f"kernel must be one of {AIS_KERNELS}, got {kernel!r}.")
    betas = _schedule(schedule, num_temperatures)
    log_weights = ais_log_weights(rng_key, machine, betas, num_particles, kernel=kernel)
    # The joint density at beta = 0 is 1 on each of the 2^n states.
    evidence = evidence_from_log_weights(log_weights, machine.num_units * math.log(2.0))
    return _warn_on_small_ess(
        "nx.ais_boltzmann", evidence, num_particles, _MORE_TEMPERATURES_OR_MAIS
    )


class BoltzmannComparison(NamedTuple):
    """AIS and mAIS estimates from the same trajectories (:func:`mais_vs_ais`).

    :param ais: :class:`~numpyro_extras.Evidence` of joint AIS (eq. 42 kernel); its
        ``log_weights`` are the per-particle ``ln W``.
    :param mais: :class:`~numpyro_extras.Evidence` of mAIS (eq. 41 kernel), ``ln Lambda``.
    :param str side: the layer the chain ran on, ``"V"`` or ``"H"``.

    **Example:**

    .. code-block:: python

        machine = nx.random_rbm(jax.random.PRNGKey(0), 20, 40, inverse_temperature=4.0)
        both = nx.mais_vs_ais(
            jax.random.PRNGKey(1), machine, num_particles=1000, num_temperatures=10
        )
        both.ais.log_z, both.mais.log_z, machine.log_partition()
    """

    ais: Evidence
    mais: Evidence
    side: str

    @property
    def ais_free_energy(self) -> float:
        """``F_AIS = -ln Z_AIS`` (eq. 16)."""
        return -self.ais.log_z

    @property
    def mais_free_energy(self) -> float:
        """``F_mAIS = -ln Z_mAIS`` (eq. 29)."""
        return -self.mais.log_z


def mais_vs_ais(
    rng_key, machine, *, num_particles, num_temperatures=None, schedule="linear", side="auto"
) -> BoltzmannComparison:
    """AIS and marginalized AIS of a Boltzmann machine, paired on the same trajectories.

    One chain per particle moves with the collapsed block-Gibbs kernel (eq. 41) and carries
    both weights: mAIS's ``Lambda`` and joint AIS's ``W`` with the eq. 42 kernel, whose ``h``
    at each step is a fresh exact draw (App. A, see :func:`paired_log_weights`).
    Particle by particle, ``Lambda = E[W | v-trajectory]``, so Theorems 1-2 (smaller variance
    of ``Z``-hat, smaller free-energy bias for mAIS) can be checked with little noise.

    :param rng_key: PRNG key.
    :param BipartiteBoltzmann machine: the model.
    :param int num_particles: ``N``.
    :param int num_temperatures: ``K``.
    :param schedule: ``"linear"`` (default), another schedule name, or an array.
    :param str side: ``"V"``, ``"H"`` or ``"auto"`` (sum out the larger layer).
    :return: :class:`BoltzmannComparison`.
    :warns UserWarning: once per estimator (AIS, mAIS) whose final ESS is below 5% of the
        particles, as :func:`~numpyro_extras.ais` does. The example's short schedule on a cold
        machine warns for both: its numbers show the typical gap, not reliable estimates.

    **Example:**

    .. code-block:: python

        machine = nx.random_rbm(jax.random.PRNGKey(0), 20, 40, inverse_temperature=8.0)
        both = nx.mais_vs_ais(rng_key, machine, num_particles=1000, num_temperatures=10)
        exact = machine.free_energy()
        (both.ais_free_energy - exact) / machine.num_units   # about 0.09 per spin
        (both.mais_free_energy - exact) / machine.num_units  # about 0.02 per spin
    """
    check_rng_key(rng_key)
    _check_machine(machine)
    num_particles = _check_particles(num_particles)
    resolved_side = resolve_side(machine, side)
    betas = _schedule(schedule, num_temperatures)
    weights = paired_log_weights(rng_key, machine, betas, num_particles, side=resolved_side)
    log_z0 = float(machine.base_log_partition())
    return BoltzmannComparison(
        ais=_warn_on_small_ess(
            "nx.mais_vs_ais (AIS)",
            evidence_from_log_weights(weights.ais, log_z0),
            num_particles,
            _MORE_TEMPERATURES_OR_MAIS,
        ),
        mais=_warn_on_small_ess(
            "nx.mais_vs_ais (mAIS)",
            evidence_from_log_weights(weights.mais, log_z0),
            num_particles,
            _MORE_TEMPERATURES,
        ),
        side=resolved_side,
    )
