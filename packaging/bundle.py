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
  (``openblas/libblas.so.3``), with the libraries it needs.
"""

from __future__ import annotations

import plistlib
import re
import sys
from pathlib import Path

APP_NAME = "DSpark Studio"
EXE_NAME = "dspark-studio"
BUNDLE_ID = "org.dspark.studio"

#: What of resources/ ships (relative paths; folders are taken whole): the demo models the app
#: opens on, the prompt sets, the icons. Training leftovers (checkpoints, cached features) and
#: the package's __init__.py stay out.
SHIPPED_RESOURCES = ("demo/target", "demo/dspark", "demo/dflash", "demo/README.md", "prompts", "icons")
SKIPPED_NAMES = {"__pycache__", ".ckpt", ".train", "train_state.safetensors", "train_data.safetensors"}
#: Files each demo model needs to load (the target also needs its tokenizer).
DEMO_FILES = {
    "target": ("config.json", "model.safetensors", "tokenizer.json"),
    "dspark": ("config.json", "model.safetensors"),
    "dflash": ("config.json", "model.safetensors"),
}

#: Debian's OpenBLAS (package libopenblas0-pthread) and the libraries it links, by soname.
OPENBLAS_LIBS = ("libblas.so.3", "libopenblas.so.0", "libgfortran.so.5", "libquadmath.so.0")
OPENBLAS_DEST = "openblas"

#: Packages the app never imports that PyInstaller would otherwise follow into the bundle.
EXCLUDES = [
    "torch", "torchvision", "torchaudio", "tensorflow", "jax", "flax", "keras", "matplotlib", "scipy",
    "pandas", "sklearn", "PIL", "cv2", "av", "PyQt5", "PyQt6", "tkinter", "IPython", "pytest", "pytestqt",
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
    return [(dest, f"{OPENBLAS_DEST}/{dest}", "SYMLINK") if dest in OPENBLAS_LIBS and dest in shipped else (dest, src, kind)
            for dest, src, kind in binaries]


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
    return [f"{lib.relative_to(dist)} has no mlx.metallib beside it"
            for lib in libs
            if not any((lib.parent / d / "mlx.metallib").is_file() for d in (".", "Resources"))]


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


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "check":
        print("usage: bundle.py check DIST_FOLDER_OR_APP", file=sys.stderr)
        return 2
    problems = check(Path(argv[1]))
    for p in problems:
        print(f"bundle check: {p}", file=sys.stderr)
    if not problems:
        print(f"bundle check: {argv[1]} has the demo models"
              + {"darwin": ", a metallib beside every libmlx and a complete Info.plist",
                 "linux": " and OpenBLAS"}.get(sys.platform, ""), file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
