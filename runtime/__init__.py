"""Runtime: one device API over the simulator, RTL and FPGA backends (ARCHITECTURE.md §5)."""

from .api import OperatorError, conv2d, dense
from .device import Device, DeviceError, FsimDevice, get_device

__all__ = ["Device", "DeviceError", "FsimDevice", "get_device", "conv2d", "dense", "OperatorError"]
