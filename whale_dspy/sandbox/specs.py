"""What crosses into the child, as plain JSON: the signature, tool descriptions and the LM's profile.

The child rebuilds a look-alike of each (a dspy.Signature, tool stubs with the
real tools' names, signatures and docstrings, an LM with the same model name,
sampling settings and capabilities) and never receives the originals: no
labels, no verifier, no tool state, no API keys.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import dspy
import pydantic

from whale_dspy.errors import ConfigError
from whale_dspy.jsonl import to_jsonable
from whale_dspy.protocols import Tools, is_stateful, stateful_tool

LM_KWARGS = frozenset(
    {
        "frequency_penalty",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "n",
        "presence_penalty",
        "response_format",
        "rollout_id",
        "seed",
        "stop",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
    }
)
"""Request settings that pass between child and parent; anything else (api_base, api_key, model,
headers) is dropped, so a candidate can neither redirect the parent's requests nor see its keys."""

SIMPLE_TYPES: dict[str, type] = {t.__name__: t for t in (str, int, float, bool, list, dict)}


def sampling_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The allowed request settings, as JSON (a pydantic response_format becomes its JSON schema)."""
    out = {}
    for key, value in kwargs.items():
        if key not in LM_KWARGS or value is None:
            continue
        if isinstance(value, type) and issubclass(value, pydantic.BaseModel):
            schema = {"name": value.__name__, "strict": True, "schema": value.model_json_schema()}
            value = {"type": "json_schema", "json_schema": schema}
        out[key] = to_jsonable(value)
    return out


def type_text(annotation: Any) -> str:
    """An annotation as the text a signature string takes (`str`, `list[str]`, `Literal['a']`)."""
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def describe_signature(signature: type[dspy.Signature]) -> dict[str, Any]:
    """The signature as JSON; raises ConfigError when the child could not rebuild it faithfully."""
    fields = []
    for name, info in signature.fields.items():
        extra = info.json_schema_extra or {}
        fields.append(
            {
                "name": name,
                "io": extra.get("__dspy_field_type"),
                "type": type_text(info.annotation),
                "desc": extra.get("desc", ""),
                "prefix": extra.get("prefix", ""),
            }
        )
    description = {"name": signature.__name__, "instructions": signature.instructions, "fields": fields}
    rebuilt = rebuild_signature(description)
    if rebuilt.fields.keys() != signature.fields.keys():
        raise ConfigError(f"signature {signature.__name__} cannot be sent to the sandbox faithfully")
    return description


def rebuild_signature(description: dict[str, Any]) -> type[dspy.Signature]:
    """A dspy.Signature equal in fields, types, descriptions and instructions to the described one."""
    fields = description["fields"]

    def side(io: str) -> str:
        return ", ".join(f"{f['name']}: {f['type']}" for f in fields if f["io"] == io)

    signature = dspy.Signature(f"{side('input')} -> {side('output')}", description["instructions"])
    for field in fields:
        signature = signature.with_updated_fields(field["name"], desc=field["desc"], prefix=field["prefix"])
    return signature


def describe_tools(tools: Tools) -> list[dict[str, Any]]:
    """Each tool's name, docstring, parameters (simple annotations and JSON defaults only) and
    whether it holds an episode's state."""
    return [_describe_tool(name, tool) for name, tool in tools.items()]


def _describe_tool(name: str, tool: Callable[..., Any]) -> dict[str, Any]:
    try:
        parameters = inspect.signature(tool).parameters.values()
    except (TypeError, ValueError):
        parameters = ()
    params = []
    for parameter in parameters:
        annotation = parameter.annotation
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
        spec: dict[str, Any] = {"name": parameter.name, "kind": parameter.kind.name}
        if text in SIMPLE_TYPES:
            spec["annotation"] = text
        if parameter.default is not inspect.Parameter.empty:
            spec["default"] = to_jsonable(parameter.default)
        params.append(spec)
    return {"name": name, "doc": inspect.getdoc(tool) or "", "params": params, "stateful": is_stateful(tool)}


def tool_stub(spec: dict[str, Any], call: Callable[[str, list[Any], dict[str, Any]], Any]) -> Callable:
    """A function that looks like the described tool (for dspy.Tool / ReAct) and forwards to `call`."""

    def stub(*args: Any, **kwargs: Any) -> Any:
        return call(spec["name"], list(args), kwargs)

    parameters, annotations = [], {}
    for param in spec["params"]:
        annotation = SIMPLE_TYPES.get(param.get("annotation", ""), inspect.Parameter.empty)
        default = param.get("default", inspect.Parameter.empty)
        kind = getattr(inspect.Parameter, param["kind"])
        parameters.append(inspect.Parameter(param["name"], kind, default=default, annotation=annotation))
        if annotation is not inspect.Parameter.empty:
            annotations[param["name"]] = annotation
    stub.__name__ = stub.__qualname__ = spec["name"]
    stub.__doc__ = spec["doc"]
    stub.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    stub.__annotations__ = annotations
    return stateful_tool(stub) if spec.get("stateful") else stub


ADAPTERS: dict[str, type[dspy.Adapter]] = {
    cls.__name__: cls for cls in (dspy.ChatAdapter, dspy.JSONAdapter, dspy.XMLAdapter)
}
"""DSPy adapters the child can rebuild by name (the parent's `dspy.settings.adapter`)."""


def adapter_name(adapter: dspy.Adapter | None) -> str | None:
    """The configured adapter by class name (None: DSPy's default); ConfigError for one the child
    cannot rebuild, such as a custom subclass."""
    if adapter is None:
        return None
    if type(adapter).__name__ not in ADAPTERS or type(adapter) is not ADAPTERS[type(adapter).__name__]:
        raise ConfigError(
            f"the sandbox rebuilds only {', '.join(sorted(ADAPTERS))}, not {type(adapter).__name__}"
        )
    return type(adapter).__name__


def lm_profile(lm: dspy.BaseLM) -> dict[str, Any]:
    """What the child's stand-in LM reports: model name, sampling settings, capabilities."""
    profile: dict[str, Any] = {
        "model": str(lm.model),
        "model_type": getattr(lm, "model_type", "chat"),
        "kwargs": sampling_kwargs(dict(lm.kwargs)),
    }
    for name in ("supports_function_calling", "supports_response_schema", "supports_reasoning"):
        profile[name] = _capability(lm, name, False)
    profile["supported_params"] = sorted(_capability(lm, "supported_params", set()))
    return profile


def _capability(lm: dspy.BaseLM, name: str, fallback: Any) -> Any:
    try:
        return getattr(lm, name)
    except Exception:  # a provider lookup that fails means "not supported"
        return fallback
