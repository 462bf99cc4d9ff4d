# Streaming (SSE) through the engine process with worker_processes 4:
# event framing (data: lines, the role first, a finish event per choice,
# the usage event with include_usage, [DONE]), n = 2, then (on the nginx
# the last block left running) concurrent streams served by one engine,
# and a client that goes away mid-stream, after which the engine's KV
# use is back to zero (kvserve_status).
use Test::Nginx::Socket 'no_plan';
use IO::Socket::INET ();
use JSON::PP ();
use Time::HiRes qw(sleep time);

no_shuffle();
master_on();
workers(4);

our $Model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";

add_block_preprocessor(sub {
    my $block = shift;
    if (!defined $block->http_config) {
        $block->set_value('http_config',
            "kvserve_model kvserve-tiny $Model;\n"
            . "    kvserve_kv_cache 8m;\n    kvserve_threads 1;\n"
            # the client-abort case needs 64 choices in one request
            . "    kvserve_max_sequences 64;");
    }
    if (!defined $block->config) {
        $block->set_value('config', "location /v1/ { kvserve; }\n"
                          . "location = /status { kvserve_status; }");
    }
});

our $Ev = qr/data: \{"id":"chatcmpl-[0-9A-Za-z]{24}","object":"chat\.completion\.chunk","created":\d+,"model":"kvserve-tiny","choices":/;

run_tests();

# --- on the nginx of the last block ------------------------------------------

my $port = $Test::Nginx::Util::ServerPortForClient;

sub open_request {
    my ($method, $uri, $body) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => 5)
        or die "connect: $!";
    $body //= '';
    print $s "$method $uri HTTP/1.1\r\nHost: localhost\r\n"
        . "Connection: close\r\nContent-Length: " . length($body)
        . "\r\n\r\n$body";
    return $s;
}

sub read_all {
    my $s = shift;
    local $/;
    my $r = <$s>;
    close $s;
    return $r // '';
}

sub status {
    my $r = read_all(open_request('GET', '/status'));
    my ($body) = $r =~ /\r\n\r\n(.*)\z/s;
    $body =~ s/^[0-9a-f]+\r\n|\r\n[0-9a-f]+\r\n|\r\n0\r\n\r\n$//g
        if $r =~ /Transfer-Encoding: chunked/i;
    return JSON::PP::decode_json($body);
}

my $st = status();
my $engine = $st->{engine}{pid};
ok($engine > 0, "kvserve_status names the engine process ($engine)");

# concurrent streams, on whichever workers take them
my $req = '{"model": "kvserve-tiny", "prompt": "x", "max_tokens": 40, '
    . '"stream": true}';
my @socks = map { open_request('POST', '/v1/completions', $req) } 1 .. 8;
my @resps = map { read_all($_) } @socks;
my $ok = grep { /^HTTP\/1\.1 200 / && /data: \[DONE\]\r?\n/ } @resps;
is($ok, 8, '8 concurrent streams all end with [DONE]');

my (%workers, %engines);
for (1 .. 16) {
    my $s = status();
    $workers{$s->{worker}{pid}} = 1;
    $engines{$s->{engine}{pid}} = 1;
}
is_deeply([keys %engines], [$engine],
          'every worker talks to the same engine process');
ok(scalar(keys %workers) >= 1, 'status answered by '
   . scalar(keys %workers) . ' worker(s)');
# Each worker connects when it starts (and retries while the engine is
# not listening yet), so a loaded host may answer the first status while
# a worker is still connecting: wait for the fourth, within a deadline.
my $clients = $st->{engine}{clients};
for (my $until = time + 15; $clients != 4 && time < $until; ) {
    sleep 0.1;
    $clients = status()->{engine}{clients};
}
is($clients, 4, 'the engine has one client per worker');

# a client that goes away mid-stream
my $before = status()->{models}[0];
my $s = open_request('POST', '/v1/completions',
                     '{"model": "kvserve-tiny", "prompt": "x", '
                     . '"max_tokens": 500, "n": 64, "stream": true, '
                     # its BOS, EOS and EOT banned: each choice would
                     # run all 500 (64 of them: long enough to outlast
                     # a loaded machine's delay in seeing the close)
                     . '"logit_bias": {"507": -100, "508": -100, '
                     . '"511": -100}}');
my $got = '';
while ($got !~ /data: \{/) {
    my $n = sysread($s, my $buf, 4096);
    last unless $n;
    $got .= $buf;
}
close $s;
like($got, qr/data: \{/, 'the stream had started when the client left');

my $after;
for (1 .. 50) {
    sleep 0.1;
    $after = status()->{models}[0];
    last if $after->{running} == 0 && $after->{kv_used} == 0;
}
is($after->{kv_used}, $before->{kv_used},
   "the engine's KV use is back to where it was ($before->{kv_used})");
is($after->{running}, 0, 'nothing runs any more');
is($after->{requests} - $before->{requests}, 1, 'one request');
is($after->{finished} - $before->{finished}, 64,
   'its 64 choices ended (cancelled)');
cmp_ok($after->{decode_tokens} - $before->{decode_tokens}, '<', 64 * 499,
       'it was cancelled before its 64 x 500 tokens');

__DATA__

=== TEST 1: chat stream: role first, content, finish, usage, [DONE]
--- request
POST /v1/chat/completions
{"model": "kvserve-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "seed": 7, "stream": true, "stream_options": {"include_usage": true}}
--- response_headers
Content-Type: text/event-stream
Cache-Control: no-cache
--- response_body_like eval
qr/^$::Ev\[\{"index":0,"delta":\{"role":"assistant","content":""\},"logprobs":null,"finish_reason":null\}\],"usage":null\}\n\n(?:$::Ev\[\{"index":0,"delta":\{"content":"(?:[^"\\]|\\.)*"\},"logprobs":null,"finish_reason":null\}\],"usage":null\}\n\n)*$::Ev\[\{"index":0,"delta":\{\},"logprobs":null,"finish_reason":"(?:length|stop)"\}\],"usage":null\}\n\n$::Ev\[\],"usage":\{"prompt_tokens":\d+,"completion_tokens":[1-4],"total_tokens":\d+,"prompt_tokens_details":\{"cached_tokens":0\}[^\n]*\}\n\ndata: \[DONE\]\n\n\z/
--- no_error_log
[error]



=== TEST 2: chat stream without include_usage: no usage event, no usage field
--- request
POST /v1/chat/completions
{"model": "kvserve-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": true}
--- response_body_like eval
qr/^(?:data: \{(?:(?!"usage")[^\n])*\}\n\n)+data: \[DONE\]\n\n\z/



=== TEST 3: n = 2 streams both choices, each with its role and finish
--- request
POST /v1/chat/completions
{"model": "kvserve-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "n": 2, "stream": true}
--- response_body_like eval
qr/(?=.*"index":0,"delta":\{"role":"assistant")(?=.*"index":1,"delta":\{"role":"assistant")(?=.*"index":0,"delta":\{\},"logprobs":null,"finish_reason":"(?:length|stop)")(?=.*"index":1,"delta":\{\},"logprobs":null,"finish_reason":"(?:length|stop)").*data: \[DONE\]\n\n\z/s



=== TEST 4: completions stream: text events, finish_reason, [DONE]
--- request
POST /v1/completions
{"model": "kvserve-tiny", "prompt": "abc", "max_tokens": 3, "stream": true}
--- response_headers
Content-Type: text/event-stream
--- response_body_like eval
qr/^(?:data: \{"id":"cmpl-[0-9A-Za-z]{24}","object":"text_completion","created":\d+,"model":"kvserve-tiny","choices":\[\{"text":"(?:[^"\\]|\\.)*","index":0,"logprobs":null,"finish_reason":(?:null|"length"|"stop")\}\]\}\n\n)+data: \[DONE\]\n\n\z/



=== TEST 5: errors before the first event are plain JSON, not a stream
--- request
POST /v1/completions
{"model": "kvserve-tiny", "prompt": "abc", "max_tokens": 900, "stream": true}
--- error_code: 400
--- response_headers
Content-Type: application/json
--- response_body_like eval
qr/"code":"context_length_exceeded"/



=== TEST 6: kvserve_status answers the engine's stats as JSON
--- request
GET /status
--- response_headers
Content-Type: application/json
--- response_body_like eval
qr/^\{"engine":\{"pid":\d+,"incarnation":"[0-9a-f]{16}","clients":\d+,"requests":0\},"worker":\{"pid":\d+\},"models":\[\{"name":"kvserve-tiny","available":true,"engine_pid":\d+,"kv_blocks":\d+,"kv_used":0,/
