"""One suite through lm-eval inside the engine worker: lm-eval's logged samples to ``ItemResult``s.

Generation tasks give an item per sample with its generation record (token count, finish reason);
loglikelihood tasks give the choices' log-probs instead (no decode or logit evidence).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from evalgate.errors import StoreError
from evalgate.results.records import ItemResult, TaskResult
from evalgate.suites.files import SOURCE_ID_FIELDS, source_id

# The dataset's own item id (``source_id``, trying ``SOURCE_ID_FIELDS``) is read where the suites are
# (``suites.files``), re-exported here: the pre-flight names an item by it too.
__all__ = ["SOURCE_ID_FIELDS", "evaluate_suite", "image_item_hash", "source_id"]


def evaluate_suite(lm: Any, suite: dict[str, Any], limit: int | None, sampling: Any,
                   chat: dict[str, Any] | None = None) -> tuple[dict[str, TaskResult], dict[tuple[str, int], str]]:
    """Run one suite's tasks through lm-eval; return ``TaskResult``s and each item's request key.

    ``chat`` (``chat.ChatSpec.worker_spec``, None: completion prompts): with ``chat`` true, lm-eval renders every
    prompt through the adapter's ``apply_chat_template`` (``apply_chat_template``, ``system_instruction`` and
    ``fewshot_as_multiturn`` of ``simple_evaluate``); with ``think_end``, each generated item carries its thought
    and token counts (``lm.reasoning``). For an image task the adapter sends chat messages as content parts
    (``lm.image_prompts``), so the template places each item's image; a text task of the same suite keeps the
    config's text form. The switch is per entry (a task, or a group whose tasks are all image or all text:
    ``suite["image_entries"]``, which the parent fills from each task's ``doc_to_image``; a suite spec without it
    counts every entry of an image suite, ``suite["modality"] == "image"``, as image): image and text entries run in
    separate lm-eval evaluations.
    """
    from lm_eval import simple_evaluate

    from evalgate.suites.discovery import task_manager

    manager = task_manager(suite["dir"], builtins=bool(suite.get("builtins")))
    entries = suite.get("entries") or [[t, None] for t in suite["tasks"]]
    image = set(suite["image_entries"]) if "image_entries" in suite else (
        {e[0] for e in entries} if suite.get("modality") == "image" else set())
    runs: dict[tuple[int | None, bool], list[str]] = {}
    for name, own in entries:
        runs.setdefault((_min_limit(limit, own), name in image), []).append(name)
    samples: dict[str, list[dict[str, Any]]] = {}
    for (lim, images_on), names in runs.items():  # one lm-eval evaluation per item limit and modality
        lm.image_prompts = images_on
        out = simple_evaluate(
            model=lm, tasks=names, task_manager=manager, limit=lim,
            log_samples=True, bootstrap_iters=0, confirm_run_unsafe_code=True, random_seed=sampling.seed,
            numpy_random_seed=sampling.seed, torch_random_seed=sampling.seed, fewshot_random_seed=sampling.seed,
            **_chat_args(chat),
        )
        if not out or "samples" not in out:
            raise StoreError(f"lm-eval returned no logged samples for suite {suite['name']}")
        samples.update(out["samples"])
    lm.image_prompts = False
    from evalgate.worker.lm_adapter import image_hash, request_images, request_key, request_params

    results: dict[str, TaskResult] = {}
    keys: dict[tuple[str, int], str] = {}
    id_fields = suite.get("id_fields") or {}
    for task in suite["tasks"]:
        metric = suite["metrics"][task]
        items = []
        for s in _first_filter(samples.get(task, [])):
            sid = source_id(s.get("doc"), id_fields.get(task))
            if _is_loglikelihood(s):  # no generation: no decode or logit evidence, the choices' log-probs instead
                items.append(dataclasses.replace(_choice_item(task, s, metric, lm.records), source_id=sid))
                continue
            context, gen_kwargs = s["arguments"][0][:2]
            images = tuple(image_hash(im) for im in request_images(tuple(s["arguments"][0])))
            think_end = (chat or {}).get("think_end")
            key = request_key(context, *request_params(gen_kwargs, sampling, think_end), images)
            keys[(task, int(s["doc_id"]))] = key
            reasoning = lm.reasoning(context, gen_kwargs, images) if think_end else None
            item = _item(task, s, metric, lm.records.get(key, {}), reasoning, images,
                         getattr(lm, "thumbnails", {}))
            items.append(dataclasses.replace(item, source_id=sid))
        results[task] = TaskResult(task=task, suite=suite["name"], metric=metric,
                                   items=tuple(sorted(items, key=lambda i: i.item_id)))
    return results, keys


def _chat_args(chat: dict[str, Any] | None) -> dict[str, Any]:
    """``simple_evaluate``'s chat arguments for a worker's ``chat`` spec (none for completion prompts)."""
    if not chat or not chat.get("chat"):
        return {}
    return {"apply_chat_template": True, "system_instruction": chat.get("system"),
            "fewshot_as_multiturn": bool(chat.get("fewshot_as_multiturn"))}


def _min_limit(a: int | None, b: int | None) -> int | None:
    """The tighter of two item limits (None = no limit)."""
    return b if a is None else a if b is None else min(a, b)


def _first_filter(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples of a task's first filter: lm-eval logs every item once per ``filter_list`` entry (gsm8k:
    ``strict-match`` then ``flexible-extract``), in that order; the gate scores the first, as its reported metric."""
    first = samples[0].get("filter") if samples else None
    return [s for s in samples if s.get("filter") == first]


def _item(task: str, sample: dict[str, Any], metric: str, gen: dict[str, Any],
          reasoning: dict[str, Any] | None = None, images: tuple[str, ...] = (),
          thumbnails: dict[str, str] | None = None) -> ItemResult:
    """One logged lm-eval sample as an ``ItemResult``; ``gen`` is its generation record (token count, finish),
    ``reasoning`` its thought and token counts (``lm.reasoning``; None without ``chat.think_end``), ``images`` the
    content hashes of its request's images (``item_hash`` then covers them: ``image_item_hash``), ``thumbnails``
    the adapter's image hash -> thumbnail map."""
    metrics = {k: float(sample[k]) for k in sample.get("metrics", []) if isinstance(sample.get(k), (int, float))}
    # An image task's item is keyed by content even when its request carries no image: lm-eval's doc_hash would
    # serialise an image its document holds as a repr with a memory address (pre-flight refuses such items anyway).
    item_hash = image_item_hash(sample, images) if images or _image_request(sample) else str(sample["doc_hash"])
    return ItemResult(
        task=task, item_id=int(sample["doc_id"]), item_hash=item_hash,
        prompt=str(sample["arguments"][0][0]), target=str(sample["target"]),
        output=str(sample["resps"][0][0]), score=float(metrics[metric]), metrics=metrics,
        n_tokens=gen.get("n_tokens"), finish_reason=gen.get("finish_reason"), cluster=_cluster(sample),
        images=tuple({"sha256": h, "thumbnail": (thumbnails or {}).get(h)} for h in images) or None,
        **(reasoning or {}),
    )


def _image_request(sample: dict[str, Any]) -> bool:
    """Whether a logged sample is of an image task: lm-eval adds ``{"visual": ...}`` to its request arguments for
    every item of a task that sets ``doc_to_image``, whether or not that item's yields an image."""
    args = (sample.get("arguments") or [()])[0]
    return len(args) >= 3 and isinstance(args[2], dict) and "visual" in args[2]


def image_item_hash(sample: dict[str, Any], images: tuple[str, ...]) -> str:
    """The item hash of a sample with images: lm-eval's ``doc_hash`` formula (sha256 of the document as indented
    JSON) over the logged document, in which lm-eval has put each image's content hash in place of the image
    (``hash_dict_images``), followed by the request's image hashes. lm-eval's own ``doc_hash`` is taken before that
    substitution and serialises an image as its ``repr`` (mode, size and memory address): it neither sees the pixels
    nor stays the same from run to run. Used for every item of an image task, also one whose request carries no
    image (``images`` empty: then the hash is lm-eval's formula over the logged document, equal to ``doc_hash``
    when the document holds no image); the pre-flight refuses such an item before any engine starts
    (``preflight.check_item_images``), so this only keeps the key stable where the pre-flight did not run."""
    import hashlib
    import json

    from lm_eval.utils import handle_non_serializable

    doc = json.dumps(sample.get("doc"), indent=2, default=handle_non_serializable, ensure_ascii=False)
    return hashlib.sha256("\n".join([doc, *images]).encode("utf-8")).hexdigest()


def _is_loglikelihood(sample: dict[str, Any]) -> bool:
    """A sample of a ``loglikelihood`` / ``multiple_choice`` / ``loglikelihood_rolling`` task: its responses are
    ``(logprob, is_greedy)`` pairs or floats, not generated text."""
    resps = sample.get("resps") or [[""]]
    return not isinstance(resps[0][0], str)


def _choice_item(task: str, sample: dict[str, Any], metric: str, records: dict[str, Any]) -> ItemResult:
    """One logged loglikelihood sample as an ``ItemResult``: ``choices`` holds every request's continuation, its
    log-prob (nats, summed over its tokens), whether greedy decoding would produce it, and its token count;
    ``output`` is the continuation with the highest log-prob (the choice ``acc`` scores), ``target`` the gold one."""
    from evalgate.worker.lm_adapter import loglikelihood_key

    metrics = {k: float(sample[k]) for k in sample.get("metrics", []) if isinstance(sample.get(k), (int, float))}
    args = [tuple(a) for a in sample["arguments"]]
    choices = []
    for a, resp in zip(args, sample["resps"]):
        value = resp[0]
        logprob, greedy = (value[0], value[1]) if isinstance(value, (list, tuple)) else (value, None)
        kind = "loglikelihood" if len(a) == 2 else "loglikelihood_rolling"
        rec = records.get(loglikelihood_key(kind, *a), {})
        choices.append({"continuation": str(a[-1]), "logprob": float(logprob),
                        "is_greedy": None if greedy is None else bool(greedy), "n_tokens": rec.get("n_tokens")})
    best = max(range(len(choices)), key=lambda i: (choices[i]["logprob"], -i))
    target = sample.get("target")
    gold = choices[target]["continuation"] if isinstance(target, int) and 0 <= target < len(choices) else str(target)
    return ItemResult(
        task=task, item_id=int(sample["doc_id"]), item_hash=str(sample["doc_hash"]),
        prompt=str(args[0][0]) if len(args[0]) == 2 else "", target=gold, output=choices[best]["continuation"],
        score=float(metrics[metric]), metrics=metrics, n_tokens=sum(c["n_tokens"] or 0 for c in choices) or None,
        cluster=_cluster(sample), choices=tuple(choices),
    )


def _cluster(sample: dict[str, Any]) -> str | None:
    """The item's source document: the suite's ``doc_group`` in lm-eval's logged ``doc`` (None if absent)."""
    doc = sample.get("doc")
    group = doc.get("doc_group") if isinstance(doc, dict) else None
    return None if group is None else str(group)
