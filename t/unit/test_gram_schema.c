/*
 * test_gram_schema: JSON Schema -> grammar -> matcher.  Hand cases per
 * keyword (instances the grammar must take and must refuse, written
 * out), refusals whose message must name the keyword's path, generated
 * cases (random walks over the bytes the matcher allows, each finished
 * text held to the independent validator in kvs_test_gram.h, and one-byte
 * mutations of them, which the matcher may take only if they are valid),
 * and the limits: deep nesting, huge enums, recursion, hostile grammars
 * end in errors or bounded work, never a crash; "pattern" repeats that
 * would keep hundreds of parses open are refused, the plain ones taken.
 */

#include "kvs_test_gram.h"


typedef struct {
    const char  *schema;
    const char  *text;
    int          ok;
} tg_case_t;


static const tg_case_t  tg_cases[] = {
    /* any value and json_object's pieces */
    { "{}", "{\"a\": [1, 2.5e-3, true, null, \"x\"]}", 1 },
    { "{}", "{\"a\":1}", 0 },                   /* the layout is fixed */
    { "{}", " 1", 0 },
    { "true", "\"\\u00e9\\n\"", 1 },
    { "{}", "\"\\ud800\"", 0 },                 /* no lone surrogates */
    { "{}", "\"\x01\"", 0 },
    { "{}", "\"\xc3\x28\"", 0 },                /* invalid UTF-8 */
    { "{}", "\"\xed\xa0\x80\"", 0 },            /* encoded surrogate */
    { "{}", "\"\xf0\x9f\x98\x80\"", 1 },
    { "{}", "01", 0 },
    { "{}", "-0", 1 },
    { "{}", "1.", 0 },
    { "{}", "1E+9", 1 },

    /* type */
    { "{\"type\": \"null\"}", "null", 1 },
    { "{\"type\": \"null\"}", "nul", 0 },
    { "{\"type\": \"boolean\"}", "false", 1 },
    { "{\"type\": \"boolean\"}", "0", 0 },
    { "{\"type\": \"integer\"}", "-120", 1 },
    { "{\"type\": \"integer\"}", "1.5", 0 },
    { "{\"type\": \"number\"}", "-0.5e10", 1 },
    { "{\"type\": \"string\"}", "\"a\\\"b\"", 1 },
    { "{\"type\": \"string\"}", "3", 0 },
    { "{\"type\": [\"string\", \"null\"]}", "null", 1 },
    { "{\"type\": [\"string\", \"null\"]}", "\"x\"", 1 },
    { "{\"type\": [\"string\", \"null\"]}", "1", 0 },

    /* enum, const */
    { "{\"enum\": [\"red\", \"green\", 3, null, {\"a\": [1]}]}", "\"green\"",
      1 },
    { "{\"enum\": [\"red\", \"green\", 3, null, {\"a\": [1]}]}", "{\"a\": [1]}",
      1 },
    { "{\"enum\": [\"red\", \"green\", 3, null, {\"a\": [1]}]}", "\"gree\"",
      0 },
    { "{\"enum\": [\"red\", \"green\", 3, null]}", "4", 0 },
    { "{\"type\": \"string\", \"enum\": [\"a\", 1]}", "1", 0 },
    { "{\"const\": \"a\\nb\"}", "\"a\\nb\"", 1 },
    { "{\"const\": 2.5}", "2.5", 1 },

    /* objects */
    { "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"},"
      " \"b\": {\"type\": \"string\"}}, \"required\": [\"a\"]}",
      "{\"a\": 1, \"b\": \"x\"}", 1 },
    { "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"},"
      " \"b\": {\"type\": \"string\"}}, \"required\": [\"a\"]}",
      "{\"a\": 1}", 1 },
    { "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"},"
      " \"b\": {\"type\": \"string\"}}, \"required\": [\"a\"]}",
      "{\"b\": \"x\"}", 0 },
    { "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"},"
      " \"b\": {\"type\": \"string\"}}}", "{}", 1 },
    { "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"},"
      " \"b\": {\"type\": \"string\"}}}", "{\"b\": \"x\", \"a\": 1}", 0 },
    { "{\"type\": \"object\", \"properties\": {\"a\": {}}, "
      "\"additionalProperties\": false}", "{\"a\": 1, \"c\": 2}", 0 },
    { "{\"type\": \"object\", \"additionalProperties\": "
      "{\"type\": \"integer\"}}", "{\"x\": 1, \"y\": -2}", 1 },
    { "{\"type\": \"object\", \"additionalProperties\": "
      "{\"type\": \"integer\"}}", "{\"x\": \"1\"}", 0 },
    { "{\"type\": \"object\", \"required\": [\"z\"]}", "{\"z\": [ ]}", 0 },
    { "{\"type\": \"object\", \"required\": [\"z\"]}", "{\"z\": []}", 1 },
    { "{\"type\": \"object\", \"properties\": {\"o\": {\"type\": \"object\","
      " \"properties\": {\"p\": {\"type\": \"array\"}}, \"required\": "
      "[\"p\"]}}, \"required\": [\"o\"]}", "{\"o\": {\"p\": [{}]}}", 1 },

    /* arrays */
    { "{\"type\": \"array\", \"items\": {\"type\": \"integer\"}}", "[]", 1 },
    { "{\"type\": \"array\", \"items\": {\"type\": \"integer\"}}",
      "[1, 2, 3]", 1 },
    { "{\"type\": \"array\", \"items\": {\"type\": \"integer\"}}",
      "[1, \"2\"]", 0 },
    { "{\"type\": \"array\", \"minItems\": 2, \"maxItems\": 3}", "[1]", 0 },
    { "{\"type\": \"array\", \"minItems\": 2, \"maxItems\": 3}", "[1, 2]",
      1 },
    { "{\"type\": \"array\", \"minItems\": 2, \"maxItems\": 3}",
      "[1, 2, 3]", 1 },
    { "{\"type\": \"array\", \"minItems\": 2, \"maxItems\": 3}",
      "[1, 2, 3, 4]", 0 },
    { "{\"type\": \"array\", \"items\": false}", "[]", 1 },

    /* anyOf, oneOf, $ref */
    { "{\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"string\", "
      "\"maxLength\": 1}]}", "\"ab\"", 0 },
    { "{\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"string\", "
      "\"maxLength\": 1}]}", "7", 1 },
    { "{\"oneOf\": [{\"type\": \"null\"}, {\"type\": \"boolean\"}]}",
      "true", 1 },
    { "{\"$defs\": {\"n\": {\"type\": \"object\", \"properties\": "
      "{\"v\": {\"type\": \"integer\"}, \"next\": {\"$ref\": \"#/$defs/n\"}},"
      " \"required\": [\"v\"], \"additionalProperties\": false}}, "
      "\"$ref\": \"#/$defs/n\"}",
      "{\"v\": 1, \"next\": {\"v\": 2, \"next\": {\"v\": 3}}}", 1 },
    { "{\"$defs\": {\"n\": {\"type\": \"object\", \"properties\": "
      "{\"v\": {\"type\": \"integer\"}, \"next\": {\"$ref\": \"#/$defs/n\"}},"
      " \"required\": [\"v\"], \"additionalProperties\": false}}, "
      "\"$ref\": \"#/$defs/n\"}", "{\"v\": 1, \"next\": {}}", 0 },
    { "{\"type\": \"array\", \"items\": {\"$ref\": \"#\"}}", "[[], [[]]]", 1 },

    /* strings */
    { "{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}",
      "\"\xc3\xa9\\n\"", 1 },
    { "{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}",
      "\"abcd\"", 0 },
    { "{\"type\": \"string\", \"minLength\": 2}", "\"\xf0\x9f\x98\x80\"",
      0 },
    { "{\"type\": \"string\", \"pattern\": \"^[a-c]+x?$\"}", "\"abcx\"", 1 },
    { "{\"type\": \"string\", \"pattern\": \"^[a-c]+x?$\"}", "\"abd\"", 0 },
    { "{\"type\": \"string\", \"pattern\": \"b\\\\d{2}\"}", "\"aab12z\"", 1 },
    { "{\"type\": \"string\", \"pattern\": \"b\\\\d{2}\"}", "\"ab1z\"", 0 },
    { "{\"type\": \"string\", \"pattern\": \"^a\\\"\\\\\\\\$\"}",
      "\"a\\\"\\\\\"", 1 },
    { "{\"type\": \"string\", \"pattern\": \"^\\\\w+@(x|yz)$\"}",
      "\"a_1@yz\"", 1 },
    { "{\"type\": \"string\", \"pattern\": \"^[^a]$\"}", "\"a\"", 0 },
    { "{\"type\": \"string\", \"pattern\": \"^[^a]$\"}", "\"\\n\"", 1 },
    { "{\"type\": \"string\", \"pattern\": \"^.$\"}", "\"\\n\"", 0 },
    { "{\"type\": \"string\", \"pattern\": \"^(?:ab){2,3}$\"}",
      "\"ababab\"", 1 },
    { "{\"type\": \"string\", \"pattern\": \"^(?:ab){2,3}$\"}", "\"ab\"", 0 },
    { "{\"type\": \"string\", \"format\": \"date\"}", "\"2024-02-28\"", 1 },
    { "{\"type\": \"string\", \"format\": \"date\"}", "\"2024-02-30\"", 0 },
    { "{\"type\": \"string\", \"format\": \"date-time\"}",
      "\"2024-12-01T23:59:01.5+01:00\"", 1 },
    { "{\"type\": \"string\", \"format\": \"time\"}", "\"24:00:00Z\"", 0 },
    { "{\"type\": \"string\", \"format\": \"uuid\"}",
      "\"123e4567-e89b-12d3-a456-426614174000\"", 1 },
    { "{\"type\": \"string\", \"format\": \"email\"}", "\"a.b@ex.com\"", 1 },
    { "{\"type\": \"string\", \"format\": \"email\"}", "\"a..b@ex.com\"", 0 },

    /* integer bounds */
    { "{\"type\": \"integer\", \"minimum\": -5, \"maximum\": 123}", "-5", 1 },
    { "{\"type\": \"integer\", \"minimum\": -5, \"maximum\": 123}", "-6", 0 },
    { "{\"type\": \"integer\", \"minimum\": -5, \"maximum\": 123}", "123",
      1 },
    { "{\"type\": \"integer\", \"minimum\": -5, \"maximum\": 123}", "124",
      0 },
    { "{\"type\": \"integer\", \"minimum\": -5, \"maximum\": 123}", "0", 1 },
    { "{\"type\": \"integer\", \"minimum\": -5, \"maximum\": 123}", "-0", 0 },
    { "{\"type\": \"integer\", \"exclusiveMinimum\": 99}", "100", 1 },
    { "{\"type\": \"integer\", \"exclusiveMinimum\": 99}", "99", 0 },
    { "{\"type\": \"integer\", \"exclusiveMinimum\": 99}", "123456789", 1 },
    { "{\"type\": \"integer\", \"exclusiveMaximum\": -10}", "-11", 1 },
    { "{\"type\": \"integer\", \"exclusiveMaximum\": -10}", "-10", 0 },
    { "{\"type\": \"integer\", \"exclusiveMaximum\": -10}", "5", 0 },
    { "{\"type\": \"integer\", \"minimum\": 1.5}", "1", 0 },
    { "{\"type\": \"integer\", \"minimum\": 1.5}", "2", 1 },

    /* number bounds (integer-valued; no exponent under bounds) */
    { "{\"type\": \"number\", \"minimum\": 0}", "0.25", 1 },
    { "{\"type\": \"number\", \"minimum\": 0}", "-0.25", 0 },
    { "{\"type\": \"number\", \"minimum\": 0}", "-0", 0 },
    { "{\"type\": \"number\", \"minimum\": 0}", "1e5", 0 },
    { "{\"type\": \"number\", \"minimum\": -2, \"maximum\": 3}", "3.0",
      1 },
    { "{\"type\": \"number\", \"minimum\": -2, \"maximum\": 3}",
      "3.01", 0 },
    { "{\"type\": \"number\", \"minimum\": -2, \"maximum\": 3}",
      "2.999", 1 },
    { "{\"type\": \"number\", \"minimum\": -2, \"maximum\": 3}",
      "-2.000", 1 },
    { "{\"type\": \"number\", \"minimum\": -2, \"maximum\": 3}",
      "-2.5", 0 },
    { "{\"type\": \"number\", \"minimum\": -2, \"maximum\": 3}",
      "-1.75", 1 },
    { "{\"type\": \"number\", \"maximum\": -10}", "-10.5", 1 },
    { "{\"type\": \"number\", \"maximum\": -10}", "-9.5", 0 },
    { "{\"type\": \"number\", \"maximum\": -10}", "-10", 1 },
    { "{\"type\": \"number\", \"minimum\": -10, \"maximum\": -10}",
      "-10.00", 1 },
};


static void
test_cases(void **state)
{
    size_t      i;
    kvs_err_t   err;
    kvs_gram_t  g;

    (void) state;

    for (i = 0; i < sizeof(tg_cases) / sizeof(tg_cases[0]); i++) {
        if (tg_compile(&g, tg_cases[i].schema, 0, &err) != KVS_OK) {
            fail_msg("case %zu: %s: %s", i, tg_cases[i].schema, err.msg);
        }

        if (tg_match(&g, tg_cases[i].text, strlen(tg_cases[i].text))
            != tg_cases[i].ok)
        {
            fail_msg("case %zu: schema %s: text %s: want %s", i,
                     tg_cases[i].schema, tg_cases[i].text,
                     tg_cases[i].ok ? "accepted" : "refused");
        }

        /* the hand labels agree with the validator where it applies:
         * a text the layout refuses may still be a valid instance */
        if (tg_cases[i].ok
            && !tg_valid_text(tg_cases[i].schema, tg_cases[i].text,
                              strlen(tg_cases[i].text)))
        {
            fail_msg("case %zu: accepted %s is not valid per %s", i,
                     tg_cases[i].text, tg_cases[i].schema);
        }

        kvs_gram_free(&g);
    }
}


static void
test_compact(void **state)
{
    kvs_err_t   err;
    kvs_gram_t  g;

    (void) state;

    assert_int_equal(tg_compile(&g, "{\"type\": \"object\", \"properties\": "
                                "{\"a\": {\"type\": \"array\"}}}",
                                KVS_GRAM_COMPACT, &err), KVS_OK);
    assert_true(tg_match(&g, "{\"a\":[1,2]}", 11));
    assert_false(tg_match(&g, "{\"a\": [1, 2]}", 13));
    kvs_gram_free(&g);

    assert_int_equal(kvs_gram_json_object(&g, NULL, &err), KVS_OK);
    assert_true(tg_match(&g, "{}", 2));
    assert_true(tg_match(&g, "{\"k\": {\"k\": [null]}, \"k\": 1}", 28));
    assert_false(tg_match(&g, "[]", 2));
    assert_false(tg_match(&g, "\"x\"", 3));
    kvs_gram_free(&g);
}


/* ---- refusals name the keyword ------------------------------------------ */

static const struct {
    const char  *schema;
    int          code;
    const char  *msg;                 /* the message starts with this */
} tg_refusals[] = {
    { "{\"type\": \"string\", \"pattern\": \"^(?=a)\"}", KVS_EUNSUPPORTED,
      "pattern: unsupported regex construct '(?='" },
    { "{\"properties\": {\"a\": {\"type\": \"string\", \"pattern\": "
      "\"(?<!x)\"}}}", KVS_EUNSUPPORTED,
      "properties.a.pattern: unsupported regex construct '(?<!'" },
    { "{\"type\": \"string\", \"pattern\": \"(a)\\\\1\"}", KVS_EUNSUPPORTED,
      "pattern: unsupported regex construct '\\1'" },
    { "{\"type\": \"string\", \"pattern\": \"a\\\\b\"}", KVS_EUNSUPPORTED,
      "pattern: unsupported regex construct '\\b'" },
    { "{\"type\": \"string\", \"pattern\": \"a*+\"}", KVS_EUNSUPPORTED,
      "pattern: unsupported regex construct '*+'" },
    { "{\"type\": \"string\", \"format\": \"hostname\"}", KVS_EUNSUPPORTED,
      "format: 'hostname' is not supported" },
    { "{\"type\": \"object\", \"patternProperties\": {}}", KVS_EUNSUPPORTED,
      "patternProperties: unsupported keyword" },
    { "{\"items\": {\"minProperties\": 1}}", KVS_EUNSUPPORTED,
      "items.minProperties: unsupported keyword" },
    { "{\"type\": \"number\", \"minimum\": 0.5}", KVS_EUNSUPPORTED,
      "minimum: on type number only integer values" },
    { "{\"type\": \"number\", \"exclusiveMaximum\": 3}", KVS_EUNSUPPORTED,
      "exclusiveMaximum: on type number is not supported" },
    { "{\"type\": \"array\", \"uniqueItems\": true}", KVS_EUNSUPPORTED,
      "uniqueItems: true is not supported" },
    { "{\"$ref\": \"other.json#/a\"}", KVS_EUNSUPPORTED,
      "$ref: 'other.json#/a': only local" },
    { "{\"$ref\": \"#/$defs/none\"}", KVS_EINVAL,
      "$ref: '#/$defs/none' names nothing" },
    { "{\"anyOf\": [{\"type\": \"string\"}, {\"multipleOf\": 2}]}",
      KVS_EUNSUPPORTED, "anyOf.1.multipleOf: unsupported keyword" },
    { "{\"$defs\": {\"x\": {\"type\": \"strin\"}}, \"$ref\": \"#/$defs/x\"}",
      KVS_EINVAL, "$defs.x.type: must be" },
    { "{\"type\": \"string\", \"$ref\": \"#\"}", KVS_EUNSUPPORTED,
      "type: together with $ref" },
    { "{\"allOf\": [{}, {}]}", KVS_EUNSUPPORTED,
      "allOf: more than one schema" },
    { "{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}", KVS_EINVAL,
      "minimum: no integer in [5, 4]" },
    { "{\"type\": \"integer\", \"maximum\": 1e30}", KVS_EUNSUPPORTED,
      "maximum: integer bounds beyond 1e18" },
    { "{\"type\": \"integer\", \"exclusiveMinimum\": true}",
      KVS_EUNSUPPORTED, "exclusiveMinimum: boolean form" },
    { "{\"type\": \"object\", \"properties\": {\"a\": {\"$ref\": \"#\"}}, "
      "\"required\": [\"a\"]}", KVS_EUNSUPPORTED, "$ref: the grammar "
      "derives no finite text" },
    { "false", KVS_EINVAL, "false schema" },
    { "{\"type\": \"string\", \"pattern\": \"x\", \"maxLength\": 3}",
      KVS_EUNSUPPORTED, "maxLength: together with pattern" },
    { "{\"enum\": [1], \"minimum\": 0}", KVS_EUNSUPPORTED,
      "enum: together with keywords other than type" },
    { "{\"type\": \"string\", \"pattern\": \"a^b\"}", KVS_EUNSUPPORTED,
      "pattern: unsupported regex construct '^'" },
    { "{\"type\": \"string\", \"pattern\": \"^a|b$\"}", KVS_EUNSUPPORTED,
      "pattern: unsupported regex construct '|' at the top level" },
    { "{\"type\": \"string\", \"pattern\": \"[[:alpha:]]\"}",
      KVS_EUNSUPPORTED, "pattern: unsupported regex construct '[:'" },
    { "{\"type\": \"string\", \"pattern\": \"\\\\p{L}\"}", KVS_EUNSUPPORTED,
      "pattern: unsupported regex construct '\\p'" },
    { "{\"type\": \"string\", \"pattern\": \"c{\\u0012,4}\"}",
      KVS_EUNSUPPORTED, "pattern: unsupported regex construct '{\x12'" },
    { "{\"type\": \"string\", \"pattern\": \"c{1,2000}\"}",
      KVS_EUNSUPPORTED, "pattern: regex repeat count over 1000" },
};


static void
test_refusals(void **state)
{
    int         rc;
    size_t      i;
    kvs_err_t   err;
    kvs_gram_t  g;

    (void) state;

    for (i = 0; i < sizeof(tg_refusals) / sizeof(tg_refusals[0]); i++) {
        /* a stale error must not stand in for this one's message */
        kvs_err_clear(&err);
        err.code = KVS_EUNSUPPORTED;
        rc = tg_compile(&g, tg_refusals[i].schema, 0, &err);
        kvs_gram_free(&g);

        if (rc != tg_refusals[i].code
            || strncmp(err.msg, tg_refusals[i].msg,
                       strlen(tg_refusals[i].msg)) != 0)
        {
            fail_msg("refusal %zu: %s: got %d \"%s\", want %d \"%s...\"", i,
                     tg_refusals[i].schema, rc, err.msg,
                     tg_refusals[i].code, tg_refusals[i].msg);
        }
    }
}


/* ---- generated cases ---------------------------------------------------- */

static const char  *tg_walk_schemas[] = {
    "{}",
    "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\","
    " \"minLength\": 1, \"maxLength\": 4}, \"age\": {\"type\": \"integer\", "
    "\"minimum\": 0, \"maximum\": 130}, \"tags\": {\"type\": \"array\", "
    "\"items\": {\"enum\": [\"a\", \"ab\", \"b\"]}, \"maxItems\": 3}}, "
    "\"required\": [\"name\", \"age\"], \"additionalProperties\": false}",
    "{\"$defs\": {\"t\": {\"type\": \"object\", \"properties\": {\"k\": "
    "{\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/t\"}, "
    "\"maxItems\": 2}}, \"additionalProperties\": false}}, "
    "\"$ref\": \"#/$defs/t\"}",
    "{\"anyOf\": [{\"type\": \"string\", \"pattern\": \"^[a-f0-9]{2,4}(-x)?$\"},"
    " {\"type\": \"integer\", \"exclusiveMinimum\": -20, "
    "\"exclusiveMaximum\": 7}, {\"type\": \"null\"}]}",
    "{\"type\": \"object\", \"properties\": {\"d\": {\"type\": \"string\", "
    "\"format\": \"date-time\"}, \"u\": {\"type\": \"string\", \"format\": "
    "\"uuid\"}, \"e\": {\"type\": \"string\", \"format\": \"email\"}}, "
    "\"required\": [\"d\", \"u\", \"e\"]}",
    "{\"type\": \"array\", \"items\": {\"type\": [\"number\", \"boolean\"]},"
    " \"minItems\": 1, \"maxItems\": 5}",
    "{\"type\": \"array\", \"items\": {\"anyOf\": [{\"type\": \"number\", "
    "\"minimum\": -3, \"maximum\": 12}, {\"type\": \"number\", "
    "\"maximum\": -100}, {\"type\": \"number\", \"minimum\": 7000}]}}",
    "{\"type\": \"object\", \"additionalProperties\": {\"type\": \"string\", "
    "\"pattern\": \"x\"}}",
    "{\"type\": \"string\", \"pattern\": "
    "\"^(\\\\w|[\\u00e0-\\u00ff\\n\\\"])+$\"}",
};


/* one random walk over allowed bytes; 0 if it ran out of room */
static int
tg_walk(kvs_gram_matcher_t *m, uint64_t *rng, char *out, size_t cap,
    size_t *len)
{
    int       k, n;
    uint8_t   cand[256], closers[8];
    int       nc;
    uint64_t  set[4];
    unsigned  b;

    *len = 0;

    while (*len + 1 < cap) {
        kvs_gram_matcher_next(m, set);

        if (kvs_gram_matcher_can_end(m)
            && (kvs_gram_matcher_must_end(m) || tg_rand(rng) % 4 == 0))
        {
            return 1;
        }

        n = 0;
        nc = 0;
        for (b = 0; b < 256; b++) {
            if (set[b >> 6] >> (b & 63) & 1) {
                cand[n++] = (uint8_t) b;
                if (b == '"' || b == '}' || b == ']') {
                    closers[nc++] = (uint8_t) b;
                }
            }
        }

        assert_true(n > 0);           /* never a dead end */

        /* lean to closing, so that texts stay short */
        if (nc > 0 && tg_rand(rng) % 3 == 0) {
            b = closers[tg_rand(rng) % (unsigned) nc];
        } else {
            b = cand[tg_rand(rng) % (unsigned) n];
        }

        k = kvs_gram_matcher_byte(m, (uint8_t) b, NULL);
        assert_int_equal(k, KVS_OK);
        out[(*len)++] = (char) b;
    }

    return 0;
}


static void
test_generated(void **state)
{
    int                 done;
    size_t              i, w, len, pos, valid_walks;
    char                text[4096], mut[4096];
    uint64_t            rng;
    kvs_err_t           err;
    kvs_gram_t          g;
    kvs_gram_matcher_t  m;

    (void) state;
    rng = 0x9E3779B97F4A7C15ULL;
    valid_walks = 0;

    for (i = 0; i < sizeof(tg_walk_schemas) / sizeof(tg_walk_schemas[0]);
         i++)
    {
        if (tg_compile(&g, tg_walk_schemas[i], 0, &err) != KVS_OK) {
            fail_msg("%s: %s", tg_walk_schemas[i], err.msg);
        }

        for (w = 0; w < 150; w++) {
            assert_int_equal(kvs_gram_matcher_init(&m, &g, NULL, &err),
                             KVS_OK);
            done = tg_walk(&m, &rng, text, sizeof(text), &len);

            if (done && tg_valid_text(tg_walk_schemas[i], text, len) < 0) {
                done = 0;             /* a number past double's range */
            }

            if (done) {
                valid_walks++;
                if (!tg_valid_text(tg_walk_schemas[i], text, len)) {
                    fail_msg("schema %s: generated %.*s is not valid",
                             tg_walk_schemas[i], (int) len, text);
                }

                /* rolling back and re-feeding gives the same verdict */
                kvs_gram_matcher_rollback(&m, len / 2);
                assert_int_equal(kvs_gram_matcher_feed(&m,
                                     text + (len - len / 2), len / 2, &err),
                                 KVS_OK);
                assert_true(kvs_gram_matcher_can_end(&m));

                /* a one-byte change the grammar takes must be valid */
                memcpy(mut, text, len);
                pos = tg_rand(&rng) % len;
                mut[pos] = (char) (tg_rand(&rng) % 3 == 0
                                   ? "\"{}[],:0a \\"[tg_rand(&rng) % 12]
                                   : (char) tg_rand(&rng));
                if (tg_match(&g, mut, len)
                    && tg_valid_text(tg_walk_schemas[i], mut, len) == 0)
                {
                    fail_msg("schema %s: accepted invalid %.*s",
                             tg_walk_schemas[i], (int) len, mut);
                }
            }

            kvs_gram_matcher_free(&m);
        }

        kvs_gram_free(&g);
    }

    /* most walks finish: the test tested something */
    assert_true(valid_walks > 150 * 4);
}


/* ---- limits ---------------------------------------------------------------- */

static void
test_limits(void **state)
{
    int                 rc;
    size_t              i, n;
    char               *s;
    kvs_err_t           err;
    kvs_gram_t          g;
    kvs_gram_matcher_t  m;
    kvs_gram_seq_t      q;
    kvs_gram_mlimits_t  ml;
    uint32_t            r, x;

    (void) state;

    /* nesting past the cap is an error naming where */
    n = 100;
    s = malloc(n * 16 + 16);
    s[0] = '\0';
    for (i = 0; i < n; i++) {
        strcat(s, "{\"items\": ");
    }
    strcat(s, "{}");
    for (i = 0; i < n; i++) {
        strcat(s, "}");
    }
    rc = tg_compile(&g, s, 0, &err);
    kvs_gram_free(&g);
    assert_int_equal(rc, KVS_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "deeper than 64"));
    free(s);

    /* a huge enum compiles to a trie: one parse per prefix */
    n = 20000;
    s = malloc(n * 16 + 16);
    strcpy(s, "{\"enum\": [");
    for (i = 0; i < n; i++) {
        sprintf(s + strlen(s), "%s\"v%zu\"", i ? ", " : "", i * 7);
    }
    strcat(s, "]}");
    assert_int_equal(tg_compile(&g, s, 0, &err), KVS_OK);
    assert_true(tg_match(&g, "\"v13993\"", 8));
    assert_false(tg_match(&g, "\"v13994\"", 8));
    assert_int_equal(kvs_gram_matcher_init(&m, &g, NULL, &err), KVS_OK);
    assert_int_equal(kvs_gram_matcher_feed(&m, "\"v1", 3, &err), KVS_OK);
    assert_true(m.lv[m.n_lv - 1].n_front <= 12);
    kvs_gram_matcher_free(&m);
    kvs_gram_free(&g);
    free(s);

    /* sizes past the grammar cap are errors, not allocations */
    rc = tg_compile(&g, "{\"type\": \"string\", \"maxLength\": 3000000000}",
                    0, &err);
    kvs_gram_free(&g);
    assert_int_equal(rc, KVS_ETOOLONG);
    assert_non_null(strstr(err.msg, "maxLength"));

    rc = tg_compile(&g, "{\"type\": \"array\", \"minItems\": 3000000}", 0,
                    &err);
    kvs_gram_free(&g);
    assert_int_equal(rc, KVS_ETOOLONG);
    assert_non_null(strstr(err.msg, "minItems"));

    /* nested counts share rules: 10^9 characters in ~3000 elements */
    assert_int_equal(tg_compile(&g, "{\"type\": \"string\", \"pattern\": "
                                "\"^((a{1000}){1000}){1000}$\"}", 0, &err),
                     KVS_OK);
    assert_true(g.n_elems < 20000);
    assert_false(tg_match(&g, "\"aaaa\"", 6));
    kvs_gram_free(&g);

    /* deep nesting of a recursive schema in the text: bounded by the
     * matcher's node cap, an error at the cap */
    assert_int_equal(tg_compile(&g, "{\"type\": \"array\", \"items\": "
                                "{\"$ref\": \"#\"}}", 0, &err), KVS_OK);
    memset(&ml, 0, sizeof(ml));
    ml.max_nodes = 5000;
    assert_int_equal(kvs_gram_matcher_init(&m, &g, &ml, &err), KVS_OK);
    for (i = 0; i < 100000; i++) {
        rc = kvs_gram_matcher_byte(&m, '[', &err);
        if (rc != KVS_OK) {
            break;
        }
    }
    assert_int_equal(rc, KVS_ETOOLONG);
    assert_true(i > 100);
    kvs_gram_matcher_free(&m);
    kvs_gram_free(&g);

    /* a left-recursive grammar, A -> A "x" | "y": ends at a cap */
    memset(&q, 0, sizeof(q));
    kvs_gram_init(&g, NULL);
    assert_int_equal(kvs_gram_rule_new(&g, &r, &err), KVS_OK);
    kvs_gram_seq_ref(&q, r);
    kvs_gram_seq_lit(&q, "x", 1);
    assert_int_equal(kvs_gram_add_alt(&g, r, &q, &err), KVS_OK);
    kvs_gram_seq_reset(&q);
    kvs_gram_seq_lit(&q, "y", 1);
    assert_int_equal(kvs_gram_add_alt(&g, r, &q, &err), KVS_OK);
    assert_int_equal(kvs_gram_finish(&g, r, &err), KVS_OK);
    ml.max_nodes = 10000;
    rc = kvs_gram_matcher_init(&m, &g, &ml, &err);
    if (rc == KVS_OK) {
        /* expanded lazily: the recursion runs when "y" comes */
        assert_int_equal(kvs_gram_matcher_byte(&m, 'y', &err), KVS_ETOOLONG);
        assert_int_equal(kvs_gram_matcher_len(&m), 0);
        kvs_gram_matcher_free(&m);
    } else {
        assert_int_equal(rc, KVS_ETOOLONG);
    }
    kvs_gram_free(&g);

    /* an epsilon cycle, A -> B, B -> A | "z": terminates, takes "z" */
    kvs_gram_init(&g, NULL);
    assert_int_equal(kvs_gram_rule_new(&g, &r, &err), KVS_OK);
    assert_int_equal(kvs_gram_rule_new(&g, &x, &err), KVS_OK);
    kvs_gram_seq_reset(&q);
    kvs_gram_seq_ref(&q, x);
    assert_int_equal(kvs_gram_add_alt(&g, r, &q, &err), KVS_OK);
    kvs_gram_seq_reset(&q);
    kvs_gram_seq_ref(&q, r);
    assert_int_equal(kvs_gram_add_alt(&g, x, &q, &err), KVS_OK);
    kvs_gram_seq_reset(&q);
    kvs_gram_seq_lit(&q, "z", 1);
    assert_int_equal(kvs_gram_add_alt(&g, x, &q, &err), KVS_OK);
    assert_int_equal(kvs_gram_finish(&g, r, &err), KVS_OK);
    assert_true(tg_match(&g, "z", 1));
    assert_false(tg_match(&g, "zz", 2));
    kvs_gram_free(&g);

    /* a rule without alternatives, a reference to no rule */
    kvs_gram_init(&g, NULL);
    assert_int_equal(kvs_gram_rule_new(&g, &r, &err), KVS_OK);
    assert_int_equal(kvs_gram_finish(&g, r, &err), KVS_EINVAL);
    kvs_gram_free(&g);
    kvs_gram_init(&g, NULL);
    assert_int_equal(kvs_gram_rule_new(&g, &r, &err), KVS_OK);
    kvs_gram_seq_reset(&q);
    kvs_gram_seq_ref(&q, 7);
    assert_int_equal(kvs_gram_add_alt(&g, r, &q, &err), KVS_EINVAL);
    kvs_gram_free(&g);
    kvs_gram_seq_free(&q);

    /* an exponentially ambiguous pattern stays bounded: (a|a)* */
    assert_int_equal(tg_compile(&g, "{\"type\": \"string\", \"pattern\": "
                                "\"^(a|a|aa)*(a|a)*$\"}", 0, &err), KVS_OK);
    s = malloc(3002);
    s[0] = '"';
    memset(s + 1, 'a', 3000);
    s[3001] = '"';
    assert_true(tg_match(&g, s, 3002));
    free(s);
    kvs_gram_free(&g);
}


/* ---- ambiguous patterns ---------------------------------------------------- */

typedef struct {
    const char  *re;                  /* the pattern, as JSON text */
    const char  *unit;                /* the sample, a prefix of a string
                                         it takes: unit x times, tail */
    int          times;
    const char  *tail;
    int          refused;
} tg_amb_t;

static const tg_amb_t  tg_amb[] = {
    { "^(a{1,60}){1,60}$", "a", 300, "", 1 },
    { "^(a{1,3}){1,1000}$", "a", 300, "", 1 },
    { "^((a{1,20}){1,20}){1,20}$", "a", 300, "", 1 },
    { "^(.{1,10}){1,50}$", "a", 300, "", 1 },
    { "^(\\\\w+\\\\s?){1,100}$", "a", 300, "", 1 },
    { "^(a|aa| ){0,90}b$", "a", 89, "b", 1 },
    { "^(a?){1,1000}$", "a", 300, "", 1 },
    { "^(a*){1,100}$", "a", 300, "", 1 },
    { "^(x?y?){0,50}$", "x", 40, "", 1 },

    { "^(\\\\d{1,3}\\\\.){3}\\\\d{1,3}$", "1.", 3, "100", 0 },
    { "^([A-Z][a-z]{0,20} ?){1,10}$", "Hello ", 9, "World", 0 },
    { "^(ab?){1,1000}$", "ab", 300, "a", 0 },
    { "^(a+){1,5}$", "a", 300, "", 0 },
    { "^(\\\\w+\\\\s?){1,5}$", "a", 300, "", 0 },
    { "^(a|a|aa)*$", "a", 300, "", 0 },
    { "^(a*)+$", "a", 300, "", 0 },
    { "^(?:[a-z]+-)*[a-z]+$", "abc-", 100, "z", 0 },
    { "^[a-z0-9._%+-]+@[a-z0-9.-]+\\\\.[a-z]{2,}$", "ab.", 50, "x@y.org", 0 },
    { "^((a{1000}){1000}){1000}$", "a", 300, "", 0 },
    { "^[a-z]{1,1000}$", "q", 300, "", 0 },
};


/* The most stacks the matcher holds while it takes the text: 0 if it
 * refuses a byte, UINT32_MAX if it passes its caps. */
static uint32_t
tg_front_max(const kvs_gram_t *g, const char *text, size_t len)
{
    int                 rc;
    size_t              i;
    uint32_t            most;
    kvs_gram_matcher_t  m;

    assert_int_equal(kvs_gram_matcher_init(&m, g, NULL, NULL), KVS_OK);
    most = 0;

    for (i = 0; i < len; i++) {
        rc = kvs_gram_matcher_byte(&m, (uint8_t) text[i], NULL);
        if (rc != KVS_OK) {
            most = rc == KVS_ETOOLONG ? UINT32_MAX : 0;
            break;
        }
        if (m.lv[m.n_lv - 1].n_front > most) {
            most = m.lv[m.n_lv - 1].n_front;
        }
    }

    kvs_gram_matcher_free(&m);

    return most;
}


static void
test_ambiguous(void **state)
{
    int          k;
    char         schema[256], *text;
    size_t       i, n;
    uint32_t     most;
    kvs_err_t    err;
    kvs_gram_t   g;

    (void) state;

    for (i = 0; i < sizeof(tg_amb) / sizeof(tg_amb[0]); i++) {
        snprintf(schema, sizeof(schema), "{\"type\": \"string\", "
                 "\"pattern\": \"%s\"}", tg_amb[i].re);

        text = malloc(strlen(tg_amb[i].unit) * tg_amb[i].times
                      + strlen(tg_amb[i].tail) + 2);
        strcpy(text, "\"");
        for (k = 0; k < tg_amb[i].times; k++) {
            strcat(text, tg_amb[i].unit);
        }
        strcat(text, tg_amb[i].tail);
        n = strlen(text);

        /* a request's compile: refused naming the pattern, or taken */
        if (tg_amb[i].refused) {
            assert_int_equal(tg_compile(&g, schema, 0, &err),
                             KVS_EUNSUPPORTED);
            if (strstr(err.msg, "pattern: regex: the repeat") == NULL) {
                fail_msg("%s: %s", tg_amb[i].re, err.msg);
            }
            kvs_gram_free(&g);

            /* what it keeps out: the same pattern taken by the matcher's
             * tests holds hundreds of parses at once, or passes the caps */
            assert_int_equal(tg_compile(&g, schema, KVS_GRAM_AMBIGUOUS,
                                        &err), KVS_OK);
            most = tg_front_max(&g, text, n);
            if (most <= 64) {
                fail_msg("%s: at most %u stacks", tg_amb[i].re, most);
            }

        } else {
            if (tg_compile(&g, schema, 0, &err) != KVS_OK) {
                fail_msg("%s: %s", tg_amb[i].re, err.msg);
            }
            most = tg_front_max(&g, text, n);
            if (most == 0 || most > 64) {
                fail_msg("%s: %u stacks", tg_amb[i].re, most);
            }
        }

        kvs_gram_free(&g);
        free(text);
    }
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_compact),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_generated),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_ambiguous),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
