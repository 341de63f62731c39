"""``index.html``: the gallery of the paper's figures (written by :mod:`certdp.figures`)."""

from __future__ import annotations

import html
import time
from pathlib import Path


def write_gallery(fig_dir: Path, entries: list[dict], *, profile: str, out_root: Path) -> Path:
    """``index.html``: every figure with its caption, the commands behind it and run times."""
    from certdp import results
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>certdp figures</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "figure{margin:2.5em 0;border-top:1px solid #ccc;padding-top:1em}img{max-width:100%}"
        "code,pre{background:#f4f4f4;font-size:12px}pre{padding:.5em;white-space:pre-wrap}"
        ".gap{color:#b00000;font-weight:bold}.meta{color:#555;font-size:13px}</style></head><body>",
        f"<h1>certdp: the paper's figures</h1><p class='meta'>profile <b>{html.escape(profile)}</b>; "
        f"runs under <code>{html.escape(str(out_root))}</code>; made {time.strftime('%Y-%m-%d %H:%M:%S')}; "
        f"redo with <code>make reproduce-figures PROFILE={html.escape(profile)}</code>.</p><ul>"]
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
            "</figcaption></figure>")
    parts.append("</body></html>")
    path = fig_dir / "index.html"
    results.atomic_write_text(path, "\n".join(parts))
    return path
