"""State colours from the current Textual theme, readable on every row.

The cockpit writes its colours as words (`bold red` for a stopped task, `yellow` for waiting, see
format.py). The rows are Rich renderables drawn with the app's console, and a Rich style name is
looked up in the console's theme before it is parsed as a colour: so one Rich theme pushed on that
console gives each word the Textual theme's colour for its meaning ($error, $warning, $success,
$primary, $secondary; blue is $primary and $success mixed), with no widget knowing. Each colour is
then made lighter or darker, keeping its hue, until it has a WCAG contrast of at least 3 against
every background a row can have (the panel, the focused panel, the cursor row focused and not) — a
theme's own $warning on a light surface often has less.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.style import Style
from rich.theme import Theme
from textual.color import Color, ColorParseError

if TYPE_CHECKING:
    from rich.console import Console

# the colour words the cockpit writes, and the theme variable that means the same; blue, halfway from
# $primary to $success (a cyan-teal in most themes), is a hue of its own: the timeline draws building
# (blue) beside merging (cyan), and both as $primary could not be told apart
ROLES: dict[str, str | tuple[str, str]] = {"red": "error", "yellow": "warning", "green": "success",
                                           "cyan": "primary", "magenta": "secondary", "blue": ("primary", "success")}
_VARIABLES = sorted({name for role in ROLES.values() for name in ((role,) if isinstance(role, str) else role)})
MIN_CONTRAST = 3.0
_MARGIN = 0.3  # the rendered colours are rounded to 8 bits: aim a little above the floor
# the cursor row's backgrounds, as cockpit.tcss draws them (KeyedTable > .datatable--cursor)
CURSOR_FOCUSED = ("accent", 0.25)
CURSOR_BLURRED = ("foreground", 0.10)
FOCUS_TINT = 0.05  # DataTable:focus { background-tint: $foreground 5% }


def luminance(c: Color) -> float:
    def channel(v: int) -> float:
        x = v / 255
        return x / 12.92 if x <= 0.04045 else ((x + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(c.r) + 0.7152 * channel(c.g) + 0.0722 * channel(c.b)


def contrast(a: Color, b: Color) -> float:
    """The WCAG contrast ratio of two colours (1 to 21)."""
    lo, hi = sorted((luminance(a), luminance(b)))
    return (hi + 0.05) / (lo + 0.05)


def backgrounds(variables: dict[str, str]) -> list[Color]:
    """Every background a table row is drawn on under these theme variables."""
    surface = Color.parse(variables["surface"])
    fg = Color.parse(variables["foreground"])
    out = []
    for base in (surface, surface.blend(fg, FOCUS_TINT)):
        out.append(base)
        for var, alpha in (CURSOR_FOCUSED, CURSOR_BLURRED):
            out.append(base.blend(Color.parse(variables[var]), alpha))
    return out


def readable(colour: Color, grounds: list[Color], floor: float = MIN_CONTRAST + _MARGIN) -> Color:
    """`colour`, made lighter or darker (its hue kept) until it stands out on every ground."""
    def worst(c: Color) -> float:
        return min(contrast(c, g) for g in grounds)

    if worst(colour) >= floor:
        return colour
    dark = sum(luminance(g) for g in grounds) / len(grounds) < 0.18
    directions = (colour.lighten, colour.darken) if dark else (colour.darken, colour.lighten)
    best = colour
    for move in directions:
        for step in range(1, 21):
            candidate = move(step / 20)
            if worst(candidate) >= floor:
                return candidate
            if worst(candidate) > worst(best):
                best = candidate
    return best


def role_colour(variables: dict[str, str], role: str | tuple[str, str]) -> Color:
    """A ROLES entry's colour under these theme variables: the variable's, or halfway between two."""
    if isinstance(role, str):
        return Color.parse(variables[role])
    first, second = role
    return Color.parse(variables[first]).blend(Color.parse(variables[second]), 0.5)


def rich_theme(variables: dict[str, str]) -> Theme | None:
    """The colour words as this Textual theme's colours; None for a theme whose colours are the
    terminal's own (ansi-dark, ansi-light: nothing to compute, the terminal's palette applies)."""
    try:
        # Textual parses `ansi_blue` (to a stand-in it lightens, darkens and mixes into other hues:
        # cyan came out pink and blue green), so a theme of the terminal's colours is told by them
        if any(Color.parse(variables[name]).ansi is not None for name in ("foreground", "surface", *_VARIABLES)):
            return None
        grounds = backgrounds(variables)
        colours = {word: readable(role_colour(variables, role), grounds) for word, role in ROLES.items()}
    except (ColorParseError, KeyError):
        return None
    styles: dict[str, Style] = {}
    for word, colour in colours.items():
        rich = colour.rich_color
        styles[word] = Style(color=rich)
        styles[f"bold {word}"] = styles[f"{word} bold"] = Style(color=rich, bold=True)
    return Theme(styles, inherit=True)


def apply(console: Console, variables: dict[str, str], pushed: bool) -> bool:
    """Push these theme variables' colours on the console, in place of the last ones if `pushed`;
    returns whether colours of the palette are on the console now."""
    if pushed:
        console.pop_theme()
    theme = rich_theme(variables)
    if theme is not None:
        console.push_theme(theme)
    return theme is not None
