"""ALFWorld's image observation: a schematic render of the simulator state, not THOR's egocentric camera.

The QVal paper's ALFWorld images are AI2-THOR's first-person renders; THOR cannot run here, so
:class:`~qval.envs.alfworld.adapter.ALFWorld` draws what the text engine's PDDL facts say the agent perceives:

* :func:`view_of` reads the facts into a :class:`View` — the task line, the room's receptacles, the
  receptacle(s) at the agent's location with their open/closed state and, when their inside can be
  seen (not openable, or opened), the objects in or on them, and what the agent holds; each object
  with the states ALFWorld's ``examine`` reports (hot, cold, clean, sliced; a toggleable object on
  or off, on being the engine's ``istoggled``, as ``examine`` says).
* :func:`render_view` draws a :class:`View` as a 512×512 RGB picture with PIL only (Pillow's
  bundled font): the task line on top; the "view" of the current location (a closed receptacle is a
  shut door and nothing of its contents, an open one shows its inside, a surface its objects; "the
  middle of the room" at the start); what the agent holds; a strip of the room's receptacles by
  class and number, the current one highlighted.  A pure function of the view: the same state, the
  same pixels.

What a text agent could not know is never drawn: the contents of a closed receptacle (not even how
many), receptacles other than the current one beyond their names (which the intro lists), whether
the goal holds, the expert's plan.  The facts are read only through these predicates.
"""

from __future__ import annotations

import colorsys
import functools
import math
import zlib
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

from PIL import Image, ImageDraw, ImageFont

IMAGE_SIZE = 512
"""Width and height of the picture, in pixels."""

STATES: tuple[tuple[str, str], ...] = (
    ("ishot", "hot"), ("iscool", "cold"), ("isclean", "clean"), ("issliced", "sliced"))
"""Object predicates drawn as badges, with the word ``examine`` uses, in badge order."""

BADGE_COLORS = {"hot": (214, 62, 40), "cold": (40, 108, 214), "clean": (18, 150, 150), "sliced": (222, 134, 20),
                "on": (214, 170, 0), "off": (110, 110, 110)}

Fact = tuple[str, tuple[str, ...]]
"""A PDDL fact as the engine names it after ALFWorld's demangling: ``("inreceptacle", ("apple 1", "fridge 1"))``."""


@dataclass(frozen=True)
class Item:
    """An object the agent can see or holds: its name in the text (``"apple 1"``) and its examined states."""

    name: str
    states: tuple[str, ...]


@dataclass(frozen=True)
class Place:
    """A receptacle at the agent's location; ``items`` is empty when its inside cannot be seen (closed)."""

    name: str
    openable: bool
    opened: bool
    items: tuple[Item, ...]

    @property
    def visible(self) -> bool:
        """Whether its contents can be seen: not openable, or open."""
        return not self.openable or self.opened


@dataclass(frozen=True)
class View:
    """Everything :func:`render_view` draws (equal views give equal pixels: the build's image key)."""

    task: str
    """The task line, as the text observation shows it ("Your task is to: …")."""
    receptacles: tuple[str, ...]
    """Every receptacle of the room (the intro lists them), in natural order."""
    here: tuple[Place, ...]
    """The receptacles at the agent's location (none in the middle of the room)."""
    held: tuple[Item, ...]


def natural_key(name: str) -> tuple[str, int]:
    """``"cabinet 10"`` → ``("cabinet", 10)``: sorts instances by class, then number."""
    word, _, number = name.rpartition(" ")
    return (word, int(number)) if word and number.isdigit() else (name, -1)


def view_of(facts: Iterable[Fact], task: str) -> View:
    """The :class:`View` of the state whose facts are ``facts`` (predicates lower case, demangled names)."""
    by_predicate: dict[str, list[tuple[str, ...]]] = defaultdict(list)
    for predicate, args in facts:
        by_predicate[predicate].append(args)
    unary = {p: {args[0] for args in by_predicate[p]} for p in ("openable", "opened", "toggleable", "istoggled",
                                                                 *(p for p, _ in STATES))}
    agent_at = {args[1] for args in by_predicate["atlocation"]}
    if len(agent_at) != 1:
        raise ValueError(f"the facts place the agent at {len(agent_at)} locations, expected one")
    receptacles = sorted({r for r, _ in by_predicate["receptacleatlocation"]}, key=natural_key)
    contents: dict[str, list[str]] = defaultdict(list)
    for obj, receptacle in by_predicate["inreceptacle"]:
        contents[receptacle].append(obj)

    def item(name: str) -> Item:
        states = [word for predicate, word in STATES if name in unary[predicate]]
        if name in unary["toggleable"]:
            states.append("on" if name in unary["istoggled"] else "off")
        return Item(name, tuple(states))

    here = []
    for receptacle in sorted({r for r, loc in by_predicate["receptacleatlocation"] if loc in agent_at}, key=natural_key):
        openable, opened = receptacle in unary["openable"], receptacle in unary["opened"]
        seen = sorted(contents[receptacle], key=natural_key) if not openable or opened else []
        here.append(Place(receptacle, openable, opened, tuple(item(o) for o in seen)))
    held = sorted({o for _, o in by_predicate["holds"]}, key=natural_key)
    return View(task=task, receptacles=tuple(receptacles), here=tuple(here), held=tuple(item(o) for o in held))


# -- drawing ---------------------------------------------------------------------------------
BACKGROUND = (236, 232, 222)
INK = (34, 34, 40)
MUTED = (128, 124, 116)
BAND = (40, 44, 54)
HIGHLIGHT = (196, 40, 60)


@functools.lru_cache(maxsize=None)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def _class_color(name: str, saturation: float, value: float) -> tuple[int, int, int]:
    """A colour per object or receptacle class (the name without its number), the same in every picture."""
    hue = zlib.crc32(natural_key(name)[0].encode()) % 360 / 360
    r, g, b = colorsys.hsv_to_rgb(hue, saturation, value)
    return round(r * 255), round(g * 255), round(b * 255)


def _darker(color: tuple[int, int, int], factor: float = 0.6) -> tuple[int, int, int]:
    r, g, b = color
    return round(r * factor), round(g * factor), round(b * factor)


def _fit(text: str, font: ImageFont.FreeTypeFont | ImageFont.ImageFont, width: float) -> str:
    """``text``, cut with an ellipsis to fit ``width`` pixels."""
    if font.getlength(text) <= width:
        return text
    while text and font.getlength(text + "…") > width:
        text = text[:-1]
    return text + "…"


def _wrap(text: str, font: ImageFont.FreeTypeFont | ImageFont.ImageFont, width: float, lines: int) -> list[str]:
    """``text`` in at most ``lines`` lines of ``width`` pixels (the last one cut when needed)."""
    out: list[str] = []
    words = text.split()
    while words and len(out) < lines:
        line = words.pop(0)
        while words and font.getlength(f"{line} {words[0]}") <= width:
            line = f"{line} {words.pop(0)}"
        out.append(line)
    if words:
        out[-1] = _fit(f"{out[-1]} {' '.join(words)}", font, width)
    return out


def _token(draw: ImageDraw.ImageDraw, box: tuple[float, float, float, float], item: Item) -> None:
    """An object: a tile in its class colour with its name and state badges (a lit lamp glows yellow)."""
    x0, y0, x1, y1 = box
    lit = "on" in item.states
    fill = (255, 236, 130) if lit else _class_color(item.name, 0.28, 0.97)
    draw.rounded_rectangle(box, radius=6, fill=fill, outline=_darker(_class_color(item.name, 0.5, 0.8)), width=2)
    height = y1 - y0
    icon = min(height - 10, 16)
    cy = y0 + height / 2
    draw.ellipse((x0 + 5, cy - icon / 2, x0 + 5 + icon, cy + icon / 2), fill=_class_color(item.name, 0.75, 0.85),
                 outline=INK)
    if lit:  # rays around the icon
        cx = x0 + 5 + icon / 2
        for k in range(8):
            angle = k * math.pi / 4
            draw.line((cx + math.cos(angle) * icon * 0.6, cy + math.sin(angle) * icon * 0.6,
                       cx + math.cos(angle) * icon * 0.9, cy + math.sin(angle) * icon * 0.9), fill=(200, 140, 0), width=1)
    left = x0 + 10 + icon
    label = _font(12 if height >= 30 else 10)
    if not item.states or height < 26:
        draw.text((left, cy), _fit(item.name, label, x1 - left - 4), font=label, fill=INK, anchor="lm")
        return
    draw.text((left, y0 + 4), _fit(item.name, label, x1 - left - 4), font=label, fill=INK, anchor="lt")
    small = _font(9)
    x = left
    for state in item.states:
        width = small.getlength(state) + 6
        if x + width > x1 - 3:
            break
        draw.rounded_rectangle((x, y1 - 15, x + width, y1 - 4), radius=3, fill=BADGE_COLORS[state])
        draw.text((x + 3, y1 - 9.5), state, font=small, fill=(255, 255, 255), anchor="lm")
        x += width + 3


def _grid(draw: ImageDraw.ImageDraw, items: tuple[Item, ...], area: tuple[float, float, float, float]) -> None:
    """Lay the objects out in rows filling ``area`` (more columns and lower tiles when there are many)."""
    x0, y0, x1, y1 = area
    if not items:
        draw.text(((x0 + x1) / 2, (y0 + y1) / 2), "nothing", font=_font(14), fill=MUTED, anchor="mm")
        return
    gap = 5

    def column_width(columns: int) -> float:
        return (x1 - x0 - gap * (columns - 1)) / columns

    columns = 2 if column_width(2) >= 90 else 1
    while math.ceil(len(items) / columns) * (40 + gap) - gap > y1 - y0 and column_width(columns + 1) >= 90:
        columns += 1
    rows = math.ceil(len(items) / columns)
    width = column_width(columns)
    height = min(44.0, (y1 - y0 - gap * (rows - 1)) / rows)
    for k, item in enumerate(items):
        row, col = divmod(k, columns)
        left, top = x0 + col * (width + gap), y0 + row * (height + gap)
        _token(draw, (left, top, left + width, top + height), item)


def _place(draw: ImageDraw.ImageDraw, place: Place, area: tuple[float, float, float, float]) -> None:
    """A receptacle: a cabinet-like body for an openable one (shut door when closed, its inside when open),
    a counter-like surface otherwise; its name on it."""
    x0, y0, x1, y1 = area
    color = _class_color(place.name, 0.3, 0.82)
    edge = _darker(color, 0.45)
    name = _font(13)
    if not place.openable:
        slab = (x0, y1 - 30, x1, y1)
        draw.rounded_rectangle(slab, radius=4, fill=color, outline=edge, width=2)
        draw.text(((x0 + x1) / 2, y1 - 15), place.name, font=name, fill=INK, anchor="mm")
        _grid(draw, place.items, (x0 + 6, y0 + 4, x1 - 6, y1 - 38))
        return
    door = 0 if not place.opened else min(60.0, (x1 - x0) / 6)
    body = (x0, y0, x1 - door, y1)
    draw.rectangle(body, fill=color, outline=edge, width=3)
    draw.text(((body[0] + body[2]) / 2, y1 - 12), place.name, font=name, fill=INK, anchor="mm")
    inside = (x0 + 10, y0 + 10, x1 - door - 10, y1 - 26)
    if not place.opened:
        draw.rectangle(inside, fill=_darker(color, 0.85), outline=edge, width=2)
        handle_x = inside[2] - 16
        draw.rounded_rectangle((handle_x, (y0 + y1) / 2 - 22, handle_x + 6, (y0 + y1) / 2 + 22), radius=3, fill=edge)
        draw.text(((inside[0] + inside[2]) / 2, (inside[1] + inside[3]) / 2), "closed", font=_font(18),
                  fill=(250, 250, 250), anchor="mm")
        return
    draw.rectangle(inside, fill=(250, 248, 240), outline=edge, width=2)
    hinge = body[2]
    draw.polygon([(hinge, y0), (hinge + door, y0 + 18), (hinge + door, y1 - 18), (hinge, y1)],
                 fill=_darker(color, 0.85), outline=edge)
    _grid(draw, place.items, (inside[0] + 6, inside[1] + 6, inside[2] - 6, inside[3] - 6))


def _strip(draw: ImageDraw.ImageDraw, view: View, area: tuple[float, float, float, float]) -> None:
    """The room's receptacles grouped by class: the class name, then a numbered box per instance, the
    current one(s) filled; wrapped over lines, smaller when the room has many."""
    here = {p.name for p in view.here}
    groups: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for name in view.receptacles:
        word, number = natural_key(name)
        groups[word].append((name, str(number) if number >= 0 else ""))
    x0, y0, x1, y1 = area
    for box, size in ((20, 11), (17, 10), (15, 9), (13, 8)):
        label, digits = _font(size), _font(size - 1)
        placed: list[tuple[str, float, float, str, str]] = []  # kind, x, y, text, receptacle name
        x, y = x0, y0
        for word, members in groups.items():
            for k, (name, number) in enumerate(members):
                width = box + 4
                lead = label.getlength(word) + 6 if k == 0 else 0.0
                if x + lead + width > x1 and x > x0:
                    x, y = x0, y + box + 3
                if k == 0:
                    placed.append(("label", x, y, word, ""))
                    x += lead
                placed.append(("box", x, y, number, name))
                x += width
            x += 8
        if y + box <= y1:
            break
    for kind, x, y, text, name in placed:
        if kind == "label":
            draw.text((x, y + box / 2), text, font=label, fill=INK, anchor="lm")
            continue
        current = name in here
        draw.rectangle((x, y, x + box, y + box), fill=HIGHLIGHT if current else _class_color(name, 0.22, 0.96),
                       outline=_darker(HIGHLIGHT) if current else MUTED, width=2 if current else 1)
        draw.text((x + box / 2, y + box / 2), text, font=digits, fill=(255, 255, 255) if current else INK, anchor="mm")


def render_view(view: View) -> Image.Image:
    """The :data:`IMAGE_SIZE`×:data:`IMAGE_SIZE` RGB picture of ``view``; see the module docstring."""
    image = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), BACKGROUND)
    draw = ImageDraw.Draw(image)
    # the task line
    draw.rectangle((0, 0, IMAGE_SIZE, 50), fill=BAND)
    for k, line in enumerate(_wrap(view.task, _font(15), IMAGE_SIZE - 20, 2)):
        draw.text((10, 7 + 19 * k), line, font=_font(15), fill=(255, 255, 255), anchor="lt")
    # the current location
    view_area = (12, 58, IMAGE_SIZE - 12, 352)
    draw.rectangle(view_area, fill=(222, 216, 204), outline=MUTED)
    floor = view_area[3] - 40
    draw.rectangle((view_area[0] + 1, floor, view_area[2] - 1, view_area[3] - 1), fill=(200, 188, 168))
    if not view.here:
        cx = (view_area[0] + view_area[2]) / 2
        for k in range(-4, 5):  # floor boards vanishing to the middle
            draw.line((cx + k * 30, floor, cx + k * 58, view_area[3] - 1), fill=(176, 162, 140))
        draw.text((cx, (view_area[1] + floor) / 2), "in the middle of the room", font=_font(18), fill=MUTED, anchor="mm")
    else:
        heading = "at " + ", ".join(
            p.name + (" (open)" if p.openable and p.opened else " (closed)" if p.openable else "") for p in view.here)
        draw.text((view_area[0] + 8, view_area[1] + 6), _fit(heading, _font(13), view_area[2] - view_area[0] - 16),
                  font=_font(13), fill=INK, anchor="lt")
        count = len(view.here)
        width = (view_area[2] - view_area[0] - 16 - 8 * (count - 1)) / count
        for k, place in enumerate(view.here):
            left = view_area[0] + 8 + k * (width + 8)
            _place(draw, place, (left, view_area[1] + 26, left + width, view_area[3] - 8))
    # what the agent holds
    draw.text((12, 374), "holding", font=_font(13), fill=INK, anchor="lm")
    if view.held:
        width = (IMAGE_SIZE - 12 - 76 - 6 * (len(view.held) - 1)) / len(view.held)
        for k, item in enumerate(view.held):
            left = 76 + k * (width + 6)
            _token(draw, (left, 358, left + min(width, 200), 390), item)
    else:
        draw.text((76, 374), "nothing", font=_font(13), fill=MUTED, anchor="lm")
    # the room's receptacles
    draw.line((12, 398, IMAGE_SIZE - 12, 398), fill=MUTED)
    _strip(draw, view, (12, 404, IMAGE_SIZE - 12, IMAGE_SIZE - 6))
    return image
