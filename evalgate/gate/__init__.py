"""The gate: every rule that decides a verdict, and nothing else (pure; no I/O, no logging).

* :mod:`evalgate.gate.accuracy`: per-task non-inferiority with power, Holm's loss test, the lossless rules
  (identical share, decode-time KL, near-tie flips) and the overall verdict (``decide``; rules in its docstring);
* :mod:`evalgate.gate.overrides`: what BLOCKs whatever accuracy says: output health (NaN/inf log-probs,
  degenerate/empty/truncated shifts at a Bonferroni level), speculative-decoding floors, speed floors, latency
  objectives (``overrule``, ``escalate``);
* :mod:`evalgate.gate.replay`: the replay gate on recorded requests (agreeing share by Clopper-Pearson bounds, the
  lossless KL rule, valid-JSON non-inferiority) and how its verdict joins the run's (``combine``);
* :mod:`evalgate.gate.diff`: which engine-config keys differ (the NO-OP rule's input);
* :mod:`evalgate.gate.judgement`: the two in order, one call (``judge_run``) and one final ``Decision``;
* :mod:`evalgate.gate.recommend`: the ablation's closing recommendation across variants.

``compare.evidence`` only measures, the verdict builder (``evalgate.report.document``) only assembles, renderers
only render.
"""

from evalgate.gate.accuracy import (
                                    RULE_LOSS,
                                    RULE_LOSSLESS,
                                    RULE_LOSSLESS_KL,
                                    RULE_NON_INFERIOR,
                                    RULE_UNDECIDED,
                                    RULE_UNDEFINED,
                                    RULE_UNDERPOWERED,
                                    Decision,
                                    OutputAgreement,
                                    TaskDecision,
                                    Verdict,
                                    decide,
                                    is_near_tie,
                                    overall_of,
                                    shows_non_inferiority,
)
from evalgate.gate.diff import MISSING, effective_diff
from evalgate.gate.judgement import Judgement, judge, judge_run, task_evidence
from evalgate.gate.overrides import (
                                    escalate,
                                    health_alpha,
                                    health_failures,
                                    overrule,
                                    slo_failures,
                                    spec_decode_floor_failures,
                                    speed_floor_failures,
)

__all__ = ["MISSING", "RULE_LOSS", "RULE_LOSSLESS", "RULE_LOSSLESS_KL", "RULE_NON_INFERIOR", "RULE_UNDECIDED",
           "RULE_UNDEFINED", "RULE_UNDERPOWERED", "Decision", "Judgement", "OutputAgreement", "TaskDecision", "Verdict",
           "decide", "effective_diff", "escalate", "health_alpha", "health_failures", "is_near_tie", "judge",
           "judge_run", "overall_of", "overrule", "shows_non_inferiority", "slo_failures", "spec_decode_floor_failures",
           "speed_floor_failures", "task_evidence"]
