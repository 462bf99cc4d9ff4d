# The prefix cache from the client's and the operator's side (issue 6):
# cache_control breakpoints (accepted on parts and messages, the 400s
# naming the param for a 5th one, a bad type or ttl), usage with
# Anthropic's cache_read_input_tokens / cache_creation_input_tokens only
# when breakpoints were given (non-streaming and in the include_usage
# chunk), $kvserve_cached_tokens and $kvserve_cache_miss_reason in an
# access log, kvserve_cache_scope with a value longer than the engine's
# scope limit (hashed, so served), the prefix cache counters in
# kvserve_metrics, the engine's figures in kvserve_status; then `nginx -t`
# on the three directives: good values pass, bad ones fail quoting the
# value.  What needs the engine's cache
# itself (hits growing turn after turn) is checked where the engine side
# is tested; here the figures are only required to be consistent
# (cached <= prompt, the miss reason one of the names).
use Test::Nginx::Socket 'no_plan';
use FindBin;
use IO::Socket::INET ();
use Time::HiRes qw(sleep);
use lib "$FindBin::Bin/lib";
use Kvserve::NginxT ();

no_shuffle();

our $Model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";

our $LogFormat = q{log_format cache 'C id=$http_x_test_id }
    . q{pt=$kvserve_prompt_tokens ct=$kvserve_cached_tokens }
    . q{miss=$kvserve_cache_miss_reason';};

our $Miss = qr/(?:-|none|no_entry|evicted|epoch|adapter|scope|off|diverged:\d+)/;

add_block_preprocessor(sub {
    my $block = shift;
    if (!defined $block->http_config) {
        $block->set_value('http_config',
            "kvserve_model kvserve-tiny $Model;\n"
            . "    kvserve_kv_cache 8m;\n    kvserve_threads 1;\n"
            . "    kvserve_cache_pin_max 1m;\n"
            . "    $LogFormat");
    }
    if (!defined $block->config) {
        $block->set_value('config',
            "location /v1/ { kvserve; kvserve_cache_scope \$http_authorization;"
            . " access_log logs/cache.log cache; }\n"
            . "location = /metrics { kvserve_metrics; }\n"
            . "location = /status { kvserve_status; }");
    }
});

our $Sys = '{"role": "system", "content": "You are terse.", '
    . '"cache_control": {"type": "ephemeral"}}';
our $Part = '{"type": "text", "text": "hi", '
    . '"cache_control": {"type": "ephemeral", "ttl": "1h"}}';

run_tests();

# --- on the nginx of the last block: the variables in its access log -------

my $port = $Test::Nginx::Util::ServerPortForClient;

sub post {
    my ($id, $body, $tenant) = @_;
    $tenant //= 'tenant-a';
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => 30)
        or die "connect: $!";
    print $s "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
        . "X-Test-Id: $id\r\nAuthorization: Bearer $tenant\r\n"
        . "Connection: close\r\nContent-Length: " . length($body)
        . "\r\n\r\n$body";
    local $/;
    my $r = <$s> // '';
    close $s;
    return $r;
}

like(post('vars', '{"model": "kvserve-tiny", "max_tokens": 2, '
                  . '"messages": [' . $Sys
                  . ', {"role": "user", "content": "hi"}]}'),
     qr{^HTTP/1\.1 200 }, 'a request with breakpoints is served');
like(post('refused', '{"model": "kvserve-tiny", "messages": [{"role": '
                     . '"user", "content": "hi", "cache_control": 5}]}'),
     qr{^HTTP/1\.1 400 }, 'a bad cache_control is a 400');
sleep 0.3;                          # the log phase follows the response

my $log = "$Test::Nginx::Util::ServRoot/logs/cache.log";
my @lines = do {
    open my $fh, '<', $log or die "$log: $!";
    grep { /^C / } <$fh>;
};
my ($logged) = grep { /id=vars / } @lines;
ok($logged, 'the request with X-Test-Id vars is in the access log')
    or diag(join '', @lines);
like($logged // '', qr/ pt=\d+ ct=\d+ miss=$Miss$/,
     'cached tokens and miss reason are logged');
my ($pt, $ct) = ($logged // '') =~ / pt=(\d+) ct=(\d+)/;
ok(defined $ct && $ct <= $pt, 'cached tokens <= prompt tokens');
my ($refused) = grep { /id=refused / } @lines;
like($refused // '', qr/ pt=- ct=- miss=-$/,
     'a request refused with a 400 logs "-" for all three');

# the worker counts queries and hits per request, in tokens: the lookup
# of the request above (unless the engine said the cache is off)
my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                              Proto => 'tcp', Timeout => 10)
    or die "connect: $!";
print $s "GET /metrics HTTP/1.1\r\nHost: localhost\r\n"
    . "Connection: close\r\n\r\n";
my $text = do { local $/; <$s> } // '';
close $s;
my ($q) = $text =~ /^kvserve:prefix_cache_queries_total\{model_name="kvserve-tiny"\} (\d+)$/m;
my ($h) = $text =~ /^kvserve:prefix_cache_hits_total\{model_name="kvserve-tiny"\} (\d+)$/m;
ok(defined $q && defined $h && $h <= $q, 'hits <= queries in the metrics')
    or diag($text);
my ($miss) = ($logged // '') =~ / miss=(\S+)$/;
if (defined $q && defined $pt && defined $miss && $miss !~ /^(?:-|off)$/) {
    is($q, $pt, 'the lookup counted its prompt tokens as queries');
    is($h, $ct, '... and its cached tokens as hits');
}

# --- kvserve_cache_scope: one tenant's prompt is not another's ------------

# a system prompt of several KV blocks (16 tokens each), sent twice by
# tenant x (the second reuses the first's blocks) and once by tenant y,
# which must reuse nothing of it: its own scope holds no entry
my $long = '{"model": "kvserve-tiny", "max_tokens": 1, "messages": '
    . '[{"role": "system", "content": "' . join(' ', ('tenant isolation')
    x 40) . '"}, {"role": "user", "content": "hi"}]}';
my %cached;
for my $run (['x1', 'tenant-x'], ['x2', 'tenant-x'], ['y1', 'tenant-y']) {
    my $r = post($run->[0], $long, $run->[1]);
    ($cached{$run->[0]}) = $r =~ /"cached_tokens":(\d+)/;
}
ok(defined $cached{x2} && $cached{x2} >= 16,
   'the same tenant reuses its prompt (' . ($cached{x2} // '?') . ' tokens)');
is($cached{y1}, 0, 'another tenant reuses none of it');
sleep 0.3;
my ($y1) = do {
    open my $fh, '<', $log or die "$log: $!";
    grep { /id=y1 / } <$fh>;
};
like($y1 // '', qr/ ct=0 miss=scope$/,
     '... and its miss reason says another scope has it');

# --- nginx -t -----------------------------------------------------------------

my $t = Kvserve::NginxT->new('prefix-cache');
my $m = $t->model;

my ($status, $out) = $t->nginx_t(
    "kvserve_model tiny $m; kvserve_prefix_cache off; "
    . "kvserve_cache_pin_max 64m; kvserve_cache_scope global;",
    'location /v1/ { kvserve; kvserve_cache_scope $http_authorization; }'
    . ' location /v2/ { kvserve; kvserve_cache_scope "t-$remote_addr"; }');
is($status, 0, 'the cache directives with good values pass nginx -t')
    or diag($out);

($status, $out) = $t->nginx_t("kvserve_model tiny $m; "
                              . 'kvserve_cache_pin_max 12q;');
isnt($status, 0, 'kvserve_cache_pin_max 12q fails nginx -t');
like($out, qr/\[emerg\] .*invalid value "12q" in "kvserve_cache_pin_max" directive, it must be a size/,
     '... quoting the value');

($status, $out) = $t->nginx_t("kvserve_model tiny $m; "
                              . 'kvserve_cache_pin_max 0;');
isnt($status, 0, 'kvserve_cache_pin_max 0 fails nginx -t');
like($out, qr/invalid value "0" in "kvserve_cache_pin_max" directive/,
     '... quoting the value');

($status, $out) = $t->nginx_t("kvserve_model tiny $m; "
                              . 'kvserve_prefix_cache maybe;');
isnt($status, 0, 'kvserve_prefix_cache maybe fails nginx -t');
like($out, qr/invalid value "maybe" in "kvserve_prefix_cache" directive, it must be "on" or "off"/,
     '... quoting the value');

($status, $out) = $t->nginx_t("kvserve_model tiny $m;",
                              'location /v1/ { kvserve; '
                              . 'kvserve_cache_scope ""; }');
isnt($status, 0, 'an empty kvserve_cache_scope fails nginx -t');
like($out, qr/invalid value "" in "kvserve_cache_scope" directive, it must be "global", "tenant" or a string with variables/,
     '... saying what it must be');

($status, $out) = $t->nginx_t("kvserve_model tiny $m;",
                              'location /v1/ { kvserve; '
                              . 'kvserve_cache_pin_max 1m; }');
isnt($status, 0, 'kvserve_cache_pin_max in a location fails nginx -t');
like($out, qr/"kvserve_cache_pin_max" directive is not allowed here/,
     '... it is an http-level directive');

($status, $out) = $t->nginx_t("kvserve_model tiny $m;",
                              'location /v1/ { kvserve; '
                              . 'kvserve_cache_scope global; '
                              . 'kvserve_cache_scope $host; }');
isnt($status, 0, 'kvserve_cache_scope twice in a location fails nginx -t');
like($out, qr/"kvserve_cache_scope" directive is duplicate/,
     '... as a duplicate');

$t->done;

__DATA__

=== TEST 1: breakpoints on the system message and a part: served, usage has the cache fields
--- more_headers
Authorization: Bearer tenant-a
--- request eval
qq{POST /v1/chat/completions
{"model": "kvserve-tiny", "max_tokens": 3, "messages": [$::Sys, {"role": "user", "content": [$::Part]}]}}
--- error_code: 200
--- response_body_like eval
qr/"usage":\{"prompt_tokens":(\d+),"completion_tokens":\d+,"total_tokens":\d+,"prompt_tokens_details":\{"cached_tokens":(\d+)\},"completion_tokens_details":\{"reasoning_tokens":0\},"cache_read_input_tokens":\2,"cache_creation_input_tokens":\d+\}/
--- no_error_log
[error]



=== TEST 2: no breakpoints: OpenAI's usage only
--- request
POST /v1/chat/completions
{"model": "kvserve-tiny", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}
--- error_code: 200
--- response_body_like eval
qr/"usage":\{"prompt_tokens":\d+,"completion_tokens":\d+,"total_tokens":\d+,"prompt_tokens_details":\{"cached_tokens":\d+\},"completion_tokens_details":\{"reasoning_tokens":0\}\}/
--- response_body_unlike: cache_read_input_tokens
--- no_error_log
[error]



=== TEST 3: streaming with include_usage: the usage chunk has the cache fields
--- request eval
qq{POST /v1/chat/completions
{"model": "kvserve-tiny", "max_tokens": 3, "stream": true, "stream_options": {"include_usage": true}, "messages": [$::Sys, {"role": "user", "content": "hi"}]}}
--- error_code: 200
--- response_body_like eval
qr/"choices":\[\],"usage":\{"prompt_tokens":\d+,.*"cache_read_input_tokens":\d+,"cache_creation_input_tokens":\d+\}\}\n\ndata: \[DONE\]\n\n\z/s
--- no_error_log
[error]



=== TEST 4: breakpoints in a prompt tokenized by the thread pool: the same usage shape
--- config
location /v1/ { kvserve; kvserve_tokenize_threshold 0; kvserve_cache_scope $http_authorization; }
--- more_headers
Authorization: Bearer tenant-b
--- request eval
qq{POST /v1/chat/completions
{"model": "kvserve-tiny", "max_tokens": 2, "messages": [$::Sys, {"role": "user", "content": [$::Part, {"type": "text", "text": " more"}]}]}}
--- error_code: 200
--- response_body_like eval
qr/"prompt_tokens_details":\{"cached_tokens":\d+\},"completion_tokens_details":\{"reasoning_tokens":0\},"cache_read_input_tokens":\d+,"cache_creation_input_tokens":\d+\}\}$/
--- no_error_log
[error]



=== TEST 5: a 5th breakpoint is a 400 naming it
--- request eval
qq{POST /v1/chat/completions
{"model": "kvserve-tiny", "messages": [$::Sys, {"role": "user", "content": [$::Part, $::Part]}, {"role": "assistant", "content": "ok", "cache_control": {"type": "ephemeral"}}, {"role": "user", "content": [$::Part]}]}}
--- error_code: 400
--- response_body_like eval
qr/^\{"error":\{"message":"A maximum of 4 blocks with cache_control may be provided\. Found 5\.","type":"invalid_request_error","param":"messages\[3\]\.content\[0\]\.cache_control","code":"too_many_cache_breakpoints"\}\}$/



=== TEST 6: an unknown ttl is a 400 naming it
--- request
POST /v1/chat/completions
{"model": "kvserve-tiny", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral", "ttl": "10m"}}]}]}
--- error_code: 400
--- response_body_like eval
qr/"message":"Invalid value: '10m'\. Supported values are: '5m' and '1h'\.","type":"invalid_request_error","param":"messages\[0\]\.content\[0\]\.cache_control\.ttl","code":"invalid_value"/



=== TEST 7: cache_control that is not an object is a 400 naming it
--- request
POST /v1/chat/completions
{"model": "kvserve-tiny", "messages": [{"role": "system", "content": "S", "cache_control": "ephemeral"}, {"role": "user", "content": "hi"}]}
--- error_code: 400
--- response_body_like eval
qr/"message":"Invalid type for 'messages\[0\]\.cache_control': expected an object, but got a string instead\.","type":"invalid_request_error","param":"messages\[0\]\.cache_control","code":"invalid_type"/



=== TEST 8: a scope far longer than the engine's limit (a long Authorization) is served
--- more_headers eval
"Authorization: Bearer " . ("k" x 2000)
--- request eval
qq{POST /v1/chat/completions
{"model": "kvserve-tiny", "max_tokens": 2, "messages": [$::Sys, {"role": "user", "content": "hi"}]}}
--- error_code: 200
--- response_body_like: "cache_read_input_tokens":\d+
--- no_error_log
[error]



=== TEST 9: kvserve_prefix_cache off: still served, the same usage shape
--- http_config eval
"kvserve_model kvserve-tiny $::Model;\n"
. "    kvserve_kv_cache 8m;\n    kvserve_threads 1;\n"
. "    kvserve_prefix_cache off;\n    $::LogFormat"
--- request eval
qq{POST /v1/chat/completions
{"model": "kvserve-tiny", "max_tokens": 2, "messages": [$::Sys, {"role": "user", "content": "hi"}]}}
--- error_code: 200
--- response_body_like: "prompt_tokens_details":\{"cached_tokens":0\},"completion_tokens_details":\{"reasoning_tokens":0\},"cache_read_input_tokens":0,"cache_creation_input_tokens":0\}
--- no_error_log
[error]



=== TEST 10: kvserve_status shows the engine's prefix cache
--- request
GET /status
--- error_code: 200
--- response_body_like eval
qr/"preemptions":\d+,"prefix_cache":\{"blocks":\d+,"pinned_blocks":\d+,"evicted_blocks":\d+,"query_tokens":\d+,"hit_tokens":\d+,"epoch":"[0-9a-f]{16}"\}\}\]\}$/



=== TEST 11: the metrics have the prefix cache counters, in tokens
--- request
GET /metrics
--- error_code: 200
--- response_body_like eval
qr/# TYPE kvserve:prefix_cache_queries_total counter\nkvserve:prefix_cache_queries_total\{model_name="kvserve-tiny"\} \d+\n.*# TYPE kvserve:prefix_cache_hits_total counter\nkvserve:prefix_cache_hits_total\{model_name="kvserve-tiny"\} \d+\n/s
