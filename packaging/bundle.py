"""What goes into the DSpark Studio bundle, and the check run on it after every build.

Pure Python (no PyInstaller, no Qt, no MLX), so the spec, the build scripts and the tests share
it: ``python packaging/bundle.py check DIST`` checks a built one-folder bundle or ``.app`` and
exits non-zero naming each problem.

The rules it enforces come from building this app on Linux and from MLX's source (see
packaging/README.md):

- the demo models must be inside, or a first start has nothing to run;
- MLX looks for ``mlx.metallib`` beside the libmlx it was loaded from (then in ``Resources/``
  under it), and PyInstaller loads libmlx through a symlink at the top of the bundle, not from
  ``mlx/lib/``: every ``libmlx.dylib`` in the bundle needs a metallib beside it;
- on Linux the bundle carries OpenBLAS where ``dspark.blas`` looks first
  (``openblas/libblas.so.3``), with the libraries it needs;
- on macOS no binary in the app may be built for a newer macOS than Info.plist's
  ``LSMinimumSystemVersion`` promises: pip picks the wheels built for the build machine's macOS
  (build_macos.sh pins mlx's to ``MACOS_MIN``, nothing pins the others). Read from the Mach-O
  headers in pure Python, so it is tested on any platform.
"""

from __future__ import annotations

import os
import plistlib
import re
import struct
import sys
from pathlib import Path

APP_NAME = "DSpark Studio"
EXE_NAME = "dspark-studio"
BUNDLE_ID = "org.dspark.studio"

#: What of resources/ ships (relative paths; folders are taken whole): the demo models the app
#: opens on, the prompt sets, the icons. Training leftovers (checkpoints, cached features) and
#: the package's __init__.py stay out.
SHIPPED_RESOURCES = (
    "demo/target",
    "demo/dspark",
    "demo/dflash",
    "demo/eagle3",
    "demo/assistant",
    "demo/README.md",
    "prompts",
    "icons",
)
SKIPPED_NAMES = {"__pycache__", ".ckpt", ".train", "train_state.safetensors", "train_data.safetensors"}
#: Files each demo model needs to load (the target also needs its tokenizer).
DEMO_FILES = {
    "target": ("config.json", "model.safetensors", "tokenizer.json"),
    "dspark": ("config.json", "model.safetensors"),
    "dflash": ("config.json", "model.safetensors"),
    "eagle3": ("config.json", "model.safetensors"),
    "assistant": ("config.json", "generation_config.json", "model.safetensors"),
}

#: Debian's OpenBLAS (package libopenblas0-pthread) and the libraries it links, by soname.
OPENBLAS_LIBS = ("libblas.so.3", "libopenblas.so.0", "libgfortran.so.5", "libquadmath.so.0")
OPENBLAS_DEST = "openblas"

#: Packages the app never imports that PyInstaller would otherwise follow into the bundle.
EXCLUDES = [
    "torch",
    "torchvision",
    "torchaudio",
    "tensorflow",
    "jax",
    "flax",
    "keras",
    "matplotlib",
    "scipy",
    "pandas",
    "sklearn",
    "PIL",
    "cv2",
    "av",
    "PyQt5",
    "PyQt6",
    "tkinter",
    "IPython",
    "pytest",
    "pytestqt",
    "_pytest",
]
#: The build machine's CUDA runtime, which transformers probes for with ctypes: never bundled.
DROPPED_BINARIES = re.compile(r"(^|/)libcudart[^/]*$")
#: transformers ships the code of every model it knows (42 MB in the bundle); mlx-lm needs only
#: its tokenizer machinery. Loading the demo target's tokenizer and a Gemma-4 -it one
#: (GemmaTokenizer, configuration_gemma4) imports these model folders; the other Gemmas stay too.
TRANSFORMERS_MODELS = {"auto", "encoder_decoder", "diffusion_gemma", "gemma", "gemma2", "gemma3", "gemma3n", "gemma4"}


def resource_datas(resources: Path) -> list[tuple[str, str]]:
    """(source file, folder in the bundle) pairs for the spec's ``datas``: every shipped file of
    ``resources/`` at ``resources/<same path>``, where ``dspark.resources`` looks when frozen."""
    out = []
    for rel in SHIPPED_RESOURCES:
        src = resources / rel
        if not src.exists():
            raise FileNotFoundError(f"{src} is missing: build the demo models first (make demo)")
        files = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())
        for f in files:
            parts = f.relative_to(resources).parts
            if not SKIPPED_NAMES.intersection(parts):
                out.append((str(f), str(Path("resources", *parts[:-1]))))
    return out


def metallib_datas(mlx_dir: Path) -> list[tuple[str, str]]:
    """``mlx.metallib`` at ``mlx/lib``, beside the real libmlx.dylib (147 MB: shipped once)."""
    lib = mlx_dir / "lib" / "mlx.metallib"
    if not lib.is_file():
        raise FileNotFoundError(f"{lib} is missing: is mlx-metal installed?")
    return [(str(lib), "mlx/lib")]


#: A link at the top of the bundle, beside PyInstaller's libmlx.dylib symlink (which is what the
#: loader opens), to the metallib in mlx/lib: a TOC entry for the spec to add after the analysis.
METALLIB_LINK = ("mlx.metallib", "mlx/lib/mlx.metallib", "SYMLINK")


def openblas_binaries() -> list[tuple[str, str]]:
    """The OpenBLAS ``dspark.blas`` loads in a checkout (Debian's ``libblas.so.3``) and the
    libraries it links, for the spec's ``binaries``, all into ``openblas/``."""
    from dspark.blas import CANDIDATES, INSTALL_HINT

    blas = next((Path(c) for c in CANDIDATES if c.endswith("/libblas.so.3") and Path(c).exists()), None)
    if blas is None:
        raise FileNotFoundError(f"Debian's OpenBLAS is not installed: {INSTALL_HINT}")
    out = []
    for name in OPENBLAS_LIBS:  # beside libblas.so.3, or in the architecture's lib folder above it
        p = next((d / name for d in (blas.parent, blas.parent.parent) if (d / name).exists()), None)
        if p is None:
            raise FileNotFoundError(f"{name} not found beside {blas} or in {blas.parent.parent}")
        out.append((str(p), OPENBLAS_DEST))
    return out


def keep_data(dest: str) -> bool:
    """False for a file of a transformers model folder the app never loads, and for Qt's
    translations (7 MB; the app is in English and installs no QTranslator)."""
    parts = Path(dest).parts
    if parts[:3] == ("PySide6", "Qt", "translations"):
        return False
    return not (parts[:2] == ("transformers", "models") and len(parts) > 3 and parts[2] not in TRANSFORMERS_MODELS)


def keep_module(name: str) -> bool:
    """The same rule for a module name in the analysis (``transformers.models.bert.x``)."""
    parts = name.split(".")
    return not (parts[:2] == ["transformers", "models"] and len(parts) > 2 and parts[2] not in TRANSFORMERS_MODELS)


def link_openblas(binaries: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """PyInstaller copies what OpenBLAS links to the top of the bundle a second time (38 MB):
    make those copies symlinks into ``openblas/``. They must stay findable there, as the
    launcher puts the top folder on the library path and libopenblas has no RUNPATH of its own."""
    shipped = {Path(dest).name for dest, _, _ in binaries if Path(dest).parent == Path(OPENBLAS_DEST)}
    return [
        (dest, f"{OPENBLAS_DEST}/{dest}", "SYMLINK") if dest in OPENBLAS_LIBS and dest in shipped else (dest, src, kind)
        for dest, src, kind in binaries
    ]


def min_macos(site_packages: Path) -> str:
    """The oldest macOS the installed mlx wheels run on, from their wheel tags
    (``macosx_14_0_arm64`` -> "14.0"): the app's ``LSMinimumSystemVersion``."""
    found = []
    for wheel in sorted(site_packages.glob("mlx*.dist-info/WHEEL")):
        for m in re.finditer(r"^Tag: .*-macosx_(\d+)_(\d+)_\w+$", wheel.read_text(), re.M):
            found.append((int(m.group(1)), int(m.group(2))))
    if not found:
        raise ValueError(f"no macOS mlx wheel in {site_packages}")
    major, minor = max(found)
    return f"{major}.{minor}"


def info_plist(version: str, minimum_macos: str) -> dict:
    """The Info.plist keys the spec gives PyInstaller's BUNDLE (it adds the executable and the
    icon itself)."""
    return {
        "CFBundleName": APP_NAME,
        "CFBundleDisplayName": APP_NAME,
        "CFBundleIdentifier": BUNDLE_ID,
        "CFBundleShortVersionString": version,
        "CFBundleVersion": version,
        "LSMinimumSystemVersion": minimum_macos,
        "NSHighResolutionCapable": True,
        "LSApplicationCategoryType": "public.app-category.developer-tools",
    }


# --------------------------------------------------------------------------- the post-build check
def internal_dir(dist: Path) -> Path:
    """Where the bundled modules and data are (``sys._MEIPASS`` at run time)."""
    return dist / "Contents" / "Frameworks" if dist.suffix == ".app" else dist / "_internal"


def check(dist: Path, platform: str = sys.platform) -> list[str]:
    """Problems of a built bundle (an empty list when it is fine)."""
    if not dist.is_dir():
        return [f"{dist} is not a folder"]
    root = internal_dir(dist)
    problems = []
    for name, files in DEMO_FILES.items():
        for f in files:
            if not (root / "resources" / "demo" / name / f).is_file():
                problems.append(f"demo model file missing: resources/demo/{name}/{f}")
    if platform == "darwin":
        problems += metallib_problems(dist)
        problems += plist_problems(dist / "Contents" / "Info.plist")
        problems += macho_problems(dist)
    elif platform.startswith("linux"):
        for name in OPENBLAS_LIBS:
            if not (root / OPENBLAS_DEST / name).exists():
                problems.append(f"OpenBLAS library missing: {OPENBLAS_DEST}/{name}")
    return problems


def metallib_problems(dist: Path) -> list[str]:
    """Every libmlx.dylib (file or symlink) needs mlx.metallib beside it or in Resources/ under
    it, as MLX's ``load_default_library`` looks; a dangling symlink does not count."""
    libs = list(dist.rglob("libmlx.dylib"))
    if not libs:
        return ["no libmlx.dylib in the bundle"]
    return [
        f"{lib.relative_to(dist)} has no mlx.metallib beside it"
        for lib in libs
        if not any((lib.parent / d / "mlx.metallib").is_file() for d in (".", "Resources"))
    ]


def plist_problems(path: Path) -> list[str]:
    if not path.is_file():
        return [f"{path} is missing"]
    with path.open("rb") as f:
        plist = plistlib.load(f)
    need = ("CFBundleIdentifier", "CFBundleShortVersionString", "LSMinimumSystemVersion", "CFBundleIconFile")
    problems = [f"Info.plist has no {k}" for k in need if not plist.get(k)]
    if plist.get("NSHighResolutionCapable") is not True:
        problems.append("Info.plist: NSHighResolutionCapable is not true (blurry on Retina screens)")
    if plist.get("LSBackgroundOnly"):
        problems.append("Info.plist: LSBackgroundOnly is set (built with console=True: no Dock icon, no menu bar)")
    return problems


# ------------------------------------------------------------------ Mach-O: the minimum macOS of each binary
# From Apple's <mach-o/loader.h> and <mach-o/fat.h> (apple-oss-distributions/cctools, cctools-1035.1.102,
# include/mach-o/): a thin 64-bit file starts with mach_header_64 (magic MH_MAGIC_64 0xfeedfacf, written
# in the file's byte order: little-endian on arm64 and x86_64), then `ncmds` load commands in
# `sizeofcmds` bytes, each starting (cmd, cmdsize). LC_BUILD_VERSION (0x32) holds (platform, minos,
# sdk, ntools), LC_VERSION_MIN_MACOSX (0x24) holds (version, sdk): versions "X.Y.Z encoded in nibbles
# xxxx.yy.zz". A fat (universal) file starts with fat_header (FAT_MAGIC 0xcafebabe, or FAT_MAGIC_64
# 0xcafebabf with 64-bit offsets), always big-endian, and one fat_arch per slice.
MH_MAGIC_64 = 0xFEEDFACF
FAT_MAGIC, FAT_MAGIC_64 = 0xCAFEBABE, 0xCAFEBABF
LC_VERSION_MIN_MACOSX, LC_BUILD_VERSION = 0x24, 0x32
PLATFORM_MACOS = 1
MACH_HEADER_64 = struct.Struct("<IiiIIIII")
FAT_ARCH, FAT_ARCH_64 = struct.Struct(">iiIII"), struct.Struct(">iiQQII")
#: <mach/machine.h>: CPU_TYPE_ARM64 and CPU_TYPE_X86_64 (CPU_ARCH_ABI64 | the 32-bit type), for messages.
CPU_NAMES = {0x0100000C: "arm64", 0x01000007: "x86_64"}
#: A Java class file starts with 0xcafebabe too, followed by its format version (45 and up) where
#: a fat header has its slice count: fewer slices than that is a fat Mach-O.
MAX_FAT_ARCHS = 44


class MachOError(ValueError):
    """A file with a Mach-O magic whose headers cannot be read (cut short, or inconsistent)."""


def _read(f, offset: int, size: int) -> bytes:
    f.seek(offset)
    data = f.read(size)
    if len(data) != size:
        raise MachOError("its Mach-O header is cut short")
    return data


def _thin_minimum(f, offset: int, end: int) -> tuple[str, tuple[int, int, int] | None] | None:
    """(its CPU's name, the minimum macOS) of the 64-bit Mach-O at ``offset``, which ends before
    ``end``; None when it is not one (a 32-bit slice of a fat file, which Apple silicon never loads)."""
    if int.from_bytes(_read(f, offset, 4), "little") != MH_MAGIC_64:
        return None
    if offset + MACH_HEADER_64.size > end:
        raise MachOError("its Mach-O header is cut short")
    _, cpu, _, _, ncmds, sizeofcmds, _, _ = MACH_HEADER_64.unpack(_read(f, offset, MACH_HEADER_64.size))
    if offset + MACH_HEADER_64.size + sizeofcmds > end:
        raise MachOError(f"its load commands ({sizeofcmds} bytes) run past its end")
    cmds = _read(f, offset + MACH_HEADER_64.size, sizeofcmds)
    build = version_min = None
    pos = 0
    for _ in range(ncmds):
        if pos + 8 > len(cmds):
            raise MachOError(f"it has fewer load commands than the {ncmds} its header counts")
        cmd, cmdsize = struct.unpack_from("<II", cmds, pos)
        if cmdsize < 8 or pos + cmdsize > len(cmds):
            raise MachOError(f"load command {cmd:#x} has a size ({cmdsize}) that does not fit its header")
        if cmd == LC_BUILD_VERSION and cmdsize >= 24:
            platform, minos = struct.unpack_from("<II", cmds, pos + 8)
            if platform == PLATFORM_MACOS:  # an iOS or Mac Catalyst command says nothing about macOS
                build = minos
        elif cmd == LC_VERSION_MIN_MACOSX and cmdsize >= 16:
            (version_min,) = struct.unpack_from("<I", cmds, pos + 8)
        pos += cmdsize
    found = build if build is not None else version_min
    version = None if found is None else (found >> 16, (found >> 8) & 0xFF, found & 0xFF)
    return CPU_NAMES.get(cpu, f"cpu {cpu:#x}"), version


def macho_minimums(path: Path) -> list[tuple[str | None, tuple[int, int, int] | None]] | None:
    """The minimum macOS of each 64-bit slice of a Mach-O file, as (slice name, (major, minor,
    patch) or None where no load command says): the slice name is None for a thin file. None for
    a file that is not Mach-O (told by its magic, not its name). MachOError when the headers
    cannot be read."""
    with open(path, "rb") as f:
        head = f.read(8)
        size = os.fstat(f.fileno()).st_size
        if len(head) >= 4 and int.from_bytes(head[:4], "little") == MH_MAGIC_64:
            thin = _thin_minimum(f, 0, size)
            return None if thin is None else [(None, thin[1])]
        if len(head) < 4 or int.from_bytes(head[:4], "big") not in (FAT_MAGIC, FAT_MAGIC_64):
            return None
        if len(head) < 8:
            raise MachOError("its fat header is cut short")
        magic, count = struct.unpack(">II", head)
        if not 0 < count <= MAX_FAT_ARCHS:
            return None  # a Java class file, or not a fat file of anything
        arch = FAT_ARCH_64 if magic == FAT_MAGIC_64 else FAT_ARCH
        table = _read(f, 8, count * arch.size)
        out = []
        for i in range(count):
            _, _, offset, length, *_ = arch.unpack_from(table, i * arch.size)
            if offset + length > size:
                raise MachOError(f"slice {i + 1} of {count} runs past the end of the file")
            slice_ = _thin_minimum(f, offset, offset + length)
            if slice_ is not None:
                out.append(slice_)
        return out


def _version(text: str) -> tuple[int, int, int] | None:
    m = re.fullmatch(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", text.strip())
    return tuple(int(g or 0) for g in m.groups()) if m else None


def _show(version: tuple[int, int, int]) -> str:
    return ".".join(map(str, version[:3] if version[2] else version[:2]))


def macho_problems(app: Path) -> list[str]:
    """Each binary in the app built for a newer macOS than Info.plist's LSMinimumSystemVersion,
    and each file with a Mach-O magic whose headers cannot be read. Symbolic links are not
    followed: the file they point to is checked where it is."""
    plist_path = app / "Contents" / "Info.plist"
    try:
        minimum_text = str(plistlib.loads(plist_path.read_bytes()).get("LSMinimumSystemVersion") or "")
    except (OSError, plistlib.InvalidFileException, ValueError):
        return []  # plist_problems says what is wrong with it
    if not minimum_text:
        return []
    minimum = _version(minimum_text)
    if minimum is None:
        return [f"Info.plist: LSMinimumSystemVersion {minimum_text!r} is not a macOS version"]
    files = sorted(Path(folder, name) for folder, _, names in os.walk(app / "Contents") for name in names)
    problems = []
    for path in files:
        if path.is_symlink():
            continue
        rel = path.relative_to(app)
        try:
            slices = macho_minimums(path)
        except (MachOError, OSError) as e:
            problems.append(f"{rel}: {e}")
            continue
        for cpu, version in slices or []:
            if version is not None and version > minimum:
                where = f"{rel} ({cpu} slice)" if cpu else str(rel)
                problems.append(
                    f"{where} is built for macOS {_show(version)}, newer than Info.plist's "
                    f"LSMinimumSystemVersion {minimum_text}"
                )
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "check":
        print("usage: bundle.py check DIST_FOLDER_OR_APP", file=sys.stderr)
        return 2
    problems = check(Path(argv[1]))
    for p in problems:
        print(f"bundle check: {p}", file=sys.stderr)
    if not problems:
        print(
            f"bundle check: {argv[1]} has the demo models"
            + {
                "darwin": ", a metallib beside every libmlx, a complete Info.plist and no binary built for a "
                "newer macOS than it names",
                "linux": " and OpenBLAS",
            }.get(sys.platform, ""),
            file=sys.stderr,
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
