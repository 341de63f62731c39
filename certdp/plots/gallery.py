"""``index.html``: the gallery of the paper's figures (written by :mod:`certdp.figures`)."""

from __future__ import annotations

import html
import time
from pathlib import Path


HEAD = ("<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
        "<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}}"
        "figure{{margin:2.5em 0;border-top:1px solid #ccc;padding-top:1em}}img{{max-width:100%}}"
        "code,pre{{background:#f4f4f4;font-size:12px}}pre{{padding:.5em;white-space:pre-wrap}}"
        ".gap{{color:#b00000;font-weight:bold}}.meta{{color:#555;font-size:13px}}"
        "table.paper{{border-collapse:collapse;font-size:12px;margin:.5em 0}}"
        "table.paper td,table.paper th{{border:1px solid #ccc;padding:2px 5px;vertical-align:top}}"
        ".v-reproduced{{background:#e3f5e1}}.v-differs{{background:#fde2e2}}.v-not{{background:#eee}}"
        ".v-shape{{background:#fff6d6}}</style></head><body>")
VCLASS = {"reproduced": "v-reproduced", "differs": "v-differs", "not run": "v-not"}


def paper_table(rows: list[dict], *, fig_dir: Path | None = None, with_figure: bool = False) -> str:
    """The rows of the reproduction table (:mod:`certdp.reproduction`) as an HTML table."""
    if not rows:
        return ""
    from certdp.reproduction import deviation_target
    head = (["figure"] if with_figure else []) + ["claim (source)", "paper", "certdp (proven)",
                                                  "paper's construction", "verdict", "reason", "runs"]
    out = ["<table class='paper'><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for r in rows:
        dev = ""
        if r.get("deviation"):
            text, href = deviation_target(r["deviation"], fig_dir)
            dev = f" (see <a href='{html.escape(href)}'>{html.escape(text)}</a>)"
        cons = (f"{r['construction']}: " if r["construction"] else "") + r["certdp_paper_construction"]
        cells = ([html.escape(r["figure"])] if with_figure else []) + [
            f"{html.escape(r['claim'])}<br><small>{html.escape(r['source'])}</small>",
            html.escape(f"{r['paper_value']} ({r['tolerance']})"), html.escape(r["certdp_proven"]),
            html.escape(cons), f"<b>{html.escape(r['verdict'])}</b>",
            html.escape("; ".join(x for x in (r["reason"], r["needs"] and f"needs {r['needs']}") if x)) + dev,
            f"<small>{html.escape(r['profile'])}: {html.escape(r['runs'])}</small>"]
        cls = VCLASS.get(r["verdict"], "v-shape")
        out.append(f"<tr class='{cls}'>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return "".join(out) + "</table>"


def write_gallery(fig_dir: Path, entries: list[dict], *, profile: str, out_root: Path,
                  table: list[dict] | None = None) -> Path:
    """``index.html``: every figure with its caption, the commands behind it, run times and the
    paper's values beside certdp's; ``reproduction.html``: the whole table on its own page."""
    from certdp import results
    table = list(table or [])
    made = time.strftime('%Y-%m-%d %H:%M:%S')
    parts = [
        HEAD.format(title="certdp figures"),
        f"<h1>certdp: the paper's figures</h1><p class='meta'>profile <b>{html.escape(profile)}</b>; "
        f"runs under <code>{html.escape(str(out_root))}</code>; made {made}; "
        f"redo with <code>make reproduce-figures PROFILE={html.escape(profile)}</code>.  "
        f"<a href='reproduction.html'>The paper's values beside certdp's</a> ({len(table)} values; "
        f"<a href='reproduction.csv'>CSV</a>, <a href='reproduction.md'>Markdown</a>).</p><ul>"]
    for e in entries:
        parts.append(f"<li><a href='#{e['name']}'>{html.escape(e['title'])}</a> "
                     f"({e['run_seconds']:.0f} s{', incomplete' if e['missing'] else ''})</li>")
    parts.append("</ul>")
    for e in entries:
        gap = (f"<p class='gap'>Incomplete: no results for {html.escape(', '.join(e['missing']))} "
               "(see the errors below); the figure shows what exists.</p>") if e["missing"] else ""
        runs_html = "".join(
            f"<li><code>{html.escape(r['command'])}</code> &mdash; {r['seconds']:.0f} s"
            f"{' (cached)' if r['cached'] else ''}{'' if r['ok'] else ' <span class=gap>FAILED</span>'}"
            + (f"<pre>{html.escape(r['error'])}</pre>" if r.get("error") else "") + "</li>" for r in e["runs"])
        parts.append(
            f"<figure id='{e['name']}'><h2>{html.escape(e['title'])}</h2>"
            f"<a href='{e['name']}.png'><img src='{e['name']}.png' alt='{html.escape(e['name'])}'></a>"
            f"<figcaption><p>{html.escape(e['caption'])}</p>"
            + (f"<p class='meta'>Note: {html.escape(e['notes'])}</p>" if e.get("notes") else "") + gap +
            f"<p class='meta'>Files: <a href='{e['name']}.png'>PNG</a> | <a href='{e['name']}.pdf'>PDF</a> | "
            f"<a href='{e['name']}.csv'>data (CSV)</a>. Made by <code>certdp figures {e['name']} profile={profile}</code>; "
            f"run time {e['run_seconds']:.0f} s over {len(e['runs'])} run(s) (computed now: {e['fresh_seconds']:.0f} s), "
            f"drawing {e['plot_seconds']:.1f} s.</p><details><summary>runs</summary><ul>{runs_html}</ul></details>"
            + (f"<p class='meta'>The paper's values (markers labelled <i>paper</i> in the figure):</p>{rows}"
               if (rows := paper_table([r for r in table if r["figure"] == e["name"]], fig_dir=fig_dir)) else "")
            + "</figcaption></figure>")
    parts.append("</body></html>")
    path = fig_dir / "index.html"
    results.atomic_write_text(path, "\n".join(parts))
    from certdp.reproduction import VERDICTS, machine
    counts = ", ".join(f"{sum(r['verdict'] == v for r in table)} {v}" for v in VERDICTS)
    page = [HEAD.format(title="certdp: the paper beside certdp"),
            f"<h1>The paper's values beside certdp's</h1><p class='meta'>profile <b>{html.escape(profile)}</b>; "
            f"made {html.escape(machine())}; {counts}.  <a href='index.html'>The figures</a>; "
            "<a href='reproduction.csv'>CSV</a>.</p>",
            paper_table(table, fig_dir=fig_dir, with_figure=True) or "<p>No paper values in these experiment files.</p>",
            "</body></html>"]
    results.atomic_write_text(fig_dir / "reproduction.html", "\n".join(page))
    return path
