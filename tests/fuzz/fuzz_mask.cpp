// libFuzzer harness over the kernels' mask and range arithmetic (kernels/common/mask_window.cuh),
// compiled as plain host C++ with -fsanitize=fuzzer,address,undefined and
// -fno-sanitize-recover=undefined, so a signed int32 overflow in it aborts.
//
// Each input is one problem: seqlen_q in [1, FA2_MAX_SEQLEN], seqlen_k in [0, FA2_MAX_SEQLEN], causal,
// window_left/right in [-1, 2^31-1] (biased toward 0, 1, FA2_MAX_SEQLEN, 2^31-1, the sequence
// lengths +-1 and the like), a query tile (block_m) and key block (block_n) size. The
// windows reach the helpers as the library passes them: causal folded into
// window_right = 0, then clamped by fa2_kernel_window_left/right (kernels/common/params.h).
// The reference is an int64 model of the unclamped rule of include/fa2.h: query row i
// sees key j in [0, seqlen_k) when j >= i + offset - window_left (window_left >= 0) and
// j <= i + offset + window_right (window_right >= 0), offset = seqlen_k - seqlen_q.
//
// Checked, on rows and keys sampled with the extremes (first and last rows, tiles and
// key blocks, keys at the diagonal and the window edges +-1):
//  (a) visible(), visible_flat(), a row's key_range and a key's query_range (the
//      masks' intervals, common/mask.cuh and exp_scores.cuh) equal the model; rows past
//      seqlen_q that the kernels' last tile also evaluates (results unused) only run,
//      for overflow;
//  (b) tile_key_blocks (query_tile): [n_first, n_end) is exactly the key blocks from
//      the tile's first visible key to its last one, n_end <= n_first when it sees none;
//  (c) block_needs_mask is false exactly when every (row, key) of the row block x key
//      block is visible (as the kernels call it: real rows, key_last clamped or not);
//  (d) block_query_tiles (key_block): [m_first, m_first + m_count) is exactly the query
//      tiles from the first row that sees one of the block's keys to the last one.
// The model's closed forms are checked against brute force on small problems (every
// pair, every tile and key block), where the helpers are checked exhaustively too.
// A violation prints a reproduction line and aborts; so does a UBSan report (see
// __ubsan_on_report below).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "sm90/bwd_sm90_tiles.h"
#include "sm80/bwd_tiles.h"
#include "fa2.h"
#include "common/params.h"
#include "sm90/fwd_sm90_tiles.h"
#include "sm80/fwd_tiles.h"
#include "common/mask_window.cuh"

namespace {

// ---- the problem under test -------------------------------------------------------

struct Problem {
    int64_t seqlen_q, seqlen_k;
    int causal;
    int64_t window_left, window_right;  // as the caller passes them (fa2_problem_t)
    int block_m, block_n;
};

Problem g_problem;
// The check in progress, for the reproduction line (formatted only then: it is set
// for every pair).
const char *g_where = "";
long long g_where_a, g_where_b;

void print_problem(const char *what)
{
    const Problem &p = g_problem;
    fprintf(stderr,
            "fuzz_mask: %s\n  reproduce: seqlen_q=%lld seqlen_k=%lld causal=%d window_left=%lld "
            "window_right=%lld block_m=%d block_n=%d; ",
            what, (long long)p.seqlen_q, (long long)p.seqlen_k, p.causal,
            (long long)p.window_left, (long long)p.window_right, p.block_m, p.block_n);
    fprintf(stderr, g_where, g_where_a, g_where_b);
    fputc('\n', stderr);
}

[[noreturn]] void fail(const char *what)
{
    print_problem(what);
    abort();
}

#define FUZZ_CHECK(cond)                                                                 \
    do {                                                                                 \
        if (!(cond)) fail("check failed at fuzz_mask.cpp:" FUZZ_LINE(__LINE__) ": " #cond); \
    } while (0)
#define FUZZ_LINE(x) FUZZ_STR(x)
#define FUZZ_STR(x) #x

// ---- the int64 model of include/fa2.h (unclamped windows) -------------------------

struct Model {
    int64_t seqlen_q, seqlen_k, offset;
    int64_t window_left, window_right;  // -1 = unbounded; causal folded into the right

    bool visible(int64_t row, int64_t key) const
    {
        return key >= 0 && key < seqlen_k &&
               (window_left < 0 || key >= row + offset - window_left) &&
               (window_right < 0 || key <= row + offset + window_right);
    }

    // Keys [lo, hi] visible from one row (valid when the row sees any key).
    int64_t first_key(int64_t row) const
    {
        return window_left < 0 || row + offset - window_left < 0 ? 0 : row + offset - window_left;
    }
    int64_t last_key(int64_t row) const
    {
        return window_right < 0 || row + offset + window_right > seqlen_k - 1
                   ? seqlen_k - 1
                   : row + offset + window_right;
    }

    // Rows of [row_first, row_last] that see some key: a window [row + offset -
    // window_left, row + offset + window_right] meets [0, seqlen_k) on a row interval.
    bool seeing_rows(int64_t row_first, int64_t row_last, int64_t &lo, int64_t &hi) const
    {
        lo = row_first;
        hi = row_last;
        if (window_right >= 0 && -offset - window_right > lo) lo = -offset - window_right;
        if (window_left >= 0 && seqlen_k - 1 - offset + window_left < hi)
            hi = seqlen_k - 1 - offset + window_left;
        return seqlen_k > 0 && lo <= hi;
    }

    // Keys [lo, hi] that some row of [row_first, row_last] sees: both ends move right
    // with the row, so the first seeing row gives the first key and the last the last.
    bool visible_keys(int64_t row_first, int64_t row_last, int64_t &lo, int64_t &hi) const
    {
        int64_t r_lo, r_hi;
        if (!seeing_rows(row_first, row_last, r_lo, r_hi)) return false;
        lo = first_key(r_lo);
        hi = last_key(r_hi);
        return true;
    }

    // Rows [lo, hi] of [0, seqlen_q) that see some key of [key_first, key_last]
    // (keys inside [0, seqlen_k)).
    bool rows_seeing(int64_t key_first, int64_t key_last, int64_t &lo, int64_t &hi) const
    {
        lo = 0;
        hi = seqlen_q - 1;
        if (window_right >= 0 && key_first - offset - window_right > lo)
            lo = key_first - offset - window_right;
        if (window_left >= 0 && key_last - offset + window_left < hi)
            hi = key_last - offset + window_left;
        return lo <= hi;
    }

    // Every (row, key) of [row_first, row_last] x [key_first, key_last] visible (rows
    // inside [0, seqlen_q), key_first >= 0).
    bool all_visible(int64_t row_first, int64_t row_last, int64_t key_first,
                     int64_t key_last) const
    {
        return key_last < seqlen_k &&
               (window_left < 0 || key_first >= row_last + offset - window_left) &&
               (window_right < 0 || key_last <= row_first + offset + window_right);
    }
};

// ---- input bytes and sampling -----------------------------------------------------

constexpr int64_t kMaxSeqlen = FA2_MAX_SEQLEN;
constexpr int64_t kMaxWindow = FA2_MAX_WINDOW;
// Key blocks may be any multiple of 16; query tiles divide FA2_MAX_SEQLEN (below).
constexpr int kKeyTileSizes[] = {16, 32, 64, 128, 176, 192};
constexpr int kQueryTileSizes[] = {16, 32, 64, 128, 256};

struct Reader {
    const uint8_t *data;
    size_t size, at;

    uint64_t take(int bytes)  // little endian; missing bytes read as 0
    {
        uint64_t v = 0;
        for (int i = 0; i < bytes; ++i, ++at)
            if (at < size) v |= static_cast<uint64_t>(data[at]) << (8 * i);
        return v;
    }
};

// splitmix64: the samples of one input, seeded from its last bytes.
struct Rng {
    uint64_t state;

    uint64_t next()
    {
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform enough in [lo, hi] (lo <= hi).
    int64_t in(int64_t lo, int64_t hi)
    {
        return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
    }
};

int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

int64_t pick_seqlen(Reader &in, int64_t min)
{
    const unsigned choice = static_cast<unsigned>(in.take(1)) % 10;
    const int64_t r = static_cast<int64_t>(in.take(4));
    int64_t v;
    switch (choice) {
    case 0: v = min; break;
    case 1: v = 1 + r % 300; break;  // small: brute-forced below
    case 2: v = kMaxSeqlen; break;
    case 3: v = kMaxSeqlen - 1; break;
    case 4: v = kMaxSeqlen - r % 512; break;
    case 5: v = (int64_t)1 << (r % 31); break;
    default: v = min + r % (kMaxSeqlen - min + 1); break;
    }
    return clamp64(v, min, kMaxSeqlen);
}

int64_t pick_window(Reader &in, int64_t seqlen_q, int64_t seqlen_k)
{
    const unsigned choice = static_cast<unsigned>(in.take(1)) % 20;
    const int64_t r = static_cast<int64_t>(in.take(4));
    const int64_t delta = r % 5 - 2;  // -2..2
    int64_t v;
    switch (choice) {
    case 0: v = -1; break;
    case 1: v = 0; break;
    case 2: v = 1; break;
    case 3: v = kMaxSeqlen + delta; break;
    case 4: v = kMaxWindow - r % 3; break;
    case 5: v = seqlen_q + delta; break;
    case 6: v = seqlen_k + delta; break;
    case 7: v = seqlen_k - seqlen_q + delta; break;
    case 8: v = seqlen_q - seqlen_k + delta; break;
    case 9: v = r % 300; break;
    case 10: v = r % (2 * (seqlen_q > seqlen_k ? seqlen_q : seqlen_k) + 2); break;
    default: v = r % (kMaxWindow + 1); break;
    }
    return clamp64(v, -1, kMaxWindow);
}

// A row of [0, n) (n >= 1), often an extreme.
int64_t pick_index(Rng &rng, int64_t n)
{
    switch (rng.next() % 4) {
    case 0: return 0;
    case 1: return n - 1;
    default: return rng.in(0, n - 1);
    }
}

// The kernels evaluate visible() on the padding rows of their last query tile too, up
// to ceil(seqlen_q / block_m) * block_m - 1 (the results are discarded). That row is at
// most FA2_MAX_SEQLEN - 1, which keeps row + offset + window_right inside int32, only
// when block_m divides FA2_MAX_SEQLEN: with 192 rows and seqlen_q = seqlen_k = 2^30 it
// reaches 2^31 + 126. So query tiles divide it (a static_assert in mask_window.cuh), and
// every compiled query-row tile must be one of those.
constexpr bool divides_max_seqlen(int64_t rows) { return rows > 0 && kMaxSeqlen % rows == 0; }
#define FUZZ_FWD_ROWS(d, block_m, block_n, warps) \
    static_assert(divides_max_seqlen(block_m), "forward block_m");
#define FUZZ_BWD_ROWS(d, block_n, block_m, warps, slices, dq_block_m, dq_block_n, dq_warps) \
    static_assert(divides_max_seqlen(block_m) && divides_max_seqlen(dq_block_m),             \
                  "backward block_m, dq_block_m");
#define FUZZ_FWD_SM90_ROWS(d, warpgroups, block_n) \
    static_assert(divides_max_seqlen(64 * (warpgroups)), "Hopper forward rows");
#define FUZZ_BWD_SM90_ROWS(d, warpgroups, block_m, split) \
    static_assert(divides_max_seqlen(block_m), "Hopper backward block_m");
FA2_FWD_TILES(FUZZ_FWD_ROWS)
FA2_BWD_TILES(FUZZ_BWD_ROWS)
FA2_FWD_SM90_TILES(FUZZ_FWD_SM90_ROWS)
FA2_BWD_SM90_TILES(FUZZ_BWD_SM90_ROWS)
static_assert(divides_max_seqlen(FA2_BWD_SM90_DQ_BLOCK_M), "Hopper dQ rows");

// ---- tile sizes as template arguments, as the kernels have them ---------------------

template <int kTile>
struct Tile {
    static constexpr int value = kTile;
};

template <typename F>
void with_key_tile(int tile, F f)
{
    switch (tile) {
    case 16: f(Tile<16>()); break;
    case 32: f(Tile<32>()); break;
    case 64: f(Tile<64>()); break;
    case 128: f(Tile<128>()); break;
    case 176: f(Tile<176>()); break;
    case 192: f(Tile<192>()); break;
    default: fail("unexpected key tile size");
    }
}

template <typename F>
void with_query_tile(int tile, F f)
{
    switch (tile) {
    case 16: f(Tile<16>()); break;
    case 32: f(Tile<32>()); break;
    case 64: f(Tile<64>()); break;
    case 128: f(Tile<128>()); break;
    case 256: f(Tile<256>()); break;
    default: fail("unexpected query tile size");
    }
}

// ---- the checks ----------------------------------------------------------------------

struct Harness {
    Model model;
    fa2::KeyWindow win;
    int64_t seqlen_q, seqlen_k;
    int block_m, block_n;
    int64_t m_blocks, n_blocks;  // query tiles, key blocks

    // The last row of the query tile from row_first, the last key of the key block
    // from key_first (clamped to the sequence, as query_tile and key_block have them).
    int64_t tile_last_row(int64_t row_first) const
    {
        return (row_first + block_m < seqlen_q ? row_first + block_m : seqlen_q) - 1;
    }
    int64_t block_last_key(int64_t key_first) const
    {
        return (key_first + block_n < seqlen_k ? key_first + block_n : seqlen_k) - 1;
    }

    void where(const char *fmt, long long a, long long b)
    {
        g_where = fmt;
        g_where_a = a;
        g_where_b = b;
    }

    // (a) one (row, key); rows past seqlen_q only run (the last tile's padding rows).
    void check_pair(int64_t row, int64_t key)
    {
        if (row < 0 || key < 0 || row >= m_blocks * block_m) return;
        if (key >= (n_blocks > 0 ? n_blocks : 1) * block_n) return;
        where("visible(row=%lld, key=%lld)", (long long)row, (long long)key);
        if (row >= seqlen_q && kMaxSeqlen % block_m != 0) return;  // see divides_max_seqlen
        const bool got = win.visible(static_cast<int>(row), static_cast<int>(key));
        const bool got_flat = win.visible_flat(static_cast<int>(row), static_cast<int>(key));
        int lo, hi;  // the masks' row intervals: the keys a query row sees
        win.key_range(static_cast<int>(row), static_cast<int>(row), lo, hi);
        int q_lo, q_hi;  // ...and the queries a key sees (the backward's keys-as-rows tiles)
        fa2::query_range(win, static_cast<int>(seqlen_q), static_cast<int>(key),
                         static_cast<int>(key), q_lo, q_hi);
        if (row >= seqlen_q) return;
        const bool want = model.visible(row, key);
        FUZZ_CHECK(got == want);
        FUZZ_CHECK(got_flat == want);
        FUZZ_CHECK((lo <= key && key < hi) == want);
        FUZZ_CHECK((key < seqlen_k && q_lo <= row && row <= q_hi) == want);
    }

    // (a) around one row: first and last keys, the diagonal and the window edges +-1.
    void check_row(int64_t row, Rng &rng)
    {
        const int64_t diag = row + model.offset;
        const int64_t keys[] = {0,
                                1,
                                seqlen_k - 1,
                                seqlen_k,
                                n_blocks * block_n - 1,
                                diag,
                                diag + 1,
                                diag - 1,
                                diag - model.window_left,
                                diag - model.window_left - 1,
                                diag + model.window_right,
                                diag + model.window_right + 1,
                                seqlen_k > 0 ? rng.in(0, seqlen_k - 1) : 0};
        for (int64_t key : keys) check_pair(row, key);
    }

    // (b) and (c) for query tile m.
    void check_tile(int64_t m, Rng &rng)
    {
        const int64_t row_first = m * block_m;
        const int64_t row_last = tile_last_row(row_first);
        where("tile_key_blocks(tile=%lld, block_n=%lld)", (long long)m, (long long)block_n);
        int n_first = 0, n_end = 0;
        with_key_tile(block_n, [&](auto tile) {
            fa2::tile_key_blocks<decltype(tile)::value>(win, static_cast<int>(row_first),
                                                        static_cast<int>(row_last), n_first,
                                                        n_end);
        });
        int64_t key_lo, key_hi;
        if (model.visible_keys(row_first, row_last, key_lo, key_hi)) {
            FUZZ_CHECK(n_first == key_lo / block_n);
            FUZZ_CHECK(n_end == key_hi / block_n + 1);
        } else {
            FUZZ_CHECK(n_end <= n_first);
        }

        // The kernels' last tile evaluates visible() on rows up to row_first + block_m - 1.
        check_row(row_first, rng);
        check_row(row_last, rng);
        check_row(row_first + block_m - 1, rng);

        // (c) on the blocks the tile visits (first, last, one between), their
        // neighbours and one anywhere.
        if (n_blocks == 0) return;
        const int64_t blocks[] = {n_first, n_end - 1, n_first - 1, n_end,
                                  n_end > n_first ? rng.in(n_first, n_end - 1) : n_first,
                                  rng.in(0, n_blocks - 1)};
        for (int64_t n : blocks)
            if (n >= 0 && n < n_blocks) check_mask(row_first, row_last, n);
    }

    // (c) block_needs_mask on real rows, with key_last = key_first + block_n - 1 (the
    // forward and dQ kernels) and clamped to seqlen_k - 1 (the split dK/dV kernel).
    void check_mask(int64_t row_first, int64_t row_last, int64_t n)
    {
        const int64_t key_first = n * block_n;
        const int64_t key_ends[] = {key_first + block_n - 1, block_last_key(key_first)};
        for (int64_t key_last : key_ends) {
            where("block_needs_mask(rows from %lld, keys from %lld)", (long long)row_first,
                  (long long)key_first);
            const bool got =
                win.block_needs_mask(static_cast<int>(row_first), static_cast<int>(row_last),
                                     static_cast<int>(key_first), static_cast<int>(key_last));
            FUZZ_CHECK(got == !model.all_visible(row_first, row_last, key_first, key_last));
        }
    }

    // (d) and (c) for key block n.
    void check_key_block(int64_t n, Rng &rng)
    {
        const int64_t key_first = n * block_n;
        const int64_t key_last = block_last_key(key_first);
        where("block_query_tiles(key block=%lld, block_m=%lld)", (long long)n,
              (long long)block_m);
        int m_first = 0, m_count = 0;
        with_query_tile(block_m, [&](auto tile) {
            fa2::block_query_tiles<decltype(tile)::value>(win, static_cast<int>(seqlen_q),
                                                          static_cast<int>(key_first),
                                                          static_cast<int>(key_last), m_first,
                                                          m_count);
        });
        int64_t row_lo, row_hi;
        if (model.rows_seeing(key_first, key_last, row_lo, row_hi)) {
            FUZZ_CHECK(m_first == row_lo / block_m);
            FUZZ_CHECK(m_count == row_hi / block_m - row_lo / block_m + 1);
        } else {
            FUZZ_CHECK(m_count == 0);
            return;
        }
        // The dK/dV kernels test the mask only on tiles without rows past seqlen_q.
        const int64_t m_last = m_first + m_count - 1;
        const int64_t tiles[] = {m_first, m_last, rng.in(m_first, m_last)};
        for (int64_t m : tiles) {
            const int64_t row_first = m * block_m;
            if (row_first + block_m <= seqlen_q) check_mask(row_first, row_first + block_m - 1, n);
        }
        // Rows at the block's edges and the first and last rows that see it.
        const int64_t rows[] = {row_lo, row_hi, row_lo - 1, row_hi + 1};
        for (int64_t row : rows) {
            check_pair(row, key_first);
            check_pair(row, key_last);
        }
    }

    // Small problems: every pair, tile and key block, against brute force, which also
    // checks the model's closed forms.
    void check_exhaustive()
    {
        for (int64_t m = 0; m < m_blocks; ++m) {
            const int64_t row_first = m * block_m;
            const int64_t row_last = tile_last_row(row_first);
            int64_t lo = -1, hi = -1;
            for (int64_t row = row_first; row <= row_last; ++row)
                for (int64_t key = 0; key < seqlen_k; ++key)
                    if (model.visible(row, key)) {
                        if (lo < 0 || key < lo) lo = key;
                        if (key > hi) hi = key;
                    }
            int64_t model_lo, model_hi;
            where("brute force: tile %lld of %lld rows", (long long)m, (long long)block_m);
            const bool any = model.visible_keys(row_first, row_last, model_lo, model_hi);
            FUZZ_CHECK(any == (lo >= 0));
            FUZZ_CHECK(!any || (model_lo == lo && model_hi == hi));
            Rng rng{static_cast<uint64_t>(m)};
            check_tile(m, rng);
            for (int64_t n = 0; n < n_blocks; ++n) {
                const int64_t key_first = n * block_n, key_last = key_first + block_n - 1;
                bool all = true;
                for (int64_t row = row_first; row <= row_last; ++row)
                    for (int64_t key = key_first; key <= key_last; ++key)
                        all = all && model.visible(row, key);
                where("brute force: tile %lld, key block %lld", (long long)m, (long long)n);
                FUZZ_CHECK(all == model.all_visible(row_first, row_last, key_first, key_last));
                check_mask(row_first, row_last, n);
            }
        }
        for (int64_t n = 0; n < n_blocks; ++n) {
            const int64_t key_first = n * block_n;
            const int64_t key_last = block_last_key(key_first);
            int64_t lo = -1, hi = -1;
            for (int64_t row = 0; row < seqlen_q; ++row)
                for (int64_t key = key_first; key <= key_last; ++key)
                    if (model.visible(row, key)) {
                        if (lo < 0) lo = row;
                        hi = row;
                    }
            int64_t model_lo, model_hi;
            where("brute force: key block %lld of %lld keys", (long long)n, (long long)block_n);
            const bool any = model.rows_seeing(key_first, key_last, model_lo, model_hi);
            FUZZ_CHECK(any == (lo >= 0));
            FUZZ_CHECK(!any || (model_lo == lo && model_hi == hi));
            Rng rng{static_cast<uint64_t>(n)};
            check_key_block(n, rng);
        }
        for (int64_t row = 0; row < m_blocks * block_m; ++row)
            for (int64_t key = 0; key < n_blocks * block_n; ++key) check_pair(row, key);
    }
};

}  // namespace

// UBSan calls this before it reports (and, with -fno-sanitize-recover, aborts): name the
// problem, since an overflow in the helpers is not visible in the bytes of the input.
extern "C" void __ubsan_on_report(void)
{
    print_problem("undefined behaviour (UBSan report follows)");
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Reader in{data, size, 0};
    Problem &p = g_problem;
    const unsigned flags = static_cast<unsigned>(in.take(1));
    p.causal = flags & 1;
    p.seqlen_q = pick_seqlen(in, 1);
    p.seqlen_k = pick_seqlen(in, 0);
    p.window_left = pick_window(in, p.seqlen_q, p.seqlen_k);
    p.window_right = pick_window(in, p.seqlen_q, p.seqlen_k);
    if (p.causal) p.window_right = (flags & 2) ? 0 : -1;  // fa2_plan accepts only these
    p.block_m = kQueryTileSizes[in.take(1) % (sizeof kQueryTileSizes / sizeof(int))];
    p.block_n = kKeyTileSizes[in.take(1) % (sizeof kKeyTileSizes / sizeof(int))];
    Rng rng{in.take(8)};
    g_where = "";

    // What src/forward.c hands the kernels.
    const int64_t window_right = p.causal ? 0 : p.window_right;
    const int32_t kernel_left = fa2_kernel_window_left(p.window_left, p.seqlen_k);
    const int32_t kernel_right = fa2_kernel_window_right(window_right, p.seqlen_q);

    Harness h;
    h.seqlen_q = p.seqlen_q;
    h.seqlen_k = p.seqlen_k;
    h.block_m = p.block_m;
    h.block_n = p.block_n;
    h.m_blocks = (p.seqlen_q + p.block_m - 1) / p.block_m;
    h.n_blocks = (p.seqlen_k + p.block_n - 1) / p.block_n;
    h.model = Model{p.seqlen_q, p.seqlen_k, p.seqlen_k - p.seqlen_q, p.window_left, window_right};
    h.win = fa2::KeyWindow{static_cast<int>(p.seqlen_k - p.seqlen_q), kernel_left, kernel_right,
                           static_cast<int>(p.seqlen_k)};

    if (p.seqlen_q <= 300 && p.seqlen_k <= 300) {
        h.check_exhaustive();
        return 0;
    }

    // (a) the first and last rows, the row whose diagonal meets key 0, the first and
    // last rows that see any key (and their neighbours), and random rows.
    const int64_t first_seeing = -h.model.offset - window_right;
    const int64_t last_seeing = p.seqlen_k - 1 - h.model.offset + p.window_left;
    const int64_t rows[] = {0, p.seqlen_q - 1, -h.model.offset, first_seeing, first_seeing - 1,
                            last_seeing, last_seeing + 1, pick_index(rng, p.seqlen_q),
                            pick_index(rng, p.seqlen_q)};
    for (int64_t row : rows)
        if (row >= 0 && row < p.seqlen_q) h.check_row(row, rng);

    // (b), (c) the first and last tiles, the tiles of those rows and random ones.
    h.check_tile(0, rng);
    h.check_tile(h.m_blocks - 1, rng);
    for (int64_t row : rows)
        if (row >= 0 && row < p.seqlen_q) h.check_tile(row / p.block_m, rng);
    for (int i = 0; i < 4; ++i) h.check_tile(rng.in(0, h.m_blocks - 1), rng);

    // (d) the first and last key blocks, those of the diagonal of the first and last
    // rows, and random ones.
    if (h.n_blocks > 0) {
        const int64_t offset = h.model.offset;
        const int64_t keys[] = {0,
                                p.seqlen_k - 1,
                                offset,
                                p.seqlen_q - 1 + offset,
                                offset - p.window_left,
                                offset + window_right,
                                pick_index(rng, p.seqlen_k)};
        for (int64_t key : keys)
            if (key >= 0 && key < p.seqlen_k) h.check_key_block(key / p.block_n, rng);
        for (int i = 0; i < 4; ++i) h.check_key_block(rng.in(0, h.n_blocks - 1), rng);
    }
    return 0;
}
