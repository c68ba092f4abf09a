"""Packaging rules that can be checked without building a bundle (the build itself and the
bundle's self-test run in `make bundle`, after `make test` in CI): what the spec ships, the
post-build check on fake bundle trees, Info.plist, the icon, the wheel's package list."""

from __future__ import annotations

import os
import plistlib
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "packaging"))
import bundle  # noqa: E402 (from packaging/, on the path just above)
import make_icon  # noqa: E402 (from packaging/, on the path just above)


def _touch(path: Path, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _fake_resources(root: Path) -> Path:
    res = root / "resources"
    for name, files in bundle.DEMO_FILES.items():
        for f in files:
            _touch(res / "demo" / name / f)
    _touch(res / "demo" / "README.md")
    _touch(res / "demo" / "target" / ".ckpt" / "step-100.safetensors")  # training leftovers
    _touch(res / "demo" / "dspark" / "train_state.safetensors")
    _touch(res / "prompts" / "set.json", b"[]")
    _touch(res / "icons" / "dspark-studio.png")
    _touch(res / "__init__.py")
    return res


def test_resource_datas_ship_models_prompts_icons_and_no_training_leftovers(tmp_path):
    datas = bundle.resource_datas(_fake_resources(tmp_path))
    shipped = {str(Path(dest, Path(src).name)) for src, dest in datas}
    assert "resources/demo/target/model.safetensors" in shipped
    assert "resources/demo/dflash/config.json" in shipped
    assert {"resources/prompts/set.json", "resources/icons/dspark-studio.png"} <= shipped
    assert not [s for s in shipped if ".ckpt" in s or "train_state" in s or s.endswith("__init__.py")]


def test_resource_datas_of_the_checkout_find_every_demo_file():
    datas = bundle.resource_datas(ROOT / "resources")
    shipped = {str(Path(dest, Path(src).name)) for src, dest in datas}
    for name, files in bundle.DEMO_FILES.items():
        assert {f"resources/demo/{name}/{f}" for f in files} <= shipped
    assert "resources/icons/dspark-studio.icns" in shipped


@pytest.mark.skipif(
    not Path("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3").exists()
    and not Path("/usr/lib/aarch64-linux-gnu/openblas-pthread/libblas.so.3").exists(),
    reason="Debian's OpenBLAS is not installed",
)
def test_openblas_and_the_libraries_it_links_go_to_one_folder():
    libs = bundle.openblas_binaries()
    assert [Path(src).name for src, _ in libs] == list(bundle.OPENBLAS_LIBS)
    assert {dest for _, dest in libs} == {"openblas"} and all(Path(src).exists() for src, _ in libs)


def test_openblas_top_level_copies_become_symlinks_into_its_folder():
    sys_dir = "/usr/lib/x86_64-linux-gnu"
    toc = [
        ("openblas/libblas.so.3", f"{sys_dir}/openblas-pthread/libblas.so.3", "BINARY"),
        ("openblas/libopenblas.so.0", f"{sys_dir}/openblas-pthread/libopenblas.so.0", "BINARY"),
        ("openblas/libgfortran.so.5", f"{sys_dir}/libgfortran.so.5", "BINARY"),
        ("libopenblas.so.0", f"{sys_dir}/openblas-pthread/libopenblas.so.0", "BINARY"),
        ("libgfortran.so.5", f"{sys_dir}/libgfortran.so.5", "BINARY"),
        ("libquadmath.so.0", f"{sys_dir}/libquadmath.so.0", "BINARY"),  # not shipped in openblas/: kept
        ("libz.so.1", f"{sys_dir}/libz.so.1", "BINARY"),
    ]
    out = bundle.link_openblas(toc)
    assert out[:3] == toc[:3] and out[5:] == toc[5:]
    assert out[3:5] == [
        ("libopenblas.so.0", "openblas/libopenblas.so.0", "SYMLINK"),
        ("libgfortran.so.5", "openblas/libgfortran.so.5", "SYMLINK"),
    ]


def test_only_the_tokenizer_side_of_transformers_and_no_qt_translations_ship():
    assert bundle.keep_data("transformers/models/gemma4/configuration_gemma4.py")
    assert bundle.keep_data("transformers/models/auto/tokenization_auto.py")
    assert bundle.keep_data("transformers/models/__init__.py")
    assert bundle.keep_data("transformers/tokenization_utils_base.py")
    assert not bundle.keep_data("transformers/models/bert/modeling_bert.py")
    assert not bundle.keep_data("PySide6/Qt/translations/qt_de.qm")
    assert bundle.keep_data("PySide6/Qt/plugins/platforms/libqoffscreen.so")
    assert bundle.keep_module("transformers.models.gemma.tokenization_gemma")
    assert bundle.keep_module("transformers.models")
    assert not bundle.keep_module("transformers.models.llama.modeling_llama")
    assert bundle.keep_module("mlx_lm.models.llama")


def test_every_package_folder_is_in_the_wheel():
    """A package missing from pyproject's list is missing from the wheel and the bundle, while an
    editable install (make test's) still finds it."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    names = {"dspark": "dspark", "app": "dspark_studio"}
    found = {
        ".".join([names[init.relative_to(ROOT).parts[0]], *init.relative_to(ROOT).parts[1:-1]])
        for top in names
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found <= listed, found - listed


def _fake_app(tmp_path: Path, top_metallib: bool) -> Path:
    """The layout PyInstaller's BUNDLE makes of the spec's entries on macOS (its relocation run on
    this TOC on Linux gave exactly these links): binaries in Contents/Frameworks, data in
    Contents/Resources cross-linked back, and a libmlx.dylib symlink at the top of Frameworks,
    which is what the loader opens."""
    app = tmp_path / "DSpark Studio.app"
    fw, res = app / "Contents" / "Frameworks", app / "Contents" / "Resources"
    _touch(fw / "mlx" / "lib" / "libmlx.dylib")
    _touch(res / "mlx" / "lib" / "mlx.metallib")
    (fw / "mlx" / "lib" / "mlx.metallib").symlink_to("../../../Resources/mlx/lib/mlx.metallib")
    (fw / "libmlx.dylib").symlink_to("mlx/lib/libmlx.dylib")
    if top_metallib:  # bundle.METALLIB_LINK
        (fw / "mlx.metallib").symlink_to("mlx/lib/mlx.metallib")
    return app


def test_metallib_must_sit_beside_every_libmlx_including_the_top_symlink(tmp_path):
    bad = _fake_app(tmp_path / "a", top_metallib=False)
    assert bundle.metallib_problems(bad) == ["Contents/Frameworks/libmlx.dylib has no mlx.metallib beside it"]
    assert bundle.metallib_problems(_fake_app(tmp_path / "b", top_metallib=True)) == []
    # the lookup's second place, Resources/ under the library's folder, counts too
    _touch(bad / "Contents" / "Frameworks" / "Resources" / "mlx.metallib")
    assert bundle.metallib_problems(bad) == []
    assert bundle.METALLIB_LINK == ("mlx.metallib", "mlx/lib/mlx.metallib", "SYMLINK")


def test_a_dangling_metallib_symlink_does_not_count(tmp_path):
    app = _fake_app(tmp_path, top_metallib=True)
    (app / "Contents" / "Resources" / "mlx" / "lib" / "mlx.metallib").unlink()
    assert len(bundle.metallib_problems(app)) == 2  # both libmlx.dylib: the real one and the top link


def test_min_macos_is_the_newest_mlx_wheel_tag(tmp_path):
    _touch(tmp_path / "mlx-0.32.4.dist-info" / "WHEEL", b"Wheel-Version: 1.0\nTag: cp312-cp312-macosx_14_0_arm64\n")
    _touch(tmp_path / "mlx_metal-0.32.4.dist-info" / "WHEEL", b"Tag: py3-none-macosx_15_0_arm64\n")
    _touch(tmp_path / "numpy-2.0.dist-info" / "WHEEL", b"Tag: cp312-cp312-macosx_26_0_arm64\n")
    assert bundle.min_macos(tmp_path) == "15.0"
    with pytest.raises(ValueError):
        bundle.min_macos(tmp_path / "nothing")


def test_info_plist_round_trips_and_passes_the_check(tmp_path):
    keys = bundle.info_plist("0.1.0", "14.0")
    # BUNDLE adds the executable and the icon, and writes the plist with plistlib
    plist = tmp_path / "Info.plist"
    plist.write_bytes(plistlib.dumps({**keys, "CFBundleExecutable": "dspark-studio", "CFBundleIconFile": "x.icns"}))
    assert bundle.plist_problems(plist) == []
    back = plistlib.loads(plist.read_bytes())
    assert back["LSMinimumSystemVersion"] == "14.0" and back["NSHighResolutionCapable"] is True
    plist.write_bytes(plistlib.dumps({**keys, "NSHighResolutionCapable": False, "LSBackgroundOnly": True}))
    assert len(bundle.plist_problems(plist)) == 3  # no icon, not high-resolution, background-only


def test_check_names_missing_demo_models_and_openblas(tmp_path):
    dist = tmp_path / "dspark-studio"
    internal = dist / "_internal"
    _fake_resources(internal)
    for name in bundle.OPENBLAS_LIBS:
        _touch(internal / "openblas" / name)
    assert bundle.check(dist, "linux") == []
    (internal / "resources" / "demo" / "dspark" / "model.safetensors").unlink()
    (internal / "openblas" / "libgfortran.so.5").unlink()
    assert bundle.check(dist, "linux") == [
        "demo model file missing: resources/demo/dspark/model.safetensors",
        "OpenBLAS library missing: openblas/libgfortran.so.5",
    ]
    assert bundle.check(tmp_path / "nowhere", "linux") == [f"{tmp_path / 'nowhere'} is not a folder"]


def test_check_of_an_app_looks_in_contents_frameworks(tmp_path):
    app = _fake_app(tmp_path, top_metallib=True)
    _fake_resources(app / "Contents" / "Frameworks")
    assert bundle.check(app, "darwin") == [f"{app / 'Contents' / 'Info.plist'} is missing"]


def test_icns_holds_every_size_as_png():
    data = (ROOT / "resources" / "icons" / "dspark-studio.icns").read_bytes()
    assert data[:4] == b"icns" and struct.unpack(">I", data[4:8])[0] == len(data)
    found, i = {}, 8
    while i < len(data):
        kind, n = data[i : i + 4], struct.unpack(">I", data[i + 4 : i + 8])[0]
        png = data[i + 8 : i + n]
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        found[kind] = struct.unpack(">II", png[16:24])
        i += n
    assert found == {k: (px, px) for k, px in make_icon.ICNS_TYPES.items()}


def test_launcher_starts_the_installed_app():
    text = (ROOT / "packaging" / "launcher.py").read_text()
    assert "from dspark_studio.main import main" in text
    assert os.access(ROOT / "packaging" / "build_linux.sh", os.X_OK)
    assert os.access(ROOT / "packaging" / "build_macos.sh", os.X_OK)
    assert os.access(ROOT / "packaging" / "test_app_macos.sh", os.X_OK)


@pytest.mark.parametrize("shared, framework, ok", [("1", "", True), ("0", "Python", True), ("0", "", False)])
def test_the_build_refuses_a_python_without_a_shared_library_in_one_sentence(tmp_path, shared, framework, ok):
    """pyenv builds Python without a shared library on macOS; PyInstaller would stop late with
    "Python was built without a shared library". A python.org or Homebrew framework build has none
    either (Py_ENABLE_SHARED 0) but PYTHONFRAMEWORK set, and works."""
    fake = tmp_path / "python3"
    fake.write_text(
        f'#!/bin/sh\ncase "$2" in *Py_ENABLE_SHARED*) echo {int(shared == "1" or bool(framework))} ;; esac\n'
    )
    fake.chmod(0o755)
    r = subprocess.run(
        ["bash", "-c", f'. packaging/common.sh; check_shared_python "{fake}" && echo chosen'],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if ok:
        assert r.returncode == 0 and r.stdout.strip() == "chosen", r.stderr
    else:
        assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
        assert "built without a shared library, which PyInstaller needs" in r.stderr


def _png(w: int, h: int, pixel) -> bytes:
    """An 8-bit RGB PNG whose grey level at (x, y) is pixel(x, y)."""
    import zlib

    rows = b"".join(b"\0" + bytes(pixel(x, y) for x in range(w) for _ in range(3)) for y in range(h))
    chunk = lambda kind, body: struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def test_png_check_tells_a_drawn_window_from_a_blank_one(tmp_path):
    sys.path.insert(0, str(ROOT / "packaging"))
    import png_check

    png = _png
    (tmp_path / "blank.png").write_bytes(png(200, 100, lambda x, y: 240))
    (tmp_path / "drawn.png").write_bytes(png(200, 100, lambda x, y: (x * 7 + y * 3) % 256))
    assert png_check.main([str(tmp_path / "blank.png"), "200x100"]) == 1
    assert png_check.main([str(tmp_path / "drawn.png"), "200x100"]) == 0
    assert png_check.main([str(tmp_path / "drawn.png"), "1600x1000"]) == 1
    assert png_check.main([str(tmp_path / "drawn.png"), "any", "20"]) == 0
    assert png_check.main([str(ROOT / "docs" / "screenshot.png"), "1600x1000"]) == 0
    (tmp_path / "not.png").write_text("no")
    assert png_check.main([str(tmp_path / "not.png")]) == 1


class _Recorder:
    """Stands in for one of PyInstaller's spec classes: keeps its arguments."""

    calls: dict = {}

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs
        _Recorder.calls[type(self).__name__] = self
        if type(self).__name__ == "Analysis":  # what the analysis would have found, in TOC form
            self.binaries = [
                (Path(src).name if dest == "." else f"{dest}/{Path(src).name}", src, "BINARY")
                for src, dest in kwargs["binaries"]
            ]
            self.datas = [(f"{dest}/{Path(src).name}", src, "DATA") for src, dest in kwargs["datas"]]
            self.pure = [
                ("dspark_studio.window.main_window", "main_window.py", "PYMODULE"),
                ("transformers.models.bert.modeling_bert", "m.py", "PYMODULE"),
            ]
            self.scripts = []


def _run_spec(monkeypatch, platform: str) -> dict:
    """Execute the spec as PyInstaller would, with its classes replaced by recorders."""
    hooks = type(sys)("PyInstaller.utils.hooks")
    hooks.collect_submodules = lambda name: [f"{name}.x"]
    for name in ("PyInstaller", "PyInstaller.utils"):
        monkeypatch.setitem(sys.modules, name, type(sys)(name))
    monkeypatch.setitem(sys.modules, "PyInstaller.utils.hooks", hooks)
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setattr(bundle, "metallib_datas", lambda mlx_dir: [("/wheel/mlx/lib/mlx.metallib", "mlx/lib")])
    monkeypatch.setattr(bundle, "min_macos", lambda site: "14.0")
    monkeypatch.setattr(
        bundle, "openblas_binaries", lambda: [(f"/usr/lib/{n}", "openblas") for n in bundle.OPENBLAS_LIBS]
    )
    _Recorder.calls = {}
    names = {n: type(n, (_Recorder,), {}) for n in ("Analysis", "PYZ", "EXE", "COLLECT", "BUNDLE")}
    spec = ROOT / "packaging" / "dspark-studio.spec"
    exec(compile(spec.read_text(), str(spec), "exec"), {"SPECPATH": str(spec.parent), **names})
    return _Recorder.calls


def test_the_spec_on_macos_makes_a_signed_app_with_a_complete_plist(monkeypatch, tmp_path):
    calls = _run_spec(monkeypatch, "darwin")
    assert calls["EXE"].kwargs["console"] is False and calls["EXE"].kwargs["codesign_identity"] is None
    app = calls["BUNDLE"].kwargs
    assert app["name"] == "DSpark Studio.app" and Path(app["icon"]).is_file()
    plist = tmp_path / "Info.plist"
    plist.write_bytes(plistlib.dumps({**app["info_plist"], "CFBundleIconFile": Path(app["icon"]).name}))
    assert bundle.plist_problems(plist) == []
    collected = calls["COLLECT"].args[2]
    assert (
        bundle.METALLIB_LINK in collected
        and ("mlx/lib/mlx.metallib", "/wheel/mlx/lib/mlx.metallib", "DATA") in collected
    )
    assert not any("openblas" in dest for dest, *_ in calls["COLLECT"].args[1])
    # no model code of transformers
    assert [m for m, *_ in calls["PYZ"].args[0]] == ["dspark_studio.window.main_window"]


def test_the_spec_on_linux_bundles_openblas_and_no_app(monkeypatch):
    calls = _run_spec(monkeypatch, "linux")
    assert "BUNDLE" not in calls and calls["EXE"].kwargs["console"] is True
    assert {dest for dest, *_ in calls["COLLECT"].args[1]} == {f"openblas/{n}" for n in bundle.OPENBLAS_LIBS}
    datas = {dest for dest, *_ in calls["COLLECT"].args[2]}
    assert "resources/demo/target/model.safetensors" in datas and "mlx.metallib" not in datas
    assert {"mlx.x", "mlx_lm.models.x", "dspark.x", "dspark_studio.x"} <= set(calls["Analysis"].kwargs["hiddenimports"])


# ------------------------------------------------------------------ Mach-O minimum macOS (bundle.macho_problems)
# Headers laid out as Apple's <mach-o/loader.h> and <mach-o/fat.h> define them (cited in bundle.py);
# bundle.py's reader agreed with llvm-objdump on real wheels' binaries (a thin arm64 .so with
# LC_BUILD_VERSION, a universal2 .so with LC_VERSION_MIN_MACOSX in its x86_64 slice).
ARM64, X86_64 = 0x0100000C, 0x01000007


def _nibbles(major: int, minor: int, patch: int = 0) -> int:
    return major << 16 | minor << 8 | patch


def _build_version(minos: int, platform: int = 1) -> bytes:  # LC_BUILD_VERSION, no tools
    return struct.pack("<IIIIII", 0x32, 24, platform, minos, minos, 0)


def _version_min(version: int) -> bytes:  # LC_VERSION_MIN_MACOSX
    return struct.pack("<IIII", 0x24, 16, version, version)


def _segment() -> bytes:  # an LC_SEGMENT_64 with no sections: a command the reader must step over
    return struct.pack("<II16sQQQQiiII", 0x19, 72, b"__TEXT", 0, 0, 0, 0, 5, 5, 0, 0)


def _macho(*cmds: bytes, cpu: int = ARM64) -> bytes:
    body = b"".join(cmds)
    return struct.pack("<IiiIIIII", 0xFEEDFACF, cpu, 0, 6, len(cmds), len(body), 0, 0) + body + b"\0" * 64


def _fat(*slices: tuple[int, bytes], wide: bool = False) -> bytes:
    """A universal file: the big-endian fat header, one fat_arch (or fat_arch_64) per slice, the
    slices at 4 KiB boundaries."""
    entry = struct.Struct(">iiQQII" if wide else ">iiIII")
    out, offset, table = b"", 4096, []
    for cpu, data in slices:
        fields = (cpu, 0, offset, len(data), 12) + ((0,) if wide else ())
        table.append(entry.pack(*fields))
        out += data + b"\0" * (-len(data) % 4096)
        offset += len(data) + (-len(data) % 4096)
    head = struct.pack(">II", 0xCAFEBABF if wide else 0xCAFEBABE, len(slices)) + b"".join(table)
    return head + b"\0" * (4096 - len(head)) + out


def _app_with(tmp_path: Path, minimum: str, files: dict[str, bytes]) -> Path:
    app = tmp_path / "DSpark Studio.app"
    _touch(app / "Contents" / "Info.plist", plistlib.dumps({"LSMinimumSystemVersion": minimum}))
    for rel, data in files.items():
        _touch(app / "Contents" / rel, data)
    return app


def test_macho_reader_reads_thin_and_fat_files_by_their_magic(tmp_path):
    thin = _touch(tmp_path / "a", _macho(_segment(), _build_version(_nibbles(14, 2, 1))))
    old = _touch(tmp_path / "b.so", _macho(_version_min(_nibbles(10, 9)), _segment(), cpu=X86_64))
    both = _touch(tmp_path / "c", _macho(_version_min(_nibbles(10, 9)), _build_version(_nibbles(11, 0))))
    ios_only = _touch(tmp_path / "d", _macho(_build_version(_nibbles(17, 0), platform=2)))
    assert bundle.macho_minimums(thin) == [(None, (14, 2, 1))]
    assert bundle.macho_minimums(old) == [(None, (10, 9, 0))]
    assert bundle.macho_minimums(both) == [(None, (11, 0, 0))]  # LC_BUILD_VERSION is the newer command
    assert bundle.macho_minimums(ios_only) == [(None, None)]  # says nothing about macOS
    slices = (
        (X86_64, _macho(_version_min(_nibbles(10, 13)), cpu=X86_64)),
        (ARM64, _macho(_build_version(_nibbles(15, 0)))),
    )
    for wide in (False, True):
        fat = _touch(tmp_path / f"fat{wide}", _fat(*slices, wide=wide))
        assert bundle.macho_minimums(fat) == [("x86_64", (10, 13, 0)), ("arm64", (15, 0, 0))]
    java = _touch(tmp_path / "Main.class", struct.pack(">IHH", 0xCAFEBABE, 0, 65) + b"\0" * 64)  # same magic
    text = _touch(tmp_path / "libfake.dylib", b"#!/bin/sh\necho not a binary\n")
    assert bundle.macho_minimums(java) is None and bundle.macho_minimums(text) is None
    assert bundle.macho_minimums(_touch(tmp_path / "empty", b"")) is None


def test_macho_check_names_each_binary_newer_than_the_plist_and_both_versions(tmp_path):
    app = _app_with(
        tmp_path,
        "14.0",
        {
            "MacOS/dspark-studio": _macho(_build_version(_nibbles(11, 0))),
            "Frameworks/same.dylib": _macho(_build_version(_nibbles(14, 0))),
            "Frameworks/PySide6/Qt/lib/QtCore.framework/Versions/A/QtCore": _fat(
                (X86_64, _macho(_version_min(_nibbles(12, 0)), cpu=X86_64)),
                (ARM64, _macho(_build_version(_nibbles(15, 1)))),
            ),
            "Frameworks/newer.so": _macho(_version_min(_nibbles(14, 0, 1))),
            "Resources/notes.txt": b"plain text",
        },
    )
    (app / "Contents" / "Frameworks" / "link.so").symlink_to("newer.so")  # the file is checked once, where it is
    assert bundle.macho_problems(app) == [
        "Contents/Frameworks/PySide6/Qt/lib/QtCore.framework/Versions/A/QtCore (arm64 slice) is built for macOS "
        "15.1, newer than Info.plist's LSMinimumSystemVersion 14.0",
        "Contents/Frameworks/newer.so is built for macOS 14.0.1, newer than Info.plist's LSMinimumSystemVersion 14.0",
    ]
    assert (
        bundle.macho_problems(_app_with(tmp_path / "ok", "15.1", {"a.dylib": _macho(_build_version(_nibbles(15, 1)))}))
        == []
    )


def test_macho_check_reports_a_cut_short_header_instead_of_crashing(tmp_path):
    whole = _macho(_segment(), _build_version(_nibbles(14, 0)))
    fat = _fat((ARM64, whole))
    app = _app_with(
        tmp_path,
        "14.0",
        {
            "Frameworks/a.dylib": whole[:20],  # the magic, then less than a header
            "Frameworks/b.dylib": whole[: 32 + 30],  # the header, then part of its load commands
            "Frameworks/c.dylib": fat[: 4096 + 10],  # a slice cut short
            "Frameworks/d.dylib": fat[:6],  # a fat header cut short
            "Frameworks/e.dylib": whole[:32]
            + struct.pack("<II", 0x19, 4000)
            + b"\0" * 200,  # a command longer than the header
        },
    )
    problems = bundle.macho_problems(app)
    assert [p.split(":")[0] for p in problems] == [f"Contents/Frameworks/{n}.dylib" for n in "abcde"], problems
    assert all(len(p.split(": ", 1)[1]) > 10 for p in problems), problems


def test_bundle_check_of_an_app_runs_the_macho_check(tmp_path):
    app = _fake_app(tmp_path, top_metallib=True)
    _fake_resources(app / "Contents" / "Frameworks")
    keys = {**bundle.info_plist("0.1.0", "14.0"), "CFBundleIconFile": "x.icns"}
    (app / "Contents" / "Info.plist").write_bytes(plistlib.dumps(keys))
    assert bundle.check(app, "darwin") == []
    (app / "Contents" / "Frameworks" / "mlx" / "lib" / "libmlx.dylib").write_bytes(
        _macho(_build_version(_nibbles(26, 0)))
    )
    assert bundle.check(app, "darwin") == [
        "Contents/Frameworks/mlx/lib/libmlx.dylib is built for macOS 26.0, newer "
        "than Info.plist's LSMinimumSystemVersion 14.0"
    ]


# ---------------------------------------------------- test_app_macos.sh and probe_metal.sh on a stand-in Mac
# The scripts run on macOS runners only; here the Mac's commands are small stand-ins on PATH
# (uname says Darwin; ditto unzips; codesign agrees; plutil reads the plist; open starts the app's
# executable with --args, as LaunchServices would, and refuses output paths that do not exist) and
# the app is a script that prints the self-test line the real app prints for the --device it gets.
GPU_LINE = (
    "dspark-studio self-test: ok: device gpu (Apple Paravirtual device), checked against the CPU, BLAS "
    "Accelerate; 32 tokens, tau 5.1; identical to plain mlx-lm greedy decoding, token for token; window saved "
    "to x.png; first-launch GPU check: this GPU (Apple Paravirtual device) computes what the CPU computes (24 "
    "tokens, log-probabilities within 3.1e-06)"
)
CPU_LINE = (
    "dspark-studio self-test: ok: device cpu, BLAS Accelerate; Metal not exercised: the CPU was asked for "
    "(--device cpu); 32 tokens, tau 5.1; identical to plain mlx-lm greedy decoding, token for token"
)
STAND_INS = {
    "uname": "echo Darwin\n",
    "codesign": "exit 0\n",
    "ditto": 'python3 -m zipfile -e "$3" "$4" && chmod +x "$4"/*/Contents/MacOS/*\n',
    "plutil": (
        '[ "$1" = -lint ] && exec python3 -c "import plistlib,sys; plistlib.load(open(sys.argv[1],\'rb\'))" "$2"\n'
        'exec python3 -c "import plistlib,sys; print(plistlib.load(open(sys.argv[2],\'rb\'))[sys.argv[1]])" "$2" "$6"\n'
    ),
    "open": (
        '[ "$1 $2 $3" = "-W -n --stdout" ] && [ "$5" = --stderr ] && [ "$8" = --args ] || exit 2\n'
        "out=$4 err=$6 app=$7; shift 8\n"
        '[ -f "$out" ] && [ -f "$err" ] || { echo "open: $out or $err does not exist" >&2; exit 1; }\n'
        '"$app/Contents/MacOS/dspark-studio" "$@" >>"$out" 2>>"$err"; exit 0\n'
    ),
}


def _stand_in_mac(tmp_path: Path, app_says: str = "as asked", hang: bool = False) -> tuple[Path, dict]:
    """A copy of the scripts in a repository of their own (they write its build/artifact/), the
    stand-in commands, and dist/DSpark-Studio-macOS.zip holding an app whose executable logs its
    arguments and prints the self-test line for its --device ("as asked"), or always CPU_LINE."""
    import zipfile

    repo = tmp_path / "repo"
    for name in ("test_app_macos.sh", "probe_metal.sh", "common.sh", "png_check.py"):
        _touch(repo / "packaging" / name, (ROOT / "packaging" / name).read_bytes()).chmod(0o755)
    bin_dir = tmp_path / "bin"
    # python3 for the stand-ins and png_check.py: this test's own, whatever /usr/bin holds
    for name, body in {**STAND_INS, "python3": f'exec "{sys.executable}" "$@"\n'}.items():
        _touch(bin_dir / name, f"#!/bin/sh\n{body}".encode()).chmod(0o755)
    log = tmp_path / "launches.log"
    line = {
        "as asked": f'[ "$device" = cpu ] && echo "{CPU_LINE}" || echo "{GPU_LINE}"',
        "cpu": f'echo "{CPU_LINE}"',
        "gpu, unchecked": f'echo "{GPU_LINE.split("; first-launch")[0]}"',
    }[app_says]
    # the offscreen window at its size; the on-screen one (any size) small, as png_check reads slowly
    small = _touch(tmp_path / "small.png", _png(200, 100, lambda x, y: (x * 7 + y * 3) % 256))
    # --dspark train (the Train tab's, train_through_bundle in common.sh): the run's two files at
    # its --out, from the demo target the script found in the app
    trains = (
        'if [ "$1" = --dspark ]; then out="" target=""; while [ $# -gt 0 ]; do case "$1" in '
        "--out) out=$2 ;; --target) target=$2 ;; esac; shift; done; "
        '[ -f "$target/config.json" ] || exit 2; mkdir -p "$out"; echo weights >"$out/model.safetensors"; '
        'echo \'{"step": 1}\' >"$out/train_log.jsonl"; exit 0; fi\n'
    )
    exe = (
        f"#!/bin/sh\n{trains}"
        + f'echo "$*" >>"{log}"\n'
        + ("exec sleep 60\n" if hang else "")
        + 'device=gpu png="" shot="'
        + str(ROOT / "docs" / "screenshot.png")
        + '"\n'
        + 'while [ $# -gt 0 ]; do case "$1" in --device) device=$2 ;; --self-test) png=$2 ;; '
        + f'--on-screen) shot="{small}" ;; esac; shift; done\n'
        + f'cp "$shot" "$png"\n{line}\n'
    )
    plist = {
        "CFBundleIdentifier": "org.dspark.studio",
        "CFBundleExecutable": "dspark-studio",
        "CFBundleShortVersionString": "0.1.0",
        "LSMinimumSystemVersion": "14.0",
    }
    zip_path = repo / "dist" / "DSpark-Studio-macOS.zip"
    zip_path.parent.mkdir(parents=True)
    with zipfile.ZipFile(zip_path, "w") as z:
        z.writestr("DSpark Studio.app/Contents/Info.plist", plistlib.dumps(plist))
        z.writestr("DSpark Studio.app/Contents/MacOS/dspark-studio", exe)
        z.writestr("DSpark Studio.app/Contents/Resources/resources/demo/target/config.json", "{}")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "LAUNCH_SECONDS": "3"}
    return repo, env


def _test_app(repo: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(repo / "packaging" / "test_app_macos.sh"), str(repo / "dist" / "DSpark-Studio-macOS.zip")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_app_test_asks_both_launches_for_the_device_and_says_whether_metal_ran(tmp_path, device):
    repo, env = _stand_in_mac(tmp_path)
    probe = f"{device}: dspark.selftest: device gpu (Apple Paravirtual device): the GPU computed other logits"
    r = _test_app(repo, {**env, "SELFTEST_DEVICE": device, "METAL_PROBE": probe})
    assert r.returncode == 0 and r.stdout.strip().endswith("app: 1 passed, 0 failed"), r.stdout + r.stderr
    launches = (tmp_path / "launches.log").read_text().splitlines()
    # the CPU is asked for by name; the GPU is left to the app's first-launch check, as a user's Mac does
    assert len(launches) == 2 and all(("--device cpu" in args) == (device == "cpu") for args in launches), launches
    assert not any("--device gpu" in args for args in launches), launches
    assert "--on-screen" in launches[1]  # the LaunchServices start
    artifact = repo / "build" / "artifact"
    assert sorted(p.name for p in artifact.iterdir()) == [
        "DSpark-Studio-macOS.zip",
        "metal.txt",
        "selftest-launched.png",
        "selftest.png",
    ]
    metal = (artifact / "metal.txt").read_text().splitlines()
    line = GPU_LINE if device == "gpu" else CPU_LINE
    assert metal == [
        f"metal exercised: {'yes' if device == 'gpu' else 'no'}",
        f"device: {device}",
        f"probe: {probe}",
        f"self-test: {line}",
        f"launched: {line}",
    ]


def test_app_test_fails_a_cpu_run_when_metal_was_demanded(tmp_path):
    repo, env = _stand_in_mac(tmp_path, app_says="cpu")
    r = _test_app(repo, env)  # SELFTEST_DEVICE unset: gpu
    assert r.returncode == 1 and "the self-test did not pass on the GPU" in r.stderr, r.stdout + r.stderr
    assert not (repo / "build" / "artifact").exists()
    r = _test_app(repo, {**env, "SELFTEST_DEVICE": "metal"})
    assert r.returncode == 1 and "SELFTEST_DEVICE is 'metal': say gpu or cpu" in r.stderr


def test_app_test_fails_a_gpu_run_whose_first_launch_check_did_not_keep_it_there(tmp_path):
    repo, env = _stand_in_mac(tmp_path, app_says="gpu, unchecked")
    r = _test_app(repo, env)
    assert r.returncode == 1 and "the first-launch GPU check did not keep the app on the GPU" in r.stderr, r.stderr


def test_app_test_stops_an_app_that_never_quits(tmp_path):
    repo, env = _stand_in_mac(tmp_path, hang=True)
    started = __import__("time").monotonic()
    r = _test_app(repo, env)
    assert r.returncode == 1 and "the self-test did not finish in 3 s" in r.stderr, r.stdout + r.stderr
    assert __import__("time").monotonic() - started < 30


def test_app_test_creates_opens_output_files_before_open_runs(tmp_path):
    """The stand-in open refuses output paths that do not exist; the script passes only because
    it made them first (drop its `: >` lines and this fails)."""
    repo, env = _stand_in_mac(tmp_path)
    script = (repo / "packaging" / "test_app_macos.sh").read_text()
    assert script.count(': >"$tmp/ls.') == 2
    (repo / "packaging" / "test_app_macos.sh").write_text(script.replace(': >"$tmp/ls.out"', "true"))
    r = _test_app(repo, env)
    assert r.returncode == 1 and "open could not launch the app" in r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize(
    "python, verdict",
    [
        (
            'echo "dspark.selftest: device gpu (Apple M4): computes what the CPU computes"',
            "gpu: dspark.selftest: device gpu (Apple M4): computes what the CPU computes",
        ),
        (
            'echo "loading"; echo "dspark.selftest: device gpu (Apple Paravirtual device): '
            'the GPU computed other logits"; exit 1',
            "cpu: the GPU probe exited 1: dspark.selftest: device gpu (Apple Paravirtual device): "
            "the GPU computed other logits",
        ),
        (
            'echo "dspark.selftest: device cpu (Apple M4): the CPU (nothing to compare)"',
            "cpu: MLX's default device is not a GPU here "
            "(dspark.selftest: device cpu (Apple M4): the CPU (nothing to compare))",
        ),
        ('echo "Traceback"; echo "  line 1"; kill -SEGV $$', "cpu: the GPU probe was killed by signal 11 (  line 1)"),
        ("sleep 60", "cpu: the GPU probe did not finish in 2 s and was stopped"),
    ],
)
def test_metal_probe_says_gpu_only_for_a_gpu_that_computes_what_the_cpu_computes(tmp_path, python, verdict):
    repo, env = _stand_in_mac(tmp_path)
    fake = _touch(tmp_path / "python", f"#!/bin/sh\n{python}\n".encode())
    fake.chmod(0o755)
    r = subprocess.run(
        ["bash", str(repo / "packaging" / "probe_metal.sh"), str(fake)],
        env={**env, "PROBE_SECONDS": "2"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and r.stdout.splitlines() == [verdict], r.stdout + r.stderr


# ------------------------------------------------------------------ the version, the mlx pin, the release's assets
def test_the_version_lives_in_dspark_version_and_pyproject_reads_it_from_there(tmp_path):
    """One version for the wheel, the app's Info.plist (the spec reads the installed package's) and
    the release tag (release.py check-tag)."""
    import tomllib

    import release

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "dspark.version.__version__"}
    from dspark.version import __version__

    assert release.project_version() == __version__
    with pytest.raises(release.ReleaseError, match="sets no __version__"):
        release.project_version(_touch(tmp_path / "version.py", b'"""x"""\nOTHER = "9"\n'))


def test_mlx_on_macos_is_at_least_the_release_the_runners_gpu_computes_with():
    """0.31 brought mx.device_info; GitHub's paravirtual GPU computed correctly only from 0.32.2."""
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (mac,) = [d for d in deps if d.startswith("mlx") and "sys_platform == 'darwin'" in d]
    assert re.fullmatch(r"mlx>=(\d+\.\d+\.\d+); sys_platform == 'darwin'", mac), mac
    assert tuple(map(int, re.search(r">=([\d.]+)", mac).group(1).split("."))) >= (0, 32, 2)


SHA = "0123456789abcdef" * 4


def test_fill_cask_fills_every_placeholder():
    import fill_cask

    template = fill_cask.TEMPLATE.read_text()
    assert set(fill_cask.PLACEHOLDER.findall(template)) == {"VERSION", "SHA256", "REPOSITORY"}
    cask = fill_cask.fill(template, "1.2.3", SHA, "someone/dspark-studio")
    assert not fill_cask.PLACEHOLDER.search(cask) and "@" not in cask.replace("#{", "")
    assert 'version "1.2.3"' in cask and f'sha256 "{SHA}"' in cask
    assert 'homepage "https://github.com/someone/dspark-studio"' in cask
    assert (
        'url "https://github.com/someone/dspark-studio/releases/download/v#{version}/DSpark-Studio-#{version}-macOS.zip"'
        in cask
    )


@pytest.mark.parametrize(
    "version, sha256, repository, says",
    [
        ("1.2", SHA, "a/b", "the version '1.2' is not X.Y.Z"),
        ("v1.2.3", SHA, "a/b", "the version 'v1.2.3' is not X.Y.Z"),
        ("1.2.3-rc1", SHA, "a/b", "is not X.Y.Z"),
        ("1.2.3", SHA.upper(), "a/b", "is not a SHA-256"),
        ("1.2.3", SHA[:-1], "a/b", "is not a SHA-256"),
        ("1.2.3", "g" * 64, "a/b", "is not a SHA-256"),
        ("1.2.3", SHA, "dspark-studio", "is not OWNER/NAME"),
        ("1.2.3", SHA, "a/b/c", "is not OWNER/NAME"),
        ("1.2.3", SHA, "-a/b", "is not OWNER/NAME"),
        ("1.2.3", SHA, 'a/b"; system "x', "is not OWNER/NAME"),
    ],
)
def test_fill_cask_refuses_a_malformed_value_in_one_sentence(capsys, version, sha256, repository, says):
    import fill_cask

    with pytest.raises(fill_cask.CaskError, match=re.escape(says)):
        fill_cask.fill(fill_cask.TEMPLATE.read_text(), version, sha256, repository)
    assert fill_cask.main([version, sha256, repository]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fill_cask.py: ") and err.count("\n") == 1 and says in err


def test_fill_cask_refuses_a_template_placeholder_it_does_not_know():
    import fill_cask

    with pytest.raises(fill_cask.CaskError, match="@MINIMUM@"):
        fill_cask.fill(fill_cask.TEMPLATE.read_text() + '# needs "@MINIMUM@"\n', "1.2.3", SHA, "a/b")


@pytest.mark.skipif(shutil.which("ruby") is None, reason="ruby is not installed (apt-get install ruby; macOS has it)")
def test_the_filled_cask_is_ruby_that_downloads_the_asset_the_release_names(tmp_path):
    """Evaluated by Ruby with the cask DSL stood in for: the URL Homebrew would fetch, with
    #{version} interpolated, is the asset release.py names, and the stanzas hold what they should."""
    import json

    import fill_cask

    cask = _touch(
        tmp_path / "dspark-studio.rb",
        fill_cask.fill(fill_cask.TEMPLATE.read_text(), "1.2.3", SHA, "someone/dspark-studio").encode(),
    )
    dsl = _touch(
        tmp_path / "dsl.rb",
        b"""require "json"
class Stanzas
  attr_reader :s
  def initialize; @s = {}; end
  def version(v = nil) = v.nil? ? @s[:version] : (@s[:version] = v)
  %i[sha256 url name desc homepage app].each { |m| define_method(m) { |v| @s[m] = v } }
  def livecheck(&) = (@s[:livecheck] = true)
  def depends_on(**kw) = (@s[:depends_on] ||= {}).merge!(kw)
  def zap(**kw) = (@s[:zap] = kw)
end
def cask(token, &block)
  st = Stanzas.new
  st.instance_eval(&block)
  puts JSON.generate({token: token}.merge(st.s))
end
load ARGV[0]
""",
    )
    r = subprocess.run(["ruby", str(dsl), str(cask)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert (
        got["url"] == "https://github.com/someone/dspark-studio/releases/download/v1.2.3/DSpark-Studio-1.2.3-macOS.zip"
    )
    assert got["token"] == "dspark-studio" and got["version"] == "1.2.3" and got["sha256"] == SHA
    assert got["app"] == "DSpark Studio.app" and got["livecheck"] is True
    assert got["depends_on"] == {"macos": "sonoma", "arch": "arm64"}
    assert "~/Library/Preferences/com.dspark.DSpark Studio.plist" in got["zap"]["trash"]
    assert got["zap"]["rmdir"] == "~/Library/Application Support/dspark-studio"


def test_zap_trashes_the_folders_the_app_writes_to_and_not_a_persons_exports():
    """The paths platformdirs and QSettings give on macOS for the names the code uses (Qt's
    qsettings_mac.cpp makes the domain com.<organisation, lowercased> without an organisation domain)."""
    import platformdirs.macos

    cask = (ROOT / "packaging" / "homebrew" / "dspark-studio.rb").read_text()
    home = str(Path.home())
    tilde = lambda p: str(p).replace(home, "~", 1)
    studio, library = platformdirs.macos.MacOS("dspark-studio", "DSpark"), platformdirs.macos.MacOS("dspark", "DSpark")
    settings = (ROOT / "app" / "files" / "settings.py").read_text()
    assert 'ORG, APP = "DSpark", "DSpark Studio"' in settings and 'user_data_dir("dspark-studio", ORG)' in settings
    assert 'user_log_dir("dspark-studio", "DSpark")' in (ROOT / "dspark" / "errors.py").read_text()
    assert 'user_cache_dir("dspark", "DSpark")' in (ROOT / "dspark" / "costs.py").read_text()
    for path in (
        f"{tilde(studio.user_data_dir)}/runs",
        tilde(studio.user_log_dir),
        tilde(library.user_cache_dir),
        "~/Library/Preferences/com.dspark.DSpark Studio.plist",
        f"~/Library/Preferences/{bundle.BUNDLE_ID}.plist",
        f"~/Library/Saved Application State/{bundle.BUNDLE_ID}.savedState",
    ):
        assert f'"{path}"' in cask, path
    trash = re.findall(r'"([^"]+)"', cask.split("trash: [", 1)[1].split("]", 1)[0])
    assert not [p for p in trash if "exports" in p or p == tilde(studio.user_data_dir)], trash  # a person's files
    assert f'rmdir: "{tilde(studio.user_data_dir)}"' in cask  # removed only when nothing is left in it


def _release_inputs(tmp_path: Path, version: str, minimum: str = "14.0", images=("macos-15", "macos-26")) -> dict:
    import zipfile

    zip_dir = tmp_path / "download"
    zip_dir.mkdir()
    with zipfile.ZipFile(zip_dir / "DSpark-Studio-macOS-built-on-macos-15.zip", "w") as z:
        z.writestr(
            "DSpark Studio.app/Contents/Info.plist",
            plistlib.dumps(
                {"CFBundleShortVersionString": version, "LSMinimumSystemVersion": minimum}, fmt=plistlib.FMT_BINARY
            ),
        )
        z.writestr("DSpark Studio.app/Contents/MacOS/dspark-studio", b"\xcf\xfa\xed\xfe")
    records = {
        "macos-15": [
            "metal exercised: yes",
            "device: gpu",
            "probe: gpu: dspark.selftest: device gpu (Apple Paravirtual device): computes what the CPU computes",
            f"self-test: {GPU_LINE}",
            f"launched: {GPU_LINE}",
        ],
        "macos-26": [
            "metal exercised: no",
            "device: cpu",
            "probe: cpu: the GPU probe was killed by signal 11 (no output)",
            f"self-test: {CPU_LINE}",
            f"launched: {CPU_LINE}",
        ],
    }
    for image in images:
        _touch(
            tmp_path / "selftests" / f"DSpark-Studio-selftest-{image}" / "metal.txt",
            ("\n".join(records[image]) + "\n").encode(),
        )
    import release

    return dict(
        tag=f"v{release.project_version()}",
        commit="c0ffee" * 6 + "abcd",
        repository="someone/dspark-studio",
        zip_dir=zip_dir,
        selftests=tmp_path / "selftests",
        image="macos-15",
        out=tmp_path / "assets",
        notes_path=tmp_path / "notes.md",
    )


def test_release_assembles_the_zip_its_checksum_the_cask_and_notes_that_say_what_ci_proved(tmp_path):
    import hashlib

    import release

    version = release.project_version()
    inputs = _release_inputs(tmp_path, version)
    assets = release.assemble(**inputs)
    zip_name = f"DSpark-Studio-{version}-macOS.zip"
    assert [p.name for p in assets] == [zip_name, f"{zip_name}.sha256", "dspark-studio.rb"]
    assert sorted(p.name for p in inputs["out"].iterdir()) == sorted(
        p.name for p in assets
    )  # `gh release create TAG out/*`
    data = (inputs["out"] / zip_name).read_bytes()
    assert data == (inputs["zip_dir"] / "DSpark-Studio-macOS-built-on-macos-15.zip").read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    assert (inputs["out"] / f"{zip_name}.sha256").read_text() == f"{sha}  {zip_name}\n"
    cask = (inputs["out"] / "dspark-studio.rb").read_text()
    assert f'sha256 "{sha}"' in cask and f'version "{version}"' in cask and "@" not in cask.replace("#{", "")
    text = inputs["notes_path"].read_text()
    for said in (
        f"DSpark Studio {version}",
        "macOS 14.0 or later",
        inputs["commit"],
        f"`{sha}`",
        "**macos-15: Metal exercised.** The app's self-test computed on the GPU (Apple Paravirtual device)",
        "**macos-26: Metal not exercised.** The app's self-test ran the same checks on MLX's CPU device, since the "
        "runner's GPU probe found: the GPU probe was killed by signal 11",
        "macos-15 and macos-26 runner images",
        "Control-click the app ▸ Open",
        "Privacy & Security",
        "Open Anyway",
        "support.apple.com",
        "brew install --cask someone/dspark/dspark-studio",
        f"shasum -a 256 -c {zip_name}.sha256",
    ):
        assert said in text, said


@pytest.mark.parametrize(
    "change, says",
    [
        ({"tag": "v9.9.9"}, "does not name the project's version"),
        ({"app_version": "0.0.1"}, "is version 0.0.1, not"),
        ({"minimum": "15.0"}, "the app needs macOS 15.0 but the cask says :sonoma"),
        ({"images": ("macos-26",)}, "no self-test record (metal.txt) from macos-15"),
        ({"second_file": True}, "should hold the app's zip alone, and holds 2 files"),
    ],
)
def test_release_refuses_what_it_cannot_stand_behind(tmp_path, change, says):
    import release

    version = release.project_version()
    inputs = _release_inputs(
        tmp_path,
        change.get("app_version", version),
        change.get("minimum", "14.0"),
        change.get("images", ("macos-15", "macos-26")),
    )
    if "tag" in change:
        inputs["tag"] = change["tag"]
    if change.get("second_file"):
        _touch(inputs["zip_dir"] / "other.zip")
    with pytest.raises(release.ReleaseError, match=re.escape(says)):
        release.assemble(**inputs)
    assert not inputs["notes_path"].exists()


def test_release_script_runs_on_a_bare_python3_and_checks_the_tag():
    """The release job runs it with the runner's python3, no venv: standard library only."""
    import release

    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    run = lambda *a: subprocess.run(
        [python, "-I", str(ROOT / "packaging" / "release.py"), *a],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    ok = run("check-tag", f"v{release.project_version()}")
    assert ok.returncode == 0, ok.stderr
    bad = run("check-tag", "v0.0.0-not-it")
    assert bad.returncode == 1 and bad.stderr.startswith("release.py: the tag v0.0.0-not-it does not name")
    assert bad.stderr.count("\n") == 1
