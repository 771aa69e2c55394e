"""A DataTable whose rows are keyed by domain ids and updated in place.

Columns have fixed widths except the `flex` ones, which share what the panel has left — so the
same table reads well at 80 and at 200 columns. A row that already exists is updated cell by
cell (`update_cell`); only a change in the set or order of rows rebuilds the table.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.cache import LRUCache
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowDoesNotExist, RowKey

Cell = str | Text


@dataclass(frozen=True)
class Col:
    key: str
    label: str
    width: int = 8        # fixed width, or the minimum of a flex column
    flex: int = 0         # share of the spare room (0: fixed)
    wide_only: bool = False  # dropped below WIDE columns
    fit: bool = False  # a name: takes the spare room its longest cell needs before the flex share
    wide: int = 0  # the fixed width from WIDE columns on, when it differs


WIDE = 110


class KeyedTable(DataTable[Cell]):
    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False, id="nav.down"),
        Binding("k", "cursor_up", "Up", show=False, id="nav.up"),
    ]
    COLUMNS: tuple[Col, ...] = ()

    def __init__(self, **kwargs: Any) -> None:
        # "renderable": a state cell keeps its colour on the cursor row (a red `stopped` stays red)
        super().__init__(cursor_type="row", zebra_stripes=False, cursor_foreground_priority="renderable",
                         **kwargs)
        self._rows: list[tuple[str, dict[str, Cell]]] = []
        self._layout: tuple[tuple[str, int], ...] = ()
        self.filter_text = ""
        self._styles_checked = True
        self._styles_seen: dict[Any, tuple[Style, ...]] = {}  # pseudo-class state → the styles drawn in it

    # --- focus without a redraw of every cell ---------------------------------------------------

    def notify_style_update(self) -> None:
        """DataTable forgets every rendered cell on any style update, and focus moving in or out is
        one: each panel jump rendered the visible cells of both panels again through Rich (most of
        its frame, 4-6x a j/k under load). The cell and row caches are keyed by the pseudo-class
        state (focus among it) already, so they are kept here, and dropped in render_lines only when
        the styles of the state drawn differ from the ones its cached cells were drawn with."""
        cells, rows = self._cell_render_cache, self._row_render_cache
        self._cell_render_cache, self._row_render_cache = LRUCache(cells.maxsize), LRUCache(rows.maxsize)
        try:
            super().notify_style_update()
        finally:
            self._cell_render_cache, self._row_render_cache = cells, rows
        self._styles_checked = False

    def render_lines(self, crop: Any) -> list[Strip]:
        if not self._styles_checked:
            # here, not in notify_style_update: the component styles are applied after that call
            self._styles_checked = True
            drawn = (self.rich_style, *(self.get_component_rich_style(name, partial=False)
                                        for name in sorted(self.COMPONENT_CLASSES)))
            state = self._pseudo_class_state
            if self._styles_seen.get(state, drawn) != drawn:  # a theme or a stylesheet changed
                self._styles_seen.clear()
                self._cell_render_cache.clear()
                self._row_render_cache.clear()
                self._line_cache.clear()
            self._styles_seen[state] = drawn
        return super().render_lines(crop)

    # --- layout ---------------------------------------------------------------------------------

    def _compute_layout(self) -> tuple[tuple[str, int], ...]:
        # outer width less border/padding: unlike `size`, it does not shrink when the scrollbar
        # appears, so a rebuild can never flip the scrollbar and trigger another rebuild
        width = (self.outer_size.width - self.styles.gutter.width) if self.outer_size.width else 80
        cols = [c for c in self.COLUMNS if width >= WIDE or not c.wide_only]
        if width >= WIDE:
            cols = [replace(c, width=c.wide) if c.wide else c for c in cols]
        pad = 2 * self.cell_padding
        used = sum(c.width + pad for c in cols) + 1  # 1: the vertical scrollbar's room
        spare = max(0, width - used)
        extra = {c.key: 0 for c in cols}
        for c in cols:
            if c.fit:
                longest = max((len(str(cells.get(c.key, ""))) for _, cells in self._rows), default=0)
                extra[c.key] = min(spare, max(0, longest - c.width))
                spare -= extra[c.key]
        shares = sum(c.flex for c in cols)
        return tuple((c.key, c.width + extra[c.key] + (spare * c.flex // shares if c.flex else 0)) for c in cols)

    def _fits(self) -> bool:
        """Whether every `fit` column is as wide as its longest cell (or can grow no more)."""
        return self._compute_layout() == self._layout

    def on_resize(self) -> None:
        layout = self._compute_layout()
        if layout != self._layout:
            self._rebuild(layout)

    def on_mount(self) -> None:
        self._rebuild(self._compute_layout())

    def _rebuild(self, layout: tuple[tuple[str, int], ...] | None = None) -> None:
        cursor_key = self.current_key
        if layout is not None:
            self._layout = layout
            self._rows = self.relaid(self._rows)
            self.clear(columns=True)
            labels = {c.key: c.label for c in self.COLUMNS}
            for key, width in self._layout:
                self.add_column(labels[key], width=width, key=key)
        else:
            self.clear()
        for key, cells in self._visible(self._rows):
            self.add_row(*self._cells(cells), key=key)
        if cursor_key is not None:
            self.select_key(cursor_key)

    def relaid(self, rows: list[tuple[str, dict[str, Cell]]]) -> list[tuple[str, dict[str, Cell]]]:
        """The rows again for new column widths (a table whose cells depend on them redraws them)."""
        return rows

    def _cells(self, cells: dict[str, Cell]) -> list[Cell]:
        return [cells.get(k, "") for k, _ in self._layout]

    def _visible(self, rows: list[tuple[str, dict[str, Cell]]]) -> list[tuple[str, dict[str, Cell]]]:
        if not self.filter_text:
            return rows
        needle = self.filter_text.lower()
        return [(k, c) for k, c in rows if any(needle in str(v).lower() for v in c.values())]

    # --- rows -------------------------------------------------------------------------------------

    @property
    def current_key(self) -> str | None:
        if not self.row_count or self.cursor_row < 0:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:  # noqa: BLE001 - cursor outside the (just cleared) table
            return None

    def select_key(self, key: str) -> None:
        try:
            self.move_cursor(row=self.get_row_index(key))
        except RowDoesNotExist:
            pass

    def set_rows(self, rows: list[tuple[str, dict[str, Cell]]]) -> None:
        """Show exactly these rows; rows already shown in the same order are updated in place."""
        old_keys = [k for k, _ in self._visible(self._rows)]
        self._rows = rows
        new = self._visible(rows)
        if any(c.fit for c in self.COLUMNS) and self._layout and not self._fits():
            self._rebuild(self._compute_layout())  # a longer name came: its column takes the room
            return
        if [k for k, _ in new] != old_keys or not self._layout:
            self._rebuild(None if self._layout else self._compute_layout())
            return
        for key, cells in new:
            self._update_row(key, cells)

    def upsert(self, key: str, cells: dict[str, Cell]) -> None:
        """Update one row by key (in place), or append it."""
        for i, (k, _) in enumerate(self._rows):
            if k == key:
                self._rows[i] = (key, cells)
                break
        else:
            self._rows.append((key, cells))
            if self._visible([(key, cells)]):
                self.add_row(*self._cells(cells), key=key)
            return
        if key in self.rows:
            self._update_row(key, cells)
        elif self._visible([(key, cells)]):
            self._rebuild()

    def remove_key(self, key: str) -> None:
        self._rows = [(k, c) for k, c in self._rows if k != key]
        if key in self.rows:
            self.remove_row(key)

    def _update_row(self, key: str, cells: dict[str, Cell]) -> None:
        current = self.get_row(key)
        for (col, _), old, value in zip(self._layout, current, self._cells(cells), strict=False):
            if old != value:
                self._put(key, col, value)

    def _put(self, key: str, column: str, value: Cell) -> None:
        """DataTable.update_cell, but only this row's cached renders are dropped.

        update_cell bumps a table-wide counter that is part of every render cache key, so one
        changed cell re-renders every visible cell of the table — most of a frame's cost on a busy
        job. Here the row's cell and row renders are discarded and the row alone is redrawn. Falls
        back to update_cell should DataTable's internals differ from what this expects.
        """
        try:
            row_key, column_key = RowKey(key), ColumnKey(column)
            if row_key not in self._row_locations or column_key not in self._column_locations:
                raise KeyError(key)
            self._data[row_key][column_key] = value
            caches: tuple[Any, ...] = (self._cell_render_cache, self._row_render_cache)
            for cache in caches:
                for cache_key in [k for k in cache.keys() if k[0] == row_key]:
                    cache.discard(cache_key)
            index = self.get_row_index(row_key)
            self._row_renderable_cache.discard((self._update_count, index))
            self._line_cache.clear()  # keyed by screen line: cheap to rebuild from the row renders
            self.refresh_row(index)
        except (AttributeError, TypeError):
            self.update_cell(key, column, value)

    def set_cell(self, key: str, column: str, value: Cell) -> None:
        """Update one cell if its text changed: any update makes the table redraw all its rows."""
        try:
            if self.get_cell(key, column) != value:
                self._put(key, column, value)
        except Exception:  # noqa: BLE001 - row or column not shown (filtered, narrow layout)
            pass

    def set_filter(self, text: str) -> None:
        self.filter_text = text
        self._rebuild()
