"""Fleet-wide burn-in: Ansible (through ansible-runner) runs the burnin role on every inventory host,
torchrun measures an all-reduce across them, and the controller gates what came back.

- bundle.py: the wheels a node installs from, built on the controller (nodes need no index).
- inventory.py: the hosts an inventory names, as Ansible parses it.
- events.py: ansible-runner's events and stats -> per-host outcomes -> the gate's reasons.
- run.py: one fleet run: bundle, playbook, fetched results.
- multinode.py: runs on the nodes: the torchrun launcher and worker for the cross-node all-reduce.

Nothing here imports ansible_runner or torch at import time: `fleetforge --help` and the nodes
(which have neither Ansible nor, maybe, PyTorch) import this package freely.
"""
