"""The plan page's one script, and the Content-Security-Policy that lets exactly it run.

Twelve thousand joints as static markup are megabytes (every row repeats its site, line,
machine, status words and an SVG); the page instead embeds the rows as compact JSON (each
repeated string once, dates as day numbers, a trend as one base-36 digit per point) and this
script builds the table from it. Every name reaches the DOM through textContent, setAttribute
or a property, never as markup: machine and joint names come from agents a plant does not fully
control.

The data block (agent.fleet.page.plan_data):
    t  strings; rows and machines hold their indices (t[0] is "")
    b  the day that day numbers count from (days since 1970-01-01, UTC)
    w, h  a sparkline's size (agent.fleet.spark.WIDTH, HEIGHT)
    m  machines: [site, line, name, stale_since, offline_since] (indices into t; stale_since 0
       when not stale, offline_since 0 unless the machine's agent said it went offline)
    r  rows, in the plan's order: [status, ne107, machine (index into m), joint, indicator,
       value text, unit, trend, next limit, forecast day, interval low day, high day, action,
       report id (0 when the full report never arrived)]; days are null when unknown, a high
       day is null for an open interval ("never"); the trend is the sparkline's y coordinates,
       one base-36 digit each, x evenly spaced as agent.fleet.spark spaces them.
"""

from __future__ import annotations

import base64
import hashlib

DATA_ID = "plan-data"
ROWS_ID = "plan-rows"

# Plain JavaScript; $DATA and $ROWS are the elements' ids.
_JS = """
(() => {
"use strict";
const d = JSON.parse(document.getElementById("$DATA").textContent);
const t = d.t;
const SVG = "http://www.w3.org/2000/svg";
const FIRST = 200;  // rows drawn before the first paint: a screenful, at once
const day = (n) => n === null ? "" : new Date((d.b + n) * 864e5).toISOString().slice(0, 10);
// Python's round() (agent.fleet.spark placed the points with it): halves to even.
const round = (v) => {
  const r = Math.round(v);
  return r - v === 0.5 && r % 2 ? r - 1 : r;
};
const add = (parent, tag, text) => {
  const el = parent.appendChild(document.createElement(tag));
  if (text) el.textContent = text;
  return el;
};
const spark = (ys) => {
  const svg = document.createElementNS(SVG, "svg");
  for (const [k, v] of [["class", "spark"], ["width", d.w], ["height", d.h], ["role", "img"]]) {
    svg.setAttribute(k, v);
  }
  const step = (d.w - 2) / (ys.length - 1), points = [];
  for (let i = 0; i < ys.length; i++) points.push(round(1 + i * step) + "," + parseInt(ys[i], 36));
  const line = svg.appendChild(document.createElementNS(SVG, "polyline"));
  line.setAttribute("points", points.join(" "));
  return svg;
};
const row = (parent, r) => {
  const [st, ne, m, joint, indicator, value, unit, ys, limit, at, low, high, action, report] = r;
  const [site, line, machine, since, offline] = d.m[m];
  const tr = add(parent, "tr");
  tr.className = t[st] + (since ? " stale" : "");
  add(tr, "td", t[st] + " (" + t[ne] + ")").className = "st";
  add(tr, "td", t[site]);
  add(tr, "td", t[line]);
  const name = add(tr, "td", t[machine]);
  if (since) {
    const tag = add(name, "span", "stale");
    tag.className = "tag";
    tag.title = "no report since " + t[since];
  }
  if (offline) {
    const tag = add(name, "span", "agent offline");
    tag.className = "tag";
    tag.title = "its agent's status topic says offline since " + t[offline];
  }
  add(tr, "td", t[joint]);
  add(tr, "td", t[indicator]);
  add(tr, "td", value && value + " " + t[unit]);
  const trend = add(tr, "td");
  if (ys.length > 1) trend.appendChild(spark(ys));
  add(tr, "td", t[limit]);
  add(tr, "td", day(at));
  // An interval of zero width is one date, said as such (the trend leaves no spread).
  const span = low !== null && low === high ? day(low) + " (zero width)"
    : day(low) + " to " + (high === null ? "never" : day(high));
  add(tr, "td", limit ? span : "");
  add(tr, "td", t[action]);
  const cell = add(tr, "td");
  if (report) {
    add(cell, "a", "report").href = "/reports/" + encodeURIComponent(t[report]);
  } else {
    add(cell, "span", "-").title = "the full report did not reach the fleet";
  }
};
const draw = (from, to) => {
  const rows = document.createDocumentFragment();
  for (let i = from; i < to; i++) row(rows, d.r[i]);
  document.getElementById("$ROWS").appendChild(rows);
};
// Laying out a table of 12,000 rows takes the browser seconds: the first screenful is
// painted first, the rest drawn in one go after that paint.
draw(0, Math.min(FIRST, d.r.length));
if (d.r.length > FIRST) requestAnimationFrame(() => setTimeout(() => draw(FIRST, d.r.length)));
})();
"""
PLAN_SCRIPT = _JS.replace("$DATA", DATA_ID).replace("$ROWS", ROWS_ID)

_HASH = base64.b64encode(hashlib.sha256(PLAN_SCRIPT.encode("utf-8")).digest()).decode("ascii")
# Only the script above may run (its hash), no other script, style only inline, images only
# from the service: a name that slipped into the markup as an element could do nothing.
CSP = f"default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; script-src 'sha256-{_HASH}'"
