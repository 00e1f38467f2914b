// Row assembly: how every GPU index builder turns what it selected for one index row into the
// SparseIndex row that RowKeys::Normalize makes on the CPU (the CPU builders' canonical form):
// the ranges are the maximal runs of keys that lie in a given range or in a run of >= 16
// consecutive selected "free" columns (ranges that overlap or touch merge); the columns are the
// other selected keys; both in key order and below the row's key_end. Host and device code (no
// CUDA types), so the CPU tests check both input forms against RowKeys::Normalize.
//
// Two input forms, each the fast one for the builders that use it (same output):
//  * Spans and lines (MergeRow): sorted slash-offset clusters, at most two extra ranges and
//    sorted column runs, walked with O(1) state; on the GPU one warp per (head slot, query
//    block), each lane walking one part of the row's keys (MergePart: its window plus min_run
//    keys of halo) and the lanes' pieces stitched, first to count, then to fill. Work ~ the
//    lines the row reaches, not the keys: vertical_slash and flex_prefill's vertical-slash
//    heads.
//  * Key bitmaps (the word logic below + the CTA kernel of row_assembly.cuh): any key set, as
//    32-key words of "range" bits and "column" bits; one CTA per row walks key_end / 32 words in
//    segments. sample_attention, anchor and saap, whose keys come from blocks, stripes and bucket
//    members in no useful order. A bitmap source whose rows are unions of spans with no columns
//    (sample_attention) also gives them as spans: those rows are sorted and merged by one warp
//    each instead (row_assembly.cuh, "span rows"; same output).
// dense, a_shape, block_sparse and flex_prefill's query-aware heads write ranges of whole key
// blocks that are canonical as built (disjoint, sorted, never touching), so they need neither.
#ifndef SPATTN_KERNELS_CUDA_COMMON_ROW_ASSEMBLY_H_
#define SPATTN_KERNELS_CUDA_COMMON_ROW_ASSEMBLY_H_

#include <cstdint>

#include "kernels/cuda/common/lower_bound.h"

#if defined(__CUDACC__)
#define SPATTN_HD __host__ __device__ __forceinline__
#else
#define SPATTN_HD inline
#endif

namespace spattn {
namespace row_assembly {

// ---- Spans and lines ---------------------------------------------------------------------------
//
// What a row holds here (AddVerticalSlash + Normalize, kernels/builders/estimate.h): with
// segments = each slash offset o's keys [first_pos - o, last_pos - o] and `extra` ranges (flex's
// kept blocks), all clipped to [0, key_end), and columns < key_end not inside a segment or extra
// range ("free" columns): ranges are the maximal runs of (segments ∪ extra ∪ runs of >= min_run
// consecutive free columns) — touching spans merge — and the columns are the other free columns.

struct RowGeo {
  int first_pos;      // key position of the block's first query row
  int last_pos;       // of its last row
  int key_end;        // keys [0, key_end) are allowed for some row of the block
  int key_begin = 0;  // walks see only keys [key_begin, key_end) (a part's window, below)
};

// Up to two extra ranges, sorted by start, each clipped to key_end when walked.
struct ExtraRanges {
  int n = 0;
  int s0 = 0, e0 = 0, s1 = 0, e1 = 0;
};

// flex_prefill's kept blocks of a row: key block 0 and the blocks holding its own positions.
SPATTN_HD ExtraRanges KeptBlocks(const RowGeo& g, int block) {
  ExtraRanges x;
  x.n = 2;
  x.s0 = 0;
  x.e0 = block;
  x.s1 = g.first_pos / block * block;
  x.e1 = (g.last_pos / block + 1) * block;
  return x;
}

struct ExtraWalk {
  ExtraRanges r;
  int i;
  int key_begin, key_end;
  SPATTN_HD void Init(const ExtraRanges& x, int b, int e) {
    r = x;
    i = 0;
    key_begin = b;
    key_end = e;
  }
  SPATTN_HD bool Next(int* s, int* e) {
    while (i < r.n) {
      const int rs = i == 0 ? r.s0 : r.s1;
      const int re = i == 0 ? r.e0 : r.e1;
      ++i;
      const int st = rs < key_begin ? key_begin : rs;
      const int en = re > key_end ? key_end : re;
      if (en > st) {
        *s = st;
        *e = en;
        return true;
      }
    }
    return false;
  }
};

// Groups of a sorted array: maximal runs where consecutive values differ by at most `gap`,
// written as [lo, hi] pairs (inclusive) to out[2 * k], out[2 * k + 1]; returns their count.
// Offsets grouped with gap = the row's block length L are the "clusters" whose slash segments
// touch (o1 - o2 <= L); columns grouped with gap 1 are runs of consecutive keys.
SPATTN_HD int GroupRuns(const int32_t* a, int n, int gap, int32_t* out) {
  int k = 0;
  for (int i = 0; i < n; ++i) {
    if (i == 0 || a[i] - a[i - 1] > gap) {
      out[2 * k] = a[i];
      ++k;
    }
    out[2 * k - 1] = a[i];
  }
  return k;
}

// Slash segments in key order, one per cluster of offsets (clusters grouped with the row's
// block length, stored as [lo, hi] pairs in increasing order): cluster [lo, hi] covers keys
// [first_pos - top, last_pos - lo] with top its largest offset <= last_pos (offsets above
// last_pos put their segment before key 0), clipped to [0, key_end); walked from the largest
// offsets down until a segment starts at or after key_end. The union per cluster equals the
// union of its offsets' segments, since consecutive ones touch.
struct SlashWalk {
  const int32_t* cl;   // [2 * n] cluster bounds
  const int32_t* off;  // the offsets themselves (for the first cluster's top)
  int n_off;
  int i;
  bool first;
  int first_pos, last_pos, key_begin, key_end;
  SPATTN_HD void Init(const int32_t* clusters, int n_clusters, const int32_t* offsets, int n,
                      const RowGeo& g) {
    cl = clusters;
    off = offsets;
    n_off = n;
    first_pos = g.first_pos;
    last_pos = g.last_pos;
    key_begin = g.key_begin;
    key_end = g.key_end;
    first = true;
    // First cluster with lo > last_pos - key_begin: the ones from there on are above last_pos
    // or end at or before key_begin (a cluster's segment ends at last_pos - lo + 1).
    int lo = 0, hi = n_clusters;
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (cl[2 * mid] <= last_pos - key_begin) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    i = lo - 1;
  }
  SPATTN_HD bool Next(int* s, int* e) {
    while (i >= 0) {
      const int c_lo = cl[2 * i];
      int top = cl[2 * i + 1];
      if (first) {
        first = false;
        if (top > last_pos) {  // the largest offset <= last_pos
          int lo = 0, hi = n_off;
          while (lo < hi) {
            const int mid = (lo + hi) >> 1;
            if (off[mid] <= last_pos) {
              lo = mid + 1;
            } else {
              hi = mid;
            }
          }
          top = off[lo - 1];
        }
      }
      int st = first_pos - top;
      if (st < key_begin) st = key_begin;
      int en = last_pos - c_lo + 1;
      if (en > key_end) en = key_end;
      if (st >= key_end) {
        i = -1;
        return false;
      }
      --i;
      if (en > st) {
        *s = st;
        *e = en;
        return true;
      }
    }
    return false;
  }
};

// The lines of one row: offsets (increasing) with their clusters for this row's block length,
// and the column runs ([lo, hi] pairs of consecutive selected keys, increasing).
struct RowLines {
  const int32_t* offsets = nullptr;
  int n_off = 0;
  const int32_t* clusters = nullptr;
  int n_clusters = 0;
  const int32_t* col_runs = nullptr;
  int n_runs = 0;
};

// Extra ∪ slash spans in start order (two sorted streams merged).
struct SpanWalk {
  ExtraWalk x;
  SlashWalk sl;
  bool hx, hs;
  int xs, xe, ss, se;
  SPATTN_HD void Init(const ExtraRanges& extra, const RowLines& l, const RowGeo& g) {
    x.Init(extra, g.key_begin, g.key_end);
    sl.Init(l.clusters, l.n_clusters, l.offsets, l.n_off, g);
    hx = x.Next(&xs, &xe);
    hs = sl.Next(&ss, &se);
  }
  SPATTN_HD bool Next(int* s, int* e) {
    if (hx && (!hs || xs <= ss)) {
      *s = xs;
      *e = xe;
      hx = x.Next(&xs, &xe);
      return true;
    }
    if (hs) {
      *s = ss;
      *e = se;
      hs = sl.Next(&ss, &se);
      return true;
    }
    return false;
  }
};

// Merged blocks of extra ∪ slash spans in key order: spans that overlap or touch are one block.
// Blocks are disjoint and never touch.
struct BlockWalk {
  SpanWalk spans;
  bool has;  // a span read ahead: [ns, ne)
  int ns, ne;
  SPATTN_HD void Init(const ExtraRanges& extra, const RowLines& l, const RowGeo& g) {
    spans.Init(extra, l, g);
    has = spans.Next(&ns, &ne);
  }
  SPATTN_HD bool Next(int* s, int* e) {
    if (!has) return false;
    const int bs = ns;
    int be = ne;
    while ((has = spans.Next(&ns, &ne)) && ns <= be) {
      if (ne > be) be = ne;
    }
    *s = bs;
    *e = be;
    return true;
  }
};

// Walks one row: sink.Range(start, end) for each final range in key order, sink.Cols(a, b) for
// each run [a, b) of final columns in key order. One walk of the span blocks: before each block
// (and after the last one, up to key_end) the column runs' pieces in the gap are the free
// columns, a piece of >= min_run keys a range (merged with the block or piece it touches), a
// shorter one columns; the block itself is a range.
template <class Sink>
SPATTN_HD void MergeRow(const RowGeo& g, const ExtraRanges& extra, const RowLines& lines,
                        int min_run, Sink& sink) {
  BlockWalk blocks;
  blocks.Init(extra, lines, g);
  const int32_t* runs = lines.col_runs;
  const int n = lines.n_runs;
  int k = 0;
  {
    int hi = n;  // first run that reaches key_begin
    while (k < hi) {
      const int mid = (k + hi) >> 1;
      if (runs[2 * mid + 1] < g.key_begin) {
        k = mid + 1;
      } else {
        hi = mid;
      }
    }
  }
  bool have = false;
  int cur_s = 0, cur_e = 0;
  auto add = [&](int s, int e) {
    if (have && s <= cur_e) {
      if (e > cur_e) cur_e = e;
    } else {
      if (have) sink.Range(cur_s, cur_e);
      cur_s = s;
      cur_e = e;
      have = true;
    }
  };
  int bs = 0, be = 0;
  bool hb = blocks.Next(&bs, &be);
  int walked = g.key_begin;  // keys before this are done (the last block's end)
  for (;;) {
    const int gap_end = hb ? bs : g.key_end;
    while (k < n) {
      const int r_lo = runs[2 * k];
      if (r_lo >= g.key_end) {
        k = n;
        break;
      }
      int b = runs[2 * k + 1] + 1;
      if (b > g.key_end) b = g.key_end;
      const int a = r_lo > walked ? r_lo : walked;
      if (a >= b) {
        ++k;
        continue;
      }
      if (a >= gap_end) break;  // in or after the block
      const int free_end = b < gap_end ? b : gap_end;
      if (free_end - a >= min_run) {
        add(a, free_end);
      } else {
        sink.Cols(a, free_end);
      }
      if (free_end < b) break;  // the run goes on in the block
      ++k;
    }
    if (!hb) break;
    add(bs, be);
    walked = be;
    hb = blocks.Next(&bs, &be);
  }
  if (have) sink.Range(cur_s, cur_e);
}

// Sinks.
struct CountSink {
  int ranges = 0, cols = 0;
  SPATTN_HD void Range(int, int) { ++ranges; }
  SPATTN_HD void Cols(int a, int b) {
    if (b > a) cols += b - a;
  }
};

struct FillSink {
  int32_t* range_start;
  int32_t* range_len;
  int32_t* col_idx;
  int r = 0, c = 0;
  SPATTN_HD void Range(int s, int e) {
    range_start[r] = s;
    range_len[r] = e - s;
    ++r;
  }
  SPATTN_HD void Cols(int a, int b) {
    for (int t = a; t < b; ++t) col_idx[c++] = t;
  }
};

// ---- One row in parts (a warp per row on the GPU) ----------------------------------------------
//
// Part l of `parts` owns the keys [lo, hi) of an equal split of [0, key_end) (trailing parts may
// be empty, never one between two non-empty ones). It walks MergeRow over its window widened by
// min_run keys on each side (so a run of free columns that reaches into the window is long in
// the walk exactly when it is long in the row) and keeps what falls in [lo, hi): the row's
// ranges cut at the window's edges, and its columns there. Stitching: a part's first range
// continues the previous part's last one when that ends at hi and this starts at lo (both parts
// have ranges); the row's ranges are the parts' ranges less those continuations, in part order.

SPATTN_HD void PartWindow(int key_end, int parts, int part, int* lo, int* hi) {
  const int w = (key_end + parts - 1) / parts;
  int a = part * w, b = a + w;
  if (a > key_end) a = key_end;
  if (b > key_end) b = key_end;
  *lo = a;
  *hi = b;
}

// Parts balanced by work (session 38). A part's walk costs about the lines its window meets
// (column runs and offset clusters), not its keys, and a row's lines are unevenly spread over its
// keys: with equal key windows a warp ran 5-7 busy lanes of 32. Here the cuts are placed at equal
// counts of the row's "items" (the column runs below key_end by their first key, the clusters
// whose segment meets [0, key_end) by their segment's start, both sorted by key: one merge-path
// search a cut). Any partition of [0, key_end) into consecutive non-empty windows (then empty
// ones at key_end) gives the same row, so only the walk's balance changes.
struct RowItems {
  int n_runs;  // column runs starting below key_end: runs [0, n_runs)
  int cl_lo;   // clusters [cl_lo, cl_hi) have a segment that meets [0, key_end)
  int cl_hi;
};

SPATTN_HD RowItems CountRowItems(const RowGeo& g, const RowLines& l) {
  using spattn::cuda::LowerBoundBy;
  RowItems it;
  it.n_runs = LowerBoundBy(0, l.n_runs, [&](int i) { return l.col_runs[2 * i] < g.key_end; });
  // Clusters with lo <= last_pos (the others end before key 0).
  it.cl_hi = LowerBoundBy(0, l.n_clusters, [&](int i) { return l.clusters[2 * i] <= g.last_pos; });
  // Of those, the ones whose segment starts at or after key_end (their top is too small).
  it.cl_lo = LowerBoundBy(0, it.cl_hi, [&](int i) {
    return g.first_pos - l.clusters[2 * i + 1] >= g.key_end;
  });
  return it;
}

// The key of cut j of `parts` (0 for j = 0, key_end for j = parts): the first key of item
// j * items / parts in key order, clipped to [0, key_end]. Non-decreasing in j; may repeat.
SPATTN_HD int PartCut(const RowGeo& g, const RowLines& l, const RowItems& it, int parts, int j) {
  if (j <= 0) return 0;
  const int na = it.n_runs, nb = it.cl_hi - it.cl_lo;
  const int total = na + nb;
  if (j >= parts || total == 0) return g.key_end;
  const int d = static_cast<int>(static_cast<int64_t>(j) * total / parts);
  // Item q of the clusters in key order: cluster cl_hi - 1 - q, start first_pos - its top.
  auto b_key = [&](int q) { return g.first_pos - l.clusters[2 * (it.cl_hi - 1 - q) + 1]; };
  auto a_key = [&](int i) { return l.col_runs[2 * i]; };
  // How many of the first d items are runs (ties: runs first): a merge-path search.
  const int lo = spattn::cuda::LowerBoundBy(d - nb > 0 ? d - nb : 0, d < na ? d : na,
                                            [&](int i) { return a_key(i) <= b_key(d - 1 - i); });
  int key;
  if (lo < na && (d - lo >= nb || a_key(lo) <= b_key(d - lo))) {
    key = a_key(lo);
  } else {
    key = b_key(d - lo);
  }
  if (key < 0) key = 0;
  if (key > g.key_end) key = g.key_end;
  return key;
}

// Window bounds from the cuts: bound j = min(key_end, j + max over i <= j of (cut_i - i)),
// strictly increasing until key_end (no empty window between two non-empty ones); part j owns
// [bound j, bound j + 1), the last part up to key_end. `max_shift` is that running maximum.
SPATTN_HD int PartBound(int key_end, int j, int max_shift) {
  const int b = j + max_shift;
  return b < key_end ? b : key_end;
}

// What one part found: its ranges (cut to the window) and columns, and whether its first range
// starts at lo, its last ends at hi. Fill mode also writes them: range j of the part to index
// j - merge_prev of range_start / range_end (range ENDS: the caller makes lengths once every
// part has written), leaving out the start of a continuation (merge_prev) and the end of a range
// the next part continues (merge_next); columns in order from col_idx.
struct PartSink {
  int lo = 0, hi = 0;
  int ranges = 0, cols = 0;
  bool starts_at_lo = false, ends_at_hi = false;
  int32_t* range_start = nullptr;  // fill mode when set
  int32_t* range_end = nullptr;
  int32_t* col_idx = nullptr;
  bool merge_prev = false, merge_next = false;
  int n_ranges = 0;  // fill: the part's ranges (from its count)
  SPATTN_HD void Range(int s, int e) {
    if (s < lo) s = lo;
    if (e > hi) e = hi;
    if (e <= s) return;
    if (ranges == 0) starts_at_lo = s == lo;
    ends_at_hi = e == hi;
    if (range_start != nullptr) {
      const int j = ranges - (merge_prev ? 1 : 0);
      if (!(ranges == 0 && merge_prev)) range_start[j] = s;
      if (!(ranges == n_ranges - 1 && merge_next)) range_end[j] = e;
    }
    ++ranges;
  }
  // The columns [a, b) that fall in [lo, hi).
  SPATTN_HD void Cols(int a, int b) {
    if (a < lo) a = lo;
    if (b > hi) b = hi;
    if (b <= a) return;
    if (col_idx != nullptr) {
      for (int t = a; t < b; ++t) col_idx[cols + (t - a)] = t;
    }
    cols += b - a;
  }
};

// Walks part [lo, hi) of the row into sink (sink.lo / hi set here).
SPATTN_HD void MergePart(const RowGeo& g, const ExtraRanges& extra, const RowLines& lines,
                         int min_run, int lo, int hi, PartSink& sink) {
  sink.lo = lo;
  sink.hi = hi;
  if (lo >= hi) return;
  RowGeo w = g;
  w.key_begin = lo - min_run > g.key_begin ? lo - min_run : g.key_begin;
  w.key_end = hi + min_run < g.key_end ? hi + min_run : g.key_end;
  MergeRow(w, extra, lines, min_run, sink);
}

// Whether a part's first range continues the previous part's last one.
SPATTN_HD bool ContinuesPrev(int prev_ranges, bool prev_ends_at_hi, int ranges, bool starts_at_lo) {
  return prev_ranges > 0 && prev_ends_at_hi && ranges > 0 && starts_at_lo;
}

// The offsets forced into vertical_slash's top-k: forced_diagonals offsets taken by distance
// from the main diagonal, 0, 1, -1, 2, -2, ... within [min_offset, max_offset] — an interval
// [*lo, *hi) of offsets; returns how many.
SPATTN_HD int ForcedOffsets(int forced_diagonals, int min_offset, int max_offset, int* lo,
                            int* hi) {
  int a = 1, b = 0;  // empty interval [a, b] (inclusive) grown around 0
  int count = 0;
  const int reach = max_offset > -min_offset ? max_offset : -min_offset;
  for (int dist = 0; dist <= reach && count < forced_diagonals; ++dist) {
    for (int sign = 0; sign < 2 && count < forced_diagonals; ++sign) {
      if (dist == 0 && sign == 1) break;
      const int o = sign == 0 ? dist : -dist;
      if (o < min_offset || o > max_offset) continue;
      if (count == 0) {
        a = o;
        b = o;
      } else {
        if (o < a) a = o;
        if (o > b) b = o;
      }
      ++count;
    }
  }
  *lo = a;
  *hi = b + 1;
  if (count == 0) *hi = *lo;
  return count;
}

// ---- Key bitmaps -------------------------------------------------------------------------------
//
// A row's keys are a bitmap of 32-key words; "range" bits and "column" bits become the row.
// Plain functions, no state; the kernel that drives them is row_assembly.cuh.

// Bits of key word `word` (keys 32 word .. 32 word + 31) below key_end; 0 for words before 0 or
// past the end.
SPATTN_HD uint32_t WordMask(int64_t word, int key_end) {
  if (word < 0) return 0u;
  const int64_t lo = word * 32;
  if (lo >= key_end) return 0u;
  if (lo + 32 <= key_end) return 0xffffffffu;
  return (1u << static_cast<int>(key_end - lo)) - 1u;
}

// Bits of word `word` inside the key span [start, end) (0 when they do not meet).
SPATTN_HD uint32_t SpanBits(int64_t word, int64_t start, int64_t end) {
  const int64_t a = start > word * 32 ? start - word * 32 : 0;
  const int64_t b = end < word * 32 + 32 ? end - word * 32 : 32;
  if (a >= b) return 0u;
  return (b == 32 ? 0xffffffffu : ((1u << b) - 1u)) & ~((1u << a) - 1u);
}

// Bits of `cur` that lie in a run of >= 16 consecutive set bits of the bit stream prev|cur|next
// (prev holds the 32 keys before cur, next the 32 after): RowKeys::Normalize's min_run of 16.
SPATTN_HD uint32_t LongRuns16(uint32_t prev, uint32_t cur, uint32_t next) {
  // v = stream bits [16, 80): prev's high half, cur, next's low half.
  const uint64_t v = static_cast<uint64_t>(prev >> 16) | (static_cast<uint64_t>(cur) << 16) |
                     (static_cast<uint64_t>(next & 0xffffu) << 48);
  uint64_t e = v & (v >> 1);  // bit p: v[p .. p+15] all set (valid for p <= 48)
  e &= e >> 2;
  e &= e >> 4;
  e &= e >> 8;
  uint64_t d = e | (e << 1);  // bit q: some run of 16 starts in [q - 15, q]
  d |= d << 2;
  d |= d << 4;
  d |= d << 8;
  return static_cast<uint32_t>(d >> 16);
}

// The final bits of one word from its range bits r and column bits c and those of its two
// neighbours: f = keys in ranges (the given ranges and long column runs), cols = gathered keys.
SPATTN_HD void FinalBits(uint32_t r_prev, uint32_t c_prev, uint32_t r, uint32_t c, uint32_t r_next,
                         uint32_t c_next, uint32_t* f, uint32_t* cols) {
  const uint32_t kp = c_prev & ~r_prev, kc = c & ~r, kn = c_next & ~r_next;
  const uint32_t l = LongRuns16(kp, kc, kn);
  *f = r | l;
  *cols = kc & ~l;
}

// Range starts (bit b: a range starts at key b) and ends (bit b: a range ends at key b,
// exclusive) of word f given the previous word of the stream.
SPATTN_HD void RangeEvents(uint32_t f_prev, uint32_t f, uint32_t* starts, uint32_t* ends) {
  const uint32_t shifted = (f << 1) | (f_prev >> 31);  // bit b: key b - 1 is in a range
  *starts = f & ~shifted;
  *ends = ~f & shifted;
}

// Span rows: the most spans a row may have to take the span kernel (a warp's shared buffer).
constexpr int kAsmSpanCap = 512;

// Where the bitmap assembler writes. Count pass: per slot row (slot * num_blocks + block) the
// number of ranges and columns. Fill pass: the entries at the scanned offsets.
struct AsmOut {
  int num_blocks = 0;
  int64_t* count_ranges = nullptr;      // [rows]
  int64_t* count_cols = nullptr;        // [rows]
  const int64_t* off_ranges = nullptr;  // [rows + 1] exclusive prefix of count_ranges
  const int64_t* off_cols = nullptr;    // [rows + 1]
  int32_t* range_start = nullptr;
  int32_t* range_len = nullptr;
  int32_t* col_idx = nullptr;
  // [units * kAsmRecWords] words for the assembler's row records, for a source that declares
  // kAsmRecords (row_assembly.cuh; null for the others): the count launch writes every unit's
  // record there first, both passes read it a row ahead instead of running the source's Begin on
  // thread 0 per row. The fill launch reads the records the count launch wrote: the source's
  // inputs must not change between the two.
  uint32_t* rec = nullptr;
  // Kept words (row_assembly.cuh, "kept words"): where set, the count pass stores the final
  // range and column words of units [0, keep_units) whose rows have fewer than keep_stride key
  // words (keep_stride a multiple of 8), and the fill pass reads them instead of building the
  // row's bitmaps again. Per unit (AsmKeepUnitWords(keep_stride) words, 16-byte aligned): the
  // final range words, the final column words (keep_stride each), then
  // AsmKeepFlagWords(keep_stride) flag words (bit c: chunk c of 8 words holds a set bit; chunks
  // without one are not stored). Both launches must see the same three fields.
  uint32_t* keep = nullptr;
  int64_t keep_units = 0;
  int64_t keep_stride = 0;
  // Span rows (row_assembly.cuh, "span rows"): for a source that declares kAsmSpans, the units
  // whose rows have at most span_cap spans (<= kAsmSpanCap; 0: none) are assembled from their
  // sorted spans, one warp a row, and the bitmap kernel skips them. Both launches must see the
  // same value (LaunchAssemble lowers it to SPATTN_ASM_SPAN_CAP where that is set).
  int span_cap = kAsmSpanCap;
  // Optional, one word the launches own: the count launch zeroes it and its span kernel counts
  // the rows it leaves to the bitmap kernel there; both bitmap launches return at once where it
  // reads 0 (no row of theirs). Null: the bitmap launches walk every unit and skip span rows.
  uint32_t* span_rest = nullptr;
};
// Words of one row record (a source's Shared state and RowCtx; row_assembly.cuh checks the size).
constexpr int kAsmRecWords = 96;

// Kept words: flag words per unit for a stride of `stride` words (one bit per 8-word chunk),
// words per unit, and the stride for rows of up to `max_key_end` keys.
SPATTN_HD int64_t AsmKeepFlagWords(int64_t stride) { return (stride / 8 + 31) / 32; }
SPATTN_HD int64_t AsmKeepUnitWords(int64_t stride) {  // whole 16-byte lines
  return 2 * stride + (AsmKeepFlagWords(stride) + 3) / 4 * 4;
}
SPATTN_HD int64_t AsmKeepStride(int64_t max_key_end) {
  return ((max_key_end + 31) / 32 + 1 + 7) / 8 * 8;
}

}  // namespace row_assembly
}  // namespace spattn

#undef SPATTN_HD

#endif  // SPATTN_KERNELS_CUDA_COMMON_ROW_ASSEMBLY_H_
