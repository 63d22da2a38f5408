/* The engine's CPU kernels: paged decode attention and the float32 matmul of every projection.
 * Built and loaded by paged/kernels/cpu.py, which says why they exist.
 *
 * 1. Paged decode attention, reading K/V in place through the block table.
 *
 * The plain-torch reference (paged/kernels/reference.py, paged_decode_attention) first gathers every
 * request's K/V into a new padded tensor and then calls SDPA. Here each request is one task: it
 * looks up each position's physical block in the request's table, exactly as the Triton kernel
 * and the MMU do, and reads that slot's K and V rows where the arena holds them. The query
 * heads of a GQA group share each K/V row while it is in cache.
 *
 * Layout (float32, row-major, as the arena and paged/kernels/reference.py hold them):
 *   q            [batch, num_heads, head_dim]
 *   k/v_cache    [num_blocks, block_size, num_kv_heads, head_dim]
 *   tables       [batch, table_width] int32
 *   context_lens [batch] int32, each >= 1
 *   out          [batch, num_heads, head_dim]
 *   scratch      [num_threads * num_heads * max_len] floats: each thread's scores for the
 *                task it runs, so a prompt of thousands of query rows needs no more than one
 *
 * Built with -fopenmp; loaded after torch, the parallel loops run on torch's own OpenMP runtime
 * (the same libgomp.so.1), with the thread count the caller passes (torch's).
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

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

/* Each of ``rows`` score rows (``stride`` apart, ``len`` long) becomes its softmax numerators
 * exp(s - max); ``sums[r]`` gets their sum, the denominator */
static inline void softmax_rows(float *s, int64_t rows, int64_t stride, int64_t len, float *sums) {
    for (int64_t r = 0; r < rows; r++) {
        float *sr = s + r * stride;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int64_t pos = 0; pos < len; pos++) mx = sr[pos] > mx ? sr[pos] : mx;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t pos = 0; pos < len; pos++) {
            sr[pos] = expf(sr[pos] - mx);
            sum += sr[pos];
        }
        sums[r] = sum;
    }
}

/* One request's one KV head when head_dim is 64 and the group has G <= 4 query heads (SmolLM2:
 * 3): the group's queries and its output sums stay in vector registers for the whole context,
 * where the general loop below reloads and stores them at every position. */
static inline __attribute__((always_inline)) void head64(
    const float *qh, const float *k_cache, const float *v_cache, const int32_t *table,
    int64_t len, int64_t block_size, int64_t slot_floats, int64_t h, float *s, int64_t max_len,
    float scale, float *out, int G) {
    v16 q[4][4], a[4][4];
    float l[4];
    for (int g = 0; g < G; g++)
        for (int j = 0; j < 4; j++) {
            q[g][j] = load16(qh + g * 64 + j * 16);
            a[g][j] = (v16){0};
        }
    for (int64_t start = 0; start < len; start += block_size) {
        const float *kb = k_cache + (int64_t)table[start / block_size] * block_size * slot_floats + h * 64;
        const int64_t n = len - start < block_size ? len - start : block_size;
        int64_t off = 0;
        /* sixteen positions at a time: their rows stay in L1 while each query of the group
         * takes its sixteen dot products, finished together */
        for (; off + 16 <= n; off += 16) {
            const float *kr = kb + off * slot_floats;
            for (int g = 0; g < G; g++) {
                v16 t[16];
                for (int i = 0; i < 16; i++) {
                    const float *ki = kr + i * slot_floats;
                    t[i] = q[g][0] * load16(ki) + q[g][1] * load16(ki + 16) +
                           q[g][2] * load16(ki + 32) + q[g][3] * load16(ki + 48);
                }
                const v16 y = hsum16x16(t) * scale;
                memcpy(s + g * max_len + start + off, &y, sizeof(y));
            }
        }
        for (; off < n; off++) {
            const float *kr = kb + off * slot_floats;
            const v16 k0 = load16(kr), k1 = load16(kr + 16), k2 = load16(kr + 32), k3 = load16(kr + 48);
            for (int g = 0; g < G; g++)
                s[g * max_len + start + off] =
                    hsum16(q[g][0] * k0 + q[g][1] * k1 + q[g][2] * k2 + q[g][3] * k3) * scale;
        }
    }
    softmax_rows(s, G, max_len, len, l);
    for (int64_t start = 0; start < len; start += block_size) {
        const float *vb = v_cache + (int64_t)table[start / block_size] * block_size * slot_floats + h * 64;
        const int64_t n = len - start < block_size ? len - start : block_size;
        for (int64_t off = 0; off < n; off++) {
            const float *vr = vb + off * slot_floats;
            v16 v0 = load16(vr), v1 = load16(vr + 16), v2 = load16(vr + 32), v3 = load16(vr + 48);
            IN_REGISTER(v0);
            IN_REGISTER(v1);
            IN_REGISTER(v2);
            IN_REGISTER(v3);
            for (int g = 0; g < G; g++) {
                const float p = s[g * max_len + start + off];
                a[g][0] += p * v0;
                a[g][1] += p * v1;
                a[g][2] += p * v2;
                a[g][3] += p * v3;
            }
        }
    }
    for (int g = 0; g < G; g++) {
        const float inv = 1.0f / l[g];
        for (int j = 0; j < 4; j++) {
            const v16 o = a[g][j] * inv;
            memcpy(out + g * 64 + j * 16, &o, sizeof(o));
        }
    }
}

int paged_decode_f32(const float *q, const float *k_cache, const float *v_cache,
                     const int32_t *tables, int64_t table_width, const int32_t *context_lens,
                     float *out, float *scratch, int64_t batch, int64_t num_heads,
                     int64_t num_kv_heads, int64_t head_dim, int64_t block_size,
                     int64_t num_blocks, int64_t max_len, float scale, int num_threads) {
    const int64_t group = num_heads / num_kv_heads;
    const int64_t slot_floats = num_kv_heads * head_dim;
    /* a table entry or length out of range is refused, never read past the arena */
    for (int64_t b = 0; b < batch; b++) {
        const int64_t len = context_lens[b];
        if (len < 1 || len > max_len || (len - 1) / block_size >= table_width) return 1;
        for (int64_t j = 0; j <= (len - 1) / block_size; j++) {
            const int64_t blk = tables[b * table_width + j];
            if (blk < 0 || blk >= num_blocks) return 2;
        }
    }
    /* one task per request, all its heads: a block's slots hold every KV head side by side
     * (slot_floats apart), so a request's K (then V) is read front to back, block by block,
     * which the hardware prefetcher streams from memory; a task per (request, head) read the
     * same bytes in 256-byte pieces 768 bytes apart and waited on memory at every one */
#pragma omp parallel for schedule(dynamic, 1) num_threads(num_threads)
    for (int64_t b = 0; b < batch; b++) {
        const int64_t len = context_lens[b];
        const int32_t *table = tables + b * table_width;
        float *s = scratch + omp_get_thread_num() * num_heads * max_len; /* [num_heads][max_len] */
        const float *qb = q + b * num_heads * head_dim;
        if (head_dim == 64 && group <= 4) {
            for (int64_t h = 0; h < num_kv_heads; h++) {
                const float *qh = qb + h * group * 64;
                float *sh = s + h * group * max_len;
                float *oh = out + (b * num_heads + h * group) * 64;
                switch (group) {
                    case 4: head64(qh, k_cache, v_cache, table, len, block_size, slot_floats, h, sh, max_len, scale, oh, 4); break;
                    case 3: head64(qh, k_cache, v_cache, table, len, block_size, slot_floats, h, sh, max_len, scale, oh, 3); break;
                    case 2: head64(qh, k_cache, v_cache, table, len, block_size, slot_floats, h, sh, max_len, scale, oh, 2); break;
                    default: head64(qh, k_cache, v_cache, table, len, block_size, slot_floats, h, sh, max_len, scale, oh, 1);
                }
            }
            continue;
        }
        float acc[num_heads * head_dim];
        float l[num_heads];
        /* scores: each K row read once for its whole group; four positions at a time give
         * four independent sums (one sum's chain of dependent adds would stall) */
        for (int64_t start = 0; start < len; start += block_size) {
            const float *kb = k_cache + (int64_t)table[start / block_size] * block_size * slot_floats;
            const int64_t n = len - start < block_size ? len - start : block_size;
            int64_t off = 0;
            for (; off + 4 <= n; off += 4) {
                for (int64_t h = 0; h < num_kv_heads; h++) {
                    const float *k0 = kb + off * slot_floats + h * head_dim;
                    const float *k1 = k0 + slot_floats, *k2 = k1 + slot_floats, *k3 = k2 + slot_floats;
                    for (int64_t g = h * group; g < (h + 1) * group; g++) {
                        const float *qg = qb + g * head_dim;
                        float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
#pragma omp simd reduction(+ : d0, d1, d2, d3)
                        for (int64_t d = 0; d < head_dim; d++) {
                            d0 += qg[d] * k0[d];
                            d1 += qg[d] * k1[d];
                            d2 += qg[d] * k2[d];
                            d3 += qg[d] * k3[d];
                        }
                        float *sg = s + g * max_len + start + off;
                        sg[0] = d0 * scale;
                        sg[1] = d1 * scale;
                        sg[2] = d2 * scale;
                        sg[3] = d3 * scale;
                    }
                }
            }
            for (; off < n; off++) {
                for (int64_t h = 0; h < num_kv_heads; h++) {
                    const float *kr = kb + off * slot_floats + h * head_dim;
                    for (int64_t g = h * group; g < (h + 1) * group; g++) {
                        const float *qg = qb + g * head_dim;
                        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                        for (int64_t d = 0; d < head_dim; d++) dot += qg[d] * kr[d];
                        s[g * max_len + start + off] = dot * scale;
                    }
                }
            }
        }
        softmax_rows(s, num_heads, max_len, len, l);
        /* weighted sum of V, read as K was; four positions folded in per pass over a row */
        memset(acc, 0, sizeof(acc));
        for (int64_t start = 0; start < len; start += block_size) {
            const float *vb = v_cache + (int64_t)table[start / block_size] * block_size * slot_floats;
            const int64_t n = len - start < block_size ? len - start : block_size;
            int64_t off = 0;
            for (; off + 4 <= n; off += 4) {
                for (int64_t h = 0; h < num_kv_heads; h++) {
                    const float *v0 = vb + off * slot_floats + h * head_dim;
                    const float *v1 = v0 + slot_floats, *v2 = v1 + slot_floats, *v3 = v2 + slot_floats;
                    for (int64_t g = h * group; g < (h + 1) * group; g++) {
                        const float *p = s + g * max_len + start + off;
                        const float p0 = p[0], p1 = p[1], p2 = p[2], p3 = p[3];
                        float *ag = acc + g * head_dim;
#pragma omp simd
                        for (int64_t d = 0; d < head_dim; d++)
                            ag[d] += p0 * v0[d] + p1 * v1[d] + p2 * v2[d] + p3 * v3[d];
                    }
                }
            }
            for (; off < n; off++) {
                for (int64_t h = 0; h < num_kv_heads; h++) {
                    const float *vr = vb + off * slot_floats + h * head_dim;
                    for (int64_t g = h * group; g < (h + 1) * group; g++) {
                        const float p = s[g * max_len + start + off];
                        float *ag = acc + g * head_dim;
#pragma omp simd
                        for (int64_t d = 0; d < head_dim; d++) ag[d] += p * vr[d];
                    }
                }
            }
        }
        float *ob = out + b * num_heads * head_dim;
        for (int64_t g = 0; g < num_heads; g++) {
            const float inv = 1.0f / l[g];
            for (int64_t d = 0; d < head_dim; d++) ob[g * head_dim + d] = acc[g * head_dim + d] * inv;
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
