# The engine process's life under nginx (docs/engine-process.md, issue 5
# point 4), on one nginx of our own with worker_processes 2:
#
# 1. `nginx -s reload` (HUP to the master) while a stream is in flight:
#    the stream ends normally with [DONE], the engine keeps its pid and
#    loaded its model once, and a request after the reload is served;
# 2. kill -9 of the engine mid-stream: the stream ends with an SSE error
#    event and a proper end of the chunked body; a request sent right
#    after is served by a new engine; the stream's kv_rate reservation
#    is settled (to the engine's count so far and its tokens since),
#    not kept;
# 3. the watchdog: a SIGSTOPped engine is killed by the workers within
#    kvserve_engine_hang_timeout and a new one serves a request sent to
#    the stopped one;
# 4. the respawn backoff: an engine that died young is logged with the
#    delay before the next one.
#
# Every nginx and engine process started here is killed in END.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use Time::HiRes qw(sleep time);

my $t = Kvserve::Live->new('009');

# the tiny default model, with or without the fixtures (BOS 507, EOS 508
# and EOT 511 end a text): banned, streams run long
my ($model, $bias, $max_tokens) =
    ($t->model_dir . "/default.gguf",
     '{"507": -100, "508": -100, "511": -100}', 480);

my $hang_ms = 1500;
$t->write_conf(<<"EOC", server => <<"EOS");
    kvserve_model m $model;
    kvserve_kv_cache 64m;
    kvserve_threads 1;
    kvserve_engine_wait 20s;
    kvserve_engine_ping 200ms;
    kvserve_engine_hang_timeout ${hang_ms}ms;
    kvserve_limit_zone \$arg_k zone=kv:1m rate=100000t/s kv_rate=64m/s;
EOC
        location /v1/ { kvserve; }
        location /kv/v1/ {
            kvserve;
            kvserve_limit zone=kv burst=1000000 nodelay;
        }
        location = /status { kvserve_status; }
        location = /metrics { kvserve_metrics; }
EOS

END { $t->stop if $t }

ok($t->start, 'nginx started');

sub stream {
    my ($path) = @_;
    return $t->request('POST', $path // '/v1/completions',
                       '{"model": "m", "prompt": "Once upon a time", "n": 16, '
                       . "\"max_tokens\": $max_tokens, \"stream\": true, "
                       . "\"logit_bias\": $bias}");
}

sub completion_ok {
    my ($what, $secs) = @_;
    my $t0 = time;
    my $r = $t->read_all($t->request('POST', '/v1/completions',
                                     '{"model": "m", "prompt": "Once", '
                                     . '"max_tokens": 8}'), $secs);
    my $dt = time - $t0;
    like($r, qr{^HTTP/1\.1 200 .*"finish_reason"}s,
         sprintf("%s: served (%.2f s)", $what, $dt));
    return $dt;
}

my $serving = qr/kvserve: engine \d+ serving /;

# --- 1. reload --------------------------------------------------------------

my $pid1 = $t->engine_pid();
ok($pid1, "an engine serves ($pid1)");
is($t->log_count($serving), 1, 'it loaded its model once');

{
    my $s = stream();
    my $got = $t->read_until($s, qr/data: \{/, 30);
    like($got, qr/data: \{/, 'a long stream started');

    kill 'HUP', $t->master_pid();
    # the old workers were told to go while the stream is in flight: what
    # is not read yet stays in the old worker, which must finish it
    my $t0 = time;
    sleep 0.1 until $t->log_count(qr/gracefully shutting down/) >= 2
                   || time - $t0 > 20;
    ok($t->log_count(qr/gracefully shutting down/) >= 2,
       'the old workers are shutting down');

    $got = $t->read_all($s, 60, $got);
    my ($head, $body, $ended) = $t->split_response($got);
    like($body, qr/data: \[DONE\]\n\n\z/, 'the stream ended with [DONE]');
    unlike($body, qr/data: \{"error"/, '... and no error event');
    ok($ended, '... and a proper end of the chunked body');
    my @fin = $body =~ /"finish_reason":"length"/g;
    is(scalar @fin, 16, '... every choice ran to max_tokens');
    my $t1 = time;
    sleep 0.1 until $t->log_count(qr/worker process \d+ exited/) >= 2
                   || time - $t1 > 10;
    ok($t->log_count(qr/worker process \d+ exited/) >= 2,
       '... and the old workers exited');
}

completion_ok('a request after the reload', 30);
is($t->engine_pid(), $pid1, 'the same engine serves after the reload');
is($t->log_count($serving), 1, 'no second model load');
is($t->log_count(qr/started engine process/), 1, 'no second engine started');

# --- 2. the engine killed mid-stream -----------------------------------------

# zone kv's KiB x s charged less those refunded
sub kv_net {
    my $r = $t->read_all($t->request('GET', '/metrics'), 10);
    my %m = $r =~ /^kvserve:limit_kv_(charged|refunded)_kib_seconds_total\{zone="kv"\} (\d+)$/mg;
    return (($m{charged} // 0) - ($m{refunded} // 0), $m{refunded} // 0);
}

{
    # 16 x 480 output tokens and the prompt, 512 bytes each, reserved
    # for a second: over 3,840 KiB x s
    my $s = stream('/kv/v1/completions?k=killed');
    my $got = $t->read_until($s, qr/data: \{/, 30);
    like($got, qr/data: \{/, 'a long stream started');

    kill 'KILL', $pid1;
    # sent while no engine is up: served by the next one
    my $dt = completion_ok('a request sent right after kill -9', 25);
    cmp_ok($dt, '<', 20, '... within kvserve_engine_wait');

    $got = $t->read_all($s, 20, $got);
    my ($head, $body, $ended) = $t->split_response($got);
    like($body, qr/data: \{"error":\{[^\n]*\}\n\n(?:data: \[DONE\]\n\n)?\z/,
         'the stream ended with an error event');
    unlike($body, qr/"finish_reason":"length"/,
           '... before its choices were done');

    # the request's end settled its kv_rate reservation: what the engine
    # counted before it died and the tokens held since, not all of it
    my ($net, $back);
    $t->wait_for(sub { ($net, $back) = kv_net(); $back > 0 }, 5);
    cmp_ok($back, '>', 0, "kv_rate: the killed stream's reservation was "
                          . "settled ($back KiB x s back)");
    cmp_ok($net, '>', 0, "kv_rate: ... charged what it held ($net KiB x s)");
    cmp_ok($net, '<', 3840, '... less than its reservation');
    ok($ended, '... and a proper end of the chunked body');
    like($body, qr/"code":"engine_lost"/, '... code engine_lost');
}

my $pid2 = $t->engine_pid();
ok($pid2 && $pid2 != $pid1, "a new engine serves ($pid2)");
ok(!kill(0, $pid1) || (-r "/proc/$pid1/stat"
                       && `cat /proc/$pid1/stat` =~ /^\d+ \(.*\) Z/),
   'the killed one is gone');

# --- 3. the watchdog ---------------------------------------------------------

{
    kill 'STOP', $pid2;
    my $t0 = time;
    # sent to the stopped engine: the watchdog kills it, the request goes
    # to the next one
    my $dt = completion_ok('a request sent to a stopped engine', 25);
    cmp_ok($dt, '>=', $hang_ms / 1000 - 0.5,
           '... after the hang timeout');
    cmp_ok($dt, '<', $hang_ms / 1000 + 8, '... soon after it');

    my $pid3 = $t->engine_pid();
    ok($pid3 && $pid3 != $pid2, "a new engine serves ($pid3)");
    my $gone = 0;
    for (1 .. 50) {
        $gone = !kill(0, $pid2) || `cat /proc/$pid2/stat 2>/dev/null`
                                   =~ /^\d+ \(.*\) Z/;
        last if $gone;
        sleep 0.1;
    }
    ok($gone, 'the stopped one is gone');
    ok($t->log_count(qr/kvserve: engine $pid2 sent nothing for \d+ ms: /
                     . qr/hung, killing it/),
       'the watchdog said why');
}

# --- 4. backoff --------------------------------------------------------------

# the engine of part 2 lived a few seconds: the next one waited
ok($t->log_count(qr/kvserve: engine $pid2 lived \d+ ms: the next one starts /
                 . qr/in \d+ ms/),
   'an engine that died young was replaced after a backoff');
like($t->lease_pid() // '', qr/^\d+$/, 'the lease file names the engine');

done_testing();
