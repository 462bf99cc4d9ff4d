# Token-weighted rate limits (kvserve_limit_zone, kvserve_limit; issue 7,
# docs/limits.md) on one nginx of our own, worker_processes 2, with the
# tiny default model.
#
# Every request's cost is known by definition: the prompt is a list of
# token ids (4 tokens) and the reserved output is max_tokens; the model's
# end tokens (BOS 507, EOS 508, EOT 511) are banned where a request must
# generate all of its max_tokens, so that nothing is refunded.  Buckets
# that must not refill during the test drain at 1 token a minute, so the
# whole-token numbers in the headers are exact for the test's duration.
#
# Checked: rate and burst in tokens (which requests pass, the headers of
# each), the 429 body, retry-after, a cost over the burst, refund after
# an early stop and after a client abort (in the next response's
# remaining tokens and in the metrics), delay and nodelay and delay=N,
# dry run, several zones at once, kv_rate (KV held x seconds, charged
# the engine's count of blocks x time, within its round-up),
# kvserve_limit_status, the
# $kvserve_limit_status variable, headers of a stream, a reload keeping
# the zone, and `nginx -t` errors naming the bad value.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use JSON::PP ();
use Time::HiRes qw(time sleep);

my $t = Kvserve::Live->new('013-limit');
my $root = $t->root;
my $port = $t->port;
my $model = $t->model_dir . "/default.gguf";

END { $t->stop if $t }

$t->write_conf(<<"EOC",
    kvserve_model kvserve-tiny $model;
    kvserve_kv_cache 16m;
    kvserve_threads 1;
    kvserve_engine_wait 20s;

    kvserve_limit_zone \$arg_k zone=slow:1m rate=1t/m;
    kvserve_limit_zone \$arg_k zone=big:1m rate=1t/m;
    kvserve_limit_zone \$arg_k zone=fast:1m rate=100t/s;
    kvserve_limit_zone \$arg_k zone=fast2:1m rate=100t/s;
    kvserve_limit_zone \$arg_k zone=dry:1m rate=1t/m;
    kvserve_limit_zone \$arg_k zone=m1:1m rate=1t/m;
    kvserve_limit_zone \$arg_k zone=m2:1m rate=1t/m;
    kvserve_limit_zone \$arg_k zone=tiny:32k rate=1t/m;
    kvserve_limit_zone \$arg_k zone=kv:1m rate=1000t/s kv_rate=2k/s;
    kvserve_limit_zone \$arg_k zone=kvb:1m rate=1000t/s kv_rate=256k/s;
EOC
    access_log => "log_format lim '\$arg_k \$status \$kvserve_limit_status';\n"
                  . "    log_format kvl '\$arg_k \$kvserve_kv_block_ms';\n"
                  . "    access_log logs/access.log lim;",
    server => <<"EOS");
        location /a/v1/ { kvserve; kvserve_limit zone=slow burst=100 nodelay; }
        location /big/v1/ { kvserve; kvserve_limit zone=big burst=1000 nodelay; }
        location /delay/v1/ { kvserve; kvserve_limit zone=fast burst=1000; }
        location /delayn/v1/ {
            kvserve;
            kvserve_limit zone=fast2 burst=1000 delay=150;
        }
        location /dry/v1/ {
            kvserve;
            kvserve_limit zone=dry burst=30 nodelay;
            kvserve_limit_dry_run on;
        }
        location /drydelay/v1/ {
            kvserve;
            kvserve_limit zone=fast burst=1000;
            kvserve_limit_dry_run on;
        }
        location /multi/v1/ {
            kvserve;
            kvserve_limit zone=m1 burst=100 nodelay;
            kvserve_limit zone=m2 burst=50 nodelay;
        }
        location /status403/v1/ {
            kvserve;
            kvserve_limit zone=slow burst=100 nodelay;
            kvserve_limit_status 403;
        }
        location /tiny/v1/ { kvserve; kvserve_limit zone=tiny burst=100 nodelay; }
        location /kv/v1/ { kvserve; kvserve_limit zone=kv burst=10000 nodelay; }
        location /kvb/v1/ {
            kvserve;
            kvserve_limit zone=kvb burst=10000 nodelay;
            access_log logs/kv.log kvl;
        }
        location /free/v1/ { kvserve; }
        location = /metrics { kvserve_metrics; }
        location = /status { kvserve_status; }
EOS

my $ban = '"logit_bias": {"507": -100, "508": -100, "511": -100}';

# A completion of the 4-token prompt [1,2,3,4] reserving $max tokens of
# output; $extra is more JSON fields.
sub body {
    my ($max, $extra) = @_;
    return '{"model": "kvserve-tiny", "prompt": [1, 2, 3, 4], '
        . qq("max_tokens": $max) . ($extra ? ", $extra" : '') . '}';
}

# POST to $path: (status, {lowercased header => value}, body, seconds).
sub post {
    my ($path, $body) = @_;
    my $t0 = time;
    my $r = $t->read_all($t->request('POST', $path, $body), 30);
    my $dt = time - $t0;
    my ($head, $b) = $t->split_response($r);
    my ($status) = $head =~ m{^HTTP/1\.1 (\d+)};
    my %h;
    for (split /\r\n/, $head) {
        $h{lc $1} = $2 if /^([^:]+):\s*(.*)$/;
    }
    return ($status // 0, \%h, $b, $dt);
}

sub metric {
    my ($name, $zone) = @_;
    my $r = $t->read_all($t->request('GET', '/metrics'), 10);
    my (undef, $b) = $t->split_response($r);
    return $b =~ /^\Q$name\E\{zone="\Q$zone\E"\} (\d+)$/m ? $1 : undef;
}

# The $kvserve_limit_status the access log has for key $k, in order,
# once it has $n lines for it (a line is written as the request is
# freed, a moment after the client has its response).
sub log_statuses {
    my ($k, $n) = @_;
    my @st;
    $t->wait_for(sub {
        open my $fh, '<', "$root/logs/access.log" or return 0;
        @st = map { /^\Q$k\E \d+ (\S+)$/ ? $1 : () } <$fh>;
        return @st >= $n;
    }, 5);
    return @st;
}

ok($t->start, 'nginx started');
ok($t->engine_pid, 'the engine is up');

# ---- rate and burst in tokens; the headers --------------------------------

# burst 100, nodelay: five requests of 4 + 16 tokens, then no room
for my $i (1 .. 5) {
    my ($st, $h, $b) = post('/a/v1/completions?k=a1', body(16, $ban));
    is($st, 200, "a1 request $i of 20 tokens passes");
    is($h->{'x-ratelimit-limit-tokens'}, 100, "a1 $i: limit 100");
    is($h->{'x-ratelimit-remaining-tokens'}, 100 - 20 * $i,
       "a1 $i: remaining " . (100 - 20 * $i));
    # 20 * i tokens at 1 a minute
    like($h->{'x-ratelimit-reset-tokens'},
         $i == 1 ? qr/^(20m0s|19m5\d(\.\d+)?s)$/
                 : qr/^(\dh)?\d+m\d+(\.\d+)?s$/,
         "a1 $i: reset-tokens as a Go duration ($h->{'x-ratelimit-reset-tokens'})");
    ok(!exists $h->{'retry-after'}, "a1 $i: no retry-after on a pass");
    like($b, qr/"completion_tokens":16,/, "a1 $i: 16 tokens generated");
}

{
    my ($st, $h, $b) = post('/a/v1/completions?k=a1', body(16, $ban));
    is($st, 429, 'a1 request 6: 429');
    is($h->{'x-ratelimit-limit-tokens'}, 100, 'a1 429: limit 100');
    is($h->{'x-ratelimit-remaining-tokens'}, 0, 'a1 429: remaining 0');
    # room for 20 tokens at 1 a minute: 20 minutes, less the time since
    # the first charge (under a second)
    like($h->{'retry-after'}, qr/^(1200|1199)$/,
         "a1 429: retry-after $h->{'retry-after'} s");
    cmp_ok($h->{'retry-after-ms'}, '>', 1199000, 'a1 429: retry-after-ms');
    cmp_ok($h->{'retry-after-ms'}, '<=', 1200000, 'a1 429: retry-after-ms');
    like($h->{'content-type'}, qr{^application/json}, 'a1 429: JSON');
    my $j = JSON::PP::decode_json($b);
    is($j->{error}{type}, 'tokens', '429 body: type tokens');
    is($j->{error}{code}, 'rate_limit_exceeded',
       '429 body: code rate_limit_exceeded');
    ok(exists $j->{error}{param} && !defined $j->{error}{param},
       '429 body: param null');
    like($j->{error}{message},
         qr/^Rate limit reached for kvserve-tiny on tokens per min \(TPM\) in zone "slow": Limit 100, Used 100, Requested 20\. Please try again in (20m0s|19m5\d(\.\d+)?s)\.$/,
         '429 body: the message names limit, used and requested');
}

# the bucket is per key: another key has its whole burst
{
    my ($st, $h) = post('/a/v1/completions?k=a1b', body(16, $ban));
    is($st, 200, 'another key passes');
    is($h->{'x-ratelimit-remaining-tokens'}, 80, 'another key: remaining 80');
}

# an empty key is charged to the zone's shared keyless bucket
# (empty=shared, the default since issue 18; t/023-limit-keys.t tests
# the keyless rules)
{
    my ($st, $h) = post('/a/v1/completions', body(16, $ban));
    is($st, 200, 'no key: passes');
    is($h->{'x-ratelimit-remaining-tokens'}, 80,
       'no key: charged to the shared keyless bucket');
}

# a cost over the burst can never pass, and says so
{
    my ($st, $h, $b) = post('/a/v1/completions?k=a2', body(200));
    is($st, 429, '204 tokens against a burst of 100: 429');
    ok(!exists $h->{'retry-after'}, 'never: no retry-after');
    is($h->{'x-should-retry'}, 'false', 'never: x-should-retry false');
    is($h->{'x-ratelimit-remaining-tokens'}, 100,
       'never: nothing charged');
    my $j = JSON::PP::decode_json($b);
    is($j->{error}{code}, 'rate_limit_exceeded', 'never: the code');
    like($j->{error}{message},
         qr/^Request too large for kvserve-tiny on tokens per min \(TPM\) in zone "slow": Limit 100, Requested 204\. The input or output tokens must be reduced/,
         'never: the message says it can never pass');
}

# the charge: every prompt's tokens, max_tokens for each of n choices
{
    my ($st, $h) = post('/a/v1/completions?k=c1', body(16, "$ban, \"n\": 2"));
    is($st, 200, 'n=2: passes');
    is($h->{'x-ratelimit-remaining-tokens'}, 100 - (4 + 2 * 16),
       'n=2: 4 + 2 x 16 charged');
    ($st, $h) = post('/a/v1/completions?k=c2',
                     '{"model": "kvserve-tiny", "prompt": [[1, 2], [3, 4, 5]], '
                     . qq("max_tokens": 10, $ban}));
    is($st, 200, 'two prompts: passes');
    is($h->{'x-ratelimit-remaining-tokens'}, 100 - (2 + 3 + 2 * 10),
       'two prompts: 2 + 3 + 2 x 10 charged');
    # chat without max_tokens reserves the rest of the context: prompt +
    # (512 - prompt) = the tiny model's 512, over the burst
    my $b;
    ($st, $h, $b) = post('/a/v1/chat/completions?k=c3',
                         '{"model": "kvserve-tiny", "messages": '
                         . '[{"role": "user", "content": "hi"}]}');
    is($st, 429, 'chat without max_tokens: 429');
    like($b, qr/Limit 100, Requested 512\./,
         'chat without max_tokens: the whole context (512) is reserved');
}

# kvserve_limit_status
{
    my ($st) = post('/status403/v1/completions?k=a1', body(16, $ban));
    is($st, 403, 'kvserve_limit_status 403');
}

# sorted: a request is logged when it ends, which may be after the
# client has its whole reply and sent the next one (the engine's last
# frame settles kv_rate), so two neighbours can swap in the log
is_deeply([sort { $a cmp $b } log_statuses('a1', 7)],
          [('PASSED') x 5, 'REJECTED', 'REJECTED'],
          '$kvserve_limit_status: PASSED x5, REJECTED');

# ---- headers of a stream -------------------------------------------------------

{
    my ($st, $h, $b) = post('/a/v1/completions?k=s1',
                            body(16, "$ban, \"stream\": true"));
    is($st, 200, 'stream passes');
    is($h->{'content-type'}, 'text/event-stream', 'it is a stream');
    is($h->{'x-ratelimit-remaining-tokens'}, 80,
       'the stream carries remaining tokens');
    is($h->{'x-ratelimit-limit-tokens'}, 100,
       'the stream carries the limit');
    like($b, qr/data: \[DONE\]/, 'the stream ended');
}

# ---- refund after an early stop ------------------------------------------------

{
    # 4 + 50 charged; EOS forced first: nothing generated, 50 back
    my ($st, $h, $b) = post('/a/v1/completions?k=r1',
                            body(50, '"logit_bias": {"508": 100}'));
    is($st, 200, 'early stop: passes');
    is($h->{'x-ratelimit-remaining-tokens'}, 46,
       'early stop: 54 charged up front');
    my ($gen) = $b =~ /"completion_tokens":(\d+)/;
    like($b, qr/"finish_reason":"stop"/, 'it stopped early');
    cmp_ok($gen, '<', 50, "it generated $gen of 50");

    ($st, $h) = post('/a/v1/completions?k=r1', body(16, $ban));
    is($st, 200, 'the next request passes');
    is($h->{'x-ratelimit-remaining-tokens'}, 100 - (4 + $gen) - 20,
       'the unused output came back: remaining ' . (100 - (4 + $gen) - 20));

    # a stop string ends it too
    ($st, $h, $b) = post('/big/v1/completions?k=r2',
                         body(400, '"stop": ["e", "a", "o", " "]'));
    ($gen) = $b =~ /"completion_tokens":(\d+)/;
    is($st, 200, 'stop strings: passes');
    is($h->{'x-ratelimit-remaining-tokens'}, 1000 - 404,
       'stop strings: 404 charged');
    cmp_ok($gen, '<', 400, "stop strings: $gen generated of 400");
    ($st, $h) = post('/big/v1/completions?k=r2', body(16, $ban));
    is($h->{'x-ratelimit-remaining-tokens'}, 1000 - (4 + $gen) - 20,
       'stop strings: the rest came back');
}

# ---- refund after a client abort ----------------------------------------------

{
    # 4 + 4 x 240 charged; the client leaves after the first event.  The
    # tiny model is fast enough to finish a stream before the close is
    # noticed now and then: up to three tries, each checked exactly.
    my $mid = 0;
    for my $try (1 .. 3) {
        my $k = "ab$try";
        my $refunded0 = metric('kvserve:limit_tokens_refunded_total', 'big')
            // -1;
        my $s = $t->request('POST', "/big/v1/completions?k=$k",
                            body(240, "$ban, \"n\": 4, \"stream\": true"));
        my $got = $t->read_until($s, qr/data: \{/, 20);
        close $s;
        like($got, qr/x-ratelimit-remaining-tokens: 36\r\n/i,
             "abort $try: 964 charged up front");
        like($got, qr/data: \{/, "abort $try: the stream had started");

        # the cleanup counts a refund (0 when it all ran)
        my $back;
        $t->wait_for(sub {
            $back = metric('kvserve:limit_tokens_refunded_total', 'big')
                    - $refunded0;
            return $back > 0;
        }, 2);
        cmp_ok($back, '<', 960, "abort $try: $back tokens back, less than "
                                . 'the whole reservation');

        my ($st, $h) = post("/big/v1/completions?k=$k", body(16, $ban));
        is($st, 200, "abort $try: the next request passes");
        is($h->{'x-ratelimit-remaining-tokens'}, 1000 - (964 - $back) - 20,
           "abort $try: the unused output is back in the bucket");
        if ($back > 0) {
            $mid = 1;
            last;
        }
    }
    ok($mid, 'abort: a stream left mid-way had its unused output back');
}

# ---- delay, nodelay and delay=N ------------------------------------------------

{
    # 100 t/s, burst 1000, delay 0: each request waits until what came
    # before it has drained
    my ($st, $h, undef, $dt) = post('/delay/v1/completions?k=d1',
                                    body(96, $ban));
    is($st, 200, 'delay: the first passes');
    my ($st2, $h2, undef, $dt2) = post('/delay/v1/completions?k=d1',
                                       body(96, $ban));
    is($st2, 200, 'delay: the second passes');
    # 100 tokens at 100 t/s: 1 s after the first was charged
    cmp_ok($dt2, '>', 0.6, sprintf('delay: the second waited (%.2f s)',
                                   $dt2));
    cmp_ok($dt2, '<', 3, 'delay: about a second');
    is_deeply([log_statuses('d1', 2)], ['PASSED', 'DELAYED'],
              'delay: PASSED, DELAYED');
    is($t->log_count(qr/delaying request, \d+ ms, requested: 100 by zone "fast"/),
       1, 'delay: logged');

    # delay=150: two of 100 pass at once (100 charged before the second),
    # the third waits for 200 - 150 = 50 tokens, half a second
    my @dt;
    for (1 .. 3) {
        my ($s3, undef, undef, $d) = post('/delayn/v1/completions?k=d2',
                                          body(96, $ban));
        push @dt, $d;
    }
    cmp_ok($dt[1], '<', 0.4, sprintf('delay=150: the second at once '
                                     . '(%.2f s)', $dt[1]));
    cmp_ok($dt[2], '>', 0.25, sprintf('delay=150: the third waited '
                                      . '(%.2f s)', $dt[2]));
    is_deeply([log_statuses('d2', 3)], ['PASSED', 'PASSED', 'DELAYED'],
              'delay=150: PASSED, PASSED, DELAYED');

    # a client that leaves while delayed: its whole output comes back
    my $r0 = metric('kvserve:limit_tokens_refunded_total', 'fast');
    post('/delay/v1/completions?k=d3', body(496, $ban));
    my $s = $t->request('POST', '/delay/v1/completions?k=d3', body(96, $ban));
    sleep 0.3;
    close $s;
    ok($t->wait_for(sub {
           metric('kvserve:limit_tokens_refunded_total', 'fast') >= $r0 + 96
       }, 10), 'delay: a client gone while delayed gets its output back');
}

# ---- dry run -----------------------------------------------------------------

{
    my ($st, $h) = post('/dry/v1/completions?k=y1', body(16, $ban));
    is($st, 200, 'dry run: the first passes');
    ($st, $h) = post('/dry/v1/completions?k=y1', body(16, $ban));
    is($st, 200, 'dry run: the second, over the burst, passes too');
    is($h->{'x-ratelimit-remaining-tokens'}, 10,
       'dry run: it was not charged');
    is_deeply([log_statuses('y1', 2)], ['PASSED', 'REJECTED_DRY_RUN'],
              'dry run: PASSED, REJECTED_DRY_RUN');
    is($t->log_count(qr/limiting tokens, dry run, no room, used: 20, requested: 20, burst: 30 by zone "dry"/),
       1, 'dry run: logged');

    post('/drydelay/v1/completions?k=y2', body(96, $ban));
    my (undef, undef, undef, $dt) = post('/drydelay/v1/completions?k=y2',
                                         body(96, $ban));
    cmp_ok($dt, '<', 0.5, sprintf('dry run: no delay (%.2f s)', $dt));
    is_deeply([log_statuses('y2', 2)], ['PASSED', 'DELAYED_DRY_RUN'],
              'dry run: PASSED, DELAYED_DRY_RUN');
}

# ---- several zones at once ---------------------------------------------------

{
    # m1 burst 100, m2 burst 50: the headers tell of the tighter one
    my ($st, $h) = post('/multi/v1/completions?k=m', body(16, $ban));
    is($st, 200, 'two zones: passes');
    is($h->{'x-ratelimit-limit-tokens'}, 50, 'two zones: the tighter limit');
    is($h->{'x-ratelimit-remaining-tokens'}, 30, 'two zones: remaining 30');
    ($st, $h) = post('/multi/v1/completions?k=m', body(16, $ban));
    is($h->{'x-ratelimit-remaining-tokens'}, 10, 'two zones: remaining 10');
    my ($st3, $h3, $b3) = post('/multi/v1/completions?k=m', body(16, $ban));
    is($st3, 429, 'two zones: m2 refuses the third');
    like($b3, qr/in zone \\"m2\\": Limit 50, Used 40, Requested 20/,
         'two zones: the refusing zone is named');

    # m1 took the third request's charge, then gave it back
    is(metric('kvserve:limit_passed_total', 'm1'), 3, 'm1 passed 3');
    is(metric('kvserve:limit_tokens_charged_total', 'm1'), 60,
       'm1 charged 60');
    is(metric('kvserve:limit_tokens_refunded_total', 'm1'), 20,
       'm1 refunded the 20 that m2 refused');
    is(metric('kvserve:limit_passed_total', 'm2'), 2, 'm2 passed 2');
    is(metric('kvserve:limit_rejected_total', 'm2'), 1, 'm2 rejected 1');
    is(metric('kvserve:limit_tokens_charged_total', 'm2'), 40,
       'm2 charged 40');

    # so m1 still has 60 left: a location with only m1 would show it
}

# ---- metrics of the first zone -------------------------------------------------

is(metric('kvserve:limit_rejected_total', 'slow'), 4,
   'slow: 4 rejected (a1, a2 never, a1 via status403, c3 never)');
is(metric('kvserve:limit_keys', 'slow'), 9,
   'slow: 9 keys (a1 a1b a2 s1 r1 c1 c2 c3, and the keyless bucket)');

# ---- a full zone evicts the least recently used keys -------------------------

{
    # 32k holds far fewer than 400 keys: every new key still gets in
    my $ok = 0;
    for my $i (1 .. 400) {
        my ($st) = post("/tiny/v1/completions?k=e$i", body(1, $ban));
        $ok++ if $st == 200;
    }
    is($ok, 400, 'a full zone: 400 new keys all admitted');
    my $keys = metric('kvserve:limit_keys', 'tiny');
    cmp_ok($keys, '<', 400, "a full zone: it holds $keys keys");
    cmp_ok(metric('kvserve:limit_evicted_keys_total', 'tiny'), '>=',
           400 - $keys, 'a full zone: the others were evicted');
    # the least recently used went first: key 1's bucket is new again,
    # key 400's is not
    my ($st, $h) = post('/tiny/v1/completions?k=e1', body(1, $ban));
    is($h->{'x-ratelimit-remaining-tokens'}, 95,
       'a full zone: the oldest key was evicted (a new bucket)');
    ($st, $h) = post('/tiny/v1/completions?k=e400', body(1, $ban));
    is($h->{'x-ratelimit-remaining-tokens'}, 90,
       'a full zone: the newest key kept its bucket');
}

# ---- kv_rate: KV cache held x seconds ----------------------------------------
# The tiny model holds 512 bytes of KV per token in the CPU backend's f32
# cache (/v1/models' kv_bytes_per_token): a request reserves (prompt +
# max_tokens) x 0.5 KiB for one second at admission.  Zone kv: 2 KiB x s
# per second, and the token bucket's window (burst 10000 / 1000 t/s =
# 10 s) of it: a bucket of 20 KiB x s.

{
    my ($st, $h, $b) = post('/kv/v1/completions?k=kv1', body(36, $ban));
    is($st, 200, 'kv_rate: a reservation of exactly the bucket passes');
    is(metric('kvserve:limit_kv_charged_kib_seconds_total', 'kv'), 20,
       'kv_rate: 40 tokens x 0.5 KiB x 1 s reserved');
    my $back;
    $t->wait_for(sub {
        $back = metric('kvserve:limit_kv_refunded_kib_seconds_total', 'kv');
        return $back;
    }, 5);
    # it held 40 tokens' KV for well under a second: it is charged what it
    # held (rounded up to 1 KiB x s), the rest comes back
    cmp_ok($back, '>=', 14, "kv_rate: the unused reservation came back ($back)");
    cmp_ok($back, '<=', 19, 'kv_rate: what it held stays charged');

    # what it held is still in the bucket: a full reservation waits
    ($st, $h, $b) = post('/kv/v1/completions?k=kv1', body(36, $ban));
    is($st, 429, 'kv_rate: the next full reservation is refused');
    like($b, qr/Rate limit reached for kvserve-tiny on KV cache held \(kv_rate, KiB x s\) in zone \\?"kv\\?": Limit 20, Used \d+, Requested 20/,
         'kv_rate: the 429 names the KV bucket') or diag $b;
    like($h->{'retry-after'} // '', qr/^[1-9]$/,
         'kv_rate: retry-after until it has drained');
    ok(!exists $h->{'x-ratelimit-limit-tokens'},
       'kv_rate: no token headers on a KV refusal');
    is(metric('kvserve:limit_tokens_charged_total', 'kv'), 40,
       'kv_rate: the refused request\'s tokens were not kept');

    # and once it has drained, it passes
    sleep(($h->{'retry-after'} // 1) + 0.2);
    ($st) = post('/kv/v1/completions?k=kv1', body(36, $ban));
    is($st, 200, 'kv_rate: passes once the bucket drained');

    # a reservation over the bucket can never pass
    ($st, $h, $b) = post('/kv/v1/completions?k=kv2', body(40, $ban));
    is($st, 429, 'kv_rate: a reservation over the bucket is refused');
    like($b, qr/Request too large for kvserve-tiny on KV cache held \(kv_rate, KiB x s\).*Limit 20, Requested 22/,
         'kv_rate: ... saying it is too large') or diag $b;
    is($h->{'x-should-retry'}, 'false', 'kv_rate: ... and not to retry');
    ok(!exists $h->{'retry-after'}, 'kv_rate: ... with no retry-after');
}

# ---- kv_rate charges the engine's count ---------------------------------------
# Zone kvb: 256 KiB x s per second, a 2560 KiB x s bucket.  The engine
# counts each choice's KV blocks x the time it held them (OUT's
# kv_block_us; $kvserve_kv_block_ms, block x ms, all choices); the tiny
# model's block is 16 tokens x 512 bytes = 8 KiB, so a request must end
# up charged block_ms x 8 / 1000 KiB x s, rounded up: within [0, 1) of
# it (the tolerance is the round-up).  A request's net charge is what
# the zone charged less what it refunded while it alone ran.

# The KV count the kv log has for key $k, once it is written.
sub kv_logged {
    my ($k) = @_;
    my $v;
    $t->wait_for(sub {
        open my $fh, '<', "$root/logs/kv.log" or return 0;
        for (<$fh>) {
            $v = $1 if /^\Q$k\E (\S+)$/;
        }
        return defined $v;
    }, 5);
    return $v;
}

sub kv_net {
    return (metric('kvserve:limit_kv_charged_kib_seconds_total', 'kvb')
            // 0)
        - (metric('kvserve:limit_kv_refunded_kib_seconds_total', 'kvb')
           // 0);
}

{
    for my $i (1 .. 3) {
        my $k = "kvc$i";
        my $net0 = kv_net();
        # 4 choices of 4 + 300 tokens: 19 blocks each at the end; 602
        # KiB x s reserved
        my ($st, $h, $b, $dt) = post("/kvb/v1/completions?k=$k",
                                     body(300, "$ban, \"n\": 4"));
        is($st, 200, "kv count $i: 200");
        my $ms = kv_logged($k);
        like($ms // '', qr/^\d+\.\d{3}$/, "kv count $i: logged ($ms)");
        $ms //= 0;
        # held at most 76 blocks for as long as the client waited
        cmp_ok($ms, '>', 0, "kv count $i: some KV held");
        cmp_ok($ms, '<=', 76 * $dt * 1000,
               "kv count $i: at most 76 blocks for ${dt}s");
        my $want = $ms * 8 / 1000;
        # settled before the response's end went out
        my $net = kv_net() - $net0;
        cmp_ok($net, '>=', $want - 1e-6,
               "kv count $i: charged $net KiB x s, the engine's $want");
        cmp_ok($net, '<', $want + 1,
               "kv count $i: ... within 1 KiB x s (the round-up)");
    }

    # a client that leaves mid-stream: the count so far, and its tokens
    # from then to the settle, are charged; the reservation is settled
    # (the next full one passes once the bucket allows)
    my $net0 = kv_net();
    my $s = $t->request('POST', '/kvb/v1/completions?k=kvab',
                        body(240, "$ban, \"n\": 4, \"stream\": true"));
    my $got = $t->read_until($s, qr/data: \{/, 20);
    close $s;
    like($got, qr/data: \{/, 'kv abort: the stream had started');
    my $ms = kv_logged('kvab') // '';
    like($ms, qr/^\d+\.\d{3}$/, "kv abort: the engine's count came ($ms)");
    my $net;
    $t->wait_for(sub { $net = kv_net() - $net0; $net < 482 }, 5);
    cmp_ok($net, '>=', ($ms || 0) * 8 / 1000 - 1e-6,
           "kv abort: charged $net KiB x s, at least the engine's count");
    cmp_ok($net, '<', 482, 'kv abort: less than the reservation');
}

# ---- the zone survives a reload ---------------------------------------------

{
    my ($st, $h) = post('/a/v1/completions?k=z', body(16, $ban));
    is($h->{'x-ratelimit-remaining-tokens'}, 80, 'before the reload: 80');
    my $charged = metric('kvserve:limit_tokens_charged_total', 'slow');

    my $n0 = $t->log_count(qr/reconfiguring/);
    kill 'HUP', $t->master_pid;
    ok($t->wait_for(sub { $t->log_count(qr/reconfiguring/) > $n0 }, 10),
       'reloaded');
    # the old workers go once they have nothing left
    ok($t->wait_for(sub {
           my ($st2, $h2) = post('/free/v1/completions', body(1));
           return $st2 == 200;
       }, 10), 'the new workers answer');
    sleep 0.5;

    ($st, $h) = post('/a/v1/completions?k=z', body(16, $ban));
    is($st, 200, 'after the reload: passes');
    is($h->{'x-ratelimit-remaining-tokens'}, 60,
       'after the reload: the bucket carried on (60)');
    is(metric('kvserve:limit_tokens_charged_total', 'slow'), $charged + 20,
       'after the reload: the counters carried on');
}

# ---- nginx -t ----------------------------------------------------------------

# nginx -t with a zone "one" defined
sub nginx_t {
    my ($http) = @_;
    return $t->nginx_t("    kvserve_limit_zone \$arg_k zone=one:1m rate=10t/s;\n"
                       . $http);
}

for my $c (
    ['kvserve_limit_zone $arg_k zone=x:1m rate=10r/s;',
     qr/invalid rate "rate=10r\/s"/],
    ['kvserve_limit_zone $arg_k zone=x:1m rate=0t/m;',
     qr/invalid rate "rate=0t\/m"/],
    ['kvserve_limit_zone $arg_k zone=x:1k rate=10t/s;',
     qr/zone "zone=x:1k" is too small/],
    ['kvserve_limit_zone $arg_k zone=x rate=10t/s;',
     qr/invalid zone size "zone=x"/],
    ['kvserve_limit_zone $arg_k zone=x:1m rate=10t/s color=red;',
     qr/invalid parameter "color=red"/],
    ['kvserve_limit_zone $arg_k zone=x:1m rate=10t/s kv_rate=1m/m;',
     qr/invalid kv_rate "kv_rate=1m\/m"/],
    ['kvserve_limit_zone $arg_k zone=x:1m rate=10t/s kv_rate=lots/s;',
     qr/invalid kv_rate "kv_rate=lots\/s"/],
    ['kvserve_limit_zone $arg_k zone=x:1m rate=10t/s kv_rate=512/s;',
     qr/invalid kv_rate "kv_rate=512\/s": bytes of KV cache per second, at least 1k/],
    ['kvserve_limit_zone $host zone=one:1m rate=10t/s;',
     qr/kvserve_limit_zone "one" is already bound to key "\$arg_k"/],
    ['kvserve_limit zone=one burst=abc;',
     qr/invalid burst value "burst=abc"/],
    ['kvserve_limit zone=one burst=0;',
     qr/invalid burst value "burst=0"/],
    ['kvserve_limit zone=one delay=x;',
     qr/invalid delay value "delay=x"/],
    ['kvserve_limit zone=one burst=10 delay=20;',
     qr/"delay=20" is over "burst=10"/],
    ['kvserve_limit zone=one nodelay delay=5;',
     qr/"nodelay" and "delay=5" together/],
    ['kvserve_limit zone=one fast;', qr/invalid parameter "fast"/],
    ['kvserve_limit burst=5;', qr/"kvserve_limit" must have "zone" parameter/],
    ['kvserve_limit zone=one; kvserve_limit zone=one;',
     qr/zone "one" is duplicate/],
    ['kvserve_limit zone=nope;', qr/zero size shared memory zone "nope"/],
    ['kvserve_limit_status 600;', qr/invalid status "600"/],
    ['kvserve_limit_status 29x;', qr/invalid status "29x"/],
    ['kvserve_limit_log_level loud;', qr/invalid value "loud"/],
    ['kvserve_limit_dry_run maybe;', qr/invalid value "maybe"/],
) {
    my ($failed, $out) = nginx_t($c->[0]);
    ok($failed, "nginx -t fails: $c->[0]");
    like($out, $c->[1], "... saying $c->[1]");
}

{
    my ($failed, $out) = nginx_t('kvserve_limit zone=one burst=5 delay=2; '
                                 . 'kvserve_limit_status 429; '
                                 . 'kvserve_limit_log_level warn; '
                                 . 'kvserve_limit_dry_run off;');
    ok(!$failed, 'nginx -t passes a good configuration') or diag $out;
    ($failed, $out) = nginx_t('kvserve_limit_zone $arg_k zone=k2:1m '
                              . 'rate=10t/s kv_rate=64m/s;');
    ok(!$failed, 'nginx -t passes kv_rate=64m/s') or diag $out;
}

done_testing();
