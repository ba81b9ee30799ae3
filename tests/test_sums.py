"""A drawing's sizes add floats in turn, so the page is the same on every Python (from 3.12
sum() compensates, and moved a label of the stored old-layout page by a rounding step)."""

from cgviz.views.sums import added_in_turn
from cgviz.views.tree.card import text_width


def test_floats_are_added_in_turn_not_compensated():
    values = [1.0, 1e100, 1.0, -1e100]
    plain = 0.0
    for v in values:
        plain += v
    assert added_in_turn(values) == plain == 0.0  # sum() gives 2.0 from Python 3.12


def test_a_labels_width_is_its_characters_added_in_turn():
    # 'forward' at 9.5 px: the label whose box moved by 0.1 px between Python 3.11 and 3.13
    ems = [0.42, 0.64, 0.42, 0.96, 0.64, 0.42, 0.64]
    plain = 0.0
    for e in ems:
        plain += e
    assert text_width("forward", 9.5) == plain * 9.5
    assert text_width("forward", 9.5, bold=True) == plain * 9.5 * 1.08
