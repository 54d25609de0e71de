"""Tests of evalgate.results.document.Recorded: a model with required fields, built whole by a stage and read in part
from a stored document (the run manifest embedded in verdict.json, the traffic profile in its speed block)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from evalgate.results.manifest import Manifest
from evalgate.speed.profile import TrafficProfile

WHOLE = {"created": "20260101T000000Z", "model": "m", "limit": None, "versions": {"vllm": "x"},
         "thresholds": "thresholds.yaml", "timings": {"compare": 0.5},
         "suites": [{"name": "s", "tasks": ["t"], "content_hash": "ab" * 32}],
         "baseline": {"name": "a", "path": "a.yaml"}, "candidate": {"name": "b", "path": "b.yaml"}}


def test_built_or_validated_whole_a_required_field_must_be_there() -> None:
    with pytest.raises(ValidationError) as err:
        Manifest.model_validate({k: v for k, v in WHOLE.items() if k != "created"})
    assert err.value.errors()[0]["loc"] == ("created",) and err.value.errors()[0]["msg"] == "Field required"
    with pytest.raises(ValidationError, match="output_len"):
        TrafficProfile(input_len=8, concurrency=(4,))


def test_read_from_a_document_a_missing_required_field_is_not_recorded_and_dumps_back_absent() -> None:
    part = {"speed_only": True, "baseline": {"path": "a.yaml"}, "suites": [{"name": "s"}]}
    m = Manifest.from_document(part)
    assert m.created == "" and m.timings == {} and m.candidate.name == "" and m.suites[0].content_hash == ""
    assert "created" not in m.model_fields_set and "name" not in m.baseline.model_fields_set
    assert m.as_json() == part and Manifest.from_document({}).as_json() == {}
    p = TrafficProfile.from_document({"input_len": 8})
    assert (p.output_len, p.concurrency, p.repeats) == (0, (), 3) and p.as_dict() == {"input_len": 8}
    # what the document holds is still checked
    with pytest.raises(ValidationError) as err:
        Manifest.from_document({"suites": [{"content_hash": None}]})
    assert err.value.errors()[0]["loc"] == ("suites", 0, "content_hash")


def test_a_document_dumps_back_in_its_own_key_order_and_equality_ignores_it() -> None:
    shuffled = dict(reversed(list(WHOLE.items())))
    shuffled["baseline"] = {"path": "a.yaml", "name": "a"}
    m = Manifest.from_document(shuffled)
    assert json.dumps(m.as_json()) == json.dumps(shuffled)
    assert m == Manifest.model_validate(WHOLE) and list(Manifest.model_validate(WHOLE).as_json()) == list(WHOLE)


def test_a_profile_built_in_code_records_every_field_as_the_dataclass_wrote_it() -> None:
    p = TrafficProfile(input_len=8, output_len=8, concurrency=(2, 4), repeats=3)
    assert p.as_dict() == {"input_len": 8, "output_len": 8, "concurrency": [2, 4], "num_prompts": None,
                           "repeats": 3, "prompts": "random", "mode": "offline", "level": 0.95, "power": 0.8}
    assert p.replace(precision=0.02).as_dict()["precision"] == 0.02 and p.replace(goodput=None).as_dict() == p.as_dict()
    assert p.concurrency == (2, 4) and TrafficProfile.from_document(p.as_dict()) == p and hash(p) == hash(p.replace())
