"""Startup file of the kernels the documentation build runs (conf.py installs it).

1. A static page cannot run a Jupyter widget without a widget manager from a CDN, so a
   ``cgviz.Explorer`` is shown as its still picture (the step it shows: headline, tree, pool, at
   the page's own size) and, under "Step through it", the explorer's standalone page
   (``cgviz.to_html``: the same front end, the whole trace embedded) in an iframe, opened at the
   widget's step and node.
2. A teaching notebook's build-time copy (``docs/notebooks/``) runs in the repository's
   ``notebooks/`` folder, where nbval and Jupyter run it, so its relative paths hold.
"""


def _cgviz_docs_setup() -> None:
    import html
    import os

    from IPython import get_ipython

    dirs = os.environ.get("CGVIZ_DOCS_NOTEBOOK_DIRS", "").split(os.pathsep)
    if len(dirs) == 2 and os.path.abspath(os.getcwd()) == os.path.abspath(dirs[0]) and os.path.isdir(dirs[1]):
        os.chdir(dirs[1])

    def explorer_page(explorer):
        from cgviz.views.html import to_html
        from cgviz.widgets.explorer import Explorer

        # by name, only the first instance's class was matched (an Explorer's class may be a
        # subclass made for it): from now on, match the class and its subclasses
        formatter.for_type(Explorer, explorer_page)

        page = to_html(explorer.trace, progress=lambda done, total, what: None)  # no bar on stderr
        # the page opens at the step and node its address names (#step=N&node=M, N from 1); in
        # an iframe's srcdoc page replaceState may be refused, setting the hash works
        where = f"step={explorer.step + 1}" + (f"&node={explorer.selected}" if explorer.selected is not None else "")
        at = f'<script>try{{location.hash="{where}"}}catch(e){{}}</script>'
        page = page.replace('<script type="module">', at + '<script type="module">', 1)
        return {
            "text/html": static_html(explorer.trace, explorer.step)
            + '<details class="cgviz-explorer"><summary>Step through it (the interactive explorer)</summary>'
            + f'<iframe class="cgviz-explorer" srcdoc="{html.escape(page)}" '
            + 'title="cgviz explorer" loading="lazy"></iframe></details>',
            "text/plain": repr(explorer),
        }

    def display_page(explorer):  # in place of the still picture and the widget a notebook shows
        from IPython.display import display

        display(explorer_page(explorer), raw=True)

    shell = get_ipython()
    if shell is not None:
        from cgviz.views.static_view import static_html
        from cgviz.widgets.explorer import Explorer

        Explorer._ipython_display_ = display_page
        formatter = shell.display_formatter.mimebundle_formatter
        formatter.for_type_by_name("cgviz.widgets.explorer", "Explorer", explorer_page)


_cgviz_docs_setup()
del _cgviz_docs_setup
