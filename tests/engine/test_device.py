"""The hardware identity (``evalgate.engine.device``): what is read, what is stored and shown, and the refusals it
drives — a result is never reused, paired or compared across GPU models or CPU instruction sets (no engine)."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from evalgate.cli import main
from evalgate.engine import device
from evalgate.errors import ConfigError, ExitCode
from evalgate.results.store import write_json_atomic
from runfixtures import DEVICE, task, write_run

SMI_QUERY = "--query-gpu=index,uuid,name,compute_cap --format=csv,noheader"


def _fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: str) -> Path:
    """A stand-in ``nvidia-smi`` on PATH that answers only evalgate's query with ``rows``."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir(exist_ok=True)
    smi.write_text(f'#!/bin/sh\n[ "$*" = "{SMI_QUERY}" ] || exit 7\nprintf \'{rows}\'\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:{os.environ['PATH']}")
    device.visible_gpus.cache_clear()
    return smi


def _gpu_host(monkeypatch: pytest.MonkeyPatch, present: bool = True) -> None:
    monkeypatch.setattr(glob, "glob", lambda pattern: ["/dev/nvidia0"] if present and pattern.startswith("/dev/nvidia")
                        else [])


TWO_MODELS = "0, GPU-aaa111, NVIDIA H200, 9.0\\n1, GPU-bbb222, NVIDIA B200, 10.0\\n2, GPU-ccc333, NVIDIA H200, [N/A]\\n"


def test_visible_gpus_are_read_with_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Indices, UUID prefixes, MIG UUIDs (every GPU) and ``-1`` pick the right rows; an unreadable row is skipped; a
    failing ``nvidia-smi`` reads None."""
    smi = _fake_smi(tmp_path, monkeypatch, TWO_MODELS)
    read = device.visible_gpus.__wrapped__
    h200 = device.Gpu("0", "GPU-aaa111", "NVIDIA H200", (9, 0))
    b200 = device.Gpu("1", "GPU-bbb222", "NVIDIA B200", (10, 0))
    assert read("") == (h200, b200) and read("1") == (b200,) and read(" 0 ") == (h200,)
    assert read("GPU-bbb") == (b200,) and read("GPU-aaa111,1") == (h200, b200) and read("MIG-1-2") == (h200, b200)
    assert read("-1") is None and read("7") is None and read("2") is None
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert read("") is None


def test_identity_names_the_visible_gpus_or_the_cpu_and_its_isa(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, monkeypatch, TWO_MODELS)
    _gpu_host(monkeypatch)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert device.device_identity({}) == {"platform": "cuda", "gpus": ["NVIDIA H200 (sm_90)", "NVIDIA B200 (sm_100)"]}
    assert device.device_identity({"CUDA_VISIBLE_DEVICES": "1"}) == {"platform": "cuda", "gpus": ["NVIDIA B200 (sm_100)"]}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # the process's value when the config sets none
    assert device.device_identity({}) == {"platform": "cuda", "gpus": ["NVIDIA H200 (sm_90)"]}
    assert device.describe({"platform": "cuda", "gpus": ["NVIDIA H200 (sm_90)"] * 2}) == "2 × NVIDIA H200 (sm_90)"
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9B14\nflags\t\t: fpu sse4_2 avx2 fma avx512f "
                       "avx512_bf16 amx_tile lm\nprocessor\t: 1\nmodel name\t: ignored\n")
    _gpu_host(monkeypatch, present=False)
    cpu = device.device_identity({"CUDA_VISIBLE_DEVICES": "0"}, cpuinfo=str(cpuinfo))
    assert cpu == {"platform": "cpu", "cpu": "AMD EPYC 9B14",
                   "isa": ["amx_tile", "avx2", "avx512_bf16", "avx512f", "fma", "sse4_2"]}
    assert device.describe(cpu) == "AMD EPYC 9B14 (CPU; amx_tile, avx512_bf16, avx512f)"
    assert device.describe(None) == "unrecorded"
    assert device.cpu_info(str(tmp_path / "absent"))["isa"] == []


def _cfg(name: str, visible: str | None) -> SimpleNamespace:
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    return SimpleNamespace(name=name, path=f"configs/{name}.yaml", env=env)


def test_sides_on_different_gpu_models_are_refused_before_any_engine(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_smi(tmp_path, monkeypatch, TWO_MODELS)
    _gpu_host(monkeypatch)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(ConfigError) as ei:
        device.check_same_hardware(_cfg("baseline", "0"), _cfg("fp16-state", "1"))
    assert ei.value.exit_code == ExitCode.USAGE and ei.value.field == "env.CUDA_VISIBLE_DEVICES"
    assert str(ei.value).startswith("configs/fp16-state.yaml: ")
    assert "NVIDIA H200 (sm_90)" in str(ei.value) and "NVIDIA B200 (sm_100)" in str(ei.value)
    device.check_same_hardware(_cfg("baseline", "0"), _cfg("fp16-state", "0"))
    _fake_smi(tmp_path, monkeypatch, "0, GPU-a, NVIDIA H200, 9.0\\n1, GPU-b, NVIDIA H200, 9.0\\n")
    device.check_same_hardware(_cfg("baseline", "0"), _cfg("fp16-state", "1"))  # same model, other index: fine
    with pytest.raises(ConfigError):  # one side hidden from every GPU: the CPU against a GPU
        device.check_same_hardware(_cfg("baseline", "0"), _cfg("fp16-state", "-1"))


def test_the_hardware_is_part_of_every_store_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A side stored on one machine is not served on another: the journal and every suite key change with the
    hardware identity, and the plan carries the identity into the run (and so the manifest)."""
    from evalgate.commands.pipeline import load_suites
    from evalgate.evaluate import runner
    from evalgate.inputs.config import load_config
    from evalgate.results.store import ResultStore

    root = Path(__file__).resolve().parents[2]
    cfg = load_config("baseline", root / "configs", check_engine_args=False)
    suites = load_suites(root / "suites", ["finance"])
    monkeypatch.setattr(runner, "resolve_model", lambda model: str(tmp_path))
    monkeypatch.setattr(runner, "model_fingerprint", lambda path: "fp")
    plans = {}
    for name, ident in (("a", DEVICE), ("b", {**DEVICE, "isa": ["avx2", "avx512_bf16"]}), ("a2", DEVICE)):
        monkeypatch.setattr(runner, "device_identity", lambda env, i=ident: dict(i))
        plans[name] = runner._plan(cfg, suites, limit=3, store=ResultStore(tmp_path / "store"), reference=None,
                                   logprob_items=0)
    assert plans["a"].keys == plans["a2"].keys and plans["a"].journal == plans["a2"].journal
    assert set(plans["a"].keys.values()).isdisjoint(plans["b"].keys.values())
    assert plans["a"].journal != plans["b"].journal
    assert plans["b"].device == {**DEVICE, "isa": ["avx2", "avx512_bf16"]}


def _runs(tmp_path: Path) -> tuple[Path, Path]:
    a = write_run(tmp_path / "a", "bf16", "bfloat16", {"t": task("t", "s", ["1"] * 4, [1.0] * 4)})
    b = write_run(tmp_path / "b", "fp16", "float16", {"t": task("t", "s", ["1"] * 4, [1.0] * 4)})
    return a, b


@pytest.mark.parametrize("device_b, words", [
    ({"platform": "cuda", "gpus": ["NVIDIA H200 (sm_90)"]}, "ran on Test CPU (CPU; avx2) and"),
    (None, "candidate.device: the hardware the run used is not recorded"),
    ("H200", "malformed run manifest: candidate.device: expected a mapping (a JSON object), got a string (\"H200\")"),
    ({"platform": "cuda", "gpus": ["unknown"]}, "candidate.device: the hardware the run used is not recorded"),
])
def test_compare_refuses_runs_on_other_or_unrecorded_hardware(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              device_b: object, words: str) -> None:
    """``evalgate compare`` fails closed (exit 3, one line, no verdict) when the two candidates ran on different
    hardware or a run does not say what it ran on; the same recorded hardware compares."""
    a, b = _runs(tmp_path)
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "same")]) in (0, 4, 5)
    m = json.loads((b / "manifest.json").read_text())
    if device_b is None:
        del m["candidate"]["device"]
    else:
        m["candidate"]["device"] = device_b
    write_json_atomic(b / "manifest.json", m)
    capsys.readouterr()
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(b), "--out", str(out)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert not (out / "verdict.json").exists()


def test_the_report_shows_each_sides_hardware_escaped(tmp_path: Path) -> None:
    """The report's manifest table names each side's hardware; a hostile CPU name from a manifest is escaped; a run
    made before hardware was recorded reads "unrecorded"."""
    from evalgate.report.render import render_html
    from runfixtures import document

    n = 4
    base = {"t": task("t", "s", ["1"] * n, [1.0] * n)}
    doc = document(base, base)
    doc["manifest"]["candidate"]["device"] = {"platform": "cpu", "cpu": "<script>x</script>", "isa": ["avx2"]}
    html = render_html(doc)
    assert "&lt;script&gt;x&lt;/script&gt; (CPU; avx2)" in html and "<script>x" not in html
    assert "hardware (baseline / candidate)</td><td class=\"l\">unrecorded<br>" in html
