// One index row of vertical_slash / flex_prefill (vertical-slash heads), computed in one pass
// over the row's selected lines with O(1) state: the GPU builders run it once per (head slot,
// query block) thread, first to count, then to fill. Host and device code (no CUDA types), so the
// CPU tests check it against RowKeys::Normalize.
//
// What a row holds (the canonical form of AddVerticalSlash + Normalize, estimate.h): with
// segments = each slash offset o's keys [first_pos - o, last_pos - o] and `extra` ranges (flex's
// kept blocks), all clipped to [0, key_end), and columns < key_end not inside a segment or extra
// range ("free" columns): ranges are the maximal runs of (segments ∪ extra ∪ runs of >= min_run
// consecutive free columns) — touching spans merge — and the columns are the other free columns.
#ifndef SPATTN_KERNELS_CUDA_ROW_MERGE_A_H_
#define SPATTN_KERNELS_CUDA_ROW_MERGE_A_H_

#include <cstdint>

#if defined(__CUDACC__)
#define SPATTN_HD __host__ __device__ __forceinline__
#else
#define SPATTN_HD inline
#endif

namespace spattn {
namespace rowmerge {

struct RowGeo {
  int first_pos;  // key position of the block's first query row
  int last_pos;   // of its last row
  int key_end;    // keys [0, key_end) are allowed for some row of the block
};

// Up to two extra ranges, sorted by start, each clipped to key_end when walked.
struct ExtraRanges {
  int n = 0;
  int start[2] = {0, 0};
  int end[2] = {0, 0};
};

// flex_prefill's kept blocks of a row: key block 0 and the blocks holding its own positions.
SPATTN_HD ExtraRanges KeptBlocks(const RowGeo& g, int block) {
  ExtraRanges x;
  x.n = 2;
  x.start[0] = 0;
  x.end[0] = block;
  x.start[1] = g.first_pos / block * block;
  x.end[1] = (g.last_pos / block + 1) * block;
  return x;
}

struct ExtraWalk {
  ExtraRanges r;
  int i;
  int key_end;
  SPATTN_HD void Init(const ExtraRanges& x, int e) {
    r = x;
    i = 0;
    key_end = e;
  }
  SPATTN_HD bool Next(int* s, int* e) {
    while (i < r.n) {
      const int st = r.start[i] < 0 ? 0 : r.start[i];
      const int en = r.end[i] > key_end ? key_end : r.end[i];
      ++i;
      if (en > st) {
        *s = st;
        *e = en;
        return true;
      }
    }
    return false;
  }
};

// Slash segments in key order: offsets are stored increasing, walked from the largest that
// reaches key 0 (o <= last_pos) down, until a segment starts at or after key_end.
struct SlashWalk {
  const int32_t* off;
  int i;
  int first_pos, last_pos, key_end;
  SPATTN_HD void Init(const int32_t* offsets, int n, const RowGeo& g) {
    off = offsets;
    first_pos = g.first_pos;
    last_pos = g.last_pos;
    key_end = g.key_end;
    int lo = 0, hi = n;  // first index with off > last_pos
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (off[mid] <= last_pos) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    i = lo - 1;
  }
  SPATTN_HD bool Next(int* s, int* e) {
    while (i >= 0) {
      const int o = off[i];
      int st = first_pos - o;
      if (st < 0) st = 0;
      int en = last_pos - o + 1;
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

// Extra ∪ slash spans in start order (two sorted streams merged).
struct SpanWalk {
  ExtraWalk x;
  SlashWalk sl;
  bool hx, hs;
  int xs, xe, ss, se;
  SPATTN_HD void Init(const ExtraRanges& extra, const int32_t* offsets, int n_off,
                      const RowGeo& g) {
    x.Init(extra, g.key_end);
    sl.Init(offsets, n_off, g);
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

// Whether keys are covered by extra ∪ slash spans, for nondecreasing queries.
struct CoverWalk {
  SpanWalk spans;
  int cs, ce;  // the current merged block [cs, ce)
  SPATTN_HD void Init(const ExtraRanges& extra, const int32_t* offsets, int n_off,
                      const RowGeo& g) {
    spans.Init(extra, offsets, n_off, g);
    cs = 0;
    ce = 0;
  }
  SPATTN_HD bool Covered(int c) {
    while (ce <= c) {
      int s, e;
      if (!spans.Next(&s, &e)) return false;
      if (s <= ce) {
        if (e > ce) ce = e;
      } else {
        cs = s;
        ce = e;
      }
    }
    return cs <= c;
  }
};

// Runs of >= min_run consecutive free columns, in key order; the free columns of shorter runs go
// to sink.Col() as they are passed.
struct RunWalk {
  const int32_t* col;
  int n, k, key_end, min_run;
  CoverWalk cover;
  SPATTN_HD void Init(const int32_t* cols, int n_cols, const ExtraRanges& extra,
                      const int32_t* offsets, int n_off, const RowGeo& g, int run) {
    col = cols;
    n = n_cols;
    k = 0;
    key_end = g.key_end;
    min_run = run;
    cover.Init(extra, offsets, n_off, g);
  }
  template <class Sink>
  SPATTN_HD bool Next(int* s, int* e, Sink& sink) {
    while (k < n) {
      const int c = col[k];
      if (c >= key_end) {
        k = n;
        break;
      }
      if (cover.Covered(c)) {
        ++k;
        continue;
      }
      int len = 1;
      ++k;
      while (k < n && col[k] == c + len && col[k] < key_end && !cover.Covered(col[k])) {
        ++len;
        ++k;
      }
      if (len >= min_run) {
        *s = c;
        *e = c + len;
        return true;
      }
      for (int t = 0; t < len; ++t) sink.Col(c + t);
    }
    return false;
  }
};

// Walks one row: sink.Range(start, end) for each final range in key order, sink.Col(key) for
// each final column in key order. `offsets` increasing, `cols` increasing and unique.
template <class Sink>
SPATTN_HD void MergeRow(const RowGeo& g, const ExtraRanges& extra, const int32_t* offsets,
                        int n_off, const int32_t* cols, int n_cols, int min_run, Sink& sink) {
  SpanWalk spans;
  spans.Init(extra, offsets, n_off, g);
  RunWalk runs;
  runs.Init(cols, n_cols, extra, offsets, n_off, g, min_run);
  int as = 0, ae = 0, rs = 0, re = 0;
  bool ha = spans.Next(&as, &ae);
  bool hr = runs.Next(&rs, &re, sink);
  bool have = false;
  int cur_s = 0, cur_e = 0;
  while (ha || hr) {
    int s, e;
    if (ha && (!hr || as <= rs)) {
      s = as;
      e = ae;
      ha = spans.Next(&as, &ae);
    } else {
      s = rs;
      e = re;
      hr = runs.Next(&rs, &re, sink);
    }
    if (have && s <= cur_e) {
      if (e > cur_e) cur_e = e;
    } else {
      if (have) sink.Range(cur_s, cur_e);
      cur_s = s;
      cur_e = e;
      have = true;
    }
  }
  if (have) sink.Range(cur_s, cur_e);
}

// Sinks.
struct CountSink {
  int ranges = 0, cols = 0;
  SPATTN_HD void Range(int, int) { ++ranges; }
  SPATTN_HD void Col(int) { ++cols; }
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
  SPATTN_HD void Col(int key) { col_idx[c++] = key; }
};

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

}  // namespace rowmerge
}  // namespace spattn

#endif  // SPATTN_KERNELS_CUDA_ROW_MERGE_A_H_
