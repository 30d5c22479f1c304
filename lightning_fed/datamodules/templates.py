"""Prompt templates that turn an instruction (and optional input) into a model prompt.

The Alpaca templates are the ones of Taori et al. (2023), used by FedIT, FedHDS and most
federated instruction-tuning papers; ``plain`` is the bare prompt followed by a newline,
for preference data whose prompts are already complete; ``chat`` is the tokenizer's own
chat template (``tokenizer.apply_chat_template``), the format an Instruct model was tuned
on: the instruction (and input) is the user turn, the response the assistant turn, with an
optional system prompt.

With ``chat`` the text that follows the prompt is the assistant turn as the template
renders it (for ChatML ``"<response><|im_end|>"``), so the model also learns to close its
turn; :func:`format_response` gives it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PromptTemplate:
    """A pair of format strings: one for rows with an input, one for rows without.

    Attributes:
        with_input: Format string with ``{instruction}`` and ``{input}`` fields.
        without_input: Format string with an ``{instruction}`` field only.
    """

    with_input: str
    without_input: str

    def format(self, instruction: str, input: str = "") -> str:  # noqa: A002 - the field's name
        """Fill the template; an empty or whitespace-only input selects ``without_input``."""
        if input and input.strip():
            return self.with_input.format(instruction=instruction, input=input)
        return self.without_input.format(instruction=instruction)


ALPACA = PromptTemplate(
    with_input=(
        "Below is an instruction that describes a task, paired with an input that provides "
        "further context. Write a response that appropriately completes the request.\n\n"
        "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
    ),
    without_input=(
        "Below is an instruction that describes a task. Write a response that appropriately "
        "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n"
    ),
)

PLAIN = PromptTemplate(with_input="{instruction}\n{input}\n", without_input="{instruction}\n")

TEMPLATES: dict[str, PromptTemplate] = {"alpaca": ALPACA, "plain": PLAIN}

CHAT = "chat"
"""The name of the tokenizer's own chat template."""

TEMPLATE_CHOICES = (*TEMPLATES, CHAT)


def check_template(template: str, field: str = "data.template") -> None:
    """Raise a one-line error if ``template`` is not one of :data:`TEMPLATE_CHOICES`."""
    if template not in TEMPLATE_CHOICES:
        raise ValueError(f"`{field}` must be one of {list(TEMPLATE_CHOICES)}, got {template!r}")


def require_chat_template(tokenizer: Any, field: str = "data.template") -> None:
    """Raise a one-line error, naming ``field``, if ``tokenizer`` has no chat template."""
    if tokenizer is None:
        raise ValueError(f"`{field}`: {CHAT!r} needs the model's tokenizer, none was given")
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise ValueError(
            f"`{field}`: {CHAT!r} needs a tokenizer with a chat template, and tokenizer {name!r} has none;"
            f" use one of {list(TEMPLATES)} or a model whose tokenizer has one"
        )


def chat_messages(instruction: str, input: str = "", system_prompt: str | None = None) -> list[dict[str, str]]:  # noqa: A002
    """The conversation of one example: optional system turn, then the user turn.

    The input, when not blank, follows the instruction after a blank line in the same user turn.
    """
    user = f"{instruction}\n\n{input}" if input and input.strip() else instruction
    messages = [{"role": "system", "content": system_prompt}] if system_prompt is not None else []
    return [*messages, {"role": "user", "content": user}]


def format_prompt(
    template: str,
    instruction: str,
    input: str = "",  # noqa: A002
    tokenizer: Any = None,
    system_prompt: str | None = None,
) -> str:
    """Build the prompt for one example.

    Args:
        template: ``alpaca``, ``plain`` or ``chat`` (:data:`TEMPLATE_CHOICES`).
        instruction: The instruction (or, for preference data, the whole prompt).
        input: Optional context; empty selects the template's no-input variant.
        tokenizer: The model's tokenizer; needed by ``chat`` only.
        system_prompt: System turn of ``chat`` (``None``: whatever the chat template does
            without one; SmolLM2's, for example, adds its own default).

    Returns:
        The prompt text, ending where the response starts (for ``chat``: after the
        assistant header, ``add_generation_prompt=True``).

    Raises:
        ValueError: If ``template`` is not a known template name, or ``chat`` is asked of a
            tokenizer without a chat template.
    """
    check_template(template)
    if template == CHAT:
        require_chat_template(tokenizer)
        messages = chat_messages(instruction, input, system_prompt)
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return TEMPLATES[template].format(instruction, input)


def format_response(
    template: str,
    instruction: str,
    response: str,
    input: str = "",  # noqa: A002
    tokenizer: Any = None,
    system_prompt: str | None = None,
    prompt: str | None = None,
) -> str:
    """The text that follows :func:`format_prompt`'s prompt for ``response``.

    For ``alpaca`` and ``plain`` it is the response itself (the tokenizer's eos token is
    appended at tokenization). For ``chat`` it is the assistant turn as the chat template
    renders it, end-of-turn marker included and trailing whitespace dropped.

    Args:
        template: As for :func:`format_prompt`.
        instruction: As for :func:`format_prompt`.
        response: The assistant's response.
        input: As for :func:`format_prompt`.
        tokenizer: As for :func:`format_prompt`.
        system_prompt: As for :func:`format_prompt`.
        prompt: The prompt already built by :func:`format_prompt` (saves rendering it again).

    Raises:
        ValueError: If the chat template renders the conversation with the assistant turn
            so that it does not start with the generation prompt (then the prompt/response
            boundary is not well defined).
    """
    check_template(template)
    if template != CHAT:
        return response
    require_chat_template(tokenizer)
    messages = chat_messages(instruction, input, system_prompt)
    if prompt is None:
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template([*messages, {"role": "assistant", "content": response}], tokenize=False)
    if not full.startswith(prompt):
        raise ValueError(
            "`data.template`: 'chat': the tokenizer's chat template renders the assistant turn so that"
            " the conversation does not start with the generation prompt; use alpaca or plain"
        )
    return full[len(prompt) :].rstrip()
