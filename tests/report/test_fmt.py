"""Number formatting shared by every output (evalgate.fmt)."""

from __future__ import annotations

import math

import pytest

from evalgate.fmt import (
    MINUS,
    clip,
    count,
    decimals_apart,
    finite,
    interval,
    json_number,
    num,
    p_value,
    pts,
    ratio,
    rule_text,
)


def test_points_use_a_real_minus_and_no_sign_on_zero() -> None:
    assert pts(-1.25) == f"{MINUS}1.2" and pts(1.25) == "+1.2" and pts(2, signed=False) == "2.0"
    assert pts(-0.04) == "0.0" == pts(0.0) and pts(None) == "n/a" == pts(math.nan)
    assert pts(-2.0, False) == f"{MINUS}2.0" and pts(math.inf) == "+inf"
    assert interval(-1.0, None) == f"[{MINUS}1.0, n/a]"


def test_gate_numbers_show_nan_and_enough_decimals() -> None:
    assert num(math.nan) == "NaN" and num(-math.inf) == f"{MINUS}inf" and num(3.14159, 3) == "+3.142"
    assert decimals_apart(-2.0004, -2.0) == 4 and decimals_apart(-2.0, -2.0) == 1 and decimals_apart(-3.1, -2.0) == 1


def test_p_values_ratios_and_json_numbers() -> None:
    assert p_value(0.0123) == "0.012" and p_value(0.00012) == "1.2e-04" and p_value(math.nan) == "NaN"
    assert ratio(1.234) == "1.23" and ratio(None) == "n/a" == ratio(math.inf)
    assert finite(3) == 3.0 and finite("3") is None and finite(math.nan) is None
    assert json_number(math.nan) is None and json_number(None) is None and json_number(0.5) == 0.5


def test_rules_read_with_the_same_signs() -> None:
    assert rule_text("non-inferiority: LB >= -margin and MDE <= margin") == (
        f"non-inferiority: LB \u2265 {MINUS}margin and MDE \u2264 margin")
    assert rule_text("loss shown: LB < -margin and loss test significant (Holm)") == (
        f"loss shown: LB < {MINUS}margin and loss test significant (Holm)")
    assert rule_text("power: MDE > margin") == "power: MDE > margin" and rule_text("") == ""


def test_counts_take_the_plural_unless_one() -> None:
    assert [count(n, "restart") for n in (0, 1, 2)] == ["0 restarts", "1 restart", "2 restarts"]


def test_clip_cuts_at_a_space_and_marks_the_cut() -> None:
    assert clip("short", 10) == "short" and clip("exactly10!", 10) == "exactly10!"
    assert clip("slept in 0.38 s then woke", 12) == "slept in\u2026"   # "slept in 0." would cut "0.38"
    assert clip("abcdefghijkl", 5) == "abcd\u2026"                      # no space: cut at the limit
    with pytest.raises(ValueError):
        clip("abc", 1)
