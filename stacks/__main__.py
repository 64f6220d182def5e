"""Pulumi entry point (Pulumi.yaml `main: stacks/`): build the fleet named in stack config."""

from stacks.program import main

main()
