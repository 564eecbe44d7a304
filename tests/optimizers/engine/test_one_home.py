"""Each default a run, a search and an evaluation share has one home: `whale search` reads the
harness phase's sizes from the cpu preset that `whale run` uses, not from its own literals."""

from __future__ import annotations

import ast
from pathlib import Path

from optimizers.engine.presets import get_preset
from whale_cli.main import build_parser


def test_whale_search_defaults_are_the_cpu_presets_harness_phase():
    args = build_parser().parse_args(["search", "--domain", "math"])
    phase = get_preset("cpu").meta_harness_config()
    given = (args.iterations, args.patience, args.candidates, args.tasks, args.threads)
    assert given == (phase.max_iterations, phase.patience, phase.candidates, phase.tasks, phase.threads)


SHARED_SETTINGS = {"temperature", "max_tokens", "threads", "eval_k", "eval_threads", "preset"}
"""Settings many layers pass down: each is defaulted once, in whale_dspy/defaults.py (the preset in
optimizers/engine/presets.py, DEFAULT_PRESET)."""
PRESET_LOOKUPS = {"get_preset", "for_preset"}
"""Calls that take the preset by name as their first argument."""
PRESET_HOMES = {
    Path("whale_dspy/defaults.py"),  # the one home
    Path("optimizers/weights/config.py"),  # RFTConfig.cpu()/gpu(): a preset's own phase sizes
    Path("optimizers/engine/presets.py"),
    Path("whale_dspy/backends/gpu_sizing.py"),  # threads sized from the GPUs found
}
NOT_DEFAULTS = {
    # (file, setting): literals that are not a default a caller could have meant to share
    (Path("whale_dspy/backends/adapter_probe.py"), "temperature"),  # the probe's protocol: greedy,
    (Path("whale_dspy/backends/adapter_probe.py"), "max_tokens"),  # one token, scored by logprobs
    (Path("whale_dspy/sandbox/limits.py"), "max_tokens"),  # a ceiling on what a harness may ask
    (Path("whale_cli/smoke.py"), "max_tokens"),  # a smoke test's one short answer
    (Path("whale_dspy/sandbox/session.py"), "threads"),  # one contained rollout runs one thread
}


def literal_defaults(tree: ast.AST) -> list[tuple[str, int]]:
    """(setting, line) of every literal given to a shared setting (a number; a preset's name): a
    parameter default, a dataclass field, a keyword argument, a dict entry, a command-line flag's
    default, or the preset named to `get_preset` / `for_preset`."""
    found = []

    def literal(setting: object, node: ast.AST | None) -> bool:
        kinds = (str,) if setting == "preset" else (int, float)
        return isinstance(node, ast.Constant) and type(node.value) in kinds

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
            found += [(a.arg, d.lineno) for a, d in pairs if a.arg in SHARED_SETTINGS and literal(a.arg, d)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.target.id in SHARED_SETTINGS and literal(node.target.id, node.value):
                found.append((node.target.id, node.lineno))
        elif isinstance(node, ast.keyword) and node.arg in SHARED_SETTINGS and literal(node.arg, node.value):
            found.append((node.arg, node.value.lineno))
        elif isinstance(node, ast.Call) and PRESET_LOOKUPS & {
            getattr(node.func, "attr", None),
            getattr(node.func, "id", None),
        }:
            if node.args and literal("preset", node.args[0]):
                found.append(("preset", node.args[0].lineno))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            keywords = {keyword.arg: keyword.value for keyword in node.keywords}
            dest = keywords.get("dest")
            name = dest.value if isinstance(dest, ast.Constant) else None
            if name is None and node.args and isinstance(node.args[0], ast.Constant):
                name = str(node.args[0].value).lstrip("-").replace("-", "_")
            if name in SHARED_SETTINGS | {"k"} and literal(name, keywords.get("default")):
                found.append((name, keywords["default"].lineno))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if (
                    isinstance(key, ast.Constant)
                    and key.value in SHARED_SETTINGS
                    and literal(key.value, value)
                ):
                    found.append((key.value, value.lineno))
    return found


def test_shared_settings_are_defaulted_only_in_their_home():
    root = Path(__file__).resolve().parents[3]
    strays = []
    for package in ("whale_dspy", "optimizers", "whale_cli", "domains"):
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root)
            if relative in PRESET_HOMES or relative.parts[:2] == ("whale_dspy", "testing"):
                continue
            for setting, line in literal_defaults(ast.parse(path.read_text(), str(path))):
                if (relative, setting) not in NOT_DEFAULTS:
                    strays.append(f"{relative}:{line}: {setting}")
    assert not strays, "defaults outside their home (whale_dspy/defaults.py, presets.py):\n" + "\n".join(
        strays
    )


def test_the_scan_finds_each_form_of_a_literal_default():
    source = (
        "def f(a, temperature=0.7, *, threads=4): ...\n"
        "class C:\n    max_tokens: int = 128\n"
        "g(eval_k=2)\n"
        "d = {'temperature': 0.0}\n"
        "def ok(threads=THREADS, temperature=None): ...\n"
        "p.add_argument('--eval-k', dest='eval_k', type=int, default=4)\n"
        "p.add_argument('--k', type=int, default=8)\n"
        "p.add_argument('--threads', type=int, default=THREADS)\n"
        "p.add_argument('--preset', default='cpu')\n"
        "SEARCH = get_preset('cpu')\n"
        "c = WhaleConfig.for_preset('gpu', seed=0)\n"
        "g(threads='4', preset=2)\n"
    )
    assert sorted(literal_defaults(ast.parse(source))) == sorted(
        [
            ("temperature", 1),
            ("threads", 1),
            ("max_tokens", 3),
            ("eval_k", 4),
            ("temperature", 5),
            ("eval_k", 7),
            ("k", 8),
            ("preset", 10),
            ("preset", 11),
            ("preset", 12),
        ]
    )
