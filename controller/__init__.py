"""Central controller: watches claims, calls the solver, writes NAS and claim status."""
