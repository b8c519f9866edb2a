"""A real keyring backend (the keyring library drives it) that keeps its entries in a dict, so a
test can look inside; ``installed`` makes it the keyring for a while."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

import keyring
import keyring.errors
from keyring.backend import KeyringBackend

B = TypeVar("B", bound=KeyringBackend)


class MemoryKeyring(KeyringBackend):
    priority = 1

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # keyring is untyped
        self.entries: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.entries.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.entries[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        if (service, username) not in self.entries:
            raise keyring.errors.PasswordDeleteError("no such key")
        del self.entries[(service, username)]


@contextmanager
def installed(backend: B) -> Iterator[B]:
    """``backend`` is the process's keyring inside the block; the old one comes back after."""
    old = keyring.get_keyring()
    keyring.set_keyring(backend)
    try:
        yield backend
    finally:
        keyring.set_keyring(old)
