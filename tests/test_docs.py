"""docs/isa.md carries the tables generated from the spec, verbatim."""

from pathlib import Path

from tilewright.docgen import BEGIN, END, isa_tables, update_isa_doc

DOC = Path(__file__).parent.parent / "docs" / "isa.md"


def test_isa_doc_tables_are_current():
    assert update_isa_doc(DOC, check=True), "docs/isa.md is stale: run `tilewright docs`"
    text = DOC.read_text()
    assert text.split(BEGIN)[1].split(END)[0].strip() == isa_tables().strip()


def test_isa_doc_names_every_error_code_and_alu_op():
    from tilewright.isa import AluOp, ErrorCode
    text = DOC.read_text()
    for member in list(ErrorCode) + list(AluOp):
        assert f"`{member.name}`" in text
