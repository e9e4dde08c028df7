"""nobroker: a durable, crash-safe job queue in a directory of files (or PostgreSQL,
or memory:// for tests).

    from nobroker import Queue, Worker

    q = Queue("./jobs")
    q.enqueue({"email": "ada@example.com"})
    Worker(q, handle).run()

Only the standard library is used. See README.md for the guarantees and
docs/FORMAT.md for the on-disk format.
"""

from .backoff import BackoffPolicy
from .dependencies import Dependency
from .errors import (
    CompactionError,
    ConnectionLostError,
    CorruptLogError,
    DatabaseError,
    JobNotFoundError,
    LockTimeoutError,
    NobrokerError,
    NotLeasedError,
    QueueClosedError,
    Retry,
    SerializationError,
    Snooze,
    StorageError,
    TaskFailed,
    TaskLockedError,
    UnsafeFilesystemError,
    WorkerCrashedError,
)
from .models import CompactionResult, Job, JobState, QueueStats, RecoveryReport
from .queue import Queue
from .tasks import GroupResult, chain, chord, group
from .worker import Worker, WorkerStats

__version__ = "0.1.0"

__all__ = [
    "BackoffPolicy",
    "CompactionError",
    "CompactionResult",
    "ConnectionLostError",
    "CorruptLogError",
    "DatabaseError",
    "Dependency",
    "GroupResult",
    "Job",
    "JobNotFoundError",
    "JobState",
    "LockTimeoutError",
    "NobrokerError",
    "NotLeasedError",
    "Queue",
    "QueueClosedError",
    "QueueStats",
    "RecoveryReport",
    "Retry",
    "SerializationError",
    "Snooze",
    "StorageError",
    "TaskFailed",
    "TaskLockedError",
    "UnsafeFilesystemError",
    "Worker",
    "WorkerCrashedError",
    "WorkerStats",
    "chain",
    "chord",
    "group",
    "__version__",
]
