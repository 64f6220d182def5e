"""Pulumi programs: one ComponentResource per cloud. Never imports validation.

Importing this package loads no Pulumi code: the program (stacks.program, run by stacks/__main__.py)
and the components import Pulumi themselves, so `fleetforge` can check specs without the SDK.
"""

# Stack config key holding the fleet spec: `fleetforge:fleet` in Pulumi.<stack>.yaml.
CONFIG_NAMESPACE = "fleetforge"
CONFIG_KEY = "fleet"
