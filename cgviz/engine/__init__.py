"""The CUDA graph tree engine: one state machine (tree.py) over a device backend (sim, cuda)."""
