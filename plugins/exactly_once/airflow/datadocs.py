"""Data Docs as the plugin serves them: no script at all, nothing from another origin.

GX renders its pages with scripts and stylesheets from public CDNs (jQuery, Bootstrap, Vega, ...). Served
from Airflow's own origin, any script in them could read the UI's token cookie; offline they fail to
load. :func:`offline_html` re-emits a page through an HTML parser keeping only an allow-list of tags and
attributes: no ``script``/``iframe``/``object``/``embed``/``meta``/``base``/``form``, no event handler,
no URL with a scheme or of another origin (only relative links, ``#`` anchors and ``data:`` images), no
``style`` attribute that loads anything; it adds a small stylesheet of its own, so a page renders
readably offline. :data:`CSP` is sent with every report file, so that even what slipped through could
not run or call anywhere. Interactive widgets of GX (table filters, charts) are therefore absent: the
tables and values are all in the HTML.
"""
from __future__ import annotations

import re
from html import escape
from html.parser import HTMLParser

CSP = ("default-src 'none'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self'; "
       "script-src 'none'; connect-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'")
# Airflow 3's font and palette (as the plugin's own pages, ``style``), light or dark as the system says: no
# script may run here to follow the UI's own switch
_STYLE = ("<style>:root{color-scheme:light dark}body{font:14px/1.5 Inter,-apple-system,BlinkMacSystemFont,"
          "\"Segoe UI\",Helvetica,Arial,sans-serif;margin:0;padding:16px 24px;color:#0b0d12;background:#fff}"
          "a{color:#2d5b9a}table{border-collapse:collapse;margin:8px 0}th,td{border-bottom:1px solid #e2e5ea;"
          "padding:6px 10px;vertical-align:top;text-align:left}th{background:#eef1f5}"
          ".collapse:not(.show){display:block}.d-none{display:none}.text-danger{color:#c0262d}"
          ".text-success{color:#16803c}@media (prefers-color-scheme:dark){body{color:#f3f5f8;background:#0b0d12}"
          "a{color:#8fb6ee}th{background:#1b212b}th,td{border-color:#2a303a}.text-danger{color:#f87171}"
          ".text-success{color:#4ade80}}</style>")
_TAGS = frozenset(
    "html head body title link style div span p a table thead tbody tfoot tr th td caption colgroup col ul ol li "
    "dl dt dd h1 h2 h3 h4 h5 h6 b i u em strong small code pre br hr img nav header footer main section article "
    "aside label button details summary sup sub blockquote abbr cite kbd mark s figure figcaption".split())
_DROP_WITH_CONTENT = frozenset("script iframe object embed noscript template svg math frameset frame applet "
                               "form textarea select audio video canvas".split())
_ATTRS = frozenset("class id title colspan rowspan scope align valign width height alt href src rel type "
                   "role aria-label aria-hidden aria-expanded aria-controls data-toggle data-target "
                   "style open lang dir".split())
_VOID = frozenset("br hr img link col meta base input".split())
_LOCAL = re.compile(r"(?!\s)(?![a-zA-Z][a-zA-Z0-9+.-]*:)(?![\\/]{2})[^\s\\]*\Z")  # relative: no scheme, no //
_DATA_IMG = re.compile(r"data:image/(?:png|gif|jpeg|webp);base64,[A-Za-z0-9+/=\s]*\Z", re.I)
_STYLE_BAD = re.compile(r"url\s*\(|@import|expression\s*\(|\\", re.I)


def _url_ok(tag: str, name: str, value: str) -> bool:
    if name == "src" and tag == "img" and _DATA_IMG.match(value):
        return True
    return bool(_LOCAL.match(value))


class _Clean(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.out: list[str] = []
        self.skip: list[str] = []       # open elements whose content is dropped
        self.styled = False
        self.in_style = False

    def _attrs(self, tag: str, attrs: list[tuple[str, str | None]]) -> str | None:
        kept = []
        for name, value in attrs:
            value = value or ""
            if name not in _ATTRS:
                continue                                 # on*, formaction, srcset, http-equiv, ...
            if name in ("href", "src") and not _url_ok(tag, name, value):
                if tag == "link":
                    return None                          # a stylesheet/prefetch of another origin: drop the link
                continue
            if name == "style" and _STYLE_BAD.search(value):
                continue
            kept.append(f' {name}="{escape(value)}"')
        if tag == "link":
            rel = dict(attrs).get("rel") or ""
            if rel.strip().lower() != "stylesheet" or not dict(attrs).get("href"):
                return None                              # only local stylesheets (no prefetch/preload/import)
        return "".join(kept)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.skip:
            if tag in _DROP_WITH_CONTENT and tag not in _VOID:
                self.skip.append(tag)
            return
        if tag in _DROP_WITH_CONTENT:
            self.skip.append(tag)
            return
        if tag not in _TAGS:
            return
        kept = self._attrs(tag, attrs)
        if kept is None:
            return
        self.out.append(f"<{tag}{kept}>")
        self.in_style = tag == "style"
        if tag == "head" and not self.styled:
            self.out.append('<meta charset="utf-8">' + _STYLE)   # the page is re-encoded as UTF-8
            self.styled = True

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _DROP_WITH_CONTENT:
            return
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if self.skip:
            if tag == self.skip[-1]:
                self.skip.pop()
            return
        self.in_style = False
        if tag in _TAGS and tag not in _VOID:
            self.out.append(f"</{tag}>")

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        if self.in_style:
            # CSS is raw text: keep it, without anything that loads (url(), @import) or closes the element
            self.out.append(_STYLE_BAD.sub("", data).replace("<", ""))
        else:
            self.out.append(escape(data, quote=False))

    def handle_entityref(self, name: str) -> None:
        if not self.skip:
            self.out.append(f"&{name};" if name.isalnum() else "")

    def handle_charref(self, name: str) -> None:
        if not self.skip:
            self.out.append(f"&#{name};" if name.lstrip("xX").isalnum() else "")


def offline_html(page: bytes) -> bytes:
    """``page`` re-emitted with allowed tags and attributes only (see the module), with a local style."""
    clean = _Clean()
    clean.feed(page.decode("utf-8", "replace"))
    clean.close()
    body = "".join(clean.out)
    return ("<!DOCTYPE html>" + ("" if clean.styled else '<meta charset="utf-8">' + _STYLE) + body).encode()
