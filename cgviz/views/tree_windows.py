"""The widget's tree windows under their old name: the page's payload imports them from here.
They live in `cgviz.views.tree.windows`."""

from cgviz.views.tree.windows import TreeWindows

__all__ = ["TreeWindows"]
