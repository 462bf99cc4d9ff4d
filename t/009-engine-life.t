# The engine process's life under nginx (docs/engine-process.md, issue 5
# point 4), on one nginx of our own with worker_processes 2:
#
# 1. `nginx -s reload` (HUP to the master) while a stream is in flight:
#    the stream ends normally with [DONE], the engine keeps its pid and
#    loaded its model once, and a request after the reload is served;
# 2. kill -9 of the engine mid-stream: the stream ends with an SSE error
#    event and a proper end of the chunked body; a request sent right
#    after is served by a new engine;
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
use IO::Socket::INET ();
use IO::Select ();
use JSON::PP ();
use File::Path qw(make_path remove_tree);
use Time::HiRes qw(sleep time);

my $nginx = $ENV{TEST_NGINX_BINARY} // '/usr/sbin/nginx';
my $module = $ENV{TEST_NGINX_LOAD_MODULES};
my $model_dir = $ENV{TEST_NGINX_MODEL_DIR};
plan skip_all => 'TEST_NGINX_LOAD_MODULES and TEST_NGINX_MODEL_DIR needed'
    unless $module && $model_dir;

# stories260K when the fixtures are there (its end tokens, as
# llama2.c's run.c has them: 1 and 2), else the tiny
# default model (end tokens 508 and 511): ends banned, streams run long
use Cwd ();
my $fixture = Cwd::getcwd() . "/../shared/fixtures/models/stories260K-f32.gguf";
my ($model, $bias, $max_tokens);
if (-f $fixture) {
    ($model, $bias, $max_tokens) = ($fixture, '{"1": -100, "2": -100}', 1800);
} else {
    ($model, $bias, $max_tokens) = ("$model_dir/default.gguf",
                                    '{"508": -100, "511": -100}', 480);
}

# beside the runner's servroot, which it empties as it likes
my $root = ($ENV{TEST_NGINX_SERVROOT} // '/tmp/kvserve-t') . '-009';
remove_tree($root);
make_path("$root/conf", "$root/logs", "$root/engine");

my $port = do {
    my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1',
                                  LocalPort => 0) or die "port: $!";
    my $p = $s->sockport;
    close $s;
    $p;
};

my $hang_ms = 1500;
open my $cf, '>', "$root/conf/nginx.conf" or die "conf: $!";
print $cf <<"EOC";
load_module $module;
worker_processes 2;
daemon on;
master_process on;
error_log logs/error.log info;
pid logs/nginx.pid;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path logs/body;
    kvserve_model m $model;
    kvserve_kv_cache 64m;
    kvserve_threads 1;
    kvserve_engine_dir $root/engine;
    kvserve_engine_wait 20s;
    kvserve_engine_ping 200ms;
    kvserve_engine_hang_timeout ${hang_ms}ms;
    server {
        listen 127.0.0.1:$port;
        location /v1/ { kvserve; }
        location = /status { kvserve_status; }
    }
}
EOC
close $cf;

my $log = "$root/logs/error.log";
my %engines;    # every engine pid seen, for END

sub master_pid {
    open my $fh, '<', "$root/logs/nginx.pid" or return;
    my $p = <$fh>;
    chomp $p if defined $p;
    return $p;
}

sub lease_pid {
    open my $fh, '<', "$root/engine/engine.lock" or return;
    my ($p) = (<$fh> // '') =~ /^(\d+) /;
    return $p;
}

END {
    my $m = master_pid();
    kill 'TERM', $m if $m;
    for my $p (grep { $_ } keys %engines, lease_pid()) {
        kill 'CONT', $p;
        kill 'KILL', $p;
    }
    if ($m) {
        for (1 .. 50) {
            last unless kill 0, $m;
            sleep 0.1;
        }
        kill 'KILL', $m if kill 0, $m;
    }
}

system($nginx, '-p', "$root/", '-c', "$root/conf/nginx.conf",
       '-e', $log) == 0 or BAIL_OUT("nginx did not start");
for (1 .. 100) {
    last if master_pid();
    sleep 0.05;
}
ok(master_pid(), 'nginx started');

sub request {
    my ($method, $uri, $body) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port,
                                  Proto => 'tcp', Timeout => 10)
        or die "connect: $!";
    $body //= '';
    print $s "$method $uri HTTP/1.1\r\nHost: localhost\r\n"
        . "Connection: close\r\nContent-Length: " . length($body)
        . "\r\n\r\n$body";
    return $s;
}

# everything the server sends until it closes, or until $secs pass
sub read_all {
    my ($s, $secs, $got) = @_;
    $got //= '';
    my $sel = IO::Select->new($s);
    my $end = time + $secs;
    while ((my $left = $end - time) > 0) {
        last unless $sel->can_read($left);
        my $k = sysread($s, my $buf, 65536);
        last unless $k;
        $got .= $buf;
    }
    close $s;
    return $got;
}

# reads until $re matches what came so far
sub read_until {
    my ($s, $re, $secs) = @_;
    my $got = '';
    my $sel = IO::Select->new($s);
    my $end = time + $secs;
    while ($got !~ $re && (my $left = $end - time) > 0) {
        last unless $sel->can_read($left);
        my $k = sysread($s, my $buf, 65536);
        last unless $k;
        $got .= $buf;
    }
    return $got;
}

# (head, body, chunked body ended properly)
sub split_response {
    my $r = shift;
    my ($head, $raw) = split /\r\n\r\n/, $r, 2;
    $head //= '';
    $raw //= '';
    return ($head, $raw, 0) unless $head =~ /^Transfer-Encoding: chunked/mi;
    my ($body, $at) = ('', 0);
    while ((my $eol = index($raw, "\r\n", $at)) >= 0) {
        my $size = substr($raw, $at, $eol - $at);
        return ($head, $body, 0) unless $size =~ /^[0-9a-fA-F]+$/;
        my $n = hex $size;
        $at = $eol + 2;
        return ($head, $body, substr($raw, $at) eq "\r\n") if $n == 0;
        return ($head, $body, 0)
            if length($raw) < $at + $n + 2
               || substr($raw, $at + $n, 2) ne "\r\n";
        $body .= substr($raw, $at, $n);
        $at += $n + 2;
    }
    return ($head, $body, 0);
}

sub engine_pid {
    for (1 .. 100) {
        my $r = read_all(request('GET', '/status'), 25);
        my (undef, $body) = split_response($r);
        if ($r =~ m{^HTTP/1\.1 200} && $body =~ /^\{/) {
            my $j = eval { JSON::PP::decode_json($body) };
            my $p = $j && $j->{engine}{pid};
            if ($p) {
                $engines{$p} = 1;
                return $p;
            }
        }
        sleep 0.1;
    }
    return 0;
}

sub log_count {
    my $re = shift;
    open my $fh, '<', $log or return 0;
    return scalar grep { $_ =~ $re } <$fh>;
}

sub stream {
    return request('POST', '/v1/completions',
                   '{"model": "m", "prompt": "Once upon a time", "n": 16, '
                   . "\"max_tokens\": $max_tokens, \"stream\": true, "
                   . "\"logit_bias\": $bias}");
}

sub completion_ok {
    my ($what, $secs) = @_;
    my $t0 = time;
    my $r = read_all(request('POST', '/v1/completions',
                             '{"model": "m", "prompt": "Once", '
                             . '"max_tokens": 8}'), $secs);
    my $dt = time - $t0;
    like($r, qr{^HTTP/1\.1 200 .*"finish_reason"}s,
         sprintf("%s: served (%.2f s)", $what, $dt));
    return $dt;
}

my $serving = qr/kvserve: engine \d+ serving /;

# --- 1. reload --------------------------------------------------------------

my $pid1 = engine_pid();
ok($pid1, "an engine serves ($pid1)");
is(log_count($serving), 1, 'it loaded its model once');

{
    my $s = stream();
    my $got = read_until($s, qr/data: \{/, 30);
    like($got, qr/data: \{/, 'a long stream started');

    kill 'HUP', master_pid();
    # the old workers were told to go while the stream is in flight: what
    # is not read yet stays in the old worker, which must finish it
    my $t0 = time;
    sleep 0.1 until log_count(qr/gracefully shutting down/) >= 2
                   || time - $t0 > 20;
    ok(log_count(qr/gracefully shutting down/) >= 2,
       'the old workers are shutting down');

    $got = read_all($s, 60, $got);
    my ($head, $body, $ended) = split_response($got);
    like($body, qr/data: \[DONE\]\n\n\z/, 'the stream ended with [DONE]');
    unlike($body, qr/data: \{"error"/, '... and no error event');
    ok($ended, '... and a proper end of the chunked body');
    my @fin = $body =~ /"finish_reason":"length"/g;
    is(scalar @fin, 16, '... every choice ran to max_tokens');
    my $t1 = time;
    sleep 0.1 until log_count(qr/worker process \d+ exited/) >= 2
                   || time - $t1 > 10;
    ok(log_count(qr/worker process \d+ exited/) >= 2,
       '... and the old workers exited');
}

completion_ok('a request after the reload', 30);
is(engine_pid(), $pid1, 'the same engine serves after the reload');
is(log_count($serving), 1, 'no second model load');
is(log_count(qr/started engine process/), 1, 'no second engine started');

# --- 2. the engine killed mid-stream -----------------------------------------

{
    my $s = stream();
    my $got = read_until($s, qr/data: \{/, 30);
    like($got, qr/data: \{/, 'a long stream started');

    kill 'KILL', $pid1;
    # sent while no engine is up: served by the next one
    my $dt = completion_ok('a request sent right after kill -9', 25);
    cmp_ok($dt, '<', 20, '... within kvserve_engine_wait');

    $got = read_all($s, 20, $got);
    my ($head, $body, $ended) = split_response($got);
    like($body, qr/data: \{"error":\{[^\n]*\}\n\n(?:data: \[DONE\]\n\n)?\z/,
         'the stream ended with an error event');
    unlike($body, qr/"finish_reason":"length"/,
           '... before its choices were done');
    ok($ended, '... and a proper end of the chunked body');
    like($body, qr/"code":"engine_lost"/, '... code engine_lost');
}

my $pid2 = engine_pid();
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

    my $pid3 = engine_pid();
    ok($pid3 && $pid3 != $pid2, "a new engine serves ($pid3)");
    my $gone = 0;
    for (1 .. 50) {
        $gone = !kill(0, $pid2) || `cat /proc/$pid2/stat 2>/dev/null`
                                   =~ /^\d+ \(.*\) Z/;
        last if $gone;
        sleep 0.1;
    }
    ok($gone, 'the stopped one is gone');
    ok(log_count(qr/kvserve: engine $pid2 sent nothing for \d+ ms: hung, /
                 . qr/killing it/),
       'the watchdog said why');
}

# --- 4. backoff --------------------------------------------------------------

# the engine of part 2 lived a few seconds: the next one waited
ok(log_count(qr/kvserve: engine $pid2 lived \d+ ms: the next one starts /
             . qr/in \d+ ms/),
   'an engine that died young was replaced after a backoff');
like(lease_pid() // '', qr/^\d+$/, 'the lease file names the engine');

done_testing();
