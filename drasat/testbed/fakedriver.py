"""A fake NVIDIA driver root for tests: files named and linked as a real 550.54.15 install has them
(regular files stand in for libraries and firmware; device nodes are regular files too, or real
character devices for a container runtime to create in containers), a leftover of an older
driver that must not be picked, and a `/proc` with the MIG capability minors.

The character devices (`char_devices=True`, root only) carry NVIDIA's numbers where they are
fixed (major 195: `nvidia<N>` at minor N, `nvidiactl` 255, `nvidia-modeset` 254) and majors of
the range Linux reserves for local use where the driver's are dynamic (`nvidia-uvm` 120,
`nvidia-caps` 121): on a machine without the driver, opening one fails (ENXIO) and touches
nothing."""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

VERSION = "550.54.15"
OLD = "535.104.05"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
#: (library, SONAME link or "", `.so` link too) as the driver's installer lays them out.
LIBRARIES = (
    ("libcuda.so", "libcuda.so.1", True),
    ("libnvidia-ml.so", "libnvidia-ml.so.1", True),
    ("libnvidia-ptxjitcompiler.so", "libnvidia-ptxjitcompiler.so.1", False),
    ("libnvidia-nvvm.so", "libnvidia-nvvm.so.4", False),
    ("libcudadebugger.so", "libcudadebugger.so.1", False),
    ("libnvidia-cfg.so", "libnvidia-cfg.so.1", False),
    ("libnvidia-gpucomp.so", "", False),
)
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)
CONTROL = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
FIRMWARE = ("gsp_ga10x.bin", "gsp_tu10x.bin")
#: (major, minor) of each fixed node for `char_devices` (see the module's doc).
NVIDIA_MAJOR = 195
UVM_MAJOR = 120
CAPS_MAJOR = 121
CONTROL_NUMBERS = {
    "/dev/nvidiactl": (NVIDIA_MAJOR, 255),
    "/dev/nvidia-modeset": (NVIDIA_MAJOR, 254),
    "/dev/nvidia-uvm": (UVM_MAJOR, 0),
    "/dev/nvidia-uvm-tools": (UVM_MAJOR, 1),
}


def _file(path: Path, text: str = "", mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)


def cap_minor(gpu: int, gi: int, ci: int | None = None) -> int:
    """A fake but unique minor per capability (the driver numbers them from 3 up)."""
    base = 3 + gpu * 15 * 9 + gi * 9
    return base if ci is None else base + 1 + ci


def make(
    root: Path,
    *,
    libdir: str = LIBDIR,
    gpus: int = 2,
    smi_script: str = "",
    modeset: bool = False,
    caps_nodes: bool = True,
    char_devices: bool = False,
) -> Path:
    """Lay out a driver root (also its dev root) and `<root>/proc`; returns `root`.

    `smi_script`: a shell script body for bin/nvidia-smi (else an empty executable);
    `char_devices`: device nodes are character devices (see the module's doc)."""

    def node(path: str, numbers: tuple[int, int]) -> None:
        target = root / path.lstrip("/")
        if not char_devices:
            _file(target)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        os.mknod(target, 0o666 | stat.S_IFCHR, os.makedev(*numbers))
        target.chmod(0o666)

    lib = root / libdir.lstrip("/")
    for name, soname, dot_so in LIBRARIES:
        _file(lib / f"{name}.{VERSION}")
        if soname:
            _link(lib / soname, f"{name}.{VERSION}")
        if dot_so:
            _link(lib / name, soname)
    _file(lib / "vdpau" / f"libvdpau_nvidia.so.{VERSION}")
    _file(lib / f"libcuda.so.{OLD}")  # an older driver's leftover
    _file(lib / "libfoo.so.1")  # not the driver's
    for name in BINARIES:
        body = f"#!/bin/sh\n{smi_script}\n" if name == "nvidia-smi" and smi_script else ""
        _file(root / "usr/bin" / name, body, 0o755)
    _file(root / "usr/bin/nvidia-settings", "", 0o755)  # not one the toolkit mounts
    for name in FIRMWARE:
        _file(root / f"lib/firmware/nvidia/{VERSION}/{name}")
    _file(root / f"lib/firmware/nvidia/{OLD}/gsp_ga10x.bin")
    for control in (*CONTROL, *(["/dev/nvidia-modeset"] if modeset else [])):
        node(control, CONTROL_NUMBERS[control])
    lines = ["config 1", "monitor 2"]
    for gpu in range(gpus):
        node(f"/dev/nvidia{gpu}", (NVIDIA_MAJOR, gpu))
        for gi in range(15):
            lines.append(f"gpu{gpu}/gi{gi}/access {cap_minor(gpu, gi)}")
            for ci in range(8):
                lines.append(f"gpu{gpu}/gi{gi}/ci{ci}/access {cap_minor(gpu, gi, ci)}")
    for line in lines[2:]:
        if caps_nodes:
            minor = int(line.split()[1])
            node(f"/dev/nvidia-caps/nvidia-cap{minor}", (CAPS_MAJOR, minor))
    _file(root / "proc/driver/nvidia-caps/mig-minors", "\n".join(lines) + "\n")
    return root


def ldcache(paths: list[str], *, old_format: bool = False) -> bytes:
    """A glibc ld.so.cache ("glibc-ld.so.cache1.1") listing `paths` as x86-64 ELF libraries
    (key = the file name), laid out as glibc's ldconfig writes it; `old_format` puts an
    "ld.so-1.7.0" table in front, as glibc before 2.32 did."""
    strings = b""
    offsets = []
    header = 48
    table = header + 24 * len(paths)
    for path in paths:
        key = path.rpartition("/")[2].encode() + b"\0"
        value = path.encode() + b"\0"
        offsets.append((table + len(strings), table + len(strings) + len(key)))
        strings += key + value
    out = struct.pack("<20sII12x8x", b"glibc-ld.so.cache1.1", len(paths), len(strings))
    for key_at, value_at in offsets:
        out += struct.pack("<iIIIQ", 0x0303, key_at, value_at, 0, 0)
    out += strings
    if old_format:
        old = b"ld.so-1.7.0\0" + struct.pack("<I", 0)
        old += b"\0" * (-len(old) % 8)
        out = old + out
    return out
