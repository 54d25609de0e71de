"""Tests of evalgate.gate: the non-inferiority rule with power and Holm, NO-OP, fail-closed cases, config diff."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from evalgate.compare.stats import BOOTSTRAP_METHOD, PairedComparison, paired_comparison
from evalgate.gate import MISSING, Decision, Verdict, decide, effective_diff, overall_of, shows_non_inferiority
from evalgate.inputs.thresholds import LevelOverride, TaskThreshold, Thresholds

M = "\u2212"  # the minus sign used in reasons

BASE_CFG = {"model": "m", "dtype": "float32", "compilation_config": {"level": 0, "cg": False}}
CAND_CFG = {"model": "m", "dtype": "bfloat16", "compilation_config": {"level": 3, "cg": False}}


def cmp(
    lower: float, *, delta: float = -1.2, high: float = 1.6, n: int = 40, alpha: float = 0.05,
    p_loss: float = 1.0, se_power: float = 1.0,
) -> PairedComparison:
    """A hand-made comparison; only the fields the gate reads matter.

    ``se_power=1.0`` gives MDE = (1.645 + 0.842) * 1.0 = 2.486 points at alpha 0.05, power 0.8.
    """
    return PairedComparison(
        n=n, baseline_mean=80.0, candidate_mean=80.0 + delta, delta=delta,
        ci_low=lower, ci_high=high, lower_bound=lower, method=BOOTSTRAP_METHOD, binary=True,
        n_improved=3, n_regressed=4, mcnemar_p=1.0, stderr=1.0, alpha=alpha, p_loss=p_loss,
        loss_test="McNemar exact, one-sided", se_power=se_power,
    )


MDE = "2.5"  # printed MDE of cmp(): 2.486 points


@pytest.fixture
def thresholds() -> Thresholds:
    return Thresholds(
        alpha=0.05,
        default_margin=3.0,
        suites={"coding": LevelOverride(margin=5.0)},
        tasks={"strict_task": LevelOverride(margin=0.0)},
    )


def _decide(results: list, thr: Thresholds) -> Decision:
    return decide(results, thr.policy(None), baseline_effective=BASE_CFG, candidate_effective=CAND_CFG)


def _one(comparison: PairedComparison, thr: Thresholds) -> Decision:
    return _decide([("docparse", "fields", comparison)], thr)


def test_verdict_values() -> None:
    assert [v.value for v in Verdict] == ["PASS", "BLOCK", "NO-OP", "INCONCLUSIVE"]
    assert Verdict.NO_OP == "NO-OP"


def test_lower_bound_exactly_minus_margin_passes(thresholds: Thresholds) -> None:
    d = _one(cmp(-3.0), thresholds)
    assert d.verdict is Verdict.PASS
    assert d.tasks[0].verdict is Verdict.PASS
    assert d.tasks[0].reason == (
        f"lower bound {M}3.0 pts \u2265 {M}margin {M}3.0 pts and MDE {MDE} \u2264 margin 3.0 pts "
        f"(\u0394 {M}1.2, 90% CI [{M}3.0, +1.6], n=40, 7 scores changed, MDE {MDE})"
    )
    assert d.tasks[0].mde == pytest.approx(1.6448536 + 0.8416212, abs=1e-6)  # z_0.95 + z_0.8


def test_lower_bound_just_below_minus_margin_blocks(thresholds: Thresholds) -> None:
    just_below = float(np.nextafter(-3.0, -np.inf))
    d = _one(cmp(just_below, high=-0.5, p_loss=0.01), thresholds)
    assert d.verdict is Verdict.BLOCK
    assert d.tasks[0].verdict is Verdict.BLOCK
    # The same bound without a significant loss: the interval straddles 0 and -margin.
    d = _one(cmp(just_below, p_loss=0.2), thresholds)
    assert d.tasks[0].verdict is Verdict.INCONCLUSIVE
    assert d.tasks[0].reason.startswith("undecided: lower bound")


def test_block_reason_shows_enough_decimals(thresholds: Thresholds) -> None:
    d = _one(cmp(-3.004, p_loss=0.001), thresholds)
    assert d.tasks[0].reason.startswith(f"lower bound {M}3.004 pts < {M}margin {M}3.000 pts")


def test_block_reason_example(thresholds: Thresholds) -> None:
    d = _one(cmp(-4.1, high=-0.1, p_loss=0.012), thresholds)
    assert d.verdict is Verdict.BLOCK
    reason = (
        f"lower bound {M}4.1 pts < {M}margin {M}3.0 pts and the loss is significant "
        "(one-sided loss p=0.012 \u2264 0.05 after Holm, McNemar exact, one-sided) "
        f"(\u0394 {M}1.2, 90% CI [{M}4.1, {M}0.1], n=40, 7 scores changed, MDE {MDE})"
    )
    assert d.tasks[0].reason == reason
    assert d.reasons == (f"docparse/fields: BLOCK: {reason}",)
    assert d.tasks[0].threshold == TaskThreshold(3.0, 0.05, "default")


def test_thresholds_precedence_is_used(thresholds: Thresholds) -> None:
    results = [
        ("coding", "humaneval", cmp(-4.0)),
        ("docparse", "fields", cmp(-2.0)),
        ("docparse", "strict_task", cmp(-0.1, p_loss=0.001)),
    ]
    d = _decide(results, thresholds)
    assert [(t.task, t.verdict, t.threshold.margin) for t in d.tasks] == [
        ("humaneval", Verdict.PASS, 5.0),
        ("fields", Verdict.PASS, 3.0),
        ("strict_task", Verdict.BLOCK, 0.0),
    ]
    assert d.verdict is Verdict.BLOCK
    assert d.reasons == (f"docparse/strict_task: BLOCK: {d.tasks[2].reason}",)
    assert f"{M}margin 0.0 pts" in d.tasks[2].reason


def test_all_pass_lists_every_task(thresholds: Thresholds) -> None:
    d = _decide([("a", "t1", cmp(-1.0)), ("b", "t2", cmp(0.5, delta=1.0, high=2.0))], thresholds)
    assert d.verdict is Verdict.PASS
    assert len(d.reasons) == 2
    assert d.reasons[1] == (
        f"b/t2: PASS: lower bound +0.5 pts \u2265 {M}margin {M}3.0 pts and MDE {MDE} \u2264 margin 3.0 pts "
        f"(\u0394 +1.0, 90% CI [+0.5, +2.0], n=40, 7 scores changed, MDE {MDE})"
    )


def test_ci_level_follows_alpha() -> None:
    thr = Thresholds(alpha=0.025, default_margin=1.0)
    d = _one(cmp(-0.5, alpha=0.025), thr)
    assert "95% CI" in d.tasks[0].reason


def test_no_op_when_effective_configs_equal(thresholds: Thresholds) -> None:
    same = {"model": "m", "compilation_config": {"level": 0}}
    results = [("docparse", "fields", cmp(-10.0, p_loss=0.0)), ("coding", "humaneval", cmp(-1.0))]
    same_reordered = {"compilation_config": {"level": 0}, "model": "m"}
    d = decide(results, thresholds.policy(None), baseline_effective=same, candidate_effective=same_reordered)
    assert d.verdict is Verdict.NO_OP
    assert len(d.reasons) == 1
    assert "candidate's effective engine config equals the baseline's" in d.reasons[0]
    assert [t.verdict for t in d.tasks] == [Verdict.BLOCK, Verdict.PASS]  # still evaluated


def test_nested_difference_is_not_a_no_op(thresholds: Thresholds) -> None:
    d = decide([("s", "t", cmp(-1.0))], thresholds.policy(None),
               baseline_effective={"c": {"level": 0}}, candidate_effective={"c": {"level": 3}})
    assert d.verdict is Verdict.PASS


def test_empty_task_list_fails_closed(thresholds: Thresholds) -> None:
    with pytest.raises(ValueError, match="no evidence is never a pass"):
        _decide([], thresholds)


def test_duplicate_task_is_an_error(thresholds: Thresholds) -> None:
    with pytest.raises(ValueError, match="s/t appears more than once"):
        _decide([("s", "t", cmp(-1.0)), ("s", "t", cmp(-1.0))], thresholds)


def test_alpha_mismatch_is_an_error(thresholds: Thresholds) -> None:
    match = "alpha=0.1 but the threshold \\(default\\) requires alpha=0.05"
    with pytest.raises(ValueError, match=match):
        _one(cmp(-1.0, alpha=0.1), thresholds)


def test_nan_lower_bound_blocks(thresholds: Thresholds) -> None:
    d = _one(replace(cmp(-1.0), lower_bound=math.nan, ci_low=math.nan), thresholds)
    assert d.verdict is Verdict.BLOCK
    assert d.tasks[0].reason.startswith("lower bound is undefined (NaN)")


def test_decide_on_real_comparison(thresholds: Thresholds) -> None:
    base = np.array([1.0] * 30 + [0.0] * 10)
    cand = base.copy()
    cand[:6] = 0.0  # six regressions, no improvements: delta = -15 points
    c = paired_comparison(base, cand, alpha=0.05, rng=np.random.default_rng(0))
    d = _one(c, thresholds)
    assert c.delta == pytest.approx(-15.0)
    assert c.lower_bound < -3.0
    assert d.verdict is Verdict.BLOCK


# ---------------------------------------------------------------------------- effective_diff


def test_effective_diff_flattens_and_sorts() -> None:
    assert effective_diff(BASE_CFG, CAND_CFG) == {
        "compilation_config.level": (0, 3),
        "dtype": ("float32", "bfloat16"),
    }


def test_effective_diff_missing_keys() -> None:
    diff = effective_diff({"a": 1, "n": {"x": 1}}, {"a": 1, "b": None, "n": {}})
    assert diff == {"b": (MISSING, None), "n": ({"x": 1}, {})}
    assert repr(MISSING) == "<absent>"
    # A switch turned on from None is one row holding the whole mapping, not a row per sub-key.
    spec = {"method": "mtp", "num_speculative_tokens": 1}
    assert effective_diff({"speculative_config": None}, {"speculative_config": spec}) == {
        "speculative_config": (None, spec)}
    assert effective_diff({"s": {"k": 1, "m": "a"}}, {"s": {"k": 3, "m": "a"}}) == {"s.k": (1, 3)}


def test_effective_diff_equal_is_empty() -> None:
    assert effective_diff(BASE_CFG, dict(BASE_CFG)) == {}


# ------------------------------------------------------------------- power, INCONCLUSIVE, Holm, lossless

from evalgate.gate import OutputAgreement  # noqa: E402


def test_under_powered_task_is_inconclusive_never_a_silent_pass(thresholds: Thresholds) -> None:
    # LB above -margin, but MDE = 2.486 * 2 = 5.0 > 3: a truly equal candidate would often fail here.
    d = _one(cmp(-1.0, se_power=2.0), thresholds)
    t = d.tasks[0]
    assert (t.verdict, d.verdict) == (Verdict.INCONCLUSIVE, Verdict.BLOCK)  # default on_inconclusive: block
    need = math.ceil(40 * 2.0**2 * (1.6448536 + 0.8416212) ** 2 / 3.0**2)  # n * SE^2 * (z_a + z_p)^2 / m^2
    assert need == 110
    assert t.reason.startswith(f"under-powered: MDE 5.0 pts > margin 3.0 pts at n=40; needs about {need} items at "
                               "this run's discordance (7 of 40 items changed)")
    assert t.rule.startswith("power") and t.items_needed == need
    assert d.reasons[0].startswith("docparse/fields: INCONCLUSIVE, counted as BLOCK (on_inconclusive: block)")
    warn = replace(thresholds, on_inconclusive="warn")
    d = _one(cmp(-1.0, se_power=2.0), warn)
    assert d.verdict is Verdict.INCONCLUSIVE and d.reasons[0].startswith("docparse/fields: INCONCLUSIVE: ")


def test_unknown_power_is_inconclusive(thresholds: Thresholds) -> None:
    d = _one(cmp(-1.0, se_power=math.nan), thresholds)
    assert d.tasks[0].verdict is Verdict.INCONCLUSIVE and math.isnan(d.tasks[0].mde)


def test_under_powered_but_loss_shown_blocks(thresholds: Thresholds) -> None:
    d = _one(cmp(-40.0, delta=-25.0, high=-10.0, se_power=10.0, p_loss=0.001), thresholds)
    assert d.tasks[0].verdict is Verdict.BLOCK and d.tasks[0].rule.startswith("loss shown")


def test_precedence_no_op_block_inconclusive_pass(thresholds: Thresholds) -> None:
    warn = replace(thresholds, on_inconclusive="warn")
    block, unsure, ok = cmp(-9.0, p_loss=0.0), cmp(-1.0, se_power=5.0), cmp(-1.0)
    three = [("a", "b1", block), ("a", "i1", unsure), ("a", "p1", ok)]
    assert _decide(three, warn).verdict is Verdict.BLOCK
    assert _decide(three[1:], warn).verdict is Verdict.INCONCLUSIVE
    assert _decide(three[2:], warn).verdict is Verdict.PASS
    same = decide(three, warn.policy(None), baseline_effective=BASE_CFG, candidate_effective=dict(BASE_CFG))
    assert same.verdict is Verdict.NO_OP


def test_holm_more_tasks_do_not_mean_more_false_blocks(thresholds: Thresholds) -> None:
    # Each task: LB below -margin and a one-sided loss p of 0.03. Alone, the loss is significant at 0.05;
    # among three equally weak tasks Holm needs p <= 0.05/3 first, so none is blocked on this evidence.
    weak = cmp(-3.5, p_loss=0.03)
    assert _one(weak, thresholds).tasks[0].verdict is Verdict.BLOCK
    d = _decide([("a", "t1", weak), ("a", "t2", weak), ("a", "t3", weak)], thresholds)
    assert [t.verdict for t in d.tasks] == [Verdict.INCONCLUSIVE] * 3
    assert [t.loss_alpha for t in d.tasks] == pytest.approx([0.05 / 3] * 3)
    # A strong loss on one task is still blocked, and then the others are tested at 0.05/2.
    d = _decide([("a", "t1", cmp(-3.5, p_loss=0.001)), ("a", "t2", cmp(-3.5, p_loss=0.02)),
                 ("a", "t3", cmp(-3.5, p_loss=0.2))], thresholds)
    assert [t.verdict for t in d.tasks] == [Verdict.BLOCK, Verdict.BLOCK, Verdict.INCONCLUSIVE]


def test_lossless_config_blocks_when_outputs_differ(thresholds: Thresholds) -> None:
    agree = {"fields": OutputAgreement(identical=36, n=40, differing=(3, 8, 12, 30))}
    d = decide([("docparse", "fields", cmp(-1.0))], thresholds.policy(None), baseline_effective=BASE_CFG,
               candidate_effective=CAND_CFG, expect="lossless", outputs=agree)
    t = d.tasks[0]
    assert t.verdict is Verdict.BLOCK and t.rule.startswith("lossless")
    assert "outputs differ on 4 of 40 items (90.0% agree < 95.0% required); differing items: 3, 8, 12, 30" in t.reason
    ok = {"fields": OutputAgreement(identical=39, n=40, differing=(7,))}
    d = decide([("docparse", "fields", cmp(-1.0))], thresholds.policy(None), baseline_effective=BASE_CFG,
               candidate_effective=CAND_CFG, expect="lossless", outputs=ok)
    assert d.tasks[0].verdict is Verdict.PASS and d.tasks[0].lossless == ok["fields"]
    with pytest.raises(ValueError, match="declared lossless but no output agreement"):
        decide([("docparse", "fields", cmp(-1.0))], thresholds.policy(None), baseline_effective=BASE_CFG,
               candidate_effective=CAND_CFG, expect="lossless")


def test_lossless_counts_near_tie_flips_as_agreeing(thresholds: Thresholds) -> None:
    # 36 identical + 2 flips at a near-tie = 38/40 = 95 % agree: exactly the required share, so not blocked.
    agree = OutputAgreement(identical=36, n=40, differing=(3, 8, 12, 30), tie_flips=(8, 30), kl_mean=1e-6)
    assert agree.agreeing == 38 and agree.share == pytest.approx(0.95)
    d = decide([("docparse", "fields", cmp(-1.0))], thresholds.policy(None), baseline_effective=BASE_CFG,
               candidate_effective=CAND_CFG, expect="lossless", outputs={"fields": agree})
    assert d.tasks[0].verdict is Verdict.PASS
    # One tie-flip fewer: 37/40 = 92.5 % < 95 %; only the two real divergences are listed as differing.
    fewer = replace(agree, tie_flips=(8,))
    d = decide([("docparse", "fields", cmp(-1.0))], thresholds.policy(None), baseline_effective=BASE_CFG,
               candidate_effective=CAND_CFG, expect="lossless", outputs={"fields": fewer})
    t = d.tasks[0]
    assert t.verdict is Verdict.BLOCK and t.rule == "lossless: agreeing greedy outputs < min_identical_share"
    assert "differ on 3 of 40 items, 1 more differ only after a near-tie (92.5% agree" in t.reason
    assert "differing items: 3, 12, 30 " in t.reason


def test_lossless_blocks_on_decode_kl_even_with_identical_outputs(thresholds: Thresholds) -> None:
    # Every output identical, but the next-token distributions moved by more than max_kl_mean (0.001 nats).
    moved = OutputAgreement(identical=40, n=40, kl_mean=0.02)
    d = decide([("docparse", "fields", cmp(0.0))], thresholds.policy(None), baseline_effective=BASE_CFG,
               candidate_effective=CAND_CFG, expect="lossless", outputs={"fields": moved})
    t = d.tasks[0]
    assert t.verdict is Verdict.BLOCK and t.rule == "lossless: decode-time KL > max_kl_mean"
    assert "KL 0.02 nats/token > 0.001 allowed" in t.reason
    # At the tolerance exactly it passes; unmeasured KL (None) gates identity only.
    for kl in (0.001, None):
        d = decide([("docparse", "fields", cmp(0.0))], thresholds.policy(None), baseline_effective=BASE_CFG,
                   candidate_effective=CAND_CFG, expect="lossless",
                   outputs={"fields": OutputAgreement(identical=40, n=40, kl_mean=kl)})
        assert d.tasks[0].verdict is Verdict.PASS, kl


def test_config_level_thresholds_apply(thresholds: Thresholds) -> None:
    thr = replace(thresholds, configs={"fp16-state": LevelOverride(margin=4.0, min_identical_share=0.5)})
    args = dict(baseline_effective=BASE_CFG, candidate_effective=CAND_CFG)
    d = decide([("docparse", "fields", cmp(-3.5, p_loss=0.0))], thr.policy("fp16-state"), **args)
    assert d.tasks[0].verdict is Verdict.PASS and d.tasks[0].threshold.source == "configs.fp16-state"
    d = decide([("coding", "humaneval", cmp(-4.5, p_loss=0.0))], thr.policy("fp16-state"), **args)
    assert d.tasks[0].threshold.margin == 5.0  # the suite's margin beats the config's flat margin


def test_real_tiny_run_is_inconclusive() -> None:
    # Three items, identical scores (the stored bf16 runs of the embedded model look like this).
    thr = Thresholds(alpha=0.05, default_margin=3.0, on_inconclusive="warn")
    c = paired_comparison(np.array([0.75, 2 / 3, 1.0]), np.array([0.75, 2 / 3, 1.0]), alpha=0.05,
                          rng=np.random.default_rng(0), interval="auto")
    d = _decide([("docparse", "docparse_fields", c)], thr)
    assert d.verdict is Verdict.INCONCLUSIVE
    assert d.tasks[0].mde == pytest.approx((1.6448536 + 0.8416212) * 100 / 3, rel=1e-6)


def test_escalate_blocks_on_evidence_failures_but_not_no_op() -> None:
    from dataclasses import replace

    from evalgate.gate import Decision, Verdict, escalate

    d = Decision(Verdict.PASS, ("t: PASS",), ())
    assert escalate(d, {"t": []}) is d
    e = escalate(d, {"t": ["NaN log-probs"]})
    assert e.verdict is Verdict.BLOCK and e.reasons == ("t: NaN log-probs", "t: PASS")
    no_op = replace(d, verdict=Verdict.NO_OP)
    assert escalate(no_op, {"t": ["x"]}).verdict is Verdict.NO_OP


def test_spec_decode_floors() -> None:
    from evalgate.gate import spec_decode_floor_failures as floors

    kw = dict(min_acceptance_rate=0.5, min_mean_acceptance_length=1.7, speculative=True)
    # mtp3 on the hybrid: 35.1 % of draft tokens accepted, mean acceptance length 2.05: the rate floor is missed.
    assert floors(0.351, 2.05, **kw) == ["acceptance rate 35.1% < floor 50.0%"]
    assert floors(0.6, 1.6, **kw) == ["mean acceptance length 1.60 < floor 1.70"]
    assert floors(0.5, 1.7, **kw) == []  # at the floor passes
    # Fail closed: speculative decoding ran, a floor is set, and no counters exist.
    assert floors(None, None, **kw) == [
        "speculative decoding ran but recorded no drafts, so its acceptance floor cannot be checked"]
    assert floors(float("nan"), float("nan"), **kw)[0].startswith("speculative decoding ran but recorded no drafts")
    # No floor, or no speculative decoding: nothing to check.
    assert floors(0.1, 1.1, min_acceptance_rate=None, min_mean_acceptance_length=None, speculative=True) == []
    assert floors(None, None, min_acceptance_rate=0.5, min_mean_acceptance_length=None, speculative=False) == []


def test_a_sampling_or_env_only_change_is_never_a_no_op(thresholds: Thresholds) -> None:
    from evalgate.evaluate.runner import with_requested_runtime
    from evalgate.inputs.config import EngineConfig, Sampling

    engine = {"engine_args": {"dtype": "float32"}, "env": {"torch_num_threads": 2}, "model": {"architectures": []}}

    def cfg(sampling: Sampling, env: dict[str, str]) -> EngineConfig:
        return EngineConfig(name="c", path=None, model="m", engine_args={}, env=env, sampling=sampling)

    base = with_requested_runtime(engine, cfg(Sampling(), {}))
    hot = with_requested_runtime(engine, cfg(Sampling(temperature=0.8), {}))
    env = with_requested_runtime(engine, cfg(Sampling(), {"VLLM_CPU_KVCACHE_SPACE": "2"}))
    assert base["sampling"]["temperature"] == 0.0 and hot["sampling"]["temperature"] == 0.8
    assert effective_diff(base, hot) == {"sampling.temperature": (0.0, 0.8)}
    assert effective_diff(base, env) == {"env.requested": ({}, {"VLLM_CPU_KVCACHE_SPACE": "2"})}
    for cand in (hot, env):
        d = decide([("s", "t", cmp(0.0))], thresholds.policy(None), baseline_effective=base, candidate_effective=cand)
        assert d.verdict is not Verdict.NO_OP
    same = decide([("s", "t", cmp(0.0))], thresholds.policy(None), baseline_effective=base,
                  candidate_effective=with_requested_runtime(engine, cfg(Sampling(), {})))
    assert same.verdict is Verdict.NO_OP


def test_a_task_both_sides_fail_entirely_says_it_cannot_show_a_loss(thresholds: Thresholds) -> None:
    zero = paired_comparison(np.zeros(200), np.zeros(200), alpha=0.05, rng=np.random.default_rng(0), interval="auto")
    d = _one(zero, thresholds)
    assert d.tasks[0].verdict is Verdict.PASS  # statistically non-inferior ...
    assert d.tasks[0].reason.endswith("; note: both sides score 0 on every item, so this task cannot show a loss")
    some = paired_comparison(np.r_[np.ones(20), np.zeros(180)], np.r_[np.ones(20), np.zeros(180)], alpha=0.05,
                             rng=np.random.default_rng(0), interval="auto")
    assert "cannot show a loss" not in _one(some, thresholds).tasks[0].reason


@pytest.mark.parametrize(("verdicts", "overall"), [
    ([Verdict.PASS], Verdict.PASS),
    ([Verdict.PASS, Verdict.INCONCLUSIVE], Verdict.INCONCLUSIVE),
    ([Verdict.INCONCLUSIVE, Verdict.PASS, Verdict.BLOCK], Verdict.BLOCK),
    ([Verdict.BLOCK, Verdict.INCONCLUSIVE], Verdict.BLOCK),
])
def test_overall_of_is_block_over_inconclusive_over_pass(verdicts: list[Verdict], overall: Verdict) -> None:
    assert overall_of(verdicts) is overall


def test_overall_of_no_verdicts_fails_closed() -> None:
    with pytest.raises(ValueError, match="never a pass"):
        overall_of([])


@pytest.mark.parametrize(("lb", "margin", "mde", "shown"), [
    (-2.0, 2.0, 2.0, True),       # both at the boundary: rule 3 holds (>=, <=)
    (-2.0001, 2.0, 1.0, False),   # lower bound below -margin
    (0.0, 2.0, 2.0001, False),    # under-powered
    (math.nan, 2.0, 1.0, False),  # undefined lower bound (rule 2)
    (0.0, 2.0, math.nan, False),  # undefined MDE
    (0.0, 2.0, math.inf, False),
])
def test_shows_non_inferiority(lb: float, margin: float, mde: float, shown: bool) -> None:
    assert shows_non_inferiority(lb, margin, mde) is shown


def test_the_evidence_counts_changed_scores_in_words(thresholds: Thresholds) -> None:
    """One changed score reads "1 score changed", none "0 scores changed", several "7 scores changed"."""
    for improved, regressed, words in ((1, 0, "1 score changed"), (0, 0, "0 scores changed"),
                                       (3, 4, "7 scores changed")):
        d = _one(replace(cmp(-1.0), n_improved=improved, n_regressed=regressed), thresholds)
        assert f"n=40, {words}, MDE {MDE})" in d.tasks[0].reason
