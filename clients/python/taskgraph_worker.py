"""A taskgraph worker in Python: runs external task types over the worker
protocol (docs/workers.md). Standard library only, one file.

    from taskgraph_worker import Worker, RetryableError

    w = Worker("http://127.0.0.1:8080", token="tg_...", concurrency=10)

    @w.handler("py.invoice")
    def invoice(job):
        job.log("rendering", order=job.input["orderId"])
        job.progress(1, 2)
        if job.cancelled.is_set():      # a cancel was requested
            return None                  # the worker completes it CANCELLED
        return {"pdf": "..."}            # the result (any JSON value)

    @w.handler("py.report")             # a workflow's step
    def report(job):
        imported = job.parents["import"]  # a parent's result, by step key
        # job.parent_outcomes["import"].status (.error): how it ended
        return {"rows": imported["rows"]}

    w.run()                              # until SIGTERM/SIGINT or w.stop()

A handler raises RetryableError, NonRetryableError or ResourceError (with
retry_after seconds) to fail; any other exception is RETRYABLE. Claims are
batched (as many as free slots) and long-poll; one thread beats for every
running task, a cancel reaches job.cancelled at the next beat; logs and
progress are sent in batches, and so are outcomes (complete-many: one
thread sends what ended while its last call was under way). On SIGTERM,
or when an admin drains the worker (a claim answers draining), the worker
claims nothing more, lets running handlers finish, and hands back
(RELEASED) what it claimed but did not start; run() then returns.
"""

import json
import os
import queue
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

__all__ = ["Worker", "Job", "ParentOutcome", "ProtocolError", "RetryableError", "NonRetryableError", "ResourceError"]


class ProtocolError(Exception):
    """A refusal of the server: code is VALIDATION, FENCED, FORBIDDEN..."""

    def __init__(self, status, code, message):
        super().__init__("%s %s: %s" % (status, code, message))
        self.status, self.code, self.message = status, code, message


class RetryableError(Exception):
    """A blip: retried by the type's retry policy."""

    kind = "RETRYABLE"


class NonRetryableError(Exception):
    """Bad input, no permission: straight to FAILED."""

    kind = "NON_RETRYABLE"


class ResourceError(Exception):
    """A resource is exhausted: a delayed, bounded retry."""

    kind = "RESOURCE"

    def __init__(self, message, retry_after=None):
        super().__init__(message)
        self.retry_after = retry_after


class ParentOutcome:
    """How a parent of a job's task ended: its status (SUCCESS, FAILED or
    CANCELLED), its result (SUCCESS) or its error (FAILED: its last error;
    CANCELLED: the reason), as stored: masked."""

    __slots__ = ("task_id", "code", "status", "result", "error")

    def __init__(self, outcome):
        self.task_id = outcome.get("taskId")
        self.code = outcome.get("code", "")
        self.status = outcome.get("status", "")
        self.result = outcome.get("result")
        self.error = outcome.get("error", "")

    def __repr__(self):
        return "ParentOutcome(task_id=%r, code=%r, status=%r, result=%r, error=%r)" % (
            self.task_id, self.code, self.status, self.result, self.error)


class Job:
    """One claimed execution, as a handler sees it.

    job.parents holds the results of the tasks it waited for (a workflow's
    step: by its parents' step keys; a task created with dependsOn: by their
    codes), None for one that left none; job.parent_outcomes how each ended
    (ParentOutcome: a RUN_ANYWAY cleanup reads a failed parent's error
    there). Both are empty for a task without parents, and masked as
    stored."""

    def __init__(self, worker, claimed):
        self._worker = worker
        self.token = claimed["token"]
        self.task_id = claimed["taskId"]
        self.code = claimed["code"]
        self.type = claimed["type"]
        self.attempt = claimed["attempt"]
        self.deadline = claimed["deadline"]
        self.input = claimed["input"]
        self.parents = dict(claimed.get("parents") or {})
        self.parent_outcomes = {k: ParentOutcome(o) for k, o in (claimed.get("parentOutcomes") or {}).items()}
        # Set when a cancel was requested (stop, return: completed CANCELLED).
        self.cancelled = threading.Event()
        if claimed.get("cancelRequested"):
            self.cancelled.set()
        self.cancel_reason = ""
        # Set when the execution moved on (FENCED): its writes are refused.
        self.lost = threading.Event()
        self._moved = None

    def log(self, message, level="INFO", **fields):
        """Queue a line of the task's trace (sent in a batch, masked)."""
        line = {"token": self.token, "level": level, "message": str(message)}
        if fields:
            line["fields"] = fields
        self._moved = _now()
        self._worker._logs.put(line)

    def progress(self, done, total):
        """Report progress: done out of total."""
        self._moved = _now()
        with self._worker._lock:
            self._worker._progress[self.token] = {"token": self.token, "done": int(done), "total": int(total)}


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Worker:
    """Claims and runs tasks of the types it has handlers for."""

    def __init__(self, url, token=None, worker_id=None, concurrency=10, wait_seconds=5.0,
                 flush_interval=0.2, timeout=60.0):
        self.url = url.rstrip("/") + "/worker/v1/"
        self.token = token if token is not None else os.environ.get("TASKGRAPH_TOKEN", "")
        self.worker_id = worker_id or "%s-%d" % (socket.gethostname().split(".")[0], os.getpid())
        self.concurrency = concurrency
        self.wait_seconds = wait_seconds
        self.flush_interval = flush_interval
        self.timeout = timeout
        self.heartbeat_interval = 5.0
        self.requests = 0
        self._handlers = {}
        self._running = {}  # token -> Job
        self._progress = {}
        self._logs = queue.Queue()
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(concurrency)
        self._stopping = threading.Event()
        self._idle = threading.Condition(self._lock)
        self._flush_lock = threading.Lock()
        self._outcomes = []  # complete bodies waiting to be sent
        self._sending = 0  # outcomes taken by the sender, not yet answered
        self._outcome_ready = threading.Condition(self._lock)
        # Set when a claim answered that an admin drained this worker.
        self.drained = threading.Event()

    # -- registration

    def handler(self, type_name):
        """Decorator: fn(job) runs the tasks of type_name and returns the result."""

        def register(fn):
            self._handlers[type_name] = fn
            return fn

        return register

    # -- the protocol

    def call(self, name, body):
        """POST body to the protocol's call; returns the answer or raises ProtocolError."""
        data = json.dumps(body).encode()
        req = urllib.request.Request(self.url + name, data=data, method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer " + self.token})
        self.requests += 1
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            try:
                err = json.loads(e.read())["error"]
            except Exception:
                err = {"code": "HTTP_%d" % e.code, "message": e.reason}
            raise ProtocolError(e.code, err.get("code"), err.get("message"))

    # -- running

    def stop(self):
        """Claim nothing more; run() returns once running handlers finished."""
        self._stopping.set()

    def run(self, install_signals=True):
        """Claim and run until stop() (or SIGTERM/SIGINT)."""
        if install_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: self.stop())
        beater = threading.Thread(target=self._beat_loop, daemon=True)
        flusher = threading.Thread(target=self._flush_loop, daemon=True)
        sender = threading.Thread(target=self._complete_loop, daemon=True)
        beater.start()
        flusher.start()
        sender.start()
        types = sorted(self._handlers)
        while not self._stopping.is_set():
            self._slots.acquire()
            free = 1
            gather = time.monotonic() + 0.02  # freed slots gather into one claim
            while free < self.concurrency:
                if self._slots.acquire(blocking=False):
                    free += 1
                elif free * 2 >= self.concurrency or time.monotonic() >= gather:
                    break
                else:
                    time.sleep(0.002)
            if self._stopping.is_set():
                self._release_slots(free)
                break
            try:
                got = self.call("claim", {"workerId": self.worker_id, "language": "python",
                                          "version": "%d.%d" % sys.version_info[:2], "types": types,
                                          "max": free, "waitSeconds": self.wait_seconds})
            except (ProtocolError, OSError) as e:
                self._release_slots(free)
                if isinstance(e, ProtocolError) and e.code in ("FORBIDDEN", "NOT_FOUND", "UNAUTHENTICATED", "VALIDATION"):
                    raise
                time.sleep(1)
                continue
            self.heartbeat_interval = got.get("heartbeatIntervalSeconds") or self.heartbeat_interval
            if got.get("draining"):
                # An admin drained this worker: finish what runs, then stop.
                self.drained.set()
                self._stopping.set()
            tasks = got["tasks"]
            self._release_slots(free - len(tasks))
            for i, claimed in enumerate(tasks):
                if self._stopping.is_set():
                    # Claimed, not started: handed back, the attempt unused.
                    for rest in tasks[i:]:
                        self._complete({"token": rest["token"], "status": "RELEASED"})
                        self._slots.release()
                    break
                job = Job(self, claimed)
                with self._lock:
                    self._running[job.token] = job
                threading.Thread(target=self._execute, args=(job,), daemon=True).start()
        with self._lock:
            while self._running or self._outcomes or self._sending:
                self._idle.wait()
        self._flush()

    def _release_slots(self, n):
        for _ in range(n):
            self._slots.release()

    def _execute(self, job):
        try:
            body = {"token": job.token}
            try:
                result = self._handlers[job.type](job)
                if job.cancelled.is_set():
                    body.update(status="CANCELLED")
                else:
                    body.update(status="SUCCESS", result=result)
            except Exception as e:  # the handler's failure
                kind = getattr(e, "kind", "RETRYABLE")
                if job.cancelled.is_set():
                    body.update(status="CANCELLED")
                else:
                    err = {"kind": kind, "message": "%s: %s" % (type(e).__name__, e)}
                    if getattr(e, "retry_after", None):
                        err["retryAfterSeconds"] = float(e.retry_after)
                    body.update(status="FAILED", error=err)
            if not job.lost.is_set():
                self._complete(body)
        finally:
            with self._lock:
                self._running.pop(job.token, None)
                if job.lost.is_set():
                    self._progress.pop(job.token, None)  # its writes are refused
                self._idle.notify_all()
            self._slots.release()

    def _complete(self, body):
        """Queue an outcome; the sender thread sends it in a batch."""
        with self._lock:
            self._outcomes.append(body)
            self._outcome_ready.notify()

    def _complete_loop(self):
        while True:
            with self._lock:
                while not self._outcomes:
                    self._outcome_ready.wait()
                batch = self._outcomes[:1000]
                del self._outcomes[:1000]
                self._sending += len(batch)
            try:
                self._flush()  # the logs and progress before the outcomes
                self._send_outcomes(batch)
            finally:
                with self._lock:
                    self._sending -= len(batch)
                    self._idle.notify_all()

    def _send_outcomes(self, batch):
        # Each outcome is answered in order; a refused one (FENCED: someone
        # else ended it) needs nothing more.
        for attempt in range(5):
            try:
                return self.call("complete-many", {"outcomes": batch})
            except ProtocolError as e:
                if e.code != "UNAVAILABLE":
                    return None
            except OSError:
                pass
            time.sleep(0.2 * (attempt + 1))
        return None

    def _beat_loop(self):
        last = time.monotonic()
        while True:
            time.sleep(min(self.heartbeat_interval, 0.1))
            if time.monotonic() - last < self.heartbeat_interval:
                continue
            last = time.monotonic()
            with self._lock:
                jobs = list(self._running.values())
            if not jobs:
                continue
            items = []
            for j in jobs:
                item = {"token": j.token}
                if j._moved:
                    item["movedAt"] = j._moved
                items.append(item)
            try:
                answer = self.call("heartbeat", {"tasks": items})
            except (ProtocolError, OSError):
                continue
            by_token = {j.token: j for j in jobs}
            for a in answer["tasks"]:
                j = by_token.get(a["token"])
                if j is None:
                    continue
                if a.get("cancelRequested"):
                    j.cancel_reason = a.get("cancelReason", "")
                    j.cancelled.set()
                if not a.get("ok"):
                    j.lost.set()
                    j.cancelled.set()

    def _flush_loop(self):
        while True:
            time.sleep(self.flush_interval)
            self._flush()

    def _flush(self):
        with self._flush_lock:
            lines = []
            while True:
                try:
                    lines.append(self._logs.get_nowait())
                except queue.Empty:
                    break
            with self._lock:
                progress = list(self._progress.values())
                self._progress.clear()
            try:
                for i in range(0, len(lines), 1000):
                    self.call("log", {"lines": lines[i:i + 1000]})
                for i in range(0, len(progress), 1000):
                    self.call("progress", {"tasks": progress[i:i + 1000]})
            except (ProtocolError, OSError):
                pass


if __name__ == "__main__":
    print(__doc__)
