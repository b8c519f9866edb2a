"""A tool server that failed to start is held across runs of Conch for a while (another
``conch ask``, the window started again): left out at once, saying why, until the person starts
it again, the server is changed, or ``HOLD_SECONDS`` pass."""

from __future__ import annotations

import sys
from pathlib import Path

from app.secrets import SessionSecrets
from app.settings import SettingsStore
from app.tools import HELD_FILE, HOLD_SECONDS, ToolSettings
from engines.tools.config import StdioServer


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def broken(starts: Path, word: str = "started") -> StdioServer:
    """A server that ends before it answers; each start leaves a line in ``starts``."""
    code = f"open({str(starts)!r}, 'a').write({word!r} + '\\n'); raise SystemExit(3)"
    return StdioServer(id="broken", name="Broken", command=sys.executable, args=("-c", code))


async def test_a_held_server_waits_across_runs_until_started_again_or_the_time_passes(
    data_dir: Path, tmp_path: Path
) -> None:
    starts = tmp_path / "starts"
    settings = SettingsStore.in_dir(data_dir)
    settings.update(tool_servers=(broken(starts),))
    clock = Clock()

    def run() -> ToolSettings:
        return ToolSettings(settings, SessionSecrets(), held_file=data_dir / HELD_FILE, clock=clock)

    first = run()
    await first.catalogue()
    assert first.state("broken").phase == "failed"
    await first.stop()
    assert starts.read_text().splitlines() == ["started"]

    # The next run holds it at once: nothing is started, and the reason says when it failed.
    clock.now += 120
    second = run()
    state = second.state("broken")
    assert state.phase == "failed" and "when Conch last tried 2 min ago" in state.reason
    await second.catalogue()
    assert starts.read_text().splitlines() == ["started"]
    # The person's own retry starts it (and it fails again, written down anew).
    await second.start_again("broken")
    assert starts.read_text().splitlines() == ["started", "started"]
    await second.stop()

    # Once the time has passed, a run tries it again by itself.
    clock.now += HOLD_SECONDS + 1
    third = run()
    assert third.state("broken").phase != "failed"
    await third.catalogue()
    assert len(starts.read_text().splitlines()) == 3
    await third.stop()

    # A changed server is tried at once, whatever was written down about the old one.
    settings.update(tool_servers=(broken(starts, "changed"),))
    fourth = run()
    assert fourth.state("broken").phase != "failed"
    await fourth.catalogue()
    assert starts.read_text().splitlines()[-1] == "changed"
    await fourth.stop()
