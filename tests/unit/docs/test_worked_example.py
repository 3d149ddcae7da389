"""The architecture page's worked example lists a real codec file: it must stay equal to it."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_worked_codec_listing_is_the_file():
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page[page.index("## Worked example: a new codec"):]
    listing = re.search(r"```python\n(.*?)\n\s*```", section, re.S).group(1)
    unindented = "\n".join(line[3:] if line.startswith("   ") else line.strip() for line in listing.splitlines())
    assert unindented.strip() == (ROOT / "psgd" / "wire" / "codecs" / "int8.py").read_text().strip()
