# POST /v1/chat/completions and /v1/completions, non-streaming, through
# the engine process: OpenAI's response shapes on the tiny random model
# (TEST_NGINX_MODEL_DIR/default.gguf: the text is noise, so shapes and
# counts are checked, not words), the greedy text of the real stories260K
# model against its reference output (when the fixtures are there), and
# every error path as an OpenAI error object naming the param.
use Test::Nginx::Socket 'no_plan';
use FindBin;
use JSON::PP ();

no_shuffle();

our $Model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";
our $Fixtures = $ENV{KVS_FIXTURES} || "$FindBin::Bin/../../shared/fixtures";
our $Stories = "$Fixtures/models/stories260K-f32.gguf";
our $HaveStories = -f $Stories;

# A regex for "a prefix of $text of at least $min characters", written as
# it appears inside a JSON string.
sub json_prefix_re {
    my ($text, $min) = @_;
    my $js = JSON::PP->new->ascii->allow_nonref->encode($text);
    $js =~ s/^"|"$//g;
    # whole JSON escapes stay together
    my @units = $js =~ /(\\u[0-9a-fA-F]{4}|\\.|.)/gs;
    my $re = join '', map { quotemeta } @units[0 .. $min - 1];
    my $tail = '';
    for my $u (reverse @units[$min .. $#units]) {
        $tail = '(?:' . quotemeta($u) . $tail . ')?';
    }
    return $re . $tail;
}

# stories260K's greedy text from BOS (llama2.c's test_all.py reference);
# 30 tokens are a prefix of it
our $Greedy = '';
if ($HaveStories) {
    open my $in, '<:raw', "$Fixtures/models/stories260K.expected-greedy-n200.txt"
        or die $!;
    local $/;
    $Greedy = <$in>;
    $Greedy =~ s/\n\z//;
}
our $GreedyRe = $HaveStories ? json_prefix_re($Greedy, 60) : 'x';

our $Usage = qr/"usage":\{"prompt_tokens":(\d+),"completion_tokens":(\d+),/
    . qr/"total_tokens":(\d+),"prompt_tokens_details":\{"cached_tokens":0\}/;

add_block_preprocessor(sub {
    my $block = shift;
    if ($block->name =~ /stories260K/ && !$HaveStories) {
        # no fixtures: the block is skipped, naming the file it needs
        $block->set_value('name', $block->name . " (needs $Stories)");
        $block->set_value('skip_eval', '1: 1');
    }
    if (!defined $block->http_config) {
        $block->set_value('http_config',
            "kvserve_model kvserve-tiny $Model;\n"
            . ($HaveStories ? "    kvserve_model stories260K $Stories;\n" : '')
            . "    kvserve_kv_cache 8m;\n    kvserve_threads 1;");
    }
    if (!defined $block->config) {
        $block->set_value('config', "location /v1/ { kvserve; }");
    }
});

run_tests();

__DATA__

=== TEST 1: chat, non-streaming: one choice, its message, usage (the random model may end early; seeded, so never before a first token)
--- request
POST /v1/chat/completions
{"model": "kvserve-tiny", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 5, "seed": 7}
--- response_headers
Content-Type: application/json
--- response_body_like eval
qr/^\{"id":"chatcmpl-[0-9A-Za-z]{24}","object":"chat\.completion","created":\d+,"model":"kvserve-tiny","choices":\[\{"index":0,"message":\{"role":"assistant","content":"(?:[^"\\]|\\.)*","refusal":null\},"logprobs":null,"finish_reason":"(?:length|stop)"\}\],/
. qr/"usage":\{"prompt_tokens":\d+,"completion_tokens":[1-5],"total_tokens":\d+,"prompt_tokens_details":\{"cached_tokens":0\}/
--- no_error_log
[error]



=== TEST 2: completions, non-streaming: text, finish_reason length, usage counts
--- request
POST /v1/completions
{"model": "kvserve-tiny", "prompt": "Once upon", "max_tokens": 4, "seed": 7}
--- response_body_like eval
qr/^\{"id":"cmpl-[0-9A-Za-z]{24}","object":"text_completion","created":\d+,"model":"kvserve-tiny","choices":\[\{"text":"(?:[^"\\]|\\.)*","index":0,"logprobs":null,"finish_reason":"length"\}\],"usage":\{"prompt_tokens":\d+,"completion_tokens":4,/
--- no_error_log
[error]



=== TEST 3: n = 2 gives two choices, indexed, counted together
--- request
POST /v1/completions
{"model": "kvserve-tiny", "prompt": "abc", "max_tokens": 3, "n": 2}
--- response_body_like eval
qr/"choices":\[\{"text":"(?:[^"\\]|\\.)*","index":0,"logprobs":null,"finish_reason":"(?:length|stop)"\},\{"text":"(?:[^"\\]|\\.)*","index":1,"logprobs":null,"finish_reason":"(?:length|stop)"\}\],"usage":\{"prompt_tokens":\d+,"completion_tokens":[2-6],/



=== TEST 4: two prompts: one choice each, prompt tokens summed
--- request
POST /v1/completions
{"model": "kvserve-tiny", "prompt": [[1, 2, 3], [4, 5]], "max_tokens": 2}
--- response_body_like eval
qr/"index":0,.*"index":1,.*"usage":\{"prompt_tokens":5,"completion_tokens":[2-4],"total_tokens":(?:7|8|9),/



=== TEST 5: stories260K: greedy completions from BOS reproduce the reference text
--- request
POST /v1/completions
{"model": "stories260K", "prompt": "", "max_tokens": 30, "temperature": 0}
--- response_body_like eval
qr/"choices":\[\{"text":"$::GreedyRe","index":0,"logprobs":null,"finish_reason":"length"\}\],"usage":\{"prompt_tokens":1,"completion_tokens":30,"total_tokens":31,/



=== TEST 6: stories260K: the same seed gives the same text
--- request eval
["POST /v1/completions\n" . '{"model": "stories260K", "prompt": "Once", "max_tokens": 20, "seed": 42, "temperature": 1}',
 "POST /v1/completions\n" . '{"model": "stories260K", "prompt": "Once", "max_tokens": 20, "seed": 42, "temperature": 1}']
--- response_body_like eval
[qr/"text":"(?{ $::SeedText = undef })((?:[^"\\]|\\.)+)"(?{ $::SeedText = $^N })/,
 qr/"text":"((?:[^"\\]|\\.)+)"(?(?{ defined $::SeedText && $^N eq $::SeedText })|(*FAIL))/]



=== TEST 7: stories260K has no chat template: chat is a 400 naming model
--- request
POST /v1/chat/completions
{"model": "stories260K", "messages": [{"role": "user", "content": "hi"}]}
--- error_code: 400
--- response_body_like eval
qr/^\{"error":\{"message":"The model `stories260K` has no chat template: use \/v1\/completions\.","type":"invalid_request_error","param":"model","code":null\}\}$/



=== TEST 8: malformed JSON is a 400 saying where
--- request
POST /v1/chat/completions
{"model": "kvserve-tiny", "messages": [
--- error_code: 400
--- response_headers
Content-Type: application/json
--- response_body_like eval
qr/^\{"error":\{"message":"[^"]*line 1[^"]*","type":"invalid_request_error","param":null,"code":null\}\}$/



=== TEST 9: a wrong type names the field
--- request
POST /v1/chat/completions
{"model": "kvserve-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": "ten"}
--- error_code: 400
--- response_body_like eval
qr/^\{"error":\{"message":"[^"]+","type":"invalid_request_error","param":"max_tokens","code":"invalid_type"\}\}$/



=== TEST 10: empty messages are a 400 naming messages
--- request
POST /v1/chat/completions
{"model": "kvserve-tiny", "messages": []}
--- error_code: 400
--- response_body_like eval
qr/"param":"messages"/



=== TEST 11: a bad role names the message's role
--- request
POST /v1/chat/completions
{"model": "kvserve-tiny", "messages": [{"role": "wizard", "content": "hi"}]}
--- error_code: 400
--- response_body_like eval
qr/^\{"error":\{"message":"[^"]+","type":"invalid_request_error","param":"messages\[0\]\.role","code":"invalid_value"\}\}$/



=== TEST 12: a body over client_max_body_size is a 413 in OpenAI's shape
--- config
location /v1/ { client_max_body_size 1k; kvserve; }
--- request eval
"POST /v1/chat/completions\n" . '{"model": "kvserve-tiny", "messages": [{"role": "user", "content": "' . ('x' x 2000) . '"}]}'
--- error_code: 413
--- response_headers
Content-Type: application/json
--- response_body_like eval
qr/^\{"error":\{"message":"[^"]+","type":"invalid_request_error","param":null,"code":null\}\}$/



=== TEST 13: invalid UTF-8 in the body is a 400, never replaced
--- request eval
"POST /v1/completions\n{\"model\": \"kvserve-tiny\", \"prompt\": \"a\xff\xfeb\"}"
--- error_code: 400
--- response_body_like eval
qr/^\{"error":\{"message":"We could not parse the JSON body(?:[^"\\]|\\.)+","type":"invalid_request_error",/



=== TEST 14: prompt plus max_tokens over the context: context_length_exceeded on prompt
--- request
POST /v1/completions
{"model": "kvserve-tiny", "prompt": "hello", "max_tokens": 600}
--- error_code: 400
--- response_body_like eval
qr/^\{"error":\{"message":"This model's maximum context length is 512 tokens\. [^"]+","type":"invalid_request_error","param":"prompt","code":"context_length_exceeded"\}\}$/



=== TEST 15: chat over the context: context_length_exceeded on messages
--- request eval
"POST /v1/chat/completions\n" . '{"model": "kvserve-tiny", "messages": [{"role": "user", "content": "' . ('hello ' x 400) . '"}]}'
--- error_code: 400
--- response_body_like eval
qr/"param":"messages","code":"context_length_exceeded"/



=== TEST 16: token ids outside the vocabulary are a 400 on prompt
--- request
POST /v1/completions
{"model": "kvserve-tiny", "prompt": [1, 2, 99999]}
--- error_code: 400
--- response_body_like eval
qr/"param":"prompt","code":null/



=== TEST 17: an unknown model is a 404 model_not_found
--- request
POST /v1/chat/completions
{"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]}
--- error_code: 404
--- response_body
{"error":{"message":"The model `gpt-9` does not exist or you do not have access to it.","type":"invalid_request_error","param":"model","code":"model_not_found"}}



=== TEST 18: GET on a POST endpoint is a 405 with Allow: POST
--- request
GET /v1/chat/completions
--- error_code: 405
--- response_headers
Allow: POST
Content-Type: application/json
--- response_body
{"error":{"message":"Method GET is not allowed here; use POST.","type":"invalid_request_error","param":null,"code":"method_not_allowed"}}



=== TEST 19: the end token ends a completion (EOS forced by logit_bias)
--- request
POST /v1/completions
{"model": "kvserve-tiny", "prompt": "Once", "max_tokens": 8, "logit_bias": {"508": 100}}
--- error_code: 200
--- response_body_like eval
qr/"finish_reason":"stop".*"completion_tokens":[0-7],/s



=== TEST 20: ignore_eos: generation goes on past the end token, up to max_tokens
--- request
POST /v1/completions
{"model": "kvserve-tiny", "prompt": "Once", "max_tokens": 8, "logit_bias": {"508": 100}, "ignore_eos": true}
--- error_code: 200
--- response_body_like eval
qr/"finish_reason":"length".*"completion_tokens":8,/s



=== TEST 21: ignore_eos on chat too (the turn's end token forced)
--- request
POST /v1/chat/completions
{"model": "kvserve-tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "logit_bias": {"508": 100, "511": 100}, "ignore_eos": true}
--- error_code: 200
--- response_body_like eval
qr/"finish_reason":"length".*"completion_tokens":6,/s



=== TEST 22: ignore_eos of the wrong type is a 400 naming it
--- request eval
["POST /v1/completions\n{\"model\": \"kvserve-tiny\", \"prompt\": \"a\", \"ignore_eos\": 1}",
 "POST /v1/chat/completions\n{\"model\": \"kvserve-tiny\", \"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"ignore_eos\": \"yes\"}"]
--- error_code eval
[400, 400]
--- response_body eval
["{\"error\":{\"message\":\"Invalid type for 'ignore_eos': expected a boolean, but got an integer instead.\",\"type\":\"invalid_request_error\",\"param\":\"ignore_eos\",\"code\":\"invalid_type\"}}\n",
 "{\"error\":{\"message\":\"Invalid type for 'ignore_eos': expected a boolean, but got a string instead.\",\"type\":\"invalid_request_error\",\"param\":\"ignore_eos\",\"code\":\"invalid_type\"}}\n"]



=== TEST 23: an unknown field passes, and is logged (notice) naming it
--- request
POST /v1/completions
{"model": "kvserve-tiny", "prompt": "a", "max_tokens": 1, "no_such_field": 1, "metadata": {}}
--- error_code: 200
--- error_log
request field "no_such_field" in /v1/completions is not read by this server
request field "metadata" in /v1/completions is not read by this server



=== TEST 24: ... once per name per worker: the second request logs nothing more
--- request eval
["POST /v1/completions\n{\"model\": \"kvserve-tiny\", \"prompt\": \"a\", \"max_tokens\": 1, \"no_such_field\": 1}",
 "POST /v1/completions\n{\"model\": \"kvserve-tiny\", \"prompt\": \"a\", \"max_tokens\": 1, \"no_such_field\": 2}"]
--- error_code eval
[200, 200]
--- grep_error_log: request field "no_such_field"
--- grep_error_log_out eval
# checked after each request: the first logs it, the second must not
qr/\A(?:request field "no_such_field"\n)?\z/
