# Per-request timings and metrics (docs/api.md, "Metrics and variables"),
# with worker_processes 2: the $kvserve_* variables in an access log
# (numbers with 3 decimals, ttft <= total, token counts equal to the
# response's usage), the Server-Timing header, and its trailer on a
# stream whose client sent `TE: trailers`; the kvserve_metrics text
# (every line HELP, TYPE or `name{labels} value`, histogram buckets
# cumulative and ending with +Inf equal to _count), counters that grow
# by what was served; and, on a reuseport listener that spreads clients
# over both workers, requests served by either worker counted once each
# in every worker's scrape.
use Test::Nginx::Socket 'no_plan';
use IO::Socket::INET ();
use JSON::PP ();
use Time::HiRes qw(sleep);

no_shuffle();
master_on();
workers(2);

our $Model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";

our $LogFormat = q{log_format timing 'T pid=$pid s=$status }
    . q{id=$http_x_test_id model=$kvserve_model }
    . q{pt=$kvserve_prompt_tokens ct=$kvserve_cached_tokens }
    . q{gt=$kvserve_completion_tokens body=$kvserve_body_ms }
    . q{parse=$kvserve_parse_ms tok=$kvserve_tokenize_ms }
    . q{queue=$kvserve_queue_ms prefill=$kvserve_prefill_ms }
    . q{ttft=$kvserve_ttft_ms decode=$kvserve_decode_ms }
    . q{itl=$kvserve_itl_ms total=$kvserve_total_ms }
    . q{fr=$kvserve_finish_reason';};

add_block_preprocessor(sub {
    my $block = shift;
    if (!defined $block->http_config) {
        $block->set_value('http_config',
            "kvserve_model kvserve-tiny $Model;\n"
            . "    kvserve_kv_cache 8m;\n    kvserve_threads 1;\n"
            . "    $LogFormat\n"
            . "    server {\n"
            . "        listen 127.0.0.1:\$TEST_NGINX_RAND_PORT_1 "
            . "reuseport;\n"
            . "        location /v1/ { kvserve; "
            . "access_log logs/timing.log timing; }\n"
            . "        location = /metrics { kvserve_metrics; }\n"
            . "    }");
    }
    if (!defined $block->config) {
        $block->set_value('config',
            "location /v1/ { kvserve; access_log logs/timing.log timing; }\n"
            . "location = /metrics { kvserve_metrics; }\n"
            . "location = /status { kvserve_status; }");
    }
});

our $Ms = qr/\d+\.\d{3}/;

run_tests();

# --- on the nginx of the last block ------------------------------------------

my $port = $Test::Nginx::Util::ServerPortForClient;
my ($port2) = do {
    open my $fh, '<', $Test::Nginx::Util::ConfFile or die "conf: $!";
    local $/;
    my $conf = <$fh>;
    $conf =~ /listen 127\.0\.0\.1:(\d+) reuseport;/;
};
ok($port2, "the reuseport listener is on port $port2");

sub request {
    my ($p, $method, $uri, $body, $headers) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $p,
                                  Proto => 'tcp', Timeout => 10)
        or die "connect: $!";
    $body //= '';
    $headers //= '';
    print $s "$method $uri HTTP/1.1\r\nHost: localhost\r\n$headers"
        . "Connection: close\r\nContent-Length: " . length($body)
        . "\r\n\r\n$body";
    return $s;
}

# (status line, headers, body, trailers) of a whole response
sub response {
    my $s = shift;
    local $/;
    my $r = <$s> // '';
    close $s;
    my ($head, $raw) = split /\r\n\r\n/, $r, 2;
    my ($body, $trailers) = ($raw // '', '');
    if ($head =~ /^Transfer-Encoding: chunked/mi) {
        $body = '';
        while ($raw =~ s/^([0-9a-fA-F]+)\r\n//) {
            my $n = hex $1;
            if ($n == 0) {
                ($trailers) = $raw =~ /^(.*?)\r\n\z/s;
                last;
            }
            $body .= substr $raw, 0, $n, '';
            $raw =~ s/^\r\n//;
        }
    }
    return ($head, $body, $trailers // '');
}

# { "name{labels}" => value }, checking the text format on the way
sub scrape {
    my $p = shift // $port;
    my ($head, $text) = response(request($p, 'GET', '/metrics'));
    my %m;
    my (%type, %seen_family);
    my $bad = 0;
    for my $line (split /\n/, $text) {
        if ($line =~ /^# HELP (kvserve:[a-z0-9_:]+) \S/) {
            next;
        }
        if ($line =~ /^# TYPE (kvserve:[a-z0-9_:]+) (counter|gauge|histogram)$/) {
            $bad++ if $type{$1};
            $type{$1} = $2;
            next;
        }
        if ($line =~ /^(kvserve:[a-z0-9_:]+)\{([^{}]*)\} ([0-9.e+-]+)$/) {
            my ($name, $labels, $v) = ($1, $2, $3);
            (my $family = $name) =~ s/_(?:bucket|count|sum)$//;
            $family = $name if !$type{$family} && $type{$name};
            $bad++ unless $type{$family};
            $bad++ unless $labels =~ /^model_name="kvserve-tiny"/;
            $m{"$name\{$labels\}"} = $v;
            next;
        }
        $bad++;
        diag("bad metrics line: $line");
    }
    return ($head, $text, \%m, \%type, $bad);
}

sub histograms_ok {
    my ($m, $type, $what) = @_;
    for my $h (grep { $type->{$_} eq 'histogram' } keys %$type) {
        my @b = map { [$_ =~ /le="([^"]+)"/, $m->{$_}] }
                grep { /^\Q$h\E_bucket\{/ } keys %$m;
        my ($inf) = grep { $_->[0] eq '+Inf' } @b;
        @b = sort { $a->[0] <=> $b->[0] } grep { $_->[0] ne '+Inf' } @b;
        my $mono = 1;
        for my $i (1 .. $#b) {
            $mono = 0 if $b[$i][1] < $b[$i - 1][1];
        }
        my $count = $m->{"${h}_count\{model_name=\"kvserve-tiny\"\}"};
        ok($mono && $inf && $inf->[1] >= ($b[-1][1] // 0)
           && $inf->[1] == $count
           && defined $m->{"${h}_sum\{model_name=\"kvserve-tiny\"\}"},
           "$what: $h buckets cumulative, +Inf = _count ($count)");
    }
}

sub counter {
    my ($m, $name, $extra) = @_;
    return $m->{"kvserve:$name\{model_name=\"kvserve-tiny\""
                . ($extra // '') . "\}"} // 0;
}

sub served {
    my $m = shift;
    my $n = 0;
    $n += counter($m, 'request_success_total',
                  ",finished_reason=\"$_\"") for qw(stop length abort error);
    return $n;
}

# the log lines, once those of every id in @_ are there: nginx may log a
# request after its client has the response (lingering close)
sub log_lines {
    my @want = @_;
    my @lines;
    for (1 .. 50) {
        open my $fh, '<', "$Test::Nginx::Util::LogDir/timing.log"
            or return ();
        @lines = grep { /^T / } <$fh>;
        close $fh;
        my $all = 1;
        for my $id (@want) {
            $all = 0 unless grep { / id=\Q$id\E / } @lines;
        }
        last if $all;
        sleep 0.05;
    }
    return @lines;
}

# make sure the engine is there, for its gauges
response(request($port, 'POST', '/v1/completions',
                 '{"model": "kvserve-tiny", "prompt": "x", "max_tokens": 1, '
                 . '"logit_bias": {"507": -100, "508": -100, "511": -100}}'));

my ($head0, $text0, $m0, $type0, $bad0) = scrape();
like($head0, qr/^Content-Type: text\/plain; version=0\.0\.4/mi,
     'metrics: Prometheus text content type');
is($bad0, 0, 'metrics: every line is HELP, TYPE or a sample of a TYPEd '
   . 'family, once each');
like($text0, qr/\n\z/, 'metrics: the text ends with a newline');
histograms_ok($m0, $type0, 'first scrape');
for my $g (qw(num_requests_running num_requests_waiting kv_cache_usage_perc
              gpu_cache_usage_perc)) {
    is($type0->{"kvserve:$g"}, 'gauge', "metrics: $g is a gauge");
}
ok(defined counter($m0, 'kv_cache_usage_perc')
   && counter($m0, 'kv_cache_usage_perc') >= 0
   && counter($m0, 'kv_cache_usage_perc') <= 1,
   'metrics: KV usage is a fraction');
for my $c (qw(prompt_tokens_total generation_tokens_total
              num_preemptions_total request_success_total)) {
    is($type0->{"kvserve:$c"}, 'counter', "metrics: $c is a counter");
}
for my $h (qw(time_to_first_token_seconds inter_token_latency_seconds
              time_per_output_token_seconds e2e_request_latency_seconds
              request_queue_time_seconds request_prompt_tokens
              request_generation_tokens)) {
    is($type0->{"kvserve:$h"}, 'histogram', "metrics: $h is a histogram");
}
for my $h (qw(request_params_n request_params_max_tokens
              request_max_num_generation_tokens iteration_tokens_total)) {
    is($type0->{"kvserve:$h"}, 'histogram', "metrics: $h is a histogram");
}
ok(exists $m0->{'kvserve:iteration_tokens_total_bucket'
                . '{model_name="kvserve-tiny",le="1.0"}'}
   && exists $m0->{'kvserve:iteration_tokens_total_bucket'
                   . '{model_name="kvserve-tiny",le="16384.0"}'}
   && exists $m0->{'kvserve:request_params_n_bucket'
                   . '{model_name="kvserve-tiny",le="20.0"}'},
   "metrics: iteration_tokens_total and request_params_n have vLLM's "
   . "bounds");
is($type0->{'kvserve:cache_config_info'}, 'gauge',
   'metrics: cache_config_info is a gauge');
{
    my ($k) = grep { /^kvserve:cache_config_info\{/ } keys %$m0;
    like($k // '', qr/^kvserve:cache_config_info\{model_name="kvserve-tiny",block_size="16",cache_dtype="f32",enable_prefix_caching="True",num_gpu_blocks="1024"\}$/,
         '... labelled with the KV cache configuration (8m of 512-byte '
         . 'tokens in 16-token blocks)');
    is($m0->{$k // ''}, '1.0', '... valued 1');
}
ok(exists $m0->{'kvserve:time_to_first_token_seconds_bucket'
                . '{model_name="kvserve-tiny",le="0.001"}'}
   && exists $m0->{'kvserve:time_to_first_token_seconds_bucket'
                   . '{model_name="kvserve-tiny",le="2560.0"}'},
   "metrics: TTFT has vLLM's bounds");

# requests, non-streaming and streaming, with their usage
my (%usage, @ids);
for my $i (1 .. 3) {
    my $id = "plain$i";
    my ($head, $body) = response(request($port, 'POST', '/v1/completions',
        '{"model": "kvserve-tiny", "prompt": "hello there", '
        . '"max_tokens": ' . (4 * $i) . ', "seed": ' . $i . ', '
        . '"logit_bias": {"507": -100, "508": -100, "511": -100}}',
        "X-Test-Id: $id\r\n"));
    my $u = JSON::PP::decode_json($body)->{usage};
    $usage{$id} = $u;
    push @ids, $id;
    like($head, qr/^Server-Timing: body;dur=$Ms, parse;dur=$Ms, tokenize;dur=$Ms, limit;dur=$Ms, queue;dur=$Ms, prefill;dur=$Ms, ttft;dur=$Ms, decode;dur=$Ms, (?:itl;dur=$Ms, )?total;dur=$Ms\r?$/m,
         "$id: Server-Timing names every hop");
}

{
    my $id = 'stream-te';
    my ($head, $body, $trailers) = response(request($port, 'POST',
        '/v1/chat/completions',
        '{"model": "kvserve-tiny", "messages": [{"role": "user", '
        . '"content": "hi"}], "max_tokens": 6, "stream": true, '
        . '"logit_bias": {"507": -100, "508": -100, "511": -100}, '
        . '"stream_options": {"include_usage": true}}',
        "X-Test-Id: $id\r\nTE: trailers\r\n"));
    like($head, qr/^Trailer: Server-Timing\r?$/m,
         'stream with TE: trailers announces the trailer');
    unlike($head, qr/^Server-Timing:/m, '... not as a header');
    like($trailers, qr/^Server-Timing: body;dur=$Ms, .*ttft;dur=$Ms, .*total;dur=$Ms\r?$/m,
         '... and sends it after the last chunk');
    like($body, qr/data: \[DONE\]\n\n\z/, '... after the whole stream');
    my ($u) = $body =~ /"usage":(\{"prompt_tokens"[^\n]*?\}\})\}\n/;
    $usage{$id} = JSON::PP::decode_json($u);
    push @ids, $id;
}

{
    my $id = 'stream-plain';
    my ($head, $body, $trailers) = response(request($port, 'POST',
        '/v1/completions',
        '{"model": "kvserve-tiny", "prompt": "abc", "max_tokens": 5, '
        . '"stream": true, "stream_options": {"include_usage": true}, '
        . '"logit_bias": {"507": -100, "508": -100, "511": -100}}',
        "X-Test-Id: $id\r\n"));
    unlike($head, qr/^(?:Trailer|Server-Timing):/m,
           'stream without TE: trailers: no Server-Timing at all');
    is($trailers, '', '... and no trailer');
    my ($u) = $body =~ /"usage":(\{"prompt_tokens"[^\n]*?\}\})\}\n/;
    $usage{$id} = JSON::PP::decode_json($u);
    push @ids, $id;
}

# a request refused before the engine: not counted, variables "-"
response(request($port, 'POST', '/v1/completions', '{"model": 1}',
                 "X-Test-Id: bad\r\n"));

# the access log
my %line;
for (log_lines(@ids, 'bad')) {
    $line{$1} = $_ if / id=(\S+)/;
}
for my $id (@ids) {
    my $l = $line{$id} // '';
    my %f = $l =~ /(\w+)=(\S+)/g;
    my $u = $usage{$id};
    ok($l, "$id: logged");
    is($f{s}, 200, "$id: status 200");
    is($f{model}, 'kvserve-tiny', "$id: \$kvserve_model");
    is($f{pt}, $u->{prompt_tokens}, "$id: \$kvserve_prompt_tokens = usage "
       . "($u->{prompt_tokens})");
    is($f{gt}, $u->{completion_tokens}, "$id: \$kvserve_completion_tokens "
       . "= usage ($u->{completion_tokens})");
    is($f{ct}, $u->{prompt_tokens_details}{cached_tokens},
       "$id: \$kvserve_cached_tokens = usage "
       . "($u->{prompt_tokens_details}{cached_tokens})");
    like($f{fr}, qr/^(?:stop|length)$/, "$id: \$kvserve_finish_reason");
    for my $k (qw(body parse tok queue prefill ttft total)) {
        like($f{$k}, qr/^$Ms$/, "$id: $k is milliseconds ($f{$k})");
    }
    if ($u->{completion_tokens} > 1) {
        like($f{decode}, qr/^$Ms$/, "$id: decode ($f{decode})");
        like($f{itl}, qr/^$Ms$/, "$id: itl ($f{itl})");
    }
    ok($f{ttft} <= $f{total}, "$id: ttft $f{ttft} <= total $f{total}");
    ok($f{body} + $f{parse} + $f{tok} <= $f{ttft},
       "$id: body + parse + tokenize <= ttft");
    ok($f{queue} + $f{prefill} <= $f{ttft}, "$id: queue + prefill <= ttft");
    ok($f{decode} eq '-' || $f{ttft} + $f{decode} <= $f{total} + 0.002,
       "$id: ttft + decode <= total");
}
{
    my %f = ($line{bad} // '') =~ /(\w+)=(\S+)/g;
    is($f{s}, 400, 'a malformed request: 400');
    is(join(' ', @f{qw(model pt gt queue ttft fr)}), '- - - - - -',
       '... its engine-side variables are "-"');
    like($f{parse}, qr/^$Ms$/, '... its parse time is there');
}

# the counters moved by exactly what was served
my ($head1, $text1, $m1, $type1, $bad1) = scrape();
is($bad1, 0, 'second scrape: format');
histograms_ok($m1, $type1, 'second scrape');
my ($pt, $gt) = (0, 0);
for (@ids) {
    $pt += $usage{$_}{prompt_tokens};
    $gt += $usage{$_}{completion_tokens};
}
is(served($m1) - served($m0), scalar(@ids),
   'request_success_total grew by the requests served');
is(counter($m1, 'prompt_tokens_total') - counter($m0, 'prompt_tokens_total'),
   $pt, "prompt_tokens_total grew by their prompt tokens ($pt)");
is(counter($m1, 'generation_tokens_total')
   - counter($m0, 'generation_tokens_total'), $gt,
   "generation_tokens_total grew by their completion tokens ($gt)");
for my $h (qw(time_to_first_token_seconds e2e_request_latency_seconds
              request_prompt_tokens request_generation_tokens)) {
    is(counter($m1, "${h}_count") - counter($m0, "${h}_count"),
       scalar(@ids), "$h: one observation per request");
}
# vLLM's request parameters: n (1 each), the max_tokens asked (4, 8 and
# 12, then 6 and 5), the most tokens a choice generated (one choice each)
is(counter($m1, 'request_params_n_count')
   - counter($m0, 'request_params_n_count'), scalar(@ids),
   'request_params_n: one observation per request');
is(counter($m1, 'request_params_n_sum')
   - counter($m0, 'request_params_n_sum'), scalar(@ids), '... of n = 1');
is(counter($m1, 'request_params_max_tokens_count')
   - counter($m0, 'request_params_max_tokens_count'), scalar(@ids),
   'request_params_max_tokens: one observation per request');
is(counter($m1, 'request_params_max_tokens_sum')
   - counter($m0, 'request_params_max_tokens_sum'), 4 + 8 + 12 + 6 + 5,
   '... of the max_tokens they asked');
is(counter($m1, 'request_max_num_generation_tokens_count')
   - counter($m0, 'request_max_num_generation_tokens_count'), scalar(@ids),
   'request_max_num_generation_tokens: one observation per request');
is(counter($m1, 'request_max_num_generation_tokens_sum')
   - counter($m0, 'request_max_num_generation_tokens_sum'), $gt,
   "... of their one choice's tokens ($gt)");
cmp_ok(counter($m1, 'iteration_tokens_total_count')
       - counter($m0, 'iteration_tokens_total_count'), '>=', $gt / 2,
       'iteration_tokens_total: the engine counted its steps');
cmp_ok(counter($m1, 'iteration_tokens_total_sum')
       - counter($m0, 'iteration_tokens_total_sum'), '>=', $gt - scalar(@ids),
       '... and their tokens');
cmp_ok(counter($m1, 'inter_token_latency_seconds_count')
       - counter($m0, 'inter_token_latency_seconds_count'), '>', 0,
       'inter_token_latency_seconds: observations');
is(counter($m1, 'inter_token_latency_seconds_count'),
   counter($m1, 'time_per_output_token_seconds_count'),
   'time_per_output_token_seconds: the same observations');

# both workers: clients spread by reuseport, each counted once
my $n = 16;
my @socks = map {
    request($port2, 'POST', '/v1/completions',
            '{"model": "kvserve-tiny", "prompt": "x", "max_tokens": 3, '
            . '"logit_bias": {"507": -100, "508": -100, "511": -100}}',
            "X-Test-Id: rp$_\r\n")
} 1 .. $n;
my $ok = grep { (response($_))[0] =~ /^HTTP\/1\.1 200 / } @socks;
is($ok, $n, "$n concurrent requests on the reuseport listener");

my %pids;
for (log_lines(map { "rp$_" } 1 .. $n)) {
    $pids{$1} = 1 if /pid=(\d+) s=200 id=rp\d+ /;
}
is(scalar(keys %pids), 2, 'they were served by both workers');

my %seen;
for my $i (1 .. 8) {
    my (undef, undef, $m) = scrape($i % 2 ? $port2 : $port);
    $seen{served($m) - served($m1)} = 1;
}
is_deeply([keys %seen], [$n],
          "every scrape, from either worker, counts all $n");

# a client that leaves mid-stream: counted once, as an abort, unless the
# engine ended all 400 tokens before the worker saw the client go (tiny
# model, busy machine): then as what its log line says
{
    my (undef, undef, $mb) = scrape();
    # 507, 508 and 511 are the tiny model's BOS, EOS and EOT tokens
    # (`kvserve info`), which end a text: banned, each choice runs to 400
    # tokens
    my $s = request($port, 'POST', '/v1/completions',
                    '{"model": "kvserve-tiny", "prompt": "x", "n": 8, '
                    . '"max_tokens": 400, "stream": true, "logit_bias": '
                    . '{"507": -100, "508": -100, "511": -100}}',
                    "X-Test-Id: leaver\r\n");
    my $got = '';
    while ($got !~ /data: \{/) {
        my $k = sysread($s, my $buf, 4096);
        last unless $k;
        $got .= $buf;
    }
    close $s;
    like($got, qr/data: \{/, 'a stream started, then its client left');

    my ($l) = grep { / id=leaver / } log_lines('leaver');
    my %f = ($l // '') =~ /(\w+)=(\S+)/g;
    my $ma;
    for (1 .. 50) {
        (undef, undef, $ma) = scrape();
        last if served($ma) > served($mb);
        sleep 0.1;
    }
    is(served($ma) - served($mb), 1, 'the request that lost its client '
       . 'was counted once');
    my $reason = $f{fr} // '';
    if ($reason ne 'abort') {
        diag("the engine ended the request first: $reason, $f{gt} tokens");
    }
    ok($reason eq 'abort' || ($reason eq 'length' && $f{gt} == 3200),
       "... as an abort ($reason)");
    is(counter($ma, 'request_success_total', ",finished_reason=\"$reason\"")
       - counter($mb, 'request_success_total',
                 ",finished_reason=\"$reason\""),
       1, '... under the finish reason its log line has');
    is(counter($ma, 'generation_tokens_total')
       - counter($mb, 'generation_tokens_total'), $f{gt},
       "... with the tokens its log line has ($f{gt})");
}

__DATA__

=== TEST 1: Server-Timing on a completion, with every hop
--- request
POST /v1/completions
{"model": "kvserve-tiny", "prompt": "abc", "max_tokens": 3, "logit_bias": {"507": -100, "508": -100, "511": -100}}
--- response_headers_like
Server-Timing: body;dur=\d+\.\d{3}, parse;dur=\d+\.\d{3}, tokenize;dur=\d+\.\d{3}, limit;dur=\d+\.\d{3}, queue;dur=\d+\.\d{3}, prefill;dur=\d+\.\d{3}, ttft;dur=\d+\.\d{3}, .*total;dur=\d+\.\d{3}
--- no_error_log
[error]



=== TEST 2: errors carry no Server-Timing
--- request
POST /v1/completions
{"model": "kvserve-tiny", "prompt": 5}
--- error_code: 400
--- response_headers
!Server-Timing



=== TEST 3: kvserve_metrics answers Prometheus text, with vLLM's names
--- request
GET /metrics
--- response_headers_like
Content-Type: text/plain; version=0\.0\.4; charset=utf-8
--- response_body_like eval
qr/^# HELP kvserve:.*\n# TYPE kvserve:prompt_tokens_total counter\nkvserve:prompt_tokens_total\{model_name="kvserve-tiny"\} \d+\n.*# TYPE kvserve:time_to_first_token_seconds histogram\n(?:kvserve:time_to_first_token_seconds_bucket\{model_name="kvserve-tiny",le="[0-9.]+"\} \d+\n){22}kvserve:time_to_first_token_seconds_bucket\{model_name="kvserve-tiny",le="\+Inf"\} \d+\nkvserve:time_to_first_token_seconds_count\{model_name="kvserve-tiny"\} \d+\nkvserve:time_to_first_token_seconds_sum\{model_name="kvserve-tiny"\} [0-9.]+\n/s



=== TEST 4: kvserve_metrics is GET only
--- request
POST /metrics
--- error_code: 405
