"""A NumPyro model as the kernels see it: its flat unconstrained potential, its prior and
likelihood split, its discrete sites, the base densities that stand beside it, and the numerics
that fit them."""
