"""What both producers (engine and observe) read of torch through its public API: a captured
graph's kernels (kernels.py, graphs.py) and a private pool's segments (allocator.py).

Below both producers: it imports torch and cgviz.trace, nothing of engine, observe or views.
Private torch names stay in engine/_torch_compat.py and observe/_torch_layout/.
"""
