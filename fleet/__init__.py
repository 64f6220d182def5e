"""What a fleet is: the spec users write and the catalog of accelerator SKUs.

This floor imports nothing from stacks, policy, validation or the CLI.
"""
