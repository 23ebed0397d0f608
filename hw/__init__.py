"""Amaranth HDL components of the accelerator (see ARCHITECTURE.md §4)."""
