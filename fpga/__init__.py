"""FPGA board targets and bitstream builds with Yosys + nextpnr."""
