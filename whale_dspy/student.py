"""Any `dspy.Module` as a harness: the source its class needs, plus a generated `build` entry.

The convention (docs/python.md, "What happens to your program"): a user's program becomes the harness

    <the imports, signatures, helpers and class its class needs, cut from its module>
    <a generated `build(signature, tools)` that constructs the class again with the
     arguments the program was constructed with>

Constructor arguments are read back from attributes of the same name (`self.search =
search`, DSPy's own style) or, where absent, taken from the parameter's default; then the
rebuilt program is checked against the user's (same predictors, same state). Data arguments
are written into `build` as literals, classes the module defines by name, and everything
callable the program holds (a retriever, a tool function, an API call) is handed to every
candidate as a tool: it runs here, in the parent, also for a sandboxed candidate. State a
DSPy optimizer left on the program (demos, instructions) is written into the source too, so
the search starts from the program as it is. A candidate is any rewrite that still defines
`build(signature, tools)`; the shipped seed harnesses are written that way by hand.
"""

from __future__ import annotations

import inspect
import json
import pprint
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import dspy

from whale_dspy.class_source import module_of, source_needed_by
from whale_dspy.errors import ConfigError
from whale_dspy.harness import HarnessProgram, HarnessSource, load_build
from whale_dspy.protocols import Tools
from whale_dspy.records import TASK_GROUP

ENTRY_MARK = "# -- whale-dspy entry (generated): how the optimizer builds this program; keep `build` --"
STATE_NAME = "STUDENT_STATE"


def as_harness(
    student: dspy.Module,
    *,
    examples: Sequence[dspy.Example] = (),
    signature: type[dspy.Signature] | None = None,
) -> HarnessProgram:
    """The student as a HarnessProgram: a HarnessProgram as it is, any other module through its
    class's source; ConfigError, before any rollout, when that cannot be done faithfully."""
    if isinstance(student, HarnessProgram):
        return student
    if not isinstance(student, dspy.Module):
        raise ConfigError(f"a student is a dspy.Module, got {type(student).__name__}")
    cls = type(student)
    module = module_of(cls)
    entry = _Entry.of(student, module)
    code = _harness_code(cls, module, entry, state=None)
    held = HeldTools(entry.held)
    rebuilt = _rebuild(cls, code, held)
    _check_structure(student, rebuilt)
    state = _state(student)
    if _state(rebuilt) != state:  # a DSPy optimizer (or the user) changed it after construction
        code = _harness_code(cls, module, entry, state=state)
        if _state(_rebuild(cls, code, held)) != state:
            raise ConfigError(f"{cls.__name__}: its state cannot be carried into its harness source")
    source = HarnessSource(name=cls.__name__, code=code).vouched()  # the user's own code, and ours
    program = HarnessProgram(
        source, signature or signature_from(examples, cls.__name__), held, _shared_lm(student)
    )
    for (_, mine), (_, theirs) in zip(program.named_predictors(), student.named_predictors(), strict=True):
        mine.lm = theirs.lm  # the LM each predictor was set to, as DSPy optimizers expect to find it
    return program


def check_metric(metric: Callable[..., Any]) -> None:
    """ConfigError unless `metric(example, prediction, trace=None)` can be called (DSPy's metric shape)."""
    try:
        inspect.signature(metric).bind(dspy.Example(), dspy.Prediction())
    except TypeError as error:
        raise ConfigError(
            f"the metric must take (example, prediction, trace=None) as DSPy metrics do: {error}"
        ) from error
    except ValueError:  # a builtin without a signature: let it be tried
        pass


NOT_OUTPUTS = ("task_id", TASK_GROUP)
"""Label fields that name a task rather than answer it."""


def signature_from(examples: Sequence[dspy.Example], name: str = "Task") -> type[dspy.Signature]:
    """The task's signature as the examples show it: their input fields -> their label fields.

    A generated `build` does not read it; the sandbox uses it to warm DSPy up, and harness files
    in the seed convention receive it."""
    if not examples:
        return dspy.Signature("question -> answer", f"The {name} task.")
    first = examples[0]
    try:
        inputs = list(first.inputs().keys())
    except ValueError as error:
        raise ConfigError("the examples need .with_inputs(...) to say which fields are inputs") from error
    outputs = [name for name in first.labels().toDict() if name not in NOT_OUTPUTS] or ["answer"]
    return dspy.Signature(f"{', '.join(inputs)} -> {', '.join(outputs)}", f"The {name} task.")


class HeldTools:
    """The tools factory of a user's program: what it holds, the same for every task (picklable
    when what it holds is)."""

    def __init__(self, held: Tools):
        self.held = dict(held)

    def __call__(self, example: dspy.Example) -> Tools:
        return dict(self.held)


# -- what the program was constructed with -------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    """The generated constructor call: keyword -> expression, plus the callables it hands over."""

    arguments: dict[str, str]
    held: Tools
    names: frozenset[str]
    """Top-level names of the module the arguments refer to (their definitions go into the source)."""

    @classmethod
    def of(cls, student: dspy.Module, module: ModuleType) -> _Entry:
        init = type(student).__init__
        if init is dspy.Module.__init__:
            return cls({}, {}, frozenset())
        arguments: dict[str, str] = {}
        writer = _ArgumentWriter(module, type(student).__name__)
        for parameter in list(inspect.signature(init).parameters.values())[1:]:
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                raise ConfigError(
                    f"{type(student).__name__}.__init__ takes *{parameter.name}: its arguments cannot be "
                    "replayed for each candidate; name every constructor parameter"
                )
            if parameter.name in vars(student):
                value = vars(student)[parameter.name]
            elif parameter.default is not parameter.empty:
                value = parameter.default
            else:
                raise ConfigError(
                    f"{type(student).__name__}(...) argument {parameter.name!r} cannot be replayed for each "
                    f"candidate: keep it as `self.{parameter.name} = {parameter.name}` in __init__"
                )
            arguments[parameter.name] = writer.expression(parameter.name, value)
        return cls(arguments, writer.held, frozenset(writer.names))


class _ArgumentWriter:
    """Turns one constructor argument into source: literals, module names, or a held tool."""

    def __init__(self, module: ModuleType, owner: str):
        self.module, self.owner = module, owner
        self.held: Tools = {}
        self.names: set[str] = set()

    def expression(self, path: str, value: Any) -> str:
        if value is None or isinstance(value, (bool, int, float, str)):
            return repr(value)
        if isinstance(value, (list, tuple)):
            items = [self.expression(f"{path}[{i}]", item) for i, item in enumerate(value)]
            text = ", ".join(items) + ("," if isinstance(value, tuple) and len(items) == 1 else "")
            return f"[{text}]" if isinstance(value, list) else f"({text})"
        if isinstance(value, dict) and all(isinstance(key, str) for key in value):
            items = [f"{key!r}: {self.expression(f'{path}[{key!r}]', item)}" for key, item in value.items()]
            return "{" + ", ".join(items) + "}"
        if isinstance(value, type):
            return self._module_name(path, value)
        if isinstance(value, dspy.Tool):
            key = self._hold(path, value.func)
            return f"dspy.Tool(tools[{key!r}], name={value.name!r}, desc={value.desc!r})"
        if isinstance(value, dspy.Module):
            raise ConfigError(
                f"{self.owner}(...) argument {path!r} is a DSPy module: candidates rewrite modules as "
                "source, so build it inside __init__ instead of passing it in"
            )
        if callable(value):
            return f"tools[{self._hold(path, value)!r}]"
        raise ConfigError(
            f"{self.owner}(...) argument {path!r} is a {type(value).__name__}, which cannot be handed to a "
            "candidate harness (it may run in a sandboxed process): pass plain data, a class defined in "
            "the program's module, or a function (or dspy.Tool) that calls it"
        )

    def _module_name(self, path: str, value: type) -> str:
        names = [name for name, held in vars(self.module).items() if held is value]
        if not names:
            raise ConfigError(
                f"{self.owner}(...) argument {path!r} is {value!r}, which the program's module does not "
                "define: define it there (a signature, say) so candidates can see and change it"
            )
        self.names.add(names[0])
        return names[0]

    def _hold(self, path: str, function: Callable[..., Any]) -> str:
        """Tools are keyed by their own name where it is a free identifier (what the LM sees in a
        sandbox's stand-in), else by where they sit in the constructor call."""
        name = getattr(function, "__name__", "")
        key = name if name.isidentifier() and name not in self.held and name != "<lambda>" else path
        key = "".join(c if c.isalnum() else "_" for c in key).strip("_")
        while key in self.held:
            key += "_"
        self.held[key] = function
        return key


def _harness_code(cls: type, module: ModuleType, entry: _Entry, state: dict[str, Any] | None) -> str:
    """The source the class needs from its module, then the generated entry."""
    needed = source_needed_by(module, {cls.__name__, *entry.names})
    return f"{needed}\n\n\n{_entry_code(cls.__name__, entry, state)}"


def _entry_code(class_name: str, entry: _Entry, state: dict[str, Any] | None) -> str:
    call = f"{class_name}({', '.join(f'{key}={value}' for key, value in entry.arguments.items())})"
    doc = f'    """{class_name} as the student was constructed; `tools` holds what it was handed."""\n'
    if state is None:
        return f"{ENTRY_MARK}\n\n\ndef build(signature, tools):\n{doc}    return {call}\n"
    literal = pprint.pformat(json.loads(json.dumps(state)), width=100, sort_dicts=False)
    return (
        f"{ENTRY_MARK}\n\n{STATE_NAME} = {literal}\n"
        f'"""Demos and instructions the student carried (DSPy `dump_state`), set after construction."""\n\n\n'
        f"def build(signature, tools):\n{doc}    program = {call}\n"
        f"    program.load_state({STATE_NAME})\n    return program\n"
    )


# -- checks ---------------------------------------------------------------------------------------


def _rebuild(cls: type, code: str, held: HeldTools) -> dspy.Module:
    try:
        return load_build(HarnessSource(name=cls.__name__, code=code).vouched())(None, held(dspy.Example()))
    except Exception as error:
        raise ConfigError(
            f"{cls.__name__} cannot be rebuilt from its source and constructor arguments: "
            f"{type(error).__name__}: {error}"
        ) from error


def _check_structure(student: dspy.Module, rebuilt: dspy.Module) -> None:
    def shape(program: dspy.Module) -> list[tuple[str, tuple[str, ...]]]:
        return [(name, tuple(p.signature.fields)) for name, p in program.named_predictors()]

    if shape(student) != shape(rebuilt):
        raise ConfigError(
            f"rebuilding {type(student).__name__} from its source and constructor arguments gives "
            f"predictors {shape(rebuilt)}, not {shape(student)}: keep each constructor argument as "
            "`self.<name>` and build predictors in __init__"
        )


def _state(program: dspy.Module) -> dict[str, Any]:
    """The program's predictor state without LMs (the optimizer chooses the LM)."""
    state = program.dump_state()
    return json.loads(json.dumps({name: {**s, "lm": None} for name, s in state.items()}, default=str))


def _shared_lm(program: dspy.Module) -> dspy.BaseLM | None:
    lms = {id(p.lm): p.lm for _, p in program.named_predictors() if p.lm is not None}
    return next(iter(lms.values())) if len(lms) == 1 else None
