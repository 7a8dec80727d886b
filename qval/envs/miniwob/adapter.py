"""MiniWoB++ through BrowserGym (text and image) as a QVal environment adapter.

* **Tasks.**  :data:`TASK_NAMES`: nineteen MiniWoB++ tasks, nearly all solved in two to five
  actions (fill a form, tick boxes, pick an option, find a word, enter a date or a time, read a
  table, find a link behind tabs, dismiss a popup … then submit).  A task id is
  ``"{name}:{seed}"``: the BrowserGym task ``miniwob.{name}`` reset with ``seed``, which fixes
  the instance (goal, labels, layout).  :attr:`MiniWoB.tasks` lists the ids *seed-major*
  (every name with seed 0, then every name with seed 1, …), so task ``j`` has the name
  ``task_names[j % len(task_names)]``: under the builder's ``split_by="task"`` rule
  (``cycle[j % len(cycle)]``) a number of names that is a multiple of the cycle keeps each
  name in one split (``miniwob@1.x``), any other number puts every name in every split
  (``miniwob@2.0``).
* **Dynamics.**  The real BrowserGym ``BrowserEnv`` on the ``miniwob`` package's HTML pages
  (``file://`` URL of the installed package, :func:`miniwob_url`), in Debian's headless
  Chromium (:func:`chromium_executable`).  Reward 1 when MiniWoB's raw reward is positive
  (BrowserGym's rule, no time decay), else 0; MiniWoB ends the episode on submit, right or
  wrong, so submitting an incomplete form gets 0.  ``slow_mo=0``, ``pre_observation_delay=0``.
* **Actions** are BrowserGym action strings (``click('16')``, ``fill('16', 'bob')``), executed by BrowserGym's ``bid`` action set.
  :meth:`MiniWoB.candidates` of a state: ``click`` on every visible set-of-marks element
  (BrowserGym's interactive-element flag), ``fill`` of every visible text box, spin
  button, date or time field with every quoted string of the goal and the reference policy's own
  fill text, in the order of the accessibility tree's node list.
* **Reference policy.**  A scripted optimal policy per task (:meth:`MiniWoB.reference_action`)
  that reads the goal and the accessibility tree of the current state (plus what the tree does
  not show: the true value of a field, which the tree masks for password boxes; the hidden tab
  panels of click-tab-2; the label of a multi-layouts field; and for ``click-button-sequence``
  the action history, because a click on button ONE leaves no trace in the page), so it acts
  optimally from any state it is restored to (click-checkboxes aside: MiniWoB also counts a
  submit with more right boxes than wrong as a success).
* **Observation.**  Text: ``Goal: …``, a blank line, then BrowserGym's flattened
  accessibility tree with element ids (``[16] textbox ''``); ``url`` properties are dropped
  because they name the install path.  Image (:meth:`MiniWoB.observation_image`): the
  screenshot with set-of-marks boxes and ids drawn on the visible interactive elements and,
  with ``goal_banner``, the goal written in a banner above it (BrowserGym empties MiniWoB's
  query box, so the screenshot itself never shows the goal).
* **Restore.**  The generic one: ``reset(seed)`` and replay the action history; MiniWoB with
  a fixed seed is deterministic, so the same page comes back (tested: text and pixels).
* **Browser.**  :func:`install_shared_chromium` gives BrowserGym a Playwright whose
  ``chromium.launch`` always uses Debian's Chromium and keeps one browser process per launch
  configuration alive across resets (each reset still gets a fresh browser context and
  page), and hides the text caret so screenshots do not depend on its blink phase.
* **Lean episodes** (default, ``MiniWoB(lean=False)`` turns them off): BrowserGym gets no chat
  page (:class:`_PagelessChat`; a reset opened one in a second browser) and takes no
  screenshot at each reset and step; :meth:`MiniWoB.screenshot` takes it when an image is
  asked for.  The environment is :attr:`~MiniWoB.deterministic`, so the labeller shares
  rollouts (:func:`qval.labelling.shares_rollouts`).  Both keep the records and labels exactly
  and the images as far as the old path reproduces its own: Chromium repaints a clicked element's
  hover and focus state on its own schedule, so a few next-state and goal images differ between
  two builds the old way already (``tests/test_miniwob.py`` builds a small dataset both ways).
"""

from __future__ import annotations

import ast
import atexit
import logging
import os
import random
import re
import shutil
import threading
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Callable, Sequence

import browsergym.core
import browsergym.core.env
import miniwob
import numpy as np
import playwright
import playwright.sync_api
from browsergym.core.action.highlevel import HighLevelActionSet
from browsergym.core.env import BrowserEnv
from browsergym.miniwob import all as miniwob_tasks
from browsergym.utils.obs import IGNORED_AXTREE_PROPERTIES, flatten_axtree_to_str
from PIL import Image, ImageDraw, ImageFont

from ...playwright_stacks import light_stacks
from ..base import Environment

log = logging.getLogger(__name__)

TASK_NAMES: tuple[str, ...] = (
    "enter-text",
    "enter-text-2",
    "login-user",
    "enter-password",
    "click-checkboxes",
    "click-option",
    "use-spinner",
    "click-button-sequence",
    "find-word",
    "enter-date",
    "enter-text-dynamic",
    "read-table-2",
    "form-sequence-2",
    "multi-orderings",
    "multi-layouts",
    "click-tab-2",
    "click-tab-2-hard",
    "login-user-popup",
    "enter-time",
)
"""The MiniWoB++ tasks the adapter covers, each with a scripted policy (most need two or more actions)."""

IGNORED_ROLES: tuple[str, ...] = ("LineBreak", "InlineTextBox")
"""Accessibility-tree roles left out of the text observation."""

IGNORED_PROPERTIES: tuple[str, ...] = (*IGNORED_AXTREE_PROPERTIES, "url")
"""Node properties left out of the text observation (``url`` names the local install path)."""

FILL_ROLES = frozenset({"textbox", "spinbutton", "searchbox", "Date", "InputTime"})
"""Roles whose elements get ``fill`` candidates."""

ACTION_TIMEOUT_MS = 2000
"""Playwright's default timeout for waits (page loads, field reads; MiniWoB's own is 5000 ms).  BrowserGym's
``bid`` actions set their own: :data:`BROWSERGYM_ACTION_TIMEOUT_MS`."""

BROWSERGYM_ACTION_TIMEOUT_MS = 500
"""The Playwright timeout written into BrowserGym's action functions (``elem.click(..., timeout=500)``)."""

PATIENT_ACTION_TIMEOUT_MS = 5000
"""The timeout of the second try of a step whose action timed out while Playwright was still carrying it out
(:meth:`MiniWoB._step`): a loaded machine can take over 500 ms to click an enabled, uncovered button."""

PLAYWRIGHT_RETRY = re.compile(r"^\s*- retrying \w+ action", re.MULTILINE)
"""The line of Playwright's call log that says it found the element unable to take the action (covered, disabled,
hidden) and tried again."""

RESET_TRIES = 3
"""Tries of one reset whose page load times out (a loaded machine); a reset opens a fresh context, so a retry
plays the same instance."""

CARET_HIDING_SCRIPT = """(() => { try { const sheet = new CSSStyleSheet();
  sheet.replaceSync('* { caret-color: transparent !important; }');
  document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet]; } catch (e) {} })();"""
"""Init script of every browser context: hide the blinking caret with a constructed stylesheet
(no DOM node is added, so BrowserGym's element ids stay the same)."""

MARK_COLOR = (255, 0, 64)
"""Colour of set-of-marks boxes and id labels."""

BANNER_FONT_SIZE = 15
"""Font size (pixels) of the goal banner (:func:`draw_goal_banner`)."""

BROWSER_LOCALE = "en-US"
BROWSER_TIMEZONE = "UTC"
"""Every page's locale and time zone, whatever the machine's: enter-time's and enter-date's goals are the
page clock's ``toLocaleTimeString`` and date, so a build on a machine in another zone would draw other goals."""

BANNER_MARGIN = 6
"""Margin (pixels) around the goal banner's text."""


# -- the browser ---------------------------------------------------------------------------
def chromium_executable() -> str:
    """The Chromium binary: ``$QVAL_CHROMIUM``, else ``chromium`` on ``PATH``, else ``/usr/bin/chromium``."""
    path = os.environ.get("QVAL_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).is_file():
        raise FileNotFoundError(
            f"Chromium not found at {path}; install Debian's chromium (scripts/install.sh dev does) "
            "or point QVAL_CHROMIUM at a Chromium binary"
        )
    return path


def miniwob_url() -> str:
    """``file://`` URL (with a trailing slash) of the HTML tasks shipped in the ``miniwob`` package."""
    html = Path(miniwob.__file__).resolve().parent / "html" / "miniwob"
    if not (html / "login-user.html").is_file():
        raise FileNotFoundError(f"the miniwob package has no HTML tasks in {html}")
    return html.as_uri() + "/"


class _KeptBrowser:
    """A Playwright browser whose ``close()`` keeps the process; new contexts hide the caret."""

    def __init__(self, browser: playwright.sync_api.Browser) -> None:
        self._browser = browser

    def new_context(self, **kwargs: Any) -> playwright.sync_api.BrowserContext:
        context = self._browser.new_context(**kwargs)
        context.add_init_script(CARET_HIDING_SCRIPT)
        return context

    def close(self) -> None:
        """Keep the process: BrowserGym has already closed the context it used."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._browser, name)


class _SharedChromium:
    """``chromium.launch`` for BrowserGym: Debian's Chromium, one kept process per configuration."""

    def __init__(self, browser_type: playwright.sync_api.BrowserType, executable: str) -> None:
        self._browser_type = browser_type
        self._executable = executable
        self._browsers: dict[str, _KeptBrowser] = {}

    def launch(self, **kwargs: Any) -> _KeptBrowser:
        kwargs["executable_path"] = self._executable
        key = repr(sorted(kwargs.items()))
        kept = self._browsers.get(key)
        if kept is None or not kept.is_connected():
            kept = self._browsers[key] = _KeptBrowser(self._browser_type.launch(**kwargs))
        return kept

    def close_all(self) -> None:
        """Close every kept browser process."""
        for kept in self._browsers.values():
            if kept.is_connected():
                kept._browser.close()
        self._browsers.clear()


class _BrowserGymPlaywright:
    """What BrowserGym uses of its global Playwright: ``selectors`` and :class:`_SharedChromium`."""

    def __init__(self, pw: playwright.sync_api.Playwright, executable: str) -> None:
        self.playwright = pw
        self.selectors = pw.selectors
        self.chromium = _SharedChromium(pw.chromium, executable)


_installed: _BrowserGymPlaywright | None = None


def install_shared_chromium() -> None:
    """Give BrowserGym (``browsergym.core``'s global Playwright) Debian's Chromium, kept alive, and
    the chat and screenshot that lean episodes replace (:class:`_PagelessChat`, :func:`_screenshot`), and
    Playwright's sync calls their cheap stack records (:func:`qval.playwright_stacks.light_stacks`).

    Idempotent; the browsers are closed at interpreter exit.  Must run in the thread that
    uses the environments (Playwright's sync API is bound to one thread).
    """
    global _installed
    if _installed is None:
        light_stacks()
        executable = chromium_executable()
        pw = playwright.sync_api.sync_playwright().start()
        _installed = _BrowserGymPlaywright(pw, executable)
        browsergym.core._set_global_playwright(_installed)  # type: ignore[arg-type]
        browsergym.core.env.Chat = _chat  # type: ignore[assignment,misc]
        browsergym.core.env.extract_screenshot = _screenshot
        atexit.register(_installed.chromium.close_all)


def shutdown_shared_chromium() -> None:
    """Close the kept browsers and stop Playwright; the next episode starts them again.

    While started, Playwright's sync API keeps an event loop running in its thread, so Django
    refuses database calls there (``SynchronousOnlyOperation``): stop it when the episodes of a
    thread are over (:meth:`MiniWoB.close` does).
    """
    global _installed
    if _installed is not None:
        _installed.chromium.close_all()
        _installed.playwright.stop()
        browsergym.core._set_global_playwright(None)  # type: ignore[arg-type]
        browsergym.core.env.Chat = _browsergym_chat  # type: ignore[misc]
        browsergym.core.env.extract_screenshot = _browsergym_screenshot
        _installed = None


class _PagelessChat:
    """What BrowserGym uses of its chat in a lean episode: the messages, without the chat's own browser page.

    BrowserGym opens a chat page (a browser context in a second Chromium) at every reset and writes each
    message into it; MiniWoB never reads it (the goal comes from the task, and the ``bid`` actions send no
    messages), and it runs in another browser process than the task's page, so dropping it leaves the task
    page as it was."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def add_message(self, role: str, msg: str) -> None:
        """Record a message as BrowserGym's chat does (``info`` messages are shown only, never kept)."""
        if role in ("user", "user_image", "assistant", "infeasible"):
            self.messages.append({"role": role, "timestamp": time.time(), "message": msg})

    def wait_for_user_message(self) -> None:
        raise RuntimeError("a lean MiniWoB episode has no chat page to wait on")

    def close(self) -> None:
        """Nothing to close."""


_lean = threading.local()
"""``_lean.on``: the current thread is in a lean BrowserGym call (:meth:`MiniWoB._browser_call`)."""
_browsergym_chat = browsergym.core.env.Chat
_browsergym_screenshot = browsergym.core.env.extract_screenshot


def _chat(*args: Any, **kwargs: Any) -> Any:
    """BrowserGym's ``Chat``, or in a lean call a :class:`_PagelessChat`."""
    return _PagelessChat() if getattr(_lean, "on", False) else _browsergym_chat(*args, **kwargs)


def _screenshot(page: playwright.sync_api.Page) -> np.ndarray | None:
    """:func:`still_screenshot`, or in a lean call ``None`` (:meth:`MiniWoB.screenshot` takes it when asked)."""
    return None if getattr(_lean, "on", False) else still_screenshot(page)


def still_screenshot(page: playwright.sync_api.Page) -> np.ndarray:
    """BrowserGym's screenshot of ``page`` with the pointer resting on the page's bottom-right corner, off every
    element, so that no element is drawn hovered.

    Chromium updates an element's hover look after the pointer stops on it, on a timer that a loaded machine delays:
    after the same click on click-checkboxes one screenshot showed a neighbouring box hovered and another the
    clicked one, so a restored state's screenshot differed from the collected one.  With the pointer off the elements every screenshot of a
    state is the same (each action moves the pointer to its element again)."""
    size = page.viewport_size
    if size:
        page.mouse.move(size["width"] - 1, size["height"] - 1)
    return _browsergym_screenshot(page)


class _DropOverrideWarnings(logging.Filter):
    """BrowserGym warns at every reset that our viewport-independent overrides change the task."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Overriding the task's")


logging.getLogger("browsergym.core.env").addFilter(_DropOverrideWarnings())


# -- accessibility tree ------------------------------------------------------------------
@dataclass(frozen=True)
class Element:
    """An accessibility-tree node that carries a BrowserGym id."""

    bid: str
    role: str
    name: str
    value: str | None
    properties: dict[str, Any]
    visible: bool
    marked: bool
    """BrowserGym's set-of-marks flag: an interactive element."""
    bbox: tuple[float, float, float, float] | None
    """(x, y, width, height) in screenshot pixels."""

    @property
    def checked(self) -> bool:
        return str(self.properties.get("checked")) == "true"


def parse_elements(obs: dict[str, Any]) -> list[Element]:
    """The nodes of ``obs["axtree_object"]`` with a BrowserGym id, first occurrence of each id, tree order."""
    extra = obs["extra_element_properties"]
    elements: list[Element] = []
    seen: set[str] = set()
    for node in obs["axtree_object"]["nodes"]:
        bid = node.get("browsergym_id")
        if bid is None or bid in seen:
            continue
        seen.add(bid)
        props = {p["name"]: p.get("value", {}).get("value") for p in node.get("properties", [])}
        value = node.get("value", {}).get("value")
        info = extra.get(bid, {})
        bbox = info.get("bbox")
        elements.append(
            Element(
                bid=bid,
                role=node.get("role", {}).get("value", ""),
                name=str(node.get("name", {}).get("value", "")).strip(),
                value=None if value is None else str(value),
                properties=props,
                visible=(info.get("visibility") or 0.0) >= 0.5,
                marked=bool(info.get("set_of_marks")),
                bbox=None if bbox is None else (bbox[0], bbox[1], bbox[2], bbox[3]),
            )
        )
    return elements


def action_text(function: str, *args: str) -> str:
    """A BrowserGym action string, arguments as Python literals: ``action_text("fill", "16", "bob")``."""
    return f"{function}({', '.join(repr(a) for a in args)})"


def draw_set_of_marks(screenshot: np.ndarray, elements: Sequence[Element]) -> Image.Image:
    """``screenshot`` (H×W×3 uint8) with a box and the id drawn on every visible marked element."""
    image = Image.fromarray(screenshot).convert("RGB")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    for el in elements:
        if not (el.visible and el.marked and el.bbox):
            continue
        x, y, w, h = el.bbox
        draw.rectangle([x, y, x + w - 1, y + h - 1], outline=MARK_COLOR, width=2)
        left, top, right, bottom = draw.textbbox((x, y), el.bid, font=font)
        draw.rectangle([left - 1, top - 1, right + 1, bottom + 1], fill=MARK_COLOR)
        draw.text((x, y), el.bid, fill=(255, 255, 255), font=font)
    return image


def draw_goal_banner(image: Image.Image, goal: str) -> Image.Image:
    """``image`` below a white banner that shows ``Goal: {goal}``, wrapped to the image's width.

    BrowserGym empties MiniWoB's query area (the yellow box that shows a person the goal), so
    the screenshot alone never shows the goal; the banner puts it back into the image.
    """
    font = ImageFont.load_default(size=BANNER_FONT_SIZE)
    width = image.width - 2 * BANNER_MARGIN
    lines: list[str] = []
    for word in f"Goal: {goal}".split():
        if lines and font.getlength(f"{lines[-1]} {word}") <= width:
            lines[-1] = f"{lines[-1]} {word}"
        else:
            lines.append(word)
    line_height = BANNER_FONT_SIZE + 4
    height = 2 * BANNER_MARGIN + line_height * len(lines)
    framed = Image.new("RGB", (image.width, height + image.height), (255, 255, 255))
    draw = ImageDraw.Draw(framed)
    for k, line in enumerate(lines):
        draw.text((BANNER_MARGIN, BANNER_MARGIN + k * line_height), line, fill=(0, 0, 0), font=font)
    draw.line([(0, height - 1), (image.width - 1, height - 1)], fill=(128, 128, 128), width=1)
    framed.paste(image.convert("RGB"), (0, height))
    return framed


# -- the adapter ---------------------------------------------------------------------------
class PolicyError(RuntimeError):
    """The scripted policy cannot read what it needs from the page (goal or elements)."""


class MiniWoB(Environment):
    """MiniWoB++ tasks in BrowserGym; see the module docstring."""

    name = "miniwob"
    reference_policy = "scripted optimal policy per task (reads the goal and the accessibility tree)"
    deterministic = True  # a seed fixes the instance; tested: restore gives the same text and pixels

    NUM_CANDIDATES = 4
    """Candidates per dataset state: the actor's action and three others (fewer if the state has fewer)."""

    def __init__(
        self,
        task_names: Sequence[str] = TASK_NAMES,
        seeds: Sequence[int] = range(10),
        horizon: int = 12,
        goal_banner: bool = False,
        name_as_task_type: bool = False,
        lean: bool = True,
    ) -> None:
        """``goal_banner``: draw the goal above the screenshot in :meth:`observation_image`
        (:func:`draw_goal_banner`; off for the datasets built before it).  ``name_as_task_type``: record
        each state's MiniWoB task name as its task type (:meth:`task_type`; off for the datasets built
        before it, whose states name none).  ``lean`` (default): BrowserGym runs without its chat page and
        takes a screenshot only when :meth:`screenshot` asks for one (the same page, each reset about 1.3 s
        and each step 0.2 s sooner); ``False``: BrowserGym's own chat page and a screenshot at every reset
        and step (what ``benchmarks/labelling.py`` compares with)."""
        super().__init__(horizon)
        self.lean = lean
        unknown = [n for n in task_names if n not in _POLICIES]
        if unknown:
            raise ValueError(f"no scripted policy for MiniWoB task(s) {unknown}; choose from {sorted(_POLICIES)}")
        if not task_names or not seeds:
            raise ValueError("need at least one task name and one seed")
        self.task_names = tuple(task_names)
        self.seeds = tuple(int(s) for s in seeds)
        self.goal_banner = goal_banner
        self.name_as_task_type = name_as_task_type
        self._task_ids = tuple(f"{name}:{seed}" for seed in self.seeds for name in self.task_names)
        self._hidden_seeds: dict[str, int | None] = {}
        self._url = miniwob_url()
        self._classes = {
            cls.subdomain: cls
            for cls in vars(miniwob_tasks).values()
            if isinstance(cls, type) and getattr(cls, "subdomain", None) in self.task_names
        }
        self._browser_env: BrowserEnv | None = None
        self._obs: dict[str, Any] = {}
        self._elements: list[Element] = []
        self._candidates: list[str] | None = None
        self._actions = HighLevelActionSet(subsets=["bid"], multiaction=False, strict=True)

    # -- Environment -------------------------------------------------------------------
    @property
    def tasks(self) -> Sequence[str]:
        return self._task_ids

    def config(self) -> dict[str, Any]:
        config = self._config()
        if self.goal_banner:  # absent otherwise, so older datasets keep their fingerprints
            config["observation_image"] = (
                "a white banner with 'Goal: ' and the goal (wrapped, default font at "
                f"{BANNER_FONT_SIZE} px) above the screenshot with set-of-marks boxes and ids on visible interactive "
                "elements (BrowserGym empties MiniWoB's query area, so the screenshot alone never shows the goal)"
            )
        if self.name_as_task_type:  # absent otherwise, so older datasets keep their fingerprints
            config["task_type"] = "the MiniWoB task name (the part of the task id before ':')"
        if self.hidden:  # absent otherwise, so older datasets keep their fingerprints
            config["hidden_tasks"] = (
                "task ids '{miniwob task}:hidden-{position}' replace the listed seed at that position: BrowserGym "
                "reset(seed) with a seed derived from the maintainer's secret (below 2**31)"
            )
        return config

    def hide_tasks(self, seeds: dict[str, int | None]) -> None:
        """Rename each task in ``seeds`` to ``{name}:hidden-{position}`` and play it with that seed (mod 2**31)."""
        unknown = set(seeds) - set(self._task_ids)
        if unknown:
            raise KeyError(f"unknown tasks {sorted(unknown)}")
        ids = list(self._task_ids)
        for j, task in enumerate(ids):
            if task in seeds:
                ids[j] = f"{_split_task(task)[0]}:hidden-{j}"
                seed = seeds[task]
                self._hidden_seeds[ids[j]] = None if seed is None else seed % 2**31
        self._task_ids = tuple(ids)
        self.hidden = frozenset(self._hidden_seeds)

    def _config(self) -> dict[str, Any]:
        return {
            "browsergym_version": version("browsergym-core"),
            "browsergym_miniwob_version": version("browsergym-miniwob"),
            "miniwob_version": version("miniwob"),
            "playwright_version": version("playwright"),
            "chromium": "Debian chromium (headless), kept alive across resets, fresh context per reset",
            "task_names": list(self.task_names),
            "seeds": list(self.seeds),
            "task_id": "'{miniwob task}:{seed}', BrowserGym reset(seed=seed); listed seed-major",
            "horizon": self.horizon,
            "reward": "1 when MiniWoB's raw reward is positive (BrowserGym), else 0; submit ends the episode",
            "slow_mo_ms": 0,
            "locale": BROWSER_LOCALE,
            "timezone_id": BROWSER_TIMEZONE,
            "pre_observation_delay_s": 0,
            "action_timeout_ms": ACTION_TIMEOUT_MS,
            "action_set": "BrowserGym HighLevelActionSet(subsets=['bid']): click and fill candidates",
            "candidates": "click on visible set-of-marks elements; fill of visible text boxes, spin buttons and date "
            "fields with the goal's quoted strings and the reference fill text",
            "dataset_candidates": f"the actor's action and {self.NUM_CANDIDATES - 1} others drawn uniformly",
            "observation_text": "Goal line + BrowserGym flatten_axtree_to_str (ignored roles LineBreak, "
            "InlineTextBox; url properties dropped)",
            "observation_image": "screenshot with set-of-marks boxes and ids on visible interactive elements",
            "restore": "reset(seed) + replay of the action history",
        }

    def _reset(self, task: str) -> None:
        name, seed = _split_task(task)
        if task in self._hidden_seeds:
            hidden = self._hidden_seeds[task]
            if hidden is None:
                raise RuntimeError(f"task {task} is drawn from the test-split secret, which this build lacks")
            seed = hidden
        if self._browser_env is None:
            install_shared_chromium()
            self._browser_env = BrowserEnv(
                task_entrypoint=self._classes[name],
                task_kwargs={"base_url": self._url},
                headless=True,
                slow_mo=0,
                timeout=ACTION_TIMEOUT_MS,
                pre_observation_delay=0,
                action_mapping=None,  # set at each step (_browser_step)
                locale=BROWSER_LOCALE,
                timezone_id=BROWSER_TIMEZONE,
            )
        # One BrowserEnv for every task: its reset closes the previous page, and a single live
        # page matters (BrowserGym measures visibility with rendering that other pages disturb).
        browser_env = self._browser_env
        browser_env.task_entrypoint = self._classes[name]
        for attempt in range(1, RESET_TRIES + 1):
            try:
                obs, _ = self._browser_call(lambda: browser_env.reset(seed=seed))
                break
            except playwright.sync_api.TimeoutError:
                if attempt == RESET_TRIES:
                    raise
                log.warning("%s: the page of seed %s did not load in %d ms; reset again", task, seed, ACTION_TIMEOUT_MS)
        self._set_obs(obs)

    def _step(self, action: str) -> tuple[float, bool]:
        """BrowserGym's step; an action that timed out before Playwright ever found its element unable to take
        it is tried once more, from a restore of the state before it, with :data:`PATIENT_ACTION_TIMEOUT_MS`, and
        that outcome stands.

        BrowserGym reports a failed action only in ``last_action_error`` (``TimeoutError: Locator.click: Timeout
        500ms exceeded.`` and Playwright's call log) and goes on as after a no-op.  An action on a covered or disabled
        element times out after Playwright has retried it (``retrying click action, attempt #1``: a no-op, whatever
        the load); on a machine too loaded to finish an action in 500 ms, any action times out without a retry, the
        click sometimes already dispatched.  The restore makes the second try start from the same page, and its
        longer timeout makes the outcome, and so the labels, the same as on an idle machine."""
        obs, reward, terminated, truncated, _ = self._browser_step(action, BROWSERGYM_ACTION_TIMEOUT_MS)
        error = obs["last_action_error"]
        if error.startswith("TimeoutError:") and not PLAYWRIGHT_RETRY.search(error):
            log.info("%s: %s timed out after %s; trying it again with %d ms", self.task, action, list(self.history),
                     PATIENT_ACTION_TIMEOUT_MS)
            self.restore(self.snapshot())
            obs, reward, terminated, truncated, _ = self._browser_step(action, PATIENT_ACTION_TIMEOUT_MS)
        self._set_obs(obs)
        return float(reward), bool(terminated or truncated)

    def observation(self) -> str:
        tree = flatten_axtree_to_str(
            self._obs["axtree_object"], ignored_roles=list(IGNORED_ROLES), ignored_properties=IGNORED_PROPERTIES
        )
        return f"Goal: {self.goal}\n\n{tree}"

    def instance(self) -> str:
        """The goal, the first line of every observation."""
        return self.goal

    def task_type(self, task: str) -> str | None:
        """With ``name_as_task_type``: the MiniWoB task name of ``task`` (else ``None``, one kind)."""
        return _split_task(task)[0] if self.name_as_task_type else None

    def candidates(self) -> list[str]:
        if self._candidates is None:
            self._candidates = self._enumerate_candidates()
        return list(self._candidates)

    def reference_action(self) -> str:
        name, _ = _split_task(self.task)
        return _POLICIES[name](self)

    def sample_candidates(self, actor_action: str, rng: random.Random) -> list[str]:
        """The actor's action and :attr:`NUM_CANDIDATES` − 1 other candidates drawn by ``rng``, in candidate order."""
        everything = self.candidates()
        others = [a for a in everything if a != actor_action]
        picked = set(rng.sample(others, min(self.NUM_CANDIDATES - 1, len(others)))) | {actor_action}
        return [a for a in everything if a in picked]

    # -- MiniWoB-specific --------------------------------------------------------------
    @property
    def goal(self) -> str:
        """The task's instruction in the current episode."""
        return str(self._obs["goal"])

    @property
    def elements(self) -> list[Element]:
        """The accessibility-tree elements of the current state."""
        return list(self._elements)

    def screenshot(self) -> np.ndarray:
        """The raw screenshot of the current state (H×W×3 uint8); a lean episode takes it on the first call."""
        if self._obs["screenshot"] is None:
            self._obs["screenshot"] = still_screenshot(self._live_env().page)
        return np.asarray(self._obs["screenshot"])

    def observation_image(self) -> Image.Image:
        """The image observation: the screenshot with set-of-marks boxes and element ids, below the
        goal banner when the adapter has ``goal_banner``."""
        image = draw_set_of_marks(self.screenshot(), self._elements)
        return draw_goal_banner(image, self.goal) if self.goal_banner else image

    def subtree_text(self, bid: str) -> str:
        """The ``StaticText`` under the element ``bid`` in the accessibility tree, joined by spaces."""
        nodes = self._obs["axtree_object"]["nodes"]
        by_id = {node["nodeId"]: node for node in nodes}
        start = next((node for node in nodes if node.get("browsergym_id") == bid), None)
        if start is None:
            raise PolicyError(f"{self.task}: no element {bid!r} in the accessibility tree")
        texts: list[str] = []
        stack = [start]
        while stack:
            node = stack.pop()
            if node.get("role", {}).get("value") == "StaticText":
                texts.append(str(node.get("name", {}).get("value", "")))
            stack.extend(by_id[c] for c in reversed(node.get("childIds", [])) if c in by_id)
        return " ".join(texts)

    def field_value(self, bid: str) -> str:
        """The current value of the input ``bid`` in the page (unmasked, unlike the tree's password boxes)."""
        return self._live_env().page.get_by_test_id(bid).input_value(timeout=ACTION_TIMEOUT_MS)

    def label_text(self, bid: str) -> str:
        """The text of the nearest ancestor of the element ``bid`` that has any: the label of a form field
        whose label is a sibling element rather than a ``<label>`` (multi-orderings, multi-layouts)."""
        return str(self.evaluate(
            """bid => { let node = document.querySelector(`[bid="${bid}"]`);
                 while (node && !node.textContent.trim()) node = node.parentElement;
                 return node ? node.textContent.trim() : ''; }""",
            bid,
        ))

    def evaluate(self, script: str, arg: Any = None) -> Any:
        """The value of the JavaScript function ``script`` called with ``arg`` in the page: what a policy
        reads of the DOM that the accessibility tree does not show (hidden tab panels, labels)."""
        return self._live_env().page.evaluate(script, arg)

    def close(self) -> None:
        """Close the BrowserGym environment, the shared browsers and Playwright (:func:`shutdown_shared_chromium`)."""
        if self._browser_env is not None:
            try:
                self._browser_env.close()
            except playwright.sync_api.Error as exc:  # a page, context or browser already gone: nothing to close
                log.warning("closing BrowserGym's environment: %s", exc)
            self._browser_env = None
        shutdown_shared_chromium()

    # -- helpers -----------------------------------------------------------------------
    def _live_env(self) -> BrowserEnv:
        if self._browser_env is None or self._browser_env.page is None:
            raise RuntimeError("no live MiniWoB episode: call reset() first")
        return self._browser_env

    def _browser_call(self, call: Callable[[], Any]) -> Any:
        """``call()`` (a BrowserGym reset or step), lean (:func:`_chat`, :func:`_screenshot`) when :attr:`lean`."""
        _lean.on = self.lean
        try:
            return call()
        finally:
            _lean.on = False

    def _browser_step(self, action: str, timeout_ms: int) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """BrowserGym's step of ``action`` with its Playwright timeouts set to ``timeout_ms``."""
        browser_env = self._live_env()
        browser_env.action_mapping = lambda a: self._action_code(a, timeout_ms)
        return self._browser_call(lambda: browser_env.step(action))

    def _action_code(self, action: str, timeout_ms: int) -> str:
        """BrowserGym's Python code of ``action``, every ``timeout=500`` of its functions made ``timeout_ms``."""
        code = self._actions.to_python_code(action)
        written = f"timeout={BROWSERGYM_ACTION_TIMEOUT_MS})"
        if written not in code:
            raise RuntimeError(f"BrowserGym's action functions no longer pass {written}: check the action timeouts")
        return code.replace(written, f"timeout={timeout_ms})")

    def _set_obs(self, obs: dict[str, Any]) -> None:
        self._obs = obs
        self._elements = parse_elements(obs)
        self._candidates = None

    def _enumerate_candidates(self) -> list[str]:
        texts = _quoted(self.goal)
        reference = self.reference_action()
        match = re.fullmatch(r"fill\('[^']*', (.*)\)", reference)
        if match:
            texts.append(_literal(match.group(1)))
        fill_texts = list(dict.fromkeys(texts))
        actions: list[str] = []
        for el in self._elements:
            if el.visible and el.marked:
                actions.append(action_text("click", el.bid))
                if el.role in FILL_ROLES:
                    actions += [action_text("fill", el.bid, t) for t in fill_texts]
        actions = list(dict.fromkeys(actions))
        if reference not in actions:
            raise PolicyError(f"{self.task}: reference action {reference!r} is not among the candidates {actions}")
        return actions

    def _find(self, role: str, name: str | None = None) -> Element:
        for el in self._elements:
            if el.role == role and el.visible and (name is None or el.name == name):
                return el
        raise PolicyError(f"{self.task}: no visible {role} {name!r} in the accessibility tree")

    def _all(self, role: str) -> list[Element]:
        return [el for el in self._elements if el.role == role and el.visible]

    def _row_cells(self, row_bid: str) -> list[Element]:
        """The ``cell`` elements of the table row ``row_bid``, in order."""
        nodes = self._obs["axtree_object"]["nodes"]
        by_id = {node["nodeId"]: node for node in nodes}
        row = next((node for node in nodes if node.get("browsergym_id") == row_bid), None)
        if row is None:
            raise PolicyError(f"{self.task}: no row {row_bid!r} in the accessibility tree")
        bids = [by_id[c].get("browsergym_id") for c in row.get("childIds", []) if c in by_id]
        return [el for el in self._elements if el.bid in bids and el.role == "cell"]

    def _goal_match(self, pattern: str) -> re.Match[str]:
        match = re.search(pattern, self.goal)
        if match is None:
            raise PolicyError(f"{self.task}: goal {self.goal!r} does not match {pattern!r}")
        return match


def _split_task(task: str) -> tuple[str, int]:
    """``(MiniWoB task name, seed)`` of a task id; a hidden id's seed part is ``-1`` (its seed is secret)."""
    name, _, seed = task.rpartition(":")
    return name, -1 if seed.startswith("hidden-") else int(seed)


def _quoted(text: str) -> list[str]:
    return re.findall(r'"([^"]*)"', text)


def _literal(python_string: str) -> str:
    value = ast.literal_eval(python_string)
    if not isinstance(value, str):
        raise PolicyError(f"expected a string literal, got {python_string!r}")
    return value


# -- scripted optimal policies -------------------------------------------------------------
def _fill_then_submit(env: MiniWoB, fields: Sequence[tuple[Element, str]], submit: str) -> str:
    """Fill the first field whose value differs from its target, else click the button ``submit``."""
    for field, text in fields:
        if env.field_value(field.bid) != text:
            return action_text("fill", field.bid, text)
    return action_text("click", env._find("button", submit).bid)


def _enter_text(env: MiniWoB) -> str:
    text = env._goal_match(r'Enter "(.*)" into the text field').group(1)
    return _fill_then_submit(env, [(env._find("textbox"), text)], "Submit")


def _enter_text_2(env: MiniWoB) -> str:
    text, case = env._goal_match(r'Type "(.*)" in all (upper|lower) case letters').groups()
    target = text.upper() if case == "upper" else text.lower()
    return _fill_then_submit(env, [(env._find("textbox"), target)], "Submit")


def _login_fields(env: MiniWoB) -> list[tuple[Element, str]]:
    """The username and password boxes of a login form with the goal's texts."""
    user, password = env._goal_match(r'username "(.*)" and the password "(.*)" into').groups()
    boxes = env._all("textbox")
    if len(boxes) < 2:
        raise PolicyError(f"{env.task}: expected username and password boxes, found {len(boxes)}")
    return [(boxes[0], user), (boxes[1], password)]


def _login_user(env: MiniWoB) -> str:
    return _fill_then_submit(env, _login_fields(env), "Login")


def _enter_password(env: MiniWoB) -> str:
    password = env._goal_match(r'Enter the password "(.*)" into both').group(1)
    boxes = env._all("textbox")
    if len(boxes) < 2:
        raise PolicyError(f"{env.task}: expected two password boxes, found {len(boxes)}")
    return _fill_then_submit(env, [(boxes[0], password), (boxes[1], password)], "Submit")


def _click_checkboxes(env: MiniWoB) -> str:
    wanted = env._goal_match(r"Select (.*) and click Submit").group(1)
    want = set() if wanted == "nothing" else {w.strip() for w in wanted.split(",")}
    for box in env._all("checkbox"):
        if box.checked != (box.name in want):
            return action_text("click", box.bid)
    return action_text("click", env._find("button", "Submit").bid)


def _click_option(env: MiniWoB) -> str:
    target = env._goal_match(r"Select (.*) and click Submit").group(1).strip()
    radio = env._find("radio", target)
    if not radio.checked:
        return action_text("click", radio.bid)
    return action_text("click", env._find("button", "Submit").bid)


def _use_spinner(env: MiniWoB) -> str:
    target = env._goal_match(r"Select (-?\d+) with the spinner").group(1)
    return _fill_then_submit(env, [(env._find("spinbutton"), target)], "Submit")


def _click_button_sequence(env: MiniWoB) -> str:
    env._goal_match(r"Click button ONE, then click button TWO")
    one = env._find("button", "ONE")
    if action_text("click", one.bid) not in env.history:
        return action_text("click", one.bid)
    return action_text("click", env._find("button", "TWO").bid)


def _find_word(env: MiniWoB) -> str:
    position = int(env._goal_match(r"Find the (\d+)(?:st|nd|rd|th) word in the paragraph").group(1))
    words = env.subtree_text(env._find("paragraph").bid).split()
    if not 1 <= position <= len(words):
        raise PolicyError(f"{env.task}: the paragraph has {len(words)} words, the goal asks for word {position}")
    word = re.sub(r"[^a-zA-Z0-9]", "", words[position - 1])
    return _fill_then_submit(env, [(env._find("textbox"), word)], "Submit")


def _enter_date(env: MiniWoB) -> str:
    month, day, year = env._goal_match(r"Enter (\d\d)/(\d\d)/(\d{4}) as the date").groups()
    return _fill_then_submit(env, [(env._find("Date"), f"{year}-{month}-{day}")], "Submit")


def _read_table_2(env: MiniWoB) -> str:
    env._goal_match(r"Enter the value that corresponds with each label into the form")
    table: dict[str, str] = {}
    for row in env._all("row"):
        cells = [env.subtree_text(c.bid).strip() for c in env._row_cells(row.bid)]
        if len(cells) == 2:
            table[cells[0]] = cells[1]
    labels = [env.subtree_text(el.bid).strip().rstrip(":") for el in env._all("LabelText")]
    boxes = env._all("textbox")
    if len(labels) != len(boxes) or any(label not in table for label in labels):
        raise PolicyError(f"{env.task}: form labels {labels} do not match the table {sorted(table)} and {len(boxes)} boxes")
    return _fill_then_submit(env, [(box, table[label]) for box, label in zip(boxes, labels)], "Submit")


def _form_sequence_2(env: MiniWoB) -> str:
    radio, number, box = env._goal_match(
        r'Check the (\d)(?:st|nd|rd|th) radio button and enter the number "(-?\d+)" into the (\d)(?:st|nd|rd|th) textbox'
    ).groups()
    radios, boxes = env._all("radio"), env._all("textbox")
    if not (int(radio) <= len(radios) and int(box) <= len(boxes)):
        raise PolicyError(f"{env.task}: {len(radios)} radio buttons and {len(boxes)} text boxes for goal {env.goal!r}")
    target = radios[int(radio) - 1]
    if not target.checked:
        return action_text("click", target.bid)
    fields = [(b, number if k == int(box) else "") for k, b in enumerate(boxes, start=1)]
    return _fill_then_submit(env, fields, "Submit")


MOVIE_FIELDS: tuple[tuple[str, str], ...] = (("genre", "Genre"), ("director", "Director"), ("year", "Year"), ("year", "Date"))
"""multi-orderings / multi-layouts: the movie-search field a box's label names (first match wins)."""


def _movie_search(env: MiniWoB) -> str:
    genre, director, year = env._goal_match(r"Search for (.*) movies directed by (.*) from year (\d{4})").groups()
    wanted = {"genre": genre, "director": director, "year": year}
    fields: list[tuple[Element, str]] = []
    for box in env._all("textbox"):
        label = env.label_text(box.bid)
        field = next((key for key, word in MOVIE_FIELDS if word in label), None)
        if field is None:
            raise PolicyError(f"{env.task}: text box {box.bid} has the label {label!r}, no movie-search field")
        fields.append((box, wanted[field]))
    for box, text in fields:
        if env.field_value(box.bid) != text:
            return action_text("fill", box.bid, text)
    submit = [el for el in env._elements if el.visible and el.marked and el.role != "textbox"]
    if len(submit) != 1:
        raise PolicyError(f"{env.task}: expected one submit element besides the text boxes, found {len(submit)}")
    return action_text("click", submit[0].bid)


def _click_tab_2(env: MiniWoB) -> str:
    """click-tab-2 and click-tab-2-hard: click the link if its tab is open, else the tab that holds it."""
    word = env._goal_match(r'Switch between the tabs to find and click on the link "(.*)"').group(1)
    for el in env._elements:
        if el.visible and el.marked and el.role == "generic" and env.subtree_text(el.bid).strip() == word:
            return action_text("click", el.bid)
    tab = env.evaluate(
        """word => { for (const panel of document.querySelectorAll('#area > div[id^="tabs-"]'))
             for (const link of panel.querySelectorAll('.alink'))
               if (link.textContent === word) {
                 const tab = document.querySelector(`a[href="#${panel.id}"]`);
                 return tab ? tab.getAttribute('bid') : null; }
             return null; }""",
        word,
    )
    if tab is None:
        raise PolicyError(f"{env.task}: no tab holds the link {word!r}")
    return action_text("click", tab)


def _login_user_popup(env: MiniWoB) -> str:
    popup = [el for el in env._all("button") if el.name == "Cancel" and el.marked]
    if popup:  # the session popup: Cancel closes it and enables the form again (its OK ends the episode)
        return action_text("click", popup[0].bid)
    return _fill_then_submit(env, _login_fields(env), "OK")


def _enter_time(env: MiniWoB) -> str:
    hour, minute, half = env._goal_match(r"Enter (\d{1,2}):(\d\d) (AM|PM) as the time").groups()
    hours = int(hour) % 12 + (12 if half == "PM" else 0)
    return _fill_then_submit(env, [(env._find("InputTime"), f"{hours:02d}:{minute}")], "Submit")


_POLICIES: dict[str, Callable[[MiniWoB], str]] = {
    "enter-text": _enter_text,
    "enter-text-2": _enter_text_2,
    "login-user": _login_user,
    "enter-password": _enter_password,
    "click-checkboxes": _click_checkboxes,
    "click-option": _click_option,
    "use-spinner": _use_spinner,
    "click-button-sequence": _click_button_sequence,
    "find-word": _find_word,
    "enter-date": _enter_date,
    "enter-text-dynamic": _enter_text,
    "read-table-2": _read_table_2,
    "form-sequence-2": _form_sequence_2,
    "multi-orderings": _movie_search,
    "multi-layouts": _movie_search,
    "click-tab-2": _click_tab_2,
    "click-tab-2-hard": _click_tab_2,
    "login-user-popup": _login_user_popup,
    "enter-time": _enter_time,
}
"""MiniWoB task name → its scripted optimal policy (the next action in the adapter's current state)."""
