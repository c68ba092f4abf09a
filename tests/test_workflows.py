"""The macOS workflow is what builds the app users download, and no Mac is at hand where this suite
usually runs: so the workflow is linted here (jactionlint, from the test extras: a retired runner
image, an action on a removed Node.js runtime, a broken expression all fail), and what it runs is
held against the README's promises. The packaging scripts are checked with shellcheck."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "macos-app.yml"
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: it comes with the test extras (pip install -e '.[test]')")
    return found


def lint(repo: Path) -> subprocess.CompletedProcess:
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(repo)}  # shellcheck beside it checks the run: scripts
    return subprocess.run([tool("jactionlint"), "--no-hints", "--oneline", "--no-color"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)


def copy_of_workflows(tmp_path: Path, edit=lambda text: text) -> Path:
    repo = tmp_path / "repo"
    (repo / ".github" / "workflows").mkdir(parents=True)
    (repo / ".git").mkdir()  # jactionlint looks for the repository's root
    shutil.copy(ROOT / ".github" / "jactionlint.yaml", repo / ".github")
    for f in (ROOT / ".github" / "workflows").glob("*.y*ml"):
        (repo / ".github" / "workflows" / f.name).write_text(edit(f.read_text()))
    return repo


def test_the_workflows_lint_clean(tmp_path):
    r = lint(copy_of_workflows(tmp_path))
    assert r.returncode == 0 and not r.stdout.strip(), r.stdout + r.stderr


@pytest.mark.parametrize("planted, rule", [
    (("actions/checkout@v7", "actions/checkout@v4"), "deprecated-node-runtime"),  # node20, removed by GitHub
    (("actions/upload-artifact@v7", "actions/upload-artifact@v3"), "outdated-action-runner"),  # node16
    (("os: [macos-15, macos-26]", "os: [macos-14, macos-26]"), "unknown-runner-label"),  # retired 2026-11
    (("runs-on: ${{ matrix.os }}", "runs-on: ${{ matrix.machine }}"), "undefined-property"),  # no such key
])
def test_the_lint_fails_on_what_would_break_the_mac_build(tmp_path, planted, rule):
    old, new = planted
    assert old in WORKFLOW.read_text()
    r = lint(copy_of_workflows(tmp_path, lambda text: text.replace(old, new)))
    assert r.returncode != 0 and rule in r.stdout, r.stdout + r.stderr


def test_the_workflow_tests_builds_self_tests_and_uploads_only_then():
    doc = yaml.safe_load(WORKFLOW.read_text())
    (job,) = doc["jobs"].values()
    assert set(job["strategy"]["matrix"]["os"]) >= {"macos-15"}  # Apple silicon images GitHub offers today
    steps = job["steps"]
    runs = [s.get("run", "") for s in steps]
    test_at = next(i for i, r in enumerate(runs) if r.startswith("make test"))  # the README's test command
    bundle_at = next(i for i, r in enumerate(runs) if r.startswith("make bundle"))
    upload_at = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert test_at < bundle_at < upload_at == len(steps) - 1
    upload = steps[upload_at]
    assert upload["with"]["if-no-files-found"] == "error" and upload["with"]["path"] == "build/artifact/"
    # nothing lets a failed step through to the upload
    assert not any(s.get("continue-on-error") or "always()" in str(s.get("if", "")) for s in steps)
    # make bundle on a Mac is the build script, then the unzipped copy's self-test, which fills build/artifact/
    make = subprocess.run(["make", "-s", "-n", "-C", str(ROOT), "bundle", "UNAME=Darwin", "PYTHON=python3"],
                          capture_output=True, text=True, timeout=60)
    assert make.stdout.splitlines() == ["PYTHON=python3 packaging/build_macos.sh",
                                        "SELFTEST_DEVICE=gpu packaging/test_app_macos.sh dist/DSpark-Studio-macOS.zip"]
    script = (ROOT / "packaging" / "test_app_macos.sh").read_text()
    for step in ("ditto -x -k", "codesign --verify --deep --strict", "plutil -lint", "env -i HOME=",
                 "--self-test", "open -W -n", "--on-screen", "device gpu (", "identical to plain",
                 'build/artifact/"'):
        assert step in script, step


def test_the_packaging_scripts_pass_shellcheck():
    scripts = sorted((ROOT / "packaging").glob("*.sh")) + [ROOT / ".ci" / "run"]
    r = subprocess.run([tool("shellcheck"), *map(str, scripts)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
