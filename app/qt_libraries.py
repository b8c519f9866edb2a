"""The system libraries Qt needs on Linux, checked before Qt starts.

Qt's X11 platform plugin (xcb) links against libraries that PySide6 does not ship. When one is
missing, Qt only says it "could not load the Qt platform plugin" and that "reinstalling the
application may fix this problem", then aborts. Conch loads each library itself first and,
when one is missing, names the system package to install instead.

The list is what PySide6 6.8-6.11's ``libqxcb.so``, ``libQt6XcbQpa.so.6`` and
``libQt6Gui.so.6`` name as needed (``readelf -d``), beyond the C and C++ runtimes.
"""

from __future__ import annotations

import ctypes
import importlib.util
import re
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class SystemLibrary:
    soname: str  # the file the dynamic loader looks for
    debian: str  # the package on Debian and Ubuntu
    fedora: str  # the package on Fedora


def _xcb(soname: str, debian: str, fedora: str = "libxcb") -> SystemLibrary:
    return SystemLibrary(soname, debian, fedora)


# Every platform (offscreen too) loads these with Qt's GUI library.
GUI_LIBRARIES = (
    SystemLibrary("libEGL.so.1", "libegl1", "libglvnd-egl"),
    SystemLibrary("libGL.so.1", "libgl1", "libglvnd-glx"),
    SystemLibrary("libfontconfig.so.1", "libfontconfig1", "fontconfig"),
    SystemLibrary("libfreetype.so.6", "libfreetype6", "freetype"),
    SystemLibrary("libxkbcommon.so.0", "libxkbcommon0", "libxkbcommon"),
    SystemLibrary("libglib-2.0.so.0", "libglib2.0-0", "glib2"),
    SystemLibrary("libdbus-1.so.3", "libdbus-1-3", "dbus-libs"),
)

# The X11 platform plugin adds these.
XCB_LIBRARIES = (
    _xcb("libxcb-cursor.so.0", "libxcb-cursor0", "xcb-util-cursor"),
    SystemLibrary("libxkbcommon-x11.so.0", "libxkbcommon-x11-0", "libxkbcommon-x11"),
    _xcb("libxcb-icccm.so.4", "libxcb-icccm4", "xcb-util-wm"),
    _xcb("libxcb-util.so.1", "libxcb-util1", "xcb-util"),
    _xcb("libxcb-image.so.0", "libxcb-image0", "xcb-util-image"),
    _xcb("libxcb-keysyms.so.1", "libxcb-keysyms1", "xcb-util-keysyms"),
    _xcb("libxcb-render-util.so.0", "libxcb-render-util0", "xcb-util-renderutil"),
    _xcb("libxcb-randr.so.0", "libxcb-randr0"),
    _xcb("libxcb-render.so.0", "libxcb-render0"),
    _xcb("libxcb-shape.so.0", "libxcb-shape0"),
    _xcb("libxcb-shm.so.0", "libxcb-shm0"),
    _xcb("libxcb-sync.so.1", "libxcb-sync1"),
    _xcb("libxcb-xfixes.so.0", "libxcb-xfixes0"),
    _xcb("libxcb-xkb.so.1", "libxcb-xkb1"),
    _xcb("libxcb.so.1", "libxcb1"),
    SystemLibrary("libX11-xcb.so.1", "libx11-xcb1", "libX11-xcb"),
    SystemLibrary("libX11.so.6", "libx11-6", "libX11"),
)

_KNOWN = {lib.soname: lib for lib in (*GUI_LIBRARIES, *XCB_LIBRARIES)}
_SONAME = re.compile(r"(lib[\w.+-]+\.so(?:\.\d+)*)")

Loader = Callable[[str], object]


def _bundled_dirs() -> list[Path]:
    """Folders Qt's own libraries find copies in that the dynamic loader does not search for
    this process: PySide6's Qt/lib (their RUNPATH) and a PyInstaller bundle's folder."""
    dirs = []
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        dirs.append(Path(bundle))
    spec = importlib.util.find_spec("PySide6")
    for location in (spec.submodule_search_locations or []) if spec else []:
        dirs.append(Path(location) / "Qt" / "lib")
    return dirs


def load_library(soname: str) -> object:
    """Load ``soname`` as Qt would; raises OSError when it is nowhere to be found."""
    try:
        return ctypes.CDLL(soname)
    except OSError:
        for folder in _bundled_dirs():
            if (folder / soname).is_file():
                return folder / soname
        raise


def uses_xcb(environ: Mapping[str, str], qt_args: Sequence[str] = ()) -> bool:
    """Whether Qt will start its X11 plugin: asked for by name, or an X display and no
    Wayland one (Qt prefers Wayland when both are there)."""
    wanted = environ.get("QT_QPA_PLATFORM", "")
    for i, arg in enumerate(qt_args):
        if arg == "-platform" and i + 1 < len(qt_args):
            wanted = qt_args[i + 1]
        elif arg.startswith("-platform="):
            wanted = arg.split("=", 1)[1]
    if wanted.strip():
        # "wayland;xcb" tries Wayland first and X11 only when that fails: check the first.
        first = wanted.split(";", 1)[0].split(":", 1)[0].strip()
        return first == "xcb"
    return bool(environ.get("DISPLAY")) and not environ.get("WAYLAND_DISPLAY")


def missing_libraries(
    libraries: Sequence[SystemLibrary], load: Loader = load_library
) -> list[SystemLibrary]:
    """The libraries the dynamic loader cannot find (or load)."""
    missing = []
    for lib in libraries:
        try:
            load(lib.soname)
        except OSError:
            missing.append(lib)
    return missing


def library_named_in(message: str) -> SystemLibrary | None:
    """The library an ImportError names ("libEGL.so.1: cannot open shared object file")."""
    found = _SONAME.search(message)
    if found is None:
        return None
    soname = found.group(1)
    return _KNOWN.get(soname) or SystemLibrary(soname, "", "")


def _listed(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def install_sentence(
    missing: Sequence[SystemLibrary], which: Callable[[str], str | None] = shutil.which
) -> str:
    """One sentence naming what to install, with the command for this system's installer."""
    if which("apt-get"):
        names, command = [lib.debian for lib in missing], "sudo apt-get install"
    elif which("dnf"):
        names, command = [lib.fedora for lib in missing], "sudo dnf install"
    else:
        names, command = [], ""
    names = list(dict.fromkeys(names))  # several xcb libraries share one Fedora package
    if names and all(names):
        one = len(names) == 1
        return (
            f"Conch needs the system {'library' if one else 'libraries'} {_listed(names)} "
            f"(install {'it' if one else 'them'} with: {command} {' '.join(names)})."
        )
    files = [lib.soname for lib in missing]
    one = len(files) == 1
    return (
        f"Conch needs the system {'library' if one else 'libraries'} {_listed(files)}; "
        f"install the {'package that provides it' if one else 'packages that provide them'} "
        "with your system's package manager."
    )


def check_qt_libraries(
    environ: Mapping[str, str],
    qt_args: Sequence[str] = (),
    *,
    platform: str = sys.platform,
    load: Loader = load_library,
    which: Callable[[str], str | None] = shutil.which,
) -> str | None:
    """None when Qt can start here, else the sentence to show in place of Qt's abort."""
    if not platform.startswith("linux"):
        return None
    needed = list(GUI_LIBRARIES)
    if uses_xcb(environ, qt_args):
        needed += XCB_LIBRARIES
    missing = missing_libraries(needed, load)
    return install_sentence(missing, which) if missing else None
