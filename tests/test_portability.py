"""Nothing in the tests, the library or the app assumes Linux without saying so (issue #38): the
suite runs on GitHub's macOS runners too, where a resource limit in a ``preexec_fn``, ``/proc``, a
``timeout`` command or ``os.sched_getaffinity`` fail. ``portability.py`` reads every source with
``ast``; here it runs over the tree, and over planted lines of each kind it must find and their
guarded twins it must leave, so that the check itself can fail."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import portability
import pytest

from dspark import machine

ROOT = Path(__file__).resolve().parent.parent

_OPENBLAS = (
    "read only by dspark.blas.use_fast_blas, which returns first off Linux, and by packaging/bundle.py, "
    "which keeps the ones that exist"
)
#: (file, what) -> why the line is right as it is, where the guard is not beside it.
REVIEWED = {
    ("dspark/blas.py", repr("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3")): _OPENBLAS,
    ("dspark/blas.py", repr("/usr/lib/aarch64-linux-gnu/openblas-pthread/libblas.so.3")): _OPENBLAS,
    ("tests/test_packaging.py", repr("/usr/lib/x86_64-linux-gnu")): (
        "text in a bundle's table of contents for bundle.link_openblas, which rewrites names: no file is opened"
    ),
}


def test_no_source_assumes_linux_without_saying_so():
    found = portability.check_tree()
    assert len(portability.sources()) > 100  # tests/*.py, dspark/ and app/ were read
    assert [str(f) for f in found if (f.path, f.what) not in REVIEWED] == []
    stale = set(REVIEWED) - {(f.path, f.what) for f in found}
    assert not stale, f"reviewed lines no longer there (drop them from REVIEWED): {sorted(stale)}"


# the issue's line, as it stood in test_hostile_training.py
ISSUE = """
import resource, subprocess, sys

def limited():
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))

r = subprocess.run([sys.executable, "-m", "dspark.cli"], capture_output=True, preexec_fn=limited)
"""

PLANTED = [  # (source, what the finding names)
    (ISSUE, "preexec_fn sets RLIMIT_AS"),
    (
        "subprocess.run(c, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_DATA, (1, 1)))",
        "preexec_fn sets RLIMIT_DATA",
    ),
    (
        """
     def capped(n):
         def f():
             resource.setrlimit(resource.RLIMIT_AS, (n, n))
         return f
     subprocess.Popen(c, preexec_fn=capped(5))
     """,
        "preexec_fn sets RLIMIT_AS",
    ),
    (
        """
     def f():
         resource.setrlimit(getattr(resource, name), (1, 1))
     subprocess.run(c, preexec_fn=f)
     """,
        "preexec_fn sets a limit named at run time",
    ),
    ("subprocess.run(c, preexec_fn=elsewhere.limit)", "elsewhere.limit"),
    ("resource.setrlimit(resource.RLIMIT_AS, (1, 1))", "setrlimit(RLIMIT_AS)"),
    ("from resource import RLIMIT_DATA, setrlimit\nsetrlimit(RLIMIT_DATA, (1, 1))", "setrlimit(RLIMIT_DATA)"),
    ("text = open('/proc/self/status').read()", "'/proc/self/status'"),
    ("p = Path(f'/proc/{pid}/status')", "'/proc/'"),
    ("open('/dev/full', 'w').write('x')", "'/dev/full'"),
    ("d = Path('/dev/shm') / 'x'", "'/dev/shm'"),
    ("d = Path('/tmp/dspark-run')", "'/tmp/dspark-run'"),
    ("lib = ctypes.CDLL('/usr/lib/x86_64-linux-gnu/libopenblas.so.0')", "'/usr/lib/x86_64-linux-gnu/libopenblas.so.0'"),
    ("n = len(os.sched_getaffinity(0))", "os.sched_getaffinity"),
    ("from os import sched_getaffinity\nn = len(sched_getaffinity(0))", "os.sched_getaffinity"),
    ("os.posix_fallocate(fd, 0, 1 << 20)", "os.posix_fallocate"),
    ("fd = os.memfd_create('x')", "os.memfd_create"),
    ("signal.signal(signal.SIGRTMIN, handler)", "signal.SIGRTMIN"),
    ("p = select.epoll()", "select.epoll"),
    ("pid = os.fork()", "os.fork"),
    ("subprocess.run(['timeout', '5', 'dspark', 'bench'])", "timeout 5 dspark bench"),
    ("subprocess.run('stdbuf -oL dspark train', shell=True)", "stdbuf -oL dspark train"),
    ("subprocess.check_call(['/usr/bin/ldd', lib])", "/usr/bin/ldd"),
    ("subprocess.run(['sed', '-i', 's/a/b/', 'f.txt'])", "sed -i s/a/b/ f.txt"),
    ("subprocess.run(['stat', '--format=%s', 'f'])", "stat --format=%s f"),
    ("ctx = multiprocessing.get_context('fork')", "get_context(...)"),
    ("multiprocessing.Process(target=work).start()", "Process(...)"),
    ("with ProcessPoolExecutor() as ex:\n    pass", "ProcessPoolExecutor(...)"),
    ("a = root / 'Config.json'\nb = root / 'config.json'", "'Config.json'"),
    # a try hides what a Mac does instead of branching on it: no guard
    ("try:\n    cpu = open('/proc/cpuinfo').read()\nexcept OSError:\n    cpu = ''", "'/proc/cpuinfo'"),
]


@pytest.mark.parametrize("source, what", PLANTED, ids=[w for _, w in PLANTED])
def test_a_planted_linux_only_line_is_found(source, what):
    found = portability.check_source(textwrap.dedent(source).strip(), "tests/planted.py")
    assert any(f.what == what for f in found), [str(f) for f in found]
    assert all(str(f).startswith("tests/planted.py:") and f.why for f in found)


GUARDED = [  # lines that say what they do off Linux: no finding
    "if sys.platform.startswith('linux'):\n    cpu = open('/proc/cpuinfo').read()",
    "if sys.platform == 'darwin':\n    cpu = sysctl()\nelif sys.platform.startswith('linux'):\n"
    "    subprocess.run(['mount', '-t', 'tmpfs', 'tmpfs', d])",
    "cpu = open('/proc/cpuinfo').read() if sys.platform == 'linux' else ''",
    "n = sys.platform == 'linux' and len(os.sched_getaffinity(0))",
    "n = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()",
    "def cpu():\n    if sys.platform != 'linux':\n        return None\n    return Path('/proc/cpuinfo').read_text()",
    "def test_x():\n    if not sys.platform.startswith('linux'):\n        pytest.skip('Linux only')\n"
    "    subprocess.run(['umount', d])",
    "@pytest.mark.skipif(sys.platform != 'linux', reason='X11')\ndef test_x():\n    subprocess.run(['Xvfb', ':9'])",
    "@pytest.mark.skipif(not shutil.which('xprop'), reason='X11')\ndef test_x():\n    subprocess.run(['xprop'])",
    "pytestmark = pytest.mark.skipif(sys.platform != 'linux', reason='Linux')\nopen('/dev/full', 'w')",
    "if Path('/dev/shm').exists():\n    d = Path('/dev/shm')",
    "found = [p for p in ('/usr/lib/x86_64-linux-gnu/libz.so.1',) if os.path.exists(p)]",
    "subprocess.run(c, preexec_fn=limits.preexec(address_space=8 << 30))",
    "from limits import preexec\nsubprocess.run(c, preexec_fn=preexec(file_size=1))",
    "subprocess.run(c, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (1, 1)))",
    "subprocess.run(c, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))",
    "subprocess.run(c, preexec_fn=None)",
    "soft, hard = resource.getrlimit(resource.RLIMIT_AS)",  # reading it is fine on macOS
    "def f():\n    '''/proc/cpuinfo names the CPU on Linux; macOS has no /proc.'''",
    "ctx = multiprocessing.get_context('spawn')\nctx.Process(target=work).start()",
    "ex = ProcessPoolExecutor(mp_context=multiprocessing.get_context('spawn'))",
    "subprocess.run(['sed', 's/a/b/', 'f.txt'])",
    "a = root / 'config.json'\nb = root / 'config.json'",
]


@pytest.mark.parametrize("source", GUARDED)
def test_a_line_guarded_by_the_platform_or_the_thing_itself_is_left(source):
    assert [str(f) for f in portability.check_source(source, "tests/planted.py")] == []


def test_a_line_planted_in_a_real_module_is_found_at_its_line():
    real = (ROOT / "tests" / "test_hostile_outputs.py").read_text()
    assert portability.check_source(real, "tests/test_hostile_outputs.py") == []
    found = portability.check_source(real + ISSUE, "tests/test_hostile_outputs.py")
    line = len(real.splitlines()) + 5  # the setrlimit line of ISSUE, which starts with a blank line
    assert {(f.line, f.what) for f in found} == {(line, "preexec_fn sets RLIMIT_AS"), (line, "setrlimit(RLIMIT_AS)")}


def test_only_the_limits_helper_may_choose_limits_in_a_preexec_fn():
    """tests/limits.py sets limits named at run time, chosen per platform: the one place allowed."""
    helper = (ROOT / portability.HELPER).read_text()
    assert portability.check_source(helper, portability.HELPER) == []
    elsewhere = portability.check_source(helper, "tests/limits_copy.py")
    assert [f.what for f in elsewhere] == ["preexec_fn sets a limit named at run time"], [str(f) for f in elsewhere]


def test_the_cpu_is_named_on_linux_and_on_a_mac(monkeypatch):
    """dspark.costs keys its cache by the CPU's name (dspark.machine.cpu_name): Linux's is in
    /proc/cpuinfo; macOS, which has no /proc, tells it through sysctl (run here by a stand-in)."""
    asked = []

    def sysctl(argv, **kw):
        asked.append(argv)
        return subprocess.CompletedProcess(argv, 0, "Apple M2 Pro\n", "")

    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(machine.subprocess, "run", sysctl)
    machine.cpu_name.cache_clear()
    try:
        assert machine.cpu_name() == "Apple M2 Pro"
        assert asked == [["/usr/sbin/sysctl", "-n", "machdep.cpu.brand_string"]]
        monkeypatch.setattr(machine.subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(argv, 1, "", ""))
        machine.cpu_name.cache_clear()
        monkeypatch.setattr(machine.platform, "processor", lambda: "arm")
        assert machine.cpu_name() == "arm"  # sysctl said nothing: what platform knows
        monkeypatch.setattr(sys, "platform", "linux")
        monkeypatch.setattr(machine, "Path", lambda p: _Text("processor : 0\nmodel name : Example CPU 9000\n"))
        machine.cpu_name.cache_clear()
        assert machine.cpu_name() == "Example CPU 9000"
    finally:
        machine.cpu_name.cache_clear()


class _Text:
    """A stand-in for the Path of /proc/cpuinfo: its text."""

    def __init__(self, text: str):
        self.text = text

    def read_text(self) -> str:
        return self.text
