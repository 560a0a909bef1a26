"""BlackJAX adaptive tempered SMC, the anchor the benchmarks run beside our samplers.

One run tempers ``log prior(x) + lambda log likelihood(x)`` from ``lambda = 0`` to ``1`` with
BlackJAX's ``adaptive_tempered_smc`` (the next ``lambda`` keeps the ESS at ``target_ess`` of the
particles, systematic resampling) and HMC mutations. The prior must be normalised and the
initial particles exact draws from it; then ``log Z`` is the sum of BlackJAX's
``log_likelihood_increment``. The step size adapts between temperatures towards an acceptance
rate; the inverse mass matrix is the particles' variance (``"particles"``) or a fixed matrix.
One jitted step serves every problem of one shape: the problem's arrays are the traced
``params`` of ``log_prior(params, x)`` and ``log_likelihood(params, x)``.

A gradient budget is met the usual way: a pilot run counts the temperatures the adaptive
schedule takes, and the particle count follows. The pilot's final step size starts the runs.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import blackjax
import jax
import jax.numpy as jnp
import numpy as np
from blackjax.smc import resampling
from common import compile_clock


class SMCSettings(NamedTuple):
    """Settings of :class:`TemperedSMC`.

    :param int pilot_particles: particles of the pilot run that sizes a budget.
    :param int mutation_steps: HMC moves per particle and temperature.
    :param int leapfrog_steps: leapfrog steps per HMC move.
    :param float target_ess: ESS fraction the next temperature keeps.
    :param float target_acceptance: the step-size adaptation's target acceptance rate.
    """

    pilot_particles: int = 256
    mutation_steps: int = 5
    leapfrog_steps: int = 10
    target_ess: float = 0.5
    target_acceptance: float = 0.65


class SMCRun(NamedTuple):
    """One SMC run: ``log Z``, the number of temperatures, the gradient evaluations, the final
    step size, and the final particles with their normalised weights."""

    log_z: float
    num_temperatures: int
    gradient_evaluations: int
    step_size: float
    particles: np.ndarray
    weights: np.ndarray


class TemperedSMC:
    """Adaptive tempered SMC from a normalised prior with exact initial draws.

    :param log_prior: ``(params, x) -> log prior(x)`` (normalised) on one flat point.
    :param log_likelihood: ``(params, x) -> log likelihood(x)``.
    :param SMCSettings settings: the SMC settings.
    """

    def __init__(self, log_prior, log_likelihood, settings: SMCSettings | None = None):
        self.settings = settings = settings or SMCSettings()

        def step(rng_key, state, step_size, inverse_mass_matrix, params):
            kernel = blackjax.adaptive_tempered_smc.build_kernel(
                lambda x: log_prior(params, x),
                lambda x: log_likelihood(params, x),
                blackjax.hmc.build_kernel(),
                blackjax.hmc.init,
                resampling.systematic,
                settings.target_ess,
            )
            mutation_parameters = {
                "step_size": jnp.reshape(step_size, (1,)),
                "inverse_mass_matrix": inverse_mass_matrix[None],
                "num_integration_steps": jnp.array([settings.leapfrog_steps]),
            }
            state, info = kernel(rng_key, state, settings.mutation_steps, mutation_parameters)
            acceptance = jnp.mean(info.update_info.acceptance_rate)
            return state, info.log_likelihood_increment, acceptance

        self._step = jax.jit(step)

    def gradient_evaluations_per_particle_and_temperature(self):
        # blackjax.hmc.init evaluates one gradient per move; each leapfrog step one more.
        return self.settings.mutation_steps * self.settings.leapfrog_steps + 1

    def run(
        self,
        rng_key,
        initial_particles,
        params,
        inverse_mass_matrix="particles",
        step_size=0.5,
        max_temperatures=500,
    ) -> SMCRun:
        """One SMC run from ``initial_particles`` (exact prior draws, shape ``[n, D]``)."""
        state = blackjax.adaptive_tempered_smc.init(initial_particles)
        dtype = jnp.asarray(initial_particles).dtype
        # A strongly typed 0.0, so that the first step does not compile a second version.
        state = state._replace(tempering_param=jnp.zeros((), dtype))
        log_z, num_temperatures = 0.0, 0
        while float(state.tempering_param) < 1.0:
            if num_temperatures == max_temperatures:
                raise RuntimeError(f"SMC did not reach the target in {max_temperatures} steps.")
            rng_key, step_key = jax.random.split(rng_key)
            if isinstance(inverse_mass_matrix, str):
                # Resampled every temperature, so the particles are equally weighted here.
                mass = jnp.maximum(jnp.var(state.particles, axis=0), 1e-8)
            else:
                mass = inverse_mass_matrix
            with compile_clock("SMC"):
                state, increment, acceptance = self._step(
                    step_key, state, jnp.asarray(step_size, dtype), mass, params
                )
            log_z += float(increment)
            num_temperatures += 1
            adjustment = math.exp(2.0 * (float(acceptance) - self.settings.target_acceptance))
            step_size *= min(2.0, max(0.5, adjustment))
        num_particles = int(np.shape(initial_particles)[0])
        gradient_evaluations = (
            num_particles
            * num_temperatures
            * self.gradient_evaluations_per_particle_and_temperature()
        )
        return SMCRun(
            log_z,
            num_temperatures,
            gradient_evaluations,
            step_size,
            np.asarray(state.particles),
            np.asarray(state.weights),
        )

    def pilot(self, rng_key, draw_prior, params, **run_kwargs) -> SMCRun:
        """A run with ``settings.pilot_particles`` particles: its number of temperatures sizes a
        budget and its final step size starts the runs that follow.

        :param draw_prior: ``(rng_key, n) -> [n, D]`` exact prior draws.
        """
        init_key, run_key = jax.random.split(rng_key)
        return self.run(
            run_key, draw_prior(init_key, self.settings.pilot_particles), params, **run_kwargs
        )

    def particles_for_budget(self, rng_key, draw_prior, params, budget, multiple=512, **run_kwargs):
        """Particle count for ``budget`` gradient evaluations, from a pilot run that counts the
        temperatures the adaptive schedule takes; also the pilot's final step size. The count is
        rounded to a ``multiple`` so that few particle counts (compilations) occur.

        :param draw_prior: ``(rng_key, n) -> [n, D]`` exact prior draws.
        """
        pilot = self.pilot(rng_key, draw_prior, params, **run_kwargs)
        per_particle = (
            pilot.num_temperatures * self.gradient_evaluations_per_particle_and_temperature()
        )
        count = max(multiple, multiple * round(budget / per_particle / multiple))
        return count, pilot.step_size
