"""Rows in, tasks out: load rows from Hugging Face or local files and turn them into `Task`s.

`hf_rows` reads a Hugging Face dataset through the datasets-server HTTP API, paginated and
cached. `jsonl_rows`, `json_rows` and `csv_rows` read local files. `tasks_from` maps rows to
tasks by column name, format string or callable. Every loader returns plain `dict` rows, so they
compose with any of them.

Left out on purpose: the `datasets` library and Parquet/Arrow downloads (the rows API needs only
`httpx`), streaming, shuffling and train/test splitting (the engine samples tasks and holds out
its own validation set), and image/audio cells (they arrive as whatever JSON the server sends).

The names are imported when first used (`agentdescent._exports`): reading a local file does not
import the Hugging Face reader and its HTTP plumbing.
"""

# ruff: noqa: F401 - the imports under TYPE_CHECKING are there to be read, not used
from typing import TYPE_CHECKING

from agentdescent._exports import by_name, lazy

if TYPE_CHECKING:  # the same names, read by type checkers
    from agentdescent.dataloader.huggingface import hf_rows
    from agentdescent.dataloader.local import csv_rows, json_rows, jsonl_rows
    from agentdescent.dataloader.tasks import tasks_from

_WHERE = by_name({
    "agentdescent.dataloader.huggingface": "hf_rows",
    "agentdescent.dataloader.local": "csv_rows json_rows jsonl_rows",
    "agentdescent.dataloader.tasks": "tasks_from",
})
__getattr__, __dir__ = lazy(__name__, _WHERE)

__all__ = ["csv_rows", "hf_rows", "json_rows", "jsonl_rows", "tasks_from"]
