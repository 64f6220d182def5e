"""The vendor package mirror, judged by apt itself (and dnf and rpm for its rpm side).

Every test runs the real apt-get/apt-cache of this machine in a throwaway apt root (its own
sources, keyrings, lists and an empty dpkg status), against the mirror served on loopback: no root,
no network beyond 127.0.0.1, nothing installed. What apt accepts here it accepts on a node; what it
refuses (a pin without its epoch, a signature from the wrong key, a virtual package pinned to a
version) it refuses on a node too. The rpm side is judged the same way: dnf repoquery resolves, rpm -K
checks package signatures, dnf makecache checks signed metadata; only a dnf transaction (the
install test) needs root, because dnf refuses one otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.roles import vendor_mirror
from tests.roles.vendor_mirror import Mirror, MirrorError, Package, Repository, Table

pytestmark = [
    # Serial, with the host tests: one of these prunes the build cache the vendor roles' apply test
    # (test_apply_vendor.py) serves from.
    pytest.mark.serial,
    pytest.mark.skipif(
        bool(vendor_mirror.missing_tools()) or shutil.which("apt-get") is None,
        reason=f"needs apt-get, dpkg-deb, dpkg-scanpackages and gpg (missing: {vendor_mirror.missing_tools()})",
    ),
]

CUDA_2204 = "compute/cuda/repos/ubuntu2204/x86_64"
CUDA_2404 = "compute/cuda/repos/ubuntu2404/x86_64"
CUDA_2404_SBSA = "compute/cuda/repos/ubuntu2404/sbsa"
CUDA_DEB12 = "compute/cuda/repos/debian12/x86_64"
CTK_AMD64 = "libnvidia-container/stable/deb/amd64"
DOCA_2204 = "public/repo/doca/2.9.1/ubuntu22.04/x86_64"
DOCA_2204_SBSA = "public/repo/doca/2.9.1/ubuntu22.04/arm64-sbsa"
LUSTRE_2204 = "public/lustre/lustre-2.15.4/ubuntu2204/client"
BEEGFS = "release/beegfs_7.4.5"


@pytest.fixture(scope="module")
def table() -> Table:
    return vendor_mirror.load_table()


@pytest.fixture(scope="module")
def mirror(table: Table) -> Iterator[Mirror]:
    root = vendor_mirror.build_mirror(table)
    with vendor_mirror.serve(root, "127.0.0.1", 0, table) as served:
        yield served


@dataclass
class Apt:
    """apt-get and apt-cache confined to one directory: its own sources, keys, lists, status."""

    root: Path
    arch: str = "amd64"

    def __post_init__(self) -> None:
        for sub in ("etc/apt/apt.conf.d", "etc/apt/preferences.d", "etc/apt/sources.list.d",
                    "etc/apt/trusted.gpg.d", "keys", "var/lib/apt/lists/partial",
                    "var/cache/apt/archives/partial", "var/lib/dpkg"):  # fmt: skip
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "var/lib/dpkg/status").write_text("")
        (self.root / "etc/apt/sources.list").write_text("")
        # Read instead of /etc/apt/apt.conf: the host's own configuration (proxies, its archive
        # keys, its architectures) must not leak into what the mirror is judged by.
        (self.root / "apt.conf").write_text(
            f'Dir "{self.root}/";\n'
            f'Dir::State::status "{self.root}/var/lib/dpkg/status";\n'
            f'APT::Architecture "{self.arch}";\n'
            f'APT::Architectures {{ "{self.arch}"; }};\n'
            'Acquire::Languages "none";\n'
            'Acquire::http::Proxy "DIRECT";\n'
            'Acquire::Retries "0";\n'
            'Debug::NoLocking "true";\n'
            # As root apt fetches as _apt, which cannot read a pytest tmp_path; as a user it is moot.
            'APT::Sandbox::User "root";\n'
        )

    def add_key(self, name: str, armored: str) -> Path:
        path = self.root / "keys" / f"{name}.asc"
        path.write_text(armored)
        return path

    def add_source(self, line: str) -> None:
        with (self.root / "etc/apt/sources.list").open("a") as f:
            f.write(line + "\n")

    def run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        env |= {"APT_CONFIG": str(self.root / "apt.conf"), "LC_ALL": "C"}
        return subprocess.run(
            [tool, *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )

    def add_deb822(self, name: str, fields: dict[str, str]) -> None:
        text = "".join(f"{k}: {v}\n" for k, v in fields.items())
        (self.root / "etc/apt/sources.list.d" / f"{name}.sources").write_text(text)

    def update(self) -> subprocess.CompletedProcess[str]:
        return self.run("apt-get", "update")

    def simulate(self, *pins: str) -> subprocess.CompletedProcess[str]:
        return self.run("apt-get", "install", "--simulate", "--no-install-recommends", *pins)

    def policy(self, package: str) -> str:
        return self.run("apt-cache", "policy", package).stdout


def source_line(mirror: Mirror, repo: Repository, options: str, suite: str | None = None) -> str:
    url = mirror.repo_url(repo.path)
    opts = f"[{options}] " if options else ""
    if repo.layout == "flat":
        return f"deb {opts}{url}/ ./"
    return f"deb {opts}{url} {suite or repo.suites[0]} {repo.component}"


def signed_apt(tmp_path: Path, mirror: Mirror, table: Table, path: str, arch: str = "amd64",
               suite: str | None = None) -> Apt:  # fmt: skip
    repo = table.repository(path)
    apt = Apt(tmp_path / "apt", arch)
    if repo.signed:
        assert repo.vendor.signing_key is not None
        key = apt.add_key(repo.vendor.signing_key, mirror.key(repo.vendor.signing_key))
        apt.add_source(source_line(mirror, repo, f"signed-by={key}", suite))
    else:
        apt.add_source(source_line(mirror, repo, "trusted=yes", suite))
    done = apt.update()
    assert done.returncode == 0, done.stdout + done.stderr
    assert not re.search(r"^(W|E|Err):", done.stdout + done.stderr, re.M), done.stdout + done.stderr
    return apt


def installs(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """package -> version from apt-get --simulate's 'Inst name (version ...)' lines."""
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(re.findall(r"^Inst (\S+) \((\S+) ", done.stdout, re.M))


def exact_pins(repo: Repository, pkg: Package) -> list[str]:
    """name=version for pkg and, transitively, every Depends it names with (= version)."""
    pins: dict[str, str] = {}
    todo = [(pkg.name, pkg.version)]
    while todo:
        name, version = todo.pop()
        if name in pins:
            continue
        pins[name] = version
        found = next(p for p in repo.packages if (p.name, p.version) == (name, version))
        todo += re.findall(r"([a-z0-9][a-z0-9+.-]+) \(= ([^)]+)\)", found.depends)
    return [f"{n}={v}" for n, v in pins.items()]


# --- the build ----------------------------------------------------------------------------------


def test_every_repository_is_laid_out_and_signed_as_its_vendor(mirror: Mirror, table: Table) -> None:
    for repo in table.repositories:
        base = mirror.root / repo.path
        releases = [base] if repo.layout == "flat" else [base / "dists" / s for s in repo.suites]
        for rel in releases:
            assert (rel / "Release").is_file(), rel
            signed_files = {(rel / "InRelease").is_file(), (rel / "Release.gpg").is_file()}
            assert signed_files == {repo.signed}, f"{rel}: signed should be {repo.signed}"
        if repo.key_file:
            assert "BEGIN PGP PUBLIC KEY BLOCK" in (base / repo.key_file).read_text()
    for vendor in table.vendors.values():
        for key_path in vendor.key_paths:
            assert "BEGIN PGP PUBLIC KEY BLOCK" in (mirror.root / key_path).read_text()
    # A placeholder is the vendor's name and version with a marker and no maintainer scripts.
    deb = next((mirror.root / CUDA_2204).glob("nvidia-fabricmanager_580.65.06-1_amd64.deb"))
    fields = subprocess.run(
        ["dpkg-deb", "--field", str(deb)], capture_output=True, text=True, check=True
    ).stdout
    assert "Provides: nvidia-fabricmanager-580" in fields
    contents = subprocess.run(
        ["dpkg-deb", "--contents", str(deb)], capture_output=True, text=True, check=True
    )
    assert "./usr/share/fleetforge-mirror/nvidia-fabricmanager" in contents.stdout
    control = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(deb)], capture_output=True, check=True).stdout
    assert b"postinst" not in control and b"preinst" not in control


def test_a_second_build_reuses_the_cache(table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    first = vendor_mirror.build_mirror(table)

    def no_second_build(*args: object) -> None:
        raise AssertionError("the mirror was built again")

    monkeypatch.setattr(vendor_mirror, "_generate_keys", no_second_build)
    again = vendor_mirror.build_mirror(table)
    assert again == first
    assert first.parent == vendor_mirror.mirror_cache() and first.name.startswith(table.digest)


def test_a_cold_build_replaces_week_old_builds_and_keeps_fresh_ones(table: Table, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    stale, fresh = cache / "0000000000000000", cache / "1111111111111111"
    for old in (stale, fresh):
        old.mkdir(parents=True)
        (old / ".complete").write_text("old\n")
    week_ago = time.time() - vendor_mirror.STALE_AFTER_S - 60
    os.utime(stale / ".complete", (week_ago, week_ago))
    root = vendor_mirror.build_mirror(table, cache, rpm=False)
    assert root == cache / table.digest and (root / ".complete").is_file()
    assert not stale.exists() and fresh.exists()
    assert not list(cache.glob("build-*"))


def test_the_cache_key_follows_the_table(tmp_path: Path) -> None:
    text = vendor_mirror.TABLE.read_text()
    edited = tmp_path / "vendor_packages.yaml"
    edited.write_text(text.replace('version: "20:7.4.5"', 'version: "20:7.4.6"'))
    assert vendor_mirror.load_table(edited).digest != vendor_mirror.load_table().digest


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("version: 570.133.20-1\n", "version: v570\n"), "is not a Debian version"),
        (("name: libnccl2\n", "name: LibNCCL2\n"), "is not a Debian package name"),
        (("layout: dists", "layout: tree"), "allowed flat, dists"),
        (("architectures: [arm64]", "architectures: [aarch64]"), "allowed a list of amd64, arm64"),
        (("sets: [container_toolkit]", "sets: [container_tools]"), "'container_tools': allowed"),
        (("vendor: whamcloud", "vendor: lustre"), "repositories[9].vendor: 'lustre'"),
    ],
)
def test_a_bad_table_names_the_entry_and_what_is_allowed(
    tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    text = vendor_mirror.TABLE.read_text()
    assert edit[0] in text
    bad = tmp_path / "vendor_packages.yaml"
    bad.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(MirrorError, match=re.escape(message)):
        vendor_mirror.load_table(bad)


def test_role_vars_point_every_vendor_at_the_mirror(mirror: Mirror) -> None:
    found = mirror.role_vars()
    assert found["nvidia_driver_cuda_repo_base"] == f"{mirror.url}/compute/cuda/repos"
    assert found["beegfs_client_repo_key_url"] == f"{mirror.url}/release/beegfs_7.4.5/gpg/GPG-KEY-beegfs"
    for url in found.values():
        assert url.startswith(mirror.url + "/")
        assert (mirror.root / url.removeprefix(mirror.url + "/")).exists(), url


# --- apt: signatures ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", [CUDA_2204, CUDA_2404, CUDA_DEB12, CTK_AMD64, DOCA_2204, LUSTRE_2204, BEEGFS]
)
def test_apt_update_accepts_each_repository_as_its_vendor_signs_it(
    tmp_path: Path, mirror: Mirror, table: Table, path: str
) -> None:
    apt = signed_apt(tmp_path, mirror, table, path)
    assert "500 " in apt.policy(table.repository(path).packages[0].name)


@pytest.mark.parametrize("suite", ["deb12", "jammy", "noble"])
def test_beegfs_publishes_one_suite_per_os(tmp_path: Path, mirror: Mirror, table: Table, suite: str) -> None:
    apt = signed_apt(tmp_path, mirror, table, BEEGFS, suite=suite)
    assert installs(apt.simulate("beegfs-client=20:7.4.5")) == {"beegfs-client": "20:7.4.5"}


@pytest.mark.parametrize(
    ("arch", "uri", "suites", "key", "pin"),
    [
        ("amd64", "compute/cuda/repos/debian12/x86_64/", "/", "nvidia-cuda", "libnccl2=2.26.2-1+cuda12.8"),
        # The container toolkit's one URI for every architecture: apt expands $(ARCH).
        (
            "amd64",
            "libnvidia-container/stable/deb/$(ARCH)",
            "/",
            "nvidia-container-toolkit",
            "libnvidia-container1=1.17.5-1",
        ),
        (
            "arm64",
            "libnvidia-container/stable/deb/$(ARCH)",
            "/",
            "nvidia-container-toolkit",
            "libnvidia-container1=1.17.5-1",
        ),
        ("amd64", "public/repo/doca/2.9.1/ubuntu24.04/x86_64/", "/", "mellanox", "doca-ofed=2.9.1-1"),
        ("amd64", "public/lustre/lustre-2.15.4/ubuntu2204/client", "/", None, "lustre-client-utils=2.15.4-1"),
        ("amd64", "release/beegfs_7.4.5", "deb12", "beegfs", "beegfs-utils=20:7.4.5"),
    ],
)
def test_the_deb822_sources_the_roles_write_resolve(
    tmp_path: Path, mirror: Mirror, arch: str, uri: str, suites: str, key: str | None, pin: str
) -> None:
    # ansible.builtin.deb822_repository writes this form: Suites "/" for a flat repository.
    apt = Apt(tmp_path / "apt", arch)
    fields = {"Types": "deb", "URIs": mirror.repo_url(uri), "Suites": suites}
    if suites != "/":
        fields["Components"] = "non-free"
    if key is None:
        fields["Trusted"] = "yes"
    else:
        fields["Signed-By"] = str(apt.add_key(key, mirror.key(key)))
    apt.add_deb822("vendor", fields)
    done = apt.update()
    assert done.returncode == 0 and not re.search(r"^(W|E|Err):", done.stdout + done.stderr, re.M), done
    name, version = pin.split("=")
    assert installs(apt.simulate(pin))[name] == version


def test_a_suite_the_vendor_does_not_publish_fails_update(
    tmp_path: Path, mirror: Mirror, table: Table
) -> None:
    # BeeGFS names Debian suites deb<N>, not by codename: "bookworm" is absent upstream.
    apt = Apt(tmp_path / "apt")
    key = apt.add_key("beegfs", mirror.key("beegfs"))
    apt.add_source(source_line(mirror, table.repository(BEEGFS), f"signed-by={key}", "bookworm"))
    done = apt.update()
    assert done.returncode != 0 or re.search(r"^(E|Err):", done.stdout + done.stderr, re.M)
    assert "does not have a Release file" in done.stdout + done.stderr


def test_a_signed_repository_refuses_the_wrong_key(tmp_path: Path, mirror: Mirror, table: Table) -> None:
    apt = Apt(tmp_path / "apt")
    key = apt.add_key("mellanox", mirror.key("mellanox"))
    apt.add_source(source_line(mirror, table.repository(CUDA_2204), f"signed-by={key}"))
    done = apt.update()
    out = done.stdout + done.stderr
    assert done.returncode != 0 and "NO_PUBKEY" in out, out
    assert "nvidia-fabricmanager" not in apt.policy("nvidia-fabricmanager")


def test_a_signed_repository_refuses_no_key(tmp_path: Path, mirror: Mirror, table: Table) -> None:
    apt = Apt(tmp_path / "apt")
    apt.add_source(source_line(mirror, table.repository(DOCA_2204), ""))
    done = apt.update()
    assert done.returncode != 0 and "NO_PUBKEY" in done.stdout + done.stderr, done.stdout + done.stderr
    assert apt.policy("doca-ofed").strip() == ""


def test_the_unsigned_lustre_repository_needs_trusted(tmp_path: Path, mirror: Mirror, table: Table) -> None:
    apt = Apt(tmp_path / "apt")
    apt.add_source(source_line(mirror, table.repository(LUSTRE_2204), ""))
    done = apt.update()
    assert done.returncode != 0 and "is not signed" in done.stderr, done.stdout + done.stderr
    assert apt.policy("lustre-client-utils").strip() == ""


# --- apt: pins ------------------------------------------------------------------------------------


def test_every_package_resolves_at_its_exact_pin(tmp_path: Path, mirror: Mirror, table: Table) -> None:
    for n, path in enumerate([CUDA_2204, CUDA_2404, CUDA_DEB12, CTK_AMD64, DOCA_2204, LUSTRE_2204, BEEGFS]):
        repo = table.repository(path)
        apt = signed_apt(tmp_path / str(n), mirror, table, path)
        for pkg in repo.packages:
            if pkg.arch not in ("amd64", "all"):
                continue
            # apt will not pick an older dependency for an older pin by itself: pin the exact
            # Depends too, as the roles do (libnccl2 with libnccl-dev, all four toolkit packages).
            got = installs(apt.simulate(*exact_pins(repo, pkg)))
            assert got[pkg.name] == pkg.version, (path, pkg)


def test_a_pin_without_the_epoch_is_refused(tmp_path: Path, mirror: Mirror, table: Table) -> None:
    apt = signed_apt(tmp_path, mirror, table, BEEGFS)
    done = apt.simulate("beegfs-client=7.4.5")
    assert done.returncode != 0
    assert "Version '7.4.5' for 'beegfs-client' was not found" in done.stderr
    # A glob does not reach behind the epoch either: "7.4.5*" matches nothing, "20:7.4.5*" does.
    assert "Version '7.4.5*' for 'beegfs-client' was not found" in apt.simulate("beegfs-client=7.4.5*").stderr
    assert installs(apt.simulate("beegfs-client=20:7.4.5*")) == {"beegfs-client": "20:7.4.5"}
    assert installs(apt.simulate("beegfs-client=20:7.4.5")) == {"beegfs-client": "20:7.4.5"}
    assert "Candidate: 20:7.4.5" in apt.policy("beegfs-client")


def test_dcgm_pins_carry_epoch_1_with_and_without_a_revision(
    tmp_path: Path, mirror: Mirror, table: Table
) -> None:
    apt = signed_apt(tmp_path, mirror, table, CUDA_2404)
    assert apt.simulate("datacenter-gpu-manager=3.3.6").returncode != 0
    assert apt.simulate("datacenter-gpu-manager=1:3.3.6-1").returncode != 0
    assert installs(apt.simulate("datacenter-gpu-manager=1:3.3.6")) == {"datacenter-gpu-manager": "1:3.3.6"}
    assert apt.simulate("datacenter-gpu-manager-4-core=4.5.2-1").returncode != 0
    # The dcgm role's form: name=1:<version>* (a glob over the revision).
    got = installs(apt.simulate("datacenter-gpu-manager-4-proprietary-cuda12=1:4.5.2*"))
    assert got == {
        "datacenter-gpu-manager-4-core": "1:4.5.2-1",
        "datacenter-gpu-manager-4-proprietary": "1:4.5.2-1",
        "datacenter-gpu-manager-4-cuda12": "1:4.5.2-1",
        "datacenter-gpu-manager-4-proprietary-cuda12": "1:4.5.2-1",
    }


def test_a_pin_chooses_one_nccl_build_among_several(tmp_path: Path, mirror: Mirror, table: Table) -> None:
    apt = signed_apt(tmp_path, mirror, table, CUDA_2204)
    assert "Candidate: 2.26.2-1+cuda12.8" in apt.policy("libnccl2")
    # Pinning libnccl-dev alone to an older build fails: apt keeps libnccl2 at its candidate and
    # the exact Depends cannot be met. The role pins both.
    alone = apt.simulate("libnccl-dev=2.25.1-1+cuda12.8")
    assert alone.returncode != 0
    assert "Depends: libnccl2 (= 2.25.1-1+cuda12.8) but 2.26.2-1+cuda12.8 is to be installed" in alone.stdout
    got = installs(apt.simulate("libnccl2=2.25.1-1+cuda12.8", "libnccl-dev=2.25.1-1+cuda12.8"))
    assert got == {"libnccl2": "2.25.1-1+cuda12.8", "libnccl-dev": "2.25.1-1+cuda12.8"}
    assert apt.simulate("libnccl2=2.26.2-1").returncode != 0


def test_branch_580_fabric_manager_is_unsuffixed(tmp_path: Path, mirror: Mirror, table: Table) -> None:
    apt = signed_apt(tmp_path, mirror, table, CUDA_2204)
    done = apt.simulate("nvidia-fabricmanager-580=580.65.06-1")
    assert done.returncode != 0
    assert "virtual package" in done.stdout + done.stderr or "has no installation candidate" in done.stderr
    assert installs(apt.simulate("nvidia-fabricmanager=580.65.06-1")) == {
        "nvidia-fabricmanager": "580.65.06-1"
    }
    # Below 580 the branch is in the name, and the driver's Depends fix every companion's version.
    got = installs(
        apt.simulate("nvidia-driver-570-open=570.133.20-0ubuntu1", "nvidia-fabricmanager-570=570.133.20-1")
    )
    assert got["nvidia-fabricmanager-570"] == "570.133.20-1"
    assert {v for k, v in got.items() if k != "nvidia-fabricmanager-570"} == {"570.133.20-0ubuntu1"}
    assert len(got) == 8
    assert apt.simulate("nvidia-fabricmanager-570=570.133.20-0ubuntu1").returncode != 0


def test_container_toolkit_pins_four_packages_to_one_version(
    tmp_path: Path, mirror: Mirror, table: Table
) -> None:
    apt = signed_apt(tmp_path, mirror, table, CTK_AMD64)
    pins = [f"{p}=1.17.5-1" for p in ("nvidia-container-toolkit", "nvidia-container-toolkit-base",
                                       "libnvidia-container-tools", "libnvidia-container1")]  # fmt: skip
    got = installs(apt.simulate(*pins))
    assert set(got.values()) == {"1.17.5-1"} and len(got) == 4
    assert "Candidate: 1.19.1-1" in apt.policy("nvidia-container-toolkit")
    assert apt.simulate("nvidia-container-toolkit=1.17.5").returncode != 0


# --- apt: architectures ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "package", "version"),
    [
        (CUDA_2404_SBSA, "libnccl2", "2.26.2-1+cuda12.8"),
        (DOCA_2204_SBSA, "doca-ofed", "2.9.1-1"),
        ("libnvidia-container/stable/deb/arm64", "nvidia-container-toolkit", "1.19.1-1"),
    ],
)
def test_arm64_directories_serve_arm64(
    tmp_path: Path, mirror: Mirror, table: Table, path: str, package: str, version: str
) -> None:
    apt = signed_apt(tmp_path, mirror, table, path, arch="arm64")
    assert installs(apt.simulate(f"{package}={version}"))[package] == version
    # An amd64 host pointed at an arm64 directory finds nothing to install.
    amd = signed_apt(tmp_path / "amd64", mirror, table, path, arch="amd64")
    assert amd.simulate(f"{package}={version}").returncode != 0


def test_the_arm64_directory_names_differ_per_vendor(mirror: Mirror) -> None:
    # CUDA: sbsa; DOCA: arm64-sbsa; container toolkit: the dpkg name arm64. Nothing under aarch64.
    assert (mirror.root / CUDA_2404_SBSA / "Packages").is_file()
    assert (mirror.root / DOCA_2204_SBSA / "Packages").is_file()
    assert not list(mirror.root.rglob("aarch64"))


# --- serving -----------------------------------------------------------------------------------


def test_serve_binds_the_address_it_is_given(table: Table) -> None:
    root = vendor_mirror.build_mirror(table)
    with vendor_mirror.serve(root, "127.0.0.1", 0, table) as served:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", served.url)
        port = int(served.url.rsplit(":", 1)[1])
    # Closed on exit: the port is free again.
    with vendor_mirror.serve(root, "127.0.0.1", port, table) as again:
        assert again.url == served.url


# --- the rpm side: dnf and rpm judge it -----------------------------------------------------------

CUDA_RHEL9 = "compute/cuda/repos/rhel9/x86_64"
CTK_RPM = "libnvidia-container/stable/rpm/x86_64"
DOCA_RHEL9 = "public/repo/doca/3.2.0/rhel9/x86_64"
LUSTRE_EL96 = "public/lustre/lustre-2.15.7/el9.6/client"
BEEGFS_RHEL9 = "release/beegfs_7.4.5/dists/rhel9"
QF = "%{name}-%{epoch}:%{version}-%{release}.%{arch}"


@pytest.fixture(scope="module")
def rpm_mirror(mirror: Mirror) -> Mirror:
    if not mirror.rpm or shutil.which("dnf") is None or shutil.which("rpm") is None:
        pytest.skip("the rpm side needs rpm, createrepo-c and dnf (apt-get install rpm createrepo-c dnf)")
    return mirror


@pytest.fixture(autouse=True)
def _no_gpg_agent_left(tmp_path: Path) -> Iterator[None]:
    """dnf imports a repository's key into <cache>/<repo>/pubring through gpgme, which starts a
    gpg-agent there that outlives dnf: end every one the test started."""
    yield
    for home in tmp_path.rglob("pubring"):
        if home.is_dir():
            subprocess.run(
                ["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True, check=False
            )


@dataclass
class Dnf:
    """dnf confined to one directory: its own config, repositories, cache and install root."""

    root: Path

    def __post_init__(self) -> None:
        for sub in ("repos", "cache", "installroot"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "dnf.conf").write_text("[main]\nreposdir=\ninstall_weak_deps=False\n")

    def add_repo(
        self, name: str, baseurl: str, gpgcheck: bool, repo_gpgcheck: bool, gpgkey: str = ""
    ) -> None:
        lines = [f"[{name}]", f"name={name}", f"baseurl={baseurl}", "enabled=1",
                 f"gpgcheck={int(gpgcheck)}", f"repo_gpgcheck={int(repo_gpgcheck)}"]  # fmt: skip
        if gpgkey:
            lines.append(f"gpgkey={gpgkey}")
        (self.root / "repos" / f"{name}.repo").write_text("\n".join(lines) + "\n")

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = ["dnf", "-y", f"--config={self.root / 'dnf.conf'}", f"--installroot={self.root / 'installroot'}",
               f"--setopt=reposdir={self.root / 'repos'}", f"--setopt=cachedir={self.root / 'cache'}",
               "--releasever=9", "--forcearch=x86_64", "--noplugins", *args]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")} | {"LC_ALL": "C"}
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)

    def query(self, spec: str) -> list[str]:
        done = self.run("repoquery", "--quiet", "--qf", QF, spec)
        assert done.returncode == 0, done.stdout + done.stderr
        return sorted(set(done.stdout.split()))


def rpm_repo_dnf(tmp_path: Path, mirror: Mirror, table: Table, path: str, key: str | None = "vendor") -> Dnf:
    """dnf with one repository configured as its vendor publishes it (key "vendor": the vendor's)."""
    repo = table.rpm_repository(path)
    dnf = Dnf(tmp_path / "dnf")
    gpgkey = ""
    if repo.gpgcheck or repo.repo_gpgcheck:
        assert repo.vendor.signing_key is not None
        keyname = repo.vendor.signing_key if key == "vendor" else key
        keyfile = tmp_path / "key.asc"
        keyfile.write_text(mirror.key(keyname or ""))
        gpgkey = keyfile.as_uri()
    dnf.add_repo("vendor", mirror.repo_url(path), repo.gpgcheck, repo.repo_gpgcheck, gpgkey)
    return dnf


def rpm_verify(tmp_path: Path, rpm_file: Path, armored_key: str | None) -> subprocess.CompletedProcess[str]:
    """rpm -K against a throwaway rpm database that trusts only armored_key."""
    db = tmp_path / "rpmdb"
    db.mkdir(parents=True, exist_ok=True)
    if armored_key is not None:
        key = tmp_path / "trusted.asc"
        key.write_text(armored_key)
        subprocess.run(["rpm", "--dbpath", str(db), "--import", str(key)], check=True, capture_output=True)
    return subprocess.run(
        ["rpm", "--dbpath", str(db), "-Kv", str(rpm_file)], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize("path", [CUDA_RHEL9, CTK_RPM, DOCA_RHEL9, LUSTRE_EL96, BEEGFS_RHEL9])
def test_dnf_resolves_every_package_at_its_full_nevra(
    tmp_path: Path, rpm_mirror: Mirror, table: Table, path: str
) -> None:
    dnf = rpm_repo_dnf(tmp_path, rpm_mirror, table, path)
    for pkg in table.rpm_repository(path).packages:
        epoch = pkg.epoch if pkg.epoch is not None else 0
        expected = f"{pkg.name}-{epoch}:{pkg.version}-{pkg.release}.{pkg.arch}"
        assert dnf.query(pkg.nevra) == [expected]


@pytest.mark.parametrize("path", [CUDA_RHEL9, DOCA_RHEL9, BEEGFS_RHEL9])
def test_signed_rpms_verify_with_the_vendor_key_only(
    tmp_path: Path, rpm_mirror: Mirror, table: Table, path: str
) -> None:
    repo = table.rpm_repository(path)
    assert repo.vendor.signing_key is not None
    rpm_file = next((rpm_mirror.root / path).rglob("*.rpm"))
    good = rpm_verify(tmp_path / "good", rpm_file, rpm_mirror.key(repo.vendor.signing_key))
    assert good.returncode == 0 and "Signature, key ID" in good.stdout and ": OK" in good.stdout, good.stdout
    other = "beegfs" if repo.vendor.signing_key != "beegfs" else "nvidia-cuda"
    bad = rpm_verify(tmp_path / "bad", rpm_file, rpm_mirror.key(other))
    assert bad.returncode != 0 and "NOKEY" in bad.stdout, bad.stdout


@pytest.mark.parametrize("path", [CTK_RPM, LUSTRE_EL96])
def test_unsigned_rpms_carry_no_signature(tmp_path: Path, rpm_mirror: Mirror, path: str) -> None:
    # The container toolkit signs its metadata, not its packages (gpgcheck=0); Whamcloud signs neither.
    for rpm_file in (rpm_mirror.root / path).rglob("*.rpm"):
        out = rpm_verify(tmp_path, rpm_file, None).stdout
        assert "Signature" not in out and "digest: OK" in out, out


def test_repo_gpgcheck_refuses_metadata_signed_by_another_key(
    tmp_path: Path, rpm_mirror: Mirror, table: Table
) -> None:
    good = rpm_repo_dnf(tmp_path / "good", rpm_mirror, table, CTK_RPM).run("makecache")
    assert good.returncode == 0, good.stdout + good.stderr
    assert (rpm_mirror.root / CTK_RPM / "repodata/repomd.xml.asc").is_file()
    bad = rpm_repo_dnf(tmp_path / "bad", rpm_mirror, table, CTK_RPM, key="nvidia-cuda").run("makecache")
    assert bad.returncode != 0 and "GPG signature verification error" in bad.stderr, bad.stdout + bad.stderr


def test_rpm_epochs_and_release_forms(tmp_path: Path, rpm_mirror: Mirror, table: Table) -> None:
    cuda = rpm_repo_dnf(tmp_path / "cuda", rpm_mirror, table, CUDA_RHEL9)
    # dnf matches a spec without the epoch (a versionlock entry must still carry it).
    assert cuda.query("nvidia-driver-575.51") == ["nvidia-driver-3:575.51-1.el9.x86_64"]
    assert cuda.query("nvidia-driver-3:575.51-1.el9") == ["nvidia-driver-3:575.51-1.el9.x86_64"]
    assert cuda.query("nvidia-driver-0:575.51-1.el9") == []
    assert cuda.query("datacenter-gpu-manager-4-core-1:4.5.2-1") == [
        "datacenter-gpu-manager-4-core-1:4.5.2-1.x86_64"
    ]
    beegfs = rpm_repo_dnf(tmp_path / "beegfs", rpm_mirror, table, BEEGFS_RHEL9)
    # BeeGFS's release is the dist tag without its dot and no build number: 20:7.4.5-el9.
    assert beegfs.query("beegfs-utils-20:7.4.5-el9") == ["beegfs-utils-20:7.4.5-el9.x86_64"]
    assert beegfs.query("beegfs-utils-7.4.5-1.el9") == []
    lustre = rpm_repo_dnf(tmp_path / "lustre", rpm_mirror, table, LUSTRE_EL96)
    assert lustre.query("lustre-client-dkms") == ["lustre-client-dkms-0:2.15.7-1.el9.noarch"]


@pytest.mark.skipif(
    os.geteuid() != 0, reason="dnf runs a transaction (even into an install root) as root only"
)
def test_dnf_installs_with_the_vendors_gpgcheck_and_refuses_the_wrong_key(
    tmp_path: Path, rpm_mirror: Mirror, table: Table
) -> None:
    good = rpm_repo_dnf(tmp_path / "good", rpm_mirror, table, CUDA_RHEL9)
    done = good.run("install", "nvidia-driver-3:575.51-1.el9")
    assert done.returncode == 0, done.stdout + done.stderr
    markers = good.root / "installroot" / vendor_mirror.MARKER_DIR
    assert sorted(p.name for p in markers.iterdir()) == ["kmod-nvidia-open-dkms", "nvidia-driver"]
    bad = rpm_repo_dnf(tmp_path / "bad", rpm_mirror, table, CUDA_RHEL9, key="beegfs")
    refused = bad.run("install", "nvidia-driver-3:575.51-1.el9")
    assert refused.returncode != 0 and "GPG check FAILED" in refused.stderr, refused.stdout + refused.stderr
    # The container toolkit's packages are unsigned: its gpgcheck=0 is what lets them install.
    ctk = rpm_repo_dnf(tmp_path / "ctk", rpm_mirror, table, CTK_RPM)
    pins = [f"{p}-1.17.5-1" for p in ("nvidia-container-toolkit", "nvidia-container-toolkit-base",
                                       "libnvidia-container-tools", "libnvidia-container1")]  # fmt: skip
    assert ctk.run("install", *pins).returncode == 0
    strict = rpm_repo_dnf(tmp_path / "strict", rpm_mirror, table, CTK_RPM)
    repo_file = strict.root / "repos" / "vendor.repo"
    repo_file.write_text(repo_file.read_text().replace("gpgcheck=0", "gpgcheck=1"))
    broken = strict.run("install", *pins)
    assert broken.returncode != 0 and "GPG check FAILED" in broken.stderr, broken.stdout + broken.stderr
