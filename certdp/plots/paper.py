"""The paper's points on a figure: markers labelled "paper" (the ``point`` of each value of the
experiment file's ``paper:`` section, :mod:`certdp.reproduction`).

A point names its panel by a piece of the panel's title (``panel: "Linear, pure"``), the right
axis of a twin panel with ``axis: right``, and its place with ``x`` and ``y``.  A point without
``y`` (a budget, a size or a count the text names, with no level) is a vertical dotted line.  A bound (``tolerance: {at_least: true}`` / ``{at_most: true}``) is drawn as a
triangle pointing to where the value may lie.  One legend entry, "paper", outside the panels."""

from __future__ import annotations

from matplotlib.lines import Line2D

PAPER_COLOUR = "#d6007a"
STYLE = dict(color=PAPER_COLOUR, mec="black", mew=0.6, ls="", zorder=8)


def _panel(fig, title: str, axis: str = "left"):
    """The axes whose title contains ``title`` (its twin sharing the place for ``axis: right``)."""
    hits = [ax for ax in fig.axes if title in ax.get_title()]
    if not hits:
        return None
    ax = hits[0]
    if axis != "right":
        return ax
    twins = [o for o in fig.axes if o is not ax and o.get_position().bounds == ax.get_position().bounds]
    return twins[0] if twins else None


def _marker(entry: dict) -> str:
    tol = entry.get("tolerance") or {}
    return "^" if tol.get("at_least") else "v" if tol.get("at_most") else "*"


def mark(fig, entries: list[dict]) -> list[str]:
    """Draw every entry's point on ``fig``; returns the ids whose panel is not in the figure."""
    missed, kinds = [], {}
    for e in entries or []:
        p = e.get("point")
        if not p:
            continue
        ax = _panel(fig, str(p["panel"]), str(p.get("axis", "left")))
        if ax is None:
            missed.append(str(e["id"]))
            continue
        y = p.get("y")
        if y is None:
            ax.axvline(float(p["x"]), color=PAPER_COLOUR, ls=(0, (1, 2)), lw=1.2, zorder=7, label="_paper")
            kinds["line"] = Line2D([], [], color=PAPER_COLOUR, ls=(0, (1, 2)), lw=1.2)
        else:
            m = _marker(e)
            ax.plot([float(p["x"])], [float(y)], marker=m, ms=10 if m == "*" else 7, label="_paper", **STYLE)
            kinds["bound" if m != "*" else "point"] = Line2D([], [], marker=m, ms=10 if m == "*" else 7, **STYLE)
    labels = {"point": "paper", "bound": "paper (a bound: triangle points to the side allowed)",
              "line": "paper (a budget or size the text names)"}
    if kinds:
        order = [k for k in labels if k in kinds]
        fig.legend(handles=[kinds[k] for k in order], labels=[labels[k] for k in order], loc="upper left",
                   bbox_to_anchor=(1.0, 1.0), fontsize=7)
    return missed
