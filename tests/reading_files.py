"""Documents the reading tests and bench make themselves: PDFs with a real text layer,
a scanned one, an encrypted one, a .docx, a zip bomb.

A PDF with text is written by hand (:func:`text_pdf`): a catalog, a page tree, the
standard Helvetica font and one content stream per page drawing each line with ``Tj``,
then the cross-reference table: about what any PDF writer emits for plain text, and
pypdf reads its text layer back. pypdf itself encrypts one (:func:`encrypted_pdf`);
Pillow (installed with matplotlib) writes a page that is only an image
(:func:`scanned_pdf`), as a scanner does. python-docx writes the .docx.
"""

from __future__ import annotations

import io
import zipfile

import docx
from PIL import Image
from pypdf import PdfReader, PdfWriter


def _escaped(line: str) -> bytes:
    text = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return text.encode("cp1252")  # Helvetica's WinAnsiEncoding


def text_pdf(pages: list[str]) -> bytes:
    """A PDF of ``pages``, each drawn line by line in Helvetica (a real text layer)."""
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",  # the page tree, once the pages' numbers are known
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    kids: list[int] = []
    for text in pages:
        ops = b"\n".join(
            b"BT /F1 11 Tf 50 %d Td (%s) Tj ET" % (760 - 13 * i, _escaped(line))
            for i, line in enumerate(text.split("\n"))
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(ops), ops))
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % len(objects)
        )
        kids.append(len(objects))
    refs = b" ".join(b"%d 0 R" % k for k in kids)
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (refs, len(kids))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def encrypted_pdf(pages: list[str], *, password: str = "secret", owner: str | None = None) -> bytes:
    """:func:`text_pdf` encrypted by pypdf (RC4, no extra library); ``password=""`` with an
    ``owner`` password: encrypted for permissions only, readable by anyone."""
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(text_pdf(pages))))
    writer.encrypt(password, owner_password=owner)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def scanned_pdf(pages: int = 2) -> bytes:
    """A PDF whose pages are only pictures (no text layer), as a scanner makes them."""
    images = [Image.new("L", (400, 560), 255) for _ in range(pages)]
    out = io.BytesIO()
    images[0].save(out, "PDF", save_all=True, append_images=images[1:])
    return out.getvalue()


def word_docx() -> bytes:
    """A .docx with a title, a paragraph and a table."""
    document = docx.Document()
    document.add_heading("Quarterly report", 1)
    document.add_paragraph("Revenue grew by twelve percent in the north.")
    table = document.add_table(rows=2, cols=2)
    for (row, col), text in {
        (0, 0): "Region",
        (0, 1): "Sales",
        (1, 0): "North",
        (1, 1): "42",
    }.items():
        table.cell(row, col).text = text
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def zip_bomb_docx(inflated: int) -> bytes:
    """:func:`word_docx` with one more part of ``inflated`` zero bytes (a few hundred
    KB packed): honest headers, declaring its real size."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(word_docx())) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as bomb,
    ):
        for part in source.infolist():
            bomb.writestr(part, source.read(part))
        with bomb.open("word/media/zeros.bin", "w", force_zip64=True) as zeros:
            block = bytes(1 << 20)
            for _ in range(inflated >> 20):
                zeros.write(block)
    return out.getvalue()


def lying_zip_docx(inflated: int, declared: int) -> bytes:
    """:func:`word_docx` with a part of ``inflated`` zero bytes that declares only
    ``declared``: the size fields of both its headers rewritten after packing."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(word_docx())) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bomb,
    ):
        for part in source.infolist():
            bomb.writestr(part, source.read(part))
        bomb.writestr("word/media/zeros.bin", bytes(inflated))
    real, lie = inflated.to_bytes(4, "little"), declared.to_bytes(4, "little")
    assert out.getvalue().count(real) == 2  # the local and the central header
    packed = out.getvalue().replace(real, lie)
    with zipfile.ZipFile(io.BytesIO(packed)) as archive:
        assert archive.getinfo("word/media/zeros.bin").file_size == declared
    return packed
