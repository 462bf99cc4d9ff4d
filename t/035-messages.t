# Anthropic's Messages API (issue 23, point 1): POST /v1/messages and
# /v1/messages/count_tokens on the chat route's pipeline, answered in
# Anthropic's shapes:
#
# - a whole message (type, role, content text block, stop_reason,
#   usage's four fields) and a stream in Anthropic's event order
#   (message_start, content_block_start, ping, content_block_delta,
#   content_block_stop, message_delta, message_stop);
# - count_tokens: {"input_tokens": N}, N the prompt's tokens, system
#   included;
# - errors as {"type":"error","error":{"type","message"}} with their
#   statuses: max_tokens missing, image refused, unknown model (404),
#   anthropic-version missing or unknown, GET (405), a body over
#   client_max_body_size (413 request_too_large), kvserve_limit (429
#   rate_limit_error);
# - cache_control on the system prompt: the second identical call reads
#   the prefix from the cache (cache_read_input_tokens > 0);
# - tools with tool_choice any (and disable_parallel_tool_use) on a model whose template teaches hermes
#   tool calls (qwen2.5's, from the fixtures): a tool_use block with an
#   input object and stop_reason tool_use, whole and streamed
#   (input_json_delta).
#
# The tools blocks need the fixture template and the kvserve tool; they
# skip otherwise.
use Test::Nginx::Socket 'no_plan';
use File::Temp ();

no_shuffle();

our $Model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";
our $Cli = "$ENV{TEST_NGINX_MODEL_DIR}/../kvserve";
our $Fixtures = $ENV{KVS_FIXTURES} || '/work/shared/fixtures';
our $Qwen = "$ENV{TEST_NGINX_MODEL_DIR}/../tmp/035-qwen25.gguf";

# a tiny model with qwen2.5's template (hermes tool calls)
our $HaveQwen = 0;
my $tpl = "$Fixtures/templates/qwen2.5-7b-instruct.jinja";
if (-f $tpl && -x $Cli) {
    system('mkdir', '-p', "$ENV{TEST_NGINX_MODEL_DIR}/../tmp");
    $HaveQwen = -f $Qwen || system($Cli, 'gen-model', '--preset', 'tiny',
                                   '--ctx', '4096',
                                   '--vocab', '2048', '--seed', '11',
                                   '--chat-template', $tpl, $Qwen) == 0;
}

our $Tools = '"tools": [{"name": "get_weather", "description": "Weather",'
    . ' "input_schema": {"type": "object", "properties": {"city":'
    . ' {"type": "string", "enum": ["Paris", "Rome"]}}, "required":'
    . ' ["city"]}}],'
    . ' "tool_choice": {"type": "any"';
# one call at most, or any number
our $ToolsOne = $Tools . ', "disable_parallel_tool_use": true}';
$Tools .= '}';

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value('http_config',
        "kvserve_model kvserve-tiny $Model;\n"
        . ($HaveQwen ? "    kvserve_model tiny-qwen25 $Qwen;\n" : "")
        . "    kvserve_kv_cache 8m;\n    kvserve_threads 1;\n"
        . "    kvserve_limit_zone \"all\" zone=one:1m rate=1t/m;")
        unless defined $block->http_config;
    $block->set_value('config',
        "location /v1/ { kvserve; client_max_body_size 4k; }\n"
        . "location /limited/v1/ { kvserve;\n"
        . "    kvserve_limit zone=one burst=1 nodelay; }")
        unless defined $block->config;
    $block->set_value('more_headers', "anthropic-version: 2023-06-01")
        unless defined $block->more_headers;
});

run_tests();

__DATA__

=== TEST 1: a whole message: text block, stop_reason, usage's four fields
--- request
POST /v1/messages
{"model": "kvserve-tiny", "max_tokens": 5, "temperature": 0.5, "top_k": 40, "top_p": 0.9, "metadata": {"user_id": "u1"}, "system": "Be brief.", "messages": [{"role": "user", "content": "Hello"}]}
--- response_headers
Content-Type: application/json
--- response_body_like chomp
^\{"id":"msg_[0-9A-Za-z]{24}","type":"message","role":"assistant","model":"kvserve-tiny","content":\[(\{"type":"text","text":"(?:[^"\\]|\\.)*"\})?\],"stop_reason":"(max_tokens|end_turn)","stop_sequence":null,"usage":\{"input_tokens":\d+,"cache_creation_input_tokens":0,"cache_read_input_tokens":\d+,"output_tokens":[1-5]\}\}$
--- error_code: 200



=== TEST 2: a stream: Anthropic's events in their order, no [DONE]
--- request
POST /v1/messages
{"model": "kvserve-tiny", "max_tokens": 6, "stream": true, "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]}
--- response_headers
Content-Type: text/event-stream
--- response_body_like chomp
\A(?s:event: message_start\ndata: \{"type":"message_start","message":\{"id":"msg_\w+",.*?"content":\[\],"stop_reason":null,"stop_sequence":null,"usage":\{"input_tokens":\d+,.*?\}\}\}\n\nevent: content_block_start\ndata: \{"type":"content_block_start","index":0,"content_block":\{"type":"text","text":""\}\}\n\nevent: ping\ndata: \{"type":"ping"\}\n\n(event: content_block_delta\ndata: \{"type":"content_block_delta","index":0,"delta":\{"type":"text_delta","text":"[^\n]*"\}\}\n\n)+event: content_block_stop\ndata: \{"type":"content_block_stop","index":0\}\n\nevent: message_delta\ndata: \{"type":"message_delta","delta":\{"stop_reason":"(max_tokens|end_turn)","stop_sequence":null\},"usage":\{.*?"output_tokens":[1-6]\}\}\n\nevent: message_stop\ndata: \{"type":"message_stop"\}\n\n)\z
--- error_code: 200



=== TEST 3: count_tokens: the prompt's tokens, more with a system prompt
--- request eval
["POST /v1/messages/count_tokens\n"
 . '{"model": "kvserve-tiny", "messages": [{"role": "user", "content": "Hello"}]}',
 "POST /v1/messages/count_tokens\n"
 . '{"model": "kvserve-tiny", "system": "You are a helpful assistant.", "messages": [{"role": "user", "content": "Hello"}]}']
--- response_body_like eval
['^\{"input_tokens":(\d+)\}$', '^\{"input_tokens":(\d+)\}$']
--- error_code eval
[200, 200]



=== TEST 4: max_tokens is required; image blocks are refused
--- request eval
["POST /v1/messages\n"
 . '{"model": "kvserve-tiny", "messages": [{"role": "user", "content": "Hi"}]}',
 "POST /v1/messages\n"
 . '{"model": "kvserve-tiny", "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]}',
 "POST /v1/messages\n"
 . '{"model": "kvserve-tiny", "max_tokens": 4, "temperature": 1.5, "messages": [{"role": "user", "content": "Hi"}]}']
--- response_body_like eval
['^\{"type":"error","error":\{"type":"invalid_request_error","message":"Missing required parameter: \'max_tokens\'\."\}\}$',
 '^\{"type":"error","error":\{"type":"invalid_request_error","message":"messages\[0\]\.content\[0\]\.type: \'image\' content blocks are not supported',
 '^\{"type":"error","error":\{"type":"invalid_request_error","message":"Invalid \'temperature\': decimal above maximum value\. Expected a value <= 1']
--- error_code eval
[400, 400, 400]



=== TEST 5: anthropic-version missing, then unknown: 400 naming the header
--- more_headers
X-Other: 1
--- request eval
["POST /v1/messages\n"
 . '{"model": "kvserve-tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}',
 "POST /v1/messages/count_tokens\n"
 . '{"model": "kvserve-tiny", "messages": [{"role": "user", "content": "Hi"}]}']
--- response_body_like eval
['^\{"type":"error","error":\{"type":"invalid_request_error","message":"anthropic-version: header is required',
 '^\{"type":"error","error":\{"type":"invalid_request_error","message":"anthropic-version: header is required']
--- error_code eval
[400, 400]



=== TEST 6: an unknown anthropic-version
--- more_headers
anthropic-version: 2099-01-01
--- request
POST /v1/messages
{"model": "kvserve-tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}
--- response_body_like chomp
^\{"type":"error","error":\{"type":"invalid_request_error","message":"anthropic-version: \\"2099-01-01\\" is not a version this server accepts \(\\"2023-06-01\\" or \\"2026-10-21\\"\)\."\}\}$
--- error_code: 400



=== TEST 7: unknown model 404 not_found_error; GET 405; a body too large 413 request_too_large
--- request eval
["POST /v1/messages\n"
 . '{"model": "nope", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}',
 "GET /v1/messages",
 "POST /v1/messages\n"
 . '{"model": "kvserve-tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "' . ('x' x 5000) . '"}]}']
--- response_body_like eval
['^\{"type":"error","error":\{"type":"not_found_error","message":"The model `nope` does not exist',
 '^\{"type":"error","error":\{"type":"invalid_request_error","message":"Method GET is not allowed here; use POST\."\}\}$',
 '^\{"type":"error","error":\{"type":"request_too_large","message":"The request body is larger than the server accepts\."\}\}$']
--- error_code eval
[404, 405, 413]



=== TEST 8: kvserve_limit refuses: 429 rate_limit_error
--- request eval
["POST /limited/v1/messages\n"
 . '{"model": "kvserve-tiny", "max_tokens": 400, "messages": [{"role": "user", "content": "Hi"}]}']
--- response_body_like eval
['^\{"type":"error","error":\{"type":"rate_limit_error","message":"']
--- error_code eval
[429]



=== TEST 9: cache_control on the system prompt: the second call reads the prefix from the cache
--- request eval
my $b = '{"model": "kvserve-tiny", "max_tokens": 2, "system": [{"type": "text", "text": "You are a storyteller who tells short tales about cats.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}], "messages": [{"role": "user", "content": "A tale, please."}]}';
["POST /v1/messages\n$b", "POST /v1/messages\n$b"]
--- response_body_like eval
['"usage":\{"input_tokens":\d+,"cache_creation_input_tokens":[1-9]\d*,"cache_read_input_tokens":0,',
 '"usage":\{"input_tokens":\d+,"cache_creation_input_tokens":0,"cache_read_input_tokens":[1-9]\d*,']
--- error_code eval
[200, 200]



=== TEST 10: tools with tool_choice any, no parallel use: one tool_use block, stop_reason tool_use
--- skip_eval: 1: !$::HaveQwen
--- request eval
"POST /v1/messages\n"
. '{"model": "tiny-qwen25", "max_tokens": 200, "messages": [{"role": "user", "content": "Weather in Paris?"}], ' . $::ToolsOne . '}'
--- response_body_like chomp
"content":\[\{"type":"tool_use","id":"toolu_[0-9A-Za-z]{24}","name":"get_weather","input":\{"city":"(Paris|Rome)"\}\}\],"stop_reason":"tool_use","stop_sequence":null
--- error_code: 200



=== TEST 11: tools streamed: content_block_start tool_use, input_json_delta, stop_reason tool_use
--- skip_eval: 1: !$::HaveQwen
--- request eval
"POST /v1/messages\n"
. '{"model": "tiny-qwen25", "max_tokens": 200, "stream": true, "messages": [{"role": "user", "content": "Weather in Paris?"}], ' . $::ToolsOne . '}'
--- response_body_like chomp
(?s:"content_block":\{"type":"tool_use","id":"toolu_\w+","name":"get_weather","input":\{\}\}\}\n\nevent: ping\n.*"delta":\{"type":"input_json_delta","partial_json":.*event: content_block_stop\n.*"stop_reason":"tool_use".*event: message_stop\n)
--- error_code: 200



=== TEST 12: a tool_result after a tool_use turn renders; a tool_use block in a user turn is refused
--- skip_eval: 1: !$::HaveQwen
--- request eval
["POST /v1/messages/count_tokens\n"
 . '{"model": "tiny-qwen25", "messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": [{"type": "text", "text": "Let me see."}, {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny", "is_error": false}, {"type": "text", "text": "Thanks"}]}], ' . $::Tools . '}',
 "POST /v1/messages\n"
 . '{"model": "tiny-qwen25", "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "get_weather", "input": {}}]}]}']
--- response_body_like eval
['^\{"input_tokens":\d+\}$',
 '^\{"type":"error","error":\{"type":"invalid_request_error","message":"messages\[0\]\.content\[0\]\.type: \'tool_use\' blocks are only allowed in assistant messages\."\}\}$']
--- error_code eval
[200, 400]


=== TEST 13: a tool's input_schema the engine ends while generating (an anyOf of 100 strings that begin alike) is Anthropic's 400 invalid_request_error, streamed or not
--- skip_eval: 1: !$::HaveQwen
--- request eval
my $t = '"tools": [{"name": "note", "description": "Note", "input_schema": {"type": "object", "properties": {"x": {"anyOf": [{"type": "string", "minLength": 0}, {"type": "string", "minLength": 1}, {"type": "string", "minLength": 2}, {"type": "string", "minLength": 3}, {"type": "string", "minLength": 4}, {"type": "string", "minLength": 5}, {"type": "string", "minLength": 6}, {"type": "string", "minLength": 7}, {"type": "string", "minLength": 8}, {"type": "string", "minLength": 9}, {"type": "string", "minLength": 10}, {"type": "string", "minLength": 11}, {"type": "string", "minLength": 12}, {"type": "string", "minLength": 13}, {"type": "string", "minLength": 14}, {"type": "string", "minLength": 15}, {"type": "string", "minLength": 16}, {"type": "string", "minLength": 17}, {"type": "string", "minLength": 18}, {"type": "string", "minLength": 19}, {"type": "string", "minLength": 20}, {"type": "string", "minLength": 21}, {"type": "string", "minLength": 22}, {"type": "string", "minLength": 23}, {"type": "string", "minLength": 24}, {"type": "string", "minLength": 25}, {"type": "string", "minLength": 26}, {"type": "string", "minLength": 27}, {"type": "string", "minLength": 28}, {"type": "string", "minLength": 29}, {"type": "string", "minLength": 30}, {"type": "string", "minLength": 31}, {"type": "string", "minLength": 32}, {"type": "string", "minLength": 33}, {"type": "string", "minLength": 34}, {"type": "string", "minLength": 35}, {"type": "string", "minLength": 36}, {"type": "string", "minLength": 37}, {"type": "string", "minLength": 38}, {"type": "string", "minLength": 39}, {"type": "string", "minLength": 40}, {"type": "string", "minLength": 41}, {"type": "string", "minLength": 42}, {"type": "string", "minLength": 43}, {"type": "string", "minLength": 44}, {"type": "string", "minLength": 45}, {"type": "string", "minLength": 46}, {"type": "string", "minLength": 47}, {"type": "string", "minLength": 48}, {"type": "string", "minLength": 49}, {"type": "string", "minLength": 50}, {"type": "string", "minLength": 51}, {"type": "string", "minLength": 52}, {"type": "string", "minLength": 53}, {"type": "string", "minLength": 54}, {"type": "string", "minLength": 55}, {"type": "string", "minLength": 56}, {"type": "string", "minLength": 57}, {"type": "string", "minLength": 58}, {"type": "string", "minLength": 59}, {"type": "string", "minLength": 60}, {"type": "string", "minLength": 61}, {"type": "string", "minLength": 62}, {"type": "string", "minLength": 63}, {"type": "string", "minLength": 64}, {"type": "string", "minLength": 65}, {"type": "string", "minLength": 66}, {"type": "string", "minLength": 67}, {"type": "string", "minLength": 68}, {"type": "string", "minLength": 69}, {"type": "string", "minLength": 70}, {"type": "string", "minLength": 71}, {"type": "string", "minLength": 72}, {"type": "string", "minLength": 73}, {"type": "string", "minLength": 74}, {"type": "string", "minLength": 75}, {"type": "string", "minLength": 76}, {"type": "string", "minLength": 77}, {"type": "string", "minLength": 78}, {"type": "string", "minLength": 79}, {"type": "string", "minLength": 80}, {"type": "string", "minLength": 81}, {"type": "string", "minLength": 82}, {"type": "string", "minLength": 83}, {"type": "string", "minLength": 84}, {"type": "string", "minLength": 85}, {"type": "string", "minLength": 86}, {"type": "string", "minLength": 87}, {"type": "string", "minLength": 88}, {"type": "string", "minLength": 89}, {"type": "string", "minLength": 90}, {"type": "string", "minLength": 91}, {"type": "string", "minLength": 92}, {"type": "string", "minLength": 93}, {"type": "string", "minLength": 94}, {"type": "string", "minLength": 95}, {"type": "string", "minLength": 96}, {"type": "string", "minLength": 97}, {"type": "string", "minLength": 98}, {"type": "string", "minLength": 99}]}}, "required": ["x"], "additionalProperties": false}}], "tool_choice": {"type": "any", "disable_parallel_tool_use": true}';
["POST /v1/messages\n"
 . '{"model": "tiny-qwen25", "max_tokens": 200, "messages": [{"role": "user", "content": "Note it."}], ' . $t . '}',
 "POST /v1/messages\n"
 . '{"model": "tiny-qwen25", "max_tokens": 200, "stream": true, "messages": [{"role": "user", "content": "Note it."}], ' . $t . '}']
--- response_body_like eval
# sampled (temperature 1): which of the engine's two limits on a grammar
# that keeps too many parses open ends it depends on the text so far
# (the count of open parses, or the work of one token's mask: about 1 in
# 150 requests here)
my $e = '"type":"error","error":\{"type":"invalid_request_error","message":"the output\'s grammar (?:holds more than 32 parses open at once|took more work for one token than \d+ walks of the vocabulary)';
['^\{' . $e,
 '(?s:event: message_start\n.*event: error\ndata: \{' . $e . '[^\n]*\n\n\z)']
--- error_code eval
[400, 200]
