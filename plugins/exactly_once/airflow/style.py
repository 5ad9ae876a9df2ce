"""The look of the plugin's pages: Airflow 3's (its font, spacing, palette, light and dark mode), so that
the Tables tab reads as part of Airflow's UI. Static CSS and two fixed scripts, allowed by their hashes
in the pages' Content-Security-Policy (no other script runs; nothing is loaded from anywhere).

* :data:`THEME` follows Airflow's colour mode: the UI (``next-themes``) puts ``dark`` or ``light`` in the
  class of its ``<html>``, which a page framed by the UI (same origin) reads and watches; a page opened on
  its own reads the UI's stored choice (``localStorage.theme``), else the system's. Without scripts the
  system's choice applies (``prefers-color-scheme``).
* :data:`TOP_LINKS` makes ``target=_top`` links work inside Airflow's sandboxed iframe (see below).
"""
from __future__ import annotations

import base64
import hashlib

# Airflow 3's tokens (airflow/ui: Chakra UI theme): Inter, then the system fonts; gray/brand palettes
CSS = """
:root{color-scheme:light;--bg:#fff;--fg:#0b0d12;--muted:#5b6472;--border:#e2e5ea;--subtle:#f6f7f9;
--head:#eef1f5;--brand:#3f5f8c;--link:#2d5b9a;--ok:#16803c;--bad:#c0262d;--warn-bg:#fff6df;--warn:#8a5a00;
--run:#3b7d16;--queued:#6b7280;--chip:#eef1f5}
:root[data-theme=dark]{color-scheme:dark;--bg:#0b0d12;--fg:#f3f5f8;--muted:#9aa3b1;--border:#2a303a;
--subtle:#141820;--head:#1b212b;--brand:#8fb0db;--link:#8fb6ee;--ok:#4ade80;--bad:#f87171;--warn-bg:#2e2510;
--warn:#fbbf24;--run:#a3e635;--queued:#9ca3af;--chip:#1f2630}
@media (prefers-color-scheme:dark){:root:not([data-theme=light]){color-scheme:dark;--bg:#0b0d12;--fg:#f3f5f8;
--muted:#9aa3b1;--border:#2a303a;--subtle:#141820;--head:#1b212b;--brand:#8fb0db;--link:#8fb6ee;--ok:#4ade80;
--bad:#f87171;--warn-bg:#2e2510;--warn:#fbbf24;--run:#a3e635;--queued:#9ca3af;--chip:#1f2630}}
html{background:var(--bg)}
body{font:14px/1.5 Inter,-apple-system,BlinkMacSystemFont,"Segoe UI",Helvetica,Arial,sans-serif;margin:0;
padding:16px 24px;color:var(--fg);background:var(--bg)}
h1{font-size:20px;font-weight:600;margin:4px 0 8px}h2{font-size:16px;font-weight:600;margin:24px 0 8px}
a{color:var(--link);text-decoration:none}a:hover{text-decoration:underline}
table{border-collapse:collapse;margin:8px 0;border:1px solid var(--border);border-radius:6px}
th,td{border-bottom:1px solid var(--border);padding:6px 10px;vertical-align:top;text-align:left}
th{background:var(--head);font-weight:600;font-size:13px}td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.warn td{background:var(--warn-bg)}
.COMMITTED,.ok,.success{color:var(--ok)}.ABORTED,.bad,.failed,.refused{color:var(--bad)}
.bad,.failed,.refused{font-weight:600}.OPEN,.PRE_COMMITTED{color:var(--warn)}
.running{color:var(--run);font-weight:600}.queued{color:var(--queued);font-weight:600}
.muted{color:var(--muted)}.warn{background:var(--warn-bg)}
.banner{border:1px solid var(--border);border-left:4px solid var(--warn);background:var(--warn-bg);padding:8px 12px;
border-radius:6px;margin:8px 0}.banner.bad{border-left-color:var(--bad);font-weight:400}
ul{margin:2px 0;padding-left:18px}form{margin:8px 0}code{font:12.5px SFMono-Regular,Menlo,Monaco,Consolas,monospace}
nav{display:flex;gap:16px;padding-bottom:8px;margin-bottom:8px;border-bottom:1px solid var(--border)}
button,select,input,textarea{font:inherit;color:var(--fg);background:var(--bg);border:1px solid var(--border);
border-radius:6px;padding:4px 8px}textarea{width:100%;max-width:640px}
button{background:var(--brand);color:var(--bg);border-color:var(--brand);font-weight:600;cursor:pointer}
dl.plan{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px}dl.plan dt{color:var(--muted)}dl.plan dd{margin:0}
.chip{display:inline-block;background:var(--chip);border-radius:10px;padding:0 8px;margin:1px 2px 1px 0;font-size:12.5px}
svg.chart{display:block;max-width:100%;height:auto;margin:4px 0 12px}
svg.chart text{fill:var(--muted);font-size:11px}svg.chart .axis{stroke:var(--border)}
svg.chart .s1{stroke:var(--link);fill:none;stroke-width:1.5}svg.chart .s2{stroke:var(--warn);fill:none;stroke-width:1.5}
svg.chart .s3{stroke:var(--bad);fill:none;stroke-width:1.5}svg.chart .pass{fill:var(--ok)}svg.chart .fail{fill:var(--bad)}
svg.chart circle.s1{fill:var(--link)}svg.chart circle.s2{fill:var(--warn)}svg.chart circle.s3{fill:var(--bad)}
svg.chart .none{fill:var(--queued)}svg.chart a:hover circle,svg.chart a:hover rect{stroke:var(--fg);stroke-width:2}
.legend span{margin-right:14px}.legend i{display:inline-block;width:14px;height:3px;vertical-align:middle;margin-right:4px}
.pager a,.pager b{margin-right:8px}
"""

THEME = """(function () {
  var root = document.documentElement;
  function mode() {
    try {
      var top = window.top.document.documentElement;
      if (window.top !== window && top.classList) {
        if (top.classList.contains("dark")) return "dark";
        if (top.classList.contains("light")) return "light";
      }
    } catch (e) {}
    try {
      var stored = window.localStorage.getItem("theme");
      if (stored === "dark" || stored === "light") return stored;
    } catch (e) {}
    return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  }
  function apply() { root.setAttribute("data-theme", mode()); }
  apply();
  try {
    if (window.top !== window) new MutationObserver(apply).observe(window.top.document.documentElement,
                                                                  {attributes: true, attributeFilter: ["class"]});
  } catch (e) {}
})();"""

# Airflow's UI embeds plugin pages in an iframe sandboxed without allow-top-navigation, so a link to an
# Airflow page (target=_top) would do nothing there. Same origin, the page routes Airflow's single-page app
# instead: it pushes the link's path onto the top window's history and lets the app's router see it (a
# popstate, as the Back button gives). Outside a frame, or for another origin, the link works as usual.
TOP_LINKS = """document.addEventListener("click", function (e) {
  var a = e.target.closest ? e.target.closest("a[target=_top]") : null;
  if (!a || window.top === window) return;
  try {
    var url = new URL(a.href, location.href), top = window.top;
    if (url.origin !== top.location.origin) return;
    e.preventDefault();
    var idx = ((top.history.state || {}).idx || 0) + 1;
    top.history.pushState({usr: null, key: Math.random().toString(36).slice(2, 10), idx: idx}, "",
                          url.pathname + url.search + url.hash);
    top.dispatchEvent(new PopStateEvent("popstate", {state: top.history.state}));
  } catch (err) { /* the browser's default */ }
});"""


def _hash(script: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"


SCRIPT_HASHES = f"{_hash(THEME)} {_hash(TOP_LINKS)}"
HEAD = f"<style>{CSS}</style><script>{THEME}</script><script>{TOP_LINKS}</script>"
