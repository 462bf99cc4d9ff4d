/*
 * test_threads: the worker pool runs every task of a call exactly once,
 * on valid thread indexes, returning only when all are done; many rapid
 * calls of varying sizes (fewer tasks than threads, none, many) in a
 * row; a pool of one thread runs on the caller in order; a NULL pool
 * too; bad sizes are refused.  The same for kvs_threads_run_ranges(),
 * alternated with plain calls on one pool, and its stealing: a thread
 * held inside its first task leaves the rest of its range to the
 * others, and the call still ends with every task run once.
 *
 * And the CPU backend on its pool (kvs_cpu_kv_set_threads): the split
 * of rows and heads between threads (whose tiles of quantized products
 * depend on the thread count) changes no bit of the logits, for F32,
 * F16, Q8_0, Q4_0 and Q5_1 seeded models, with a prefill chunk (large enough
 * for the sgemm path), a decode batch and a 20-token chunk (a decode-sized
 * product large enough for the pool: the quantized ones split by
 * kvs_threads_run_ranges); stories260K's greedy ids on two threads are
 * run.c's (the fixtures' derived ids).
 */

#include "kvs_test.h"

#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "backend/cpu/kvs_cpu.h"
#include "base/kvs_threads.h"
#include "gen/kvs_gen.h"
#include "model/kvs_ggml_type.h"

#define N_TASKS_MAX  1000


typedef struct {
    atomic_uint  count[N_TASKS_MAX];  /* runs of each task */
    atomic_uint  bad_thread;
    unsigned     n_threads;
    uint32_t     order[N_TASKS_MAX];  /* n = 1: the order tasks ran in */
    uint32_t     n_order;
} job_t;


static void
job_task(void *arg, uint32_t task, uint32_t thread)
{
    job_t  *j;

    j = arg;

    if (thread >= j->n_threads) {
        atomic_fetch_add(&j->bad_thread, 1);
    }

    atomic_fetch_add(&j->count[task], 1);
}


static void
job_ordered(void *arg, uint32_t task, uint32_t thread)
{
    job_t  *j;

    j = arg;
    j->order[j->n_order++] = task;
    assert_int_equal(thread, 0);
}


static void
job_reset(job_t *j, unsigned n_threads)
{
    uint32_t  i;

    for (i = 0; i < N_TASKS_MAX; i++) {
        atomic_store(&j->count[i], 0);
    }

    atomic_store(&j->bad_thread, 0);
    j->n_threads = n_threads;
    j->n_order = 0;
}


/* Each of the first n_tasks counters is exactly 1, the rest 0. */
static void
job_check(job_t *j, uint32_t n_tasks)
{
    uint32_t  i;

    for (i = 0; i < N_TASKS_MAX; i++) {
        assert_int_equal(atomic_load(&j->count[i]), i < n_tasks ? 1 : 0);
    }

    assert_int_equal(atomic_load(&j->bad_thread), 0);
}


static void
pool_calls(unsigned n_threads, unsigned n_calls, int ranges)
{
    static job_t    j;
    unsigned        c;
    uint32_t        n_tasks;
    kvs_err_t       err;
    kvs_threads_t  *tp;

    assert_int_equal(kvs_threads_new(&tp, n_threads, &err), KVS_OK);
    assert_non_null(tp);
    assert_int_equal(kvs_threads_count(tp), n_threads);

    for (c = 0; c < n_calls; c++) {
        /* 0, 1, fewer than the threads, a few, then up to the max */
        n_tasks = c < 8 ? c : (c * 37) % N_TASKS_MAX;

        job_reset(&j, n_threads);

        /* ranges: every other call, so the pool switches modes */
        if (ranges && (c & 1)) {
            kvs_threads_run_ranges(tp, job_task, &j, n_tasks);
        } else {
            kvs_threads_run(tp, job_task, &j, n_tasks);
        }

        job_check(&j, n_tasks);
    }

    kvs_threads_free(tp);
}


static void
test_two(void **state)
{
    pool_calls(2, 3000, 0);
}


static void
test_four(void **state)
{
    /* more threads than cores: workers get descheduled mid-call */
    pool_calls(4, 1000, 0);
}


static void
test_ranges(void **state)
{
    pool_calls(2, 3000, 1);
    pool_calls(3, 1000, 1);
    pool_calls(4, 1000, 1);
}


#define LATE_TASKS  100

typedef struct {
    atomic_uint  count[LATE_TASKS];
    atomic_uint  done;                /* tasks finished */
    atomic_uint  held;                /* thread 1 was held */
    uint32_t     by[LATE_TASKS];      /* the thread that ran each */
} late_t;


/* Thread 1's first task waits (up to 10 s) until every other task ran:
 * only thread 0 can have run the rest of thread 1's range. */
static void
late_task(void *arg, uint32_t task, uint32_t thread)
{
    late_t           *l;
    unsigned          i;
    struct timespec   ts = { 0, 1000 * 1000 };

    l = arg;
    l->by[task] = thread;

    if (thread == 1 && atomic_exchange(&l->held, 1) == 0) {
        for (i = 0; i < 10000; i++) {
            if (atomic_load(&l->done) == LATE_TASKS - 1) {
                break;
            }
            nanosleep(&ts, NULL);
        }
    }

    atomic_fetch_add(&l->count[task], 1);
    atomic_fetch_add(&l->done, 1);
}


static void
test_ranges_late(void **state)
{
    static late_t   l;
    uint32_t        i, stolen;
    kvs_err_t       err;
    kvs_threads_t  *tp;

    assert_int_equal(kvs_threads_new(&tp, 2, &err), KVS_OK);

    memset(&l, 0, sizeof(l));
    kvs_threads_run_ranges(tp, late_task, &l, LATE_TASKS);
    assert_int_equal(atomic_load(&l.done), LATE_TASKS);

    stolen = 0;

    for (i = 0; i < LATE_TASKS; i++) {
        assert_int_equal(atomic_load(&l.count[i]), 1);
        stolen += i >= LATE_TASKS / 2 && l.by[i] == 0;
    }

    /* thread 1 ran at most its first task (or none, if thread 0 took its
     * whole range before it woke); thread 0 all the others */
    assert_true(stolen >= LATE_TASKS / 2 - 1);

    kvs_threads_free(tp);
}


/* After the workers have gone to sleep, a call still wakes them. */
static void
test_sleep_wake(void **state)
{
    static job_t     j;
    int              c;
    kvs_err_t        err;
    kvs_threads_t   *tp;
    struct timespec  ts = { 0, 5 * 1000 * 1000 };

    assert_int_equal(kvs_threads_new(&tp, 3, &err), KVS_OK);

    for (c = 0; c < 5; c++) {
        nanosleep(&ts, NULL);
        job_reset(&j, 3);
        kvs_threads_run(tp, job_task, &j, 64);
        job_check(&j, 64);
    }

    kvs_threads_free(tp);
}


static void
test_one(void **state)
{
    static job_t    j;
    uint32_t        i;
    kvs_err_t       err;
    kvs_threads_t  *tp;

    assert_int_equal(kvs_threads_new(&tp, 1, &err), KVS_OK);
    assert_int_equal(kvs_threads_count(tp), 1);

    job_reset(&j, 1);
    kvs_threads_run(tp, job_ordered, &j, 50);
    assert_int_equal(j.n_order, 50);

    for (i = 0; i < 50; i++) {
        assert_int_equal(j.order[i], i);
    }

    kvs_threads_free(tp);

    /* a NULL pool is the caller alone */
    assert_int_equal(kvs_threads_count(NULL), 1);
    job_reset(&j, 1);
    kvs_threads_run(NULL, job_ordered, &j, 7);
    assert_int_equal(j.n_order, 7);

    /* ranges on one thread: in order too */
    job_reset(&j, 1);
    kvs_threads_run_ranges(NULL, job_ordered, &j, 9);
    assert_int_equal(j.n_order, 9);

    for (i = 0; i < 9; i++) {
        assert_int_equal(j.order[i], i);
    }

    kvs_threads_free(NULL);
}


static void
test_bad(void **state)
{
    kvs_err_t       err;
    kvs_threads_t  *tp;

    tp = (kvs_threads_t *) &err;
    assert_int_equal(kvs_threads_new(&tp, 0, &err), KVS_EINVAL);
    assert_null(tp);
    assert_int_equal(kvs_threads_new(&tp, KVS_THREADS_MAX + 1, &err),
                     KVS_EINVAL);
    assert_null(tp);
}


/* A table over blocks first .. first + n_blocks - 1 of the cache. */
static void
table_init(kvs_kv_table_t *t, uint32_t *ids, uint32_t first,
    uint32_t n_blocks, uint32_t bt)
{
    uint32_t  i;

    for (i = 0; i < n_blocks; i++) {
        ids[i] = first + i;
    }

    t->blocks = ids;
    t->n_blocks = n_blocks;
    t->cap = n_blocks;
    t->n_tokens = n_blocks * bt;
    t->block_tokens = bt;
}


#define P_LEN   70                    /* prefill chunk: the sgemm path */
#define N_DEC   3                     /* decode batch after it */
#define N_CH    20                    /* then a chunk below the sgemm's */
#define BT      16

/*
 * lg[P_LEN + N_DEC + N_CH][n_vocab]: a 70-token prefill of sequence 0,
 * then one step of 3 sequences (0 at position 70, 1 and 2 at 5 and 9
 * over an untouched, zeroed cache), then 20 tokens of sequence 2 at
 * positions 10 .. 29, every entry wanting logits, on n threads.
 */
static void
cpu_run(const kvs_cpu_model_t *cm, unsigned n, float *lg)
{
    uint32_t         i, ids[3][8];
    kvs_err_t        err;
    kvs_batch_t      b;
    kvs_cpu_kv_t    *kv;
    kvs_kv_table_t   tab[3];
    kvs_batch_tok_t  tk[P_LEN];
    static const uint32_t  pos[N_DEC] = { P_LEN, 5, 9 };

    assert_int_equal(kvs_cpu_kv_new(&kv, cm, 24, BT, &err), KVS_OK);
    assert_int_equal(kvs_cpu_kv_set_threads(kv, n, &err), KVS_OK);

    for (i = 0; i < 3; i++) {
        table_init(&tab[i], ids[i], i * 8, 8, BT);
    }

    for (i = 0; i < P_LEN; i++) {
        tk[i].token = (int32_t) ((i * 37 + 11) % cm->hp.n_vocab);
        tk[i].pos = i;
        tk[i].table = &tab[0];
        tk[i].want_logits = 1;
    }

    b.toks = tk;
    b.n = P_LEN;
    assert_int_equal(kvs_cpu_forward(cm, kv, &b, lg, &err), KVS_OK);

    for (i = 0; i < N_DEC; i++) {
        tk[i].token = (int32_t) ((i * 101 + 7) % cm->hp.n_vocab);
        tk[i].pos = pos[i];
        tk[i].table = &tab[i];
        tk[i].want_logits = 1;
    }

    b.n = N_DEC;
    assert_int_equal(kvs_cpu_forward(cm, kv,
                                     &b, lg + (size_t) P_LEN
                                             * cm->hp.n_vocab, &err),
                     KVS_OK);

    for (i = 0; i < N_CH; i++) {
        tk[i].token = (int32_t) ((i * 53 + 3) % cm->hp.n_vocab);
        tk[i].pos = 10 + i;
        tk[i].table = &tab[2];
        tk[i].want_logits = 1;
    }

    b.n = N_CH;
    assert_int_equal(kvs_cpu_forward(cm, kv,
                                     &b, lg + (size_t) (P_LEN + N_DEC)
                                             * cm->hp.n_vocab, &err),
                     KVS_OK);

    kvs_cpu_kv_free(kv);
}


static void
test_cpu_split(void **state)
{
    char              name[128];
    float            *one, *many;
    size_t            nl;
    unsigned          n, d;
    const char       *path;
    kvs_err_t         err;
    kvs_model_t      *m;
    kvs_gen_spec_t    spec;
    kvs_cpu_model_t  *cm;
    static const uint32_t  dtypes[] = {
        KVS_GGML_F32, KVS_GGML_F16, KVS_GGML_Q8_0, KVS_GGML_Q4_0,
        KVS_GGML_Q5_1
    };

    for (d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++) {
        memset(&spec, 0, sizeof(spec));
        snprintf(spec.name, sizeof(spec.name), "test-threads");
        spec.n_layer = 2;
        spec.n_embd = 64;
        spec.n_head = 8;
        spec.n_head_kv = 2;
        spec.n_ff = 96;
        spec.n_vocab = 300;
        spec.n_ctx = 256;
        spec.dtype = dtypes[d];
        spec.seed = 77 + d;

        snprintf(name, sizeof(name), "test_threads.%d.%s.gguf",
                 (int) getpid(), kvs_ggml_type_name(dtypes[d]));
        path = kvs_test_tmp(name);

        if (kvs_gen_write(&spec, path, &err) != KVS_OK
            || kvs_model_open(&m, path, &err) != KVS_OK
            || kvs_cpu_model_new(&cm, m, &err) != KVS_OK)
        {
            fail_msg("%s: %s", path, err.msg);
        }

        unlink(path);

        nl = (size_t) (P_LEN + N_DEC + N_CH) * cm->hp.n_vocab;
        one = malloc(nl * sizeof(float));
        many = malloc(nl * sizeof(float));
        assert_non_null(one);
        assert_non_null(many);

        cpu_run(cm, 1, one);

        for (n = 2; n <= 3; n++) {
            memset(many, 0, nl * sizeof(float));
            cpu_run(cm, n, many);
            assert_memory_equal(one, many, nl * sizeof(float));
        }

        free(one);
        free(many);
        kvs_cpu_model_free(cm);
        kvs_model_close(m);
    }
}


#define N_IDS  64

/* stories260K, two threads, one token per step: run.c's greedy ids. */
static void
test_cpu_stories(void **state)
{
    char             *txt, *end;
    const char       *path, *p;
    float             lg[512];
    size_t            len;
    int32_t           ref[N_IDS], best;
    uint32_t          i, j, ids[N_IDS / BT + 1];
    kvs_err_t         err;
    kvs_batch_t       b;
    kvs_model_t      *m;
    kvs_cpu_kv_t     *kv;
    kvs_kv_table_t    tab;
    kvs_batch_tok_t   tk;
    kvs_cpu_model_t  *cm;

    path = kvs_test_fixture("models/stories260K.derived-token-ids.txt");
    if (path == NULL) {
        skip();
    }

    txt = (char *) kvs_test_slurp(path, &len);
    assert_non_null(txt);
    p = strstr(txt, "greedy_t0_n256:");
    assert_non_null(p);
    p += strlen("greedy_t0_n256:");

    for (i = 0; i < N_IDS; i++) {
        ref[i] = (int32_t) strtol(p, &end, 10);
        assert_true(end != p);
        p = end;
    }

    free(txt);

    path = kvs_test_fixture("models/stories260K-f32.gguf");
    if (path == NULL) {
        skip();
    }

    assert_int_equal(kvs_model_open(&m, path, &err), KVS_OK);
    assert_int_equal(kvs_cpu_model_new(&cm, m, &err), KVS_OK);
    assert_int_equal(cm->hp.n_vocab, 512);
    assert_int_equal(kvs_cpu_kv_new(&kv, cm, N_IDS / BT + 1, BT, &err),
                     KVS_OK);
    assert_int_equal(kvs_cpu_kv_set_threads(kv, 2, &err), KVS_OK);
    table_init(&tab, ids, 0, N_IDS / BT + 1, BT);

    for (i = 0; i + 1 < N_IDS; i++) {
        tk.token = ref[i];
        tk.pos = i;
        tk.table = &tab;
        tk.want_logits = 1;
        b.toks = &tk;
        b.n = 1;
        assert_int_equal(kvs_cpu_forward(cm, kv, &b, lg, &err), KVS_OK);

        best = 0;
        for (j = 1; j < 512; j++) {
            if (lg[j] > lg[best]) {
                best = (int32_t) j;
            }
        }

        assert_int_equal(best, ref[i + 1]);
    }

    /* back to one thread, and a bad count keeps the setting */
    assert_int_equal(kvs_cpu_kv_set_threads(kv, 1, &err), KVS_OK);
    assert_int_equal(kvs_cpu_kv_set_threads(kv, 0, &err), KVS_EINVAL);

    kvs_cpu_kv_free(kv);
    kvs_cpu_model_free(cm);
    kvs_model_close(m);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_two),
        cmocka_unit_test(test_four),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_ranges_late),
        cmocka_unit_test(test_sleep_wake),
        cmocka_unit_test(test_one),
        cmocka_unit_test(test_bad),
        cmocka_unit_test(test_cpu_split),
        cmocka_unit_test(test_cpu_stories),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
