"""Train the embedded hybrid model (``python -m tools.hybrid.train``).

Recipe: ``HybridConfig()`` initialised from ``--seed`` on CPU; AdamW (betas 0.9/0.95, weight decay 0.1 on
matrices), linear warm-up then cosine decay to 10 %, gradient clipping at 1.0; batches from
``data.batch_samples`` (suite prompts with answer-only loss, standard-library code with full loss); loss =
next-token cross-entropy of the trunk + ``--mtp-weight`` x the MTP layer's next-next-token cross-entropy
(DeepSeek-V3 style: position ``t`` sees ``emb(x[t+1])`` and ``h[t]`` and predicts ``x[t+2]``).

Deterministic given its seed: model init, data order and content are functions of the seed and the batch
index (data workers only change who computes a batch). Every run starts with ``REPRO``: the first steps with a tiny
batch in float32; its losses are stored in ``train_log.json`` so a CPU re-run can check them
(``tests/models/test_hybrid_model.py``).

Typical use::

    python -m tools.hybrid.train tokenizer --out evalgate/models/hybrid/checkpoint        # once, on CPU
    python -m tools.hybrid.train train --out $OUT/ckpt --code-corpus corpus.txt    # on a GPU

Fine-tuning (``--init CKPT``): the model starts from a checkpoint instead of ``--seed``'s initialisation, and
``--chat docparse=16,finance=32`` adds ``data.ChatMix`` chat samples to every batch (the chat model
``embedded:nemotron-h-tiny-chat``; see ``evalgate/models/hybrid/README.md``). The reproducibility prefix then
starts from the same checkpoint, with ``REPRO_CHAT`` chat samples and the run's learning rate.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, replace
from dataclasses import fields as dataclass_fields
from pathlib import Path

import torch
import torch.nn.functional as F

from tools.hybrid import data as D
from tools.hybrid.modeling import HybridConfig, NemotronHTiny, load_checkpoint, save_checkpoint
from tools.hybrid.tokenizer import EOS, load_tokenizer, save_hf_tokenizer, train_tokenizer

CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoint"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@dataclass(frozen=True)
class TrainArgs:
    seed: int = 0
    steps: int = 2000
    warmup: int = 200
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    clip: float = 1.0
    mtp_weight: float = 0.5
    max_len: int = 512  # the short group is padded to this length, the long one to mix.long_len (static shapes)
    mix: D.Mix = D.Mix()
    log_every: int = 50
    tf32: bool = True


REPRO = TrainArgs(steps=3, warmup=2, mix=D.Mix(docparse=1, finance=1, finance_lookup=1, code=1, code_chars=400,
                                                coding=1, coding_kinds_every=2, longgen=1, longgen_rows=(2, 3),
                                                long_len=1408),
                  log_every=1,
                  tf32=False)
REPRO_CHAT = D.ChatMix(docparse=2, finance=2)  # the prefix's chat samples where the run has a chat mix


# ---------------------------------------------------------------- tokenizer
TOKENIZER_MIX = D.Mix(docparse=26, finance=28, finance_lookup=0, code=0, coding=0, longgen=0)  # what the shipped tokenizer saw
def build_tokenizer(out: Path, corpus: str, vocab_size: int = 2048, n_batches: int = 150) -> None:
    """Train the BPE on the prompts+answers of the first ``n_batches`` training batches and on the code
    corpus, and save it as a HF fast tokenizer in ``out``."""
    texts = []
    for k in range(n_batches):
        texts += [s.prompt + s.answer for s in D.batch_samples(k, TOKENIZER_MIX, "")]
    texts += corpus.splitlines(keepends=True)
    save_hf_tokenizer(train_tokenizer(texts, vocab_size), out)


# ---------------------------------------------------------------- batches
def encode(samples: list[D.Sample], tok, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, weights), each (B, L), right-padded with 0; ``weights[b, t]`` weighs the prediction of
    ``ids[b, t]``. Suite samples: prompt (with ``<s>``) has weight 0, the answer 1 (and its ``</s>`` where
    ``s.eos``: chat turns). Code: ``<s>`` + text, weight 1 after ``<s>``. Sequences are cut at, and padded to,
    ``max_len``."""
    rows = []
    eos = tok.token_to_id(EOS)
    for s in samples:
        if s.prompt:
            p = tok.encode(s.prompt).ids  # <s> added by the post-processor, as vLLM tokenizes prompts
            a = tok.encode(s.answer, add_special_tokens=False).ids + ([eos] if s.eos else [])
            ids, w = p + a, [0.0] * len(p) + [1.0] * len(a)
        else:
            ids = tok.encode(s.answer).ids
            w = [0.0] + [1.0] * (len(ids) - 1)
        rows.append((ids[:max_len], w[:max_len]))
    L = max_len
    ids_t = torch.zeros(len(rows), L, dtype=torch.long)
    w_t = torch.zeros(len(rows), L)
    for i, (ids, w) in enumerate(rows):
        ids_t[i, : len(ids)] = torch.tensor(ids)
        w_t[i, : len(w)] = torch.tensor(w)
    return ids_t, w_t


Group = tuple[torch.Tensor, torch.Tensor]


def encode_groups(samples: list[D.Sample], tok, args: "TrainArgs") -> list[Group]:
    """The batch as padded groups: the short samples at ``args.max_len``, then (if any) the long ones
    (``D.LONG_SOURCES``) at ``args.mix.long_len``; each group as ``encode`` returns it."""
    short = [s for s in samples if s.source not in D.LONG_SOURCES]
    long = [s for s in samples if s.source in D.LONG_SOURCES]
    groups = [encode(short, tok, args.max_len)]
    if long:
        groups.append(encode(long, tok, args.mix.long_len))
    return groups


class BatchStream(torch.utils.data.IterableDataset):
    """Batch ``k`` for ``k`` in ``range(start, stop)``; worker ``i`` of ``n`` computes ``k = i (mod n)`` and
    the DataLoader returns them in order, so the stream does not depend on the number of workers."""

    def __init__(self, tok_path: Path, corpus: str, args: TrainArgs, start: int, stop: int,
                 chat: D.ChatMix | None = None) -> None:
        self.tok_path, self.corpus, self.args, self.start, self.stop = tok_path, corpus, args, start, stop
        self.chat = chat

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        wid, n = (info.id, info.num_workers) if info else (0, 1)
        tok = load_tokenizer(self.tok_path)
        for k in range(self.start + wid, self.stop, n):
            yield encode_groups(D.batch_samples(k, self.args.mix, self.corpus, self.chat), tok, self.args)


def batches(tok_path: Path, corpus: str, args: TrainArgs, workers: int, chat: D.ChatMix | None = None):
    """The run's batches ``0 .. args.steps - 1`` (``BatchStream``) through a DataLoader of ``workers`` workers."""
    ds = BatchStream(tok_path, corpus, args, 0, args.steps, chat)
    return torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers, prefetch_factor=8 if workers else None,
                                       persistent_workers=False)


# ---------------------------------------------------------------- loss
def losses(model: NemotronHTiny, groups: list[Group]) -> dict[str, torch.Tensor]:
    """Weighted mean next-token (trunk) and next-next-token (MTP) cross-entropies and answer accuracies over all
    groups' weighted positions (sums over groups, then one division, so a group weighs by its token count)."""
    parts = [_loss_sums(model, ids, w) for ids, w in groups]
    tot = {k: sum(p[k] for p in parts) for k in parts[0]}
    return {"lm": tot["ce"] / tot["n"].clamp(min=1), "mtp": tot["ce2"] / tot["n2"].clamp(min=1),
            "acc": tot["hit"] / tot["n"].clamp(min=1), "mtp_acc": tot["hit2"] / tot["n2"].clamp(min=1)}


def _loss_sums(model: NemotronHTiny, ids: torch.Tensor, w: torch.Tensor) -> dict[str, torch.Tensor]:
    """Weighted sums for one (B, L) group: cross-entropies, hits and weights, trunk and MTP."""
    logits, mtp_logits = model(ids)
    tgt, wt = ids[:, 1:], w[:, 1:]
    ce = F.cross_entropy(logits[:, :-1].float().flatten(0, 1), tgt.flatten(), reduction="none").view_as(tgt)
    tgt2, wt2 = ids[:, 2:], w[:, 2:]
    ce2 = F.cross_entropy(mtp_logits[:, :-1].float().flatten(0, 1), tgt2.flatten(), reduction="none").view_as(tgt2)
    with torch.no_grad():
        hit = ((logits[:, :-1].argmax(-1) == tgt).float() * wt).sum()
        hit2 = ((mtp_logits[:, :-1].argmax(-1) == tgt2).float() * wt2).sum()
    return {"ce": (ce * wt).sum(), "ce2": (ce2 * wt2).sum(), "n": wt.sum(), "n2": wt2.sum(), "hit": hit, "hit2": hit2}


def lr_at(step: int, args: TrainArgs) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


def make_model(seed: int, cfg: HybridConfig | None = None) -> NemotronHTiny:
    model = NemotronHTiny(cfg or HybridConfig())
    model.init_weights(torch.Generator().manual_seed(seed))
    return model


def train(args: TrainArgs, tok_path: Path, corpus: str, device: str = "cpu", workers: int = 0,
          log=print, model: NemotronHTiny | None = None, compile: bool = False,
          max_steps: int | None = None, deadline: float | None = None,
          chat: D.ChatMix | None = None) -> tuple[NemotronHTiny, list[dict]]:
    """Run the recipe; returns the model and one log row per ``log_every`` steps (and the first 5).
    ``model`` (e.g. a loaded checkpoint) replaces ``args.seed``'s initialisation; ``chat`` adds chat samples to every
    batch. ``max_steps`` stops early (benchmarks) without changing the schedule; so does ``deadline`` (a
    ``time.time()`` value; a safety net that makes the run non-reproducible and is logged)."""
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    model = (model or make_model(args.seed)).to(device)
    loss_fn = torch.compile(losses) if compile else losses
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            fused=device.startswith("cuda"))
    rows: list[dict] = []
    t0, tokens = time.time(), 0
    for step, groups in enumerate(batches(tok_path, corpus, args, workers, chat)):
        groups = [(ids.to(device, non_blocking=True), w.to(device, non_blocking=True)) for ids, w in groups]
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        if max_steps is not None and step >= max_steps:
            break
        if deadline is not None and time.time() > deadline:
            rows.append({"step": step, "stopped_early": "deadline"})
            log(json.dumps(rows[-1]))
            break
        out = loss_fn(model, groups)
        loss = out["lm"] + args.mtp_weight * out["mtp"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        tokens += sum(ids.numel() for ids, _ in groups)
        if step < 5 or (step + 1) % args.log_every == 0 or step == args.steps - 1:
            row = {"step": step, "loss": loss.item(), "lm": out["lm"].item(), "mtp": out["mtp"].item(),
                   "acc": out["acc"].item(), "mtp_acc": out["mtp_acc"].item(), "grad_norm": gnorm.item(),
                   "lr": lr_at(step, args), "elapsed_s": round(time.time() - t0, 2), "tokens": tokens}
            rows.append(row)
            log(json.dumps(row))
    return model, rows


# ---------------------------------------------------------------- held-out check (torch greedy)
@torch.no_grad()
def greedy(model: NemotronHTiny, tok, prompt: str, max_new: int, stops: list[str], device: str) -> str:
    ids = torch.tensor([tok.encode(prompt).ids], device=device)
    out: list[int] = []
    for _ in range(max_new):
        logits, _ = model(torch.cat([ids, torch.tensor([out], device=device, dtype=torch.long)], 1) if out else ids)
        out.append(int(logits[0, -1].argmax()))
        text = tok.decode(out)
        if any(s in text for s in stops) or out[-1] == 2:
            break
    text = tok.decode(out)
    cut = min([text.find(s) for s in stops if s in text] or [len(text)])
    return text[:cut]


def chat_answer(prompt: str, output: str, stops: list[str]) -> tuple[str, bool]:
    """(answer, closed) of a chat generation ``output`` for ``prompt`` as the chat configs score it (``think_end``
    set: ``evalgate.inputs.chat.split_thought``, re-implemented so a training machine needs no lm-eval): with
    ``</think>`` in the output, the text after the last one, left-stripped, cut at the first stop; without it, an
    opened thought (``<think>`` in the output, or ending the prompt) is truncated and the answer empty; otherwise
    the output cut at the stops. ``closed``: the output wrote ``</think>``."""
    closed = D.THINK_END in output
    if closed:
        text = output.split(D.THINK_END)[-1].lstrip()
    elif "<think>" in output or prompt.rstrip().endswith("<think>"):
        return "", False
    else:
        text = output
    for s in stops:
        text = text.split(s)[0]
    return text, closed


def heldout_accuracy(model: NemotronHTiny, tok, device: str, n: int = 50,
                     thinking: bool | None = None) -> dict[str, dict[str, float]]:
    """Greedy accuracy of the torch model on the first ``n`` test items of docparse and finance (what
    ``evalgate run --limit n`` scores), with the suites' own prompts and scorers. ``thinking`` None: completion
    prompts; False / True: the chat prompts of ``configs/chat`` (thinking off / on; no stop string reaches the model,
    it ends at ``</s>`` or the budget, the answer is read as ``chat_answer`` reads it; ``closed``: share of outputs
    with ``</think>``)."""
    model.eval()
    res = {}
    for suite, stops, max_new in (("docparse", ["\n\n", "\nDocument:", "\nFields:", "\nJSON:"], 96),
                                  ("finance", ["\n\n", "\nStatement:", "\nQuestion:", "\nAnswer:"], 48)):
        mod = D.suite_module(suite)
        items = D.eval_items(suite)[:n]
        scores: dict[str, list[float]] = {}
        for it in items:
            if thinking is None:
                r = mod.process_results(it, [greedy(model, tok, mod.doc_to_text(it), max_new, stops, device)])
            else:
                prompt = D.chat_prompt(mod.doc_to_text(it), thinking)
                answer, closed = chat_answer(prompt, greedy(model, tok, prompt, max_new, [], device), stops)
                r = mod.process_results(it, [answer]) | {"closed": float(closed)}
            if suite == "finance":
                r[f"num_match_{it['qtype']}"] = r["num_match"]
            for k, v in r.items():
                scores.setdefault(k, []).append(v)
        res[suite] = {k: round(sum(v) / len(v), 4) for k, v in scores.items()} | {"n": len(items)}
    model.train()
    return res


# ---------------------------------------------------------------- CLI
def _sha_batches(tok_path: Path, corpus: str, args: TrainArgs, n: int = 2, chat: D.ChatMix | None = None) -> str:
    h = hashlib.sha256()
    for groups in BatchStream(tok_path, corpus, args, 0, n, chat):
        for ids, w in groups:
            h.update(ids.numpy().tobytes())
            h.update(w.numpy().tobytes())
    return h.hexdigest()


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tools.hybrid.train")
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokenizer", help="train the tokenizer into --out")
    t.add_argument("--out", type=Path, default=CHECKPOINT_DIR)
    t.add_argument("--code-corpus", type=Path)
    c = sub.add_parser("corpus", help="write the code corpus built from this interpreter's stdlib")
    c.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("train", help="train and write a checkpoint to --out")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--tokenizer", type=Path, default=None, help="default: --init's folder, else " + str(CHECKPOINT_DIR))
    r.add_argument("--code-corpus", type=Path, help="default: built from this interpreter's stdlib")
    r.add_argument("--steps", type=int, default=TrainArgs.steps)
    r.add_argument("--seed", type=int, default=TrainArgs.seed)
    r.add_argument("--lr", type=float, default=TrainArgs.lr)
    r.add_argument("--warmup", type=int, default=TrainArgs.warmup)
    r.add_argument("--init", type=Path, default=None,
                   help="start from this checkpoint (e.g. evalgate/models/hybrid/checkpoint) instead of --seed's init")
    r.add_argument("--chat", default=None, type=parse_chat,
                   help="add chat samples to every batch: ChatMix fields as key=value (e.g. docparse=16,finance=32)")
    r.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1))
    r.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    r.add_argument("--eval-n", type=int, default=50)
    r.add_argument("--mix", default=None, type=parse_mix,
                   help="Mix fields as key=value[,key=value...] (e.g. coding=12,longgen=4,longgen_rows=2-8); "
                        "or the old form docparse,finance,finance_lookup,code")
    r.add_argument("--compile", action="store_true", help="torch.compile the loss (numerics differ slightly)")
    r.add_argument("--time-budget", type=float, default=0.0,
                   help="seconds: measure the step time first and set --steps to fit (logged)")
    return ap


def main(argv: list[str] | None = None) -> int:
    """``python -m tools.hybrid.train {corpus,tokenizer,train}``; returns the exit code (0)."""
    a = _parser().parse_args(argv)
    corpus = a.code_corpus.read_text() if getattr(a, "code_corpus", None) else None
    if a.cmd == "corpus":
        a.out.write_text(D.build_code_corpus())
    elif a.cmd == "tokenizer":
        build_tokenizer(a.out, corpus or D.build_code_corpus())
    else:
        _train_command(a, corpus or D.build_code_corpus())
    return 0


def _train_command(a: argparse.Namespace, corpus: str) -> None:
    """``train``: the reproducibility prefix, the optional step-time benchmark, the run, the checkpoint and its
    ``train_log.json`` (written before and again after the held-out evaluation)."""
    a.tokenizer = a.tokenizer or a.init or CHECKPOINT_DIR
    mix = a.mix or D.Mix()
    args = replace(TrainArgs(), steps=a.steps, seed=a.seed, lr=a.lr, warmup=a.warmup, mix=mix)
    log = lambda s: print(s, flush=True)  # noqa: E731
    log(f"corpus sha256 {D.corpus_sha(corpus)}; device {a.device}; torch {torch.__version__}")
    D.eval_keys()  # computed once, inherited by the data workers
    init = (lambda: load_checkpoint(a.init)) if a.init else (lambda: None)
    # 1. the reproducibility prefix: first steps of the recipe with a tiny batch, float32, no TF32
    repro = repro_args(a.seed, a.lr if a.init else None)
    repro_chat = REPRO_CHAT if a.chat else None
    _, repro_rows = train(repro, a.tokenizer, corpus, a.device, 0, log, model=init(), chat=repro_chat)
    bench = {}
    if a.time_budget:
        args, bench = _fit_steps(a, args, corpus, log)
    # 2. the run
    t0 = time.time()
    deadline = t0 + a.time_budget + 90 if a.time_budget else None
    model, rows = train(args, a.tokenizer, corpus, a.device, a.workers, log, model=init(), compile=a.compile,
                        deadline=deadline, chat=a.chat)
    train_s = time.time() - t0
    save_checkpoint(model, a.out)
    for f in TOKENIZER_FILES:
        if (a.tokenizer / f).is_file():
            shutil.copy(a.tokenizer / f, a.out / f)
    train_log = _train_log(a, args, model, corpus, repro_rows, rows, train_s, bench)
    (a.out / "train_log.json").write_text(json.dumps(train_log, indent=1) + "\n")
    t1 = time.time()
    tok = load_tokenizer(a.tokenizer)
    acc = heldout_accuracy(model, tok, a.device, a.eval_n) if a.eval_n else {}
    log(json.dumps({"heldout_torch_greedy": acc, "eval_s": round(time.time() - t1, 1)}))
    train_log["heldout_torch_greedy"] = acc
    if a.chat and a.eval_n:
        for key, thinking in (("heldout_torch_greedy_chat", False), ("heldout_torch_greedy_chat_thinking", True)):
            train_log[key] = heldout_accuracy(model, tok, a.device, a.eval_n, thinking)
            log(json.dumps({key: train_log[key]}))
    (a.out / "train_log.json").write_text(json.dumps(train_log, indent=1) + "\n")


def repro_args(seed: int, lr: float | None = None) -> TrainArgs:
    """The reproducibility prefix's arguments: ``REPRO`` with the run's seed, and with a fine-tune's (``--init``)
    learning rate ``lr`` (None: the recipe's default, as the shipped checkpoint logged it)."""
    return replace(REPRO, seed=seed) if lr is None else replace(REPRO, seed=seed, lr=lr)


def parse_chat(text: str) -> D.ChatMix:
    """``--chat``: ``key=value`` pairs of ``data.ChatMix`` fields (integers >= 0, each key once; fields not given
    are 0). Raises ``argparse.ArgumentTypeError`` naming the part that is wrong."""
    names = [f.name for f in dataclass_fields(D.ChatMix)]
    values: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        key, eq, val = (x.strip() for x in part.partition("="))
        if key not in names:
            raise argparse.ArgumentTypeError(f"unknown field {key!r} (fields: {', '.join(names)})")
        if not eq or key in values:
            raise argparse.ArgumentTypeError(f"{part!r}: expected key=value, each key once")
        if not val.isdigit():
            raise argparse.ArgumentTypeError(f"bad value {val!r} for {key}")
        values[key] = int(val)
    return D.ChatMix(**{n: values.get(n, 0) for n in names})


def parse_mix(text: str) -> D.Mix:
    """``--mix``: ``key=value`` pairs of ``data.Mix`` fields, each key once (``longgen_rows`` as ``lo-hi``,
    ``1 <= lo <= hi``), or the old form of four integers ``docparse,finance,finance_lookup,code`` (the recipe before
    the coding and long samples: ``coding`` and ``longgen`` 0). Counts are integers >= 0; ``coding_kinds_every``,
    ``code_chars`` and ``long_len`` >= 1. Raises ``argparse.ArgumentTypeError`` naming the part that is wrong (so
    ``--mix`` fails with exit 2 before anything trains)."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 4 and all(p.isdigit() for p in parts):
        dp, fin, look, code = (int(x) for x in parts)
        return replace(D.Mix(), docparse=dp, finance=fin, finance_lookup=look, code=code, coding=0, longgen=0)
    names = [f.name for f in dataclass_fields(D.Mix)]
    values: dict = {}
    for part in parts:
        key, eq, val = (x.strip() for x in part.partition("="))
        if key not in names:
            raise argparse.ArgumentTypeError(f"unknown field {key!r} (fields: {', '.join(names)})")
        if not eq or key in values:
            raise argparse.ArgumentTypeError(f"{part!r}: expected key=value, each key once")
        try:
            if key == "longgen_rows":
                lo, hi = (int(v) for v in val.split("-"))
                if not 1 <= lo <= hi:
                    raise ValueError
                values[key] = (lo, hi)
            else:
                values[key] = int(val)
                if values[key] < (1 if key in ("coding_kinds_every", "code_chars", "long_len") else 0):
                    raise ValueError
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad value {val!r} for {key}") from None
    return replace(D.Mix(), **values)


def _fit_steps(a: argparse.Namespace, args: TrainArgs, corpus: str, log) -> tuple[TrainArgs, dict]:
    """``--time-budget``: time 40 steps, then set the steps (a multiple of 100, at least 100) to fit the budget."""
    n = 40
    t0 = time.time()
    _, brow = train(replace(args, log_every=10, steps=max(args.steps, n)), a.tokenizer, corpus, a.device, a.workers, log,
                    model=load_checkpoint(a.init) if a.init else None, compile=a.compile, max_steps=n, chat=a.chat)
    # step time from the last 30 steps (after warm-up / compilation)
    step_s = (brow[-1]["elapsed_s"] - brow[-4]["elapsed_s"]) / 30
    steps = max(100, int(a.time_budget / step_s) // 100 * 100)
    bench = {"bench_steps": n, "bench_total_s": round(time.time() - t0, 1), "step_s": round(step_s, 4),
             "time_budget_s": a.time_budget, "chosen_steps": steps}
    log(json.dumps(bench))
    return replace(args, steps=steps), bench


def _train_log(a: argparse.Namespace, args: TrainArgs, model, corpus: str, repro_rows: list, rows: list,
               train_s: float, bench: dict) -> dict:
    """The recipe, its inputs' hashes and the training log, as ``train_log.json`` records them."""
    from evalgate.suites.discovery import SUITES_DIR, content_hash

    repro = repro_args(a.seed, a.lr if a.init else None)
    repro_chat = REPRO_CHAT if a.chat else None
    fine_tune = {}
    if a.init or a.chat:  # (keys absent from the shipped, from-scratch recipe's log)
        init_sha = hashlib.sha256((a.init / "model.safetensors").read_bytes()).hexdigest() if a.init else None
        fine_tune = {"init": str(a.init) if a.init else None, "init_model_sha256": init_sha,
                     "chat": asdict(a.chat) if a.chat else None,
                     "repro_chat": asdict(repro_chat) if repro_chat else None,
                     "chat_template_sha256": hashlib.sha256(D.CHAT_TEMPLATE.read_bytes()).hexdigest()}
    return {
        "recipe": "tools.hybrid.train", "seed": a.seed, "args": _jsonable(asdict(args)),
        "repro_args": _jsonable(asdict(repro)), "repro": repro_rows, **fine_tune,
        "model": model.cfg.to_json(), "parameters": model.num_parameters(),
        "code_corpus_sha256": D.corpus_sha(corpus), "code_corpus_chars": len(corpus),
        "repro_data_sha256": _sha_batches(a.tokenizer, corpus, repro, chat=repro_chat),
        "device": torch.cuda.get_device_name() if a.device.startswith("cuda") else a.device,
        "torch": torch.__version__, "python": sys.version.split()[0],
        "suites_content_hash": {s: content_hash(SUITES_DIR / s) for s in ("docparse", "finance", "coding", "longgen")},
        "train_seconds": round(train_s, 1), "compile": a.compile, "benchmark": bench, "log": rows,
    }


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    return x


if __name__ == "__main__":
    sys.exit(main())
