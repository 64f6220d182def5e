"""Validation, in two sides that never import each other.

- `burnin/`: what runs on every node (runner, worker, checks, backends, probes, parsers, the
  per-rank multi-node all-reduce). Core dependencies only.
- `gate/`, `reports/`, `actions/`, `fleetrun/`, `fabric/`: what runs on the operator's controller
  (judgement, reports, cloud actions, fleet runs through Ansible, fabric pairing).

Both sides read and write results through `fleet.results`. Nothing here imports Pulumi or the CLI.
"""
