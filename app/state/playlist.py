"""The saved runs opened for replay (File ▸ Open run or benchmark…, ``--replay FILE ...``):
which is on screen, at what speed, and what the header's badge and the prompt line say about
it. Plain Python; the recordings are ``app.files.replay.Recording``s and the window plays them."""

from __future__ import annotations

from dataclasses import dataclass, field

SPEEDS = {"1×": 1.0, "2×": 2.0, "instant": 0.0}


@dataclass
class Playlist:
    recordings: list = field(default_factory=list)  # app.files.replay.Recording, in the order opened
    index: int = -1  # the recording on screen
    speed: str = "1×"  # a key of SPEEDS

    def __bool__(self) -> bool:
        return bool(self.recordings)

    def at(self, index: int):
        """The recording ``index`` steps into the list (wrapping round), now the one on screen."""
        self.index = index % len(self.recordings)
        return self.recordings[self.index]

    def badge(self) -> str:
        """ "REPLAY 1× · 2 of 3 · file.json · recorded 2026-01-02 10:00": the header's badge."""
        rec, n = self.recordings[self.index], len(self.recordings)
        return (
            f"REPLAY {self.speed}"
            + (f" · {self.index + 1} of {n}" if n > 1 else "")
            + f" · {rec.name}"
            + (f" · recorded {rec.created[:16].replace('T', ' ')}" if rec.created else "")
        )

    def caption(self) -> str:
        """The prompt line: the recording's prompt, or how many it has."""
        prompts = self.recordings[self.index].prompts
        lines = (prompts[0] if prompts else "").strip().splitlines()
        first = lines[0][:120] if lines else ""
        return first if len(prompts) < 2 else f"{len(prompts)} prompts · {first} …"

    def drafters(self) -> list[str]:
        """Every drafter directory the recordings ran (what a replay lists, nothing else)."""
        return list(dict.fromkeys(r.drafter for rec in self.recordings for r in rec.runs if r.drafter))
