"""Where a study lives, so many `whale study` workers share it, and how a dead worker's trial gets failed.

Storage URLs: none (in memory, one process), `sqlite:///file.db`, `postgresql://...`,
`mysql://...` (Optuna's RDBStorage) or `journal:///path/file.log` (Optuna's
JournalStorage on a file, for file systems where SQLite locking is unreliable).

A worker killed with -9 leaves its trial RUNNING. RDBStorage has heartbeats:
each running trial's heartbeat is refreshed every `heartbeat_interval` seconds
and `optuna.storages.fail_stale_trials` fails trials silent for longer than
`grace_period` (Optuna also calls it before every new trial); `first_beat` stores a
trial's first heartbeat before its run starts, since Optuna never finds stale a trial
that has not beaten yet. JournalStorage has
no heartbeat in Optuna, so `JournalHeartbeat` keeps the same lease in a user
attribute and `fail_stale_trials` here applies the same rule to it.

A trial failed that way is retried: Optuna's `RetryHeartbeatStaleTrialCallback`
queues a WAITING copy (same parameters, `retried_trial_number` naming the
original) for the next free worker, on both storages. A trial that fails on its
own (its run raised) is never RUNNING-and-silent, so it is not retried.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import logging
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whale_dspy.errors import ConfigError

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial
    from sqlalchemy.engine import Connection, Engine

logger = logging.getLogger(__name__)

RDB_SCHEMES = ("sqlite", "postgresql", "mysql")
DRIVER_HINTS = {"postgresql": "pip install 'whale-dspy[postgres]' (psycopg 3, SQLAlchemy 2.1's default)"}
JOURNAL_SCHEME = "journal"
HEARTBEAT_ATTR = "heartbeat"
"""User attribute (unix seconds) that journal-storage workers refresh while a trial runs."""


@dataclass(frozen=True)
class Lease:
    """How often a running trial proves its worker alive, how long silence is tolerated, and how
    many times a trial whose worker went silent is queued again (0: only failed)."""

    heartbeat_interval: int = 60
    grace_period: int = 180
    retries: int = 1

    def __post_init__(self) -> None:
        if self.heartbeat_interval < 1 or self.grace_period <= self.heartbeat_interval:
            raise ConfigError(
                "heartbeat_interval must be >= 1 s and grace_period longer than it, got "
                f"{self.heartbeat_interval} and {self.grace_period}"
            )
        if self.retries < 0:
            raise ConfigError(f"retries must be >= 0, got {self.retries}")

    def retry_callback(self) -> Callable[[optuna.Study, FrozenTrial], None]:
        """Optuna's re-queueing of a stale trial, handed to RDBStorage and called for journal trials."""
        import optuna

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=self.retries)


SCHEMA_RACE_RETRIES = 5


def open_storage(url: str | None, lease: Lease = Lease()) -> optuna.storages.BaseStorage:
    """Open (and for RDB, connect to) a storage; any failure is a ConfigError naming the valid forms."""
    import optuna

    if not url:
        return optuna.storages.InMemoryStorage()
    scheme = url.split(":", 1)[0].split("+", 1)[0]
    if scheme == JOURNAL_SCHEME:
        return _open_journal(url)
    if scheme not in RDB_SCHEMES:
        raise ConfigError(
            f"unsupported storage URL {url!r}: use sqlite:///FILE, postgresql://..., mysql://... "
            "or journal:///FILE (or omit it for an in-memory study)"
        )
    with _schema_lock(url):
        return _connect_rdb(url, lease, sqlite=scheme == "sqlite")


def _connect_rdb(url: str, lease: Lease, *, sqlite: bool) -> optuna.storages.BaseStorage:
    import optuna

    shown = _without_password(url)
    for attempt in itertools.count():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = optuna.storages.RDBStorage(
                    url,
                    engine_kwargs=_sqlite_engine_kwargs() if sqlite else None,
                    heartbeat_interval=lease.heartbeat_interval,
                    grace_period=lease.grace_period,
                    heartbeat_stale_trial_callback=lease.retry_callback(),
                )
            if sqlite:
                _begin_immediate(storage.engine)
            return storage
        except ImportError as error:  # SQLAlchemy imports the URL's driver (psycopg, MySQLdb) lazily
            missing = error.__cause__ or error  # Optuna re-raises the driver's ImportError as its own
            hint = DRIVER_HINTS.get(url.split(":", 1)[0], "install the database driver that the URL names")
            raise ConfigError(
                f"cannot open storage {shown!r}: its database driver is not installed ({missing}); {hint}"
            ) from error
        except Exception as error:  # sqlalchemy's errors, a refused connection, a bad URL
            # Workers started together on a new server database race to create its tables; the
            # loser sees "already exists" or a duplicate alembic version and succeeds once the
            # winner has committed. (SQLite files are serialised by _schema_lock instead.)
            if not _lost_schema_race(error) or attempt >= SCHEMA_RACE_RETRIES:
                raise ConfigError(
                    f"cannot open storage {shown!r}: {type(error).__name__}: {error}"
                ) from error
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable: itertools.count never ends")


SQLITE_BUSY_TIMEOUT_S = 60.0
"""How long a SQLite worker waits for another's write lock (pysqlite's default: 5 s)."""


def _sqlite_engine_kwargs() -> dict[str, Any]:
    """A dict of its own per storage: RDBStorage keeps, and for MySQL edits, the one it is given."""
    return {"connect_args": {"timeout": SQLITE_BUSY_TIMEOUT_S}}


def _begin_immediate(engine: Engine) -> None:
    """Start every transaction on a SQLite file with BEGIN IMMEDIATE (SQLAlchemy's pysqlite
    recipe for transactions, with IMMEDIATE).

    Optuna reads a trial's state and then updates it under SELECT ... FOR UPDATE, which SQLite
    ignores, and pysqlite opens its transaction only at the write: two workers could both read a
    queued trial as WAITING and both run it, and the slower one crashed with "Cannot tell a
    COMPLETE trial". Taking the write lock when the transaction begins makes the second worker
    read the first one's RUNNING. The pool is emptied so that no connection predates the hooks.
    Limits: a second connection opened while a session is open in the same thread now waits for
    the busy timeout (Optuna does that only in its schema check, which runs before this), and an
    unpickled RDBStorage rebuilds its engine without these hooks (nothing here pickles one).
    """
    from sqlalchemy import event

    def autocommit_driver(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # pysqlite emits no BEGIN of its own

    def begin_with_write_lock(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    event.listen(engine, "connect", autocommit_driver)
    event.listen(engine, "begin", begin_with_write_lock)
    engine.dispose()


def _without_password(url: str) -> str:
    """The URL as error messages show it: a database password must not land in logs."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return url


RACE_SIGNS = ("already exists", "database is locked", "unique constraint", "duplicate")


def _lost_schema_race(error: Exception) -> bool:
    return any(sign in str(error).lower() for sign in RACE_SIGNS)


def _schema_lock(url: str) -> contextlib.AbstractContextManager[object]:
    """An inter-process lock beside a SQLite file while Optuna creates or migrates its tables.

    Optuna creates the schema and stamps its alembic version in separate steps, so two workers
    opening a new file together can each fail a different step; holding a file lock makes the
    second worker open an already-finished schema.
    """
    from filelock import FileLock
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
    except Exception as error:
        raise ConfigError(f"cannot parse storage URL {url!r}: {error}") from error
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return contextlib.nullcontext()
    if not Path(database).parent.is_dir():  # FileLock would create it; a typo must not start a study
        raise ConfigError(f"cannot open storage {url!r}: directory {Path(database).parent} does not exist")
    return FileLock(f"{database}.lock")


def _open_journal(url: str) -> optuna.storages.BaseStorage:
    import optuna
    from optuna.storages.journal import JournalFileBackend

    prefix = f"{JOURNAL_SCHEME}://"
    path = Path(url[len(prefix) :]) if url.startswith(prefix) else Path("")
    if not path.name or not path.parent.is_dir():
        raise ConfigError(f"journal storage {url!r}: expected journal:///EXISTING_DIR/FILE.log")
    try:
        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    except OSError as error:
        raise ConfigError(f"cannot open journal storage {path}: {error}") from error


def needs_own_heartbeat(storage: Any) -> bool:
    """Journal storages get `JournalHeartbeat`; RDB storages beat natively; memory dies with the process."""
    from optuna.storages import JournalStorage

    return isinstance(storage, JournalStorage)


def first_beat(study: optuna.Study, trial: optuna.Trial) -> None:
    """An RDB trial's first heartbeat, stored before its run starts, as `JournalHeartbeat` stores a
    journal trial's. Optuna beats from a thread of its own and skips trials with no beat when it looks
    for stale ones: a worker killed before that thread's first write (on SQLite, up to the busy
    timeout later) left its trial RUNNING for good, never retried."""
    from optuna.storages._heartbeat import is_heartbeat_enabled  # the test Optuna's fail_stale_trials uses

    storage = study._storage
    if is_heartbeat_enabled(storage):
        storage.record_heartbeat(trial._trial_id)


class JournalHeartbeat:
    """A daemon thread that refreshes the trial's heartbeat attribute until the trial returns."""

    def __init__(self, trial: optuna.Trial, interval: int):
        self._trial = trial
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{trial.number}", daemon=True)

    def __enter__(self) -> JournalHeartbeat:
        self._trial.set_user_attr(HEARTBEAT_ATTR, time.time())
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._trial.set_user_attr(HEARTBEAT_ATTR, time.time())
            except Exception:  # the storage hiccupped: the next beat retries, the grace period absorbs it
                logger.warning("heartbeat of trial %d failed", self._trial.number, exc_info=True)


def fail_stale_trials(study: optuna.Study, lease: Lease = Lease()) -> list[int]:
    """Mark trials of dead workers FAIL; returns their numbers. Safe to run from any worker."""
    import optuna
    from optuna.trial import TrialState

    running = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    if not needs_own_heartbeat(study._storage):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
    else:
        _fail_silent_journal_trials(study, lease)
    failed = [
        t.number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)) if t.number in running
    ]
    if failed:
        logger.warning(
            "marked trials %s FAIL: their workers stopped sending heartbeats (each is queued again, "
            "up to %d times)",
            failed,
            lease.retries,
        )
    return failed


def _fail_silent_journal_trials(study: optuna.Study, lease: Lease) -> None:
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    retry = lease.retry_callback()
    now = time.time()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        started = trial.datetime_start.timestamp() if trial.datetime_start else now
        # A retry inherits its original's user attributes, stale heartbeat included: its own start counts.
        last = max(started, float(trial.user_attrs.get(HEARTBEAT_ATTR, started)))
        if now - last <= lease.grace_period:
            continue
        # The storage calls Optuna's own fail_stale_trials makes (no public per-trial API exists);
        # the trial may have finished, or another worker failed it (and queued its retry), meanwhile.
        try:
            if not study._storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL):
                continue
        except UpdateFinishedTrialError:
            continue
        retry(study, copy.deepcopy(study._storage.get_trial(trial._trial_id)))
