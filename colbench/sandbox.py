"""The sandbox: model-written Python runs here, never in the evaluator's own process.

`Sandbox(timeout).run(code, calls)` runs `code` once per test call and returns each call's
return value as plain data (`None`, `bool`, `int`, `float`, `complex`, `str`, `bytes`, `bytearray`,
`list`, `tuple`, `dict`, `set`, `frozenset`, with type tags). It does not decide pass or fail: the
evaluator compares the values itself with `==` (see evaluate.py); a program never reports its own
verdict. evaluate.py runs model-written code, and the tasks' solutions, only here, never
in its own process. What the sandbox protects against and what it does not is set out at the end
of this docstring: it is not a virtual machine.

Processes, per evaluator worker (this file run as a script is the runner):

    evaluator thread
     └─ runner       `python -I sandbox.py --serve PID`, long-lived; enters a fresh network namespace
         │           (no interface up, not even loopback), PID namespace and mount namespace, where
         │           the system allows
         └─ supervisor   PID 1 of that namespace: one job (program + test calls) per stdin line
             └─ test     one forked process per call, unprivileged, resource limits, own process group

A test process runs the program and its one call, then writes `{"value": ...}` (tagged JSON) or
`{"error": ...}` to a pipe of its own; its stdout/stderr go to another pipe that the supervisor
drains and keeps only the start of. After each job the supervisor, as PID 1, kills everything else
in its namespace; when it dies, the kernel does. The evaluator kills the runner's whole process
group when a job overruns its wall-clock limit, and the runner dies with the evaluator
(PR_SET_PDEATHSIG).

The places anyone may write (/tmp, /var/tmp, /dev/shm) are, in the mount namespace, a fresh
size-capped tmpfs for each job, unmounted after it: what a program wrote there is gone before the
next program runs, and with the runner. Without a mount namespace, what the programs' user owns
there is removed after each job instead.

What it does
- Separate processes. One long-lived runner per worker (`--workers`, default: the number
  of cores). Each test call of each program runs in a fresh forked process, so a test that hangs
  or crashes costs only that test: the others still get their credit.
- Time. Each test has a wall-clock limit (`--timeout`, default 1 s, as in the official
  evaluator), then its whole process group is killed (SIGKILL: ignoring SIGALRM or SIGTERM does
  not help). RLIMIT_CPU is a backstop. Up to 4 tests of a program run at once, so a program
  that hangs on every test costs about one timeout, not one per test.
- A fresh namespace per runner, where the system allows it (as root, or with unprivileged
  user namespaces): a new network namespace with no interface up, loopback included, so no
  connection goes anywhere; a new PID namespace, so a program sees and can signal only its
  own processes, and after each program everything it left behind (forked children, `setsid`
  escapees, `os.system('... &')`) is killed; a new mount namespace, where each program gets
  its own fresh tmpfs over `/tmp`, `/var/tmp` and `/dev/shm`, 64 MB each (and 16384 files), the
  total it may write there. It is unmounted after the program, so the next program on the same
  runner finds them empty, and nothing written there outlives the program or takes memory after
  it; the evaluator's own mounts are untouched. Programs hold no capability there, so they
  cannot unmount it. `evaluate.py` prints which of these it got (`private /tmp,/var/tmp,/dev/shm
  ON (tmpfs, 64 MB each)`).
- An unprivileged user. When the evaluator runs as root, programs run as a user id of their
  own per runner (2130706432 + the runner's PID, no account, no groups), so they cannot write or
  delete the project's files or the evaluator's outputs, cannot signal the evaluator, and one
  runner's fork bomb does not use up the process limit of another.
- Resource limits per test process: address space 512 MB (a runaway allocation ends in
  `MemoryError`: "out of memory"), 32 processes/threads per user, files at most 16 MB,
  256 open files, no core dumps.
- A fresh temporary directory per program (in its private `/tmp`) as its working directory,
  `HOME` and `TMPDIR`, removed afterwards; without a mount namespace, the folders a killed
  evaluator left behind (`/tmp/colbench-sandbox-<runner PID>-*`) are removed by the next runner
  that starts; a minimal environment (none of the evaluator's variables); stdin is
  `/dev/null`; stdout and stderr go to a pipe that is drained and kept only up to 4 KB, so
  printing megabytes neither blocks nor floods anything.
- Results on a private pipe. A test's return value travels on a pipe of its own, framed
  with its length; what a program prints, including fake "results", is just output. Return
  values are written out by code holding its own references to the built-ins, so replacing
  `builtins.type` or `json.dumps` changes nothing. A subclass of a built-in type is converted to
  the built-in (an `int` whose `__eq__` always says True comes back as a plain `int`); any other
  object cannot be sent back and counts as a wrong output.
- Nothing outlives the evaluator. The runner dies with the evaluator (PR_SET_PDEATHSIG), the
  namespace's PID 1 dies with the runner, and the kernel then kills everything in the namespace.
  A job that overruns its wall-clock backstop gets its runner's whole process group killed.

What it does not protect against (it is not a virtual machine)
- The kernel is shared. A kernel exploit escapes. There is no seccomp filter: every system
  call is allowed.
- The file system is the host's. A program can read every world-readable file, including the
  project and any world-readable task file with the solutions (a program that reads
  the solution can pass its tests; score untrusted models with the task files unreadable to
  other users). It can write only in its private `/tmp`, `/var/tmp` and `/dev/shm` (see above)
  and in other world-writable places, if the system has any.
- Without a mount namespace (e.g. a container without `CAP_SYS_ADMIN`), programs write into
  the host's `/tmp`, `/var/tmp` and `/dev/shm`, and what their user id owns there is removed
  after each program (`OFF: cleaned after each program`): there is then no total cap beyond
  16 MB per file while a program runs, and a program's files are visible to programs of other
  runners until then. Without root as well, programs have no user id of their own to find their
  files by, and nothing but the working folder is cleaned (`OFF: not cleaned`).
- Memory is limited per process, not in total: up to 32 processes of 512 MB each per
  runner, and the private tmpfs (3 × 64 MB per runner). Use a cgroup (e.g. `systemd-run --scope
  -p MemoryMax=8G python evaluate.py ...`) on a shared machine.
- Timing is wall-clock, as in the official evaluator. With `--workers` equal to the number
  of cores and 4 tests at once, a test gets at least a quarter of a core on a fully busy
  evaluator, so a correct program that needs more than a quarter of the timeout in CPU time may
  time out while hanging programs run beside it. Lower `--workers` or raise `--timeout` for slow
  solutions.
- Without root and without unprivileged user namespaces there is no network, PID or mount
  namespace and no user switch: programs run as the evaluator's user, can reach the network,
  can read, write and delete what the evaluator can, and can signal it; only the resource
  limits, process groups and timeouts remain. `evaluate.py` prints `network namespace OFF` /
  `PID namespace OFF` in that case. Do not score untrusted code that way.
- Imports. Programs can import what the runner preloaded (most of the standard library a
  function might use) and whatever their user can read; as root on a machine where Python lives
  under `/root`, nothing else.
"""
import json
import math
import os
import resource
import select
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time

# Limits of every test process.
MEMORY_MB = 512  # RLIMIT_AS
MAX_PROCESSES = 32  # RLIMIT_NPROC (threads count too); per user, i.e. over the tests of one runner
MAX_FILE_MB = 16  # RLIMIT_FSIZE
MAX_OPEN_FILES = 256  # RLIMIT_NOFILE
MAX_VALUE_BYTES = 1 << 20  # one return value, encoded
KEPT_OUTPUT_BYTES = 4096  # what is kept of a program's stdout and stderr
MAX_DEPTH = 200  # nesting of a return value
TESTS_AT_ONCE = 4  # tests of one program run side by side (a hang costs wall time, not a core)
# The environment of the runner: nothing of the evaluator's.
MINIMAL_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
# Where any user may write. Each gets a fresh tmpfs per job, so these caps are what one program may
# write there in total (its working folder, under /tmp, included); memory, not disk.
PRIVATE_PLACES = ("/tmp", "/var/tmp", "/dev/shm")
PRIVATE_MB = 64  # per place
PRIVATE_INODES = 16384  # files and folders per place: empty files cost memory too
# A job's working folder: /tmp/colbench-sandbox-<runner PID>-<random>, so that a later runner can
# tell the folders of dead runners (a SIGKILLed evaluator) from live ones.
WORKDIR_PREFIX = "colbench-sandbox-"

# Programs run as user and group SANDBOX_ID_BASE + the runner's PID (when the evaluator is root):
# above the ranges that systems hand out (accounts, containers' subordinate ids).
SANDBOX_ID_BASE = 0x7F000000
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE, MNT_DETACH = 0x2, 0x4, 0x4000, 0x40000, 0x2
PR_SET_PDEATHSIG = 1

# Imported by the runner before any program runs: a program running unprivileged may be unable to
# read the interpreter's library (e.g. under /root), so what it may reasonably import is loaded here.
PRELOADED = """array base64 binascii bisect calendar cmath collections collections.abc contextlib copy
csv dataclasses datetime decimal difflib enum fractions functools hashlib heapq html io ipaddress
itertools json locale math numbers operator pprint queue random re secrets socket statistics string
struct subprocess textwrap threading time types typing unicodedata urllib.parse uuid warnings
weakref zlib encodings.idna""".split()


# ----------------------------------------------------------------------------------------------
# Values: a return value becomes JSON of built-ins with type tags, and back.
# Encoding runs inside the test process, after the program, so it writes the JSON text itself with
# references to built-ins taken before any program ran (a program may replace anything in
# `builtins` or `json`). A subclass of a built-in type is read through the built-in type's own
# methods, so an overridden __eq__ cannot survive; anything else cannot be sent back and counts
# as a wrong output.
# ----------------------------------------------------------------------------------------------
def _make_encoder(type=type, issubclass=issubclass, bool=bool, int=int, float=float, complex=complex,
                  str=str, bytes=bytes, bytearray=bytearray, list=list, tuple=tuple, dict=dict, set=set,
                  frozenset=frozenset, TypeError=TypeError, ValueError=ValueError,
                  quote=json.encoder.encode_basestring_ascii, join=",".join):
    special_floats = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}

    def number(text):
        return special_floats.get(text, text)

    def tagged(tag, items, depth):
        return '{"' + tag + '":[' + join([text(item, depth + 1) for item in items]) + "]}"

    def text(value, depth):
        if depth > MAX_DEPTH:
            raise ValueError("value nested too deeply")
        kind = type(value)
        if value is None:
            return "null"
        if kind is bool:
            return "true" if value is True else "false"
        if issubclass(kind, int):
            return int.__repr__(value)
        if issubclass(kind, float):
            return number(float.__repr__(value))
        if issubclass(kind, str):
            return quote(value)
        if issubclass(kind, complex):
            real, imag = complex.real.__get__(value), complex.imag.__get__(value)
            return '{"complex":[' + number(float.__repr__(real)) + "," + number(float.__repr__(imag)) + "]}"
        if issubclass(kind, bytes):
            return '{"bytes":"' + bytes.hex(value) + '"}'
        if issubclass(kind, bytearray):
            return '{"bytearray":"' + bytearray.hex(value) + '"}'
        if issubclass(kind, list):
            return "[" + join([text(item, depth + 1) for item in list.__iter__(value)]) + "]"
        if issubclass(kind, tuple):
            return tagged("tuple", tuple.__iter__(value), depth)
        if issubclass(kind, dict):
            return '{"dict":[' + join(["[" + text(k, depth + 1) + "," + text(v, depth + 1) + "]"
                                       for k, v in dict.items(value)]) + "]}"
        if issubclass(kind, set):
            return tagged("set", set.__iter__(value), depth)
        if issubclass(kind, frozenset):
            return tagged("frozenset", frozenset.__iter__(value), depth)
        raise TypeError("cannot send back a " + str.__str__(kind.__name__))

    def encode(value):
        """'{"value": <tagged JSON>}'."""
        return '{"value":' + text(value, 0) + "}"

    def error(category, detail=""):
        return '{"error":' + quote(category) + ',"detail":' + quote(detail[:300]) + "}"

    return encode, error


encode_value, encode_error = _make_encoder()

_DECODERS = {
    "tuple": lambda items: tuple(decode_value(x) for x in items),
    "set": lambda items: {decode_value(x) for x in items},
    "frozenset": lambda items: frozenset(decode_value(x) for x in items),
    "dict": lambda pairs: {decode_value(k): decode_value(v) for k, v in pairs},
    "complex": lambda parts: complex(*parts),
    "bytes": bytes.fromhex,
    "bytearray": bytearray.fromhex,
}


def decode_value(data):
    """The Python value of tagged JSON data (after json.loads); raises on malformed data."""
    if isinstance(data, list):
        return [decode_value(item) for item in data]
    if isinstance(data, dict):
        (tag, body), = data.items()
        return _DECODERS[tag](body)
    return data


# ----------------------------------------------------------------------------------------------
# The evaluator's side: one Sandbox per worker, each owning one runner process.
# ----------------------------------------------------------------------------------------------
class Sandbox:
    """Runs programs in a runner process of its own; `run` may be called from one thread at a time."""

    def __init__(self, timeout=1.0, tests_at_once=TESTS_AT_ONCE):
        self.timeout, self.tests_at_once = timeout, tests_at_once
        self.process = None

    def _start(self):
        # Started from the thread that lives as long as the Sandbox (see PR_SET_PDEATHSIG).
        self.process = subprocess.Popen(
            [sys.executable, "-I", os.path.abspath(__file__), "--serve", str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=MINIMAL_ENV, cwd="/",
            start_new_session=True)
        self.buffer = b""

    def start(self):
        if self.process is None:
            self._start()
        return self

    def run(self, code, calls):
        """{"results": {name: {"value": ...} | {"error": category, "detail": str}}, "output": str, ...}.

        `calls` is [(name, "fn(1, 2)"), ...]; a value is already decoded (plain Python data).
        """
        self.start()
        job = {"code": code, "calls": list(calls), "timeout": self.timeout,
               "tests_at_once": self.tests_at_once}
        rounds = math.ceil(len(job["calls"]) / self.tests_at_once)
        deadline = time.monotonic() + rounds * (self.timeout + 0.5) + 10  # a backstop only
        try:
            self.process.stdin.write((json.dumps(job) + "\n").encode())
            self.process.stdin.flush()
            line = self._read_line(deadline)
        except (BrokenPipeError, OSError):
            line = None
        if line is None:  # the runner died or overran: kill its whole group, start afresh next time
            self.close()
            failure = {"error": "timeout", "detail": "the sandbox overran its wall-clock limit"}
            return {"results": {name: dict(failure) for name, _ in job["calls"]}, "output": ""}
        reply = json.loads(line)
        for result in reply.get("results", {}).values():
            _decode_result(result)
        return reply

    def _read_line(self, deadline):
        fd = self.process.stdout.fileno()
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def close(self):
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()
            self.process.stdin.close()
            self.process.stdout.close()
            self.process = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()


def _decode_result(result):
    """Turn a test's raw message (text written by the test process) into a checked result, in place."""
    raw = result.pop("message", None)
    if raw is None:
        return
    try:
        message = json.loads(raw)
        if "value" in message:
            result["value"] = decode_value(message["value"])
        else:
            result["error"] = str(message["error"])
            result["detail"] = str(message.get("detail", ""))[:300]
    except Exception as e:  # malformed or forged data: not a value
        result.clear()
        result.update(error="wrong output", detail=f"unreadable result ({type(e).__name__})")


# ----------------------------------------------------------------------------------------------
# The runner's side (this file run as a script). Runs as the evaluator's user, usually root.
# ----------------------------------------------------------------------------------------------
def _libc():
    import ctypes
    return ctypes.CDLL(None, use_errno=True)


def _die_with_parent(libc, parent_pid):
    """SIGKILL this process when its parent dies; exit now if it already has."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() not in (parent_pid, 0):  # 0: the parent is outside our PID namespace
        os._exit(1)


def _enter_namespaces(libc):
    """A fresh network namespace (no interfaces up, not even loopback) and PID namespace."""
    # Not root: the namespaces need a user namespace of their own, where the system allows one.
    base = 0 if os.geteuid() == 0 else CLONE_NEWUSER
    uid, gid = os.getuid(), os.getgid()
    for network, pids in ((True, True), (True, False), (False, True)):
        if libc.unshare(base | (CLONE_NEWNET if network else 0) | (CLONE_NEWPID if pids else 0)) == 0:
            if base:
                _map_own_ids(uid, gid)
            return {"network": network, "pids": pids}
    return {"network": False, "pids": False}


def _map_own_ids(uid, gid):
    """In our new user namespace our ids stand for themselves: a file made on its tmpfs needs an owner."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _enter_mount_namespace(libc):
    """A mount namespace of our own whose mounts never reach the host's; False where not allowed."""
    if libc.unshare(CLONE_NEWNS) != 0:
        return False
    # A copy of the host's mounts may still share their propagation: a tmpfs mounted there would
    # appear on the host. Only once every mount is private is it safe to mount anything.
    return libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) == 0


def _mount_private_places(libc):
    """A fresh tmpfs over each of PRIVATE_PLACES the system has: (the places mounted, whether all were)."""
    options = f"size={PRIVATE_MB}m,nr_inodes={PRIVATE_INODES},mode=1777".encode()
    mounted = []
    for place in filter(os.path.isdir, PRIVATE_PLACES):
        if libc.mount(b"colbench-sandbox", place.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
            return mounted, False
        mounted.append(place)
    return mounted, True


def _remove_owned(folder, uid):
    """Remove what `uid` owns in `folder`, and in the folders below it that anyone may write to."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
            if info.st_uid == uid and stat.S_ISDIR(info.st_mode):
                shutil.rmtree(entry.path, ignore_errors=True)
            elif info.st_uid == uid:
                os.unlink(entry.path)
            elif stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_IWOTH:
                _remove_owned(entry.path, uid)
        except OSError:
            pass  # gone already, or not ours to remove


def _remove_stale_workdirs():
    """Remove the working folders of runners that are no longer alive (e.g. a SIGKILLed evaluator's)."""
    for name in os.listdir(PRIVATE_PLACES[0]):
        owner = name[len(WORKDIR_PREFIX):].split("-", 1)[0]
        if name.startswith(WORKDIR_PREFIX) and owner.isdigit() and not _alive(int(owner)):
            shutil.rmtree(os.path.join(PRIVATE_PLACES[0], name), ignore_errors=True)


def _alive(pid):
    """Whether a process with this PID exists, ours or another user's."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


def _unprivileged_ids(runner_pid):
    """(uid, gid) for the programs of one runner: an id of their own, with no account behind it.

    Only when we are root. Not the shared `nobody`: RLIMIT_NPROC counts per user, so a fork bomb
    as `nobody` would leave other runners' programs unable to fork.
    """
    if os.geteuid() != 0:
        return None
    return SANDBOX_ID_BASE + runner_pid, SANDBOX_ID_BASE + runner_pid


def _drop_capabilities(libc):
    """Give up every capability: those a user namespace gives would let a program unmount its tmpfs."""
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    if libc.capset(header, bytes(24)) != 0:  # effective, permitted, inheritable: none
        raise OSError("capset failed")


def _run_test(code, call, workdir, result_w, output_w, timeout, ids, libc):
    """In the forked test process: limits, drop privileges, compile and run, report. Never returns."""
    try:
        os.setpgid(0, 0)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(output_w, 1)
        os.dup2(output_w, 2)
        os.dup2(result_w, 3)
        os.closerange(4, MAX_OPEN_FILES * 64)
        cpu = math.ceil(timeout) + 1  # the wall-clock deadline comes first; this is a backstop
        for limit, value in ((resource.RLIMIT_AS, MEMORY_MB << 20), (resource.RLIMIT_CPU, cpu),
                             (resource.RLIMIT_NPROC, MAX_PROCESSES),
                             (resource.RLIMIT_FSIZE, MAX_FILE_MB << 20),
                             (resource.RLIMIT_NOFILE, MAX_OPEN_FILES), (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(limit, (value, value + (1 if limit == resource.RLIMIT_CPU else 0)))
        os.chdir(workdir)
        if ids is not None:
            os.setgroups([])
            os.setgid(ids[1])
            os.setuid(ids[0])
        else:
            _drop_capabilities(libc)
        os.environ.clear()
        os.environ.update(HOME=workdir, TMPDIR=workdir, **MINIMAL_ENV)
    except BaseException:
        os._exit(71)
    # Held before the program runs: it may replace any of these in its own process.
    write, exit_now, encode, error, frame = os.write, os._exit, encode_value, encode_error, struct.pack
    type_, len_, MemoryError_, BaseException_ = type, len, MemoryError, BaseException
    compile_, exec_, eval_, stdout, stderr = compile, exec, eval, sys.stdout, sys.stderr
    try:
        try:
            # Compiled here, under the limits: even the compiler never sees the code as root.
            try:
                program = compile_(code, "<program>", "exec")
            except BaseException_ as e:  # SyntaxError, and the compiler's limits (MemoryError, ...)
                message = error("syntax error", f"{type_(e).__name__}: {e}")
            else:
                namespace = {"__name__": "solution"}
                exec_(program, namespace)
                value = eval_(compile_(call, "<test>", "eval"), namespace)
                try:
                    message = encode(value)
                except BaseException_ as e:
                    message = error("wrong output", f"unserializable return value: {e}")
        except MemoryError_:
            message = error("out of memory")
        except BaseException_ as e:
            try:
                message = error("exception", f"{type_(e).__name__}: {e}")
            except BaseException_:
                message = error("exception")
        for stream in (stdout, stderr):  # what it printed, for the record; best effort
            try:
                stream.flush()
            except BaseException_:
                pass
        data = message.encode("utf-8", "replace")
        if len_(data) > MAX_VALUE_BYTES:
            data = error("wrong output", "return value too large").encode()
        data = frame("<I", len_(data)) + data
        while data:
            data = data[write(3, data):]
    finally:
        exit_now(0)


class _Test:
    def __init__(self, name, pid, result_r, deadline):
        self.name, self.pid, self.result_r, self.deadline = name, pid, result_r, deadline
        self.data, self.eof, self.status = b"", False, None

    def message(self):
        """The test's complete message, or None while incomplete."""
        if len(self.data) < 4:
            return None
        (size,) = struct.unpack("<I", self.data[:4])
        if size > MAX_VALUE_BYTES:
            return '{"error": "wrong output", "detail": "return value too large"}'
        return self.data[4:4 + size].decode("utf-8", "replace") if len(self.data) >= 4 + size else None


def _drain(test):
    os.set_blocking(test.result_r, False)
    try:
        while len(test.data) <= MAX_VALUE_BYTES + 4 and (chunk := os.read(test.result_r, 1 << 16)):
            test.data += chunk
    except BlockingIOError:
        pass


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _verdict(test, timed_out):
    """The result entry of a finished test."""
    message = test.message()
    if message is not None:
        return {"message": message}
    if timed_out:
        return {"error": "timeout", "detail": "exceeded the per-test time limit"}
    status = test.status
    if status is not None and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU:
            return {"error": "timeout", "detail": "exceeded the CPU-time limit"}
        return {"error": "crashed", "detail": f"killed by {signal.Signals(sig).name}"}
    code = os.WEXITSTATUS(status) if status is not None else None
    return {"error": "crashed", "detail": f"exited (status {code}) without a result"}


def _end_leftovers():
    """Kill and reap what the program left behind, before the next job (zombies count as processes)."""
    while True:
        if os.getpid() == 1:  # PID 1 of our namespace: kill(-1) reaches exactly the rest of it
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        if os.getpid() != 1:
            return  # without a namespace of our own, orphans are not ours to reap
        time.sleep(0.001)


def _supervise(job, isolation, ids, runner_pid, libc):
    """Run every test call of a job, a few at a time, each in a fresh process; return the results."""
    isolation["user"] = f"uid {ids[0]} (no account)" if ids else "the evaluator's user"
    # A fresh tmpfs for this program where the runner has a mount namespace; the report says if it got one.
    mounted, all_mounted = _mount_private_places(libc) if isolation["private_tmp"] else ([], False)
    isolation["private_tmp"] = all_mounted
    places = ",".join(PRIVATE_PLACES)
    isolation["tmp"] = (f"private {places} ON (tmpfs, {PRIVATE_MB} MB each)" if isolation["private_tmp"] else
                        f"private {places} OFF: " + ("cleaned after each program" if ids else "not cleaned"))
    workdir = tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{runner_pid}-", dir=PRIVATE_PLACES[0])
    if ids:
        os.chown(workdir, *ids)
    output_r, output_w = os.pipe()
    os.set_blocking(output_r, False)
    output, results, running = b"", {}, {}
    pending = list(job["calls"])
    timeout, at_once = float(job["timeout"]), int(job["tests_at_once"])
    while pending or running:
        while pending and len(running) < at_once:
            name, call = pending.pop(0)
            result_r, result_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                _run_test(job["code"], call, workdir, result_w, output_w, timeout, ids, libc)
            try:
                os.setpgid(pid, pid)
            except (ProcessLookupError, PermissionError):
                pass  # the child already did it (or already exited)
            os.close(result_w)
            running[result_r] = _Test(name, pid, result_r, time.monotonic() + timeout)
        if not running:
            break
        waiting = [output_r] + [fd for fd, test in running.items() if not test.eof]
        nearest = min(test.deadline for test in running.values())
        ready = select.select(waiting, [], [], max(0.0, min(nearest - time.monotonic(), 0.01)))[0]
        for fd in ready:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if fd == output_r:
                output += chunk[: max(0, KEPT_OUTPUT_BYTES - len(output))]  # drained, mostly dropped
            elif chunk:
                running[fd].data += chunk
                if len(running[fd].data) > MAX_VALUE_BYTES + 4:
                    running[fd].data = running[fd].data[: MAX_VALUE_BYTES + 4]
            else:
                running[fd].eof = True
        now = time.monotonic()
        for fd, test in list(running.items()):
            if test.status is None:
                pid, status = os.waitpid(test.pid, os.WNOHANG)
                test.status = status if pid else None
            timed_out = now >= test.deadline
            if test.message() is None and test.status is None and not timed_out:
                continue
            _kill_group(test.pid)  # also ends threads and children the program left behind
            if test.status is None:
                test.status = os.waitpid(test.pid, 0)[1]
            _drain(test)  # what it wrote before it exited, not yet read
            results[test.name] = _verdict(test, timed_out and test.message() is None)
            os.close(fd)
            del running[fd]
    _end_leftovers()
    try:
        output += os.read(output_r, KEPT_OUTPUT_BYTES)[: max(0, KEPT_OUTPUT_BYTES - len(output))]
    except BlockingIOError:
        pass
    os.close(output_r)
    os.close(output_w)
    shutil.rmtree(workdir, ignore_errors=True)
    for place in reversed(mounted):  # the tmpfs and all in it go; DETACH: even if a leftover holds it
        libc.umount2(place.encode(), MNT_DETACH)
    if ids and not isolation["private_tmp"]:
        for place in PRIVATE_PLACES:
            _remove_owned(place, ids[0])
    return {"results": results, "output": output.decode("utf-8", "replace"), "isolation": isolation}


def serve(parent_pid):
    """The runner: enter the namespaces, then a job per line on stdin and a reply per line on stdout."""
    libc = _libc()
    _die_with_parent(libc, parent_pid)
    import importlib
    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    runner_pid = os.getpid()
    _remove_stale_workdirs()
    ids = _unprivileged_ids(runner_pid)
    isolation = _enter_namespaces(libc)
    isolation["private_tmp"] = _enter_mount_namespace(libc)
    if isolation["pids"]:
        # The namespace's PID 1 is our first child; it serves the jobs, we wait. Its death (with ours,
        # or the evaluator's) makes the kernel kill everything left in the namespace.
        child = os.fork()
        if child:
            _, status = os.waitpid(child, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
        _die_with_parent(libc, runner_pid)
    for line in sys.stdin.buffer:
        reply = _supervise(json.loads(line), dict(isolation), ids, runner_pid, libc)
        data = (json.dumps(reply) + "\n").encode()
        while data:
            data = data[os.write(1, data):]


if __name__ == "__main__":
    if sys.argv[1:2] != ["--serve"]:
        sys.exit("colbench/sandbox.py is started by evaluate.py (as `sandbox.py --serve PID`)")
    serve(int(sys.argv[2]))
