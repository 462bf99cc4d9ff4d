# CORS (issue 22 point 4): kvserve_cors_origins, the preflight answer and
# Access-Control-Allow-Origin on the module's answers, on the tiny default
# model:
#
# 1. nginx -t names a bad origin, "*" or "off" among others, and a
#    duplicate;
# 2. a preflight (OPTIONS with Access-Control-Request-Method) from an
#    allowed origin: 204 with the origin, the methods, the headers asked
#    and a max age; from another origin: 403, no Allow-Origin;
# 3. answers (a completion, an error, nginx's own page made in the
#    location, /v1/models, /health, /metrics)
#    carry Access-Control-Allow-Origin for an allowed Origin and
#    Vary: Origin, none for another origin or without Origin;
# 4. "*" answers "*" to any origin, without Vary;
# 5. without the directive (or with off): no CORS header, and OPTIONS is
#    the 405 it was.
use Test::Nginx::Socket 'no_plan';
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::NginxT;

no_shuffle();

our $Model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";

# ---- 1. nginx -t ------------------------------------------------------------

{
    my $t = Kvserve::NginxT->new('034-cors');
    for my $c (
        ['kvserve_cors_origins example.com;',
         qr/invalid value "example.com" in "kvserve_cors_origins" directive, an origin is "\*" or http:\/\/host\[:port\] or https:\/\/host\[:port\]/],
        ['kvserve_cors_origins https://a.example/path;',
         qr/invalid value "https:\/\/a.example\/path" in "kvserve_cors_origins" directive, an origin has no path/],
        ['kvserve_cors_origins https://a.example:0;',
         qr/invalid value "https:\/\/a.example:0" in "kvserve_cors_origins" directive, the port must be 1..65535/],
        ['kvserve_cors_origins https://a.example:70000;',
         qr/invalid value "https:\/\/a.example:70000"/],
        ['kvserve_cors_origins https://;',
         qr/invalid value "https:\/\/" in "kvserve_cors_origins"/],
        ['kvserve_cors_origins https://a.example *;',
         qr/invalid value "\*" in "kvserve_cors_origins" directive, "\*" stands alone/],
        ['kvserve_cors_origins off https://a.example;',
         qr/invalid value "off" in "kvserve_cors_origins" directive, "off" stands alone/],
        ['kvserve_cors_origins *; kvserve_cors_origins off;',
         qr/"kvserve_cors_origins" directive is duplicate/],
    ) {
        my ($failed, $out) = $t->nginx_t("kvserve_model m $Model; $c->[0]");
        ok($failed, "nginx -t fails: $c->[0]");
        like($out, $c->[1], '... naming what is wrong') or diag($out);
    }
    for my $good ('kvserve_cors_origins *;', 'kvserve_cors_origins off;',
                  'kvserve_cors_origins https://a.example http://b.example:8080 https://[::1]:3000;')
    {
        my ($failed, $out) = $t->nginx_t("kvserve_model m $Model; $good");
        ok(!$failed, "nginx -t passes: $good") or diag($out);
    }
    $t->done;
}

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value('http_config',
        "kvserve_model kvserve-tiny $Model;\n"
        . "    kvserve_kv_cache 8m;\n    kvserve_threads 1;")
        unless defined $block->http_config;
    $block->set_value('config',
        "kvserve_cors_origins https://app.example http://localhost:3000;\n"
        . "location /v1/ { kvserve; }\n"
        . "location = /health { kvserve_health; }\n"
        . "location = /metrics { kvserve_metrics; }\n"
        . "location /any/v1/ { kvserve; kvserve_cors_origins *; }\n"
        . "location /off/v1/ { kvserve; kvserve_cors_origins off; }\n"
        . "location /small/v1/ { kvserve; client_max_body_size 16; }")
        unless defined $block->config;
});

run_tests();

__DATA__

=== TEST 1: a preflight from an allowed origin: 204, the origin, methods, the headers asked, a max age
--- request
OPTIONS /v1/chat/completions
--- more_headers
Origin: https://app.example
Access-Control-Request-Method: POST
Access-Control-Request-Headers: authorization, content-type
--- error_code: 204
--- response_headers
Access-Control-Allow-Origin: https://app.example
Access-Control-Allow-Methods: GET, HEAD, POST, OPTIONS
Access-Control-Allow-Headers: authorization, content-type
Access-Control-Max-Age: 7200
Vary: Origin
--- response_body



=== TEST 2: a preflight from another origin: 403, no Allow-Origin
--- request
OPTIONS /v1/chat/completions
--- more_headers
Origin: https://evil.example
Access-Control-Request-Method: POST
--- error_code: 403
--- response_headers
!Access-Control-Allow-Origin
!Access-Control-Allow-Methods
--- response_body_like: "code":"origin_not_allowed"



=== TEST 3: a completion from an allowed origin carries Access-Control-Allow-Origin
--- request
POST /v1/completions
{"model": "kvserve-tiny", "prompt": "Once", "max_tokens": 2}
--- more_headers
Origin: http://localhost:3000
--- error_code: 200
--- response_headers
Access-Control-Allow-Origin: http://localhost:3000
Vary: Origin
--- response_body_like: "object":"text_completion"



=== TEST 4: so does an error, so that the page can read it
--- request
POST /v1/completions
{"model": "nope", "prompt": "Once"}
--- more_headers
Origin: https://app.example
--- error_code: 404
--- response_headers
Access-Control-Allow-Origin: https://app.example
--- response_body_like: "code":"model_not_found"



=== TEST 5: ... and nginx's own error pages rewritten as JSON (a body over the location's limit)
--- request
POST /small/v1/completions
{"model": "kvserve-tiny", "prompt": "Once upon a time"}
--- more_headers
Origin: https://app.example
--- error_code: 413
--- response_headers
Access-Control-Allow-Origin: https://app.example
--- response_body_like: "type":"invalid_request_error"



=== TEST 6: /v1/models, /health and /metrics too
--- request eval
["POST /v1/completions\n{\"model\": \"kvserve-tiny\", \"prompt\": \"a\", \"max_tokens\": 1}",
 "GET /v1/models", "GET /health", "GET /metrics"]
--- more_headers
Origin: https://app.example
--- error_code eval
[200, 200, 200, 200]
--- response_headers eval
["Access-Control-Allow-Origin: https://app.example",
 "Access-Control-Allow-Origin: https://app.example",
 "Access-Control-Allow-Origin: https://app.example",
 "Access-Control-Allow-Origin: https://app.example"]



=== TEST 7: another origin, or none: no Allow-Origin (but Vary, the answer depends on it)
--- request eval
["GET /v1/models", "GET /v1/models"]
--- more_headers eval
["Origin: https://evil.example", ""]
--- error_code eval
[200, 200]
--- response_headers eval
["!Access-Control-Allow-Origin\nVary: Origin", "!Access-Control-Allow-Origin\nVary: Origin"]



=== TEST 8: origins are compared without regard to case
--- request
GET /v1/models
--- more_headers
Origin: HTTPS://App.Example
--- response_headers
Access-Control-Allow-Origin: HTTPS://App.Example



=== TEST 9: "*": any origin gets "*", no Vary
--- request
OPTIONS /any/v1/completions
--- more_headers
Origin: https://whoever.example
Access-Control-Request-Method: POST
--- error_code: 204
--- response_headers
Access-Control-Allow-Origin: *
!Vary



=== TEST 10: off: no CORS header, and OPTIONS is the 405 it was
--- request eval
["OPTIONS /off/v1/completions", "GET /off/v1/models"]
--- more_headers
Origin: https://app.example
Access-Control-Request-Method: POST
--- error_code eval
[405, 200]
--- response_headers eval
["!Access-Control-Allow-Origin", "!Access-Control-Allow-Origin"]



=== TEST 11: an OPTIONS that is not a preflight (no Access-Control-Request-Method) is not answered as one
--- request
OPTIONS /v1/completions
--- more_headers
Origin: https://app.example
--- error_code: 405
--- response_headers
!Access-Control-Allow-Methods
Access-Control-Allow-Origin: https://app.example
