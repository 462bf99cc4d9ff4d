# POST /tokenize and /detokenize (issue 22 point 4), vLLM's and
# llama-server's shapes, on the tiny default model (a byte-level BPE with
# <|begin_of_text|> 507, <|end_of_text|> 508, <|eot_id|> 511 and a
# Llama-3 style chat template).  Expected ids come from the command-line
# tokenizer (`kvserve tokenize`, the library without nginx), so what is
# checked is that each endpoint tokenizes as it says: the BOS rule
# (add_special_tokens, add_special), control-token text (parse_special),
# the chat template (messages, add_generation_prompt), the answer's
# shape, the ids round trip, and every refusal as an OpenAI error naming
# the field; a long prompt goes to the thread pool; the body limit holds.
use Test::Nginx::Socket 'no_plan';
use File::Temp ();

no_shuffle();

our $Model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";
our $Cli = "$ENV{TEST_NGINX_MODEL_DIR}/../kvserve";

# `kvserve tokenize @flags` of $text, as a JSON array's inside
sub cli_ids {
    my ($text, @flags) = @_;
    my $tmp = File::Temp->new;
    print $tmp $text;
    close $tmp;
    my $out = qx($Cli tokenize @flags $Model < $tmp);
    die "kvserve tokenize failed" if $? != 0;
    $out =~ s/^\s+|\s+$//g;
    return join ',', split /\s+/, $out;
}

our $Hello = cli_ids('Hello world');
our $HelloBos = cli_ids('Hello world', '--bos');
our $EotPlain = cli_ids('Hi<|eot_id|>');
our $EotSpecial = cli_ids('Hi<|eot_id|>', '--special');
our $Long = 'Once upon a time there was a cat. ' x 64;
our $LongIds = cli_ids($Long, '--bos');
our $LongCount = scalar(() = $LongIds =~ /\d+/g);

our $Where = 'add_header X-Where $kvserve_tokenize_where always;';

add_block_preprocessor(sub {
    my $block = shift;
    $block->set_value('main_config', 'thread_pool kvs threads=1;')
        unless defined $block->main_config;
    $block->set_value('http_config',
        "kvserve_model kvserve-tiny $Model;\n"
        . "    kvserve_kv_cache 8m;\n    kvserve_threads 1;")
        unless defined $block->http_config;
    $block->set_value('config',
        "location /v1/ { kvserve; }\n"
        . "location = /tokenize { kvserve; kvserve_tokenize_threads kvs;\n"
        . "    kvserve_tokenize_threshold 256; $Where\n"
        . "    client_max_body_size 64k; }\n"
        . "location = /detokenize { kvserve; }")
        unless defined $block->config;
});

run_tests();

__DATA__

=== TEST 1: vLLM's prompt: BOS by the vocabulary's rule, count and max_model_len
--- request
POST /tokenize
{"model": "kvserve-tiny", "prompt": "Hello world"}
--- response_headers
Content-Type: application/json
X-Where: inline
--- response_body eval
"{\"count\":" . (scalar(() = $::HelloBos =~ /\d+/g)) . ",\"max_model_len\":512,\"tokens\":[$::HelloBos]}\n"
--- error_code: 200



=== TEST 2: vLLM's add_special_tokens false: no BOS
--- request
POST /tokenize
{"model": "kvserve-tiny", "prompt": "Hello world", "add_special_tokens": false}
--- response_body eval
"{\"count\":" . (scalar(() = $::Hello =~ /\d+/g)) . ",\"max_model_len\":512,\"tokens\":[$::Hello]}\n"
--- error_code: 200



=== TEST 3: llama-server's content: {"tokens"} only, no BOS by default, no model needed
--- request
POST /tokenize
{"content": "Hello world"}
--- response_body eval
"{\"tokens\":[$::Hello]}\n"
--- error_code: 200



=== TEST 4: llama-server's add_special: BOS
--- request
POST /tokenize
{"content": "Hello world", "add_special": true}
--- response_body eval
"{\"tokens\":[$::HelloBos]}\n"
--- error_code: 200



=== TEST 5: llama-server parses control-token text by default
--- request
POST /tokenize
{"content": "Hi<|eot_id|>"}
--- response_body eval
"{\"tokens\":[$::EotSpecial]}\n"
--- error_code: 200



=== TEST 6: ... and not with parse_special false
--- request
POST /tokenize
{"content": "Hi<|eot_id|>", "parse_special": false}
--- response_body eval
"{\"tokens\":[$::EotPlain]}\n"
--- error_code: 200



=== TEST 7: vLLM's prompt tokenizes control-token text as text, as /v1/completions does
--- request
POST /tokenize
{"model": "kvserve-tiny", "prompt": "Hi<|eot_id|>", "add_special_tokens": false}
--- response_body_like eval
qr/^\{"count":\d+,"max_model_len":512,"tokens":\[\Q$::EotPlain\E\]\}\n\z/
--- error_code: 200



=== TEST 8: an empty prompt is no tokens (llama-server), not an error
--- request
POST /tokenize
{"content": ""}
--- response_body
{"tokens":[]}
--- error_code: 200



=== TEST 9: messages through the model's chat template, with the generation prompt
--- request
POST /tokenize
{"model": "kvserve-tiny", "messages": [{"role": "user", "content": "Hi"}]}
--- response_body_like eval
qr/^\{"count":\d+,"max_model_len":512,"tokens":\[507,(?:\d+,)*509,(?:\d+,)*511,(?:\d+,)*509,(?:\d+,)*510(?:,\d+)*\]\}\n\z/
--- error_code: 200



=== TEST 10: messages without the generation prompt end with the turn's <|eot_id|>
--- request
POST /tokenize
{"model": "kvserve-tiny", "messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": false}
--- response_body_like eval
qr/^\{"count":\d+,"max_model_len":512,"tokens":\[507,(?:\d+,)*511\]\}\n\z/
--- error_code: 200



=== TEST 11: a long prompt is tokenized in the thread pool, the same ids
--- request eval
"POST /tokenize\n{\"model\": \"kvserve-tiny\", \"prompt\": \"$::Long\"}"
--- response_headers
X-Where: pool
--- response_body eval
"{\"count\":$::LongCount,\"max_model_len\":512,\"tokens\":[$::LongIds]}\n"
--- error_code: 200



=== TEST 12: detokenize, vLLM's shape (model given): {"prompt"}
--- request eval
"POST /detokenize\n{\"model\": \"kvserve-tiny\", \"tokens\": [$::Hello]}"
--- response_body
{"prompt":"Hello world"}
--- error_code: 200



=== TEST 13: detokenize, llama-server's shape (no model): {"content"}, special tokens shown
--- request eval
"POST /detokenize\n{\"tokens\": [$::HelloBos]}"
--- response_body
{"content":"<|begin_of_text|>Hello world"}
--- error_code: 200



=== TEST 14: detokenize: an id outside the vocabulary is a 400 naming its index
--- request
POST /detokenize
{"model": "kvserve-tiny", "tokens": [72, 101, 512]}
--- response_body_like
^\{"error":\{"message":"Invalid 'tokens\[2\]': token id 512 is out of the vocabulary of 512 tokens\.","type":"invalid_request_error","param":"tokens\[2\]","code":"invalid_value"\}\}
--- error_code: 400



=== TEST 15: detokenize: a negative id and a non-integer, naming the index
--- request eval
["POST /detokenize\n{\"tokens\": [72, -1]}",
 "POST /detokenize\n{\"tokens\": [\"72\"]}",
 "POST /detokenize\n{\"model\": \"kvserve-tiny\"}"]
--- response_body_like eval
[qr/"param":"tokens\[1\]","code":"integer_below_min_value"/,
 qr/"param":"tokens\[0\]","code":"invalid_type"/,
 qr/"param":"tokens","code":"missing_required_parameter"/]
--- error_code eval
[400, 400, 400]



=== TEST 16: tokenize refusals name the field
--- request eval
["POST /tokenize\n{\"model\": \"kvserve-tiny\", \"prompt\": \"a\", \"foo\": 1}",
 "POST /tokenize\n{\"model\": \"kvserve-tiny\"}",
 "POST /tokenize\n{\"model\": \"kvserve-tiny\", \"prompt\": [1, 2]}",
 "POST /tokenize\n{\"content\": \"a\", \"with_pieces\": true}",
 "POST /tokenize\n{\"model\": \"kvserve-tiny\", \"prompt\": \"a\", \"content\": \"b\"}",
 "POST /tokenize\n{\"model\": \"kvserve-tiny\", \"prompt\": \"a\", \"add_special_tokens\": 1}",
 "POST /tokenize\n{\"model\": \"nope\", \"prompt\": \"a\"}",
 "POST /tokenize\n[1]"]
--- response_body_like eval
[qr/"param":"foo","code":"unknown_parameter"/,
 qr/"param":"prompt","code":"missing_required_parameter"/,
 qr/"param":"prompt","code":"invalid_type"/,
 qr/"param":"with_pieces","code":"unsupported_value"/,
 qr/"param":"content","code":"invalid_value"/,
 qr/"param":"add_special_tokens","code":"invalid_type"/,
 qr/"param":"model","code":"model_not_found"/,
 qr/"param":null,"code":"invalid_type"/]
--- error_code eval
[400, 400, 400, 400, 400, 400, 404, 400]



=== TEST 17: GET is a 405 naming POST
--- request
GET /tokenize
--- response_headers
Allow: POST
--- response_body_like: "code":"method_not_allowed"
--- error_code: 405



=== TEST 18: /v1/tokenize in a kvserve location is the same endpoint
--- request
POST /v1/tokenize
{"content": "Hello world"}
--- response_body eval
"{\"tokens\":[$::Hello]}\n"
--- error_code: 200



=== TEST 19: a body over client_max_body_size is a JSON 413, as for completions
--- request eval
"POST /tokenize\n{\"model\": \"kvserve-tiny\", \"prompt\": \"" . ("a" x 70000) . "\"}"
--- response_body_like: ^\{"error":\{"message":"The request body is larger than the server accepts\.","type":"invalid_request_error"
--- error_code: 413
