"""lm-eval's ``LM`` contract over a ``VllmEngine`` (``make_lm``): journaled ``generate_until``, one engine submission
per (stop strings, token budget) group, and ``loglikelihood`` / ``loglikelihood_rolling`` from vLLM's prompt
log-probs, tokenised as lm-eval's HF backend tokenises them. ``on_answer`` lets scoring start while the engine is
still generating (``evalgate.suites.scoring``).

Images: a multimodal task (lm-eval's ``doc_to_image``) adds a third request argument ``{"visual": [PIL images]}``, as
lm-eval's ``vllm-vlm`` model receives it; the adapter sends them to vLLM as ``multi_modal_data`` with the context as
the text prompt (its ``<image>`` placeholders expanded by vLLM's processor), and each image's content hash
(``image_hash``) is part of the request key, so two requests that differ only in an image never share a journal
record. Through a chat template (``chat``), an image task's messages go to the template as content parts
(``chat.image_content``: lm-eval's ``vllm-vlm`` way), and a text task's too when the template reads only content-part
lists (``chat.content_form``: ``chat["content"] == "parts"``, each message one text part), so the rendered prompt carries the model's own image
placeholder where its template puts it; the image still goes as ``multi_modal_data``, and the rendered prompt with the
image hashes is the request key as for completion prompts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from evalgate.inputs.config import Sampling
from evalgate.worker.vllm_engine import VllmEngine, _round


def request_key(prompt: str, stop: list[str], max_tokens: int, images: tuple[str, ...] | list[str] = ()) -> str:
    """Identity of one generation request within a config (the journal key): sha256 of its inputs, the images'
    content hashes (``image_hash``, in request order) among them when there are any (a text-only request keeps
    the key it had before images existed)."""
    import hashlib
    import json

    parts: list[Any] = [prompt, stop, max_tokens] + ([list(images)] if images else [])
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()


class ChatTemplateFailure(Exception):
    """The config's chat template raised while rendering one item's messages (lm-eval builds every prompt of a task
    before generating any). The pre-engine probes render one short user message only, so a template that raises on a
    real item's messages (a length check, a role it refuses in a few-shot turn, a ``raise_exception`` on some text) is
    found here; the worker reports it as a config error on ``chat.template`` (exit 2), not an engine crash."""

    def __init__(self, exc: BaseException, chat_history: list[dict[str, Any]]) -> None:
        text = " ".join(str(exc).split())[:200]
        last = chat_history[-1].get("content") if chat_history else None
        begins = " ".join(last.split())[:60] if isinstance(last, str) else None
        where = f" (its last message begins {begins!r})" if begins else ""
        super().__init__(f"{type(exc).__name__}: {text}{where}")


def image_hash(image: Any) -> str:
    """An image's content hash: lm-eval's own (``lm_eval.utils.convert_pil_to_hash``, sha256 of the PNG bytes, which
    are lossless: equal for equal mode, size and pixels). lm-eval puts the same hash in place of every image of a
    logged sample (``hash_dict_images``), so ``suite_eval`` rebuilds the request key from the sample. A string
    (already hashed) is returned as it is."""
    if isinstance(image, str):
        return image
    from lm_eval.utils import convert_pil_to_hash

    return str(convert_pil_to_hash(image))


def request_images(args: tuple[Any, ...]) -> list[Any]:
    """The images of an lm-eval request (``args`` = ``(context, gen_kwargs[, {"visual": [...]}])``), in order; a single
    image not in a list counts as a list of one."""
    if len(args) < 3 or not isinstance(args[2], dict):
        return []
    visual = args[2].get("visual")
    if visual is None:
        return []
    return list(visual) if isinstance(visual, (list, tuple)) else [visual]


def engine_prompt(context: str, images: list[Any]) -> Any:
    """What the engine is given for one request: the context, or with images vLLM's ``TextPrompt`` form
    ``{"prompt": context, "multi_modal_data": {"image": image or [images]}}`` (as lm-eval's ``vllm-vlm`` builds it)."""
    if not images:
        return context
    return {"prompt": context, "multi_modal_data": {"image": images[0] if len(images) == 1 else list(images)}}


def request_params(gen_kwargs: dict[str, Any], sampling: Sampling,
                   think_end: str | None = None) -> tuple[list[str], int]:
    """Stop strings and token budget of an lm-eval request: its ``until``, and ``max_gen_toks`` capped by the config.

    With ``think_end`` (``chat.think_end``) no stop string goes to the engine, as in lm-eval's vLLM backend: a task's
    stops (``\n\n``) occur inside a thought and would end it before any answer; they are applied to the answer
    after the thought is stripped (``chat.split_thought``).
    """
    until = gen_kwargs.get("until") or []
    until = [until] if isinstance(until, str) else list(until)
    budget = min(int(gen_kwargs.get("max_gen_toks", sampling.max_tokens)), sampling.max_tokens)
    return ([] if think_end else until), budget


def make_lm(engine: VllmEngine, journal: Any = None, logprobs: int = 0,
            on_answer: Callable[[Any, str], None] | None = None, chat: dict[str, Any] | None = None) -> Any:
    """An lm-eval ``LM`` that answers ``generate_until`` requests with ``engine``.

    Args:
        engine: the started engine.
        journal: a ``store.GenerationJournal`` (optional). Requests already in it are answered from it; every new
            generation is appended the engine step it finishes in, so a killed run loses only requests in flight.
        logprobs: top-k decode-time log-probs to record per output position (0: none).
        on_answer: called as ``on_answer(request, text)`` for every request the moment its text is known (journaled
            ones before the engine starts, new ones as they finish), e.g. to start scoring while the engine is still
            generating (``evalgate.suites.scoring``). It must not block.
        chat: the config's chat section as the worker gets it (``chat.ChatSpec.worker_spec``: ``chat`` (bool),
            ``template`` (text, or None for the tokenizer's own), ``template_kwargs``, ``think_end``), or None for
            completion prompts. The adapter then implements lm-eval's chat interface (``apply_chat_template`` with
            the engine's tokenizer, ``tokenizer_name`` carrying the template's hash) and, with ``think_end``, answers
            each request with the text after the thought (``chat.split_thought``) and keeps the thought
            (``reasoning``).
    The adapter's ``records`` maps request key -> generation for every request it answered, ``reused``/``generated``
    count where they came from, and ``engine_s`` sums the seconds spent in engine submissions.
    """
    import hashlib

    from lm_eval.api.model import LM

    from evalgate.inputs.chat import PARTS, message_form, split_thought, template_messages

    chat = chat or {}
    think_end = chat.get("think_end")
    template = chat.get("template")
    on_text = on_answer or (lambda request, text: None)

    def answer_of(args: tuple[Any, ...], text: str) -> str:
        """What lm-eval scores for a request ``args`` = (context, gen_kwargs[, visual]) whose raw generation is
        ``text``."""
        if not think_end:
            return text
        context, kwargs = args[0], args[1]
        return split_thought(context, text, think_end, request_params(kwargs, engine.sampling)[0]).answer

    def notify(request: Any, text: str) -> None:
        on_text(request, answer_of(tuple(request.args), text))

    class EvalgateLM(LM):
        """lm-eval model adapter: ``generate_until`` (with images: ``MULTIMODAL``), and ``loglikelihood`` /
        ``loglikelihood_rolling`` from prompt log-probs (multiple-choice tasks), all journaled."""

        # lm-eval runs tasks with ``doc_to_image`` only on a model that says so, and then logs every sample with its
        # images replaced by their hashes (``hash_dict_images``): what ``suite_eval`` reads back.
        MULTIMODAL = True

        def __init__(self) -> None:
            super().__init__()
            self.records: dict[str, dict[str, Any]] = journal.load() if journal is not None else {}
            self.reused = 0
            self.generated = 0
            self.engine_s = 0.0
            self.thumbnails: dict[str, str] = {}  # image hash -> the report's thumbnail (a data: URI)
            # True while an image task runs (``suite_eval.evaluate_suite``): chat messages go as content parts
            self.image_prompts = False
            # How text messages go to the template (``chat.content_form``): the parent's decision, else decided
            # from the engine tokenizer's template on first use
            self.content: str | None = chat.get("content")

        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            from evalgate.suites.pages import thumbnail_data_uri

            for req in requests:
                for im in request_images(tuple(req.args)):
                    h = image_hash(im)
                    if h not in self.thumbnails and not isinstance(im, str):
                        self.thumbnails[h] = thumbnail_data_uri(im)
            keys, todo = group_requests(self, [tuple(req.args) for req in requests], requests, engine.sampling,
                                        notify, think_end)
            for (stop, max_toks), group in todo.items():  # one engine submission per group: vLLM batches it all
                _generate_group(self, engine, journal, logprobs, notify, list(stop), max_toks, list(group.items()))
            return [answer_of(tuple(req.args), self.records[k]["text"]) for req, k in zip(requests, keys)]

        def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
            """lm-eval's chat hook: ``chat_history`` (``[{"role", "content"}, ...]``) rendered to one prompt string
            by the engine's tokenizer with the config's template (None: the tokenizer's own) and ``template_kwargs``.
            While an image task runs (``image_prompts``), every message goes as content parts, its ``<image>``
            placeholders as ``{"type": "image"}`` parts (``chat.image_content``, as lm-eval's ``vllm-vlm`` model
            sends them), so the template writes the model's image token where it places an image. Otherwise, with a
            template that renders only content-part lists (``content == "parts"``, ``chat.content_form``), each
            message goes as one text part (``chat.text_content``); else as lm-eval gives it (plain strings).

            Args:
                chat_history: lm-eval's messages, ``[{"role", "content"}, ...]`` (not modified).
                add_generation_prompt: passed to the template.
            Returns:
                The rendered prompt.
            Raises:
                ChatTemplateFailure: the template cannot render these messages: the tokenizer has no chat template
                    and none was given, the template renders a message's text neither from a plain string nor
                    from content parts (``chat.message_form``), or it raised on them (any error: a template is user
                    code). The worker reports it as exit 2 on ``chat.template``. lm-eval (0.4.13) has no retry for
                    a custom ``LM``'s ``apply_chat_template``: a template that refuses a system message is refused
                    before any engine starts (``chat.check_template_inputs``).
            """
            tok = engine.tokenizer()
            try:
                if template is None and not getattr(tok, "chat_template", None):
                    raise ValueError("chat.template: model, but the engine's tokenizer has no chat template")
                if self.content is None:
                    text = template if template is not None else str(tok.chat_template)
                    self.content = message_form(chat, text)
                messages = template_messages(chat_history, self.content, images=self.image_prompts)
                return tok.apply_chat_template(messages, chat_template=template, tokenize=False,
                                               add_generation_prompt=add_generation_prompt,
                                               **dict(chat.get("template_kwargs") or {}))
            except Exception as exc:  # noqa: BLE001 - a template is user code: its error on an item is the input's
                raise ChatTemplateFailure(exc, chat_history) from exc

        @property
        def tokenizer_name(self) -> str:
            """lm-eval's cache key of rendered prompts: the template's sha256 (the tokenizer's own template when
            none was given)."""
            text = template if template is not None else getattr(engine.tokenizer(), "chat_template", None) or ""
            # content parts render other prompts from the same template: another cache key (string: as before)
            form = "-parts" if self.content == PARTS else ""
            return "evalgate-chat-" + hashlib.sha256(str(text).encode("utf-8")).hexdigest()[:16] + form

        def chat_template(self, chat_template: bool | str = False) -> str | None:
            """The template text lm-eval records (None when chat is off)."""
            return (template or getattr(engine.tokenizer(), "chat_template", None)) if chat_template else None

        def reasoning(self, context: str, gen_kwargs: dict[str, Any],
                      images: tuple[str, ...] = ()) -> dict[str, Any] | None:
            """The thought of the generation answering ``(context, gen_kwargs)``: ``{"thought": text up to and
            including the last think_end (the whole output when truncated) or None, "thinking_tokens": its token
            count, "answer_tokens": the scored answer's token count (the engine's tokenizer, no special tokens),
            "truncated_thought": bool}``; None without ``think_end`` or for a request not answered."""
            if not think_end:
                return None
            rec = self.records.get(request_key(context, *request_params(gen_kwargs, engine.sampling, think_end), images))
            if rec is None:
                return None
            t = split_thought(context, rec["text"], think_end, request_params(gen_kwargs, engine.sampling)[0])
            tok = engine.tokenizer()

            def count(text: str | None) -> int:
                return len(tok.encode(text, add_special_tokens=False)) if text else 0

            return {"thought": t.thought, "thinking_tokens": count(t.thought), "answer_tokens": count(t.answer),
                    "truncated_thought": t.truncated}

        def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
            if any(request_images(tuple(req.args)) for req in requests):
                raise ValueError("a loglikelihood request with images: evalgate scores images in generate_until "
                                 "tasks only")
            out = score_pairs(engine, journal, self, [tuple(req.args) for req in requests])
            return [(r["logprob"], r["is_greedy"]) for r in out]

        def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
            return [r["logprob"] for r in score_rolling(engine, journal, self, [req.args[0] for req in requests])]

    return EvalgateLM()


Groups = dict[tuple[tuple[str, ...], int], dict[str, tuple[Any, list[Any]]]]


def group_requests(lm: Any, args: list[tuple[Any, ...]], requests: list[Any], sampling: Sampling,
                   notify: Callable[[Any, str], None], think_end: str | None = None) -> tuple[list[str], Groups]:
    """Split ``generate_until`` requests (``args``: lm-eval's ``(context, gen_kwargs[, {"visual": images}])`` per
    request) into those the journal (``lm.records``) answers, notified at once and counted in ``lm.reused``, and
    those the engine must run (``think_end``: ``request_params``'s).

    Returns:
        ``(keys, todo)``: each request's key (``request_key``, with its images' hashes), in order; and ``(stop
        strings, token budget)`` -> request key -> ``(engine prompt (``engine_prompt``), the requests waiting for
        it)``, each distinct prompt once per group.
    """
    keys: list[str] = []
    todo: Groups = {}
    for a, req in zip(args, requests):
        context, kwargs = a[0], a[1]
        images = request_images(a)
        stop, max_toks = request_params(kwargs, sampling, think_end)
        key = request_key(context, stop, max_toks, tuple(image_hash(im) for im in images))
        keys.append(key)
        if key in lm.records:
            lm.reused += 1
            notify(req, lm.records[key]["text"])
        else:
            todo.setdefault((tuple(stop), max_toks), {}).setdefault(
                key, (engine_prompt(context, images), []))[1].append(req)
    return keys, todo


def _generate_group(lm: Any, engine: Any, journal: Any, logprobs: int, notify: Callable[[Any, str], None],
                    stop: list[str], max_toks: int, items: list[tuple[str, tuple[Any, list[Any]]]]) -> None:
    """One engine submission of ``items`` (key, (engine prompt, waiting requests)); each generation is journaled and
    its waiting requests notified the engine step it finishes in. A generation from images records their hashes
    (``images``): its prompt token ids alone do not reproduce it (``item_evidence`` leaves it unscored)."""
    import contextlib
    import time

    t0 = time.monotonic()
    stream = engine.generate_stream([p for _, (p, _) in items], max_tokens=max_toks, stop=stop, logprobs=logprobs)
    with contextlib.closing(stream):  # an error here aborts what is still in flight, at once
        for finished in stream:
            new = {items[i][0]: _record(g, items[i][1][0]) for i, g in finished}
            if journal is not None:
                journal.append(new)
            lm.records.update(new)
            lm.generated += len(new)
            for i, _ in finished:
                key, (_, waiting) = items[i]
                for req in waiting:
                    notify(req, lm.records[key]["text"])
    lm.engine_s += time.monotonic() - t0


def _record(gen: Any, prompt: Any) -> dict[str, Any]:
    """A finished ``Generation`` as its journal record; with the image hashes (``images``) of a prompt that had any."""
    rec = dict(vars(gen))
    mm = prompt.get("multi_modal_data", {}).get("image") if isinstance(prompt, dict) else None
    if mm is not None:
        rec["images"] = [image_hash(im) for im in (mm if isinstance(mm, list) else [mm])]
    return rec


# ----------------------------------------------------------------------------------------------------
# Loglikelihood requests (multiple-choice tasks), tokenised exactly as lm-eval's HF backend does
# (lm_eval/api/model.py ``TemplateLM._encode_pair`` / ``loglikelihood``, lm_eval/models/huggingface.py ``tok_encode``).

LL_FORMAT = 1  # version of a loglikelihood journal record (part of its request key)
LL_CHUNK = 32  # requests per engine call: the unit of progress that a killed run keeps


def loglikelihood_key(kind: str, *args: str) -> str:
    """Journal key of a ``loglikelihood`` (``args`` = context, continuation) or ``loglikelihood_rolling``
    (``args`` = the text) request: sha256 over the request type and its inputs, so it never meets a generation's."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps([kind, LL_FORMAT, *args], ensure_ascii=False).encode()).hexdigest()


def tok_encode(tokenizer: Any, text: str) -> list[int]:
    """lm-eval HFLM's ``tok_encode`` with its defaults: the tokenizer's own special tokens (a BOS where the
    tokenizer adds one), none when ``text`` already starts with the BOS string."""
    bos = tokenizer.decode(prefix_token_id(tokenizer))
    if bos and text.startswith(bos):
        return list(tokenizer.encode(text, add_special_tokens=False))
    return list(tokenizer.encode(text))


def prefix_token_id(tokenizer: Any) -> int:
    """The token an empty context is replaced by (HFLM ``prefix_token_id``): BOS, else EOS."""
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def encode_pair(tokenizer: Any, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """Context and continuation token ids as lm-eval's HF backend makes them: trailing spaces of the context move
    to the continuation; the whole text is encoded and split at the context's length; an empty context becomes the
    prefix token (or, when the continuation already starts with it, the continuation's first token)."""
    if context == "":
        cont = list(tokenizer.encode(continuation, add_special_tokens=False))
        prefix = prefix_token_id(tokenizer)
        return ([prefix], cont) if not cont or prefix != cont[0] else (cont[:1], cont[1:])
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = tok_encode(tokenizer, context + continuation)
    ctx = tok_encode(tokenizer, context)
    return ctx, whole[len(ctx):]


def _truncated(ctx: list[int], cont: list[int], max_len: int) -> tuple[list[int], int]:
    """``(ids, n_context)``: context + continuation, left-truncated to ``max_len`` tokens, keeping >= 1 context token
    (HFLM keeps the last ``max_length + 1``; vLLM needs the prompt within ``max_model_len``)."""
    ids = (ctx + cont)[-max_len:]
    return ids, max(1, len(ids) - len(cont))


def _score(engine: Any, journal: Any, lm: Any, todo: dict[str, tuple[list[int], int]], chunk: int) -> None:
    """Score ``todo`` (key -> (ids, n_context)) in chunks; each chunk's records go to ``lm.records`` and the journal."""
    items = list(todo.items())
    for start in range(0, len(items), chunk):
        part = items[start:start + chunk]
        scored = engine.loglikelihood([seq for _, seq in part])
        new = {}
        for (key, (ids, n_ctx)), toks in zip(part, scored):
            new[key] = {"type": "loglikelihood", "logprob": sum(lp for lp, _ in toks),
                        "is_greedy": all(g for _, g in toks), "n_tokens": len(toks),
                        "token_logprobs": [_round(lp) for lp, _ in toks]}
        if journal is not None:
            journal.append(new)
        lm.records.update(new)
        lm.generated += len(new)


def score_pairs(engine: Any, journal: Any, lm: Any, pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Answer lm-eval ``loglikelihood`` requests ``(context, continuation)``: per request, its journal record
    ``{"logprob": sum of the continuation's token log-probs (nats), "is_greedy", "n_tokens", "token_logprobs"}``.

    Requests already in ``lm.records`` (the journal) are reused (``lm.reused``); the rest are scored by ``engine``
    in chunks of ``LL_CHUNK`` and journaled (``lm.generated``).
    """
    tok, max_len = engine.tokenizer(), engine.max_model_len() - 1
    keys, todo = [], {}
    for context, continuation in pairs:
        key = loglikelihood_key("loglikelihood", context, continuation)
        keys.append(key)
        if key in lm.records:
            lm.reused += 1
        elif key not in todo:
            todo[key] = _truncated(*encode_pair(tok, context, continuation), max_len)
    _score(engine, journal, lm, todo, LL_CHUNK)
    return [lm.records[k] for k in keys]


def score_rolling(engine: Any, journal: Any, lm: Any, texts: list[str]) -> list[dict[str, Any]]:
    """Answer lm-eval ``loglikelihood_rolling`` requests (perplexity): the text's full log-likelihood over lm-eval's
    disjoint rolling windows (``lm_eval.utils.get_rolling_token_windows`` with the prefix token and lm-eval's vLLM
    backend's ``max_seq_len = max_model_len - 2``: one token of context, one of generation, so every window's
    sequence fits the engine), each window scored as a loglikelihood. Journaled per text."""
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    tok, max_len = engine.tokenizer(), engine.max_model_len() - 2
    out = []
    for text in texts:
        key = loglikelihood_key("loglikelihood_rolling", text)
        if key in lm.records:
            lm.reused += 1
            out.append(lm.records[key])
            continue
        windows = [make_disjoint_window(w) for w in get_rolling_token_windows(
            token_list=tok_encode(tok, text), prefix_token=prefix_token_id(tok), max_seq_len=max_len, context_len=1)]
        seqs = [(ctx + cont, len(ctx)) for ctx, cont in windows]
        toks = [t for scored in engine.loglikelihood(seqs) for t in scored] if seqs else []
        rec = {"type": "loglikelihood_rolling", "logprob": sum(lp for lp, _ in toks), "n_tokens": len(toks),
               "is_greedy": all(g for _, g in toks)}
        if journal is not None:
            journal.append({key: rec})
        lm.records[key] = rec
        lm.generated += 1
        out.append(rec)
    return out
