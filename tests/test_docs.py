"""Generated sections of the docs match the code, verbatim."""

from pathlib import Path

import pytest

from tilewright.cli.docgen import BEGIN, END, GENERATED_DOCS, update_generated

ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize("rel", list(GENERATED_DOCS))
def test_generated_sections_are_current(rel):
    path, generate = ROOT / rel, GENERATED_DOCS[rel]
    assert update_generated(path, generate(), check=True), f"{rel} is stale: run `tilewright docs`"
    assert path.read_text().split(BEGIN)[1].split(END)[0].strip() == generate().strip()


def test_isa_doc_names_every_error_code_and_alu_op():
    from tilewright.isa import AluOp, ErrorCode
    text = (ROOT / "docs" / "isa.md").read_text()
    for member in list(ErrorCode) + list(AluOp):
        assert f"`{member.name}`" in text
