"""Burn-in and gate: checks, backends, the runner, and the fleet gate. Never imports Pulumi."""
