"""Runtime: one device API over the simulator, RTL and FPGA backends (ARCHITECTURE.md §5)."""
