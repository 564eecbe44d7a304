"""The child's Python-level guard: import allowlist, trimmed builtins and an audit hook.

Armed once DSPy and every allowed module are imported, just before the
candidate's code is executed; it is never disarmed. The audit hook (PEP 578)
refuses process creation, sockets, ctypes, file access other than reading
Python modules, and frame/code introspection from candidate code. A refused
operation raises `Refused` in the candidate, and the violation is recorded for
the rollout (or for the whole candidate when it happens at load time), so a
candidate that swallows the exception is still scored as a failure.

This layer is best effort: Python code can reach any object in its process.
The OS limits in `confine` are what hold when it is bypassed.
"""

from __future__ import annotations

import builtins
import os
import sys
import threading
from collections.abc import Iterable
from typing import Any

from whale_dspy.sandbox.allowlist import import_allowed

REFUSED_BUILTINS = frozenset(
    {"breakpoint", "compile", "eval", "exec", "globals", "input", "locals", "open", "vars"}
)
"""Builtins replaced by functions that refuse (and record a forbidden call) in candidate code."""

REMOVED_BUILTINS = frozenset({"copyright", "credits", "exit", "help", "license", "quit"})
"""Interactive helpers that `site` adds; the candidate module does not get them."""

DENIED_EVENTS = frozenset(
    {
        "builtins.breakpoint",
        "builtins.input",
        "code.__new__",
        "gc.get_objects",
        "gc.get_referents",
        "gc.get_referrers",
        "mmap.__new__",
        "pickle.find_class",
        "pty.spawn",
        "resource.prlimit",
        "resource.setrlimit",
        "subprocess.Popen",
        "sys._current_frames",
        "sys.addaudithook",
        "urllib.Request",
        "webbrowser.open",
    }
)
DENIED_PREFIXES = (
    "ctypes.",
    "ftplib.",
    "http.client.",
    "marshal.",
    "os.",
    "shutil.",
    "smtplib.",
    "socket.",
    "sqlite3.",
    "_thread.start_new_thread",
)
"""Audit events refused outright once armed. Every `os.*` event is refused: system, exec, spawn,
fork, kill, remove, rename, mkdir, chmod, listdir, scandir, putenv, chdir and the rest."""

LISTING_EVENTS = frozenset({"os.listdir", "os.scandir"})
"""Allowed for sys.path entries and under the module roots: the import system lists directories."""

IMPORT_SYSTEM = "importlib._bootstrap_external"

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
MODULE_SUFFIXES = (".py", ".pyc", ".so")


class Refused(PermissionError):
    """Raised in candidate code for a refused import or operation; `reason` names the category."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


class Guard:
    """Holds the allowlist, the candidate's module name and the violations seen per thread."""

    def __init__(self, allowed: Iterable[str]):
        self.allowed = frozenset(allowed)
        self.module_name = ""
        self.read_roots: tuple[str, ...] = ()
        self.list_roots: tuple[str, ...] = ()
        self.armed = False
        self._local = threading.local()
        self._load_violation: tuple[str, str] | None = None

    # -- violations -------------------------------------------------------------------------

    def refuse(self, reason: str, detail: str) -> Refused:
        """Record the first violation of the current job (or of the load) and build the exception."""
        if getattr(self._local, "in_job", False):
            if self._local.violation is None:
                self._local.violation = (reason, detail)
        elif self._load_violation is None:
            self._load_violation = (reason, detail)
        return Refused(reason, detail)

    def begin_job(self) -> None:
        self._local.in_job = True
        self._local.violation = None

    def end_job(self) -> tuple[str, str] | None:
        self._local.in_job = False
        return self._local.violation

    def load_violation(self) -> tuple[str, str] | None:
        return self._load_violation

    # -- imports and builtins ---------------------------------------------------------------

    def guarded_import(
        self, name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
    ) -> Any:
        """`__import__` for candidate code: refuses relative imports and modules outside the allowlist."""
        if level or not import_allowed(name, fromlist or (), self.allowed):
            shown = "." * level + name
            raise self.refuse(
                "forbidden import", f"module {shown!r} is outside the sandbox's import allowlist"
            )
        return builtins.__import__(name, globals, locals, fromlist, level)

    def candidate_builtins(self) -> dict[str, Any]:
        """The builtins the candidate module sees: refusing stand-ins for the dangerous ones."""
        names = {k: v for k, v in vars(builtins).items() if k not in REMOVED_BUILTINS}
        names.update({name: self._refuser(name) for name in REFUSED_BUILTINS})
        names["__import__"] = self.guarded_import
        return names

    def _refuser(self, name: str) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise self.refuse("forbidden call", f"{name}() is not available in the sandbox")

        refuse.__name__ = name
        return refuse

    # -- audit hook -------------------------------------------------------------------------

    def arm(self, module_name: str, read_roots: Iterable[str], list_roots: Iterable[str]) -> None:
        """Install the audit hook (for the life of the process) and start refusing.

        read_roots: where Python modules may be read from (lazy imports); list_roots: directories
        the import system may list (the sys.path entries).
        """
        self.module_name = module_name
        self.read_roots = _prefixes(read_roots)
        self.list_roots = _prefixes(list_roots)
        sys.addaudithook(self._audit)
        self.armed = True

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.armed or getattr(self._local, "auditing", False):
            return
        self._local.auditing = True
        try:
            detail = self._denial(event, args)
        finally:
            self._local.auditing = False
        if detail:
            raise self.refuse("forbidden call", detail)

    def _denial(self, event: str, args: tuple[Any, ...]) -> str | None:
        if event == "marshal.loads" and self._caller_module() == IMPORT_SYSTEM:
            return None  # a lazy import reading a .pyc file
        if event in DENIED_EVENTS or (event.startswith(DENIED_PREFIXES) and event not in LISTING_EVENTS):
            return f"{event} is not allowed in the sandbox"
        if event == "open" and not self._module_read(*args[:3]):
            return f"open({args[0]!r}) is not allowed in the sandbox"
        if event in LISTING_EVENTS and not (
            _under(args[0], self.read_roots) or _under(args[0], self.list_roots, exact=True)
        ):
            return f"{event}({args[0]!r}) is not allowed in the sandbox"
        if event == "object.__getattr__" and self._caller_module() == self.module_name:
            return f"reading the attribute {args[1]!r} is not allowed in the sandbox"
        return None

    def _module_read(self, path: Any, mode: Any = None, flags: Any = 0) -> bool:
        """Only reading Python modules under the import roots (lazy imports) is allowed."""
        writing = bool(set(mode) & set("wax+")) if isinstance(mode, str) else bool((flags or 0) & WRITE_FLAGS)
        if writing or not isinstance(path, str) or not path.endswith(MODULE_SUFFIXES):
            return False
        return _under(path, self.read_roots)

    def _caller_module(self) -> str | None:
        """The module of the Python frame that raised the event (for C-level events, its caller)."""
        frame = sys._getframe(3)  # 0 this, 1 _denial, 2 _audit, 3 the frame behind the event
        return frame.f_globals.get("__name__") if frame is not None else None


def _prefixes(roots: Iterable[str]) -> tuple[str, ...]:
    return tuple(os.path.join(os.path.realpath(root), "") for root in roots if root)


def _under(path: Any, roots: tuple[str, ...], *, exact: bool = False) -> bool:
    """Whether `path` lies under one of `roots` (or, with exact, is one of them)."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        return False
    resolved = os.path.join(os.path.realpath(path), "")
    return resolved in roots if exact else resolved.startswith(roots)
