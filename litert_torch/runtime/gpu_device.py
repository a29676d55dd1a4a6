"""A Vulkan device for LiteRT's GPU accelerator, found before the accelerator loads.

LiteRT's GPU accelerator in `ai-edge-litert` (ML Drift over WebGPU, `libLiteRtWebGpuAccelerator.so`) runs on
Dawn, and Dawn on Vulkan. On a machine with a GPU and its Vulkan driver nothing here changes anything. On one
without, SwiftShader, the software Vulkan device that Debian's `chromium` package ships in its library folder
(`libvk_swiftshader.so`, `vk_swiftshader_icd.json`, and the Vulkan loader `libvulkan.so.1`), runs the same
accelerator on the CPU: placement, partitions and numerics are the real delegate's, times are not.

`prepare()` guarantees, before the first GPU model is compiled in this process, that:
- a user's own Vulkan settings (`VK_ICD_FILENAMES`, `VK_DRIVER_FILES`) are left as they are;
- otherwise, when no Vulkan driver is installed (Mesa's lavapipe does not count: Dawn refuses it) and
  SwiftShader is found, `VK_ICD_FILENAMES` names SwiftShader's ICD file, `XDG_RUNTIME_DIR` is set when unset
  (to a private folder), and the Vulkan loader is loaded from Chromium's folder when the system has none;
- it returns what it found, so a failure can say what to install.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
import tempfile
from dataclasses import dataclass

# Where Chromium packages keep SwiftShader: Debian/Ubuntu's chromium, Fedora's chromium, Ubuntu's snap.
SWIFTSHADER_DIRS = ("/usr/lib/chromium", "/usr/lib64/chromium-browser", "/usr/lib/chromium-browser",
                    "/snap/chromium/current/usr/lib/chromium-browser")
# Where Vulkan drivers register themselves (the loader's own search path).
ICD_DIRS = ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d")
USER_SETTINGS = ("VK_ICD_FILENAMES", "VK_DRIVER_FILES")
INSTALL_HINT = ("install Debian's chromium package (apt-get install chromium), whose SwiftShader runs LiteRT's "
                "GPU accelerator on the CPU, or a GPU with its Vulkan driver")


@dataclass(frozen=True)
class GpuDevice:
    """What `prepare` found: "user" (the user's own Vulkan settings), "driver" (an installed Vulkan driver),
    "swiftshader" (Chromium's software device) or "none"; `icd` the ICD file in use, where known."""

    kind: str
    icd: str | None = None

    @property
    def software(self) -> bool:
        return self.kind == "swiftshader"


_prepared: GpuDevice | None = None


def find_swiftshader(dirs: tuple[str, ...] | None = None) -> str | None:
    """The folder holding SwiftShader's ICD file and library, or None."""
    for folder in SWIFTSHADER_DIRS if dirs is None else dirs:
        if (os.path.isfile(os.path.join(folder, "vk_swiftshader_icd.json"))
                and os.path.isfile(os.path.join(folder, "libvk_swiftshader.so"))):
            return folder
    return None


def installed_drivers() -> list[str]:
    """The Vulkan drivers' ICD files the loader would find, less Mesa's lavapipe (which Dawn refuses)."""
    files = [f for d in ICD_DIRS for f in sorted(glob.glob(os.path.join(d, "*.json")))]
    return [f for f in files if not os.path.basename(f).startswith("lvp_icd")]


def _system_loader() -> bool:
    return ctypes.util.find_library("vulkan") is not None


def prepare(dirs: tuple[str, ...] | None = None) -> GpuDevice:
    """Make a Vulkan device visible to LiteRT's GPU accelerator (see the module docstring); once per process.
    `dirs` overrides SWIFTSHADER_DIRS."""
    global _prepared
    if _prepared is not None:
        return _prepared
    if not sys.platform.startswith("linux"):
        _prepared = GpuDevice("driver")  # Metal, D3D12: Dawn's own backends, nothing to find
        return _prepared
    user = next((os.environ[k] for k in USER_SETTINGS if os.environ.get(k)), None)
    if user is not None:
        _prepared = GpuDevice("user", user)
        return _prepared
    drivers = installed_drivers()
    if drivers:
        _prepared = GpuDevice("driver", drivers[0])
        return _prepared
    folder = find_swiftshader(dirs)
    if folder is None:
        _prepared = GpuDevice("none")
        return _prepared
    icd = os.path.join(folder, "vk_swiftshader_icd.json")
    os.environ["VK_ICD_FILENAMES"] = icd
    if not os.environ.get("XDG_RUNTIME_DIR"):
        os.environ["XDG_RUNTIME_DIR"] = _private_runtime_dir()
    bundled = os.path.join(folder, "libvulkan.so.1")
    if not _system_loader() and os.path.isfile(bundled):
        # Dawn opens "libvulkan.so.1" by name: a library already loaded under that name is the one it gets.
        ctypes.CDLL(bundled, mode=ctypes.RTLD_GLOBAL)
    _prepared = GpuDevice("swiftshader", icd)
    return _prepared


def _private_runtime_dir() -> str:
    path = os.path.join(tempfile.gettempdir(), f"litert-torch-runtime-{os.getuid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def missing_device_message(device: GpuDevice) -> str | None:
    """Why LiteRT's GPU accelerator found no device, with what to install; None when a device was found."""
    if device.kind != "none":
        return None
    return f"no Vulkan device for LiteRT's GPU accelerator on this machine: {INSTALL_HINT}"
