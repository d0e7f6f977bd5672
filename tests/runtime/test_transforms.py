"""Top-k → page-table transforms against a naive per-token loop (RUNTIME.md §1)."""
import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nsa_policy.runtime import (  # noqa: E402
    transform_index_page_table_decode,
    transform_index_page_table_decode_compact,
    transform_index_page_table_decode_lengths,
    transform_index_page_table_prefill,
    transform_index_page_table_prefill_compact,
    transform_index_page_table_prefill_lengths,
)
from nsa_policy.runtime.transforms import transform_into_csr, triton_available  # noqa: E402

from .helpers import naive_transform, rows_of  # noqa: E402

CUDA = torch.cuda.is_available()
TRITON_ON_GPU = CUDA and triton_available(torch.device("cuda"))
IMPLS = ["torch"] + (["triton"] if TRITON_ON_GPU else [])
DEVICE = "cuda" if CUDA else "cpu"


@st.composite
def ragged_batches(draw):
    """Random ragged prefill batches: empty requests, −1, negative and out-of-range indices,
    int32 or int64 (including values past int32), page sizes 1, 2, 4."""
    num_reqs = draw(st.integers(0, 5))
    extend_lens = draw(st.lists(st.integers(0, 4), min_size=num_reqs, max_size=num_reqs))
    width = draw(st.integers(0, 12))
    page_size = draw(st.sampled_from([1, 2, 4]))
    k = draw(st.integers(0, 9))
    dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    row_len = width * page_size
    t = sum(extend_lens)
    far = 2 ** 40 if dtype == torch.int64 else 2 ** 31 - 1
    index = st.one_of(st.integers(-3, row_len + 3), st.sampled_from([-1, far, -far]))
    topk = draw(st.lists(st.lists(index, min_size=k, max_size=k), min_size=t, max_size=t))
    # −1 = an unmapped page: its positions must come out −1, never slots −P…−1
    pages = draw(st.lists(st.lists(st.integers(-1, 1000), min_size=width, max_size=width),
                          min_size=num_reqs, max_size=num_reqs))
    page_table = torch.tensor(pages, dtype=torch.int32).reshape(num_reqs, width)
    topk_t = torch.tensor(topk, dtype=dtype).reshape(t, k)
    return page_table, topk_t, extend_lens, page_size


def packed_rows(expected):
    return [[v for v in row if v != -1] for row in expected]


@settings(max_examples=150, deadline=None)
@given(ragged_batches(), st.sampled_from(IMPLS))
def test_prefill_matches_naive_loop(batch, impl):
    page_table, topk, extend_lens, page_size = batch
    expected = naive_transform(page_table, topk, rows_of(extend_lens), page_size)
    pt, tk = page_table.to(DEVICE), topk.to(DEVICE)
    out = transform_index_page_table_prefill(pt, tk, extend_lens, page_size, impl=impl)
    assert out.dtype == torch.int32 and out.tolist() == expected
    # the device form of the lengths gives the same answer
    cu = torch.tensor([0] + [sum(extend_lens[:i + 1]) for i in range(len(extend_lens))],
                      dtype=torch.int64, device=DEVICE)
    out2 = transform_index_page_table_prefill(pt, tk, page_size=page_size, cu_extend_lens=cu, impl=impl)
    assert out2.tolist() == expected
    # and so does a device tensor of per-request lengths
    lens = torch.tensor(extend_lens, dtype=topk.dtype, device=DEVICE)
    assert transform_index_page_table_prefill(pt, tk, lens, page_size, impl=impl).tolist() == expected


@settings(max_examples=150, deadline=None)
@given(ragged_batches(), st.sampled_from(IMPLS))
def test_compact_packs_valid_slots_first(batch, impl):
    page_table, topk, extend_lens, page_size = batch
    expected = packed_rows(naive_transform(page_table, topk, rows_of(extend_lens), page_size))
    k = topk.shape[1]
    packed, counts = transform_index_page_table_prefill_compact(
        page_table.to(DEVICE), topk.to(DEVICE), extend_lens, page_size, impl=impl)
    assert counts.tolist() == [len(r) for r in expected]
    assert packed.tolist() == [r + [-1] * (k - len(r)) for r in expected]


def last_valid_plus_one(rows):
    return [max([j + 1 for j, v in enumerate(row) if v != -1], default=0) for row in rows]


@settings(max_examples=150, deadline=None)
@given(ragged_batches(), st.sampled_from(IMPLS))
def test_lengths_keep_slots_in_place_and_give_the_last_valid_position(batch, impl):
    page_table, topk, extend_lens, page_size = batch
    expected = naive_transform(page_table, topk, rows_of(extend_lens), page_size)
    slots, lengths = transform_index_page_table_prefill_lengths(
        page_table.to(DEVICE), topk.to(DEVICE), extend_lens, page_size, impl=impl)
    assert slots.tolist() == expected
    assert lengths.tolist() == last_valid_plus_one(expected)
    rows = min(page_table.shape[0], topk.shape[0])
    expected = naive_transform(page_table[:rows], topk[:rows], list(range(rows)), page_size)
    slots, lengths = transform_index_page_table_decode_lengths(
        page_table[:rows].to(DEVICE), topk[:rows].to(DEVICE), page_size, impl=impl)
    assert slots.tolist() == expected and lengths.tolist() == last_valid_plus_one(expected)


@settings(max_examples=150, deadline=None)
@given(ragged_batches(), st.data(), st.sampled_from(IMPLS))
def test_csr_rows_fill_their_planned_capacity(batch, data, impl):
    page_table, topk, extend_lens, page_size = batch
    expected = packed_rows(naive_transform(page_table, topk, rows_of(extend_lens), page_size))
    # planned capacities: usually the true count, sometimes fewer or more (a malformed top-k)
    caps = [max(0, len(r) + data.draw(st.sampled_from([0, 0, 0, -1, 1, 2]))) for r in expected]
    indptr = [0]
    for c in caps:
        indptr.append(indptr[-1] + c)
    pad = data.draw(st.integers(0, 5))
    kv_indices = torch.full((indptr[-1],), -7, dtype=torch.int32, device=DEVICE)
    cu = torch.tensor([0] + [sum(extend_lens[:i + 1]) for i in range(len(extend_lens))],
                      dtype=torch.int32, device=DEVICE)
    counts = torch.empty(len(caps), dtype=torch.int32, device=DEVICE)
    transform_into_csr(page_table.to(DEVICE), topk.to(DEVICE), cu, page_size,
                       torch.tensor(indptr, dtype=torch.int32, device=DEVICE), kv_indices,
                       pad_slot=pad, counts=counts, impl=impl)
    want = []
    for row, cap in zip(expected, caps):
        want += (row[:cap] + [pad] * cap)[:cap]
    assert kv_indices.tolist() == want
    assert counts.tolist() == [len(r) for r in expected]


@settings(max_examples=100, deadline=None)
@given(ragged_batches(), st.sampled_from(IMPLS))
def test_decode_rows_use_their_own_page_table_row(batch, impl):
    page_table, topk, _, page_size = batch
    rows = min(page_table.shape[0], topk.shape[0])
    page_table, topk = page_table[:rows], topk[:rows]
    expected = naive_transform(page_table, topk, list(range(rows)), page_size)
    out = transform_index_page_table_decode(page_table.to(DEVICE), topk.to(DEVICE), page_size, impl=impl)
    assert out.tolist() == expected
    packed, counts = transform_index_page_table_decode_compact(
        page_table.to(DEVICE), topk.to(DEVICE), page_size, impl=impl)
    assert counts.tolist() == [len(r) for r in packed_rows(expected)]


def test_preallocated_out_is_written_in_place_and_every_entry_is_written():
    pt = torch.arange(30, dtype=torch.int32).reshape(3, 10) + 100
    topk = torch.tensor([[0, 9, -1, 10], [3, -5, 2, 1]], dtype=torch.int64)
    out = torch.full((2, 4), 12345, dtype=torch.int32)
    res = transform_index_page_table_prefill(pt[:2], topk, [1, 1], out=out)
    assert res.data_ptr() == out.data_ptr()
    assert 12345 not in out.tolist()[0] + out.tolist()[1]


def test_tokens_past_the_last_request_get_minus_one():
    # cumulative offsets that cover only the first 2 of 3 rows: row 2 belongs to no request
    pt = torch.arange(10, dtype=torch.int32).reshape(1, 10)
    topk = torch.tensor([[1, 2], [3, 4], [5, 6]])
    out = transform_index_page_table_prefill(pt, topk, cu_extend_lens=torch.tensor([0, 2]), impl="torch")
    assert out.tolist() == [[1, 2], [3, 4], [-1, -1]]


@pytest.mark.parametrize("call, match", [
    (lambda pt, tk: transform_index_page_table_prefill(pt, tk, [2]), "sum to the number"),
    (lambda pt, tk: transform_index_page_table_prefill(pt, tk, [1, 2]), "one length per page_table row"),
    (lambda pt, tk: transform_index_page_table_prefill(pt, tk), "exactly one of"),
    (lambda pt, tk: transform_index_page_table_prefill(pt, tk, [3], page_size=0), "page_size"),
    (lambda pt, tk: transform_index_page_table_prefill(pt.float(), tk, [3]), "page_table must be int32"),
    (lambda pt, tk: transform_index_page_table_prefill(pt, tk[0], [3]), "topk_indices must be 2-D"),
    (lambda pt, tk: transform_index_page_table_prefill(pt, tk, [3], out=torch.empty(3, 4)), "out must be an int32"),
    (lambda pt, tk: transform_index_page_table_prefill(pt, tk, [3], impl="fast"), "impl must be one of"),
    (lambda pt, tk: transform_index_page_table_decode(pt, tk), "one page_table row per topk_indices row"),
])
def test_bad_arguments_are_named(call, match):
    pt = torch.zeros(1, 8, dtype=torch.int32)
    tk = torch.zeros(3, 4, dtype=torch.int32)
    with pytest.raises((ValueError, TypeError), match=match):
        call(pt, tk)


@pytest.mark.skipif(TRITON_ON_GPU, reason="checks the CPU refusal of an explicit triton request")
def test_explicit_triton_on_cpu_is_refused_not_silently_replaced():
    pt = torch.zeros(1, 8, dtype=torch.int32)
    tk = torch.zeros(2, 4, dtype=torch.int32)
    with pytest.raises(ValueError, match="impl='triton' cannot run"):
        transform_index_page_table_prefill(pt, tk, [2], impl="triton")
    # auto picks torch here and works
    assert transform_index_page_table_prefill(pt, tk, [2], impl="auto").shape == (2, 4)


@pytest.mark.skipif(not TRITON_ON_GPU, reason="Triton kernels need a CUDA GPU; "
                    "benchmarks/gpu_runtime_check.py runs them on the H200")
def test_triton_equals_torch_on_large_random_batches():
    gen = torch.Generator(device="cpu").manual_seed(0)
    extend = [int(x) for x in torch.randint(0, 300, (40,), generator=gen)]
    width = 5000
    pt = torch.randint(0, 1 << 20, (40, width), generator=gen, dtype=torch.int32).cuda()
    topk = torch.randint(-100, width + 100, (sum(extend), 2048), generator=gen).cuda()
    a = transform_index_page_table_prefill(pt, topk, extend, impl="triton")
    b = transform_index_page_table_prefill(pt, topk, extend, impl="torch")
    assert torch.equal(a, b)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("page_size", [1, 64])
def test_unmapped_page_gives_minus_one_and_is_not_counted(impl, page_size):
    page_table = torch.tensor([[3, -1, 5]], dtype=torch.int32, device=DEVICE)
    topk = torch.tensor([[0, page_size, 2 * page_size, 2 * page_size - 1]], dtype=torch.int32, device=DEVICE)
    out = transform_index_page_table_decode(page_table, topk, page_size, impl=impl)
    assert out.tolist() == [[3 * page_size, -1, 5 * page_size, -1]]
    packed, counts = transform_index_page_table_decode_compact(page_table, topk, page_size, impl=impl)
    assert packed.tolist() == [[3 * page_size, 5 * page_size, -1, -1]] and counts.tolist() == [2]


@pytest.mark.parametrize("impl", IMPLS)
def test_empty_rows_can_point_at_a_dummy_slot(impl):
    page_table = torch.tensor([[7, 8, 9], [4, 5, 6], [1, 2, 3]], dtype=torch.int32, device=DEVICE)
    topk = torch.tensor([[2, -1, 0], [-1, -1, -1], [5, -3, -1]], dtype=torch.int32, device=DEVICE)
    packed, counts = transform_index_page_table_decode_compact(page_table, topk, 1, impl=impl,
                                                               empty_row_slot=11)
    assert packed.tolist() == [[9, 7, -1], [11, -1, -1], [11, -1, -1]] and counts.tolist() == [2, 1, 1]
    packed, counts = transform_index_page_table_prefill_compact(page_table, topk, [1, 1, 1], impl=impl,
                                                                empty_row_slot=0)
    assert packed.tolist() == [[9, 7, -1], [0, -1, -1], [0, -1, -1]] and counts.tolist() == [2, 1, 1]
    with pytest.raises(ValueError, match="empty_row_slot"):
        transform_index_page_table_decode_compact(page_table, topk, 1, impl=impl, empty_row_slot=-1)


@pytest.mark.skipif(not TRITON_ON_GPU, reason="Triton kernels need a CUDA GPU; "
                    "benchmarks/gpu_runtime_check.py runs them on the H200")
@pytest.mark.parametrize("block,warps", [(None, None), (2048, 8), (256, 2), (512, 4)])
def test_compaction_paths_equal_torch_at_k2048(block, warps):
    """The compacting kernel's one-block path (valid-first rows stored in place, other rows
    scanned) and its looping path give torch's answer: packed rows, counts, CSR with padding,
    dummy slots for empty rows, and the in-place slots with row lengths."""
    from nsa_policy.runtime import _triton_transforms as tt

    gen = torch.Generator(device="cpu").manual_seed(3)
    width, k = 3000, 2048
    extend = [5, 0, 70, 53]
    rows = sum(extend)
    pt = torch.randint(-1, 1 << 20, (len(extend), width), generator=gen, dtype=torch.int32)
    lens = torch.randint(0, k + 1, (rows,), generator=gen)
    valid_first = torch.where(torch.arange(k)[None] < lens[:, None],
                              torch.randint(0, width, (rows, k), generator=gen), -1)
    scattered = torch.randint(-200, width + 50, (rows, k), generator=gen)
    cu = torch.tensor([0] + list(torch.cumsum(torch.tensor(extend), 0)), dtype=torch.int32)
    for topk in (valid_first, scattered, torch.cat([valid_first[: rows // 2], scattered[rows // 2:]])):
        topk = topk.to(torch.int32)
        for dummy in (None, 7):
            ref, ref_n = transform_index_page_table_prefill_compact(pt, topk, cu_extend_lens=cu, impl="torch",
                                                                    empty_row_slot=dummy)
            out, n = torch.full_like(ref, -9).cuda(), torch.full_like(ref_n, -9).cuda()
            tt.launch_transform_compact(pt.cuda(), topk.cuda(), cu.cuda(), 1, out, n, empty_row_slot=dummy,
                                        block=block, warps=warps)
            assert torch.equal(out.cpu(), ref) and torch.equal(n.cpu(), ref_n)
        ref_s, ref_l = transform_index_page_table_prefill_lengths(pt, topk, cu_extend_lens=cu, impl="torch")
        out, n = torch.full_like(ref_s, -9).cuda(), torch.full_like(ref_l, -9).cuda()
        tt.launch_transform_compact(pt.cuda(), topk.cuda(), cu.cuda(), 1, out, n, block=block, warps=warps,
                                    lengths=True)
        assert torch.equal(out.cpu(), ref_s) and torch.equal(n.cpu(), ref_l)
        caps = (ref_n + torch.randint(-2, 3, (rows,), generator=gen)).clamp(min=0)
        indptr = torch.zeros(rows + 1, dtype=torch.int32)
        indptr[1:] = torch.cumsum(caps, 0)
        want = torch.full((int(indptr[-1]),), -9, dtype=torch.int32)
        transform_into_csr(pt, topk, cu, 1, indptr, want, pad_slot=4, impl="torch")
        got = torch.full_like(want, -9).cuda()
        tt.launch_transform_compact(pt.cuda(), topk.cuda(), cu.cuda(), 1, got, None, indptr.cuda(), 4,
                                    block=block, warps=warps)
        assert torch.equal(got.cpu(), want)
