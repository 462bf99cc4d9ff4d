/*
 * kvs_chat: recognising chat templates (by name, or by a template's
 * text) and checking OpenAI messages for them (the formats are described
 * in kvs_chat.h).  Rendering is kvs_chat_render.c.
 *
 * A check renders nothing and stops at the first bad field in message
 * order (role, content shape, then the family's ordering rules), so its
 * error names that field; a render runs it first and then can fail only
 * for memory.
 */

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kvs_chat.h"
#include "kvs_chat_impl.h"

#define KVS_CHAT_SHOW          40              /* template bytes in errors */


static const char  *kvs_chat_names[KVS_CHAT_N] = {
    "llama3", "llama3.1", "llama2", "chatml", "mistral", "zephyr", "phi3",
    "gemma"
};

const char  *kvs_chat_role_names[] = {
    "system", "user", "assistant", "tool"
};


const char *
kvs_chat_name(kvs_chat_kind_t kind)
{
    if ((unsigned) kind >= KVS_CHAT_N) {
        return "?";
    }

    return kvs_chat_names[kind];
}


/* The standard form of each family: whether its templates write BOS. */
static void
kvs_chat_init(kvs_chat_t *chat, kvs_chat_kind_t kind)
{
    memset(chat, 0, sizeof(kvs_chat_t));
    chat->kind = kind;
    chat->bos = kind != KVS_CHAT_CHATML && kind != KVS_CHAT_ZEPHYR
                && kind != KVS_CHAT_PHI3;
}


int
kvs_chat_by_name(const char *name, size_t len, kvs_chat_t *chat,
    kvs_err_t *err)
{
    int  k;

    for (k = 0; k < KVS_CHAT_N; k++) {
        if (strlen(kvs_chat_names[k]) == len
            && memcmp(kvs_chat_names[k], name, len) == 0)
        {
            kvs_chat_init(chat, (kvs_chat_kind_t) k);
            return KVS_OK;
        }
    }

    return kvs_err_set(err, KVS_EINVAL, "unknown chat template \"%.*s\": "
                       "use one of " KVS_CHAT_NAMES,
                       (int) (len > 64 ? 64 : len), name);
}


/* Detection. */

static int
kvs_chat_has(const char *text, size_t len, const char *marker)
{
    return memmem(text, len, marker, strlen(marker)) != NULL;
}


/*
 * The default system prompt of a ChatML template (Qwen's), written as a
 * literal "<|im_start|>system\nTEXT<|im_end|>" either inside a quoted
 * string or as raw template text after a block tag.  TEXT must be plain:
 * no quote, brace or backslash, so that it is the literal itself and not
 * an expression or an escape we would have to interpret.
 */
static void
kvs_chat_find_system(kvs_chat_t *chat, const char *text, size_t len)
{
    size_t       pos, n, k;
    const char  *p, *end, *s, *e;

    static const char  start[] = "<|im_start|>system";
    static const char  stop[] = "<|im_end|>";

    end = text + len;
    pos = 0;

    while (pos < len) {
        p = memmem(text + pos, len - pos, start, sizeof(start) - 1);
        if (p == NULL) {
            return;
        }

        pos = (size_t) (p - text) + 1;

        if (!((p > text && (p[-1] == '\'' || p[-1] == '"'))
              || (p - text >= 2 && p[-2] == '%' && p[-1] == '}')))
        {
            continue;
        }

        s = p + sizeof(start) - 1;

        if (s < end && *s == '\n') {
            s++;

        } else if (end - s >= 2 && s[0] == '\\' && s[1] == 'n') {
            s += 2;

        } else {
            continue;
        }

        e = memmem(s, (size_t) (end - s), stop, sizeof(stop) - 1);
        if (e == NULL || e == s) {
            continue;
        }

        n = (size_t) (e - s);
        for (k = 0; k < n; k++) {
            if (strchr("'\"{}\\", s[k]) != NULL || s[k] == '\0') {
                break;
            }
        }

        if (k == n) {
            chat->system = s;
            chat->system_len = n;
            return;
        }
    }
}


/* A printable excerpt of the template's start, for error messages. */
static const char *
kvs_chat_excerpt(const char *text, size_t len, char *buf, size_t size)
{
    size_t  i, n;

    n = len < size - 1 ? len : size - 1;

    for (i = 0; i < n; i++) {
        buf[i] = (text[i] >= 0x20 && text[i] < 0x7f) ? text[i] : '.';
    }

    buf[n] = '\0';

    return buf;
}


int
kvs_chat_detect(const char *text, size_t len, kvs_chat_t *chat,
    kvs_err_t *err)
{
    int          i, found, nfound;
    char         show[KVS_CHAT_SHOW + 1];
    const char  *what;

    /* one marker per family group; a template must show exactly one */
    static const char  *markers[] = {
        "<|start_header_id|>", "[INST]", "<|im_start|>", "<|user|>",
        "<start_of_turn>"
    };

    if (text == NULL || len == 0) {
        return kvs_err_set(err, KVS_EUNSUPPORTED, "the chat template is "
                           "empty: name one with kvserve_chat_template "
                           "(" KVS_CHAT_NAMES ")");
    }

    found = -1;
    nfound = 0;

    for (i = 0; i < (int) (sizeof(markers) / sizeof(markers[0])); i++) {
        if (kvs_chat_has(text, len, markers[i])) {
            found = i;
            nfound++;
        }
    }

    what = NULL;

    switch (nfound == 1 ? found : -1) {

    case 0:
        if (kvs_chat_has(text, len, "Cutting Knowledge Date")) {
            kvs_chat_init(chat, KVS_CHAT_LLAMA31);
            chat->today = kvs_chat_has(text, len, "strftime_now");

        } else {
            kvs_chat_init(chat, KVS_CHAT_LLAMA3);
        }

        return KVS_OK;

    case 1:
        if (kvs_chat_has(text, len, "<<SYS>>")) {
            kvs_chat_init(chat, KVS_CHAT_LLAMA2);
            return KVS_OK;
        }

        if (kvs_chat_has(text, len, "[SYSTEM_PROMPT]")
            || kvs_chat_has(text, len, "[AVAILABLE_TOOLS]")
            || kvs_chat_has(text, len, "[TOOL_CALLS]"))
        {
            what = "a later Mistral format ([INST] with [SYSTEM_PROMPT] "
                   "or tool markers), not the v0.1/v0.2 one we render";
            break;
        }

        if (kvs_chat_has(text, len, "' [INST] '")
            || kvs_chat_has(text, len, "\" [INST] \""))
        {
            kvs_chat_init(chat, KVS_CHAT_MISTRAL);
            return KVS_OK;
        }

        what = "an [INST] format without the \" [INST] \" spacing of "
               "Mistral v0.1/v0.2 (the first Mistral v0.1 template?)";
        break;

    case 2:
        if (kvs_chat_has(text, len, "<|im_sep|>")) {
            what = "a ChatML variant with <|im_sep|> (Phi-4)";
            break;
        }

        kvs_chat_init(chat, KVS_CHAT_CHATML);
        chat->bos = kvs_chat_has(text, len, "bos_token");
        kvs_chat_find_system(chat, text, len);
        return KVS_OK;

    case 3:
        if (kvs_chat_has(text, len, "<|end|>")) {
            kvs_chat_init(chat, KVS_CHAT_PHI3);

        } else if (kvs_chat_has(text, len, "eos_token")) {
            kvs_chat_init(chat, KVS_CHAT_ZEPHYR);

        } else {
            what = "<|user|> turns ended neither by <|end|> (Phi-3) nor by "
                   "eos_token (Zephyr)";
            break;
        }

        chat->bos = kvs_chat_has(text, len, "bos_token");
        return KVS_OK;

    case 4:
        kvs_chat_init(chat, KVS_CHAT_GEMMA);
        return KVS_OK;

    default:
        what = nfound == 0 ? "none of the markers we know"
                           : "the markers of more than one format";
        break;
    }

    return kvs_err_set(err, KVS_EUNSUPPORTED, "chat template not "
                       "recognised: it has %s; name one with "
                       "kvserve_chat_template (" KVS_CHAT_NAMES "); it "
                       "starts \"%s\"", what,
                       kvs_chat_excerpt(text, len, show, sizeof(show)));
}


/* Checking messages. */

/* A JSON string equal to lit; length-aware, as strings may hold NULs. */
static int
kvs_chat_is(const json_t *s, const char *lit)
{
    size_t  n;

    n = strlen(lit);

    return json_string_length(s) == n
           && memcmp(json_string_value(s), lit, n) == 0;
}


int
kvs_chat_role(const json_t *msg, size_t i, kvs_chat_role_t *role,
    kvs_err_t *err)
{
    const char    *s;
    const json_t  *r;

    if (!json_is_object(msg)) {
        return kvs_err_set(err, KVS_EINVAL, "messages[%zu]: must be an "
                           "object", i);
    }

    r = json_object_get(msg, "role");
    if (r == NULL) {
        return kvs_err_set(err, KVS_EINVAL, "messages[%zu].role: missing",
                           i);
    }

    if (!json_is_string(r)) {
        return kvs_err_set(err, KVS_EINVAL, "messages[%zu].role: must be a "
                           "string", i);
    }

    s = json_string_value(r);

    if (kvs_chat_is(r, "system") || kvs_chat_is(r, "developer")) {
        *role = KVS_CHAT_SYSTEM;

    } else if (kvs_chat_is(r, "user")) {
        *role = KVS_CHAT_USER;

    } else if (kvs_chat_is(r, "assistant")) {
        *role = KVS_CHAT_ASSISTANT;

    } else if (kvs_chat_is(r, "tool")) {
        *role = KVS_CHAT_TOOL;

    } else if (kvs_chat_is(r, "function")) {
        return kvs_err_set(err, KVS_EINVAL, "messages[%zu].role: role "
                           "'function' (deprecated) is not supported; use "
                           "'tool'", i);

    } else {
        return kvs_err_set(err, KVS_EINVAL, "messages[%zu].role: "
                           "unsupported role '%.64s'; use system, "
                           "developer, user, assistant or tool", i, s);
    }

    return KVS_OK;
}


static int
kvs_chat_check_content(const json_t *msg, size_t i, kvs_chat_role_t role,
    kvs_err_t *err)
{
    size_t         j;
    const char    *type;
    const json_t  *c, *part, *t;

    c = json_object_get(msg, "content");

    if (c == NULL || json_is_null(c)) {
        /* OpenAI lets an assistant turn go without content (it carried
         * tool calls): empty */
        if (role == KVS_CHAT_ASSISTANT) {
            return KVS_OK;
        }

        return kvs_err_set(err, KVS_EINVAL, "messages[%zu].content: "
                           "missing", i);
    }

    if (json_is_string(c)) {
        return KVS_OK;
    }

    if (!json_is_array(c)) {
        return kvs_err_set(err, KVS_EINVAL, "messages[%zu].content: must "
                           "be a string or an array of content parts", i);
    }

    if (json_array_size(c) == 0) {
        return kvs_err_set(err, KVS_EINVAL, "messages[%zu].content: empty "
                           "array, expected at least one content part", i);
    }

    json_array_foreach(c, j, part) {
        if (!json_is_object(part)) {
            return kvs_err_set(err, KVS_EINVAL, "messages[%zu].content[%zu]"
                               ": must be an object", i, j);
        }

        t = json_object_get(part, "type");
        if (!json_is_string(t)) {
            return kvs_err_set(err, KVS_EINVAL, "messages[%zu].content[%zu]"
                               ".type: %s", i, j, t == NULL ? "missing"
                               : "must be a string");
        }

        type = json_string_value(t);
        if (!kvs_chat_is(t, "text")) {
            return kvs_err_set(err, KVS_EINVAL, "messages[%zu].content[%zu]"
                               ".type: unsupported content part type "
                               "'%.64s'; only 'text' parts are supported",
                               i, j, type);
        }

        t = json_object_get(part, "text");
        if (!json_is_string(t)) {
            return kvs_err_set(err, KVS_EINVAL, "messages[%zu].content[%zu]"
                               ".text: %s", i, j, t == NULL ? "missing"
                               : "must be a string");
        }
    }

    return KVS_OK;
}


/* The member key of obj when present and not null (null is absent, as
 * in OpenAI's API), else NULL. */
static const json_t *
kvs_chat_member(const json_t *obj, const char *key)
{
    const json_t  *v;

    v = json_object_get(obj, key);

    return json_is_null(v) ? NULL : v;
}


/* A tool call's function: a name, and arguments as OpenAI sends them (a
 * JSON text) or as Hugging Face's callers do (the mapping itself). */
static int
kvs_chat_check_call(const json_t *call, size_t i, size_t j, kvs_err_t *err)
{
    const json_t  *f, *v;

    if (!json_is_object(call)) {
        return kvs_err_set(err, KVS_EINVAL, "messages[%zu].tool_calls[%zu]:"
                           " must be an object", i, j);
    }

    v = kvs_chat_member(call, "id");
    if (v != NULL && !json_is_string(v)) {
        return kvs_err_set(err, KVS_EINVAL, "messages[%zu].tool_calls[%zu]"
                           ".id: must be a string", i, j);
    }

    f = kvs_chat_member(call, "function");
    if (!json_is_object(f)) {
        return kvs_err_set(err, KVS_EINVAL, "messages[%zu].tool_calls[%zu]"
                           ".function: %s", i, j, f == NULL ? "missing"
                           : "must be an object");
    }

    v = kvs_chat_member(f, "name");
    if (!json_is_string(v)) {
        return kvs_err_set(err, KVS_EINVAL, "messages[%zu].tool_calls[%zu]"
                           ".function.name: %s", i, j, v == NULL
                           ? "missing" : "must be a string");
    }

    v = kvs_chat_member(f, "arguments");
    if (!json_is_string(v) && !json_is_object(v)) {
        return kvs_err_set(err, KVS_EINVAL, "messages[%zu].tool_calls[%zu]"
                           ".function.arguments: %s", i, j, v == NULL
                           ? "missing" : "must be a string (JSON text) or "
                           "an object");
    }

    return KVS_OK;
}


/* The tool fields a template reads: tool_calls (an assistant's only) and
 * tool_call_id. */
static int
kvs_chat_check_tool_fields(const json_t *msg, size_t i,
    kvs_chat_role_t role, kvs_err_t *err)
{
    int            rc;
    size_t         j;
    const json_t  *calls, *id, *call;

    calls = kvs_chat_member(msg, "tool_calls");

    if (calls != NULL) {
        if (role != KVS_CHAT_ASSISTANT) {
            return kvs_err_set(err, KVS_EINVAL, "messages[%zu].tool_calls: "
                               "only an assistant message may carry tool "
                               "calls", i);
        }

        if (!json_is_array(calls) || json_array_size(calls) == 0) {
            return kvs_err_set(err, KVS_EINVAL, "messages[%zu].tool_calls: "
                               "must be a non-empty array", i);
        }

        json_array_foreach(calls, j, call) {
            rc = kvs_chat_check_call(call, i, j, err);
            if (rc != KVS_OK) {
                return rc;
            }
        }
    }

    id = kvs_chat_member(msg, "tool_call_id");
    if (id != NULL && !json_is_string(id)) {
        return kvs_err_set(err, KVS_EINVAL, "messages[%zu].tool_call_id: "
                           "must be a string", i);
    }

    return KVS_OK;
}


int
kvs_chat_check_messages(const json_t *messages, kvs_err_t *err)
{
    int              rc;
    size_t           i;
    const json_t    *msg;
    kvs_chat_role_t  role;

    if (!json_is_array(messages)) {
        return kvs_err_set(err, KVS_EINVAL, "messages: must be an array");
    }

    if (json_array_size(messages) == 0) {
        return kvs_err_set(err, KVS_EINVAL, "messages: empty array, "
                           "expected at least one message");
    }

    json_array_foreach(messages, i, msg) {
        rc = kvs_chat_role(msg, i, &role, err);
        if (rc == KVS_OK) {
            rc = kvs_chat_check_content(msg, i, role, err);
        }

        if (rc == KVS_OK) {
            rc = kvs_chat_check_tool_fields(msg, i, role, err);
        }

        if (rc != KVS_OK) {
            return rc;
        }
    }

    return KVS_OK;
}


int
kvs_chat_check_tools(const json_t *tools, kvs_err_t *err)
{
    size_t         i;
    const json_t  *t;

    if (tools == NULL || json_is_null(tools)) {
        return KVS_OK;
    }

    if (!json_is_array(tools)) {
        return kvs_err_set(err, KVS_EINVAL, "tools: must be an array");
    }

    json_array_foreach(tools, i, t) {
        if (!json_is_object(t)) {
            return kvs_err_set(err, KVS_EINVAL, "tools[%zu]: must be an "
                               "object", i);
        }
    }

    return KVS_OK;
}


/* Families whose templates fold the system message into the first user
 * turn, and raise unless user and assistant alternate after it. */
static int
kvs_chat_alternates(kvs_chat_kind_t kind)
{
    return kind == KVS_CHAT_LLAMA2 || kind == KVS_CHAT_MISTRAL
           || kind == KVS_CHAT_GEMMA;
}


/* *first: index of the first message after a leading system message.
 * Tool messages and tool calls are the model's template's to render. */
int
kvs_chat_check(const kvs_chat_t *chat, const json_t *messages,
    size_t *first, kvs_err_t *err)
{
    int              rc;
    size_t           i, n;
    const char      *name;
    const json_t    *msg;
    kvs_chat_role_t  role, want;

    if (!json_is_array(messages)) {
        return kvs_err_set(err, KVS_EINVAL, "messages: must be an array");
    }

    n = json_array_size(messages);
    if (n == 0) {
        return kvs_err_set(err, KVS_EINVAL, "messages: empty array, "
                           "expected at least one message");
    }

    *first = 0;
    name = kvs_chat_name(chat->kind);

    for (i = 0; i < n; i++) {
        msg = json_array_get(messages, i);

        rc = kvs_chat_role(msg, i, &role, err);
        if (rc != KVS_OK) {
            return rc;
        }

        if (role == KVS_CHAT_TOOL) {
            return kvs_err_set(err, KVS_EUNSUPPORTED, "messages[%zu].role: "
                               "role 'tool' is not supported by the "
                               "built-in %s chat template: tool calling "
                               "needs the model's own (Jinja) chat "
                               "template", i, name);
        }

        rc = kvs_chat_check_content(msg, i, role, err);
        if (rc != KVS_OK) {
            return rc;
        }

        if (kvs_chat_member(msg, "tool_calls") != NULL) {
            return kvs_err_set(err, KVS_EUNSUPPORTED, "messages[%zu]."
                               "tool_calls: tool calls are not supported by "
                               "the built-in %s chat template: tool calling "
                               "needs the model's own (Jinja) chat "
                               "template", i, name);
        }

        if (i == 0 && role == KVS_CHAT_SYSTEM) {
            *first = 1;
            continue;
        }

        if (!kvs_chat_alternates(chat->kind)) {
            continue;
        }

        if (role == KVS_CHAT_SYSTEM) {
            return kvs_err_set(err, KVS_EINVAL, "messages[%zu].role: the "
                               "%s chat template takes a system message "
                               "only as the first message", i, name);
        }

        want = (i - *first) % 2 == 0 ? KVS_CHAT_USER : KVS_CHAT_ASSISTANT;
        if (role != want) {
            return kvs_err_set(err, KVS_EINVAL, "messages[%zu].role: "
                               "expected '%s': the %s chat template needs "
                               "user and assistant messages to alternate, "
                               "starting with user, after an optional "
                               "system message", i,
                               kvs_chat_role_names[want], name);
        }
    }

    if (kvs_chat_alternates(chat->kind) && *first == n) {
        return kvs_err_set(err, KVS_EINVAL, "messages: the %s chat "
                           "template needs a user message after the system "
                           "message", name);
    }

    return KVS_OK;
}
