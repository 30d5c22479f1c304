"""A failed client's error, as Flower reports it, in one line that says the cause.

Flower's simulation engine turns an exception of a ClientApp (or of the Ray worker running it)
into an error reply whose reason is ``"<class 'module.Type'>:<'message'>"``, the message often
a paragraph. When Ray's memory monitor kills workers because the machine runs low on memory
(``ray.exceptions.OutOfMemoryError``, or ``ActorDiedError`` when the actor was killed between two
tasks), the run used to end with a traceback whose last line was ``only 0 of 2 clients returned a
valid update``, or, when the workers were killed before they answered the server's first query,
with no cause at all. :func:`failure_cause` keeps the type and the first sentence and names memory
exhaustion; :func:`out_of_memory_line` is the run's one error line when Ray's memory monitor is
why it cannot go on: what happened and what to change.
"""

from __future__ import annotations

import re

MAX_CHARS = 300
OUT_OF_MEMORY = ("OutOfMemoryError", "running low on memory", "out of memory", "OOM")
OOM_ADVICE = (
    "the machine ran out of memory and Ray killed the client's worker: run fewer ClientApps at once"
    " (a larger client-resources-num-cpus) or use less memory per client (data.batch_size, a smaller model)"
)
"""How a failed client's cause reads (:func:`failure_cause`) when Ray killed it for memory."""
WHAT_TO_CHANGE = (
    "run fewer ClientApps at once (`flwr run`: a larger client-resources-num-cpus in --federation-config;"
    " run_simulation: a larger backend_config client_resources num_cpus) or use less memory per client"
    " (data.batch_size, a smaller model)"
)
"""What the run's error line says to change when Ray's memory monitor killed its ClientApps."""


def is_out_of_memory(reason: str) -> bool:
    """Whether ``reason`` (an error reply's, or a :func:`failure_cause` line) says Ray's memory
    monitor killed the worker."""
    return any(marker in str(reason) for marker in OUT_OF_MEMORY)


def failure_cause(reason: str) -> str:
    """``reason`` (a Flower error reply's) as ``Type: first sentence``, memory exhaustion named."""
    text = " ".join(str(reason).split())
    match = re.match(r"^<class '([\w.]+)'>:<'(.*)'>$", text)
    kind, message = (match.group(1).rsplit(".", 1)[-1], match.group(2)) if match else ("", text)
    first = re.split(r"(?<=[.!?])\s", message, maxsplit=1)[0] if message else kind
    line = f"{kind}: {first}" if kind and first != kind else first or "no reason given"
    if is_out_of_memory(text):
        line = f"{OOM_ADVICE} ({line})"
    return line if len(line) <= MAX_CHARS else line[: MAX_CHARS - 3] + "..."


def out_of_memory_line(whom: str, outcome: str) -> str:
    """The run's one error line: Ray's memory monitor killed the workers of ``whom`` (``"clients 0,
    1"``), so ``outcome``; then what to change."""
    return (
        f"Ray killed the workers of {whom} because the machine ran low on memory (Ray's memory monitor,"
        f" RAY_memory_usage_threshold), so {outcome}: {WHAT_TO_CHANGE}"
    )
