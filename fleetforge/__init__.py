"""fleetforge's front door: the command line that wires fleet, stacks, policy and validation."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("fleetforge")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
