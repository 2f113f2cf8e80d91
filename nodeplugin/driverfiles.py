"""The host's NVIDIA driver files a container needs, found as `nvidia-ctk cdi generate` finds them.

A CUDA program in a container needs more than its GPU's device node: the driver's user-space
libraries of exactly the running kernel driver's version (`libcuda.so.<version>`,
`libnvidia-ml.so.<version>`, ...), the control device nodes, the tools (`nvidia-smi`, MPS) and,
on GSP GPUs, the firmware. NVIDIA's container toolkit (`pkg/nvcdi`, `internal/discover`,
`internal/lookup/root`, `pkg/lookup`) discovers them under a *driver root* (`/` for a host
install, `/run/nvidia/driver` for the GPU operator's driver container); this module follows the
same rules:

- the version is NVML's driver version; the driver's library folders are those holding
  `lib*.so.<version>` in the toolkit's standard library folders under the root, or, when none
  does, in the root's linker cache (`<root>/etc/ld.so.cache`); `libcuda.so.<version>` and
  `libnvidia-ml.so.<version>` must be among them;
- the libraries are every `*.so.<version>` in those folders and their `vdpau/` subfolder, plus
  the legacy `libnvidia-nvvm70.so.*`;
- binaries (`nvidia-smi`, `nvidia-debugdump`, `nvidia-persistenced`) from the standard PATH
  folders under the root, where present. Unlike the toolkit, not `nvidia-cuda-mps-control` and
  `nvidia-cuda-mps-server`: MPS daemons are the node plugin's, and a workload has no business
  starting, stopping or reconfiguring one (tenant isolation, docs/NODEPLUGIN.md);
- firmware `nvidia/<version>/gsp*.bin` in the kernel's firmware folders under the root;
- control nodes `/dev/nvidiactl` (required), `/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools`,
  `/dev/nvidia-modeset` (when present) under the dev root;
- the links the container needs created (`libcuda.so -> libcuda.so.1`, and each library's
  SONAME and `.so` links where the host has them) for the `create-symlinks` hook.

Paths come back as the container sees them (relative to the root, absolute): the CDI spec adds
the host's root in front for `hostPath`. `discover` reads files only; it is the one function with
I/O, given where this process sees the roots (the node plugin runs in a pod that mounts the
host's driver root elsewhere, e.g. at /driver-root).
"""

from __future__ import annotations

import fnmatch
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from drasat.nodeplugin.devicelib import DeviceError

#: The toolkit's library folders (`pkg/lookup/library.go`), searched before the linker cache.
LIB_DIRS = (
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu/nvidia/current",
    "/usr/lib/aarch64-linux-gnu/nvidia/current",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu/nvidia/current",
    "/lib/aarch64-linux-gnu/nvidia/current",
)
#: The toolkit's default PATH (`pkg/lookup/path.go`). It also reads the process's PATH; the node
#: plugin's own PATH says nothing about the host, so drasat does not.
BIN_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
#: The driver binaries the toolkit mounts (`pkg/nvcdi/driver-nvml.go`; IMEX left out), less the
#: MPS control daemon and server: the node plugin runs those, never a workload.
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
)
#: Driver binaries the toolkit mounts that drasat keeps out of containers.
WITHHELD_BINARIES = ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server")
#: Control device nodes every GPU container gets (`pkg/nvcdi/common-nvml.go`), when present.
CONTROL_NODES = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
)
#: Without it no CUDA or NVML call works: a driver root or dev root without it is a wrong root.
REQUIRED_CONTROL_NODE = "/dev/nvidiactl"
#: Libraries that must be there at the driver's version (the toolkit infers the version from them).
REQUIRED_LIBRARIES = ("libcuda.so", "libnvidia-ml.so")
LDCACHE = "/etc/ld.so.cache"


class DriverFilesError(DeviceError):
    """The host lacks something a container needs; `str()` names what and where (a prepare
    that needs it fails with that message)."""


@dataclass(frozen=True)
class Roots:
    """Where the driver's files are: `driver_root`/`dev_root` as the host (and so the container
    runtime) sees them, `*_mount` where this process reads them ("" = the same path).

    Without a `dev_root`, the device nodes are the driver root's when it has `dev/nvidiactl` (a
    driver container's root), else the host's `/dev`, as NVIDIA's DRA driver decides."""

    driver_root: str = "/"
    dev_root: str = ""
    driver_mount: str = ""
    dev_mount: str = ""
    proc_root: str = "/proc"

    def _dev_in_driver_root(self) -> bool:
        return (self.read_driver_root / REQUIRED_CONTROL_NODE.lstrip("/")).exists()

    @property
    def host_dev_root(self) -> str:
        if self.dev_root:
            return self.dev_root
        return self.driver_root if self._dev_in_driver_root() else "/"

    @property
    def read_driver_root(self) -> Path:
        return Path(self.driver_mount or self.driver_root)

    @property
    def read_dev_root(self) -> Path:
        if self.dev_mount:
            return Path(self.dev_mount)
        if self.dev_root:
            return Path(self.dev_root)
        return self.read_driver_root if self._dev_in_driver_root() else Path("/")


@dataclass(frozen=True)
class DriverFiles:
    """What a container gets of the driver; every path is the container's (root removed)."""

    version: str
    lib_dirs: tuple[str, ...] = ()
    libraries: tuple[str, ...] = ()
    binaries: tuple[str, ...] = ()
    firmware: tuple[str, ...] = ()
    control_nodes: tuple[str, ...] = ()
    #: `target::link` pairs for `nvidia-cdi-hook create-symlinks --link`.
    links: tuple[str, ...] = ()
    #: Where the libraries were found: "lib dirs" or "ldcache".
    found_in: str = "lib dirs"
    #: Container path -> the file's path in the root where they differ (a binary that is a
    #: link: the container sees it where PATH finds it, the runtime binds the file it names).
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    notes: tuple[str, ...] = field(default=(), compare=False)

    def paths(self) -> list[str]:
        """Every file it mounts, in spec order."""
        return [*self.libraries, *self.binaries, *self.firmware]


def join(root: str | Path, path: str) -> str:
    """`path` (absolute, as the container sees it) under `root`."""
    base = str(root).rstrip("/")
    return f"{base}{path}" if base else path


def _in_root(root: Path, path: str, *, depth: int = 0) -> Path | None:
    """The real file `path` names inside `root`, following symlinks as if `root` were `/`
    (a driver container's absolute links point into its own tree); None when missing."""
    current = root
    parts = [p for p in path.split("/") if p]
    while parts:
        part = parts.pop(0)
        if part == "..":
            current = current.parent if current != root else root
            continue
        candidate = current / part
        if candidate.is_symlink():
            if depth > 40:
                return None
            target = os.readlink(candidate)
            rest = "/".join(parts)
            if target.startswith("/"):
                return _in_root(root, f"{target}/{rest}", depth=depth + 1)
            relative = str(current.relative_to(root)) if current != root else ""
            return _in_root(root, f"/{relative}/{target}/{rest}", depth=depth + 1)
        if not candidate.exists():
            return None
        current = candidate
    return current


def _container_path(root: Path, real: Path) -> str:
    return "/" + str(real.relative_to(root)) if real != root else "/"


def _glob_dir(root: Path, directory: str, pattern: str) -> list[str]:
    """Container paths of the files in `directory` (under `root`) matching `pattern`, symlinks
    resolved to their final file (as the toolkit's symlink locator does)."""
    real_dir = _in_root(root, directory)
    if real_dir is None or not real_dir.is_dir():
        return []
    found = []
    for entry in sorted(real_dir.iterdir()):
        if not fnmatch.fnmatchcase(entry.name, pattern):
            continue
        real = _in_root(root, f"{_container_path(root, real_dir)}/{entry.name}")
        if real is not None and real.is_file():
            found.append(_container_path(root, real))
    return list(dict.fromkeys(found))


# -- the linker cache ----------------------------------------------------------------------------

_OLD_MAGIC = b"ld.so-1.7.0"
_NEW_MAGIC = b"glibc-ld.so.cache1.1"
_NEW_HEADER = struct.Struct("<20sII12x8x")  # magic+version, nlibs, string table size, unused
_NEW_ENTRY = struct.Struct("<iIIIQ")  # flags, key, value, osversion, hwcap
_OLD_ENTRY_SIZE = 12
_FLAG_ELF = 0x0001
#: 64-bit ELF architectures of the cache's flags (x86-64, AArch64, ppc64le), as the toolkit keeps.
_ARCH_64 = {0x0300, 0x0A00, 0x0500}


def read_ldcache(data: bytes) -> list[str]:
    """The 64-bit library paths of a glibc `ld.so.cache` (the "glibc-ld.so.cache1.1" format,
    after the old format's table when both are there), in cache order, each once.

    This is a purely computational function with no side effects; ValueError for a file that
    is not such a cache."""
    offset = 0
    if data.startswith(_OLD_MAGIC):
        (count,) = struct.unpack_from("<I", data, len(_OLD_MAGIC) + 1)
        offset = len(_OLD_MAGIC) + 1 + 4 + count * _OLD_ENTRY_SIZE
        offset += -offset % 8  # the new header is 8-byte aligned
    if data[offset : offset + len(_NEW_MAGIC)] != _NEW_MAGIC:
        raise ValueError("not a glibc ld.so.cache (no glibc-ld.so.cache1.1 header)")
    _, count, _ = _NEW_HEADER.unpack_from(data, offset)
    strings = data[offset:]  # the entries' offsets count from the new header
    paths: list[str] = []
    for i in range(count):
        flags, _, value, _, _ = _NEW_ENTRY.unpack_from(data, offset + _NEW_HEADER.size + i * 24)
        if not flags & _FLAG_ELF or (flags & 0xFF00) not in _ARCH_64 or value >= len(strings):
            continue
        end = strings.find(b"\0", value)
        if end > value:
            paths.append(strings[value:end].decode("utf-8", "surrogateescape"))
    return list(dict.fromkeys(paths))


def _ldcache_matches(root: Path, pattern: str) -> list[str]:
    try:
        entries = read_ldcache((root / LDCACHE.lstrip("/")).read_bytes())
    except (OSError, ValueError, struct.error):
        return []
    found = []
    for path in entries:
        real = _in_root(root, path)
        if real is not None and real.is_file() and fnmatch.fnmatchcase(real.name, pattern):
            found.append(_container_path(root, real))
    return list(dict.fromkeys(found))


# -- discovery -----------------------------------------------------------------------------------


def _firmware_dirs(kernel_release: str) -> list[str]:
    """The kernel's firmware search folders (the toolkit's, without a custom class path)."""
    return [
        f"/lib/firmware/updates/{kernel_release}",
        "/lib/firmware/updates",
        f"/lib/firmware/{kernel_release}",
        "/lib/firmware",
    ]


def _is_library(name: str) -> bool:
    return name.startswith("lib") and ".so" in name


def _links(root: Path, libraries: Iterable[str], version: str) -> list[str]:
    """`target::link` pairs: libcuda.so -> libcuda.so.1 (applications dlopen it), and for each
    versioned library its SONAME link and its `.so` link where the host's folder has them (the
    toolkit reads the SONAME from the ELF file; drasat takes the host's symlink that resolves to
    the library, which is what ldconfig made from that SONAME)."""
    links: dict[str, str] = {}  # link -> target
    for path in libraries:
        folder, _, name = path.rpartition("/")
        if not name.endswith(f".so.{version}"):
            continue
        dot_so = name[: -len(version) - 1]  # libcuda.so
        if name == f"libcuda.so.{version}":
            links.setdefault(f"{folder}/libcuda.so", "libcuda.so.1")
        real_dir = _in_root(root, folder)
        if real_dir is None:
            continue
        for sibling in sorted(real_dir.iterdir()):
            if sibling.name in (name, dot_so) or not sibling.name.startswith(f"{dot_so}."):
                continue
            resolved = _in_root(root, f"{folder}/{sibling.name}")
            if not sibling.is_symlink() or resolved is None or resolved.name != name:
                continue
            links.setdefault(f"{folder}/{sibling.name}", name)
            if (real_dir / dot_so).is_symlink():
                links.setdefault(f"{folder}/{dot_so}", sibling.name)
    return [f"{target}::{link}" for link, target in links.items()]


def discover(roots: Roots, version: str, *, kernel_release: str | None = None) -> DriverFiles:
    """The driver files of `version` under `roots`; DriverFilesError naming what is missing."""
    if not version:
        raise DriverFilesError("the driver version is unknown (NVML reported none)")
    root = roots.read_driver_root
    where = f"driver root {roots.driver_root}" + (
        f" (read at {root})" if str(root) != roots.driver_root else ""
    )
    if not root.is_dir():
        raise DriverFilesError(f"{where}: no such directory")
    pattern = f"lib*.so.{version}"
    versioned = [p for d in LIB_DIRS for p in _glob_dir(root, d, pattern)]
    found_in = "lib dirs"
    if not versioned:
        versioned = _ldcache_matches(root, pattern)
        found_in = "ldcache"
    lib_dirs = list(dict.fromkeys(p.rpartition("/")[0] or "/" for p in versioned))
    libraries = [
        p
        for d in lib_dirs
        for sub in (d, f"{d}/vdpau")
        for p in _glob_dir(root, sub, f"*.so.{version}")
    ]
    libraries += [p for d in lib_dirs for p in _glob_dir(root, d, "libnvidia-nvvm70.so.*")]
    libraries = list(dict.fromkeys(libraries))
    names = {p.rpartition("/")[2] for p in libraries}
    missing = [f"{lib}.{version}" for lib in REQUIRED_LIBRARIES if f"{lib}.{version}" not in names]
    if missing:
        looked = ", ".join(LIB_DIRS)
        raise DriverFilesError(
            f"{where}: no {' and no '.join(missing)} (the running driver is {version}; looked in "
            f"{looked} and {LDCACHE} under the root). Is --driver-root the driver's root?"
        )
    binaries = []
    sources = {}
    for name in BINARIES:
        for folder in BIN_DIRS:
            real = _in_root(root, f"{folder}/{name}")
            if real is not None and real.is_file() and os.access(real, os.X_OK):
                binaries.append(f"{folder}/{name}")  # where PATH finds it, as the toolkit
                if _container_path(root, real) != binaries[-1]:
                    sources[binaries[-1]] = _container_path(root, real)
                break
    release = kernel_release if kernel_release is not None else os.uname().release
    firmware = [
        p
        for d in _firmware_dirs(release)
        for p in _glob_dir(root, f"{d}/nvidia/{version}", "gsp*.bin")
    ]
    dev = roots.read_dev_root
    control = [n for n in CONTROL_NODES if (dev / n.lstrip("/")).exists()]
    if REQUIRED_CONTROL_NODE not in control:
        raise DriverFilesError(
            f"dev root {roots.host_dev_root}: no {REQUIRED_CONTROL_NODE} (read at "
            f"{join(dev, REQUIRED_CONTROL_NODE)}); is the NVIDIA kernel driver loaded?"
        )
    notes = []
    absent = [b for b in BINARIES if not any(p.endswith(f"/{b}") for p in binaries)]
    if absent:
        notes.append(f"not found under {where}: {', '.join(absent)}")
    return DriverFiles(
        version=version,
        lib_dirs=tuple(lib_dirs),
        libraries=tuple(libraries),
        binaries=tuple(binaries),
        firmware=tuple(dict.fromkeys(firmware)),
        control_nodes=tuple(control),
        links=tuple(_links(root, libraries, version)),
        found_in=found_in,
        notes=tuple(notes),
        sources=sources,
    )


# -- MIG capability device nodes -----------------------------------------------------------------

MIG_MINORS = "/driver/nvidia-caps/mig-minors"


def mig_minors(text: str) -> dict[str, int]:
    """`/proc/driver/nvidia-caps/mig-minors` as {capability: minor}: lines such as
    `gpu0/gi1/access 12` and `gpu0/gi1/ci0/access 13` (also `config`, `monitor`).

    This is a purely computational function with no side effects; bad lines are skipped, as
    the toolkit's `internal/nvcaps` skips them."""
    minors = {}
    for line in text.splitlines():
        parts = line.split(" ")
        if len(parts) == 2 and parts[1].isdigit():
            minors[parts[0]] = int(parts[1])
    return minors


def mig_capability_nodes(
    roots: Roots, *, minor: int, gi_id: int, ci_id: int, check_nodes: bool = True
) -> list[str]:
    """The /dev/nvidia-caps nodes a container needs to use one MIG device (its GPU instance's
    and compute instance's access capabilities), each checked present under the dev root;
    DriverFilesError naming the file, the capability or the node that is missing."""
    source = join(roots.proc_root, MIG_MINORS)
    try:
        minors = mig_minors(Path(source).read_text())
    except OSError as error:
        raise DriverFilesError(
            f"cannot read {source} ({error.strerror or error}): the MIG capability device "
            "nodes of a MIG device cannot be located"
        ) from None
    nodes = []
    dev = roots.read_dev_root
    for cap in (f"gpu{minor}/gi{gi_id}/access", f"gpu{minor}/gi{gi_id}/ci{ci_id}/access"):
        if cap not in minors:
            raise DriverFilesError(f"{source} has no entry {cap}")
        node = f"/dev/nvidia-caps/nvidia-cap{minors[cap]}"
        if check_nodes and not (dev / node.lstrip("/")).exists():
            raise DriverFilesError(
                f"MIG capability device node {join(roots.host_dev_root, node)} ({cap}) is missing "
                f"(read at {join(dev, node)}); `nvidia-modprobe -f "
                f"/proc/driver/nvidia/capabilities/{cap.replace('/', '/mig/', 1)}` creates it"
            )
        nodes.append(node)
    return nodes


def gpu_node(roots: Roots, minor: int) -> str:
    """`/dev/nvidia<minor>`, checked present under the dev root."""
    node = f"/dev/nvidia{minor}"
    if not (roots.read_dev_root / node.lstrip("/")).exists():
        raise DriverFilesError(
            f"GPU device node {join(roots.host_dev_root, node)} is missing (read at "
            f"{join(roots.read_dev_root, node)})"
        )
    return node
