"""What every estimator returns and reads from a finished run: the :class:`Evidence` result,
a run's ESS and R-hat, the ArviZ adapter, and the check of a ``log Z`` against the prior."""
