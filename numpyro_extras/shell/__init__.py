"""What every kernel runs on: the kernel shell under NumPyro's ``MCMC`` (one base class, the
compiled chains, one Metropolis step), the compilation of the package's programs, progress bars,
devices, pilot NUTS runs, argument checks, the adapter to what NumPyro does not make public,
and the saving of trained networks."""
