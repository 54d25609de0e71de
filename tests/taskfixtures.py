"""Task YAML for tests: a local JSON task in lm-eval's format (``dataset_path: json``, one test split)."""

from __future__ import annotations


def json_task(name: str, data_file: str, output_type: str, body: str, metrics: tuple[str, ...]) -> str:
    """The YAML text of task ``name`` reading ``data_file`` (relative to the YAML) as its test split, with the
    ``body`` lines (doc_to_text, ...) and each metric in ``metrics`` aggregated by mean, higher is better."""
    metric_list = "".join(f"  - metric: {m}\n    aggregation: mean\n    higher_is_better: true\n" for m in metrics)
    return (f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files: {{test: {data_file}}}\n"
            f"test_split: test\noutput_type: {output_type}\n{body}metric_list:\n{metric_list}")


class HybridTokenizer:
    """The embedded hybrid's tokenizer (transformers' fast tokenizer from the shipped checkpoint) as an engine hands
    it out, with no chat template of its own (tests give the config's); every other attribute is the tokenizer's."""

    def __init__(self) -> None:
        from transformers import PreTrainedTokenizerFast

        from evalgate.models.hybrid import CHECKPOINT_DIR

        self.hf = PreTrainedTokenizerFast.from_pretrained(str(CHECKPOINT_DIR))
        self.chat_template = None

    def __getattr__(self, name: str):
        return getattr(self.hf, name)
