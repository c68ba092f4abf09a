"""Lines that work on Linux and fail on macOS, found in the source with ``ast`` (issue #38: the
suite runs on GitHub's macOS runners too, and nobody there reads a failure before it happens).

What it finds: a ``preexec_fn`` setting a resource limit macOS refuses (anywhere but
``tests/limits.py``, the one place that chooses limits per platform); and, unless the line is
guarded by a test of the platform or of the thing itself, paths macOS lacks (``/proc``,
``/sys``, ``/dev/full``, ``/dev/shm``, Debian's ``*-linux-gnu`` library folders, and ``/tmp``,
a link there), names the ``os``, ``signal``, ``resource``, ``select``, ``socket`` and ``time``
modules lack on macOS, Linux-only commands and GNU-only flags handed to a subprocess, ``fork``
and the start method multiprocessing defaults to, and two file names in one module that differ
only in case (one file on APFS as macOS formats it).

A guard is an ``if``/``elif``/``while``/conditional expression, an earlier operand of ``and``/``or``,
a ``pytest.mark.skipif`` on the function (or ``pytestmark``), or an earlier ``if`` in an enclosing
block that returns, raises or skips, whose test reads ``sys.platform``, ``os.name`` or
``platform.system()``, or checks the thing is there (``hasattr``, ``shutil.which``, ``.exists()``,
``os.path.exists``...). A ``try`` is no guard: it hides what a Mac does instead of saying it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HELPER = "tests/limits.py"
#: This check and its tests, whose path strings are patterns and reviewed lines, not uses.
CHECKER = ("tests/portability.py", "tests/test_portability.py")

NO_PROC = "macOS has no /proc"
#: Substring or prefix of a path string -> why it fails on macOS. Prefixes end in "/" or are whole.
LINUX_PATHS = {
    "/proc": NO_PROC,
    "/sys/": "macOS has no /sys",
    "/dev/full": "macOS has no /dev/full",
    "/dev/shm": "macOS has no /dev/shm",
    "-linux-gnu": "a Debian multiarch library folder, absent on macOS",
    "/tmp": "on macOS /tmp is a link to /private/tmp, so a path under it changes when resolved (use tmp_path or "
    "tempfile)",
}

_NO_FORK = (
    "fork without exec is unsafe on macOS once MLX's Metal or Qt is loaded: start a process "
    "(subprocess, or multiprocessing's spawn)"
)
#: module -> attribute -> why it fails on macOS.
LINUX_NAMES = {
    "os": {
        **dict.fromkeys(
            (
                "sched_getaffinity",
                "sched_setaffinity",
                "sched_getscheduler",
                "sched_setscheduler",
                "sched_getparam",
                "sched_setparam",
                "sched_rr_get_interval",
                "posix_fallocate",
                "posix_fadvise",
                "memfd_create",
                "pipe2",
                "fdatasync",
                "copy_file_range",
                "eventfd",
                "eventfd_read",
                "eventfd_write",
                "pidfd_open",
                "splice",
                "getxattr",
                "setxattr",
                "listxattr",
                "removexattr",
                "unshare",
                "setns",
                "getresuid",
                "getresgid",
                "setresuid",
                "setresgid",
                "O_DIRECT",
                "O_TMPFILE",
                "O_PATH",
                "O_NOATIME",
                "O_LARGEFILE",
                "MFD_CLOEXEC",
            ),
            "not in os on macOS",
        ),
        "fork": _NO_FORK,
        "forkpty": _NO_FORK,
    },
    "signal": dict.fromkeys(
        (
            "SIGRTMIN",
            "SIGRTMAX",
            "SIGPOLL",
            "SIGPWR",
            "SIGSTKFLT",
            "SIGCLD",
            "sigwaitinfo",
            "sigtimedwait",
            "pidfd_send_signal",
        ),
        "not in signal on macOS",
    ),
    "resource": dict.fromkeys(
        (
            "RLIMIT_MSGQUEUE",
            "RLIMIT_NICE",
            "RLIMIT_RTPRIO",
            "RLIMIT_RTTIME",
            "RLIMIT_SIGPENDING",
            "RLIMIT_LOCKS",
            "prlimit",
        ),
        "not in resource on macOS",
    ),
    "select": dict.fromkeys(("epoll", "EPOLLIN", "EPOLLOUT", "EPOLLET"), "not in select on macOS (kqueue there)"),
    "socket": dict.fromkeys(("AF_NETLINK", "AF_PACKET", "SO_PEERCRED"), "not in socket on macOS"),
    "time": dict.fromkeys(("CLOCK_BOOTTIME", "CLOCK_TAI"), "not in time on macOS"),
}
#: Limits XNU refuses below the address space a process has already mapped (tests/limits.py says
#: where in its source); reading them is fine, setting them is what fails.
REFUSED_LIMITS = {"RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_RSS"}
#: Limits a ``preexec_fn`` may set outside tests/limits.py: Linux and XNU both take and enforce them.
HONOURED_LIMITS = {"RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CPU", "RLIMIT_CORE"}
_PREEXEC = (
    "macOS refuses RLIMIT_AS and RLIMIT_DATA (the child fails before its command runs): use "
    "limits.preexec, which sets what each platform honours"
)

_X11 = "an X11 program: a Mac has no X server"
#: A command's name -> why it fails on macOS.
LINUX_COMMANDS = {
    "timeout": "GNU coreutils, not on macOS (give subprocess a timeout=)",
    "stdbuf": "GNU coreutils, not on macOS",
    "setsid": "util-linux, not on macOS (give subprocess start_new_session=True)",
    "nproc": "GNU coreutils, not on macOS",
    "sha256sum": "GNU coreutils, not on macOS (shasum -a 256 there)",
    "md5sum": "GNU coreutils, not on macOS",
    "tac": "GNU coreutils, not on macOS",
    "mount": "mount -t tmpfs is Linux's (hdiutil on macOS)",
    "umount": "pairs with Linux's mount -t tmpfs",
    "ldd": "not on macOS (otool -L there)",
    "free": "procps, not on macOS",
    "lscpu": "util-linux, not on macOS",
    "taskset": "util-linux, not on macOS",
    "ionice": "util-linux, not on macOS",
    "chrt": "util-linux, not on macOS",
    "numactl": "not on macOS",
    "lsblk": "util-linux, not on macOS",
    "findmnt": "util-linux, not on macOS",
    "losetup": "util-linux, not on macOS",
    "getent": "glibc's, not on macOS",
    "strace": "Linux only (dtruss on macOS)",
    "patchelf": "ELF only",
    "apt-get": "Debian's",
    "dpkg": "Debian's",
    "dpkg-query": "Debian's",
    "xvfb-run": _X11,
    "Xvfb": _X11,
    "xprop": _X11,
    "openbox": _X11,
    "xdotool": _X11,
}
#: (command, flag) -> why the flag fails with the BSD tool macOS ships.
GNU_FLAGS = {
    ("sed", "-i"): "BSD sed's -i takes a suffix (-i '')",
    ("stat", "-c"): "BSD stat formats with -f",
    ("stat", "--format"): "BSD stat formats with -f",
    ("date", "-d"): "BSD date parses with -j -f",
    ("date", "--date"): "BSD date parses with -j -f",
    ("cp", "--reflink"): "BSD cp has no --reflink (-c clones)",
    ("cp", "-t"): "BSD cp has no -t",
    ("du", "-b"): "BSD du has no -b",
    ("grep", "-P"): "BSD grep has no -P",
    ("find", "-printf"): "BSD find has no -printf",
    ("xargs", "-r"): "BSD xargs has no -r (it is the default)",
    ("df", "--output"): "BSD df has no --output",
    ("mktemp", "--suffix"): "BSD mktemp has no --suffix",
}
RUNNERS = {
    "run",
    "Popen",
    "call",
    "check_call",
    "check_output",
    "getoutput",
    "getstatusoutput",
    "system",
    "popen",
    "execv",
    "execvp",
    "execvpe",
    "execl",
    "execlp",
    "spawnv",
    "spawnvp",
    "create_subprocess_exec",
    "create_subprocess_shell",
}

_FILE_NAME = re.compile(r"^[\w./-]*\w\.[A-Za-z]\w*$|^[\w.-]+/[\w./-]+$")
_LEAVES = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_SKIPS = {"skip", "xfail", "exit", "importorskip"}
_EXISTS = {
    "exists",
    "is_file",
    "is_dir",
    "is_socket",
    "is_char_device",
    "is_block_device",
    "is_fifo",
    "isfile",
    "isdir",
    "lexists",
    "access",
    "which",
}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    what: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}: {self.why}"


def sources(root: Path = ROOT) -> list[Path]:
    """Every test module and helper (tests/*.py), measurement script (measure/*.py) and the library
    and app sources."""
    return sorted(
        [*root.glob("tests/*.py"), *root.glob("measure/*.py"), *root.glob("dspark/**/*.py"), *root.glob("app/**/*.py")]
    )


def check_tree(root: Path = ROOT) -> list[Finding]:
    return [
        f for p in sources(root) for f in check_source(p.read_text(encoding="utf-8"), p.relative_to(root).as_posix())
    ]


def check_source(text: str, path: str = "<planted>") -> list[Finding]:
    """What in one module's source would fail on macOS, as file:line findings."""
    return _Module(ast.parse(text), path).findings()


class _Module:
    def __init__(self, tree: ast.Module, path: str):
        self.tree, self.path = tree, path
        self.parent: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node
        self.functions: dict[str, list[ast.AST]] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.setdefault(node.name, []).append(node)
        #: names bound by ``from os import fork`` and the like -> (module, name)
        self.aliases: dict[str, tuple[str, str]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and not node.level:
                self.aliases.update({a.asname or a.name: (node.module or "", a.name) for a in node.names})

    def findings(self) -> list[Finding]:
        found: list[Finding] = []
        exempt = self.path == HELPER
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and not self._prose(node):
                found += self._path(node)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                found += self._name(node, node.value.id, node.attr)
            elif isinstance(node, ast.Name) and node.id in self.aliases:
                found += self._name(node, *self.aliases[node.id])
            elif isinstance(node, ast.Call):
                found += self._command(node) + self._start_method(node)
                found += [] if exempt else self._preexec(node) + self._setrlimit(node)
        return sorted(set(found + self._case_twins()), key=lambda f: (f.line, f.what))

    # ------------------------------------------------------------------------------ the rules
    def _path(self, node: ast.Constant) -> list[Finding]:
        s = node.value
        if self.path in CHECKER:
            return []
        for key, why in LINUX_PATHS.items():
            hit = (
                (s.startswith("/") and re.search(re.escape(key) + "(/|$)", s))
                if key.startswith("-")
                else (s == key.rstrip("/") or s.startswith(key.rstrip("/") + "/"))
            )
            if hit and not self.guarded(node):
                return [Finding(self.path, node.lineno, what=repr(s[:80]), why=why)]
        return []

    def _name(self, node: ast.AST, module: str, name: str) -> list[Finding]:
        why = LINUX_NAMES.get(module, {}).get(name)
        if why is None or self.guarded(node):
            return []
        return [Finding(self.path, node.lineno, what=f"{module}.{name}", why=why)]

    def _setrlimit(self, call: ast.Call) -> list[Finding]:
        if _called(call) not in ("setrlimit", "prlimit") or not call.args or self.guarded(call):
            return []
        limit = _limit_name(call.args[1] if _called(call) == "prlimit" and len(call.args) > 1 else call.args[0])
        if limit not in REFUSED_LIMITS:
            return []
        return [
            Finding(
                self.path,
                call.lineno,
                what=f"setrlimit({limit})",
                why="macOS refuses it below the address space already mapped (see tests/limits.py)",
            )
        ]

    def _command(self, call: ast.Call) -> list[Finding]:
        if _called(call) not in RUNNERS or not call.args:
            return []
        argv = call.args[0]
        if isinstance(argv, (ast.List, ast.Tuple)):
            words = [e.value for e in argv.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            first = argv.elts[0] if argv.elts else None
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                return []
        elif isinstance(argv, ast.Constant) and isinstance(argv.value, str):
            words = argv.value.split()
        else:
            return []
        if not words:
            return []
        name = words[0].rsplit("/", 1)[-1]
        why = LINUX_COMMANDS.get(name) or next(
            (GNU_FLAGS[(name, w.split("=")[0])] for w in words[1:] if (name, w.split("=")[0]) in GNU_FLAGS), None
        )
        if why is None or self.guarded(call):
            return []
        return [Finding(self.path, call.lineno, what=" ".join(words)[:80], why=why)]

    def _start_method(self, call: ast.Call) -> list[Finding]:
        name = _called(call)
        if name in ("get_context", "set_start_method") and call.args and _const(call.args[0]) == "fork":
            why = "fork is unsafe on macOS once MLX's Metal or Qt is loaded (spawn is its default)"
        elif (name in ("Process", "Pool") and _receiver(call) in ("multiprocessing", "mp")) or (
            name == "ProcessPoolExecutor" and not any(k.arg == "mp_context" for k in call.keywords)
        ):
            why = (
                "the default start method: fork on Linux (Python < 3.14), spawn on macOS, so the child "
                "inherits different state; take a context (get_context('spawn'))"
            )
        else:
            return []
        return [] if self.guarded(call) else [Finding(self.path, call.lineno, what=f"{name}(...)", why=why)]

    def _preexec(self, call: ast.Call) -> list[Finding]:
        """A ``preexec_fn`` that sets a limit macOS refuses, or one this cannot read: strict, guarded
        or not, since the branch belongs in tests/limits.py."""
        out = []
        for kw in call.keywords:
            if kw.arg != "preexec_fn" or (isinstance(kw.value, ast.Constant) and kw.value.value is None):
                continue
            if (
                isinstance(kw.value, ast.Call)
                and _called(kw.value) == "preexec"
                and (_receiver(kw.value) == "limits" or self.aliases.get("preexec") == ("limits", "preexec"))
            ):
                continue  # tests/limits.py chooses per platform
            bodies = self._bodies(kw.value)
            if bodies is None:
                out.append(
                    Finding(
                        self.path,
                        kw.value.lineno,
                        what=ast.unparse(kw.value)[:80],
                        why="a preexec_fn this check cannot follow: set limits with limits.preexec",
                    )
                )
                continue
            for body in bodies:
                for node in ast.walk(body):
                    if isinstance(node, ast.Call) and _called(node) in ("setrlimit", "prlimit"):
                        limit = _limit_name(node.args[0]) if node.args else None
                        if limit not in HONOURED_LIMITS:
                            out.append(
                                Finding(
                                    self.path,
                                    node.lineno,
                                    what=f"preexec_fn sets {limit or 'a limit named at run time'}",
                                    why=_PREEXEC,
                                )
                            )
        return out

    def _bodies(self, value: ast.AST) -> list[ast.AST] | None:
        """The code a ``preexec_fn`` value runs: a lambda, a function of this module by name, or what
        a factory of this module builds; None when it is none of these."""
        if isinstance(value, ast.Lambda):
            return [value.body]
        if isinstance(value, ast.Name) and value.id in self.functions:
            return self.functions[value.id]
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in self.functions:
            return self.functions[value.func.id]
        if isinstance(value, ast.IfExp):
            parts = [self._bodies(value.body), self._bodies(value.orelse)]
            return None if None in parts else [b for p in parts for b in p]
        return None

    def _case_twins(self) -> list[Finding]:
        """File names in one module that differ only in case: one file on APFS as macOS formats it."""
        seen: dict[str, dict[str, int]] = {}
        for node in ast.walk(self.tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and _FILE_NAME.match(node.value)
                and not self._prose(node)
            ):
                seen.setdefault(node.value.lower(), {}).setdefault(node.value, node.lineno)
        return [
            Finding(
                self.path,
                line,
                what=repr(name),
                why=f"differs from {sorted(set(names) - {name})} only in case: one file on a case-insensitive "
                "disk (APFS, macOS's default)",
            )
            for names in seen.values()
            if len(names) > 1
            for name, line in names.items()
        ]

    # ------------------------------------------------------------------------------ guards
    def _prose(self, node: ast.Constant) -> bool:
        """A docstring or a bare string statement: words about a path, not a use of it."""
        return isinstance(self.parent.get(node), ast.Expr)

    def guarded(self, node: ast.AST) -> bool:
        child, parent = node, self.parent.get(node)
        while parent is not None:
            if isinstance(parent, (ast.If, ast.IfExp, ast.While)) and _is_guard(parent.test):
                return True
            if isinstance(parent, ast.BoolOp) and any(
                _is_guard(v) for v in parent.values[: parent.values.index(child)]
            ):
                return True
            if isinstance(parent, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)) and any(
                _is_guard(test) for gen in parent.generators for test in gen.ifs
            ):
                return True  # it keeps only what is there
            if isinstance(parent, ast.Call) and (_called(parent) in _EXISTS or _called(parent) == "hasattr"):
                return True  # the line checks this very thing (``Path("/proc/x").exists()``)
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and any(
                isinstance(d, ast.Call) and _called(d) == "skipif" and d.args and _is_guard(d.args[0])
                for d in parent.decorator_list
            ):
                return True
            if self._left_before(child, parent):
                return True
            child, parent = parent, self.parent.get(parent)
        return self._module_skipped()

    def _left_before(self, stmt: ast.AST, block_owner: ast.AST) -> bool:
        """An ``if <guard>:`` earlier in the same block that returns, raises or skips."""
        for field in ("body", "orelse", "finalbody"):
            block = getattr(block_owner, field, None)
            if isinstance(block, list) and stmt in block:
                return any(
                    isinstance(s, ast.If) and _is_guard(s.test) and _leaves(s.body) for s in block[: block.index(stmt)]
                )
        return False

    def _module_skipped(self) -> bool:
        for s in self.tree.body:
            if isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in s.targets):
                return any(
                    isinstance(n, ast.Call) and _called(n) == "skipif" and n.args and _is_guard(n.args[0])
                    for n in ast.walk(s.value)
                )
        return False


# ------------------------------------------------------------------------------ expressions
def _called(call: ast.Call) -> str | None:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _receiver(call: ast.Call) -> str | None:
    f = call.func
    return f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else None


def _const(node: ast.AST):
    return node.value if isinstance(node, ast.Constant) else None


def _limit_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _is_guard(test: ast.AST) -> bool:
    """Does this expression read the platform, or check that a thing is there?"""
    for n in ast.walk(test):
        if (
            isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name)
            and (n.value.id, n.attr) in (("sys", "platform"), ("os", "name"))
        ):
            return True
        if isinstance(n, ast.Call):
            name = _called(n)
            if (
                name in _EXISTS
                or (name == "hasattr" and len(n.args) == 2)
                or (_receiver(n) == "platform" and name in ("system", "platform", "mac_ver", "uname"))
            ):
                return True
    return False


def _leaves(body: list[ast.stmt]) -> bool:
    last = body[-1] if body else None
    return isinstance(last, _LEAVES) or (
        isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) and _called(last.value) in _SKIPS
    )


__all__ = [
    "Finding",
    "GNU_FLAGS",
    "HELPER",
    "HONOURED_LIMITS",
    "LINUX_COMMANDS",
    "LINUX_NAMES",
    "LINUX_PATHS",
    "REFUSED_LIMITS",
    "check_source",
    "check_tree",
    "sources",
]
