/* The engine's CPU kernels: paged decode attention and the float32 matmul of every projection.
 * Built and loaded by paged/kernels/cpu.py, which says why they exist.
 *
 * 1. Paged decode attention, reading K/V in place through the block table, tile by tile.
 *
 * The plain-torch reference (paged/kernels/reference.py, paged_decode_attention) first gathers every
 * request's K/V into a new padded tensor and then calls SDPA. Here each query row's context is
 * walked in tiles of ``tile`` positions (one KV block; cpu.py picks it): each position's physical
 * block is looked up in the row's table, exactly as the Triton kernel and the MMU do, and that
 * slot's K and V rows are read where the arena holds them. The query heads of a GQA group share
 * each K/V row while it is in cache. No row of all the scores is ever held: per tile, an online
 * softmax keeps a running max m and a running sum l = sum of exp(s - m), and rescales the
 * output sum by exp(m_old - m_new) whenever the max rises.
 *
 * Split-K: a context longer than ``split`` tiles is cut into splits of that many tiles, each a
 * task of its own (so one long request keeps every thread busy); each split's (m, l, unscaled
 * output) is merged as vLLM's paged_attention v2 and Flash-Decoding merge partitions:
 * M = max m_i, L = sum of l_i exp(m_i - M), out = sum of acc_i exp(m_i - M) / L. The split is
 * fixed in positions, never by the batch, so a row's bits do not depend on its company.
 *
 * Layout (float32, row-major, as the arena and paged/kernels/reference.py hold them):
 *   q            [batch, num_heads, head_dim]
 *   k/v_cache    [num_blocks, block_size, num_kv_heads, head_dim], float32, or bfloat16 where
 *                kv_bf16 is 1: widened to float32 as each row is read (exact), so a bfloat16
 *                arena streams half the bytes and every product and sum is still float32
 *   tables       [batch, table_width] int32
 *   context_lens [batch] int32, each >= 1
 *   out          [batch, num_heads, head_dim]
 *   partials     [batch, max_splits, num_heads, head_dim + 2]: a split's (acc, m, l) until merged
 *   stats        NULL, or [batch, num_heads, max_tiles + 1, 4]: when asked, the walk as this
 *                kernel ran it. Row t (tile t): the running (m, l) of the split holding it after
 *                the tile, and the tile's own (m, l) = (its largest score, sum of exp(s - that));
 *                row max_tiles: the merged (M, L), then two zeros. Natural-log units.
 *
 * Built with -fopenmp; loaded after torch, the parallel loops run on torch's own OpenMP runtime
 * (the same libgomp.so.1), with the thread count the caller passes (torch's).
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* glibc's vector expf (libmvec), so the softmax's exponentials run 16 at a time */
#pragma omp declare simd notinbranch
float expf(float);

/* 16 floats as one vector: GCC's vector extensions, not intrinsics, so the same source compiles
 * to AVX-512, or to two AVX2 halves, or to SSE, for whatever -march=native finds */
typedef float v16 __attribute__((vector_size(64), aligned(4)));

static inline float hsum16(v16 x) {
    x += __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    x += __builtin_shufflevector(x, x, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
    x += __builtin_shufflevector(x, x, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    x += __builtin_shufflevector(x, x, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
    return x[0];
}

/* Keeps a loaded vector in a register. Without it GCC folds the load into each multiply-add
 * that reads the vector, so a V row shared by a group of three query heads is loaded three
 * times, and the loads, not the multiply-adds, set the pace (10 % of attention's time at 290
 * tokens). Only where one register holds 16 floats; elsewhere GCC splits the vector anyway. */
#if defined(__AVX512F__)
#define IN_REGISTER(x) __asm__("" : "+v"(x))
#else
#define IN_REGISTER(x) ((void)0)
#endif

static inline v16 load16(const float *p) {
    v16 v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* Sixteen dot products finished at once: each step below halves sixteen partial-sum vectors,
 * two into one, until one vector holds the sixteen totals in order. Each total is summed in
 * hsum16's order (lane j with j + 8, then + 4, + 2, + 1), so the bits are hsum16's; the work is
 * 45 shuffles and adds for sixteen sums, where sixteen hsum16 calls take 128. In each 2W-lane
 * group, loW puts lanes [0, W) of a then of b, hiW lanes [W, 2W). */
#define FOLD(name, ...)                                                                    \
    static inline v16 name(v16 a, v16 b) {                                                 \
        return __builtin_shufflevector(a, b, __VA_ARGS__);                                 \
    }
FOLD(lo8, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23)
FOLD(hi8, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31)
FOLD(lo4, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27)
FOLD(hi4, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31)
FOLD(lo2, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29)
FOLD(hi2, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31)
FOLD(lo1, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30)
FOLD(hi1, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31)

/* t[i] holds position i's partial sums; returns the vector of the sixteen totals */
static inline v16 hsum16x16(const v16 t[16]) {
    v16 r[8], s[4];
    for (int i = 0; i < 8; i++) r[i] = lo8(t[i], t[i + 8]) + hi8(t[i], t[i + 8]);
    for (int i = 0; i < 4; i++) s[i] = lo4(r[i], r[i + 4]) + hi4(r[i], r[i + 4]);
    const v16 x0 = lo2(s[0], s[2]) + hi2(s[0], s[2]), x1 = lo2(s[1], s[3]) + hi2(s[1], s[3]);
    return lo1(x0, x1) + hi1(x0, x1);
}

#define MAX_TILE 256 /* positions a tile holds (cpu.py keeps tiles within it) */

typedef int32_t vi16 __attribute__((vector_size(64), aligned(4)));
typedef uint32_t vu16 __attribute__((vector_size(64), aligned(4)));
typedef uint16_t h16 __attribute__((vector_size(32), aligned(2)));

/* Sixteen arena elements from element i of ``row``: float32, or bfloat16 (``bf``) widened, which
 * is exact: a bfloat16 is the top half of a float32's bits. ``bf`` is a constant wherever a walk
 * is inlined, so each arena type gets loops of its own and the float32 loops are unchanged. */
static inline v16 load_kv(const void *row, int64_t i, int bf) {
    if (!bf) return load16((const float *)row + i);
    h16 h;
    memcpy(&h, (const uint16_t *)row + i, sizeof(h));
    const vu16 bits = __builtin_convertvector(h, vu16) << 16;
    v16 f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

static inline float kv_at(const void *row, int64_t i, int bf) {
    if (!bf) return ((const float *)row)[i];
    const uint32_t bits = (uint32_t)((const uint16_t *)row)[i] << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

/* a > b ? a : b, lane by lane: one vmaxps where there is AVX-512 (the same rule, NaN and
 * signed zeros included, so the bits agree), where GCC makes a compare and a blend of this
 * C and the per-tile max's latency doubles */
static inline v16 max16(v16 a, v16 b) {
#if defined(__AVX512F__)
    return (v16)_mm512_max_ps((__m512)a, (__m512)b);
#else
    const vi16 gt = a > b;
    return (v16)(((vi16)a & gt) | ((vi16)b & ~gt));
#endif
}

/* whether some lane of x is above the same lane of m */
static inline int any_above(v16 x, v16 m) {
#if defined(__AVX512F__)
    return _mm512_cmp_ps_mask((__m512)x, (__m512)m, _CMP_GT_OQ) != 0;
#else
    const vi16 gt = x > m;
    int any = 0;
    for (int i = 0; i < 16; i++) any |= gt[i];
    return any != 0;
#endif
}

/* the largest of sixteen floats, in every lane */
static inline v16 hmax16(v16 x) {
    x = max16(x, __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
    x = max16(x, __builtin_shufflevector(x, x, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
    x = max16(x, __builtin_shufflevector(x, x, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
    return max16(x, __builtin_shufflevector(x, x, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
}

static inline v16 splat(float x) { return (v16){0} + x; }

/* exp of sixteen floats, inline: x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, so r is
 * exact), exp(r) by Cephes' degree-6 polynomial (within 2 ulp of libm's expf), times 2^n made
 * in the exponent bits. Below -88 it gives exactly 0 (so -inf, a padded score, weighs
 * nothing). Inline because a call to libmvec's expf makes every vector register the caller's
 * to save: once per tile and head, the spills cost more than the exponentials. */
static inline v16 exp16(v16 x) {
    x = max16(x, splat(-88.0f));
    /* round to nearest: adding 1.5 * 2^23 leaves no fraction bits (|x log2 e| < 2^22) */
    const v16 n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    const v16 r = x - n * 0.693359375f + n * 2.12194440e-4f;
    v16 p = splat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const vi16 e = (__builtin_convertvector(n, vi16) + 127) << 23;
    return p * (v16)e;
}

/* After a tile's scores are in s[g][0 .. n): the online-softmax update of G query heads, each
 * with its running max m[g] held in every lane and its running sum the sum of l[g]'s lanes. The
 * scores become the tile's numerators exp(s - m_new), padded with zeros to whole vectors of 16;
 * alpha[g] gets the factor exp(m_old - m_new) head g's output sum must be rescaled by (1 while
 * the max holds, 0 at the first tile), and *rose whether any is not 1. ``rows[g]``: head g's
 * walk record row, or NULL.
 *
 * The max's rise is a branch, not arithmetic: after the first tiles it rarely rises, and while
 * the prediction that it holds is right the numerators start from the old max at once; made
 * branch-free, the new max and the factor put ~100 cycles of latency before every V pass. */
static inline __attribute__((always_inline)) void tile_update(float s[][MAX_TILE], int64_t n, int G,
                                                              v16 *m, v16 *l, float *alpha,
                                                              int *rose, float *const *rows) {
    const int64_t nv = (n + 15) / 16;
    *rose = 0;
    for (int g = 0; g < G; g++) {
        for (int64_t i = n; i < nv * 16; i++) s[g][i] = -INFINITY;
        v16 mx = load16(s[g]);
        for (int64_t i = 1; i < nv; i++) mx = max16(mx, load16(s[g] + 16 * i));
        if (rows[g]) {
            const v16 tm = hmax16(mx);
            v16 own = {0};
            for (int64_t i = 0; i < nv; i++) own += exp16(load16(s[g] + 16 * i) - tm);
            rows[g][2] = tm[0];
            rows[g][3] = hsum16(own);
        }
        v16 a = splat(1.0f);
        /* whether a score passes the max needs no horizontal max; the new max only when one does */
        if (any_above(mx, m[g])) {
            const v16 tm = hmax16(mx);
            a = exp16(m[g] - tm); /* exactly 0 from m = -inf, the first tile */
            m[g] = tm;
            *rose = 1;
        }
        alpha[g] = a[0];
        v16 sum = l[g] * a;
        for (int64_t i = 0; i < nv; i++) {
            const v16 p = exp16(load16(s[g] + 16 * i) - m[g]);
            memcpy(s[g] + 16 * i, &p, sizeof(p));
            sum += p;
        }
        l[g] = sum;
        if (rows[g]) {
            rows[g][0] = m[g][0];
            rows[g][1] = hsum16(l[g]);
        }
    }
}

/* What every walk reads: one request's query, table and the arena. */
typedef struct {
    const void *k_cache, *v_cache; /* float32, or bfloat16 (the walk's ``bf``) */
    const int32_t *table;
    int64_t block_size, slot_floats, tile; /* slot_floats: elements per slot, all KV heads */
    float scale;
} Walk;

/* Where element ``e`` of an arena (float32, or bfloat16 when ``bf``) starts */
static inline const char *kv_addr(const void *cache, int64_t e, int bf) {
    return (const char *)cache + e * (bf ? 2 : 4);
}

/* The first slot of position ``pos`` and how many positions from it on lie in its block and
 * before ``end``: a run of slots ``slot_floats`` apart */
static inline int64_t run_of(const Walk *w, int64_t pos, int64_t end, int64_t *slot) {
    const int64_t off = pos % w->block_size;
    *slot = (int64_t)w->table[pos / w->block_size] * w->block_size + off;
    const int64_t left = w->block_size - off;
    return end - pos < left ? end - pos : left;
}

/* A tile's positions [t0, t1) and its first run (``n`` positions from ``slot``): looked up once
 * per tile, where each of its 2H passes looking it up cost two 64-bit divisions */
typedef struct {
    int64_t t0, t1, slot, n;
} Tile;

static inline Tile tile_at(const Walk *w, int64_t t0, int64_t t1) {
    Tile t = {t0, t1, 0, 0};
    t.n = run_of(w, t0, t1, &t.slot);
    return t;
}

/* The K pass of one tile [t0, t1) for KV head h and its G query heads (head_dim 64): the scaled
 * scores into s[g][0 .. t1 - t0). Each query is loaded per sixteen positions, not held across
 * the tile: held, the group's queries and the sixteen partial sums would take 28 of the 32
 * vector registers, and the online softmax's running (m, l) pushed the sums onto the stack. */
static inline __attribute__((always_inline)) void scores64(const Walk *w, const float *qh, int64_t h,
                                                           const Tile *T, int G,
                                                           float s[][MAX_TILE], int bf) {
    const int64_t t0 = T->t0, row = w->slot_floats * (bf ? 2 : 4); /* bytes slot to slot */
    for (int64_t pos = t0, slot = T->slot, n = T->n;;) {
        const char *kb = kv_addr(w->k_cache, slot * w->slot_floats + h * 64, bf);
        int64_t i = 0;
        /* sixteen positions at a time: their rows stay in L1 while each query of the group
         * takes its sixteen dot products, finished together */
        for (; i + 16 <= n; i += 16) {
            const char *k16 = kb + i * row;
            int64_t step = row;
            float wide[16 * 64] __attribute__((aligned(64)));
            if (bf) { /* widened once here, not once per query head of the group */
                for (int r = 0; r < 16; r++)
                    for (int j = 0; j < 4; j++) {
                        const v16 x = load_kv(k16 + r * row, 16 * j, 1);
                        memcpy(wide + r * 64 + 16 * j, &x, sizeof(x));
                    }
                k16 = (const char *)wide;
                step = 64 * sizeof(float);
            }
            for (int g = 0; g < G; g++) {
                /* hidden from GCC, which would otherwise load these sixteen K rows once for
                 * the whole group, keep them in 64 vectors and spill most to the stack */
                const char *kr = k16;
                __asm__("" : "+r"(kr));
                const v16 q0 = load16(qh + g * 64), q1 = load16(qh + g * 64 + 16);
                const v16 q2 = load16(qh + g * 64 + 32), q3 = load16(qh + g * 64 + 48);
                v16 t[16];
                for (int r = 0; r < 16; r++) {
                    const float *ki = (const float *)(kr + r * step);
                    t[r] = q0 * load16(ki) + q1 * load16(ki + 16) + q2 * load16(ki + 32) +
                           q3 * load16(ki + 48);
                }
                const v16 y = hsum16x16(t) * w->scale;
                memcpy(&s[g][pos - t0 + i], &y, sizeof(y));
            }
        }
        for (; i < n; i++) {
            const char *kr = kb + i * row;
            const v16 k0 = load_kv(kr, 0, bf), k1 = load_kv(kr, 16, bf);
            const v16 k2 = load_kv(kr, 32, bf), k3 = load_kv(kr, 48, bf);
            for (int g = 0; g < G; g++) {
                const float *qg = qh + g * 64;
                s[g][pos - t0 + i] = hsum16(load16(qg) * k0 + load16(qg + 16) * k1 +
                                            load16(qg + 32) * k2 + load16(qg + 48) * k3) *
                                     w->scale;
            }
        }
        pos += n;
        if (pos >= T->t1) break;
        n = run_of(w, pos, T->t1, &slot);
    }
}

/* The V pass of one tile for KV head h: the G output sums ``acc`` (head_dim 64), rescaled by
 * their heads' ``alpha``, take the tile's numerators p = s[g][...] times each V row; the sums
 * live in registers for the tile. */
static inline __attribute__((always_inline)) void values64(const Walk *w, int64_t h,
                                                           const Tile *T, int G,
                                                           float s[][MAX_TILE],
                                                           const float *alpha, int rose,
                                                           float *acc, int bf) {
    v16 a[4][4];
    for (int g = 0; g < G; g++)
        for (int j = 0; j < 4; j++) a[g][j] = load16(acc + g * 64 + j * 16);
    if (rose)
        for (int g = 0; g < G; g++)
            for (int j = 0; j < 4; j++) a[g][j] *= alpha[g];
    const int64_t t0 = T->t0, row = w->slot_floats * (bf ? 2 : 4);
    for (int64_t pos = t0, slot = T->slot, n = T->n;;) {
        const char *vb = kv_addr(w->v_cache, slot * w->slot_floats + h * 64, bf);
        for (int64_t i = 0; i < n; i++) {
            const char *vr = vb + i * row;
            v16 v0, v1, v2, v3;
            if (bf) {
                /* 32 bfloat16s a load, widened by a shift (the even elements) and a mask (the
                 * odd ones), where widening 16 at a time took two instructions per 16: the sums
                 * are kept in that order, even then odd, and walk64 puts them back at its end */
                vu16 lo, hi;
                memcpy(&lo, vr, sizeof(lo));
                memcpy(&hi, vr + 64, sizeof(hi));
                const vu16 top = (vu16){0} + 0xffff0000u;
                v0 = (v16)(lo << 16);
                v1 = (v16)(lo & top);
                v2 = (v16)(hi << 16);
                v3 = (v16)(hi & top);
            } else {
                v0 = load16((const float *)vr);
                v1 = load16((const float *)vr + 16);
                v2 = load16((const float *)vr + 32);
                v3 = load16((const float *)vr + 48);
            }
            IN_REGISTER(v0);
            IN_REGISTER(v1);
            IN_REGISTER(v2);
            IN_REGISTER(v3);
            for (int g = 0; g < G; g++) {
                const float p = s[g][pos - t0 + i];
                a[g][0] += p * v0;
                a[g][1] += p * v1;
                a[g][2] += p * v2;
                a[g][3] += p * v3;
            }
        }
        pos += n;
        if (pos >= T->t1) break;
        n = run_of(w, pos, T->t1, &slot);
    }
    for (int g = 0; g < G; g++)
        for (int j = 0; j < 4; j++) memcpy(acc + g * 64 + j * 16, &a[g][j], sizeof(v16));
}

/* One split [p0, p1) of a request, every one of its H KV heads, when head_dim is 64 and the
 * group has G <= 4 query heads (SmolLM2: 3). A tile's K and V blocks are read for all heads
 * before the next tile's, so each block is fetched from memory once, front to back.
 *
 * A step is one (tile, KV head): its K pass, then its online-softmax update, whose max, exp
 * and sum form a chain of ~100 cycles' latency that the V pass waits on. So the V pass runs
 * one step late: the previous step's V pass (independent work) executes while this step's
 * chain resolves. Each step's scores and factors get their own buffer of two.
 * Leaves each query head's running (m, l) in mv, lv and its unscaled output sum in ``acc``. */
static inline __attribute__((always_inline)) void walk64(
    const Walk *w, const float *q, int64_t H, int64_t p0, int64_t p1, int G, v16 *mv, v16 *lv,
    float *acc, float *stats, int64_t stats_rows, int bf) {
    float s[2][4][MAX_TILE] __attribute__((aligned(64)));
    float alpha[2][4];
    int rose[2];
    for (int64_t hq = 0; hq < H * G; hq++) {
        mv[hq] = splat(-INFINITY);
        lv[hq] = (v16){0};
    }
    memset(acc, 0, sizeof(float) * H * G * 64);
    Tile pt = {0, 0, 0, 0}; /* the step whose V pass is pending: its tile, its KV head */
    int64_t ph = -1;
    int buf = 0;
    for (int64_t t0 = p0; t0 < p1; t0 += w->tile) {
        const Tile T = tile_at(w, t0, t0 + w->tile < p1 ? t0 + w->tile : p1);
        for (int64_t h = 0; h < H; h++) {
            scores64(w, q + h * G * 64, h, &T, G, s[buf], bf);
            float *rows[4];
            for (int g = 0; g < G; g++)
                rows[g] = stats ? stats + ((h * G + g) * stats_rows + t0 / w->tile) * 4 : 0;
            tile_update(s[buf], T.t1 - t0, G, mv + h * G, lv + h * G, alpha[buf], &rose[buf], rows);
            if (ph >= 0)
                values64(w, ph, &pt, G, s[buf ^ 1], alpha[buf ^ 1], rose[buf ^ 1], acc + ph * G * 64,
                         bf);
            pt = T;
            ph = h;
            buf ^= 1;
        }
    }
    values64(w, ph, &pt, G, s[buf ^ 1], alpha[buf ^ 1], rose[buf ^ 1], acc + ph * G * 64, bf);
    if (bf) /* each head's sums back in element order */
        for (int64_t hq = 0; hq < H * G; hq++) {
            float o[64];
            float *x = acc + hq * 64;
            for (int half = 0; half < 2; half++)
                for (int i = 0; i < 16; i++) {
                    o[half * 32 + 2 * i] = x[half * 32 + i];
                    o[half * 32 + 2 * i + 1] = x[half * 32 + 16 + i];
                }
            memcpy(x, o, sizeof(o));
        }
}

/* The same walk for any head_dim and group size: G query heads of KV head h. */
static void walk_any(const Walk *w, const float *qh, int64_t h, int64_t d, int64_t p0, int64_t p1,
                     int64_t G, float *m, float *l, float *acc, float *stats, int64_t stats_rows,
                     int bf) {
    float s[G][MAX_TILE];
    v16 mv[G], lv[G];
    for (int64_t g = 0; g < G; g++) {
        mv[g] = splat(-INFINITY);
        lv[g] = (v16){0};
    }
    memset(acc, 0, sizeof(float) * G * d);
    for (int64_t t0 = p0; t0 < p1; t0 += w->tile) {
        const int64_t t1 = t0 + w->tile < p1 ? t0 + w->tile : p1;
        for (int64_t pos = t0; pos < t1;) {
            int64_t slot;
            const int64_t n = run_of(w, pos, t1, &slot);
            for (int64_t i = 0; i < n; i++) {
                const char *kr = kv_addr(w->k_cache, (slot + i) * w->slot_floats + h * d, bf);
                for (int64_t g = 0; g < G; g++) {
                    const float *qg = qh + g * d;
                    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                    for (int64_t e = 0; e < d; e++) dot += qg[e] * kv_at(kr, e, bf);
                    s[g][pos - t0 + i] = dot * w->scale;
                }
            }
            pos += n;
        }
        float *rows[G], alpha[G];
        int rose;
        for (int64_t g = 0; g < G; g++)
            rows[g] = stats ? stats + (g * stats_rows + t0 / w->tile) * 4 : 0;
        tile_update(s, t1 - t0, G, mv, lv, alpha, &rose, rows);
        for (int64_t g = 0; rose && g < G; g++)
            for (int64_t e = 0; e < d; e++) acc[g * d + e] *= alpha[g];
        for (int64_t pos = t0; pos < t1;) {
            int64_t slot;
            const int64_t n = run_of(w, pos, t1, &slot);
            for (int64_t i = 0; i < n; i++) {
                const char *vr = kv_addr(w->v_cache, (slot + i) * w->slot_floats + h * d, bf);
                for (int64_t g = 0; g < G; g++) {
                    const float p = s[g][pos - t0 + i];
                    float *ag = acc + g * d;
#pragma omp simd
                    for (int64_t e = 0; e < d; e++) ag[e] += p * kv_at(vr, e, bf);
                }
            }
            pos += n;
        }
    }
    for (int64_t g = 0; g < G; g++) {
        m[g] = mv[g][0];
        l[g] = hsum16(lv[g]);
    }
}

int paged_decode_f32(const float *q, const void *k_cache, const void *v_cache,
                     const int32_t *tables, int64_t table_width, const int32_t *context_lens,
                     float *out, float *partials, int64_t batch, int64_t num_heads,
                     int64_t num_kv_heads, int64_t head_dim, int64_t block_size,
                     int64_t num_blocks, int64_t max_len, int64_t tile, int64_t split,
                     float scale, int num_threads, float *stats, int kv_bf16) {
    const int64_t group = num_heads / num_kv_heads;
    const int64_t slot_floats = num_kv_heads * head_dim;
    const int64_t span = tile * split; /* positions per split */
    const int64_t max_splits = (max_len + span - 1) / span;
    const int64_t max_tiles = (max_len + tile - 1) / tile;
    const int64_t pw = head_dim + 2; /* a partial: acc, then m, then l */
    if (tile < 1 || tile > MAX_TILE || split < 1) return 3;
    /* a table entry or length out of range is refused, never read past the arena */
    int64_t first[batch + 1]; /* the first split task of each row */
    first[0] = 0;
    for (int64_t b = 0; b < batch; b++) {
        const int64_t len = context_lens[b];
        if (len < 1 || len > max_len || (len - 1) / block_size >= table_width) return 1;
        for (int64_t j = 0; j <= (len - 1) / block_size; j++) {
            const int64_t blk = tables[b * table_width + j];
            if (blk < 0 || blk >= num_blocks) return 2;
        }
        first[b + 1] = first[b] + (len + span - 1) / span;
    }
    /* one task per split of a row, all its heads: a block's slots hold every KV head side by
     * side (slot_floats apart), so a split's K (then V) is read front to back, block by block,
     * which the hardware prefetcher streams from memory; a task per (row, head) read the same
     * bytes in 256-byte pieces 768 bytes apart and waited on memory at every one */
    /* one parallel region for the walk and the merge (a region's start and end cost ~1 µs at two
     * threads, as much as a short row's walk), and no more threads than tasks */
    const int64_t tasks = first[batch];
    const int split_rows = tasks > batch;
#pragma omp parallel num_threads(tasks < num_threads ? (int)tasks : num_threads)
    {
#pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < first[batch]; task++) {
            int64_t lo = 0, hi = batch; /* the row: the last b with first[b] <= task */
            while (hi - lo > 1) {
                const int64_t mid = (lo + hi) / 2;
                if (first[mid] <= task) lo = mid; else hi = mid;
            }
            const int64_t b = lo, part = task - first[b], len = context_lens[b];
            const int64_t p0 = part * span, p1 = p0 + span < len ? p0 + span : len;
            const int whole = first[b + 1] - first[b] == 1;
            const Walk w = {k_cache, v_cache, tables + b * table_width, block_size,
                            slot_floats, tile, scale};
            const float *qb = q + b * num_heads * head_dim;
            float m[num_heads], l[num_heads], acc[num_heads * head_dim];
            /* the row's walk record, where asked */
            float *sb = stats ? stats + b * num_heads * (max_tiles + 1) * 4 : 0;
            if (head_dim == 64 && group <= 4) {
                v16 mv[num_heads], lv[num_heads];
                const int64_t H = num_kv_heads, rows = max_tiles + 1;
                /* the group size and the arena's type as constants: a walk of its own for each */
#define WALK64(G, BF) walk64(&w, qb, H, p0, p1, G, mv, lv, acc, sb, rows, BF)
                switch (group * 2 + (kv_bf16 != 0)) {
                    case 8: WALK64(4, 0); break;
                    case 9: WALK64(4, 1); break;
                    case 6: WALK64(3, 0); break;
                    case 7: WALK64(3, 1); break;
                    case 4: WALK64(2, 0); break;
                    case 5: WALK64(2, 1); break;
                    case 3: WALK64(1, 1); break;
                    default: WALK64(1, 0);
                }
#undef WALK64
                for (int64_t head = 0; head < num_heads; head++) {
                    m[head] = mv[head][0];
                    l[head] = hsum16(lv[head]);
                }
            } else {
                for (int64_t h = 0; h < num_kv_heads; h++)
                    walk_any(&w, qb + h * group * head_dim, h, head_dim, p0, p1, group, m + h * group,
                             l + h * group, acc + h * group * head_dim,
                             sb ? sb + h * group * (max_tiles + 1) * 4 : 0, max_tiles + 1, kv_bf16);
            }
            for (int64_t head = 0; head < num_heads; head++) {
                if (whole) { /* the only split: its (m, l) are the row's */
                    const float inv = 1.0f / l[head];
                    float *o = out + (b * num_heads + head) * head_dim;
                    for (int64_t e = 0; e < head_dim; e++) o[e] = acc[head * head_dim + e] * inv;
                    if (sb) {
                        sb[(head * (max_tiles + 1) + max_tiles) * 4 + 0] = m[head];
                        sb[(head * (max_tiles + 1) + max_tiles) * 4 + 1] = l[head];
                    }
                } else {
                    float *pt = partials + ((b * max_splits + part) * num_heads + head) * pw;
                    memcpy(pt, acc + head * head_dim, sizeof(float) * head_dim);
                    pt[head_dim] = m[head];
                    pt[head_dim + 1] = l[head];
                }
            }
        }
        /* merge each split row's partials, heads in turn */
        if (split_rows)
#pragma omp for schedule(dynamic, 1)
        for (int64_t b = 0; b < batch; b++) {
            const int64_t n = first[b + 1] - first[b];
            if (n == 1) continue;
            for (int64_t head = 0; head < num_heads; head++) {
                const float *pt = partials + (b * max_splits * num_heads + head) * pw;
                const int64_t stride = num_heads * pw; /* from one split's partial to the next */
                float mx = -INFINITY, sum = 0.0f;
                for (int64_t i = 0; i < n; i++)
                    mx = pt[i * stride + head_dim] > mx ? pt[i * stride + head_dim] : mx;
                float *o = out + (b * num_heads + head) * head_dim;
                memset(o, 0, sizeof(float) * head_dim);
                for (int64_t i = 0; i < n; i++) {
                    const float *pi = pt + i * stride;
                    const float c = expf(pi[head_dim] - mx);
                    sum += pi[head_dim + 1] * c;
                    for (int64_t e = 0; e < head_dim; e++) o[e] += pi[e] * c;
                }
                const float inv = 1.0f / sum;
                for (int64_t e = 0; e < head_dim; e++) o[e] *= inv;
                if (stats) {
                    float *row = stats + ((b * num_heads + head) * (max_tiles + 1) + max_tiles) * 4;
                    row[0] = mx;
                    row[1] = sum;
                }
            }
        }
    }
    return 0;
}

/* 2. out[M, N] = x[M, K] @ W[N, K]^T for float32, W packed once (cpu.py pack_weight) into
 * panels of PW = 48 output columns, each panel [K][48] contiguous: a panel is read front to
 * back, and each k's 48 weights are three 16-float vectors.
 *
 * A tile is up to 8 rows of x times one panel: 24 vector accumulators, 3 weight loads and 8
 * broadcasts of x per k. The panels are split between the threads. For the decode batches this
 * engine runs (M <= 16) a panel is streamed from memory once and read again from L2 for rows
 * 9-16. Each output is one running sum over k = 0 .. K-1 in order, with fused multiply-adds;
 * oneDNN and MKL sum in other orders, so results differ from theirs in the last bits.
 */
#define PW 48
#define RM 8

static inline __attribute__((always_inline)) void tile(const float *x, int64_t K, const float *w,
                                                      float *out, int64_t ldo, int64_t cols,
                                                      int accumulate, int R) {
    v16 acc[RM][3];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 3; j++) acc[r][j] = (v16){0};
    for (int64_t k = 0; k < K; k++) {
        const v16 *wk = (const v16 *)(w + k * PW);
        const v16 w0 = wk[0], w1 = wk[1], w2 = wk[2];
        for (int r = 0; r < R; r++) {
            const float xv = x[r * K + k];
            acc[r][0] += xv * w0;
            acc[r][1] += xv * w1;
            acc[r][2] += xv * w2;
        }
    }
    for (int r = 0; r < R; r++) {
        const float *a = (const float *)acc[r];
        float *o = out + r * ldo;
        if (accumulate) { /* the residual stream: o + (x @ W^T), the sum rounded first as apart */
            for (int64_t c = 0; c < cols; c++) o[c] += a[c];
        } else { /* cols < 48 only in the last panel of an N that is not a multiple of 48 */
            memcpy(o, a, cols * sizeof(float));
        }
    }
}

#define ROWS(n) \
    case n:     \
        tile(xm, K, wp, om, N, cols, accumulate, n); \
        break;

void linear_f32(const float *x, const float *w, float *out, int64_t M, int64_t N, int64_t K,
                int accumulate, int num_threads) {
    const int64_t panels = (N + PW - 1) / PW;
#pragma omp parallel for schedule(static) num_threads(num_threads)
    for (int64_t p = 0; p < panels; p++) {
        const float *wp = w + p * K * PW;
        const int64_t cols = N - p * PW < PW ? N - p * PW : PW;
        for (int64_t m = 0; m < M; m += RM) {
            const float *xm = x + m * K;
            float *om = out + m * N + p * PW;
            switch (M - m < RM ? M - m : RM) {
                ROWS(8) ROWS(7) ROWS(6) ROWS(5) ROWS(4) ROWS(3) ROWS(2)
                default:
                    tile(xm, K, wp, om, N, cols, accumulate, 1);
            }
        }
    }
}

/* 3. The forward's elementwise steps, each one pass where torch takes several kernels. They
 * keep torch's rounding: no fused multiply-adds (a*b + c*d is two rounded products and a
 * rounded sum, as torch's separate kernels compute it), and HF's order of operations. Rows
 * are split between threads only for prefill-sized inputs: at decode sizes a parallel region
 * costs more than the work. */
#define NOFMA __attribute__((optimize("fp-contract=off")))
#define PARALLEL_ROWS 64

/* HF's LlamaRMSNorm in float32: w * (x * rsqrt(mean(x^2) + eps)) */
NOFMA void rms_norm_f32(const float *x, const float *w, float *out, int64_t rows, int64_t cols,
                        float eps, int num_threads) {
#pragma omp parallel for schedule(static) num_threads(num_threads) if (rows >= PARALLEL_ROWS)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *o = out + r * cols;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int64_t c = 0; c < cols; c++) ss += xr[c] * xr[c];
        const float inv = 1.0f / sqrtf(ss / (float)cols + eps);
#pragma omp simd
        for (int64_t c = 0; c < cols; c++) o[c] = w[c] * (xr[c] * inv);
    }
}

/* Rotary embedding of q and k, read from the joined q/k/v projection [T, (Hq + 2 Hkv) * D],
 * written to q [T, Hq, D] and k [T, Hkv, D]: x * cos + rotate_half(x) * sin, with sin's first
 * half already negated (llama.py RotaryTable), so rotate_half is a swap of the halves. */
NOFMA void rope_f32(const float *qkv, const float *cos_table, const float *sin_table,
                    const int64_t *positions, float *q, float *k, int64_t tokens,
                    int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                    int num_threads) {
    const int64_t half = head_dim / 2, width = (num_heads + 2 * num_kv_heads) * head_dim;
#pragma omp parallel for schedule(static) num_threads(num_threads) if (tokens >= PARALLEL_ROWS)
    for (int64_t t = 0; t < tokens; t++) {
        const float *c = cos_table + positions[t] * head_dim;
        const float *s = sin_table + positions[t] * head_dim;
        for (int64_t h = 0; h < num_heads + num_kv_heads; h++) {
            const float *x = qkv + t * width + h * head_dim;
            float *o = h < num_heads ? q + (t * num_heads + h) * head_dim
                                     : k + (t * num_kv_heads + h - num_heads) * head_dim;
#pragma omp simd
            for (int64_t d = 0; d < half; d++) {
                const float a = x[d] * c[d], b = x[d + half] * s[d];
                o[d] = a + b;
            }
#pragma omp simd
            for (int64_t d = half; d < head_dim; d++) {
                const float a = x[d] * c[d], b = x[d - half] * s[d];
                o[d] = a + b;
            }
        }
    }
}

/* SiLU(gate) * up from the joined gate/up projection [T, 2 I] -> [T, I]; silu as torch's CPU
 * kernel writes it, x / (1 + exp(-x)) */
NOFMA void silu_mul_f32(const float *gate_up, float *out, int64_t rows, int64_t inter,
                        int num_threads) {
#pragma omp parallel for schedule(static) num_threads(num_threads) if (rows >= PARALLEL_ROWS)
    for (int64_t r = 0; r < rows; r++) {
        const float *g = gate_up + r * 2 * inter, *u = g + inter;
        float *o = out + r * inter;
#pragma omp simd
        for (int64_t i = 0; i < inter; i++) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

/* 4. out[M, N] = x[M, K] @ W[N, K]^T with W in bfloat16 (half the bytes a decode step streams),
 * x and out float32, every sum in float32. W is packed once (cpu.py pack_weight) into panels of
 * PW = 48 output columns as linear_f32's, but a panel holds k in pairs, [K / 2][48][2]: one
 * 32-bit lane is column c's weights at k and k + 1, which is what the bf16 dot-product
 * instruction takes (vdpbf16ps: per lane, acc += a[2i] b[2i] + a[2i+1] b[2i+1]).
 *
 * With avx512_bf16 (-march=native defines __AVX512BF16__) x is rounded to bfloat16 once per
 * call (to nearest even, as vcvtne2ps2bf16 does), its pairs broadcast, and each k pair of a
 * tile is 3 weight loads and 3 R dot-products: the products are exact in float32 and summed
 * in float32. Elsewhere each pair is widened to two float32 vectors (a bfloat16 is the top half
 * of a float32: a shift and a mask) and x stays float32, so the fallback is the more exact of
 * the two; both are held to the same float32 product of the bfloat16 weights by the tests. */
#include <stdlib.h>
#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

typedef uint32_t u16v __attribute__((vector_size(64), aligned(4)));

static inline u16v loadu16(const uint32_t *p) {
    u16v v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline __attribute__((always_inline)) void tile_bf16(const float *x, const uint32_t *xp,
                                                           int64_t K, const uint32_t *w,
                                                           float *out, int64_t ldo, int64_t cols,
                                                           int accumulate, int R) {
    const int64_t K2 = K / 2;
    v16 acc[RM][3];
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 3; j++) acc[r][j] = (v16){0};
#if defined(__AVX512BF16__)
    (void)x;
    for (int64_t k2 = 0; k2 < K2; k2++) {
        const uint32_t *wk = w + k2 * PW;
        const __m512bh w0 = (__m512bh)_mm512_loadu_si512(wk);
        const __m512bh w1 = (__m512bh)_mm512_loadu_si512(wk + 16);
        const __m512bh w2 = (__m512bh)_mm512_loadu_si512(wk + 32);
        for (int r = 0; r < R; r++) {
            const __m512bh xv = (__m512bh)_mm512_set1_epi32((int)xp[r * K2 + k2]);
            acc[r][0] = (v16)_mm512_dpbf16_ps((__m512)acc[r][0], xv, w0);
            acc[r][1] = (v16)_mm512_dpbf16_ps((__m512)acc[r][1], xv, w1);
            acc[r][2] = (v16)_mm512_dpbf16_ps((__m512)acc[r][2], xv, w2);
        }
    }
#else
    (void)xp;
    const u16v high = (u16v){0} + 0xffff0000u;
    for (int64_t k2 = 0; k2 < K2; k2++) {
        const uint32_t *wk = w + k2 * PW;
        v16 lo[3], hi[3];
        for (int j = 0; j < 3; j++) {
            const u16v p = loadu16(wk + 16 * j);
            lo[j] = (v16)(p << 16); /* column c at k */
            hi[j] = (v16)(p & high); /* column c at k + 1 */
        }
        for (int r = 0; r < R; r++) {
            const float x0 = x[r * K + 2 * k2], x1 = x[r * K + 2 * k2 + 1];
            for (int j = 0; j < 3; j++) acc[r][j] += x0 * lo[j] + x1 * hi[j];
        }
    }
#endif
    for (int r = 0; r < R; r++) {
        const float *a = (const float *)acc[r];
        float *o = out + r * ldo;
        if (accumulate) {
            for (int64_t c = 0; c < cols; c++) o[c] += a[c];
        } else {
            memcpy(o, a, cols * sizeof(float));
        }
    }
}

#define ROWS_BF16(n) \
    case n:          \
        tile_bf16(xm, xpm, K, wp, om, N, cols, accumulate, n); \
        break;

/* float32 to bfloat16, rounded to nearest even; a NaN stays a (quiet) NaN */
static inline uint32_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/* K must be even (cpu.py checks); returns 1 where the scratch for x cannot be had */
int linear_bf16(const float *x, const uint32_t *w, float *out, int64_t M, int64_t N, int64_t K,
                int accumulate, int num_threads) {
    const int64_t panels = (N + PW - 1) / PW, K2 = K / 2;
    uint32_t *xp = 0;
#if defined(__AVX512BF16__)
    xp = malloc(sizeof(uint32_t) * (M * K2 > 0 ? M * K2 : 1));
    if (!xp) return 1;
#endif
#pragma omp parallel num_threads(num_threads)
    {
#if defined(__AVX512BF16__)
#pragma omp for schedule(static)
        for (int64_t m = 0; m < M; m++) {
            const float *xm = x + m * K;
            uint32_t *o = xp + m * K2;
            int64_t k = 0;
            for (; k + 32 <= K; k += 32) { /* cvtne2ps: the second operand's 16 go first */
                const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(xm + k + 16), _mm512_loadu_ps(xm + k));
                _mm512_storeu_si512(o + k / 2, (__m512i)b);
            }
            for (; k < K; k += 2) o[k / 2] = bf16_bits(xm[k]) | bf16_bits(xm[k + 1]) << 16;
        }
#endif
#pragma omp for schedule(static)
        for (int64_t p = 0; p < panels; p++) {
            const uint32_t *wp = w + p * K2 * PW;
            const int64_t cols = N - p * PW < PW ? N - p * PW : PW;
            for (int64_t m = 0; m < M; m += RM) {
                const float *xm = x + m * K;
                const uint32_t *xpm = xp ? xp + m * K2 : 0;
                float *om = out + m * N + p * PW;
                switch (M - m < RM ? M - m : RM) {
                    ROWS_BF16(8) ROWS_BF16(7) ROWS_BF16(6) ROWS_BF16(5) ROWS_BF16(4) ROWS_BF16(3)
                    ROWS_BF16(2)
                    default:
                        tile_bf16(xm, xpm, K, wp, om, N, cols, accumulate, 1);
                }
            }
        }
    }
    free(xp);
    return 0;
}

/* 1 where this build takes the bf16 dot-product path, 0 where it widens */
int linear_bf16_native(void) {
#if defined(__AVX512BF16__)
    return 1;
#else
    return 0;
#endif
}
