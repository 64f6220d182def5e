"""The node side: everything a bare node runs to burn itself in.

Imports only the ground floor (`fleet`) and the core dependencies: never the gate, reports,
actions, fleet runs, the CLI, Pulumi, Ansible or a cloud SDK (tests/test_import_rules.py).
"""
