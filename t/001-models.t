# /v1/models and /v1/models/{id}: OpenAI's shapes plus our kvserve object,
# OpenAI error objects for unknown ids, paths and methods, and model files
# that fail to load stopping nginx with a message naming file and problem.
#
# TEST_NGINX_MODEL_DIR holds default.gguf, the model `make all` generates
# (kvserve gen-model --preset tiny --seed 1); the numbers below are that
# preset's: 2 layers, 4 heads, 2 KV heads of 16, embedding 64, vocab 512.
use Test::Nginx::Socket 'no_plan';

no_shuffle();

our $Model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";
our $Mtime = (stat $Model)[9];
our $Size = -s $Model;

# kvserve-tiny's object, as a regex, with the file's own mtime and size;
# the weights' figures come once the worker has the engine's HELLO (the
# CPU backend's, which t/027-quant.t checks against kvserve info)
our $Weights = qr/,"weights":\{"backend":"cpu","mapped_bytes":\d+,/
    . qr/"owned_bytes":\d+,"device_bytes":0\}/;
# the worker's view of the model's engine process: starting until its
# HELLO, then available, with the weights' figures
my $starting = qr/,"available":false,"unavailable_reason":/
    . qr/"engine for model \\"kvserve-tiny\\" (?:\(pid \d+\) )?is /
    . qr/starting"/;
my $ready = qr/,"available":true,"unavailable_reason":null$Weights/;
our $Available = qr/$starting|$ready/;
our $Tiny = qr/\{"id":"kvserve-tiny","object":"model","created":$Mtime,/
    . qr/"owned_by":"kvserve","kvserve":\{"architecture":"llama",/
    . qr/"context_length":512,"parameters":164160,"kv_bytes_per_token":512,/
    . qr/"kv_dtype":"f32","layers":2,"heads":4,"kv_heads":2,"head_dim":16,/
    . qr/"embedding_length":64,"vocab_size":512,"file_bytes":$Size/
    . qr/(?:$Available)\}\}/;

add_block_preprocessor(sub {
    my $block = shift;
    if (!defined $block->http_config) {
        $block->set_value('http_config',
            "kvserve_model kvserve-tiny $Model;");
    }
    if (!defined $block->config) {
        $block->set_value('config', "location /v1/ { kvserve; }");
    }
});

run_tests();

__DATA__

=== TEST 1: GET /v1/models lists the model in OpenAI's list shape
--- request
GET /v1/models
--- response_headers
Content-Type: application/json
--- response_body_like eval
qr/^\{"object":"list","data":\[$::Tiny\]\}$/
--- no_error_log
[error]



=== TEST 2: GET /v1/models/{id} answers one model object
--- request
GET /v1/models/kvserve-tiny
--- response_headers
Content-Type: application/json
--- response_body_like eval
qr/^$::Tiny$/



=== TEST 3: an unknown id is 404 with OpenAI's model_not_found error
--- request
GET /v1/models/gpt-9
--- error_code: 404
--- response_headers
Content-Type: application/json
--- response_body
{"error":{"message":"The model `gpt-9` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}



=== TEST 4: a wrong method is 405 with Allow and an error object
--- request
POST /v1/models
{"model": "kvserve-tiny"}
--- error_code: 405
--- response_headers
Allow: GET, HEAD
Content-Type: application/json
--- response_body
{"error":{"message":"Method POST is not allowed here; use GET.","type":"invalid_request_error","param":null,"code":"method_not_allowed"}}



=== TEST 5: DELETE on a model is refused the same way
--- request
DELETE /v1/models/kvserve-tiny
--- error_code: 405
--- response_body_like chomp
"code":"method_not_allowed"



=== TEST 6: an unknown API path is 404 "Invalid URL", as OpenAI answers it
--- request
GET /v1/engines
--- error_code: 404
--- response_body
{"error":{"message":"Invalid URL (GET /v1/engines)","type":"invalid_request_error","param":null,"code":null}}



=== TEST 7: HEAD gets the headers of GET and no body
--- request
HEAD /v1/models/kvserve-tiny
--- response_headers
Content-Type: application/json
--- response_body



=== TEST 8: several models keep their order; ids may contain slashes
--- http_config eval
"kvserve_model kvserve-tiny $::Model;
 kvserve_model org/tiny-2:v1 $::Model;"
--- request eval
["GET /v1/models", "GET /v1/models/org/tiny-2:v1"]
--- response_body_like eval
[qr/^\{"object":"list","data":\[\{"id":"kvserve-tiny",.*\},\{"id":"org\/tiny-2:v1",.*\}\]\}$/,
 qr/^\{"id":"org\/tiny-2:v1","object":"model",/]



=== TEST 9: the API may sit under a prefix location
--- config
    location /api/ { kvserve; }
--- request
GET /api/v1/models/kvserve-tiny
--- response_body_like eval
qr/^$::Tiny$/



=== TEST 10: an id with an invalid UTF-8 byte still gets valid JSON
--- request
GET /v1/models/caf%E9
--- error_code: 404
--- response_body
{"error":{"message":"The model `caf�` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}



=== TEST 11: one CPU-backend line at start-up, on a host without a GPU
--- request
GET /v1/models
--- error_log eval
qr/\[notice\] .*kvserve: model "kvserve-tiny": backend: cpu, \d+ threads? \(auto: /



=== TEST 12: a missing model file stops nginx, naming the file and why
--- http_config
    kvserve_model broken /nonexistent/dir/model.gguf;
--- must_die
--- suppress_stderr
--- error_log
[emerg]
kvserve_model "broken": cannot open "/nonexistent/dir/model.gguf": No such file or directory



=== TEST 13: a file that is not GGUF is refused with the offset of the problem
--- http_config
    kvserve_model notgguf $TEST_NGINX_SERVER_ROOT/conf/nginx.conf;
--- must_die
--- suppress_stderr
--- error_log eval
["[emerg]",
 qr/kvserve_model "notgguf": "\S+\/conf\/nginx\.conf": not a GGUF file: bad magic at byte 0/]



=== TEST 14: a corrupt GGUF header is refused, naming the field
--- http_config
    kvserve_model corrupt $TEST_NGINX_SERVER_ROOT/html/corrupt.gguf;
--- user_files
>>> corrupt.gguf
GGUF
--- must_die
--- suppress_stderr
--- error_log eval
["[emerg]",
 qr/kvserve_model "corrupt": "\S+\/html\/corrupt\.gguf" is 5 bytes, too short for a GGUF header/]



=== TEST 15: a model id with a space is a configuration error
--- http_config
    kvserve_model "bad name" /dev/null;
--- must_die
--- suppress_stderr
--- error_log
[emerg]
invalid model name "bad name"



=== TEST 16: the same id twice is a configuration error
--- http_config eval
"kvserve_model twin $::Model;
 kvserve_model twin $::Model;"
--- must_die
--- suppress_stderr
--- error_log
[emerg]
duplicate model name "twin"



=== TEST 17: kvserve without any kvserve_model is a configuration error
--- http_config
    # no kvserve_model here
--- must_die
--- suppress_stderr
--- error_log
[emerg]
the "kvserve" directive needs at least one "kvserve_model"
