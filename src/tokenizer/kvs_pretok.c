/*
 * kvs_pretok: the pre-tokenizers of byte-level BPE vocabularies, chosen
 * by the tokenizer.ggml.pre name, compiled once with PCRE2 (UTF + UCP,
 * JIT) and shared read-only by all threads.
 *
 * Semantics are those of Hugging Face tokenizers' pre-tokenizers: a
 * pre-tokenizer is a sequence of steps; each step cuts every piece the
 * previous step produced, and a regular-expression step (Split with
 * behaviour Isolated, or ByteLevel with use_regex) keeps both the matches
 * and the gaps between them as pieces, in order.  A regex only sees its
 * piece: lookarounds stop at the piece's ends.
 *
 * Differences from a literal copy of the Hugging Face patterns, all made
 * so that PCRE2 agrees with the Oniguruma engine Hugging Face runs:
 *   - \s and \S are spelt out as the Unicode White_Space set (Oniguruma's
 *     \s); PCRE2's UCP \s also matches U+180E.
 *   - deepseek-llm's "\s+$" becomes "(?<!\s)\s+\z": the same leftmost
 *     match (newlines are isolated by an earlier step, so "$" can only
 *     mean the end), but linear instead of quadratic on long whitespace
 *     runs that do not reach the end.
 *   - falcon's Digits step runs after ByteLevel in Hugging Face, i.e. on
 *     the byte-to-unicode mapped text, where the bytes B2 B3 B9 BC BD BE
 *     show as the numeric characters ² ³ ¹ ¼ ½ ¾; it is a byte-level step
 *     here (kvs_pretok_step_digits_bl), with the [0-9]{3} split that
 *     follows it.  Regex steps always come before it, so every regex
 *     sees valid UTF-8.
 *
 * Invariants: pieces are never empty and cover the text in order; the
 * piece arrays live in the caller's kvs_tok_ctx_t (ctx->pretok) and are
 * reused, so a warm context does not allocate.
 */

#define PCRE2_CODE_UNIT_WIDTH 8

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvs_tok_impl.h"


#define KVS_PRETOK_MAX_STEPS  6

/* JIT stack: the patterns here backtrack over single-character repeats,
 * which needs no stack, so 32 KiB suffices; the limit is headroom, and
 * the interpreter is the fallback if even that is exceeded. */
#define KVS_PRETOK_JIT_STACK_MIN  (32 * 1024)
#define KVS_PRETOK_JIT_STACK_MAX  (1024 * 1024)

/* Unicode White_Space, Oniguruma's \s (see the file comment). */
#define WS                                                                \
    "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}"        \
    "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* GPT-2's ByteLevel regex (tokenizers' ByteLevel with use_regex). */
#define KVS_RE_GPT2                                                       \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+" \
    "|[" WS "]+(?![^" WS "])|[" WS "]+"

/* Llama 3 (tiktoken cl100k) and Qwen2: they differ in \p{N}{1,3} against
 * \p{N}. */
#define KVS_RE_CL100K(num)                                                \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" num       \
    "| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+"                \
    "|[" WS "]+(?![^" WS "])|[" WS "]+"

/* DeepSeek's CJK step: U+4E00-U+9FA5, U+0800-U+4E00, U+AC00-U+D7FF. */
#define KVS_RE_DS_CJK                                                     \
    "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

/* DeepSeek LLM's letters step: the cased letters, as its tokenizer.json
 * lists them. */
#define KVS_RE_DS_LETTERS                                                 \
    "[" WS "]?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}"  \
    "\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}"  \
    "\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"    \
    "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}"           \
    "\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}"                 \
    "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}"             \
    "\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}"             \
    "\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"             \
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}"    \
    "\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}"              \
    "\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}"    \
    "\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}"             \
    "\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"              \
    "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}"     \
    "\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}"              \
    "\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"     \
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}"    \
    "\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"    \
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}"             \
    "\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}"             \
    "\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"         \
    "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}"       \
    "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+"

/* Marks the byte-level digits step in a recipe (not a regex). */
static const char  kvs_pretok_digits_bl_step[] = "<byte-level digits>";

typedef struct {
    const char  *re[KVS_PRETOK_MAX_STEPS];    /* NULL-terminated */
} kvs_pretok_recipe_t;

static const kvs_pretok_recipe_t  kvs_pretok_gpt2 = {{
    KVS_RE_GPT2, NULL
}};

static const kvs_pretok_recipe_t  kvs_pretok_llama3 = {{
    KVS_RE_CL100K("\\p{N}{1,3}"), NULL
}};

static const kvs_pretok_recipe_t  kvs_pretok_qwen2 = {{
    KVS_RE_CL100K("\\p{N}"), NULL
}};

/* Split steps, then Digits(individual_digits: false), ByteLevel without
 * regex. */
static const kvs_pretok_recipe_t  kvs_pretok_deepseek_llm = {{
    "[\\r\\n]",
    KVS_RE_DS_LETTERS,
    "[" WS "]?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}"
        "\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "(?<![" WS "])[" WS "]+\\z",
    KVS_RE_DS_CJK,
    "\\p{N}+",
    /* no terminator needed: KVS_PRETOK_MAX_STEPS entries */
}};

/* Split steps, then Digits(individual_digits: true), ByteLevel without
 * regex. */
static const kvs_pretok_recipe_t  kvs_pretok_deepseek_coder = {{
    "[\\r\\n]",
    "[" WS "]?\\p{L}+",
    "[" WS "]?\\p{P}+",
    KVS_RE_DS_CJK,
    "\\p{N}",
    NULL
}};

/* Punctuation(Contiguous) (Rust's is_ascii_punctuation adds the ASCII
 * symbols to \p{P}), ByteLevel with regex, then Digits and the
 * [0-9]{3} split on the mapped text. */
static const kvs_pretok_recipe_t  kvs_pretok_falcon = {{
    "[\\p{P}$+<=>^`|~]+",
    KVS_RE_GPT2,
    kvs_pretok_digits_bl_step,
    NULL
}};

/* Digits(individual_digits: true), then ByteLevel with regex. */
static const kvs_pretok_recipe_t  kvs_pretok_starcoder = {{
    "\\p{N}",
    KVS_RE_GPT2,
    NULL
}};

typedef struct {
    const char                 *name;
    const kvs_pretok_recipe_t  *recipe;
} kvs_pretok_name_t;

static const kvs_pretok_name_t  kvs_pretok_names[] = {
    { "default",          &kvs_pretok_gpt2 },
    { "gpt-2",            &kvs_pretok_gpt2 },
    { "gpt-neox",         &kvs_pretok_gpt2 },
    { "mpt",              &kvs_pretok_gpt2 },
    { "olmo",             &kvs_pretok_gpt2 },
    { "phi-2",            &kvs_pretok_gpt2 },
    { "llama-bpe",        &kvs_pretok_llama3 },
    { "llama3",           &kvs_pretok_llama3 },
    { "llama-v3",         &kvs_pretok_llama3 },
    { "dbrx",             &kvs_pretok_llama3 },
    { "smaug-bpe",        &kvs_pretok_llama3 },
    { "qwen2",            &kvs_pretok_qwen2 },
    { "deepseek-r1-qwen", &kvs_pretok_qwen2 },
    { "deepseek-llm",     &kvs_pretok_deepseek_llm },
    { "deepseek-coder",   &kvs_pretok_deepseek_coder },
    { "falcon",           &kvs_pretok_falcon },
    { "starcoder",        &kvs_pretok_starcoder },
    { "refact",           &kvs_pretok_starcoder },
    { "smollm",           &kvs_pretok_starcoder },
    { NULL, NULL }
};


typedef struct {
    pcre2_code  *code;                /* NULL: the byte-level digits step */
    int          jit;                 /* code was JIT-compiled */
} kvs_pretok_step_t;

struct kvs_pretok_s {
    unsigned            nsteps;
    kvs_pretok_step_t   step[KVS_PRETOK_MAX_STEPS];
};


/* ctx->pretok.  buf[0] and buf[1] alternate as the input and output of a
 * step. */
typedef struct {
    pcre2_match_data     *md;         /* one pair: only the whole match */
    pcre2_match_context  *mctx;       /* carries the JIT stack */
    pcre2_jit_stack      *stack;
    kvs_piece_t          *buf[2];     /* [cap[i]] */
    size_t                cap[2];
} kvs_pretok_scratch_t;


static int kvs_pretok_step_regex(const kvs_pretok_step_t *st,
    kvs_pretok_scratch_t *s, const char *text, kvs_piece_t in, int o,
    size_t from, size_t max, size_t *n, size_t *stop, kvs_err_t *err);
static int kvs_pretok_step_digits_bl(kvs_pretok_scratch_t *s,
    const char *text, kvs_piece_t in, int o, size_t *n, kvs_err_t *err);


static const kvs_pretok_recipe_t *
kvs_pretok_lookup(const char *name)
{
    const kvs_pretok_name_t  *e;

    if (name == NULL) {
        return NULL;
    }

    for (e = kvs_pretok_names; e->name != NULL; e++) {
        if (strcmp(e->name, name) == 0) {
            return e->recipe;
        }
    }

    return NULL;
}


int
kvs_pretok_known(const char *name)
{
    return kvs_pretok_lookup(name) != NULL;
}


int
kvs_pretok_new(kvs_pretok_t **out, const char *name, kvs_err_t *err)
{
    int                         ec;
    char                        list[256], emsg[128];
    size_t                      used, erroff;
    unsigned                    i;
    kvs_pretok_t               *p;
    const kvs_pretok_name_t    *e;
    const kvs_pretok_recipe_t  *r;

    *out = NULL;

    r = kvs_pretok_lookup(name);
    if (r == NULL) {
        used = 0;
        list[0] = '\0';
        for (e = kvs_pretok_names; e->name != NULL; e++) {
            used += (size_t) snprintf(list + used, sizeof(list) - used,
                                      "%s%s", used ? ", " : "", e->name);
            if (used >= sizeof(list)) {
                break;
            }
        }

        return kvs_err_set(err, KVS_EUNSUPPORTED,
                           "unknown pre-tokenizer \"%.64s\" "
                           "(tokenizer.ggml.pre); known: %s",
                           name ? name : "(null)", list);
    }

    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "pre-tokenizer: out of memory");
    }

    for (i = 0; i < KVS_PRETOK_MAX_STEPS && r->re[i] != NULL; i++) {
        p->nsteps++;

        if (r->re[i] == kvs_pretok_digits_bl_step) {
            continue;
        }

        p->step[i].code = pcre2_compile((PCRE2_SPTR) r->re[i],
                                        PCRE2_ZERO_TERMINATED,
                                        PCRE2_UTF | PCRE2_UCP, &ec, &erroff,
                                        NULL);
        if (p->step[i].code == NULL) {
            pcre2_get_error_message(ec, (PCRE2_UCHAR *) emsg, sizeof(emsg));
            kvs_pretok_free(p);
            return kvs_err_set(err, KVS_EUNSUPPORTED,
                               "pre-tokenizer \"%s\" step %u: PCRE2 cannot "
                               "compile it at offset %zu: %s",
                               name, i, erroff, emsg);
        }

        /* Without JIT (an unsupported CPU) the interpreter still gives
         * the same matches, only slower. */
        p->step[i].jit = pcre2_jit_compile(p->step[i].code,
                                           PCRE2_JIT_COMPLETE) == 0;
    }

    *out = p;

    return KVS_OK;
}


void
kvs_pretok_free(kvs_pretok_t *p)
{
    unsigned  i;

    if (p == NULL) {
        return;
    }

    for (i = 0; i < p->nsteps; i++) {
        pcre2_code_free(p->step[i].code);
    }

    free(p);
}


void
kvs_pretok_scratch_free(kvs_tok_ctx_t *ctx)
{
    kvs_pretok_scratch_t  *s;

    s = ctx->pretok;
    if (s == NULL) {
        return;
    }

    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mctx);
    pcre2_jit_stack_free(s->stack);
    free(s->buf[0]);
    free(s->buf[1]);
    free(s);
    ctx->pretok = NULL;
}


static kvs_pretok_scratch_t *
kvs_pretok_scratch(kvs_tok_ctx_t *ctx)
{
    kvs_pretok_scratch_t  *s;

    if (ctx->pretok != NULL) {
        return ctx->pretok;
    }

    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return NULL;
    }

    s->md = pcre2_match_data_create(1, NULL);
    s->mctx = pcre2_match_context_create(NULL);
    s->stack = pcre2_jit_stack_create(KVS_PRETOK_JIT_STACK_MIN,
                                      KVS_PRETOK_JIT_STACK_MAX, NULL);

    if (s->md == NULL || s->mctx == NULL || s->stack == NULL) {
        pcre2_match_data_free(s->md);
        pcre2_match_context_free(s->mctx);
        pcre2_jit_stack_free(s->stack);
        free(s);
        return NULL;
    }

    pcre2_jit_stack_assign(s->mctx, NULL, s->stack);
    ctx->pretok = s;

    return s;
}


/* Doubles buf[o]. */
static int
kvs_pretok_grow(kvs_pretok_scratch_t *s, int o, kvs_err_t *err)
{
    size_t        cap;
    kvs_piece_t  *p;

    cap = s->cap[o] ? s->cap[o] * 2 : 256;
    p = realloc(s->buf[o], cap * sizeof(kvs_piece_t));
    if (p == NULL) {
        return kvs_err_set(err, KVS_ENOMEM,
                           "pre-tokenizer: out of memory for %zu pieces", cap);
    }

    s->buf[o] = p;
    s->cap[o] = cap;

    return KVS_OK;
}


/* Appends a piece to buf[o]; *n is its count. */
static inline int
kvs_pretok_push(kvs_pretok_scratch_t *s, int o, size_t *n, uint32_t off,
    uint32_t len, kvs_err_t *err)
{
    if (__builtin_expect(*n == s->cap[o], 0)
        && kvs_pretok_grow(s, o, err) != KVS_OK)
    {
        return KVS_ENOMEM;
    }

    s->buf[o][*n].off = off;
    s->buf[o][*n].len = len;
    (*n)++;

    return KVS_OK;
}


int
kvs_pretok_split(const kvs_pretok_t *p, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, const kvs_piece_t **pieces, size_t *n,
    kvs_err_t *err)
{
    size_t  next;

    return kvs_pretok_split_from(p, ctx, text, len, 0, SIZE_MAX, pieces, n,
                                 &next, err);
}


/*
 * The first step runs over the whole text (its regex sees all of it, as
 * in one call) but stops after the first match that brings its pieces to
 * max; what it made goes through the other steps, which split each piece
 * on its own.  Resuming at *next, where it stopped, gives the pieces a
 * single call would have given: a regex search only depends on where it
 * starts, and every search starts at the end of the previous match.  So
 * the scratch holds a batch of pieces, not the text's.
 */
int
kvs_pretok_split_from(const kvs_pretok_t *p, kvs_tok_ctx_t *ctx,
    const char *text, size_t len, size_t from, size_t max,
    const kvs_piece_t **pieces, size_t *n, size_t *next, kvs_err_t *err)
{
    int                    rc, i, o;
    size_t                 k, nin, nout, stop;
    kvs_piece_t            whole;
    kvs_pretok_scratch_t  *s;

    *pieces = NULL;
    *n = 0;
    *next = len;

    if (len == 0 || from >= len) {
        return KVS_OK;
    }

    if (len > UINT32_MAX) {
        return kvs_err_set(err, KVS_EINVAL,
                           "pre-tokenizer: a text of %zu bytes is over the "
                           "4 GiB limit", len);
    }

    s = kvs_pretok_scratch(ctx);
    if (s == NULL) {
        return kvs_err_set(err, KVS_ENOMEM, "pre-tokenizer: out of memory");
    }

    whole.off = 0;
    whole.len = (uint32_t) len;

    /* a first step that is not a regex cannot resume: all of it then */
    if (p->nsteps == 0 || p->step[0].code == NULL) {
        from = 0;
        max = SIZE_MAX;
    }

    /* Step 0 reads the text and writes buf[0]; step i reads
     * buf[(i - 1) & 1] and writes buf[i & 1]. */
    nin = 0;
    for (i = 0; i < (int) p->nsteps; i++) {
        o = i & 1;
        nout = 0;

        for (k = 0; k < (i == 0 ? 1 : nin); k++) {
            const kvs_piece_t  in = i == 0 ? whole : s->buf[o ^ 1][k];

            if (p->step[i].code != NULL) {
                rc = kvs_pretok_step_regex(&p->step[i], s, text, in, o,
                                           i == 0 ? from : 0,
                                           i == 0 ? max : SIZE_MAX, &nout,
                                           &stop, err);
                if (i == 0) {
                    *next = stop;
                }

            } else {
                rc = kvs_pretok_step_digits_bl(s, text, in, o, &nout, err);
            }

            if (rc != KVS_OK) {
                return rc;
            }
        }

        nin = nout;
    }

    *pieces = s->buf[(p->nsteps - 1) & 1];
    *n = nin;

    return KVS_OK;
}


size_t
kvs_pretok_scratch_bytes(const kvs_tok_ctx_t *ctx)
{
    const kvs_pretok_scratch_t  *s;

    s = ctx->pretok;
    if (s == NULL) {
        return 0;
    }

    /* the match data and context are a few hundred bytes; the JIT stack
     * is mapped at its maximum but only touched as a match needs it,
     * which our patterns keep near its starting size */
    return sizeof(*s) + KVS_PRETOK_JIT_STACK_MIN
           + (s->cap[0] + s->cap[1]) * sizeof(kvs_piece_t);
}


/* Split(regex, Isolated) of one piece: matches and the gaps between them
 * become pieces.  An empty match (none of our patterns has one) would
 * produce nothing and the search moves on by one character. */
static int
kvs_pretok_step_regex(const kvs_pretok_step_t *st, kvs_pretok_scratch_t *s,
    const char *text, kvs_piece_t in, int o, size_t from, size_t max,
    size_t *n, size_t *stop, kvs_err_t *err)
{
    int               rc;
    PCRE2_SPTR        subj;
    PCRE2_SIZE        pos, last, len, *ov;

    subj = (PCRE2_SPTR) text + in.off;
    len = in.len;
    ov = pcre2_get_ovector_pointer(s->md);
    pos = from;
    last = from;
    *stop = len;

    while (pos < len) {
        if (st->jit) {
            rc = pcre2_jit_match(st->code, subj, len, pos, 0, s->md,
                                 s->mctx);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
                rc = pcre2_match(st->code, subj, len, pos,
                                 PCRE2_NO_JIT | PCRE2_NO_UTF_CHECK, s->md,
                                 s->mctx);
            }

        } else {
            rc = pcre2_match(st->code, subj, len, pos, PCRE2_NO_UTF_CHECK,
                             s->md, s->mctx);
        }

        if (rc == PCRE2_ERROR_NOMATCH) {
            break;
        }

        if (rc < 0) {
            return kvs_err_set(err, KVS_ERANGE,
                               "pre-tokenizer: PCRE2 error %d at byte %zu",
                               rc, (size_t) (in.off + pos));
        }

        if (ov[1] == ov[0]) {
            pos = ov[0] + 1;
            while (pos < len && (subj[pos] & 0xC0) == 0x80) {
                pos++;
            }

            continue;
        }

        if (ov[0] > last
            && kvs_pretok_push(s, o, n, in.off + (uint32_t) last,
                               (uint32_t) (ov[0] - last), err) != KVS_OK)
        {
            return KVS_ENOMEM;
        }

        if (kvs_pretok_push(s, o, n, in.off + (uint32_t) ov[0],
                            (uint32_t) (ov[1] - ov[0]), err) != KVS_OK)
        {
            return KVS_ENOMEM;
        }

        last = ov[1];
        pos = ov[1];

        /* a batch is full: the caller resumes here */
        if (*n >= max && pos < len) {
            *stop = pos;
            return KVS_OK;
        }
    }

    if (last < len
        && kvs_pretok_push(s, o, n, in.off + (uint32_t) last,
                           (uint32_t) (len - last), err) != KVS_OK)
    {
        return KVS_ENOMEM;
    }

    return KVS_OK;
}


/* Bytes whose GPT-2 byte-level character is numeric (Rust's
 * char::is_numeric: Nd, Nl, No): 0-9 and ² ³ ¹ ¼ ½ ¾. */
static int
kvs_pretok_bl_numeric(uint8_t b)
{
    return (b >= '0' && b <= '9') || b == 0xB2 || b == 0xB3 || b == 0xB9
           || (b >= 0xBC && b <= 0xBE);
}


static int
kvs_pretok_ascii_digit(uint8_t b)
{
    return b >= '0' && b <= '9';
}


/* Falcon's Digits(individual_digits: false) then Split([0-9]{3},
 * Isolated), both on the byte-level text: runs of numeric bytes are cut
 * from the rest, and each run is cut around its leftmost-first groups of
 * three ASCII digits. */
static int
kvs_pretok_step_digits_bl(kvs_pretok_scratch_t *s, const char *text,
    kvs_piece_t in, int o, size_t *n, kvs_err_t *err)
{
    int             num;
    uint32_t        i, j, last, end;
    const uint8_t  *b;

    b = (const uint8_t *) text + in.off;
    i = 0;

    while (i < in.len) {
        num = kvs_pretok_bl_numeric(b[i]);
        end = i + 1;
        while (end < in.len && kvs_pretok_bl_numeric(b[end]) == num) {
            end++;
        }

        if (num) {
            last = i;
            j = i;
            while (j + 3 <= end) {
                if (!(kvs_pretok_ascii_digit(b[j])
                      && kvs_pretok_ascii_digit(b[j + 1])
                      && kvs_pretok_ascii_digit(b[j + 2])))
                {
                    j++;
                    continue;
                }

                if (j > last
                    && kvs_pretok_push(s, o, n, in.off + last, j - last, err)
                       != KVS_OK)
                {
                    return KVS_ENOMEM;
                }

                if (kvs_pretok_push(s, o, n, in.off + j, 3, err) != KVS_OK) {
                    return KVS_ENOMEM;
                }

                j += 3;
                last = j;
            }

            i = last;
        }

        if (end > i
            && kvs_pretok_push(s, o, n, in.off + i, end - i, err) != KVS_OK)
        {
            return KVS_ENOMEM;
        }

        i = end;
    }

    return KVS_OK;
}
