# Every answer of a server with a kvserve location is JSON, errors nginx
# makes itself included (issue 18, hole 5; docs/api.md "Errors nginx
# answers itself"): a malformed request line, a missing Host, a URI or a
# header over the buffers (414, 494 sent as 400), an unknown
# Transfer-Encoding (501), bad chunked framing, a body over
# client_max_body_size (413), an HTTP version nginx does not speak (505),
# each over a raw socket, with Content-Type application/json and an
# OpenAI error object of type invalid_request_error.  Errors nginx makes
# in another location of the same server keep nginx's own page.
#
# Then the request errors that once named internals or were accepted: a
# logit_bias over what one SUBMIT carries names logit_bias (it said
# "SUBMIT"), a tool_call_id on a message that is not role "tool" is
# refused naming it (a number was accepted).
use Test::Nginx::Socket 'no_plan';

no_shuffle();

our $Model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";

# an OpenAI error object of type invalid_request_error
our $Err = qr/^\{"error":\{"message":"[^"]+","type":"invalid_request_error",/
    . qr/"param":null,"code":null\}\}\n$/;

add_block_preprocessor(sub {
    my $block = shift;
    if (!defined $block->http_config) {
        $block->set_value('http_config',
            "kvserve_model kvserve-tiny $Model;");
    }
    if (!defined $block->config) {
        $block->set_value('config',
            "location /v1/ { client_max_body_size 1k; kvserve; }\n"
            . "location /static/ { return 404; }\n"
            . "location /big/ { client_max_body_size 2m; kvserve; }");
    }
    if (!defined $block->response_headers) {
        $block->set_value('response_headers',
                          "Content-Type: application/json");
    }
});

run_tests();

__DATA__

=== TEST 1: a malformed request line is a JSON 400
--- raw_request eval
"GET /v1/models HTTP/1.1 junk\r\nHost: localhost\r\n\r\n"
--- error_code: 400
--- response_body_like eval
$::Err



=== TEST 2: a request line of control bytes is a JSON 400
--- raw_request eval
"\x01\x02\x03 / HTTP/1.1\r\nHost: localhost\r\n\r\n"
--- error_code: 400
--- response_body_like eval
$::Err



=== TEST 3: HTTP/1.1 without Host is a JSON 400
--- raw_request eval
"GET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n"
--- error_code: 400
--- response_body_like eval
$::Err



=== TEST 4: a URI over large_client_header_buffers is a JSON 414
--- raw_request eval
"GET /v1/" . ("a" x 12000) . " HTTP/1.1\r\nHost: localhost\r\n\r\n"
--- error_code: 414
--- response_body_like eval
qr/^\{"error":\{"message":"The request URI is longer than the server accepts\.","type":"invalid_request_error",/



=== TEST 5: a header over the buffers (nginx's 494) is a JSON 400
--- raw_request eval
"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nX-Big: " . ("b" x 12000)
. "\r\n\r\n"
--- error_code: 400
--- response_body_like eval
$::Err



=== TEST 6: an unknown Transfer-Encoding is a JSON 501
--- raw_request eval
"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
. "Transfer-Encoding: gzip\r\n\r\n"
--- error_code: 501
--- response_body_like eval
qr/^\{"error":\{"message":"The request uses an HTTP feature the server does not implement[^"]*","type":"invalid_request_error","param":null,"code":null\}\}\n$/



=== TEST 7: Content-Length with Transfer-Encoding is a JSON 400
--- raw_request eval
"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
. "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
--- error_code: 400
--- response_body_like eval
$::Err



=== TEST 8: a bad Content-Length is a JSON 400
--- raw_request eval
"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
. "Content-Length: -12\r\n\r\n"
--- error_code: 400
--- response_body_like eval
$::Err



=== TEST 9: bad chunked framing, read in the kvserve location, is a JSON 400
--- raw_request eval
"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
. "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"
--- error_code: 400
--- response_body_like eval
$::Err



=== TEST 10: a Content-Length over client_max_body_size is a JSON 413
--- raw_request eval
"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
. "Content-Length: 5000\r\nConnection: close\r\n\r\n" . ("x" x 5000)
--- error_code: 413
--- response_body_like eval
qr/^\{"error":\{"message":"The request body is larger than the server accepts\.","type":"invalid_request_error","param":null,"code":null\}\}\n$/



=== TEST 11: a chunked body over client_max_body_size is a JSON 413
--- raw_request eval
"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
. "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
. "800\r\n" . ("x" x 2048) . "\r\n0\r\n\r\n"
--- error_code: 413
--- response_body_like eval
$::Err



=== TEST 12: an HTTP version nginx does not speak is a JSON 505
--- raw_request eval
"GET /v1/models HTTP/3.0\r\nHost: localhost\r\n\r\n"
--- error_code: 505
--- response_body_like eval
qr/^\{"error":\{"message":"The HTTP version is not supported\.","type":"invalid_request_error",/



=== TEST 13: a HEAD refused by nginx has the JSON headers and no body
--- raw_request eval
"HEAD /v1/" . ("a" x 12000) . " HTTP/1.1\r\nHost: localhost\r\n\r\n"
--- error_code: 414
--- response_body chomp



=== TEST 14: another location of the server keeps nginx's own page
--- request
GET /static/x
--- error_code: 404
--- response_headers
Content-Type: text/html
--- response_body_like eval
qr{<center>nginx/}



=== TEST 15: a server without a kvserve location keeps nginx's pages
--- config
location /static/ { return 404; }
--- raw_request eval
"GET /x HTTP/1.1 junk\r\nHost: localhost\r\n\r\n"
--- error_code: 400
--- response_headers
Content-Type: text/html
--- response_body_like eval
qr{<title>400 Bad Request</title>}



=== TEST 16: a logit_bias over what one SUBMIT carries names logit_bias
--- request eval
"POST /big/v1/completions\n"
. '{"model":"kvserve-tiny","prompt":"a","max_tokens":1,"logit_bias":{'
. CORE::join(",", map { qq{"$_":1} } 0 .. 69999) . '}}'
--- error_code: 400
--- response_body_like eval
qr/^\{"error":\{"message":"Invalid 'logit_bias': too many entries\. Expected at most 65536, but got 70000 instead\.","type":"invalid_request_error","param":"logit_bias","code":"invalid_value"\}\}/



=== TEST 17: a number tool_call_id on a user message is refused, naming it
--- request
POST /v1/chat/completions
{"model":"kvserve-tiny","max_tokens":1,"messages":[{"role":"user","content":"a","tool_call_id":7}]}
--- error_code: 400
--- response_body_like eval
qr/"type":"invalid_request_error","param":"messages\[0\]\.tool_call_id","code":"invalid_type"/



=== TEST 18: an array tool_call_id on an assistant message is refused
--- request
POST /v1/chat/completions
{"model":"kvserve-tiny","max_tokens":1,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b","tool_call_id":["c"]},{"role":"user","content":"d"}]}
--- error_code: 400
--- response_body_like eval
qr/"param":"messages\[1\]\.tool_call_id","code":"invalid_type"/



=== TEST 19: a string tool_call_id on a user message is refused too
--- request
POST /v1/chat/completions
{"model":"kvserve-tiny","max_tokens":1,"messages":[{"role":"user","content":"a","tool_call_id":"call_1"}]}
--- error_code: 400
--- response_body_like eval
qr/"message":"Invalid parameter: 'messages\[0\]\.tool_call_id' is only allowed on messages with role 'tool', not 'user'\.","type":"invalid_request_error","param":"messages\[0\]\.tool_call_id","code":"invalid_value"/
