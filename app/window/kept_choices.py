"""What the app keeps between sessions of the person's choices (``app.files.settings``): the models
and which drafters are ticked, the prompt and its set, typed prompts, whether Compare takes every
prompt of the set, the generation settings. ``restore`` fills a
``Choices`` from the settings file, ``save`` writes one back. Only what worked is kept: a
drafter that was refused is not listed again at the next start."""

from __future__ import annotations

from dspark.config import GenerationConfig

from ..files.settings import Settings
from ..panes.config_form import form_values
from ..state.choices import TYPED, Choices


def restore(prefs: Settings | None, choices: Choices, target: str | None, drafters: list[str]) -> str | None:
    """Show these models (already chosen: command line, last used or demo) and the saved prompt
    and settings; a sentence when the file held unreadable settings (their defaults are used)."""
    unreadable: list[str] = []
    raw = prefs.section("config") if prefs is not None else {}
    choices.set_config(form_values(GenerationConfig, raw, lambda name, _value: unreadable.append(name)))
    if prefs is not None:
        choices.recent_drafters = prefs.recent("drafters")
    choices.set_target(target or "", prefs.recent("targets") if prefs is not None else [])
    unticked = set(prefs.get("models/unticked", [], list)) if prefs is not None else set()
    for d in drafters:
        choices.add_drafter(d, checked=d not in unticked)
    if prefs is not None:
        choices.set_all_prompts(prefs.get("prompt/all", False, bool))
    typed = [t for t in prefs.get("prompt/typed", [], list) if isinstance(t, str) and t.strip()] if prefs else []
    if typed:
        choices.add_set(TYPED, typed)
    set_name = prefs.get("prompt/set", "", str) if prefs else ""
    if set_name in choices.prompt_sets:
        choices.choose_set(set_name)
    text = prefs.get("prompt/text", "", str) if prefs else ""
    if text:
        choices.set_prompt(text)
    else:
        choices.select_prompt(0)
    if unreadable:
        return f"the settings file had unreadable values for {', '.join(unreadable)}: defaults are used"
    return None


def save(prefs: Settings, choices: Choices, geometry) -> None:
    prefs.set("window/geometry", geometry)
    prefs.set("prompt/typed", choices.prompt_sets.get(TYPED, []))
    prefs.set("models/target", choices.target)
    prefs.set("models/drafters", [d.path for d in choices.drafters if not d.error])
    prefs.set("models/unticked", [d.path for d in choices.drafters if not d.error and not d.checked])
    prefs.set("prompt/all", choices.all_prompts)
    prefs.set("prompt/set", choices.set_name)
    prefs.set("prompt/text", choices.prompt)
    for k, v in choices.config.items():
        prefs.set(f"config/{k}", "" if v is None else str(v))
    prefs.sync()
