"""Compiler: tensor expressions, schedules, passes, graph level, tuner (ARCHITECTURE.md §6)."""
