"""Engine configurations: YAML files under ``configs/`` with single inheritance (``extends``).

A config names the model, the vLLM engine args (spelled exactly as ``vllm.EngineArgs`` fields), the
environment variables set for the engine process, and the sampling parameters::

    extends: baseline          # parent config: resolved next to this file first, then in configs/
    baseline: baseline         # what to compare against (default: the parent named by extends)
    description: FP16 SSM state
    expect: lossy              # or "lossless": the switch should not change greedy outputs
    model: embedded:gemma-3-270m
    engine_args: {dtype: float32, enforce_eager: true}
    env: {OMP_NUM_THREADS: "1"}
    sampling: {temperature: 0.0, max_tokens: 256, seed: 0}

One file is a :class:`ConfigLayer` (schema version :data:`~evalgate.inputs.schema.SCHEMA_VERSION`; its keys, defaults and
meanings are the model's fields, from which the docs' key table is generated: docs/reference/config.md). The child wins key by key
inside ``engine_args``, ``env`` and ``sampling``; a ``null`` value removes the parent's key (vLLM's default
applies); the merged ``sampling`` is a :class:`Sampling`. Loading is pure: cheap checks first, then the engine-arg
names against vLLM's ``EngineArgs`` (read from its source, not imported), so a malformed config fails in seconds.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from evalgate.engine.argnames import both_names_set, missing_engine_api, missing_spec_decode_evidence, rename_hint
from evalgate.errors import ConfigError
from evalgate.inputs.chat import Chat, ChatSpec, protocol, resolve_chat
from evalgate.inputs.project import builtin_dir
from evalgate.inputs.schema import SCHEMA_VERSION, Schema, choice, key_rows, problem, rule, validate
from evalgate.inputs.yamlio import Wording, read_mapping
from evalgate.models.embedded import EMBEDDED_ALIASES, SHAPE_ALIASES

CONFIGS_DIR = builtin_dir() / "configs"  # the shipped configs; a project's own come from project.layout()
WORDING = Wording("config", syntax="YAML syntax error: {at}{problem}", at="line {line}: ",
                  not_utf8="not UTF-8 (byte {offset})")
# Set by evalgate itself (the model comes from the top-level ``model`` key).
_RESERVED_ENGINE_ARGS = ("model", "tokenizer")
_SECTIONS = ("engine_args", "env", "sampling", "chat")  # merged key by key over the parent's


class Sampling(Schema):
    """``sampling``: the sampling parameters of every generation. Greedy (temperature 0) is the gate's default."""

    temperature: Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False),
                           rule("must be a number", greater_than_equal="must be >= 0")] = 0.0
    """Sampling temperature, >= 0 (0: greedy)."""
    top_p: Annotated[float, Field(strict=True, gt=0, le=1, allow_inf_nan=False),
                     rule("must be a number", greater_than="must be in (0, 1]", less_than_equal="must be in (0, 1]")
                     ] = 1.0
    """Nucleus sampling mass, in (0, 1]."""
    max_tokens: Annotated[int, Field(strict=True, ge=1), rule("must be an integer", greater_than_equal="must be >= 1")
                          ] = 256
    """Output tokens per generation, >= 1: a cap on each task's own ``max_gen_toks``."""
    seed: Annotated[int, Field(strict=True), rule("must be an integer")] = 0
    """Sampling seed."""


def _names(kind: str, check: Any) -> BeforeValidator:
    """A mapping whose keys must pass ``check`` (the message names ``<section>.<key>``)."""

    def validate_keys(value: Any) -> Any:
        if isinstance(value, dict):
            for key in value:
                if not check(key):
                    raise problem(kind, key=str(key))
        return value

    return BeforeValidator(validate_keys)


def _env_values(value: Any) -> Any:
    """Environment values as the engine process gets them: strings (``true`` -> ``"true"``); null kept (it removes
    the parent's variable)."""
    if not isinstance(value, dict):
        return value
    out: dict[str, str | None] = {}
    for k, v in value.items():
        if isinstance(v, (dict, list)):
            raise problem(f"must be a string or number, got {type(v).__name__}", key=str(k))
        out[k] = None if v is None else str(v).lower() if isinstance(v, bool) else str(v)
        if out[k] is not None and "\0" in out[k]:  # the OS cannot pass it: the engine would fail to start
            raise problem("must not contain a NUL byte (an environment value cannot hold one)", key=str(k))
    return out


ConfigName = Annotated[str, Field(strict=True, pattern=r"\S"), rule("must be a config name")]


def _suite_list(value: Any) -> Any:
    """``suites``: a non-empty list of suite names, none twice."""
    if not isinstance(value, list) or not value:
        raise problem("must be a non-empty list of suite names, e.g. [docpages, docparse]")
    for name in value:
        if not isinstance(name, str) or not name.strip():
            raise problem(f"must list suite names (folders of the project's suites/), got {name!r} in the list")
    twice = sorted({n for n in value if value.count(n) > 1})
    if twice:
        raise problem(f"names suite {twice[0]!r} more than once")
    return value


class ConfigLayer(Schema):
    """One config file as written (before ``extends`` is resolved). Schema version 1."""

    version: Annotated[int, Field(strict=True, ge=SCHEMA_VERSION, le=SCHEMA_VERSION),
                       rule(f"must be {SCHEMA_VERSION} (the only config schema version)")] = SCHEMA_VERSION
    """Schema version of the file."""
    extends: ConfigName | None = None
    """Parent config: a name resolved next to this file first, then in configs/, or a path. Unset: a root config."""
    baseline: ConfigName | None = None
    """The config this one is gated against; unset: the parent named by ``extends``."""
    description: Annotated[str, BeforeValidator(lambda v: "" if v is None else v), Field(strict=True),
                           rule("must be a string")] = ""
    """Free text shown in reports."""
    expect: choice("lossy", "lossless") = "lossy"  # type: ignore[valid-type]
    """lossless: the switch should not change greedy outputs (checked against ``lossless`` in thresholds.yaml)."""
    model: Annotated[str, Field(strict=True, pattern=r"\S"), rule("required: a model name or path (string)")
                     ] | None = None
    """embedded:nemotron-h-tiny, embedded:gemma-3-270m, embedded:qwen3-next-tiny, a local checkpoint path or a hub
    name. Required in the config or one of its parents."""
    engine_args: Annotated[dict[str, Any], _names("engine arg names are identifiers like 'dtype'",
                                                  lambda k: isinstance(k, str) and k.isidentifier())] | None = None
    """Keyword arguments of ``vllm.EngineArgs``, spelled as vLLM spells them (checked against the installed vLLM);
    a null value removes the parent's."""
    env: Annotated[dict[str, str | None], BeforeValidator(_env_values),
                   _names("invalid environment variable name",
                          lambda k: isinstance(k, str) and k and "=" not in k and "\0" not in k)
                   ] | None = None
    """Environment variables of the engine process (strings or numbers); a null value removes the parent's."""
    sampling: dict[str, Any] | None = None
    """Sampling parameters (keys below), merged key by key over the parent's; a null value removes the parent's."""
    placement: choice("auto", "together", "alternate") = "auto"  # type: ignore[valid-type]
    """Where the two sides' engines live on one GPU while both are up (the speed phase): together (both resident),
    alternate (both started with vLLM's sleep mode, one awake at a time; CUDA only) or auto (alternate when both
    sides' gpu_memory_utilization, vLLM's 0.9 when unset, sum above 0.95 or their weights exceed the GPU, else
    together; together on CPU). The candidate's setting applies; ``--placement`` overrides it. Not part of the
    config's identity: it does not change outputs."""
    chat: dict[str, Any] | None = None
    """Chat protocol (keys below; unset: raw completion prompts), merged key by key over the parent's; a null value
    removes the parent's. A baseline and its candidate must use the same protocol."""
    suites: Annotated[list[str], BeforeValidator(_suite_list)] | None = None
    """The suites this config is gated on when the command line names none (`--suites` wins): names of the
    project's suite folders. Unset: every text suite; an image suite (a task with `doc_to_image`) runs only when
    named here or by `--suites`, and only on a model vLLM takes images for (else exit 2). The candidate's (or, for
    `score`, the config's own) setting applies; not part of the config's identity."""


@dataclass(frozen=True)
class EngineConfig:
    """A fully resolved config (after ``extends``); the keys' meanings are :class:`ConfigLayer`'s.

    Attributes:
        name: config name (file stem, or relative path under configs/ such as ``dense/bf16``).
        path: the YAML file it came from.
        model: ``embedded:gemma-3-270m``, a local checkpoint path or a hub name.
        engine_args: keyword arguments for ``vllm.LLM`` / ``EngineArgs`` (requested, not effective).
        env: environment variables for the engine process (strings).
        sampling: sampling parameters.
        baseline: name or path of the config to compare against, or None for a root config.
        expect: "lossy" or "lossless".
        description: free text.
        chain: the files of the inheritance chain, child first.
        placement: ``auto``, ``together`` or ``alternate`` (``evalgate.evaluate.placement``); not in ``identity``.
        placement_from: the file that set it (None: the default).
        chat: the resolved ``chat`` section (``evalgate.inputs.chat.ChatSpec``; completion prompts by default).
        suites: the suites gated when ``--suites`` names none (None: every text suite); not in ``identity``.
        suites_from: the file of the chain that set ``suites`` (None: unset).
    """

    name: str
    path: Path
    model: str
    engine_args: dict[str, Any]
    env: dict[str, str]
    sampling: Sampling
    baseline: str | None = None
    expect: str = ConfigLayer.model_fields["expect"].default
    description: str = ConfigLayer.model_fields["description"].default
    chain: tuple[Path, ...] = field(default_factory=tuple)
    placement: str = ConfigLayer.model_fields["placement"].default
    placement_from: Path | None = None  # the file of the chain that set ``placement`` (None: the default)
    chat: ChatSpec = field(default_factory=lambda: ChatSpec(Chat()))
    suites: tuple[str, ...] | None = None
    suites_from: Path | None = None

    def identity(self) -> dict[str, Any]:
        """The requested configuration as plain JSON-able data (used in store keys and reports); with a ``chat``
        section (a template or ``think_end``), its ``chat.protocol`` under ``chat`` (completion configs keep the
        identity they had)."""
        out = {
            "model": self.model,
            "engine_args": self.engine_args,
            "env": self.env,
            "sampling": vars(self.sampling).copy(),
        }
        if self.chat.is_chat or self.chat.chat.think_end is not None:
            out["chat"] = protocol(self.chat)
        return out


def load_config(ref: str | Path, configs_dir: Path = CONFIGS_DIR, *, check_engine_args: bool = True) -> EngineConfig:
    """Load a config by name (``fp16-state``, ``dense/bf16``) or by path to a YAML file.

    Args:
        ref: a name resolved in ``configs_dir`` (``.yaml`` optional) or a path to a file.
        configs_dir: the directory of named configs.
        check_engine_args: validate engine-arg names against ``vllm.EngineArgs`` (imports vLLM).
    Returns:
        The resolved :class:`EngineConfig`.
    Raises:
        ConfigError: a missing file, YAML error, unknown key, wrong type, ``extends`` cycle or missing
            parent, an unknown ``embedded:`` model (listing the known ones) or an unknown engine arg (with the
            closest valid name). The message names the file and the field.
    """
    path = _find(ref, configs_dir, None)
    chain: list[tuple[Path, ConfigLayer]] = []
    seen: set[Path] = set()
    while True:
        if path in seen:
            cycle = " -> ".join(p.name for p, _ in chain) + f" -> {path.name}"
            raise ConfigError(f"extends cycle: {cycle}", path=chain[0][0], field="extends")
        seen.add(path)
        layer = _read_layer(path)
        chain.append((path, layer))
        if layer.extends is None:
            break
        path = _find(layer.extends, configs_dir, path.parent, referrer=path)
    cfg = _build(_merge([layer for _, layer in reversed(chain)]), chain, configs_dir)
    if check_engine_args:
        check_engine_arg_names(cfg.engine_args, _origin_of("engine_args", chain))
    return cfg


def load_baseline(cfg: EngineConfig, configs_dir: Path = CONFIGS_DIR, *,
                  check_engine_args: bool = True) -> EngineConfig:
    """The config ``cfg`` is gated against (its ``baseline``, else its parent), resolved like ``extends``:
    next to ``cfg``'s file first, then in ``configs_dir``.

    Raises:
        ConfigError: ``cfg`` has no baseline, or the baseline is missing or invalid; a missing one is reported
            against ``cfg``'s file and its ``baseline`` field.
    """
    if not cfg.baseline:
        raise ConfigError("this config has no baseline to compare against (set 'extends' or 'baseline')",
                          path=cfg.path, field="baseline")
    path = _find(cfg.baseline, configs_dir, cfg.path.parent, referrer=cfg.path,
                 field="baseline" if "baseline" in _read_layer(cfg.path).model_fields_set else "extends")
    return load_config(path, configs_dir, check_engine_args=check_engine_args)


def set_in(cfg: EngineConfig, dotted: str) -> Path:
    """The file of ``cfg``'s inheritance chain (child first) that sets ``dotted``, a top-level key (``model``) or a
    key of a section (``engine_args.limit_mm_per_prompt``); ``cfg.path`` when none does (a default applies)."""
    head, _, rest = dotted.partition(".")
    for path in cfg.chain:
        layer = _read_layer(path)
        if head in layer.model_fields_set and (not rest or rest in (getattr(layer, head) or {})):
            return path
    return cfg.path


def list_configs(configs_dir: Path = CONFIGS_DIR) -> list[str]:
    """Names of all configs under ``configs_dir`` (recursively), sorted."""
    return sorted(p.relative_to(configs_dir).with_suffix("").as_posix() for p in configs_dir.rglob("*.yaml"))


def check_engine_arg_names(engine_args: dict[str, Any], origin: dict[str, Path]) -> None:
    """Reject engine-arg names that ``vllm.EngineArgs`` does not have, suggesting the closest one (for an arg vLLM
    renamed, the name this vLLM has: ``engine.argnames.rename_hint``); both names of a renamed arg at once; a vLLM
    that lacks the ``LLM`` / ``LLMEngine`` methods the engine calls (``engine.argnames.missing_engine_api``); and,
    with speculative decoding, one that lacks the metrics evalgate reads the acceptance counts from
    (``engine.argnames.missing_spec_decode_evidence``). Every message names the installed vLLM's version.

    Raises:
        ConfigError: naming the file that set the offending key (``origin`` maps key -> file) and the field.
    """
    valid = engine_arg_names()
    for key in engine_args:
        if key in _RESERVED_ENGINE_ARGS:
            raise ConfigError("set the model with the top-level 'model' key", path=origin.get(key), field=f"engine_args.{key}")
        if key not in valid:
            renamed = rename_hint(key, valid)
            close = difflib.get_close_matches(key, sorted(valid), n=1, cutoff=0.6)
            hint = f"; {renamed}" if renamed else f"; did you mean '{close[0]}'?" if close else ""
            raise ConfigError(f"unknown vLLM engine arg (the installed vLLM is {installed_vllm_version()}){hint}",
                              path=origin.get(key), field=f"engine_args.{key}")
    pair = both_names_set(engine_args)
    if pair:
        raise ConfigError(f"'{pair[0]}' and '{pair[1]}' are two names of one vLLM switch; set one (the installed "
                          f"vLLM is {installed_vllm_version()})", path=origin.get(pair[1]), field=f"engine_args.{pair[1]}")
    missing = missing_engine_api()
    if missing:
        raise ConfigError(f"the installed vLLM ({installed_vllm_version()}) lacks {', '.join(missing)}, which "
                          f"evalgate's engine calls", field="engine_args")
    missing = missing_spec_decode_evidence(engine_args, valid)
    if missing:
        raise ConfigError(f"speculative decoding is on, but the installed vLLM ({installed_vllm_version()}) lacks "
                          f"{'; '.join(missing)}, from which evalgate reads the acceptance counts",
                          path=origin.get("speculative_config"), field="engine_args.speculative_config")


def installed_vllm_version() -> str:
    """The installed vLLM's version and distribution (``engine.argnames.installed_vllm_version``)."""
    from evalgate.engine.argnames import installed_vllm_version as read

    return read()


def engine_arg_names() -> frozenset[str]:
    """The field names of the installed vLLM's ``EngineArgs`` (``engine.argnames.engine_arg_names``: read from
    vLLM's source, without importing vLLM where it can)."""
    from evalgate.engine.argnames import engine_arg_names as read

    return read()


def _find(ref: str | Path, configs_dir: Path, near: Path | None, referrer: Path | None = None,
          field: str = "extends") -> Path:
    """The YAML file ``ref`` names: a path, or a name next to ``near`` first, then in ``configs_dir``.

    ``referrer``/``field``: the file and key that named ``ref`` (``extends``, ``baseline``), for the message.
    """
    ref_s = str(ref)
    candidates: list[Path] = []
    as_path = Path(ref_s).expanduser()
    if ref_s.endswith((".yaml", ".yml")) or as_path.is_file() or "/" in ref_s and as_path.exists():
        candidates.append(as_path)
    for base in ([near] if near else []) + [configs_dir]:
        candidates.append(base / ref_s)
        candidates.append(base / f"{ref_s}.yaml")
    for c in candidates:
        if c.is_file():
            return c.resolve()
    what = "parent" if field == "extends" else field
    for c in candidates:
        if c.is_dir() and (c is as_path or c.suffix in (".yaml", ".yml")):
            if referrer is not None:
                raise ConfigError(f"{what} config '{ref_s}' is a directory ({c}), expected a YAML file",
                                  path=referrer, field=field)
            raise ConfigError("is a directory, expected a YAML config file", path=c, field="--config")
    known = list_configs(configs_dir) if configs_dir.is_dir() else []
    close = difflib.get_close_matches(ref_s, known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else f" (known: {', '.join(known)})" if known else ""
    if referrer is not None:
        raise ConfigError(f"{what} config '{ref_s}' not found{hint}", path=referrer, field=field)
    raise ConfigError(f"config '{ref_s}' not found in {configs_dir}{hint}", field="--config")


def _read_layer(path: Path) -> ConfigLayer:
    """One config file, read strictly (``yamlio``) and validated as a :class:`ConfigLayer` (ConfigError naming the
    file and the dotted field)."""
    return validate(ConfigLayer, read_mapping(path, WORDING), path)


def _merge(layers: list[ConfigLayer]) -> dict[str, Any]:
    """Merge parent-first layers (the keys each file set): child wins; ``engine_args``, ``env`` and ``sampling``
    merge key by key; ``null`` deletes a key."""
    out: dict[str, Any] = {section: {} for section in _SECTIONS}
    for layer in layers:
        for key in layer.model_fields_set - {"extends", "baseline", "version"}:
            value = getattr(layer, key)
            if key not in _SECTIONS:
                out[key] = value
                continue
            for k, v in (value or {}).items():
                if v is None:
                    out[key].pop(k, None)
                else:
                    out[key][k] = v
    return out


def _origin_of(section: str, chain: list[tuple[Path, ConfigLayer]]) -> dict[str, Path]:
    """For each key of ``section``, the file (child first) that set it."""
    origin: dict[str, Path] = {}
    for path, layer in chain:
        for k in (getattr(layer, section) or {}):
            origin.setdefault(str(k), path)
    return origin


def _build(merged: dict[str, Any], chain: list[tuple[Path, ConfigLayer]], configs_dir: Path) -> EngineConfig:
    """The resolved config of ``chain`` (child first) from its merged layers; the child's file is named for a
    problem of the merged values (a missing model, a bad sampling key)."""
    path, child = chain[0]
    model = merged.get("model")
    if model is None:
        raise ConfigError("required: a model name or path (string)", path=path, field="model")
    if model.startswith(("/", "./", "../", "~")) and not Path(model).expanduser().exists():
        # A path, not a hub name: vLLM would otherwise try it as a hub repo id and fail after the baseline ran.
        raise ConfigError(f"path does not exist: {model}", path=path, field="model")
    if model.startswith("embedded:") and model not in EMBEDDED_ALIASES:
        # vLLM would take it for a hub name and blame engine_args after a pre-flight of half a minute.
        origin = next((p for p, layer in chain if "model" in layer.model_fields_set), path)
        raise ConfigError(f"unknown embedded model {model!r}; the embedded models are {', '.join(EMBEDDED_ALIASES)}",
                          path=origin, field="model")
    if model in SHAPE_ALIASES and str(merged["engine_args"].get("load_format", "")).lower() != "dummy":
        # A config-only model has no weights: vLLM would fail after the pre-flight looking for them.
        raise ConfigError(f"must be dummy: {model} is a config-only model (no weights; speed only, "
                          f"evalgate run --speed-only)", path=path, field="engine_args.load_format")
    sampling = validate(Sampling, merged["sampling"], path, prefix="sampling.")
    chat_origin = next((p for p, layer in chain if "template" in (layer.chat or {})), None)
    chat = resolve_chat(merged["chat"], path, chat_origin)
    try:
        name = path.relative_to(configs_dir.resolve()).with_suffix("").as_posix()
    except ValueError:
        name = path.stem
    return EngineConfig(name=name, path=path, model=model, engine_args=dict(merged["engine_args"]),
                        env=dict(merged["env"]), sampling=sampling,
                        baseline=child.baseline if "baseline" in child.model_fields_set else child.extends,
                        expect=merged.get("expect", EngineConfig.expect),
                        description=merged.get("description", EngineConfig.description),
                        chain=tuple(p for p, _ in chain), placement=merged.get("placement", EngineConfig.placement),
                        placement_from=next((p for p, layer in chain if "placement" in layer.model_fields_set), None),
                        chat=chat, suites=None if merged.get("suites") is None else tuple(merged["suites"]),
                        suites_from=None if merged.get("suites") is None else
                        next((p for p, layer in chain if "suites" in layer.model_fields_set), None))


def config_key_rows() -> list[tuple[str, str, str]]:
    """The config key table (docs/reference/config.md): :class:`ConfigLayer`'s keys, then ``sampling.*`` (:class:`Sampling`)
    and ``chat.*`` (``evalgate.inputs.chat.Chat``)."""
    return key_rows(ConfigLayer) + key_rows(Sampling, "sampling.") + key_rows(Chat, "chat.")
