"""The bundled runtime's two slots, and the chat's prompt state kept on disk across restarts.

llama.cpp's server runs with two slots of the full window each (``SLOTS``): the chat's
(``CHAT_SLOT``) and background work's (``BACKGROUND_SLOT``: summaries written ahead, learning,
titles, read-ahead). Each request names its slot (``id_slot``), so background work never
replaces the chat's prompt state and the next turn reads only its new message. The server gate
(engines/local/gate.py) still lets one request run at a time: on two busy cores a turn beside
a background prompt being read waited 29 s for its first word instead of 1 s (measured).

``ChatSlot`` lives in the runtime's process, in front of llama.cpp's server. It knows what the
chat's slot holds (the rendered prompt it was last sent, from ``/apply-template``) and saves
that state to disk (llama.cpp's ``/slots/0?action=save``) when the slot has been idle for
``SAVE_AFTER`` seconds, when another chat takes the slot, and when the runtime ends. Before a
chat's request (``POST /conch/chat-slot`` with the request's body, sent by the adapter) it
restores the longest saved state whose prompt starts the request's, so a chat reopened after a
restart is not read again from its first token. llama.cpp itself then compares tokens and reads
only what differs: a state never changes what is sent or what comes back. The chat's own
prompts read ahead in its slot, and a turn that goes on from one, are announced the same way
with ``?restore=0``: nothing is restored over what llama.cpp holds, but the slot's state stays
known, so a chat near a fold (read ahead after every turn) is still saved.

``StateStore`` keeps the files under ``<data dir>/local-model-states``: ``<name>.state`` (what
llama.cpp wrote) beside ``<name>.json`` (the model file's identity, the window, the prompt's
length and hash, the state's size and CRC). A state for another model or window is removed
unused (and left for the cap); a damaged one, or a file Conch did not write there, is removed
with one note for Health.
All of them together stay under ``CAP_BYTES`` and ``FREE_SHARE`` of the free disk, the least
recently used going first.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import secrets
import shutil
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

log = logging.getLogger("conch.local.slots")

SLOTS = 2  # the chat's and background work's, each with the whole window
CHAT_SLOT = 0
BACKGROUND_SLOT = 1
STATES_DIR = "local-model-states"
PREPARE_PATH = "/conch/chat-slot"
# About 23 KB a token for SmolLM2: 2 GB holds some ten full 8K chats.
CAP_BYTES = 2 * 1024**3
FREE_SHARE = 0.10  # of the disk's free space (counting what the states themselves take)
# A person reading an answer and typing the next message is usually back within a minute;
# saving an 8K state takes a tenth of a second but writes about 190 MB.
SAVE_AFTER = 60.0
SIGNAL_SAVE_TIMEOUT = 1.5  # a stop waits 2 s before killing the runtime (bundled.stop_now)
MIN_SAVE_TOKENS = 64  # shorter prompts are read again in well under a second
STATE_SUFFIX = ".state"
SIDECAR_SUFFIX = ".json"
PART_SUFFIX = ".part"
VERSION = 1
CRC_CHUNK = 1 << 20
LEFTOVER_AGE = 60.0  # seconds after which a part file or a lone record is a leftover, not a save


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


def model_identity(model: Path) -> dict[str, Any]:
    """What tells one model file from another without reading it: path, size and mtime."""
    try:
        stat = model.stat()
    except OSError:
        return {"path": str(model), "size": -1, "mtime_ns": -1}
    return {"path": str(model), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def file_crc(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(CRC_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def _disk_free(folder: Path) -> int:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return 0


@dataclass(frozen=True)
class Saved:
    """One saved state of the chat's slot."""

    name: str
    chars: int  # the rendered prompt's length it was saved after
    digest: str  # sha256 of that prompt
    tokens: int  # what llama.cpp wrote (the prompt and the answer after it)
    size: int
    crc: int
    used: float  # saved or last restored (wall clock): the least recently used goes first
    usable: bool = True  # for this model file and window (another's is kept, never used)


class StateStore:
    """The saved states for one model file and window (module doc)."""

    def __init__(
        self,
        folder: Path,
        model: Path,
        n_ctx: int,
        *,
        cap: int = CAP_BYTES,
        free_share: float = FREE_SHARE,
        disk_free: Callable[[Path], int] = _disk_free,
    ) -> None:
        self.folder = Path(folder)
        self.model = model_identity(Path(model))
        self.n_ctx = n_ctx
        self.cap = cap
        self.free_share = free_share
        self.disk_free = disk_free

    def state_path(self, name: str) -> Path:
        return self.folder / f"{name}{STATE_SUFFIX}"

    def sidecar_path(self, name: str) -> Path:
        return self.folder / f"{name}{SIDECAR_SUFFIX}"

    @staticmethod
    def new_name() -> str:
        return secrets.token_hex(8)

    # --- reading ----------------------------------------------------------------------------

    def scan(self) -> tuple[list[Saved], list[str]]:
        """The usable states, and a sentence for each damaged or foreign file (removed)."""
        found: list[Saved] = []
        notes: list[str] = []
        try:
            entries = sorted(self.folder.iterdir())
        except OSError:
            return found, notes
        names = {p.name for p in entries}
        for path in entries:
            if not path.is_file():
                continue
            if path.name.endswith(PART_SUFFIX):
                # A save cut short (the runtime killed meanwhile): never complete.
                if time.time() - _mtime(path) > LEFTOVER_AGE:
                    _remove(path)
                continue
            if path.suffix == SIDECAR_SUFFIX:
                lone = f"{path.stem}{STATE_SUFFIX}" not in names
                if lone and time.time() - _mtime(path) > LEFTOVER_AGE:
                    _remove(path)  # its state never came (or was removed by hand)
                continue
            if path.suffix != STATE_SUFFIX or f"{path.stem}{SIDECAR_SUFFIX}" not in names:
                notes.append(
                    f"The local model's saved chat states held a file Conch did not write "
                    f"({path.name}); Conch removed it and did not use it."
                )
                _remove(path)
                continue
            saved, why = self._read(path.stem)
            if saved is not None:
                found.append(saved)
            elif why:
                notes.append(why)
        return found, notes

    def _read(self, name: str) -> tuple[Saved | None, str]:
        """One state's record (``usable`` False for another model file or window: another
        Conch on this data folder may use it, and the cap removes it in its turn), or (None,
        sentence) for a damaged one, removed."""
        sidecar, state = self.sidecar_path(name), self.state_path(name)
        try:
            data = json.loads(sidecar.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or data.get("version") != VERSION:
                raise ValueError("not a record Conch writes")
            saved = Saved(
                name=name,
                chars=int(data["chars"]),
                digest=str(data["digest"]),
                tokens=int(data["tokens"]),
                size=int(data["size"]),
                crc=int(data["crc"]),
                used=float(data.get("used") or data.get("saved") or 0.0),
                usable=data.get("model") == self.model and data.get("n_ctx") == self.n_ctx,
            )
            if state.stat().st_size != saved.size:
                raise ValueError("its size changed")
        except (OSError, ValueError, KeyError, TypeError):
            self.drop(name)
            return None, self.damaged_note(name)
        return saved, ""

    @staticmethod
    def damaged_note(name: str) -> str:
        return (
            f"A saved state of a chat on the local model was damaged ({name}{STATE_SUFFIX}); "
            "Conch removed it, and that chat is read again from its start."
        )

    def best(self, text: str) -> tuple[list[Saved], list[str]]:
        """The states whose prompt starts ``text``, longest first, and notes from the scan."""
        found, notes = self.scan()
        matching = [
            s
            for s in found
            if s.usable and s.chars <= len(text) and text_digest(text[: s.chars]) == s.digest
        ]
        matching.sort(key=lambda s: s.chars, reverse=True)
        return matching, notes

    def intact(self, saved: Saved) -> bool:
        """Whether the state file still holds what was saved (size and CRC)."""
        path = self.state_path(saved.name)
        try:
            return path.stat().st_size == saved.size and file_crc(path) == saved.crc
        except OSError:
            return False

    # --- writing ----------------------------------------------------------------------------

    def keep(self, part: Path, name: str, text: str, tokens: int) -> Saved | None:
        """Make the file llama.cpp just wrote at ``part`` a saved state for prompt ``text``; the
        states it supersedes (a shorter start of the same chat) go, and the cap is kept."""
        # The record first, then the state under its name: a runtime ended part-way leaves a
        # part file or a record alone, both removed quietly, never a state without a record.
        try:
            saved = Saved(
                name=name,
                chars=len(text),
                digest=text_digest(text),
                tokens=tokens,
                size=part.stat().st_size,
                crc=file_crc(part),
                used=time.time(),
            )
            self._write_sidecar(saved)
            os.replace(part, self.state_path(name))
        except OSError as exc:
            log.info("local model: could not keep a saved state (%s)", exc)
            _remove(part)
            self.drop(name)
            return None
        found, _ = self.scan()
        for other in found:
            same_chat = (
                other.usable
                and other.chars <= saved.chars
                and text_digest(text[: other.chars]) == other.digest
            )
            if other.name != name and same_chat:
                self.drop(other.name)  # the same chat, saved before it went on
        self.enforce_cap()
        return saved

    def _write_sidecar(self, saved: Saved) -> None:
        """The record of a usable state (only this model and window's are written)."""
        record = {
            "version": VERSION,
            "model": self.model,
            "n_ctx": self.n_ctx,
            "chars": saved.chars,
            "digest": saved.digest,
            "tokens": saved.tokens,
            "size": saved.size,
            "crc": saved.crc,
            "used": saved.used,
        }
        path = self.sidecar_path(saved.name)
        tmp = path.with_name(f"{path.name}.tmp")
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, path)

    def touch(self, saved: Saved) -> Saved:
        """``saved`` was just used: it goes last when the cap needs room."""
        fresh = dataclasses.replace(saved, used=time.time())
        with contextlib.suppress(OSError):
            self._write_sidecar(fresh)
        return fresh

    def drop(self, name: str) -> None:
        _remove(self.state_path(name))
        _remove(self.sidecar_path(name))

    def limit(self, held: int) -> int:
        """How many bytes the states may take: ``cap``, and ``free_share`` of the free disk
        the states would leave if they were gone (``held`` being what they take now)."""
        return min(self.cap, int(self.free_share * (self.disk_free(self.folder) + held)))

    def enforce_cap(self) -> list[str]:
        """Remove the least recently used states until all fit the limit; their names."""
        found, _ = self.scan()
        held = sum(s.size for s in found)
        limit = self.limit(held)
        removed: list[str] = []
        for saved in sorted(found, key=lambda s: s.used):
            if held <= limit:
                break
            self.drop(saved.name)
            held -= saved.size
            removed.append(saved.name)
        return removed


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


# --- the chat's slot --------------------------------------------------------------------------


def common_start(a: str, b: str) -> int:
    """How many characters ``a`` and ``b`` share at their start."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def body_digest(body: dict[str, Any]) -> str:
    """What identifies a chat request's prompt: its messages and tools."""
    key = {"messages": body.get("messages"), "tools": body.get("tools")}
    return text_digest(json.dumps(key, sort_keys=True, ensure_ascii=False))


def chat_slot_of(body: bytes) -> str | None:
    """The prompt digest of a request to the chat's slot; None for any other request."""
    if b'"id_slot"' not in body:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("id_slot") != CHAT_SLOT:
        return None
    return body_digest(data)


class ChatSlot:
    """What the chat's slot holds, saved and restored (module doc). Runs on the runtime's
    event loop, except ``save_now`` (a signal handler's)."""

    def __init__(
        self,
        base: str,
        store: StateStore,
        *,
        clock: Callable[[], float] = time.monotonic,
        save_after: float = SAVE_AFTER,
    ) -> None:
        self.base = base.rstrip("/")
        self.store = store
        self.clock = clock
        self.save_after = save_after
        self.text: str | None = None  # the rendered prompt the slot was last sent
        self.expected: tuple[str, str] | None = None  # (body digest, its text) just prepared
        self.dirty = False  # holds more than its saved state
        self.turns = 0  # prepared requests in a row that went on from what the slot held
        self.busy = 0
        self.last = clock()
        self.notes: list[str] = []
        self._lock = asyncio.Lock()
        self._client: httpx.AsyncClient | None = None

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(None, connect=5.0),
                trust_env=False,
                limits=httpx.Limits(max_keepalive_connections=0),
            )
        return self._client

    # --- requests passing through ----------------------------------------------------------

    def started(self, digest: str) -> None:
        """A request to the chat's slot is on its way to llama.cpp."""
        self.busy += 1
        self.last = self.clock()
        if self.expected is not None and self.expected[0] == digest:
            self.text = self.expected[1]
        else:
            self.text = None  # sent without being prepared: what the slot holds is unknown
        self.expected = None
        self.dirty = self.text is not None

    def ended(self) -> None:
        self.busy = max(0, self.busy - 1)
        self.last = self.clock()

    # --- before a chat's request -------------------------------------------------------------

    async def prepare(self, body: dict[str, Any], *, restore: bool = True) -> dict[str, Any]:
        """Make the chat's slot hold as much of ``body``'s prompt as can be had: what it holds
        already, or the longest saved state that starts it. What was done, and notes.

        ``restore`` False: only note what the slot will hold once ``body`` is read. For the
        chat's own prompts read ahead, and a turn that goes on from one: llama.cpp holds those
        already (in the slot or its RAM cache), so no saved state may be put over them, yet the
        slot's state must stay known, or it could not be saved when the chat goes idle."""
        async with self._lock:
            text = await self._render(body)
            restored = 0
            if text is not None:
                self.expected = (body_digest(body), text)
                if restore:
                    restored = await self._restore_for(text)
                elif not self._goes_on(text):
                    self.turns = 1
            notes, self.notes = self.notes, []
            return {"slot": CHAT_SLOT, "restored": restored, "notes": notes}

    async def _render(self, body: dict[str, Any]) -> str | None:
        wanted = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        try:
            response = await self.client().post(f"{self.base}/apply-template", json=wanted)
            prompt = response.json().get("prompt") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        return prompt if isinstance(prompt, str) else None

    def _goes_on(self, text: str) -> bool:
        """Whether ``text`` goes on from what the slot holds (counted as one more turn)."""
        held = self.text or ""
        if held and text.startswith(held):
            self.turns += 1
            return True
        return False

    async def _restore_for(self, text: str) -> int:
        if self._goes_on(text):
            return 0  # the slot holds this chat already
        if self.dirty and self.turns >= 2:
            # Another chat (or a fold's summary) takes the slot: keep this chat's state. A
            # request that was never followed up (a summary) is not worth the disk.
            await self._save()
        self.turns = 1
        have = common_start(self.text or "", text)
        matching, notes = await asyncio.to_thread(self.store.best, text)
        self.notes += notes
        for saved in matching:
            if saved.chars <= have:
                return 0  # no better than what the slot holds
            if not await asyncio.to_thread(self.store.intact, saved):
                self.store.drop(saved.name)
                self.notes.append(self.store.damaged_note(saved.name))
                continue
            restored = await self._slot_action("restore", f"{saved.name}{STATE_SUFFIX}")
            if restored is None:
                self.store.drop(saved.name)
                self.notes.append(self.store.damaged_note(saved.name))
                continue
            self.store.touch(saved)
            self.text, self.dirty = text[: saved.chars], False
            log.info("local model: restored a chat's state (%s tokens)", restored)
            return restored
        return 0

    # --- saving -------------------------------------------------------------------------------

    def _worth_saving(self) -> bool:
        return self.dirty and self.text is not None and not self.busy

    async def save_if_idle(self) -> None:
        """Save the chat's state once its slot has sat unused for ``save_after`` seconds."""
        if self._worth_saving() and self.clock() - self.last >= self.save_after:
            async with self._lock:
                if self._worth_saving():
                    await self._save()

    async def save(self) -> None:
        """Save the chat's state now if it holds anything unsaved (the runtime is ending)."""
        async with self._lock:
            if self._worth_saving():
                await self._save()

    async def _save(self) -> None:
        text = self.text
        if text is None:
            return
        name = self.store.new_name()
        self.dirty = False  # a failed save is not tried again and again
        tokens = await self._slot_action("save", f"{name}{PART_SUFFIX}")
        self._kept(name, text, tokens)

    def _kept(self, name: str, text: str, tokens: int | None) -> None:
        part = self.store.folder / f"{name}{PART_SUFFIX}"
        if tokens is None or tokens < MIN_SAVE_TOKENS:
            _remove(part)
            return
        self.store.keep(part, name, text, tokens)

    async def _slot_action(self, action: str, filename: str) -> int | None:
        """Save or restore the chat's slot; the tokens written or read, None on failure."""
        try:
            response = await self.client().post(
                f"{self.base}/slots/{CHAT_SLOT}?action={action}", json={"filename": filename}
            )
            data = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return _tokens_of(data, action)

    def save_now(self, timeout: float = SIGNAL_SAVE_TIMEOUT) -> None:
        """``save`` without the event loop, for a signal that ends the runtime. Tried even while
        a request counts as using the slot: the stop often comes the moment the answer's last
        bytes reach the client, before this process has counted the request as ended. Should
        the slot really still be answering, llama.cpp makes the save wait, for ``timeout`` at
        most."""
        text = self.text
        if not self.dirty or text is None:
            return
        name = self.store.new_name()
        self.dirty = False
        try:
            response = httpx.post(
                f"{self.base}/slots/{CHAT_SLOT}?action=save",
                json={"filename": f"{name}{PART_SUFFIX}"},
                timeout=timeout,
                trust_env=False,
            )
            data = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            data = None
        self._kept(name, text, _tokens_of(data, "save"))

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def _tokens_of(data: Any, action: str) -> int | None:
    key = "n_saved" if action == "save" else "n_restored"
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None
