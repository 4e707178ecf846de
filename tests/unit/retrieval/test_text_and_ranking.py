"""The pure parts of retrieval: text extracted by kind (a PDF through pypdf), chunks with their overlap, attribute
filters as the SDK types them, scores and the weighted reciprocal rank fusion, and the vectors' nearest chunks."""

from __future__ import annotations

import pytest

from app.read_cache.vectors import StoreVectorCache
from app.retrieval.chunking import Chunking, chunk_text
from app.retrieval.extraction import ExtractionError, extract_text
from app.retrieval.filters import keep, matches, parse_filter
from app.retrieval.ranking import RankingOptions, combine, fuse
from app.retrieval.terms import coverage, query_words, rewrite
from app.retrieval.vectors import nearest_in, pack, store_vectors


def pdf_with_text(text: str) -> bytes:
    """A one-page PDF that shows `text` in Helvetica (its cross-reference table at the right offsets)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def test_text_is_extracted_by_kind() -> None:
    assert "Quarterly report" in extract_text("report.pdf", pdf_with_text("Quarterly report for the board"))
    assert extract_text("notes.md", b"# Title\n\nbody") == "# Title\n\nbody"
    assert "Walrus" in extract_text("page.htm", b"<body><script>x()</script><p>Walrus</p></body>")
    assert "x()" not in extract_text("page.htm", b"<body><script>x()</script><p>Walrus</p></body>")
    assert extract_text("main.rs", b"fn main() {}") == "fn main() {}"
    with pytest.raises(ExtractionError) as binary:
        extract_text("blob", b"\xff\xfe\x00\x01")
    assert binary.value.code == "unsupported_file"
    with pytest.raises(ExtractionError) as broken:
        extract_text("x.pdf", b"%PDF-1.7 broken")
    assert broken.value.code == "invalid_file"


def test_chunks_overlap_and_keep_the_text_between_their_tokens() -> None:
    text = " ".join(f"w{index}" for index in range(250))
    chunks = chunk_text(text, Chunking(max_tokens=100, overlap_tokens=40))
    assert [chunk.split()[0] for chunk in chunks] == ["w0", "w60", "w120", "w180"]
    assert all(len(chunk.split()) <= 100 for chunk in chunks) and chunks[-1].endswith("w249")
    assert chunk_text("Hello, world!", Chunking(100, 0)) == ["Hello, world!"]
    assert chunk_text("  \n ", Chunking()) == []


def test_filters_compare_as_documented() -> None:
    attributes = {"topic": "garden", "year": 2026, "draft": False}
    assert matches(parse_filter({"type": "eq", "key": "topic", "value": "garden"}), attributes)
    assert matches(parse_filter({"type": "gt", "key": "year", "value": 2025.5}), attributes)
    assert not matches(parse_filter({"type": "gt", "key": "topic", "value": 3}), attributes)  # other types
    assert matches(parse_filter({"type": "ne", "key": "absent", "value": "x"}), attributes)
    assert not matches(parse_filter({"type": "eq", "key": "absent", "value": "x"}), attributes)
    assert matches(parse_filter({"type": "eq", "key": "draft", "value": False}), attributes)
    assert not matches(parse_filter({"type": "eq", "key": "year", "value": True}), attributes)
    assert matches(parse_filter({"type": "in", "key": "year", "value": [2025, 2026]}), attributes)
    assert matches(parse_filter({"type": "nin", "key": "topic", "value": ["money"]}), attributes)
    compound = parse_filter(
        {
            "type": "or",
            "filters": [{"type": "eq", "key": "topic", "value": "x"}, {"type": "lte", "key": "year", "value": 2026}],
        }
    )
    assert keep(compound, [("a", attributes), ("b", {"year": 2030}), ("c", None)]) == ["a"]
    for bad in (
        {"type": "eq", "key": "k"},
        {"type": "in", "key": "k", "value": "x"},
        {"type": "and", "filters": []},
        {"type": "xor", "filters": [{"type": "eq", "key": "k", "value": 1}]},
        {"type": "eq", "key": "k", "value": {"nested": 1}},
        {"type": "gt", "key": "k", "value": 10**400},
    ):
        with pytest.raises(ValueError):
            parse_filter(bad)
    deep: dict[str, object] = {"type": "eq", "key": "k", "value": 1}
    for _ in range(10):
        deep = {"type": "and", "filters": [deep]}
    with pytest.raises(ValueError, match="nest"):
        parse_filter(deep)


def test_scores_and_fusion() -> None:
    assert coverage(["tomatoes", "sun"], "A tomato needs sun.") == 1.0
    assert coverage(["watering", "cats"], "Water it daily") == 0.5 and coverage([], "x") == 0
    both = fuse([(1, 0.9), (2, 0.8)], [(1, 3.0), (3, 2.0)], RankingOptions())
    assert both[0][0] == 1 and both[0][1] == pytest.approx(1.0) and {chunk for chunk, _ in both} == {1, 2, 3}
    text_heavy = fuse([(2, 0.9), (1, 0.1)], [(1, 3.0), (2, 2.0)], RankingOptions(embedding_weight=0.1, text_weight=1))
    assert text_heavy[0][0] == 1
    assert combine(None, [(5, 0.5)], RankingOptions()) == [(5, 0.5)]
    assert combine([(7, 0.5)], [(5, 1.0)], RankingOptions(ranker="none")) == [(7, 0.5)]


def test_queries_and_their_rewrite() -> None:
    assert query_words("What is THE garden, the garden?") == ["what", "is", "the", "garden"]
    assert rewrite("What is the garden?") == "garden"
    assert rewrite("what is it") == "what is it"  # nothing but function words: kept


def test_nearest_vectors_best_first() -> None:
    rows = [(1, "a", pack([1.0, 0.0])), (2, "b", pack([0.0, 1.0])), (3, "b", pack([0.7, 0.7]))]
    # A row of another width (another model's) is left out.
    store = store_vectors((4, 4), [*rows, (4, "a", pack([1.0, 0.0, 0.0]))])
    assert store.matrix.shape == (3, 2)
    best = nearest_in([1.0, 0.1], [store], None, 2)
    assert [chunk for chunk, _ in best] == [1, 3] and best[0][1] == pytest.approx(0.995, abs=1e-3)
    assert [chunk for chunk, _ in nearest_in([1.0, 0.1], [store], ["b"], 5)] == [3, 2]
    assert nearest_in([0.0, 0.0], [store], None, 2) == []
    assert nearest_in([1.0, 0.0], [store_vectors((0, 0), [])], None, 2) == []


def test_kept_vectors_hold_while_their_revision_does_within_a_size() -> None:
    small = store_vectors((1, 1), [(1, "a", pack([1.0, 0.0]))])
    cache = StoreVectorCache(small.size_bytes * 2)
    cache.put("vs_a", small)
    assert cache.get("vs_a", (1, 1)) is small
    assert cache.get("vs_a", (2, 5)) is None  # a chunk was added since
    cache.put("vs_b", small)
    cache.put("vs_c", small)  # over the size: the least recently used goes
    assert cache.get("vs_a", (1, 1)) is None and cache.get("vs_c", (1, 1)) is small
    assert StoreVectorCache(0).get("vs_a", (1, 1)) is None
