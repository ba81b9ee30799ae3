"""Views of a Trace: pictures of the tree, the pool and the steps.

Each view is its own module and loads what it needs (graphviz, matplotlib) only when
it is used, so importing `cgviz.views` costs nothing:

- `cgviz.views.tree`: a snapshot's tree as graphviz DOT and SVG, with a built-in
  SVG layout when Graphviz's `dot` is not installed.
"""
