"""Hypothesis strategies for cold/MEMORY.md documents, shared by the cold format's and the cold store's specs."""

from __future__ import annotations

from hypothesis import strategies as st

# Every line break some reader splits on; memd writes only "\n".
LINE_BREAKS = ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]

PIECES = ["\n", "\r\n", "## ", "# ", "- [2024-01-01] ", "```", "~~~", "A", "B", "x", " ", "\\", "\\n", "é"]
documents = st.one_of(st.text(), st.lists(st.sampled_from(PIECES), max_size=40).map("".join))
values = st.one_of(
    st.text(), st.lists(st.sampled_from([*PIECES, *LINE_BREAKS, "\\u2028", "u2028"]), max_size=8).map("".join)
)
categories = values.filter(lambda c: c.strip() != "")

# Documents without fences, where insert_learning finds the section by searching for its heading and a commit
# updates the parsed learnings instead of parsing the document again (memd.tiers.cold_learnings).
UNFENCED = [p for p in PIECES if p not in ("```", "~~~")] + ["## A\n", "## B\n", "- [2024-02-02] y\n", "\ufeff"]
unfenced = st.lists(st.sampled_from(UNFENCED), max_size=60).map("".join)
category_names = st.sampled_from(["A", "B", "x", "A B", "é"])
