"""The fleet run's options as `fleet burnin` and `bringup` take them: each option is declared once
here, so both commands spell, default and explain it the same way, and one function turns them into
the run's FleetRunOptions after the checks that must refuse before anything runs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import yaml

from fleetforge import exitcodes, install
from fleetforge.console import fail
from fleetforge.gating import LEVEL_HELP, parse_level

if TYPE_CHECKING:  # the run's modules load only when a run starts: `fleetforge --help` stays light
    from fleet.spec import FleetSpec
    from validation.fleetrun.run import FleetRunOptions

# A role variable's name, and an environment variable's (a role hands those to `environment:`).
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Role variables that become a task's `environment:`, whose names Ansible writes unquoted into the
# shell command line it runs the module with (`A=1;touch x;B='v' python3 ...`). The known ones, and
# any other variable named like them.
ENVIRONMENT_VARS = frozenset(
    {
        "burnin_environment",
        "burnin_fabric_environment",
        "nccl_environment",
        "nccl_env_extra",
        "nccl_profile_environment",
    }
)
ENVIRONMENT_SUFFIXES = ("_environment", "_env_extra")

LevelOption = Annotated[str | None, typer.Option(metavar="LEVEL", help=LEVEL_HELP)]
ForksOption = Annotated[int, typer.Option(metavar="N", min=1, help="Hosts Ansible works on at once.")]
BurninTimeoutOption = Annotated[
    int,
    typer.Option(
        metavar="SECONDS",
        min=30,
        help="Seconds each host's burn-in may run before it is stopped (fail closed).",
    ),
]
ThrottleOption = Annotated[
    int,
    typer.Option(metavar="N", min=0, help="Most hosts measuring at the same time (0: as many as --forks)."),
]
ExtraPackageOption = Annotated[
    list[str] | None,
    typer.Option(
        "--extra-package",
        metavar="PACKAGE",
        help="A package to install on the hosts beside fleetforge (repeatable), e.g. torch==2.13.0 for "
        "the all-reduce across nodes, nvidia-ml-py on GPU hosts.",
    ),
]
WheelhouseOption = Annotated[
    Path | None,
    typer.Option(
        metavar="DIR",
        help="Folder of wheels (fleetforge-*.whl and its dependencies) to install instead of building.",
    ),
]
CollectivesOption = Annotated[
    bool,
    typer.Option(
        "--collectives/--no-collectives", help="Measure an all-reduce across hosts through torchrun."
    ),
]
CollectivesTimeoutOption = Annotated[
    int,
    typer.Option(metavar="SECONDS", min=10, help="Seconds for the all-reduce's rendezvous and measurement."),
]
FabricOption = Annotated[
    bool,
    typer.Option(
        "--fabric/--no-fabric",
        help="After the burn-in, measure the hosts in pairs (rounds of disjoint pairs at once, a new "
        "partner each round) and name the slow host or link; on for 2+ hosts.",
    ),
]
# Unset (None) unless given, so that a fabric option given with --no-fabric is refused, not ignored.
FabricRoundsOption = Annotated[
    int | None,
    typer.Option(metavar="N", min=1, max=16, help="Rounds of pairs in the fabric stage [default: 3]."),
]
FabricTimeoutOption = Annotated[
    int | None,
    typer.Option(
        metavar="SECONDS", min=10, help="Seconds for one pair's rendezvous and measurement [default: 120]."
    ),
]
FABRIC_ROUNDS = 3
FABRIC_TIMEOUT_S = 120
VarOption = Annotated[
    list[str] | None,
    typer.Option(
        "--var",
        metavar="KEY=VALUE",
        help="A burnin role variable KEY=VALUE (repeatable, YAML value), e.g. burnin_blas_threads=1.",
    ),
]


def fleet_run_options(
    *,
    inventory: Path,
    out_dir: Path,
    sku: str | None,
    level: str | None,
    spec: Path | None,
    forks: int,
    timeout: int,
    throttle: int,
    extra_package: list[str] | None,
    wheelhouse: Path | None,
    collectives: bool,
    collectives_timeout: int,
    fabric: bool,
    fabric_rounds: int | None,
    fabric_timeout: int | None,
    var: list[str] | None,
    fleet_spec: FleetSpec | None,
    limit: tuple[str, ...] = (),
) -> FleetRunOptions:
    """The run's options; a bad level, wheelhouse or --var exits 64 before anything runs. The
    spec's outlier rule (mad_k, min_relative_margin) also judges the fabric stage's pairs where it
    is wider than the pairs' own defaults."""
    from validation.fabric.attribute import DEFAULT_MAD_K, DEFAULT_MIN_RELATIVE_MARGIN
    from validation.fleetrun.run import FleetRunOptions

    if level is not None:
        parse_level(level, None)
    if wheelhouse is not None and not wheelhouse.is_dir():
        fail(f"--wheelhouse {wheelhouse}: not a folder", exitcodes.USAGE)
    if not fabric:
        given = [
            name
            for name, value in (("--fabric-rounds", fabric_rounds), ("--fabric-timeout", fabric_timeout))
            if value is not None
        ]
        if given:
            fail(
                f"{' and '.join(given)}: set the fabric stage, which --no-fabric turns off; drop one or the other",
                exitcodes.USAGE,
            )
    extravars = parse_vars(var or [])
    return FleetRunOptions(
        source=install.source_root(),
        ansible_root=install.ansible_root(),
        inventory=inventory,
        out_dir=out_dir,
        sku=sku or "auto",
        level=level,
        spec=spec,
        forks=forks,
        timeout_s=timeout,
        throttle=throttle,
        extra_packages=tuple(extra_package or ()),
        wheelhouse=wheelhouse,
        collectives=collectives,
        collectives_timeout_s=collectives_timeout,
        fabric=fabric,
        fabric_rounds=FABRIC_ROUNDS if fabric_rounds is None else fabric_rounds,
        fabric_timeout_s=FABRIC_TIMEOUT_S if fabric_timeout is None else fabric_timeout,
        extravars=extravars,
        # Every play's rendezvous (the burn-in's, the rerun's all-reduce, the fabric pairs after it)
        # counts from this port: set with --var for one play only, the others met where a firewall
        # shut them out and every pair "measured" nothing.
        collectives_port=collectives_port(extravars),
        limit=limit,
        fabric_mad_k=max(DEFAULT_MAD_K, float(fleet_spec.validation.mad_k)) if fleet_spec else DEFAULT_MAD_K,
        fabric_min_relative_margin=(
            max(DEFAULT_MIN_RELATIVE_MARGIN, float(fleet_spec.validation.min_relative_margin))
            if fleet_spec
            else DEFAULT_MIN_RELATIVE_MARGIN
        ),
    )


# The all-reduce's port and, after it, one per fabric pair of a round.
PORTS = range(1024, 65001)


def collectives_port(extravars: dict[str, object]) -> int:
    """The first port of the run's rendezvous: `--var burnin_collectives_port=N`, else 29400."""
    port = extravars.get("burnin_collectives_port", 29400)
    if isinstance(port, bool) or not isinstance(port, int) or port not in PORTS:
        fail(
            f"--var burnin_collectives_port: {port!r}; allowed: a TCP port from {PORTS.start} to "
            f"{PORTS.stop - 1} (the fabric pairs take the ports after it)",
            exitcodes.USAGE,
        )
    return port


def parse_vars(items: list[str]) -> dict[str, object]:
    """`--var KEY=VALUE` items as role variables, each value read as YAML."""
    extravars: dict[str, object] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not _NAME.fullmatch(key):
            fail(f"--var {item!r}: expected KEY=VALUE with KEY a variable name", exitcodes.USAGE)
        try:
            extravars[key] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            fail(f"--var {key}: value is not YAML ({exc.__class__.__name__})", exitcodes.USAGE)
        if key in ENVIRONMENT_VARS or key.endswith(ENVIRONMENT_SUFFIXES):
            check_environment(key, extravars[key])
    return extravars


def check_environment(key: str, value: object) -> None:
    """Exit 64 unless `--var KEY` is a mapping of environment variable names (the shell runs a
    name Ansible puts in front of the module's command)."""
    if not isinstance(value, dict):
        fail(
            f"--var {key}: {value!r} is not a mapping of environment variables; "
            f"expected {key}={{NAME: value, ...}}",
            exitcodes.USAGE,
        )
    for name in value:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            fail(
                f"--var {key}: {name!r} is not an environment variable name; allowed: a letter or _ "
                "then letters, digits and _ (e.g. NCCL_SOCKET_IFNAME)",
                exitcodes.USAGE,
            )
