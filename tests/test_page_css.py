"""One palette for every host: the explorer's style sheet (page.css) names no colour; every colour
it reads is a custom property that views/style.py writes (the frame's, `page_theme_css`; the
pictures', `css_variables`) or that the front end sets per element."""

from __future__ import annotations

import re
from pathlib import Path

from cgviz.views.html import page_css
from cgviz.views.style import PAGE_DARK, PAGE_LIGHT, css_variables, page_theme_css

PAGE = Path(__file__).resolve().parents[1] / "cgviz" / "views" / "page"
COLOUR = re.compile(r"#[0-9a-fA-F]{3,8}\b|\b(?:rgba?|hsla?|hwb|lab|lch|oklab|oklch)\(|(?<![-\w])(?:white|black)(?![-\w])")
READ = re.compile(r"var\((--[\w-]+)")
DEFINED = re.compile(r"(--[\w-]+)\s*:")


def colours(css: str) -> list[str]:
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    return [m.group(0) for m in COLOUR.finditer(css)]


def test_page_css_names_no_colour():
    assert colours((PAGE / "page.css").read_text(encoding="utf-8")) == []


def test_the_colour_check_sees_each_way_of_naming_one():
    for css in ("a{color:#fff}", "a{color:#1f2933}", "a{background:rgba(0,0,0,.4)}", "a{color:hsl(0 0% 0%)}",
                "a{color:white}", "a{border:1px solid black}"):
        assert colours(css), css
    assert colours("a{white-space:nowrap;color:var(--fg)}/* #fff */") == []


def test_every_property_the_page_reads_is_written():
    """By style.py, by page.css itself (non-colour sizes), or by the front end per element
    (a step kind's --k, a pool block's --c and --t)."""
    sheet = (PAGE / "page.css").read_text(encoding="utf-8")
    front_end = "".join((PAGE / name).read_text(encoding="utf-8") for name in sorted(p.name for p in PAGE.glob("*.js")))
    written = set(DEFINED.findall(page_theme_css() + css_variables() + sheet))
    written |= {name for name in ("--k", "--c", "--t") if name in front_end}
    read = set(READ.findall(sheet))
    assert read - written == set()
    assert {"--k", "--c", "--t"} <= written  # the front end still sets them


def test_the_frame_has_a_dark_colour_for_each_light_one_it_changes():
    light, dark = PAGE_LIGHT, PAGE_DARK
    assert set(dark) - set(light) == {"err"}  # the light one follows the pictures' invalid colour
    theme = page_theme_css()
    assert '.cgviz.cg-dark{' in theme and 'body[data-jp-theme-light="false"] .cgviz' in theme
    for name, value in dark.items():
        assert f"--{name}:{value}" in theme.split(".cgviz.cg-dark{", 1)[1]


def test_the_style_sheet_of_page_and_widget_carries_the_theme_first():
    css = page_css()
    assert css.startswith(page_theme_css()) and (PAGE / "page.css").read_text(encoding="utf-8") in css


def test_the_dark_pictures_filter_is_the_one_the_kind_colours_follow():
    """page.css inverts the pictures with the filter as_dark_picture computes the kinds' dark colours by."""
    from cgviz.views.style import DARK_PICTURE_FILTER, STEP_COLORS, as_dark_picture

    css = (PAGE / "page.css").read_text(encoding="utf-8")
    assert css.count(f"--picture-filter:{DARK_PICTURE_FILTER}") == 2
    dark = page_theme_css().split(".cgviz.cg-dark{", 1)[1]
    assert f"--k-record:{as_dark_picture(STEP_COLORS['record'])}" in dark and as_dark_picture("#0072b2") == "#51a8d8"
