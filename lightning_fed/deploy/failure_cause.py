"""A failed client's error, as Flower reports it, in one line that says the cause.

Flower's simulation engine turns an exception of a ClientApp (or of the Ray worker running it)
into an error reply whose reason is ``"<class 'module.Type'>:<'message'>"``, the message often
a paragraph. When Ray kills workers because the machine runs low on memory, the run used to
end with ``only 0 of 2 clients returned a valid update`` and the cause was only in the log
above it. :func:`failure_cause` keeps the type and the first sentence, and names memory
exhaustion and what to change.
"""

from __future__ import annotations

import re

MAX_CHARS = 300
OUT_OF_MEMORY = ("OutOfMemoryError", "running low on memory", "out of memory", "OOM")
OOM_ADVICE = (
    "the machine ran out of memory and Ray killed the client's worker: run fewer ClientApps at once"
    " (a larger client-resources-num-cpus) or use less memory per client (data.batch_size, a smaller model)"
)


def failure_cause(reason: str) -> str:
    """``reason`` (a Flower error reply's) as ``Type: first sentence``, memory exhaustion named."""
    text = " ".join(str(reason).split())
    match = re.match(r"^<class '([\w.]+)'>:<'(.*)'>$", text)
    kind, message = (match.group(1).rsplit(".", 1)[-1], match.group(2)) if match else ("", text)
    first = re.split(r"(?<=[.!?])\s", message, maxsplit=1)[0] if message else kind
    line = f"{kind}: {first}" if kind and first != kind else first or "no reason given"
    if any(marker in text for marker in OUT_OF_MEMORY):
        line = f"{OOM_ADVICE} ({line})"
    return line if len(line) <= MAX_CHARS else line[: MAX_CHARS - 3] + "..."
