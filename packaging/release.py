"""What a GitHub Release of DSpark Studio holds, made from what CI built and self-tested
(.github/workflows/release.yml runs it; standard library only, on the runner's own Python):

    python3 packaging/release.py check-tag vX.Y.Z
        exit 0 when the tag names the project's version (dspark/version.py), else 1 and why

    python3 packaging/release.py assemble --tag vX.Y.Z --commit SHA --repository OWNER/NAME \\
        --zip DIR --selftests DIR --image IMAGE --out DIR --notes FILE
        DIR (--zip) holds the app's zip as CI uploaded it; --selftests holds one folder per runner
        image, DSpark-Studio-selftest-IMAGE/metal.txt (test_app_macos.sh writes it); IMAGE is the
        one whose zip is published. Writes to --out the assets: DSpark-Studio-X.Y.Z-macOS.zip, its
        .sha256 (as `shasum -a 256 -c` reads it) and the filled cask dspark-studio.rb; and the
        release notes to --notes.

The zip is opened before anything is published: the app inside must carry the tag's version
and the macOS minimum the cask declares, so a release can only name what it ships.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import plistlib
import re
import shutil
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fill_cask

ROOT = Path(__file__).resolve().parent.parent
VERSION_FILE = ROOT / "dspark" / "version.py"
APP = "DSpark Studio.app"
SELFTEST_PREFIX = "DSpark-Studio-selftest-"
#: Homebrew's names of the macOS releases the app may require (its MacOSVersion symbols).
MACOS_NAMES = {14: "sonoma", 15: "sequoia", 26: "tahoe"}
#: Apple's pages for the Gatekeeper steps the notes give.
APPLE_OPEN_APPS = "https://support.apple.com/en-us/102445"


class ReleaseError(ValueError):
    """Why this release cannot be published, in one sentence."""


def project_version(path: Path = VERSION_FILE) -> str:
    """``__version__`` of dspark/version.py, read without importing the package (no MLX here)."""
    for node in ast.parse(path.read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    raise ReleaseError(f"{path} sets no __version__ string")


def check_tag(tag: str, version: str) -> None:
    if tag != f"v{version}":
        raise ReleaseError(
            f"the tag {tag} does not name the project's version {version} (dspark/version.py): "
            f"tag v{version}, or change __version__ and tag again"
        )
    if not fill_cask.VERSION.fullmatch(version):
        raise ReleaseError(f"the version {version} is not X.Y.Z, which the tag pattern v*.*.* and the cask expect")


def app_plist(zip_path: Path) -> dict:
    """The Info.plist of the app at the top of the zip."""
    try:
        with zipfile.ZipFile(zip_path) as z:
            return plistlib.loads(z.read(f"{APP}/Contents/Info.plist"))
    except KeyError:
        raise ReleaseError(f"{zip_path.name} holds no {APP}/Contents/Info.plist at its top") from None
    except (zipfile.BadZipFile, plistlib.InvalidFileException, ValueError) as e:
        raise ReleaseError(f"{zip_path.name} cannot be read as the app's zip: {e}") from None


def cask_macos(cask: str) -> str:
    m = re.search(r"^\s*depends_on macos: :(\w+)\s*$", cask, re.M)
    if not m:
        raise ReleaseError("the cask has no `depends_on macos: :name` line")
    return m.group(1)


def read_record(path: Path) -> dict[str, str]:
    """metal.txt: "key: value" lines (metal exercised, device, probe, self-test, launched)."""
    out = {}
    for line in path.read_text(errors="replace").splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            out[key.strip()] = value.strip()
    if out.get("metal exercised") not in ("yes", "no"):
        raise ReleaseError(f"{path} does not say whether Metal was exercised")
    return out


def metal_sentence(image: str, record: dict[str, str]) -> str:
    if record["metal exercised"] == "yes":
        gpu = re.search(r"device gpu \(([^)]*)\)", record.get("self-test", ""))
        on = f" ({gpu.group(1)})" if gpu else ""
        return (
            f"**{image}: Metal exercised.** The app's self-test computed on the GPU{on}, checked against "
            f"the CPU, and its output was identical to plain decoding."
        )
    probe = record.get("probe", "")
    why = probe.partition(": ")[2] if probe.startswith(("cpu: ", "gpu: ")) else probe
    return (
        f"**{image}: Metal not exercised.** The app's self-test ran the same checks on MLX's CPU device, "
        f"since the runner's GPU probe found: {why or '(no probe)'}."
    )


def notes(
    version: str,
    commit: str,
    repository: str,
    minimum: str,
    image: str,
    records: dict[str, dict],
    asset: str,
    sha256: str,
) -> str:
    owner = repository.split("/")[0]
    images = " and ".join(sorted(records))
    metal = "\n".join(f"- {metal_sentence(i, records[i])}" for i in sorted(records))
    return f"""DSpark Studio {version} for Macs with Apple silicon, macOS {minimum} or later, built from commit {commit}.

Built and tested on GitHub's {images} runner images: on each, the test suite passed, and the app, unzipped from its zip, passed its self-test started from a bare environment and through LaunchServices. The zip here is the one built on {image}.

### Metal on CI

{metal}

### Download

`{asset}` is the app built on {image}, zipped with `ditto`. Its SHA-256 is `{sha256}`; check it with `shasum -a 256 -c {asset}.sha256`. Double-click the zip and drag `DSpark Studio.app` to Applications.

With Homebrew, from the tap `{owner}/homebrew-dspark` once it serves this release's `dspark-studio.rb`: `brew install --cask {owner}/dspark/dspark-studio`.

### The first open

The app is signed ad hoc, not notarised, so Gatekeeper stops the first open of a downloaded copy (Homebrew's included):

- **macOS 14:** Control-click the app ▸ Open, then Open in the dialog.
- **macOS 15 and later:** open it once and click Done, then System Settings ▸ Privacy & Security ▸ "DSpark Studio" was blocked… ▸ Open Anyway, and confirm with your password. Control-click ▸ Open no longer offers a way past since macOS 15.
- **Either:** `xattr -dr com.apple.quarantine "/Applications/DSpark Studio.app"`.

Apple's page: {APPLE_OPEN_APPS}
"""


def assemble(
    tag: str,
    commit: str,
    repository: str,
    zip_dir: Path,
    selftests: Path,
    image: str,
    out: Path,
    notes_path: Path,
    template: Path = fill_cask.TEMPLATE,
) -> list[Path]:
    version = project_version()
    check_tag(tag, version)
    found = sorted(p for p in zip_dir.iterdir() if p.is_file()) if zip_dir.is_dir() else []
    if len(found) != 1:
        raise ReleaseError(f"{zip_dir} should hold the app's zip alone, and holds {len(found)} files")
    plist = app_plist(found[0])
    shipped = str(plist.get("CFBundleShortVersionString", ""))
    if shipped != version:
        raise ReleaseError(
            f"the app in {found[0].name} is version {shipped or '(none)'}, not {version}: "
            f"it was not built from this tag"
        )
    minimum = str(plist.get("LSMinimumSystemVersion", ""))
    template_text = template.read_text()
    major = minimum.split(".")[0]
    wanted = MACOS_NAMES.get(int(major)) if major.isdigit() else None
    declared = cask_macos(template_text)
    if wanted != declared:
        raise ReleaseError(
            f"the app needs macOS {minimum or '(none)'} but the cask says :{declared}: "
            f"change `depends_on macos:` in {template.name}"
        )
    records = {
        d.name[len(SELFTEST_PREFIX) :]: read_record(d / "metal.txt")
        for d in sorted(selftests.glob(f"{SELFTEST_PREFIX}*"))
        if (d / "metal.txt").is_file()
    }
    if image not in records:
        raise ReleaseError(f"no self-test record (metal.txt) from {image}, whose zip this release publishes")

    out.mkdir(parents=True, exist_ok=True)
    asset = out / f"DSpark-Studio-{version}-macOS.zip"
    shutil.copyfile(found[0], asset)
    sha256 = hashlib.sha256(asset.read_bytes()).hexdigest()
    checksum = out / f"{asset.name}.sha256"
    checksum.write_text(f"{sha256}  {asset.name}\n")  # two spaces: shasum's text mode
    cask = out / "dspark-studio.rb"
    cask.write_text(fill_cask.fill(template_text, version, sha256, repository))
    notes_path.write_text(notes(version, commit, repository, minimum, image, records, asset.name, sha256))
    return [asset, checksum, cask]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="release.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check-tag").add_argument("tag")
    a = sub.add_parser("assemble")
    for name in ("tag", "commit", "repository", "image"):
        a.add_argument(f"--{name}", required=True)
    for name in ("zip", "selftests", "out", "notes"):
        a.add_argument(f"--{name}", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "check-tag":
            version = project_version()
            check_tag(args.tag, version)
            print(f"release.py: {args.tag} names the project's version {version}")
        else:
            assets = assemble(
                args.tag, args.commit, args.repository, args.zip, args.selftests, args.image, args.out, args.notes
            )
            print(f"release.py: {', '.join(p.name for p in assets)} in {args.out}; notes in {args.notes}")
    except (ReleaseError, fill_cask.CaskError) as e:
        print(f"release.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
