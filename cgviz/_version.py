"""cgviz's version, in a leaf module every layer may read."""

__version__ = "0.1.0"
