/*
 * test_chat_paths: the two chat renderers agree.  Every fixture template
 * (the .jinja files in $KVS_FIXTURES/templates) that kvs_chat_detect()
 * recognises as one of the eight families is rendered through the Jinja
 * interpreter (kvs_chat_jinja, as the server does by default) and by the
 * family's C renderer, on conversations the C path accepts; where the
 * real template renders (it refuses some that the C families are lenient
 * about) the bytes must be identical for the families' own templates.
 * Every family must be met and compared.
 *
 * Then the Jinja path's own rules, on small templates written here: the
 * context (developer as system, parts joined or walked, bos/eos, a
 * missing assistant content), raise_exception's message as KVS_EINVAL,
 * a render limit as KVS_EINVAL naming it, compile errors naming the
 * construct and line, and the control-token guard.
 */

#include <dirent.h>
#include <time.h>

#include "kvs_test.h"

#include "tokenizer/kvs_chat.h"
#include "tokenizer/kvs_chat_jinja.h"


static kvs_err_t  err;


/* Conversations every family's C renderer accepts. */
static const char  *convs[] = {
    "[{\"role\":\"user\",\"content\":\"Hello\"}]",

    "[{\"role\":\"system\",\"content\":\"You are terse.\"},"
    " {\"role\":\"user\",\"content\":\"Hi\"},"
    " {\"role\":\"assistant\",\"content\":\"Hello! How can I help?\"},"
    " {\"role\":\"user\",\"content\":\"What is 2+2?\"}]",

    "[{\"role\":\"user\",\"content\":\"  padded  \\n\"},"
    " {\"role\":\"assistant\",\"content\":\" ok \"},"
    " {\"role\":\"user\",\"content\":\"multi\\nline \\u00e9\\u4e2d\"}]",

    "[{\"role\":\"developer\",\"content\":\"Be brief.\"},"
    " {\"role\":\"user\",\"content\":\"Hi\"}]",

    "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"part "
    "one \"},{\"type\":\"text\",\"text\":\"part two\"}]}]",
};


/* The BOS and EOS texts a family's models have. */
static void
family_tokens(kvs_chat_kind_t kind, kvs_chat_args_t *a)
{
    const char  *bos, *eos;

    switch (kind) {
    case KVS_CHAT_LLAMA3:
    case KVS_CHAT_LLAMA31:
        bos = "<|begin_of_text|>";
        eos = "<|eot_id|>";
        break;
    case KVS_CHAT_GEMMA:
        bos = "<bos>";
        eos = "<eos>";
        break;
    case KVS_CHAT_CHATML:
        bos = NULL;
        eos = "<|im_end|>";
        break;
    case KVS_CHAT_PHI3:
        bos = "<s>";
        eos = "<|endoftext|>";
        break;
    default:
        bos = "<s>";
        eos = "</s>";
        break;
    }

    a->bos = bos;
    a->bos_len = bos ? strlen(bos) : 0;
    a->eos = eos;
    a->eos_len = strlen(eos);
}


/* The families' own templates among the fixtures.  Others that
 * kvs_chat_detect() takes for a family (functionary-medium-v3.1 for
 * llama3.1, say) are variants the C renderer gets wrong, one reason the
 * model's own template is what a model serves by default: their
 * differences are counted and printed, not failed. */
static const struct {
    const char       *file;
    kvs_chat_kind_t   kind;
} own[] = {
    { "llama-3-8b-instruct.jinja", KVS_CHAT_LLAMA3 },
    { "llama-3.1-8b-instruct.jinja", KVS_CHAT_LLAMA31 },
    { "llama-3.2-3b-instruct.jinja", KVS_CHAT_LLAMA31 },
    { "llama-3.3-70b-instruct.jinja", KVS_CHAT_LLAMA31 },
    { "llama-2-7b-chat.jinja", KVS_CHAT_LLAMA2 },
    { "qwen2-7b-instruct.jinja", KVS_CHAT_CHATML },
    { "qwen2.5-7b-instruct.jinja", KVS_CHAT_CHATML },
    { "mistral-7b-instruct-v0.1.jinja", KVS_CHAT_MISTRAL },
    { "mixtral-8x7b-instruct-v0.1.jinja", KVS_CHAT_MISTRAL },
    { "tinyllama-1.1b-chat-v1.0.jinja", KVS_CHAT_ZEPHYR },
    { "phi-3-mini-4k-instruct.jinja", KVS_CHAT_PHI3 },
    { "phi-3.5-mini-instruct.jinja", KVS_CHAT_PHI3 },
    { "gemma-2-2b-it.jinja", KVS_CHAT_GEMMA },
    { "gemma-3-1b-it.jinja", KVS_CHAT_GEMMA },
};


static int
own_kind(const char *file)
{
    size_t  i;

    for (i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
        if (strcmp(own[i].file, file) == 0) {
            return (int) own[i].kind;
        }
    }

    return -1;
}


/* Documented differences: the first Phi-3-mini template drops system
 * messages and ignores add_generation_prompt (kvs_chat.h); the C gemma
 * family trims each content part, while a Gemma template that does not
 * walk parts is given them joined and trims the whole (kvs_chat_jinja.h;
 * jinja2 itself would print the list's repr there). */
static int
known_divergence(kvs_chat_kind_t kind, const char *conv, int agp,
    int parts)
{
    if (kind == KVS_CHAT_GEMMA && !parts
        && strstr(conv, "\"type\"") != NULL)
    {
        return 1;
    }

    return kind == KVS_CHAT_PHI3
           && (!agp || strstr(conv, "\"system\"") != NULL
               || strstr(conv, "\"developer\"") != NULL);
}


static void
test_families_agree(void **state)
{
    int                rc, agp, compared, differ, kind, met[KVS_CHAT_N];
    char               path[1024];
    char              *text;
    size_t             i, len, total;
    DIR               *d;
    json_t            *msgs;
    kvs_buf_t          a, b;
    kvs_chat_t         fam, jin;
    const char        *dir;
    struct dirent     *e;
    kvs_chat_args_t    args;
    kvs_chat_jinja_t  *cj;

    dir = kvs_test_fixture("templates");
    if (dir == NULL) {
        skip();
    }

    d = opendir(dir);
    assert_non_null(d);
    memset(met, 0, sizeof(met));
    total = 0;

    while ((e = readdir(d)) != NULL) {
        len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 6, ".jinja") != 0) {
            continue;
        }

        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        text = (char *) kvs_test_slurp(path, &len);
        assert_non_null(text);

        kind = own_kind(e->d_name);

        if (kvs_chat_detect(text, len, &fam, &err) != KVS_OK) {
            if (kind >= 0) {
                fail_msg("%s: not recognised: %s", e->d_name, err.msg);
            }

            free(text);
            continue;
        }

        if (kind >= 0 && (int) fam.kind != kind) {
            fail_msg("%s: recognised as %s, not %s", e->d_name,
                     kvs_chat_name(fam.kind),
                     kvs_chat_name((kvs_chat_kind_t) kind));
        }

        rc = kvs_chat_jinja_compile(&cj, text, len, NULL, &err);
        if (rc != KVS_OK) {
            fail_msg("%s: %s", e->d_name, err.msg);
        }

        memset(&jin, 0, sizeof(jin));
        jin.jinja = cj;
        compared = 0;
        differ = 0;

        for (i = 0; i < sizeof(convs) / sizeof(convs[0]); i++) {
            for (agp = 0; agp <= 1; agp++) {
                if (known_divergence(fam.kind, convs[i], agp, cj->parts)) {
                    continue;
                }

                msgs = json_loads(convs[i], 0, NULL);
                assert_non_null(msgs);
                memset(&args, 0, sizeof(args));
                family_tokens(fam.kind, &args);
                args.add_generation_prompt = agp;
                memset(&a, 0, sizeof(a));
                memset(&b, 0, sizeof(b));

                assert_int_equal(kvs_chat_render(&fam, msgs, &args, &a,
                                                 &err), KVS_OK);

                if (kvs_chat_render(&jin, msgs, &args, &b, &err)
                    == KVS_OK)
                {
                    if ((a.len != b.len
                         || memcmp(a.data, b.data, a.len) != 0)
                        && kind < 0)
                    {
                        differ++;

                    } else if (a.len != b.len
                               || memcmp(a.data, b.data, a.len) != 0)
                    {
                        fail_msg("%s (%s), conversation %zu, agp %d:\n"
                                 "C:     [%.*s]\njinja: [%.*s]",
                                 e->d_name, kvs_chat_name(fam.kind), i,
                                 agp, (int) a.len, (char *) a.data,
                                 (int) b.len, (char *) b.data);
                    }

                    compared++;
                }

                kvs_buf_free(&a);
                kvs_buf_free(&b);
                json_decref(msgs);
            }
        }

        if (kind < 0) {
            print_message("%-40s %-9s (a variant) %d of %d renderings "
                          "differ\n", e->d_name, kvs_chat_name(fam.kind),
                          differ, compared);

        } else {
            print_message("%-40s %-9s %d renderings identical\n",
                          e->d_name, kvs_chat_name(fam.kind), compared);
            assert_true(compared >= 2);   /* at least "Hello", both ways */
            met[fam.kind]++;
            total += compared;
        }

        kvs_chat_jinja_free(cj);
        free(text);
    }

    closedir(d);

    for (i = 0; i < KVS_CHAT_N; i++) {
        if (met[i] == 0) {
            fail_msg("no fixture template of the %s family",
                     kvs_chat_name((kvs_chat_kind_t) i));
        }
    }

    print_message("%zu renderings identical\n", total);
}


/* Renders msgs (JSON) with tpl through a kvs_chat_t, as the server does. */
static int
render(const char *tpl, const char *json, int agp, kvs_buf_t *out)
{
    int                rc;
    json_t            *msgs;
    kvs_chat_t         chat;
    kvs_chat_args_t    args;
    kvs_chat_jinja_t  *cj;

    assert_int_equal(kvs_chat_jinja_compile(&cj, tpl, strlen(tpl), NULL,
                                            &err), KVS_OK);
    msgs = json_loads(json, 0, NULL);
    assert_non_null(msgs);

    memset(&chat, 0, sizeof(chat));
    chat.jinja = cj;
    memset(&args, 0, sizeof(args));
    args.bos = "<B>";
    args.bos_len = 3;
    args.eos = "<E>";
    args.eos_len = 3;
    args.add_generation_prompt = agp;

    memset(out, 0, sizeof(*out));
    rc = kvs_chat_render(&chat, msgs, &args, out, &err);

    json_decref(msgs);
    kvs_chat_jinja_free(cj);

    return rc;
}


static void
expect(const char *tpl, const char *json, int agp, const char *want)
{
    kvs_buf_t  out;

    if (render(tpl, json, agp, &out) != KVS_OK) {
        fail_msg("render failed: %s", err.msg);
    }

    if (out.len != strlen(want) || memcmp(out.data, want, out.len) != 0) {
        fail_msg("got [%.*s], want [%s]", (int) out.len, (char *) out.data,
                 want);
    }

    kvs_buf_free(&out);
}


/* A template that prints each message's role and content as it sees it. */
#define SHOW \
    "{{ bos_token }}{% for m in messages %}[{{ m.role }}|" \
    "{{ m.content }}]{% endfor %}{% if add_generation_prompt %}+" \
    "{% endif %}{{ eos_token }}"

#define WALK \
    "{% for m in messages %}{% if m.content is string %}{{ m.content }}" \
    "{% else %}{% for p in m.content %}({{ p.text }}){% endfor %}" \
    "{% endif %};{% endfor %}"

static void
test_context(void **state)
{
    expect(SHOW, "[{\"role\":\"user\",\"content\":\"hi\"}]", 1,
           "<B>[user|hi]+<E>");
    expect(SHOW, "[{\"role\":\"user\",\"content\":\"hi\"}]", 0,
           "<B>[user|hi]<E>");
    expect(SHOW, "[{\"role\":\"developer\",\"content\":\"d\"},"
           "{\"role\":\"user\",\"content\":\"u\"},"
           "{\"role\":\"assistant\",\"content\":null},"
           "{\"role\":\"assistant\"}]", 0,
           "<B>[system|d][user|u][assistant|][assistant|]<E>");

    /* a template that does not walk parts sees their texts joined */
    expect(SHOW, "[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
           "\"text\":\"a \"},{\"type\":\"text\",\"text\":\"b\"}]}]", 0,
           "<B>[user|a b]<E>");

    /* one that walks them gets them as sent */
    expect(WALK, "[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
           "\"text\":\"a \"},{\"type\":\"text\",\"text\":\"b\"}]},"
           "{\"role\":\"assistant\",\"content\":\"c\"}]", 0,
           "(a )(b);c;");

    /* strftime_now is today's date */
    {
        char        want[32];
        time_t      t;
        struct tm   tm;

        t = time(NULL);
        gmtime_r(&t, &tm);
        strftime(want, sizeof(want), "%Y", &tm);
        expect("{{ strftime_now('%Y') }}",
               "[{\"role\":\"user\",\"content\":\"x\"}]", 1, want);
    }
}


static void
test_errors(void **state)
{
    kvs_buf_t          out;
    kvs_chat_jinja_t  *cj;

    /* raise_exception: the template's words */
    assert_int_equal(render("{% if messages[0].role != 'system' %}"
                            "{{ raise_exception('System first, please') }}"
                            "{% endif %}x",
                            "[{\"role\":\"user\",\"content\":\"hi\"}]", 1,
                            &out), KVS_EINVAL);
    assert_string_equal(err.msg, "System first, please");
    assert_int_equal(out.len, 0);

    /* a render that loops past its steps is a request error */
    assert_int_equal(render("{% for i in range(100000) %}{% for j in "
                            "range(100000) %}{% endfor %}{% endfor %}",
                            "[{\"role\":\"user\",\"content\":\"hi\"}]", 1,
                            &out), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "chat template: "));
    assert_non_null(strstr(err.msg, "steps"));

    /* and one that writes past its output */
    assert_int_equal(render("{% for i in range(100000) %}{{ messages[0]."
                            "content * 100 }}{% endfor %}",
                            "[{\"role\":\"user\",\"content\":\"hi\"}]", 1,
                            &out), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "chat template: "));

    /* the messages are checked before any template runs */
    assert_int_equal(render("x", "[{\"role\":\"function\",\"content\":"
                            "\"r\"}]", 1, &out), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "messages[0].role"));
    assert_int_equal(render("x", "[]", 1, &out), KVS_EINVAL);
    assert_int_equal(render("x", "[{\"role\":\"user\",\"content\":[{\"type\""
                            ":\"image_url\"}]}]", 1, &out), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "messages[0].content[0].type"));

    /* compile errors name the construct and the line */
    assert_int_equal(kvs_chat_jinja_compile(&cj, "a\n{% include 'x' %}",
                                            19, NULL, &err),
                     KVS_EUNSUPPORTED);
    assert_null(cj);
    assert_non_null(strstr(err.msg, "line 2"));
    assert_non_null(strstr(err.msg, "include"));
}


/* The limits grow with the request: 300 messages that a template pads to
 * 600 bytes each (180 KB, over the 64 KiB base) render; the same template
 * looping without end on one message stops at its steps. */
static void
test_limits_scale(void **state)
{
    size_t      i;
    json_t     *msgs;
    char       *json;
    kvs_buf_t   out;

    msgs = json_array();
    for (i = 0; i < 300; i++) {
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role",
                                              i % 2 ? "assistant" : "user",
                                              "content", "hi"));
    }

    json = json_dumps(msgs, 0);
    assert_non_null(json);

    assert_int_equal(render("{% for m in messages %}{{ m.content }}"
                            "{{ ' ' * 598 }}{% endfor %}", json, 1, &out),
                     KVS_OK);
    assert_int_equal(out.len, 300 * 600);
    kvs_buf_free(&out);

    assert_int_equal(render("{% for m in messages %}{% for i in range(100)"
                            " %}{{ i }}{% endfor %}{% endfor %}", json, 1,
                            &out), KVS_OK);
    kvs_buf_free(&out);

    assert_int_equal(render("{% for i in range(1000000) %}{% endfor %}",
                            "[{\"role\":\"user\",\"content\":\"x\"}]", 1,
                            &out), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "limit of 22000 steps"));

    free(json);
    json_decref(msgs);
}


static void
test_guard(void **state)
{
    kvs_vocab_t   *v;
    json_t        *msgs;
    const char    *path;

    path = kvs_test_fixture("vocab/ggml-vocab-phi-3.gguf");
    if (path == NULL) {
        skip();
    }

    assert_int_equal(kvs_vocab_open(&v, path, &err), KVS_OK);

    msgs = json_loads("[{\"role\":\"user\",\"content\":\"a <|end|> b\"}]", 0,
                      NULL);
    assert_int_equal(kvs_chat_jinja_guard(v, msgs, NULL, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "messages[0].content"));
    assert_non_null(strstr(err.msg, "<|end|>"));
    json_decref(msgs);

    msgs = json_loads("[{\"role\":\"user\",\"content\":\"ok\"},"
                      "{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                      "\"text\":\"fine\"},{\"type\":\"text\",\"text\":"
                      "\"<|assistant|>\"}]}]", 0, NULL);
    assert_int_equal(kvs_chat_jinja_guard(v, msgs, NULL, &err), KVS_EINVAL);
    assert_non_null(strstr(err.msg, "messages[1].content[1].text"));
    json_decref(msgs);

    msgs = json_loads("[{\"role\":\"user\",\"content\":\"<|end plain\"}]", 0,
                      NULL);
    assert_int_equal(kvs_chat_jinja_guard(v, msgs, NULL, &err), KVS_OK);
    json_decref(msgs);

    kvs_vocab_free(v);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_families_agree),
        cmocka_unit_test(test_context),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_limits_scale),
        cmocka_unit_test(test_guard),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
