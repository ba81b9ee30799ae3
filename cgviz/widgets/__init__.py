"""Interactive Jupyter UIs for cgviz traces (ipywidgets, loaded only when used).

- `cgviz.widgets.explorer.Explorer` (also `cgviz.Explorer`): step through a trace, or follow
  a live `cgviz.Tree`, with the tree, the selected node's outputs, the pool and the timeline.
"""
