"""The export's tree frames under their old name: the page's modules import them from here.
They live in `cgviz.views.tree.frames`."""

from cgviz.views.tree.frames import EDGE_CSS, KEYFRAME, TreeStates

__all__ = ["EDGE_CSS", "KEYFRAME", "TreeStates"]
