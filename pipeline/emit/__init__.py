"""Simulation results -> the files PyPTO writes, under upstream's names."""
