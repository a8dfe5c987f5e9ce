"""Finds and wraps the example's kernel library (shared by both flavours)."""

from __future__ import annotations

import ctypes
import glob
import os


class KernelLibrary:
    def __init__(self, path: str) -> None:
        self.path = path
        self.dll = self._dll = ctypes.CDLL(path)
        self._dll.cuw_example_tu_name.restype = ctypes.c_char_p
        self._dll.cuw_example_build_info.restype = ctypes.c_char_p
        self._dll.cuw_example_launch_all.argtypes = [ctypes.c_void_p, ctypes.c_int]

    def tu_values(self) -> dict[str, int]:
        """Every kernel TU's name and the value its host function returns."""
        count = self._dll.cuw_example_tu_count()
        return {
            self._dll.cuw_example_tu_name(i).decode(): self._dll.cuw_example_tu_host(i)
            for i in range(count)
        }

    def build_info(self) -> str:
        return self._dll.cuw_example_build_info().decode()

    def launch_all(self, device_ptr: int, n: int) -> int:
        """Runs every kernel on device memory; returns a cudaError_t code."""
        return self._dll.cuw_example_launch_all(device_ptr, n)


def load(package: str, directory: str) -> KernelLibrary:
    found = sorted(glob.glob(os.path.join(directory, "_kernels*.so")))
    if not found:
        raise ImportError(f"{package}: no _kernels*.so in {directory}")
    return KernelLibrary(found[0])
