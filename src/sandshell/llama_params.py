"""The free-form model settings: any `llama_cpp.Llama` constructor or chat-completion parameter as
`LLAMA_<NAME>`, checked and typed against llama-cpp-python's own signatures (imported only when
such a setting is given)."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Collection
from typing import Any, get_type_hints

from pydantic import TypeAdapter, ValidationError

# Parameters sandshell sets itself: they are not free-form.
_RESERVED = {
    "model_path",
    "n_ctx",
    "verbose",
    "grammar",
    "stream",
    "messages",
    "functions",
    "tools",
    "tool_choice",
    "function_call",
    "response_format",
    "max_tokens",
    "logits_processor",
    "stopping_criteria",
    "stop",  # from the chat template: another stop string would cut actions mid-way
    "logprobs",  # sandshell shows no log-probabilities (and the two call paths type it differently)
}
# Parameters llama.cpp takes that a user means as something else: what to set instead.
_MEANT = {
    "model": "LLAMA_MODEL is not a setting: the model file is LLAMA_MODEL_PATH, and the model an OpenAI-compatible"
    " server is asked for is LLAMA_OPENAI_MODEL"
}


def near_miss(env: str, known: Collection[str]) -> str:
    """' (did you mean X?)' for a setting's name that is nearly one of `known` of the same prefix
    (compared after it: the shared prefix alone made SANDSHELL_HOST look like SANDSHELL_HOME), else ''."""
    prefix = next((p for p in ("LLAMA_", "SANDSHELL_") if env.startswith(p)), "")
    names = {k[len(prefix) :]: k for k in known if k.startswith(prefix)}
    close = difflib.get_close_matches(env[len(prefix) :], names, n=1, cutoff=0.8)
    return f" (did you mean {names[close[0]]}?)" if close else ""


def llama_signatures() -> tuple[dict[str, inspect.Parameter], dict[str, inspect.Parameter]]:
    """The parameters of `Llama.__init__`, and those sampling parameters that both generation calls
    take (`create_completion` with the model's own chat template, `create_chat_completion`
    otherwise): a setting must work whichever path a model takes."""
    from llama_cpp import Llama

    def params(fn: Any) -> dict[str, inspect.Parameter]:
        try:
            hints = get_type_hints(fn)
        except Exception:  # an annotation that does not resolve: keep the raw ones
            hints = {}
        return {
            name: p.replace(annotation=hints.get(name, p.annotation))
            for name, p in inspect.signature(fn).parameters.items()
        }

    completion = params(Llama.create_completion)
    chat = {k: p for k, p in params(Llama.create_chat_completion).items() if k in completion}
    return params(Llama.__init__), chat


def llama_params(
    extra: dict[str, str], known: Collection[str] = ()
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """`LLAMA_<NAME>` settings as (load parameters, sampling defaults, errors), typed by the signatures;
    `known`: sandshell's own settings' names, for a near miss's hint."""
    if not extra:
        return {}, {}, []
    init, chat = llama_signatures()
    load_params: dict[str, Any] = {}
    sampling: dict[str, Any] = {}
    errors: list[str] = []
    for env, raw in sorted(extra.items()):
        name = env[len("LLAMA_") :].lower()
        target = load_params if name in init else sampling if name in chat else None
        param = init.get(name) or chat.get(name)
        if name in _MEANT:
            errors += [_MEANT[name]] if raw else []  # (empty: as if not set, as every setting)
            continue
        if name in _RESERVED:
            errors.append(f"{env} is chosen by sandshell itself and cannot be set")
            continue
        if target is None or param is None or name in ("self", "kwargs"):
            offered = {*known, *(f"LLAMA_{n.upper()}" for n in {*init, *chat} - _RESERVED - {"self", "kwargs"})}
            errors.append(f"{env} is not a setting sandshell or llama.cpp knows{near_miss(env, offered)}")
            continue
        if raw == "":
            continue
        try:
            target[name] = _coerce_param(param, raw)
        except ValueError as e:
            errors.append(f"{env}={raw!r} {e}")
    return load_params, sampling, errors


def _coerce_param(param: inspect.Parameter, raw: str) -> Any:
    ann = param.annotation
    if isinstance(ann, str) or ann is inspect.Parameter.empty:
        # Postponed annotations: fall back to the default's type, else JSON-ish parsing.
        default = param.default
        tp: Any = type(default) if default not in (None, inspect.Parameter.empty) else Any
    else:
        tp = ann
    if tp is Any:
        for conv in (int, float):
            try:
                return conv(raw)
            except ValueError:
                pass
        return raw
    try:
        return TypeAdapter(tp).validate_strings(raw)
    except (ValidationError, TypeError):
        try:
            return TypeAdapter(tp).validate_python(raw)
        except (ValidationError, TypeError):
            raise ValueError(f"is not a valid value for {param.name}") from None
