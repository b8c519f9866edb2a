"""Naming the system library Qt lacks, before Qt aborts with a generic message."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app.qt_libraries import (
    GUI_LIBRARIES,
    XCB_LIBRARIES,
    check_qt_libraries,
    library_named_in,
    uses_xcb,
)

X11 = {"DISPLAY": ":0"}


def loader_without(*missing: str) -> tuple[Callable[[str], object], list[str]]:
    """A loader that finds every library but ``missing``, and the names it was asked for."""
    asked: list[str] = []

    def load(soname: str) -> object:
        asked.append(soname)
        if soname in missing:
            raise OSError(f"{soname}: cannot open shared object file: No such file or directory")
        return object()

    return load, asked


def apt(command: str) -> str | None:
    return "/usr/bin/apt-get" if command == "apt-get" else None


def dnf(command: str) -> str | None:
    return "/usr/bin/dnf" if command == "dnf" else None


def nothing(command: str) -> str | None:
    return None


def test_a_missing_xcb_cursor_is_named_with_the_apt_command() -> None:
    load, _ = loader_without("libxcb-cursor.so.0")
    said = check_qt_libraries(X11, platform="linux", load=load, which=apt)
    assert said == (
        "Conch needs the system library libxcb-cursor0 "
        "(install it with: sudo apt-get install libxcb-cursor0)."
    )


def test_several_missing_libraries_are_named_together() -> None:
    load, _ = loader_without("libxkbcommon-x11.so.0", "libEGL.so.1")
    said = check_qt_libraries(X11, platform="linux", load=load, which=apt)
    assert said is not None
    assert "libraries libegl1 and libxkbcommon-x11-0" in said
    assert said.endswith("sudo apt-get install libegl1 libxkbcommon-x11-0).")


def test_fedora_names_its_packages_once() -> None:
    load, _ = loader_without("libxcb-randr.so.0", "libxcb-shm.so.0", "libxcb-cursor.so.0")
    said = check_qt_libraries(X11, platform="linux", load=load, which=dnf)
    assert said == (
        "Conch needs the system libraries xcb-util-cursor and libxcb "
        "(install them with: sudo dnf install xcb-util-cursor libxcb)."
    )


def test_without_a_known_installer_the_file_is_named() -> None:
    load, _ = loader_without("libxcb-cursor.so.0")
    said = check_qt_libraries(X11, platform="linux", load=load, which=nothing)
    assert said is not None
    assert "libxcb-cursor.so.0" in said and "package manager" in said


def test_everything_present_says_nothing() -> None:
    load, asked = loader_without()
    assert check_qt_libraries(X11, platform="linux", load=load, which=apt) is None
    assert set(asked) == {lib.soname for lib in (*GUI_LIBRARIES, *XCB_LIBRARIES)}


def test_offscreen_and_wayland_do_not_need_the_x11_libraries() -> None:
    load, asked = loader_without("libxcb-cursor.so.0")
    offscreen = {"QT_QPA_PLATFORM": "offscreen", "DISPLAY": ":0"}
    assert check_qt_libraries(offscreen, platform="linux", load=load, which=apt) is None
    wayland = {"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"}
    assert check_qt_libraries(wayland, platform="linux", load=load, which=apt) is None
    assert "libxcb-cursor.so.0" not in asked
    # ...but Qt's GUI library needs EGL on every platform.
    load, _ = loader_without("libEGL.so.1")
    assert "libegl1" in (
        check_qt_libraries(offscreen, platform="linux", load=load, which=apt) or ""
    )


def test_only_linux_is_checked() -> None:
    load, asked = loader_without("libEGL.so.1")
    assert check_qt_libraries(X11, platform="darwin", load=load) is None
    assert asked == []


@pytest.mark.parametrize(
    ("environ", "qt_args", "xcb"),
    [
        ({"DISPLAY": ":0"}, [], True),
        ({}, [], False),
        ({"QT_QPA_PLATFORM": "xcb"}, [], True),
        ({"QT_QPA_PLATFORM": "wayland;xcb", "DISPLAY": ":0"}, [], False),
        ({"QT_QPA_PLATFORM": "offscreen"}, ["-platform", "xcb"], True),
        ({"DISPLAY": ":0"}, ["-platform=offscreen"], False),
    ],
)
def test_which_platform_qt_will_start(
    environ: dict[str, str], qt_args: list[str], xcb: bool
) -> None:
    assert uses_xcb(environ, qt_args) is xcb


def test_the_library_an_import_error_names() -> None:
    found = library_named_in("libEGL.so.1: cannot open shared object file: No such file")
    assert found is not None and found.debian == "libegl1"
    unknown = library_named_in("libweird.so.3: cannot open shared object file")
    assert unknown is not None and unknown.soname == "libweird.so.3"
    assert library_named_in("No module named 'PySide6'") is None
