/*
 * kvs_jinja: a small Jinja interpreter for chat templates, rendering as
 * Hugging Face's apply_chat_template does with Python jinja2: an
 * ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the
 * loop controls, the globals raise_exception(msg) and strftime_now(fmt),
 * and a tojson filter that is json.dumps(x, ensure_ascii=False, ...).
 *
 * A template is compiled once (at configuration time): a construct the
 * interpreter does not run is refused then, with a message naming it and
 * its line ("line 3: unsupported statement 'include'").  A compiled
 * template is immutable and may be rendered by many threads at once; each
 * render allocates from its own arena, bounded by the caller's limits,
 * and frees it all before returning, failed or not.
 *
 * The sandbox: the template sees only the context given (JSON values),
 * the globals above, range, namespace and dict; attribute access reaches
 * dict keys, list and string items and a whitelist of non-mutating
 * string, dict and list methods; anything else is undefined, and calling
 * it fails the render.  Steps (expression and statement evaluations, loop
 * iterations), output bytes, recursion depth and allocated bytes are
 * bounded; passing a bound fails the render with KVS_ETOOLONG.
 */

#ifndef KVS_JINJA_H
#define KVS_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/kvs_buf.h"
#include "base/kvs_err.h"

typedef struct kvs_jinja_s  kvs_jinja_t;

typedef struct {
    uint64_t   max_steps;             /* evaluations and loop iterations */
    size_t     max_output;            /* bytes of rendered text */
    unsigned   max_depth;             /* nested macro / caller calls */
    size_t     max_memory;            /* bytes the render may allocate */
    int64_t    now;                   /* strftime_now's clock, Unix UTC */
} kvs_jinja_opts_t;

/* Limits fit for one chat request: 2M steps, 4 MiB of output, depth 64,
 * 64 MiB of memory; now = 0 (callers set it). */
void kvs_jinja_opts_default(kvs_jinja_opts_t *opts);

/* Compiles src[0..len) (UTF-8).  On failure *out is NULL, nothing is held
 * and err says what and on which line (KVS_EFORMAT: a syntax error,
 * KVS_EUNSUPPORTED: a construct outside the subset). */
int kvs_jinja_compile(kvs_jinja_t **out, const char *src, size_t len,
    kvs_err_t *err);

void kvs_jinja_free(kvs_jinja_t *tpl);

/* Renders with the variables of ctx (a JSON object; NULL for none)
 * appended to out.  On failure out->len is as it was and err says why:
 * KVS_EINVAL for raise_exception (the message is the template's), for an
 * error jinja2 would raise (undefined attribute of undefined, a type
 * error, an unsafe call); KVS_ETOOLONG for a limit; KVS_ENOMEM. */
int kvs_jinja_render(const kvs_jinja_t *tpl, const json_t *ctx,
    const kvs_jinja_opts_t *opts, kvs_buf_t *out, kvs_err_t *err);

#endif /* KVS_JINJA_H */
