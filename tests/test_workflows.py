"""The macOS workflow is what builds the app users download, and the release workflow what
publishes it, and no Mac is at hand where this suite usually runs: so the workflows are linted here
(jactionlint, from the test extras: a retired runner image, an action on a removed Node.js runtime,
a broken expression, an unknown input all fail), every action they use must name a major known to
exist (.github/action-majors.yaml), what they run is held against the README's promises, and the
steps' shell scripts that glue jobs together run here on stand-ins. The packaging scripts are
checked with shellcheck."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
WORKFLOW = WORKFLOWS / "macos-app.yml"
RELEASE = WORKFLOWS / "release.yml"
MAJORS = ROOT / ".github" / "action-majors.yaml"
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: it comes with the test extras (pip install -e '.[test]')")
    return found


def lint(repo: Path) -> subprocess.CompletedProcess:
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(repo)}  # shellcheck beside it checks the run: scripts
    return subprocess.run(
        [tool("jactionlint"), "--no-hints", "--oneline", "--no-color"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def copy_of_workflows(tmp_path: Path, edit=lambda text: text, only: str | None = None) -> Path:
    """The workflows in a repository of their own; ``edit`` changes every one, or only the file named."""
    repo = tmp_path / "repo"
    (repo / ".github" / "workflows").mkdir(parents=True)
    (repo / ".git").mkdir()  # jactionlint looks for the repository's root
    shutil.copy(ROOT / ".github" / "jactionlint.yaml", repo / ".github")
    for f in WORKFLOWS.glob("*.y*ml"):
        text = f.read_text()
        (repo / ".github" / "workflows" / f.name).write_text(edit(text) if only in (None, f.name) else text)
    return repo


def load(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as true
    return doc


def steps_of(path: Path, job: str) -> list[dict]:
    return load(path)["jobs"][job]["steps"]


def test_there_are_the_two_workflows_and_both_lint_clean(tmp_path):
    assert sorted(f.name for f in WORKFLOWS.glob("*.y*ml")) == ["macos-app.yml", "release.yml"]
    r = lint(copy_of_workflows(tmp_path))
    assert r.returncode == 0 and not r.stdout.strip(), r.stdout + r.stderr


@pytest.mark.parametrize(
    "file, planted, rule",
    [
        ("macos-app.yml", ("actions/checkout@v7", "actions/checkout@v4"), "deprecated-node-runtime"),  # node20, removed
        (
            "macos-app.yml",
            ("actions/upload-artifact@v7", "actions/upload-artifact@v3"),
            "outdated-action-runner",
        ),  # node16
        (
            "macos-app.yml",
            ("os: [macos-15, macos-26]", "os: [macos-14, macos-26]"),
            "unknown-runner-label",
        ),  # retired 2026-11
        (
            "macos-app.yml",
            ("runs-on: ${{ matrix.os }}", "runs-on: ${{ matrix.machine }}"),
            "undefined-property",
        ),  # no such key
        ("macos-app.yml", ("archive: false", "archiv: false"), "unknown-action-input"),
        ("release.yml", ("skip-decompress: true", "skip-decompres: true"), "unknown-action-input"),
        (
            "release.yml",
            ("retention-days: 7", "retention-day: 7"),
            "unknown-workflow-input",
        ),  # the call into macos-app.yml
        ("release.yml", ("        env:\n          GH_TOKEN: ${{ github.token }}\n", ""), "gh-without-token"),
        ("release.yml", ('"$GITHUB_REF_NAME"', '"${{ github.event.head_commit.message }}"'), "template-injection"),
    ],
)
def test_the_lint_fails_on_what_would_break_the_mac_build_or_the_release(tmp_path, file, planted, rule):
    old, new = planted
    assert old in (WORKFLOWS / file).read_text()
    r = lint(copy_of_workflows(tmp_path, lambda text: text.replace(old, new), only=file))
    assert r.returncode != 0 and rule in r.stdout, r.stdout + r.stderr


# ------------------------------------------------------------------ the actions' majors, kept in the repository
def uses_in(text: str) -> list[str]:
    return [u.strip().strip("'\"") for u in re.findall(r"^\s*(?:-\s*)?uses:\s*(\S+)", text, re.M)]


def unknown_majors(texts: dict[str, str], known: dict) -> list[str]:
    """Each `uses:` (a local workflow or action aside) whose action or major is not in ``known``."""
    bad = []
    for name, text in texts.items():
        for use in uses_in(text):
            if use.startswith("./"):
                continue
            action, _, ref = use.partition("@")
            if action not in known:
                bad.append(f"{name}: {use}: {action} is not in .github/action-majors.yaml")
            elif ref not in known[action]["majors"]:
                bad.append(
                    f"{name}: {use}: {ref} is not a major of {action} known to exist ({known[action]['checked']})"
                )
    return bad


def test_every_action_names_a_major_known_to_exist():
    known = yaml.safe_load(MAJORS.read_text())
    assert all(set(v) == {"majors", "checked"} and v["majors"] and "github.com" in v["checked"] for v in known.values())
    texts = {f.name: f.read_text() for f in WORKFLOWS.glob("*.y*ml")}
    assert unknown_majors(texts, known) == []
    used = {u.partition("@")[0] for t in texts.values() for u in uses_in(t) if not u.startswith("./")}
    assert used == set(known), "listed but unused, or used but unlisted"  # the list does not rot
    assert len([u for t in texts.values() for u in uses_in(t)]) >= 8  # the reader sees every `uses:`


def test_a_planted_major_that_does_not_exist_fails():
    known = yaml.safe_load(MAJORS.read_text())
    text = WORKFLOW.read_text().replace("actions/upload-artifact@v7", "actions/upload-artifact@v99", 1)
    assert unknown_majors({"macos-app.yml": text}, known) == [
        "macos-app.yml: actions/upload-artifact@v99: v99 is not a major of actions/upload-artifact known to exist "
        f"({known['actions/upload-artifact']['checked']})"
    ]
    text = RELEASE.read_text().replace("actions/checkout@v7", "actoins/checkout@v7", 1)
    assert unknown_majors({"release.yml": text}, known) == [
        "release.yml: actoins/checkout@v7: actoins/checkout is not in .github/action-majors.yaml"
    ]
    assert unknown_majors({"x.yml": "    - uses: actions/checkout@main\n"}, known)  # a branch is not a major


# ------------------------------------------------------------------ what the macOS workflow runs
def test_every_job_and_step_of_every_workflow_has_a_time_limit():
    """macOS has no timeout(1): a hung GPU probe or `open -W` must end well before GitHub's 6 hours."""
    for path in WORKFLOWS.glob("*.y*ml"):
        for name, job in load(path)["jobs"].items():
            if "uses" in job:  # a called workflow: its own jobs have limits
                continue
            assert 0 < job["timeout-minutes"] <= 180, (path.name, name)
            for step in job["steps"]:
                assert 0 < step.get("timeout-minutes", 0) <= job["timeout-minutes"], (path.name, name, step)


def test_only_a_superseded_pull_request_run_is_cancelled():
    doc = load(WORKFLOW)
    assert doc["concurrency"]["cancel-in-progress"] == "${{ github.event_name == 'pull_request' }}"
    assert "github.event.pull_request.number" in doc["concurrency"]["group"]  # pull requests do not cancel each other
    release = load(RELEASE)
    assert release["concurrency"]["cancel-in-progress"] is False
    assert (
        release["concurrency"]["group"] != doc["concurrency"]["group"]
    )  # a caller sharing its callee's group deadlocks


def test_the_workflow_tests_builds_self_tests_and_uploads_only_then():
    doc = load(WORKFLOW)
    (job,) = doc["jobs"].values()
    assert set(job["strategy"]["matrix"]["os"]) >= {"macos-15"}  # Apple silicon images GitHub offers today
    steps = job["steps"]
    runs = [s.get("run", "") for s in steps]
    probe_at = next(i for i, r in enumerate(runs) if "packaging/probe_metal.sh" in r)
    test_at = next(i for i, r in enumerate(runs) if r.startswith("make test"))  # the README's test command
    bundle_at = next(i for i, r in enumerate(runs) if r.startswith("make bundle"))
    uploads = [i for i, s in enumerate(steps) if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert probe_at < test_at < bundle_at < uploads[0] and uploads == [len(steps) - 2, len(steps) - 1]
    app, selftest = (steps[i]["with"] for i in uploads)
    # the app's zip as it is, no zip around it, named per image (an unarchived artifact takes its file's name)
    assert app["archive"] is False and app["path"] == "build/artifact/DSpark-Studio-macOS-built-on-${{ matrix.os }}.zip"
    assert selftest["name"] == "DSpark-Studio-selftest-${{ matrix.os }}"
    assert set(selftest["path"].split()) == {
        f"build/artifact/{f}" for f in ("metal.txt", "selftest.png", "selftest-launched.png")
    }
    for upload in (app, selftest):
        assert upload["if-no-files-found"] == "error"
        assert upload["retention-days"] == "${{ inputs.retention-days || 14 }}"  # pushes to main: two weeks
    assert doc["on"]["workflow_call"]["inputs"]["retention-days"]["default"] == 14
    # nothing lets a failed step through to the upload
    assert not any(s.get("continue-on-error") or "always()" in str(s.get("if", "")) for s in steps)
    # make bundle on a Mac is the build script, then the unzipped copy's self-test, which fills build/artifact/
    make = lambda *extra: subprocess.run(
        ["make", "-s", "-n", "-C", str(ROOT), "bundle", "UNAME=Darwin", "PYTHON=python3", *extra],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.splitlines()
    assert make() == [
        "PYTHON=python3 packaging/build_macos.sh",
        "SELFTEST_DEVICE=gpu packaging/test_app_macos.sh dist/DSpark-Studio-macOS.zip",
    ]
    assert (
        make("SELFTEST_DEVICE=cpu")[1] == "SELFTEST_DEVICE=cpu packaging/test_app_macos.sh dist/DSpark-Studio-macOS.zip"
    )
    script = (ROOT / "packaging" / "test_app_macos.sh").read_text()
    for step in (
        "ditto -x -k",
        "codesign --verify --deep --strict",
        "plutil -lint",
        "env -i HOME=",
        "--self-test",
        "open -W -n",
        "--on-screen",
        "device gpu (",
        "identical to plain",
        '--device "$device"',
        "Metal not exercised",
        'build/artifact/"',
        "metal.txt",
    ):
        assert step in script, step


def run_step(step: dict, cwd: Path, env: dict, values: dict | None = None) -> subprocess.CompletedProcess:
    """A step's `run:` as GitHub runs it on Linux and macOS (bash -e with pipefail), its `env:`
    set and the ${{ }} expressions given in ``values`` put in."""

    def fill(text: str) -> str:
        return re.sub(r"\$\{\{\s*(.*?)\s*\}\}", lambda m: (values or {})[m.group(1)], text)

    step_env = {k: fill(str(v)) for k, v in step.get("env", {}).items()}
    script = cwd / "step.sh"
    script.write_text(fill(step["run"]))
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), **env, **step_env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "verdict",
    [
        "gpu: dspark.selftest: device gpu (Apple M4): computes what the CPU computes",
        "cpu: the GPU probe was killed by signal 11 (no output)",
    ],
)
def test_the_probe_step_sends_the_tests_and_the_self_test_to_the_device_that_works(tmp_path, verdict):
    (step,) = [s for s in steps_of(WORKFLOW, "app") if "probe_metal.sh" in s.get("run", "")]
    fake = tmp_path / "packaging" / "probe_metal.sh"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho 'noise on stderr' >&2\necho '{verdict}'\n")
    fake.chmod(0o755)
    env_file = tmp_path / "github_env"
    r = run_step(step, tmp_path, {"GITHUB_ENV": str(env_file)})
    assert r.returncode == 0, r.stderr
    device = verdict[:3]
    assert env_file.read_text().splitlines() == [
        f"DSPARK_DEVICE={device}",
        f"SELFTEST_DEVICE={device}",
        f"METAL_PROBE={verdict}",
    ]
    assert ("::warning::" in r.stdout) == (device == "cpu")


def test_the_naming_step_names_the_zip_the_upload_takes_and_summarises_metal(tmp_path):
    steps = steps_of(WORKFLOW, "app")
    (step,) = [s for s in steps if "GITHUB_STEP_SUMMARY" in s.get("run", "")]
    artifact = tmp_path / "build" / "artifact"
    artifact.mkdir(parents=True)
    (artifact / "DSpark-Studio-macOS.zip").write_bytes(b"PK")
    (artifact / "metal.txt").write_text("metal exercised: no\ndevice: cpu\nprobe: cpu: a reason\n")
    summary = tmp_path / "summary.md"
    r = run_step(step, tmp_path, {"GITHUB_STEP_SUMMARY": str(summary)}, {"matrix.os": "macos-26"})
    assert r.returncode == 0, r.stderr
    upload_path = steps[-2]["with"]["path"].replace("${{ matrix.os }}", "macos-26")
    assert (tmp_path / upload_path).read_bytes() == b"PK" and not (artifact / "DSpark-Studio-macOS.zip").exists()
    assert (
        summary.read_text().startswith("### macos-26: Metal exercised: no\n")
        and "probe: cpu: a reason" in summary.read_text()
    )


# ------------------------------------------------------------------ the release workflow
def test_the_release_checks_the_tag_then_builds_exactly_as_every_push_then_publishes():
    doc = load(RELEASE)
    assert doc["on"] == {"push": {"tags": ["v*.*.*"]}} and doc["permissions"] == {"contents": "read"}
    jobs = doc["jobs"]
    assert list(jobs) == ["version", "app", "publish"]
    assert [s["run"] for s in jobs["version"]["steps"] if "run" in s] == [
        'python3 packaging/release.py check-tag "$GITHUB_REF_NAME"'
    ]
    assert jobs["app"] == {
        "needs": "version",
        "uses": "./.github/workflows/macos-app.yml",
        "with": {"retention-days": 7},
    }
    assert load(WORKFLOW)["on"]["workflow_call"]  # the same steps, not a copy of them
    publish = jobs["publish"]
    assert publish["needs"] == "app" and publish["permissions"] == {
        "contents": "write"
    }  # write only where it publishes
    assert all("permissions" not in j for name, j in jobs.items() if name != "publish")
    steps = publish["steps"]
    zip_download, selftests_download = (
        s["with"] for s in steps if s.get("uses", "").startswith("actions/download-artifact@")
    )
    image = publish["env"]["RELEASE_IMAGE"]
    assert image in load(WORKFLOW)["jobs"]["app"]["strategy"]["matrix"]["os"]
    uploaded = Path(load(WORKFLOW)["jobs"]["app"]["steps"][-2]["with"]["path"].replace("${{ matrix.os }}", image)).name
    assert zip_download["name"].replace("${{ env.RELEASE_IMAGE }}", image) == uploaded
    assert zip_download["skip-decompress"] is True  # left zipped, as self-tested
    assert selftests_download["pattern"] == load(WORKFLOW)["jobs"]["app"]["steps"][-1]["with"]["name"].replace(
        "${{ matrix.os }}", "*"
    )
    (publish_step,) = [s for s in steps if "gh release create" in s.get("run", "")]
    assert publish_step["env"] == {"GH_TOKEN": "${{ github.token }}"}
    assert not any("softprops" in s.get("uses", "") for s in steps)  # gh, on the runner image, publishes


def test_the_publish_job_glues_the_downloads_to_release_py_and_gh(tmp_path):
    """The publish job's two scripts, run in order on the folders its downloads fill, with a
    stand-in gh: the assets it is given are the ones release.py wrote, and the zip is the bytes
    that were uploaded."""
    import plistlib
    import zipfile

    from dspark.version import __version__ as version

    publish = load(RELEASE)["jobs"]["publish"]
    steps, image = publish["steps"], publish["env"]["RELEASE_IMAGE"]
    for rel in (
        "packaging/release.py",
        "packaging/fill_cask.py",
        "packaging/homebrew/dspark-studio.rb",
        "dspark/version.py",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    zip_download, selftests_download = (
        s["with"] for s in steps if s.get("uses", "").startswith("actions/download-artifact@")
    )
    zip_path = tmp_path / zip_download["path"] / zip_download["name"].replace("${{ env.RELEASE_IMAGE }}", image)
    zip_path.parent.mkdir(parents=True)
    with zipfile.ZipFile(zip_path, "w") as z:
        z.writestr(
            "DSpark Studio.app/Contents/Info.plist",
            plistlib.dumps({"CFBundleShortVersionString": version, "LSMinimumSystemVersion": "14.0"}),
        )
    for one in (image, "macos-26"):
        record = tmp_path / selftests_download["path"] / selftests_download["pattern"].replace("*", one) / "metal.txt"
        record.parent.mkdir(parents=True)
        record.write_text("metal exercised: yes\ndevice: gpu\nprobe: gpu: fine\nself-test: x\nlaunched: x\n")
    gh_log = tmp_path / "gh.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(
        f'#!/bin/sh\nfor a in "$@"; do echo "$a"; done > "{gh_log}"\n[ -n "$GH_TOKEN" ] || exit 4\n'
    )
    (bin_dir / "gh").chmod(0o755)
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # the runner's python3
    (bin_dir / "python3").chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "GITHUB_REF_NAME": f"v{version}",
        "GITHUB_SHA": "f" * 40,
        "GITHUB_REPOSITORY": "someone/dspark-studio",
        "RELEASE_IMAGE": image,
    }
    for step in (s for s in steps if "run" in s):
        r = run_step(step, tmp_path, env, {"github.token": "a-token"})
        assert r.returncode == 0, r.stdout + r.stderr
    args = gh_log.read_text().splitlines()
    assets = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "build" / "release" / "assets").iterdir())
    assert args[:2] == ["release", "create"] and args[2] == f"v{version}"
    assert args[3 : 3 + len(assets)] == assets and len(assets) == 3
    assert args[3 + len(assets) :] == [
        "--repo",
        "someone/dspark-studio",
        "--verify-tag",
        "--title",
        f"DSpark Studio {version}",
        "--notes-file",
        "build/release/notes.md",
    ]
    published = tmp_path / "build" / "release" / "assets" / f"DSpark-Studio-{version}-macOS.zip"
    assert published.read_bytes() == zip_path.read_bytes()
    assert "Metal exercised" in (tmp_path / "build" / "release" / "notes.md").read_text()


def test_the_readmes_send_people_to_what_the_workflows_publish():
    """The README's first screen and packaging/README.md name the artifact, the release's assets and
    the cask command as the workflows and release.py make them, so renaming one without the other fails."""
    artifact = Path(steps_of(WORKFLOW, "app")[-2]["with"]["path"].replace("${{ matrix.os }}", "macos-15")).name
    top = (ROOT / "README.md").read_text().split("```sh", 1)[0]
    for said in (
        artifact,
        "[Releases page](../../releases)",
        "brew install --cask OWNER/dspark/dspark-studio",
        "macOS 14 Control-click ▸ Open",
        "Privacy &\nSecurity ▸ Open Anyway",
        "packaging/README.md",
    ):
        assert said in top, said
    assert len(top.splitlines()) <= 14  # the first screen stays short
    guide = (ROOT / "packaging" / "README.md").read_text()
    for said in (
        artifact,
        "git tag vX.Y.Z && git push --tags",
        "DSpark-Studio-X.Y.Z-macOS.zip",
        "DSpark-Studio-X.Y.Z-macOS.zip.sha256",
        "`dspark-studio.rb`",
        "OWNER/homebrew-dspark",
        "https://support.apple.com/en-us/102445",
        "| claim | the step that proves it |",
    ):
        assert said in guide, said
    release_py = (ROOT / "packaging" / "release.py").read_text()
    assert 'f"DSpark-Studio-{version}-macOS.zip"' in release_py and "/dspark/dspark-studio" in release_py


def test_the_packaging_scripts_pass_shellcheck():
    scripts = sorted((ROOT / "packaging").glob("*.sh")) + [ROOT / ".ci" / "run"]
    assert {"probe_metal.sh", "test_app_macos.sh", "common.sh"} <= {s.name for s in scripts}
    r = subprocess.run([tool("shellcheck"), *map(str, scripts)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
