"""Host-level probes every backend shares: kernel log, sysfs (fabric, EDAC, thermal, cpufreq,
RAPL), host inventory, versions, perftest loopback, storage throughput and DCGM diagnostics.

`sysfs_root` is injectable so tests read captured trees; commands go through `self.run` so
tests can substitute captured outputs.
"""

from __future__ import annotations

import glob
import os
import platform
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

from validation.burnin.backends.base import Raw, Unsupported
from validation.burnin.parsers.kernlog import RELEVANT
from validation.burnin.parsers.sysfs import ib_rate_gbitps, ib_state
from validation.burnin.probes import storage_io

Runner = Callable[..., "subprocess.CompletedProcess[str]"]
_CMD_TIMEOUT_S = 30.0
# perftest's default TCP port for the out-of-band exchange; one loopback pair at a time.
_PERFTEST_PORT = 18515


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _driver(device_dir: Path) -> str | None:
    """The kernel driver bound to a sysfs class device's parent (`device/driver` links to
    .../bus/pci/drivers/<name>), or None when there is no such link or it cannot be followed."""
    link = device_dir / "device" / "driver"
    if not link.exists():
        return None
    return os.path.basename(os.path.realpath(link)) or None


def _read_number(path: Path) -> float | None:
    text = _read(path)
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def machine_identity(root: Path = Path("/")) -> dict[str, str]:
    """What tells this machine from another: systemd's machine id (/etc/machine-id), or where that
    is missing the firmware's product UUID (/sys/class/dmi/id/product_uuid, readable by root), and
    the host name. A part that cannot be read is left out, never guessed."""
    identity: dict[str, str] = {}
    machine_id = _read(root / "etc/machine-id")
    if machine_id:
        identity["machine_id"] = machine_id
    else:
        uuid = _read(root / "sys/class/dmi/id/product_uuid")
        if uuid:
            identity["product_uuid"] = uuid.lower()
    identity["hostname"] = socket.gethostname() or "localhost"
    return identity


def _kib(line: str) -> float | None:
    """The number of a /proc/meminfo line ("MemTotal:  1234 kB"), or None when it has none."""
    try:
        return float(line.split()[1])
    except (IndexError, ValueError):
        return None


class HostProbe:
    def __init__(
        self,
        sysfs_root: Path = Path("/sys"),
        proc_root: Path = Path("/proc"),
        run: Runner = subprocess.run,
    ) -> None:
        self.sysfs = sysfs_root
        self.proc = proc_root
        self.run = run

    # ---------------------------------------------------------------- commands

    def _command(self, argv: Sequence[str], timeout: float = _CMD_TIMEOUT_S) -> str | None:
        """stdout of a command, or None when it is missing or fails."""
        if shutil.which(argv[0]) is None:
            return None
        try:
            done = self.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    # ---------------------------------------------------------------- kernel log

    def kernel_log(self) -> Raw:
        """Hardware-relevant kernel log lines since boot (XID, MCE, EDAC), and where they came from."""
        sources: list[tuple[str, Callable[[], str | None]]] = [
            (
                "journalctl",
                lambda: self._command(["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-iso"]),
            ),
            ("dmesg", lambda: self._command(["dmesg"])),
            ("/var/log/kern.log", lambda: _read(Path("/var/log/kern.log"))),
        ]
        for name, read in sources:
            text = read()
            lines = text.splitlines() if text else []
            if not lines:
                continue  # missing, failed, or empty (journald not collecting the kernel log)
            return {
                "source": name,
                "total_lines": len(lines),
                "lines": [ln for ln in lines if RELEVANT.search(ln)],
            }
        return {"source": None, "lines": [], "error": "no readable kernel log (journalctl, dmesg, kern.log)"}

    # ---------------------------------------------------------------- DCGM diagnostics

    def dcgm_diag(self, run_level: int, timeout: float) -> Raw:
        """`dcgmi diag -r N -j` where NVIDIA DCGM is installed; Unsupported (a skip) where not.

        dcgmi exits non-zero when a test fails, with the verdicts still in its JSON: the exit
        status is recorded, and parse reads the JSON whatever it was.
        """
        dcgmi = shutil.which("dcgmi")
        if dcgmi is None:
            raise Unsupported("dcgmi not installed (NVIDIA DCGM): DCGM diagnostics not run")
        raw: Raw = {"run_level": run_level, "argv": [dcgmi, "diag", "-r", str(run_level), "-j"]}
        version = self._command([dcgmi, "--version"]) or ""
        raw["version"] = next(
            (ln.split(":", 1)[1].strip() for ln in version.splitlines() if "version" in ln), ""
        )
        try:
            done = self.run(raw["argv"], capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return {**raw, "rc": None, "output": "", "stderr": f"dcgmi diag timed out after {timeout:g} s"}
        except OSError as exc:
            return {**raw, "rc": None, "output": "", "stderr": f"dcgmi could not be started: {exc}"}
        return {**raw, "rc": done.returncode, "output": done.stdout, "stderr": (done.stderr or "")[-2000:]}

    # ---------------------------------------------------------------- inventory and versions

    def host_inventory(self) -> Raw:
        cpuinfo = _read(self.proc / "cpuinfo") or ""
        model = next(
            (ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")), ""
        )
        microcode = next(
            (ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("microcode")), ""
        )
        meminfo = _read(self.proc / "meminfo") or ""
        mem_kib = next((_kib(ln) for ln in meminfo.splitlines() if ln.startswith("MemTotal:")), None)
        numa = len(glob.glob(str(self.sysfs / "devices/system/node/node[0-9]*")))
        dmi = self.sysfs / "class/dmi/id"
        return {
            "cpus": os.cpu_count(),  # None: not known, never 0
            "usable_cpus": len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else os.cpu_count(),
            "cpu_model": model or platform.processor() or platform.machine(),
            "machine": platform.machine(),
            "microcode": microcode,
            "memory_bytes": mem_kib * 1024 if mem_kib else None,  # None: MemTotal not readable
            "numa_nodes": numa,
            "bios_version": _read(dmi / "bios_version") or "",
            "sys_vendor": _read(dmi / "sys_vendor") or "",
            "product_name": _read(dmi / "product_name") or "",
        }

    def host_versions(self) -> dict[str, str]:
        versions = {"kernel": platform.release()}
        try:
            versions["fleetforge"] = metadata.version("fleetforge")
        except metadata.PackageNotFoundError:
            versions["fleetforge"] = "0.0.0+source"
        ofed = self._command(["ofed_info", "-s"], timeout=10)
        if ofed:
            versions["ofed"] = ofed.strip().rstrip(":")
        else:
            mlx = _read(self.sysfs / "module/mlx5_core/version")
            if mlx:
                versions["ofed"] = f"mlx5_core {mlx}"
        return versions

    # ---------------------------------------------------------------- CPU health and telemetry

    def edac(self) -> Raw:
        controllers = []
        for mc in sorted(glob.glob(str(self.sysfs / "devices/system/edac/mc/mc[0-9]*"))):
            ue, ce = _read_number(Path(mc) / "ue_count"), _read_number(Path(mc) / "ce_count")
            if ue is not None or ce is not None:
                controllers.append({"mc": Path(mc).name, "ue_count": ue or 0, "ce_count": ce or 0})
        return {"controllers": controllers}

    def thermal_zones(self) -> list[Raw]:
        zones = []
        for zone in sorted(glob.glob(str(self.sysfs / "class/thermal/thermal_zone[0-9]*"))):
            temp = _read_number(Path(zone) / "temp")
            if temp is not None:
                zones.append(
                    {"zone": Path(zone).name, "type": _read(Path(zone) / "type") or "", "temp_c": temp / 1000}
                )
        return zones

    def _cpu_dirs(self) -> list[Path]:
        return [Path(p) for p in sorted(glob.glob(str(self.sysfs / "devices/system/cpu/cpu[0-9]*")))]

    def _rapl_zones(self) -> list[Path]:
        # Top-level package zones only ("intel-rapl:0"), not their sub-zones ("intel-rapl:0:0").
        zones = glob.glob(str(self.sysfs / "class/powercap/intel-rapl:[0-9]*"))
        return [Path(z) for z in sorted(zones) if Path(z).name.count(":") == 1]

    def cpu_telemetry(self) -> Raw:
        """One sample of what this host exposes: clocks, temperatures, throttling, package energy."""
        cpus = self._cpu_dirs()
        cur = [v for c in cpus if (v := _read_number(c / "cpufreq/scaling_cur_freq")) is not None]
        top = [v for c in cpus if (v := _read_number(c / "cpufreq/cpuinfo_max_freq")) is not None]
        throttle_ms = self._throttle_counters(cpus, "total_time_ms")
        throttle_count = self._throttle_counters(cpus, "count")
        zones = self.thermal_zones()
        energy = [v for z in self._rapl_zones() if (v := _read_number(z / "energy_uj")) is not None]
        ranges = [v for z in self._rapl_zones() if (v := _read_number(z / "max_energy_range_uj")) is not None]
        return {
            "clock_mhz": sum(cur) / len(cur) / 1000 if cur else None,
            "max_clock_mhz": max(top) / 1000 if top else None,
            "temp_c": max(z["temp_c"] for z in zones) if zones else None,
            # Cumulative, each package and each physical core once (keyed as such): a CPU's
            # package_* counter is its package's, repeated in every CPU of it, and SMT siblings
            # share their core's core_* counter.
            "throttle_ms": sum(throttle_ms.values()) if throttle_ms else None,
            "throttle_count": sum(throttle_count.values()) if throttle_count else None,
            "throttle_ms_by": throttle_ms or None,
            "throttle_count_by": throttle_count or None,
            "energy_uj": energy if energy else None,
            "energy_range_uj": ranges if ranges else None,
        }

    def _throttle_counters(self, cpus: list[Path], kind: str) -> dict[str, float]:
        """`core_throttle_<kind>` and `package_throttle_<kind>` of every CPU, each counter once: by
        package id and core id from the CPU's topology (by the CPU itself where that is not
        readable, which can only repeat a counter, never lose one)."""
        counters: dict[str, float] = {}
        for c in cpus:
            package = _read(c / "topology/physical_package_id")
            core = _read(c / "topology/core_id")
            keys = {
                "core": f"core{package}.{core}" if package is not None and core is not None else c.name,
                "package": f"package{package}" if package is not None else f"package@{c.name}",
            }
            for scope, key in keys.items():
                if key in counters:
                    continue
                value = _read_number(c / "thermal_throttle" / f"{scope}_throttle_{kind}")
                if value is not None:
                    counters[key] = value
        return counters

    # ---------------------------------------------------------------- fabric

    def fabric_ports(self) -> list[Raw]:
        """Every RDMA port with its device's kernel driver: AWS nodes rename EFA devices to PCI-path
        names (rdmap115s0), so the driver (efa), not the name, says what a device is."""
        ports = []
        drivers: dict[Path, str | None] = {}
        for port_dir in sorted(glob.glob(str(self.sysfs / "class/infiniband/*/ports/*"))):
            p = Path(port_dir)
            dev = p.parent.parent
            if dev not in drivers:
                drivers[dev] = _driver(dev)
            ports.append(
                {
                    "device": dev.name,
                    "driver": drivers[dev],  # None: not readable
                    "port": int(p.name) if p.name.isdigit() else p.name,
                    "state": ib_state(_read(p / "state") or "UNKNOWN"),
                    "phys_state": ib_state(_read(p / "phys_state") or "UNKNOWN"),
                    "rate": _read(p / "rate") or "",
                    "rate_gbitps": ib_rate_gbitps(_read(p / "rate") or ""),
                    "link_layer": _read(p / "link_layer") or "",
                }
            )
        return ports

    def net_interfaces(self) -> list[Raw]:
        nics = []
        for dev in sorted(glob.glob(str(self.sysfs / "class/net/*"))):
            d = Path(dev)
            driver = _driver(d)
            if not driver:
                continue  # virtual interfaces (lo, bridges, veth) have no device
            nics.append(
                {
                    "name": d.name,
                    "driver": driver,
                    "operstate": _read(d / "operstate") or "unknown",
                    "speed_mbitps": _read_number(d / "speed"),
                }
            )
        return nics

    def ib_loopback(self, device: str, port: int, seconds: float) -> Raw:
        """ib_write_bw from this port to itself: server in the background, client to localhost."""
        argv = [
            "ib_write_bw", "-d", device, "-i", str(port), "-F", "--report_gbits",
            "-D", str(max(1, round(seconds))), "-p", str(_PERFTEST_PORT),
        ]  # fmt: skip
        server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            time.sleep(0.5)  # the server must listen before the client connects
            done = self.run(
                [*argv, "localhost"], capture_output=True, text=True, timeout=seconds + 30, check=False
            )
            return {
                "device": device,
                "port": port,
                "rc": done.returncode,
                "output": done.stdout + done.stderr,
            }
        except subprocess.TimeoutExpired:
            return {"device": device, "port": port, "rc": -1, "output": "ib_write_bw client timed out"}
        finally:
            server.kill()
            server.wait()

    def fabric(self, loopback_seconds: float) -> Raw:
        ports = self.fabric_ports()
        raw: Raw = {"ports": ports, "net": self.net_interfaces(), "loopback": [], "perftest": None}
        if shutil.which("ib_write_bw") is None:
            raw["perftest"] = "ib_write_bw not installed (perftest); loopback bandwidth not measured"
            return raw
        raw["perftest"] = shutil.which("ib_write_bw")
        for p in ports:
            if p["state"] == "ACTIVE" and isinstance(p["port"], int):
                raw["loopback"].append(self.ib_loopback(p["device"], p["port"], loopback_seconds))
        return raw

    # ---------------------------------------------------------------- storage

    def storage(self, path: Path, nbytes: int, block: int) -> Raw:
        return storage_io.measure(path, nbytes, block, run=self.run)
