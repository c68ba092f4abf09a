"""What the person chose, without Qt: the target, the drafters and what became of loading each,
which drafter Run uses, the prompt and its place in a prompt set, and the generation settings.

The left-hand panel (``app.panes.controls``) shows a ``Choices`` and sends what the person did;
the window applies it here. Nothing else keeps a copy: a run reads its drafter, its prompt and
its settings from here, and the settings file is written from here. ``version`` moves on every
change, so the panel redraws only when something did.

A prompt typed by hand is never lost to ◀ ▶ or a change of set: it is kept in the set
``TYPED`` first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TYPED = "Typed prompts"  # the set a typed prompt is kept in when ◀ ▶ or another set replaces it


def drafter_label(path: str) -> str:
    return Path(path).name or path


@dataclass(kw_only=True)
class DrafterChoice:
    path: str
    checked: bool = True  # ticked: Compare runs it
    error: str | None = None  # why it cannot be used (None: it can, or it has not been loaded yet)
    detail: str | None = None  # its format, drafts per round and size, once it loaded
    trained: int | None = None  # the block size it was trained at, once it loaded (None: a token a step)
    kind: str | None = None  # "DSpark", "DFlash 2", "EAGLE-3", "Gemma-4 assistant", ... once it loaded
    refused: str | None = None  # the loader's refusal for this target, when that is its error (Diagnose names it)

    @property
    def label(self) -> str:
        return drafter_label(self.path)

    @property
    def shown(self) -> str:
        """The drafter list's line: its name and, once it loaded, its kind."""
        return f"{self.label} · {self.kind}" if self.kind else self.label


class Choices:
    def __init__(self, prompt_sets: dict[str, list[str]] | None = None):
        self.target = ""
        self.recent_targets: list[str] = []
        self.recent_drafters: list[str] = []
        self.drafters: list[DrafterChoice] = []
        self.selected: str | None = None  # the drafter Run uses (a path of ``drafters``)
        self.prompt_sets = {name: list(ps) for name, ps in (prompt_sets or {}).items()}
        self.set_name = next(iter(self.prompt_sets), "")
        self.prompt_index = -1  # the prompt's place in the set (-1: not one of the set's)
        self.prompt = ""
        self.all_prompts = False  # Compare on every prompt of the set
        self.config: dict = {}  # GenerationConfig fields
        self.version = 0

    def _changed(self) -> None:
        self.version += 1

    # --- target ---------------------------------------------------------------------------
    def set_target(self, path: str, recent: list[str] | None = None) -> None:
        path = (path or "").strip()
        if path != self.target or (recent is not None and recent != self.recent_targets):
            self.target = path
            if recent is not None:
                self.recent_targets = list(recent)
            self._changed()

    # --- drafters -------------------------------------------------------------------------
    def find(self, path: str | None) -> DrafterChoice | None:
        return next((d for d in self.drafters if d.path == path), None)

    def paths(self) -> list[str]:
        return [d.path for d in self.drafters]

    def usable(self) -> list[str]:
        """Every drafter not known to be bad (those the worker should load)."""
        return [d.path for d in self.drafters if not d.error]

    def checked(self) -> list[str]:
        """The ticked drafters Compare runs (never one known to be bad)."""
        return [d.path for d in self.drafters if d.checked and not d.error]

    def error(self, path: str) -> str | None:
        d = self.find(path)
        return d.error if d else None

    def run_drafter(self) -> str | None:
        """The selected drafter, else the first ticked one."""
        if self.selected is not None:
            return self.selected
        checked = self.checked()
        return checked[0] if checked else None

    def add_drafter(self, path: str, checked: bool = True, select: bool = False) -> bool:
        """Add a drafter directory (ticked, and selected when asked or when none is); one that
        is not a directory comes in marked, unticked and unselected. False if it was listed."""
        if self.find(path) is not None:
            return False
        self.drafters.append(DrafterChoice(path=path, checked=checked))
        if select or self.selected is None:
            self.selected = path
        if not Path(path).expanduser().is_dir():
            self.mark(path, f"drafter {drafter_label(path)}: not a directory: {path}")
        self._changed()
        return True

    def remove_drafter(self, path: str) -> None:
        d = self.find(path)
        if d is None:
            return
        self.drafters.remove(d)
        if self.selected == path:
            self.selected = None
        self._changed()

    def tick(self, path: str, on: bool) -> None:
        d = self.find(path)
        if d is not None and d.checked != on:
            d.checked = on
            self._changed()

    def select(self, path: str | None) -> None:
        if path != self.selected and (path is None or self.find(path) is not None):
            self.selected = path
            self._changed()

    def mark(
        self,
        path: str,
        error: str | None,
        detail: str | None = None,
        trained: int | None = None,
        *,
        kind: str | None = None,
        refused: str | None = None,
    ) -> None:
        """A drafter's load result. A bad one is unticked and unselected (Run falls back to a
        good one, Compare skips it). ``trained`` is None for a drafter that drafts a token a step
        (no block it was trained at)."""
        d = self.find(path)
        if d is None:
            return
        d.error, d.detail, d.refused = error, detail, refused
        if kind is not None:
            d.kind = kind
        if trained is not None or detail is not None:
            d.trained = trained
        if error:
            d.checked = False
            if self.selected == path:
                self.selected = next((g.path for g in self.drafters if not g.error), None)
        self._changed()

    def set_drafters(self, paths: list[str]) -> None:
        """Replace the list (a replay shows the drafters it recorded, nothing else)."""
        self.drafters, self.selected = [], None
        for p in dict.fromkeys(paths):
            self.add_drafter(p)
        self._changed()

    # --- prompt ---------------------------------------------------------------------------
    def prompts(self) -> list[str]:
        return self.prompt_sets.get(self.set_name, [])

    def on_set(self) -> bool:
        ps = self.prompts()
        return 0 <= self.prompt_index < len(ps) and ps[self.prompt_index] == self.prompt

    def set_prompt(self, text: str) -> None:
        """The prompt box's text; a prompt of the set is found in it (so a restored or pasted
        one says "Prompt 3 of 10", not "typed")."""
        if text == self.prompt:
            return
        self.prompt = text
        ps = self.prompts()
        if not self.on_set() and text in ps:
            self.prompt_index = ps.index(text)
        self._changed()

    def select_prompt(self, index: int) -> None:
        ps = self.prompts()
        if ps:
            self.prompt_index = index % len(ps)
            self.prompt = ps[self.prompt_index]
        self._changed()

    def step_prompt(self, delta: int) -> str | None:
        """◀ ▶: the previous or next prompt of the set; a notice when a typed one was kept."""
        notice = self.keep_typed()
        self.select_prompt(self.prompt_index + delta)
        return notice

    def choose_set(self, name: str) -> str | None:
        if name == self.set_name or name not in self.prompt_sets:
            return None
        notice = self.keep_typed()
        self.set_name = name
        self.select_prompt(len(self.prompts()) - 1 if name == TYPED else 0)
        return notice

    def add_set(self, name: str, prompts: list[str]) -> None:
        self.prompt_sets[name] = list(prompts)
        self._changed()

    def is_typed(self) -> bool:
        """The prompt box holds something that is not a prompt of the set (typed by hand)."""
        return bool(self.prompt.strip()) and self.prompt not in self.prompts()

    def keep_typed(self) -> str | None:
        """Keep a typed prompt in the set TYPED before something replaces it."""
        if not self.is_typed():
            return None
        kept = self.prompt_sets.setdefault(TYPED, [])
        if self.prompt not in kept:
            kept.append(self.prompt)
        self._changed()
        return f'your prompt is kept in the prompt set "{TYPED}"'

    def counter(self) -> str:
        """Where ◀ ▶ are in the set: "3 / 12", "typed", or nothing without a set."""
        ps = self.prompts()
        return f"{self.prompt_index + 1} / {len(ps)}" if self.on_set() else "typed" if ps else ""

    def caption(self) -> str:
        """ "Prompt k of N · its first line" (or "Your prompt · …" for a typed one): the
        presentation mode's prompt line for a run."""
        lines = self.prompt.strip().splitlines()
        first = lines[0][:100] if lines else ""
        if self.on_set():
            return f"Prompt {self.prompt_index + 1} of {len(self.prompts())} · {first}"
        return f"Your prompt · {first}"

    def compare_prompts(self) -> list[str]:
        return self.prompts() if self.all_prompts else [self.prompt]

    def set_all_prompts(self, on: bool) -> None:
        if on != self.all_prompts:
            self.all_prompts = on
            self._changed()

    # --- settings -------------------------------------------------------------------------
    def set_config(self, values: dict) -> None:
        if values != self.config:
            self.config = dict(values)
            self._changed()

    def block_note(self) -> str | None:
        """Said when the block size asks the selected drafter for more drafts than it was
        trained to make (they are accepted rarely, and nothing else would warn)."""
        d = self.find(self.run_drafter())
        asked = self.config.get("block_size")
        if d is None or not d.trained or not asked or asked <= d.trained:
            return None
        return (
            f"{d.label} was trained at {d.trained} drafts per round: block size {asked} asks for "
            f"{asked - d.trained} more than it learned (they are rarely accepted)."
        )
