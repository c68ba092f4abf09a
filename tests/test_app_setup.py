"""Setting up on a fresh machine: `make setup` installs the system packages the app needs when
it can (Debian/Ubuntu as root), else prints the one command, and never fails; the app says
what is missing in one line instead of Qt aborting. No Qt window, no models."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAKE = shutil.which("make")


def fake_bin(folder: Path, **scripts: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in scripts.items():
        p = folder / name.replace("_", "-")
        p.write_text("#!/bin/sh\n" + body + "\n")
        p.chmod(0o755)
    return folder


def system_packages(path: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [MAKE, "-s", "-C", str(ROOT), "system-packages"], env={"PATH": path}, capture_output=True, text=True, timeout=60
    )


@pytest.mark.skipif(MAKE is None, reason="no make")
def test_make_system_packages_installs_or_says_the_one_command(tmp_path):
    system = "/usr/bin:/bin"
    # no dpkg (macOS, other Linux): nothing to do, nothing said
    r = system_packages(str(fake_bin(tmp_path / "none")))
    assert r.returncode == 0 and r.stdout == ""
    # Debian, packages missing, not root: the command to run
    user = fake_bin(tmp_path / "user", dpkg_query="exit 1", id="echo 1000")
    r = system_packages(f"{user}:{system}")
    assert r.returncode == 0 and "run: sudo apt-get install libopenblas0-pthread libxcb-cursor0" in r.stdout
    # as root: apt-get installs what is missing ...
    log = tmp_path / "apt.log"
    root = fake_bin(tmp_path / "root", dpkg_query="exit 1", id="echo 0", apt_get=f'echo "$@" >> {log}')
    r = system_packages(f"{root}:{system}")
    assert r.returncode == 0 and "installing system packages: libopenblas0-pthread" in r.stdout
    assert "install -y -qq --no-install-recommends libopenblas0-pthread libxcb-cursor0" in log.read_text()
    # ... and when it cannot (no network), says what to run and still does not fail
    broken = fake_bin(tmp_path / "broken", dpkg_query="exit 1", id="echo 0", apt_get="exit 100")
    r = system_packages(f"{broken}:{system}")
    assert r.returncode == 0 and "could not install them; run: apt-get install libopenblas0-pthread" in r.stdout


def test_a_missing_xcb_cursor_library_is_one_line_not_an_abort(monkeypatch, capsys):
    import ctypes.util

    from dspark_studio import main, startup

    monkeypatch.setattr(startup.sys, "platform", "linux")
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None if name == "xcb-cursor" else "lib")
    assert main.main([]) == 1
    err = capsys.readouterr().err
    assert "libxcb-cursor0" in err and "sudo apt-get install libxcb-cursor0" in err and err.count("\n") == 1
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")  # no X11 window: not needed
    assert startup.missing_system_library() is None


@pytest.mark.parametrize(
    "argv, environ, expected",
    [
        (["--screenshot", "x.png"], {"DISPLAY": ":0"}, "offscreen"),  # XQuartz on a Mac, a desktop on Linux
        (["--self-test", "x.png"], {"DISPLAY": ":0"}, None),  # decided when the self-test starts its window run
        (["--screenshot", "x.png", "--on-screen"], {"DISPLAY": ":0"}, None),
        (["--screenshot", "x.png"], {"QT_QPA_PLATFORM": "xcb"}, "xcb"),  # the user's choice wins
        ([], {"DISPLAY": ":0"}, None),  # the app itself opens its window
    ],
)
def test_headless_runs_draw_offscreen_whatever_display_there_is(argv, environ, expected):
    from dspark_studio import startup

    env = dict(environ)
    startup.headless_platform(startup.build_parser().parse_args(argv), env)
    assert env.get("QT_QPA_PLATFORM") == expected
