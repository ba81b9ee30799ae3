"""Observers: turn activity that cgviz does not drive (torch.compile's trees) into Traces."""
