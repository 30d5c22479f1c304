"""One self-contained HTML page of a report: the tables and the figures (PNG, base64 inline)."""

from __future__ import annotations

import base64
import html
from pathlib import Path

STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
    "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px}"
    "td.n{text-align:right}img{max-width:100%;margin:0.5em 0}.why{color:#555}"
)


def _table(markdown: str) -> str:
    """A Markdown table (as :func:`~lightning_fed.report.table.markdown` writes it) as HTML."""
    lines = [line.strip().strip("|").split(" | ") for line in markdown.splitlines()]
    head, body = lines[0], lines[2:]
    out = ["<table>", "<tr>" + "".join(f"<th>{html.escape(c.strip())}</th>" for c in head) + "</tr>"]
    for cells in body:
        tds = "".join(f"<td{' class=n' if i >= 4 else ''}>{html.escape(c.strip())}</td>" for i, c in enumerate(cells))
        out.append(f"<tr>{tds}</tr>")
    return "\n".join(out + ["</table>"])


def page(title: str, sections: list[tuple[str, str, str, list[Path]]], notes: list[str] = ()) -> str:
    """``sections``: (heading, one line on why it is a separate table or "", Markdown table, PNG files);
    ``notes``: lines shown above the tables (runs counted once, seeds repeated in a group)."""
    body = [f"<h1>{html.escape(title)}</h1>"]
    if notes:
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    for heading, why, table, figures in sections:
        body.append(f"<h2>{html.escape(heading)}</h2>")
        if why:
            body.append(f'<p class="why">{html.escape(why)}</p>')
        body.append(_table(table))
        for png in figures:
            data = base64.b64encode(png.read_bytes()).decode("ascii")
            body.append(f'<img alt="{html.escape(png.stem)}" src="data:image/png;base64,{data}">')
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
