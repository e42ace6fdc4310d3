"""What the machine says about its NVIDIA GPUs without NVML, to tell a broken driver from a machine without a GPU.

NVML answers only for the cards the driver brought up. When it does not start at all (the kernel module not
loaded after a kernel upgrade, a user-space library of another version than the module: LIB_RM_VERSION_MISMATCH),
or lists fewer cards than the machine has (a card that failed to come up, one that fell off the bus at boot), the
cards are still there for the kernel:

- ``/proc/driver/nvidia/gpus/<bus id>/``: one directory per card the nvidia module probed. In a container the
  NVIDIA runtime leaves only the container's own cards there, so it is the count to trust where it exists;
- ``/sys/bus/pci/devices/<bus id>/``: ``vendor`` 0x10de and a ``class`` whose base class is 0x03 (display
  controller: VGA 0x0300, 3D 0x0302). NVSwitches are bridges (0x0680) and are not counted. This is what says a
  GPU is there when the module did not load at all.

A machine with neither (no NVIDIA display device, no ``/proc/driver/nvidia``) never had a GPU: host-only mode,
calm. The root is a parameter (``GPU_TRIAGE_HOST_ROOT`` where the host's ``/proc`` and ``/sys`` are mounted
elsewhere, as in a container that watches its host), so tests give a directory laid out like one.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

NVIDIA_VENDOR = 0x10DE
DISPLAY_CLASS = 0x03  # PCI base class of a display controller (the class file's top byte of three)
HOST_ROOT_ENV = "GPU_TRIAGE_HOST_ROOT"
MAX_DEVICES = 4096  # a directory listing larger than any machine is not read further


@dataclass(frozen=True, slots=True)
class SystemGpus:
    """The NVIDIA GPUs the kernel knows of, by PCI bus id (``0000:18:00.0``, lower case)."""

    driver_loaded: bool = False  # /proc/driver/nvidia exists: the kernel module is loaded
    proc: tuple[str, ...] = ()  # /proc/driver/nvidia/gpus/*
    pci: tuple[str, ...] = ()  # NVIDIA display devices on the PCI bus

    @property
    def present(self) -> bool:
        """The machine has (or had, this boot) an NVIDIA GPU: a driver that does not answer is a failure."""
        return self.driver_loaded or bool(self.proc) or bool(self.pci)

    @property
    def expected(self) -> int | None:
        """How many cards NVML should list: the driver's own list where it has one (a container's own cards),
        else the PCI bus's; None when neither names a card."""
        if self.proc:
            return len(self.proc)
        return len(self.pci) or None


def host_root() -> Path:
    """Where the host's ``/proc`` and ``/sys`` are: ``$GPU_TRIAGE_HOST_ROOT``, else ``/``."""
    return Path(os.environ.get(HOST_ROOT_ENV) or "/")


def system_gpus(root: Path | None = None) -> SystemGpus:
    """Read the kernel's view under ``root`` (default :func:`host_root`). Unreadable parts count as absent."""
    root = host_root() if root is None else root
    driver = root / "proc/driver/nvidia"
    devices = root / "sys/bus/pci/devices"
    return SystemGpus(
        driver_loaded=driver.is_dir(),
        proc=tuple(_names(driver / "gpus")),
        pci=tuple(name for name in _names(devices) if _is_nvidia_gpu(devices / name)),
    )


def _names(directory: Path) -> list[str]:
    try:
        with os.scandir(directory) as it:
            names = []
            for entry in it:
                names.append(entry.name.lower())
                if len(names) >= MAX_DEVICES:
                    break
    except OSError:
        return []
    return sorted(names)


def _hex(path: Path) -> int | None:
    try:
        return int(path.read_text(encoding="ascii", errors="replace").strip(), 16)
    except (OSError, ValueError):
        return None


def _is_nvidia_gpu(device: Path) -> bool:
    pci_class = _hex(device / "class")
    return _hex(device / "vendor") == NVIDIA_VENDOR and pci_class is not None and pci_class >> 16 == DISPLAY_CLASS
