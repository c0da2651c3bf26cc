"""Markdown text for the reports: names and messages shown exactly as written in GitHub's
Markdown (a kernel name holding ``<``, ``&``, ``|``, ``*`` or a backtick never turns into markup,
splits a table row or becomes another name)."""
from __future__ import annotations

import re


def one_line(v) -> str:
    """``v`` as text on one line (CR / LF as spaces): a table row or list item stays one."""
    return str(v).replace("\r\n", " ").replace("\r", " ").replace("\n", " ")


_TEXT_ESCAPES = str.maketrans({"\\": "\\\\", "`": "\\`", "*": "\\*", "|": "\\|", "~": "\\~", "&": "&amp;",
                               "<": "&lt;", ">": "&gt;"})


def cell(v) -> str:
    """``v`` as one line of Markdown text (a table cell or a list item) that renders as written:
    backslash-escapes for the punctuation GitHub's Markdown acts on (backslash, backtick, ``*``,
    ``|``, ``~``, and a ``]`` that would close a link: ``](`` / ``][``) and entities for ``&``,
    ``<``, ``>`` (a name holding ``<b>`` or ``&amp;`` shows as written, never as markup). A
    bracketed view tag such as ``[rank0]`` is no link and stays as it is."""
    return re.sub(r"\](?=[(\[])", r"\\]", one_line(v).translate(_TEXT_ESCAPES))


def code(v, table: bool = False) -> str:
    """``v`` as a code span that shows it as written: fenced by one more backtick than its longest
    backtick run (padded with a space where it starts or ends with one), no entity (a code span
    shows ``&lt;`` literally); in a table row ``|`` is escaped, as GitHub's tables need even inside
    code spans (the table, not the span, removes the backslash)."""
    s = one_line(v)
    if table:
        s = s.replace("|", "\\|")
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"
