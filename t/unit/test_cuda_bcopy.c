/*
 * test_cuda_bcopy: the plan of the CUDA backend's block_read and
 * block_write (backend/cuda/kvs_cuda_bcopy.h), without a device.  The
 * pieces' offsets, pitches and heights are checked by hand for f16 and
 * int8 caches; then, for every cache dtype, a pool laid out as the
 * backend's ([n_layer][n_blocks][bt][width], scales [n_layer][n_blocks]
 * [n_head_kv]) in host memory is read through the plan by a host
 * stand-in of cudaMemcpy2D and compared with the block's elements found
 * by their own indices, and written back into another block, which must
 * change nothing else.  A pitch over the device's limit is copied row by
 * row; bad blocks and geometries are refused leaving the plan as it was.
 */

#include "kvs_test.h"

#include <inttypes.h>

#include "backend/cuda/kvs_cuda_bcopy.h"
#include "backend/cuda/kvs_cuda_plan.h"


typedef struct {
    uint8_t  *a[4];                   /* K, V, K scales, V scales */
    uint64_t  len[4];
} pool_t;


static uint8_t
pat(uint32_t array, uint64_t i)
{
    uint64_t  x;

    x = (i + 1) * 0x9e3779b97f4a7c15ull + array * 0x632be59bd9b4e019ull;

    return (uint8_t) (x >> 56);
}


static void
pool_new(pool_t *p, const kvs_cuda_bc_geom_t *g)
{
    uint32_t  i;
    uint64_t  j, per[4];

    per[0] = (uint64_t) g->block_tokens * g->k_width * g->elem;
    per[1] = (uint64_t) g->block_tokens * g->v_width * g->elem;
    per[2] = g->scaled ? (uint64_t) g->n_head_kv * 4 : 0;
    per[3] = per[2];

    for (i = 0; i < 4; i++) {
        p->len[i] = per[i] * g->n_blocks * g->n_layer;
        p->a[i] = p->len[i] ? malloc(p->len[i]) : NULL;

        for (j = 0; j < p->len[i]; j++) {
            p->a[i][j] = pat(i, j);
        }
    }
}


static void
pool_free(pool_t *p)
{
    uint32_t  i;

    for (i = 0; i < 4; i++) {
        free(p->a[i]);
    }
}


/* cudaMemcpy2D's meaning, on the host, inside the arrays' bounds */
static void
run_plan(const kvs_cuda_bc_plan_t *pl, pool_t *p, uint8_t *stage,
    int to_dev)
{
    uint32_t                    i, r;
    uint64_t                    d;
    const kvs_cuda_bc_piece_t  *c;

    for (i = 0; i < pl->n; i++) {
        c = &pl->p[i];

        for (r = 0; r < c->height; r++) {
            d = c->dev_off + (uint64_t) r * c->dev_pitch;
            assert_true(d + c->width <= p->len[c->array]);
            assert_true(c->host_off + (r + 1) * c->width
                        <= pl->block_bytes);

            if (to_dev) {
                memcpy(p->a[c->array] + d,
                       stage + c->host_off + r * c->width, c->width);
            } else {
                memcpy(stage + c->host_off + r * c->width,
                       p->a[c->array] + d, c->width);
            }
        }
    }
}


/* The byte that element (l, b, t, w) of K or V, or scale (l, b, h), of
 * the pattern holds, by its own indices. */
static void
expect_block(const kvs_cuda_bc_geom_t *g, uint32_t b, uint8_t *out)
{
    uint32_t  l, t, w, h, k, n;
    uint64_t  i, o;
    uint32_t  width[2];

    width[0] = g->k_width;
    width[1] = g->v_width;
    o = 0;

    for (k = 0; k < 2; k++) {
        for (l = 0; l < g->n_layer; l++) {
            for (t = 0; t < g->block_tokens; t++) {
                for (w = 0; w < width[k]; w++) {
                    i = (((uint64_t) l * g->n_blocks + b) * g->block_tokens
                         + t) * width[k] + w;

                    for (n = 0; n < g->elem; n++) {
                        out[o++] = pat(k, i * g->elem + n);
                    }
                }
            }
        }
    }

    for (k = 2; g->scaled && k < 4; k++) {
        for (l = 0; l < g->n_layer; l++) {
            for (h = 0; h < g->n_head_kv; h++) {
                i = ((uint64_t) l * g->n_blocks + b) * g->n_head_kv + h;

                for (n = 0; n < 4; n++) {
                    out[o++] = pat(k, i * 4 + n);
                }
            }
        }
    }
}


static void
geom(kvs_cuda_bc_geom_t *g, uint32_t elem, int scaled)
{
    memset(g, 0, sizeof(*g));
    g->n_layer = 3;
    g->n_blocks = 5;
    g->block_tokens = 4;
    g->n_head_kv = 2;
    g->k_width = 2 * 8;
    g->v_width = 2 * 4;
    g->elem = elem;
    g->scaled = scaled;
}


/* The hand-worked geometry: 2 layers, 3 blocks of 4 tokens, K rows of 8
 * elements, V rows of 4. */
static void
geom_hand(kvs_cuda_bc_geom_t *g, uint32_t elem, uint32_t n_head_kv,
    int scaled)
{
    memset(g, 0, sizeof(*g));
    g->n_layer = 2;
    g->n_blocks = 3;
    g->block_tokens = 4;
    g->k_width = 8;
    g->v_width = 4;
    g->elem = elem;
    g->n_head_kv = n_head_kv;
    g->scaled = scaled;
}


/* n_layer 2, n_blocks 3, bt 4, k_width 8, v_width 4, f16: kb = 4 * 8 * 2
 * = 64, vb = 4 * 4 * 2 = 32; block 2: K from 128, pitch 192, V from 64,
 * pitch 96, staged at 0 and 2 * 64 = 128; 192 bytes in all. */
static void
test_pieces_f16(void **state)
{
    kvs_err_t           err;
    kvs_cuda_bc_geom_t  g;
    kvs_cuda_bc_plan_t  pl;

    (void) state;

    geom_hand(&g, 2, 1, 0);

    assert_int_equal(kvs_cuda_bc_plan(&g, 2, &pl, &err), KVS_OK);
    assert_int_equal(pl.n, 2);
    assert_int_equal(pl.block_bytes, 192);

    assert_int_equal(pl.p[0].array, KVS_CUDA_BC_K);
    assert_int_equal(pl.p[0].dev_off, 128);
    assert_int_equal(pl.p[0].dev_pitch, 192);
    assert_int_equal(pl.p[0].host_off, 0);
    assert_int_equal(pl.p[0].width, 64);
    assert_int_equal(pl.p[0].height, 2);
    assert_int_equal(pl.p[0].per_row, 0);

    assert_int_equal(pl.p[1].array, KVS_CUDA_BC_V);
    assert_int_equal(pl.p[1].dev_off, 64);
    assert_int_equal(pl.p[1].dev_pitch, 96);
    assert_int_equal(pl.p[1].host_off, 128);
    assert_int_equal(pl.p[1].width, 32);
    assert_int_equal(pl.p[1].height, 2);
}


/* int8, 2 heads: kb = 4 * 8 = 32, vb = 16, sb = 8; block 1 of 3: K at
 * 32 (pitch 96), V at 16 (pitch 48), scales at 8 (pitch 24); staged at
 * 0, 64, 96 and 112: 2 x (32 + 16 + 8 + 8) = 128 bytes. */
static void
test_pieces_int8(void **state)
{
    kvs_err_t           err;
    uint64_t            bb;
    kvs_cuda_bc_geom_t  g;
    kvs_cuda_bc_plan_t  pl;

    (void) state;

    geom_hand(&g, 1, 2, 1);

    assert_int_equal(kvs_cuda_bc_plan(&g, 1, &pl, &err), KVS_OK);
    assert_int_equal(pl.n, 4);
    assert_int_equal(pl.block_bytes, 128);

    assert_int_equal(pl.p[0].dev_off, 32);
    assert_int_equal(pl.p[0].dev_pitch, 96);
    assert_int_equal(pl.p[0].host_off, 0);
    assert_int_equal(pl.p[1].dev_off, 16);
    assert_int_equal(pl.p[1].dev_pitch, 48);
    assert_int_equal(pl.p[1].host_off, 64);
    assert_int_equal(pl.p[2].array, KVS_CUDA_BC_KS);
    assert_int_equal(pl.p[2].dev_off, 8);
    assert_int_equal(pl.p[2].dev_pitch, 24);
    assert_int_equal(pl.p[2].host_off, 96);
    assert_int_equal(pl.p[2].width, 8);
    assert_int_equal(pl.p[3].array, KVS_CUDA_BC_VS);
    assert_int_equal(pl.p[3].host_off, 112);
    assert_int_equal(pl.p[3].height, 2);

    /* the backend's be->kv_bytes / n_blocks: elements, then scales */
    assert_int_equal(kvs_cuda_plan_block_bytes(2, 4, 8, 4, 1, &bb, &err),
                     KVS_OK);
    assert_int_equal(bb + 2 * 2 * 2 * sizeof(float), pl.block_bytes);
}


/* Every dtype's element size: read block 3 through the plan, compare it
 * with the pattern by indices, write it into block 1 and check that the
 * rest of the pool is untouched. */
static void
test_round_trip(void **state)
{
    static const struct { uint32_t elem; int scaled; }  dt[] = {
        { 4, 0 },                     /* f32 */
        { 2, 0 },                     /* f16, bf16 */
        { 1, 1 },                     /* int8, fp8 */
    };

    uint8_t            *stage, *want;
    uint32_t            d, i;
    uint64_t            j, bb, chk;
    kvs_err_t           err;
    pool_t              p, q;
    kvs_cuda_bc_geom_t  g;
    kvs_cuda_bc_plan_t  pl;

    (void) state;

    for (d = 0; d < sizeof(dt) / sizeof(dt[0]); d++) {
        geom(&g, dt[d].elem, dt[d].scaled);

        assert_int_equal(kvs_cuda_bc_bytes(&g, &bb, &err), KVS_OK);
        assert_int_equal(kvs_cuda_plan_block_bytes(g.n_layer,
                                                   g.block_tokens,
                                                   g.k_width, g.v_width,
                                                   g.elem, &chk, &err),
                         KVS_OK);
        assert_int_equal(bb, chk + (g.scaled ? (uint64_t) g.n_layer * 2
                                                * g.n_head_kv * 4 : 0));

        pool_new(&p, &g);
        pool_new(&q, &g);
        stage = malloc(bb);
        want = malloc(bb);
        memset(stage, 0xee, bb);

        assert_int_equal(kvs_cuda_bc_plan(&g, 3, &pl, &err), KVS_OK);
        assert_int_equal(pl.block_bytes, bb);
        run_plan(&pl, &p, stage, 0);
        expect_block(&g, 3, want);
        assert_memory_equal(stage, want, bb);

        /* into block 1 of q: q's block 1 becomes p's block 3 */
        assert_int_equal(kvs_cuda_bc_plan(&g, 1, &pl, &err), KVS_OK);
        run_plan(&pl, &q, stage, 1);
        memset(stage, 0, bb);
        run_plan(&pl, &q, stage, 0);
        assert_memory_equal(stage, want, bb);

        /* and nothing else of q changed: restore block 1 from a fresh
         * pattern and compare whole arrays */
        pool_free(&p);
        pool_new(&p, &g);
        run_plan(&pl, &p, stage, 0);
        expect_block(&g, 1, want);
        assert_memory_equal(stage, want, bb);
        run_plan(&pl, &q, stage, 1);

        for (i = 0; i < 4; i++) {
            for (j = 0; j < q.len[i]; j++) {
                assert_int_equal(q.a[i][j], p.a[i][j]);
            }
        }

        free(stage);
        free(want);
        pool_free(&p);
        pool_free(&q);
    }
}


/* K's pitch 5 * 4 * 16 * 2 = 640 over a limit of 600: per row; V's 320
 * and the scales' 40 stay 2D; the copy still gives the block. */
static void
test_pitch_limit(void **state)
{
    uint8_t            *stage, *want;
    uint64_t            bb;
    kvs_err_t           err;
    pool_t              p;
    kvs_cuda_bc_geom_t  g;
    kvs_cuda_bc_plan_t  pl;

    (void) state;

    geom(&g, 2, 1);
    g.max_pitch = 600;

    assert_int_equal(kvs_cuda_bc_plan(&g, 4, &pl, &err), KVS_OK);
    assert_int_equal(pl.p[0].dev_pitch, 640);
    assert_int_equal(pl.p[0].per_row, 1);
    assert_int_equal(pl.p[1].dev_pitch, 320);
    assert_int_equal(pl.p[1].per_row, 0);
    assert_int_equal(pl.p[2].dev_pitch, 40);
    assert_int_equal(pl.p[2].per_row, 0);

    bb = pl.block_bytes;
    pool_new(&p, &g);
    stage = malloc(bb);
    want = malloc(bb);
    run_plan(&pl, &p, stage, 0);
    expect_block(&g, 4, want);
    assert_memory_equal(stage, want, bb);
    free(stage);
    free(want);
    pool_free(&p);

    g.max_pitch = 640;
    assert_int_equal(kvs_cuda_bc_plan(&g, 4, &pl, &err), KVS_OK);
    assert_int_equal(pl.p[0].per_row, 0);
}


static void
test_refused(void **state)
{
    kvs_err_t           err;
    kvs_cuda_bc_geom_t  g;
    kvs_cuda_bc_plan_t  pl;

    (void) state;

    memset(&pl, 0x77, sizeof(pl));
    geom(&g, 2, 0);

    assert_int_equal(kvs_cuda_bc_plan(&g, 5, &pl, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "block 5"));
    assert_int_equal(pl.n, 0x77777777);

    g.k_width = 0;
    assert_int_equal(kvs_cuda_bc_plan(&g, 0, &pl, &err), KVS_EINVAL);

    geom(&g, 1, 1);
    g.n_head_kv = 0;
    assert_int_equal(kvs_cuda_bc_plan(&g, 0, &pl, &err), KVS_EINVAL);

    /* 2^32 - 1 blocks of 2^32 - 1 tokens of 2^32 - 1 elements */
    geom(&g, 4, 0);
    g.block_tokens = UINT32_MAX;
    g.k_width = UINT32_MAX;
    assert_int_equal(kvs_cuda_bc_plan(&g, 0, &pl, &err), KVS_ERANGE);

    geom(&g, 4, 0);
    g.n_blocks = UINT32_MAX;
    g.n_layer = UINT32_MAX;
    g.block_tokens = 1u << 16;
    assert_int_equal(kvs_cuda_bc_plan(&g, 0, &pl, &err), KVS_ERANGE);
    assert_int_equal(pl.n, 0x77777777);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_pieces_f16),
        cmocka_unit_test(test_pieces_int8),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_pitch_limit),
        cmocka_unit_test(test_refused),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
