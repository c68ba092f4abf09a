"""Fill the Homebrew cask template (packaging/homebrew/dspark-studio.rb) for one release:
``python3 packaging/fill_cask.py VERSION SHA256 OWNER/REPO [--out FILE]``.

The release workflow runs it (through packaging/release.py) with the tag's version, the zip's
SHA-256 and ``github.repository``, and attaches the result to the GitHub Release. It refuses a
value that would make a cask Homebrew cannot use (a malformed version, checksum or repository)
with one sentence, and a template with a placeholder it does not know, so that no ``@...@`` ever
reaches a user. Standard library only: it runs on the release job's Python, outside any venv.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent / "homebrew" / "dspark-studio.rb"
PLACEHOLDER = re.compile(r"@([A-Z0-9_]+)@")
VERSION = re.compile(r"\d+\.\d+\.\d+")
SHA256 = re.compile(r"[0-9a-f]{64}")
# GitHub's rules: an owner is letters, digits and single hyphens; a repository adds . and _
REPOSITORY = re.compile(r"[A-Za-z0-9](?:-?[A-Za-z0-9])*/[A-Za-z0-9._-]+")


class CaskError(ValueError):
    """A value the cask cannot take, said in one sentence."""


def fill(template: str, version: str, sha256: str, repository: str) -> str:
    """The template with its placeholders replaced; CaskError naming the first bad value."""
    if not VERSION.fullmatch(version):
        raise CaskError(f"the version {version!r} is not X.Y.Z (digits only, as the release tag vX.Y.Z names it)")
    if not SHA256.fullmatch(sha256):
        raise CaskError(f"the checksum {sha256!r} is not a SHA-256 (64 lowercase hexadecimal digits)")
    if not REPOSITORY.fullmatch(repository):
        raise CaskError(f"the repository {repository!r} is not OWNER/NAME as GitHub spells it")
    values = {"VERSION": version, "SHA256": sha256, "REPOSITORY": repository}
    unknown = sorted(set(PLACEHOLDER.findall(template)) - set(values))
    if unknown:
        raise CaskError(f"the template has placeholders nothing fills: {', '.join('@' + u + '@' for u in unknown)}")
    filled = PLACEHOLDER.sub(lambda m: values[m.group(1)], template)
    if PLACEHOLDER.search(filled):  # a value that itself looks like a placeholder
        raise CaskError("the filled cask still holds a placeholder")
    return filled


def main(argv: list[str]) -> int:
    args, out = list(argv), None
    if "--out" in args:
        i = args.index("--out")
        out = Path(args[i + 1]) if i + 1 < len(args) else None
        del args[i : i + 2]
        if out is None:
            args = []
    if len(args) != 3:
        print("usage: fill_cask.py VERSION SHA256 OWNER/REPO [--out FILE]", file=sys.stderr)
        return 2
    try:
        text = fill(TEMPLATE.read_text(), *args)
    except CaskError as e:
        print(f"fill_cask.py: {e}", file=sys.stderr)
        return 1
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
