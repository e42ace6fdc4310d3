"""A machine's kernel view of its NVIDIA GPUs laid out in a directory, the outside world that
``gpu_triage.sources.gpu_inventory`` reads (``/proc/driver/nvidia/gpus/*`` and ``/sys/bus/pci/devices/*``): pass
the directory as the live source's ``system_root`` (or ``$GPU_TRIAGE_HOST_ROOT`` for a whole command)."""

from __future__ import annotations

from pathlib import Path

from tests.fake_nvml import bus


def sysfs_bus(i: int) -> str:
    """Card ``i``'s bus id as the kernel names it (``0000:18:00.0``), the same card as ``fake_nvml.bus(i)``."""
    return bus(i)[4:].lower()


def machine_root(root: Path, *, pci_gpus: int = 0, driver_gpus: int | None = None, nvswitches: int = 0,
                 other_devices: int = 2) -> Path:
    """A root with ``pci_gpus`` NVIDIA 3D controllers on the PCI bus (class 0x030200), ``nvswitches`` NVIDIA
    bridges (0x068000, never counted), a few devices of other vendors, and, unless ``driver_gpus`` is None (the
    module not loaded), ``/proc/driver/nvidia`` listing the first ``driver_gpus`` cards."""
    devices = root / "sys/bus/pci/devices"
    devices.mkdir(parents=True, exist_ok=True)

    def device(name: str, vendor: str, cls: str) -> None:
        d = devices / name
        d.mkdir()
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(cls + "\n")

    for i in range(pci_gpus):
        device(sysfs_bus(i), "0x10de", "0x030200")
    for k in range(nvswitches):
        device(f"0000:{0xA0 + k:02x}:00.0", "0x10de", "0x068000")
    for k in range(other_devices):
        device(f"0000:00:{k:02x}.0", "0x8086", "0x060000")
    if driver_gpus is not None:
        gpus = root / "proc/driver/nvidia/gpus"
        gpus.mkdir(parents=True)
        for i in range(driver_gpus):
            (gpus / sysfs_bus(i)).mkdir()
    return root
