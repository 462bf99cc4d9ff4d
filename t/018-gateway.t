# The gateway (issue 8): kvserve_route and kvserve_prefix_balance in an
# nginx with no engine, in front of two fake backends, with a real
# redis-server on a free port whose index this test writes itself:
# host records (SET kvs:v1:host:<id>, ZADD kvs:v1:hosts) and block
# entries (HSET kvs:v1:blk:<name> <id> <incarnation>), the names computed
# by `kvserve index-names` (xxh3 chains, docs/prefix-index.md), not by
# the gateway.
#
#  1. a prompt whose three blocks are listed under e2 goes to e2:
#     $kvserve_route_reason prefix, $kvserve_route_cached_tokens 48;
#     the backend gets the body byte for byte (also a 64 KB chat
#     tokenized in the thread pool);
#  2. a prompt with no entry goes to the least loaded host
#     (least_loaded), and a prefix on a host loaded past its worth loses
#     (load);
#  3. entries of a stale incarnation are ignored, and a restart (a new
#     incarnation in e1's record) makes e1's old entries worthless from
#     the very next request, with no wait for the gateway's background
#     refresh (its round 1 reads the hosts' records too); likewise a
#     deleted record takes its host out at once, while an unreadable one
#     leaves what was known;
#  4. mode=approximate: the gateway's own decision is recorded, the next
#     turn finds it (prefix) on the same backend;
#  5. pass-through: bad JSON, GET /v1/models and short prompts are routed
#     and answered by the backend; a body over client_max_body_size gets
#     nginx's own 413;
#  6. SSE streams through unbuffered: the first event arrives before the
#     backend sends the second;
#  6b. a worker told to quit (as a reload does) while a request's lookup
#     is out waits for it and answers; a client gone mid-lookup leaves
#     the worker well;
#  7. redis-server killed: requests still succeed (no_index), and the
#     same conversation keeps its backend (the consistent hash);
#  7b. the gateway's kvserve_metrics counts every routed request in
#     kvserve:request_route_time_seconds (docs/triage.md);
#  8. no engine process ever started on the gateway.
#
# Skips when redis-server or redis-cli is absent.  Every process started
# here is killed in END.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use Digest::MD5 qw(md5_hex);
use IO::Socket::INET ();
use JSON::PP ();
use POSIX ();
use Time::HiRes qw(sleep time);

my ($redis_server, $redis_cli) = map {
    my $p = `command -v $_ 2>/dev/null`;
    chomp $p;
    $p;
} qw(redis-server redis-cli);

plan(skip_all => 'redis-server and redis-cli are needed (apt-get install '
                 . 'redis-server)')
    unless $redis_server && $redis_cli;

my $t = Kvserve::Live->new('018', 'models');
my $root = $t->root;
my $cli = $t->model_dir . '/../kvserve';
-x $cli or plan(skip_all => "no kvserve CLI at $cli (make all)");

my $json = JSON::PP->new->canonical;
my @pids;

# nginx may answer (413) and close before a long body is all written
$SIG{PIPE} = 'IGNORE';

END {
    $t->stop if $t;
    kill 'KILL', $_ for grep { $_ } @pids;
}

sub free_port {
    my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1',
                                  LocalPort => 0) or die "port: $!";
    my $p = $s->sockport;
    close $s;
    return $p;
}

# --- redis -------------------------------------------------------------------

my $rport = free_port();

sub start_redis {
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>', "$root/logs/redis.log";
        open STDERR, '>&', \*STDOUT;
        { exec $redis_server, '--port', $rport, '--bind', '127.0.0.1',
             '--save', '', '--appendonly', 'no', '--dir', "$root/logs" };
        POSIX::_exit(127);
    }
    push @pids, $pid;
    for (1 .. 100) {
        return $pid if `$redis_cli -p $rport PING 2>/dev/null` =~ /PONG/;
        sleep 0.05;
    }
    die "redis-server did not start";
}

sub rcli {
    my $out = `$redis_cli -p $rport @_ 2>&1`;
    chomp $out;
    return $out;
}

my $redis_pid = start_redis();

# --- two fake backends -------------------------------------------------------
#
# Each answers any request with JSON naming itself and what it got (the
# body's length and MD5); a body with "stream":true gets two SSE events
# 1.5 s apart.

sub backend {
    my ($name, $port) = @_;
    my $pid = fork // die "fork: $!";
    return $pid if $pid;

    $SIG{CHLD} = 'IGNORE';
    my $l = IO::Socket::INET->new(Listen => 64, LocalAddr => '127.0.0.1',
                                  LocalPort => $port, ReuseAddr => 1)
        or POSIX::_exit(1);
    while (1) {
        my $c = $l->accept or next;
        my $k = fork;
        if (!defined $k || $k) {
            close $c;
            next;
        }
        my $req = '';
        while ($req !~ /\r\n\r\n/) {
            my $n = sysread($c, my $buf, 65536) or POSIX::_exit(0);
            $req .= $buf;
        }
        my ($head, $body) = split /\r\n\r\n/, $req, 2;
        my ($len) = $head =~ /^Content-Length:\s*(\d+)/mi;
        $len //= 0;
        while (length($body) < $len) {
            my $n = sysread($c, my $buf, 65536) or last;
            $body .= $buf;
        }
        my ($line) = $head =~ /^(\S+ \S+)/;
        if ($body =~ /"stream"\s*:\s*true/) {
            syswrite($c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream"
                         . "\r\nX-Backend: $name\r\nConnection: close\r\n\r\n"
                         . "data: {\"n\":1}\n\n");
            sleep 1.5;
            syswrite($c, "data: [DONE]\n\n");
        } else {
            my $out = JSON::PP->new->canonical->encode({
                backend => $name, request => $line, body_len => length $body,
                body_md5 => md5_hex($body) });
            syswrite($c, "HTTP/1.1 200 OK\r\nContent-Type: application/json"
                         . "\r\nX-Backend: $name\r\nContent-Length: "
                         . length($out) . "\r\nConnection: close\r\n\r\n$out");
        }
        close $c;
        POSIX::_exit(0);
    }
}

my %bport = (e1 => free_port(), e2 => free_port());
push @pids, backend($_, $bport{$_}) for sort keys %bport;

# --- the gateway -------------------------------------------------------------

my $model = "$root/models/m.gguf";
symlink($t->model_dir . '/default.gguf', $model) or die "symlink: $!";

# the global scope: index-names names blocks under an empty scope (the
# default, the location's, is a hash this test does not make)
$t->write_conf(<<"EOC", workers => 1, server => <<"EOS");
    kvserve_model m $model;
    kvserve_kv_block 16;
    kvserve_cache_scope global;
    kvserve_route_load_weight 256;
    client_max_body_size 1m;

    upstream backends {
        kvserve_prefix_balance;
        server 127.0.0.1:$bport{e1};
        server 127.0.0.1:$bport{e2};
    }
EOC
        location /v1/ {
            kvserve_route redis=127.0.0.1:$rport timeout=200ms;
            proxy_pass http://backends;
            proxy_buffering off;
            proxy_http_version 1.1;
            add_header X-Route-Reason \$kvserve_route_reason always;
            add_header X-Route-Cached \$kvserve_route_cached_tokens always;
            add_header X-Route-Host \$kvserve_route_host always;
        }
        location /hold/v1/ {
            kvserve_route redis=127.0.0.1:$rport timeout=2s;
            proxy_pass http://backends;
        }
        location = /metrics { kvserve_metrics; }
        location /approx/v1/ {
            kvserve_route redis=127.0.0.1:$rport mode=approximate;
            proxy_pass http://backends;
            proxy_buffering off;
            add_header X-Route-Reason \$kvserve_route_reason always;
            add_header X-Route-Cached \$kvserve_route_cached_tokens always;
            add_header X-Route-Host \$kvserve_route_host always;
        }
EOS

ok($t->start, 'gateway started');

# --- the index, written here -------------------------------------------------

my $epoch = '0123456789abcdef';
my %inc = (e1 => '00000000000000a1', e2 => '00000000000000a2');
my %load = (e1 => 0, e2 => 0);

sub now_ms { int(time * 1000) }

# the host records, with a fresh heartbeat; then waits for the
# gateway's background refresh (once a second) unless $nowait
sub put_hosts {
    my ($nowait) = @_;
    for my $h (sort keys %inc) {
        my $rec = "kvs1 id=$h inc=$inc{$h} epoch=$epoch bt=16 "
            . "run=$load{$h} wait=0 free=100 ts=" . now_ms()
            . " model=m url=http://127.0.0.1:$bport{$h}";
        rcli("SET kvs:v1:host:$h '$rec' PX 60000");
        rcli("ZADD kvs:v1:hosts " . now_ms() . " $h");
    }
    # the gateway lists them once a second
    sleep 1.3 unless $nowait;
}

sub names {
    my (@ids) = @_;
    my @n = split /\n/, `$cli index-names --model m --epoch $epoch --block 16 @ids`;
    die "index-names failed" if $?;
    return @n;
}

sub list_under {
    my ($host, $inc, @ids) = @_;
    rcli("HSET kvs:v1:blk:$_ $host $inc") for names(@ids);
}

my $seed = 7;
sub ids {
    my ($n) = @_;
    my @v;
    for (1 .. $n) {
        $seed = ($seed * 1103515245 + 12345) % 2147483648;
        push @v, 10 + $seed % 400;
    }
    return @v;
}

# POSTs $body (a string) to $uri; returns (status, headers, decoded body)
sub post_raw {
    my ($uri, $body) = @_;
    my $r = $t->read_all($t->request('POST', $uri, $body), 20);
    my ($head, $b) = $t->split_response($r);
    my ($status) = $head =~ m{^HTTP/1\.1 (\d+)};
    my $j = eval { $json->decode($b) };
    return ($status // 0, $head, $j, $b);
}

sub hdr {
    my ($head, $name) = @_;
    my ($v) = $head =~ /^\Q$name\E: *([^\r\n]*)/mi;
    return $v // '';
}

sub complete {
    my ($uri, @ids) = @_;
    my $body = $json->encode({ model => 'm', prompt => [@ids],
                               max_tokens => 4 });
    my ($st, $head, $j) = post_raw($uri, $body);
    return { status => $st, backend => $j ? $j->{backend} : '',
             md5_ok => $j && $j->{body_md5} eq md5_hex($body),
             reason => hdr($head, 'X-Route-Reason'),
             cached => hdr($head, 'X-Route-Cached'),
             host => hdr($head, 'X-Route-Host') };
}

put_hosts();

# --- 1. a listed prefix -------------------------------------------------------

my @p1 = ids(48);
list_under('e2', $inc{e2}, @p1);

my $r = complete('/v1/completions', @p1, ids(5));
is($r->{status}, 200, 'prefix: answered');
is($r->{backend}, 'e2', 'prefix: on the host listing it');
is($r->{reason}, 'prefix', 'prefix: $kvserve_route_reason');
is($r->{cached}, '48', 'prefix: $kvserve_route_cached_tokens');
is($r->{host}, 'e2', 'prefix: $kvserve_route_host');
ok($r->{md5_ok}, 'prefix: the backend got the body byte for byte');

# chat, long enough for the thread pool (64 KB of text): routed, and the
# body intact
{
    my $text = join(' ', map { "word$_" } 1 .. 9000);
    my $body = $json->encode({ model => 'm', max_tokens => 2,
        messages => [{ role => 'user', content => $text }] });
    my ($st, $head, $j) = post_raw('/v1/chat/completions', $body);
    is($st, 200, 'long chat: answered');
    like(hdr($head, 'X-Route-Reason'), qr/^(least_loaded|load)$/,
         'long chat: routed by load (nothing listed)');
    is($j && $j->{body_md5}, md5_hex($body),
       'long chat: the backend got all ' . length($body) . ' bytes');
}

# --- 2. no entry, and load -----------------------------------------------------

%load = (e1 => 0, e2 => 5);
put_hosts();

$r = complete('/v1/completions', ids(40));
is($r->{backend}, 'e1', 'no entry: the least loaded host');
is($r->{reason}, 'least_loaded', 'no entry: reason least_loaded');
is($r->{cached}, '0', 'no entry: no cached tokens');

# 48 cached tokens are not worth 1000 running sequences at 256 each
%load = (e1 => 0, e2 => 1000);
put_hosts();

$r = complete('/v1/completions', @p1, ids(3));
is($r->{backend}, 'e1', 'load: a loaded prefix holder loses');
is($r->{reason}, 'load', 'load: reason load');

# --- 3. incarnations -------------------------------------------------------------

%load = (e1 => 0, e2 => 5);
put_hosts();

my @p3 = ids(64);
list_under('e2', '00000000000000a0', @p3);   # a process e2 no longer is
$r = complete('/v1/completions', @p3, 1);
is($r->{backend}, 'e1', 'stale incarnation: its entries ignored');
is($r->{reason}, 'least_loaded', 'stale incarnation: nothing held');

# 320 tokens on e1 outweigh one sequence more there (256)
%load = (e1 => 1, e2 => 0);
my @p4 = ids(320);
list_under('e1', $inc{e1}, @p4);
put_hosts();
$r = complete('/v1/completions', @p4, 1);
is($r->{backend}, 'e1', 'before the restart: e1 holds it');
is($r->{reason}, 'prefix', 'before the restart: prefix');
is($r->{cached}, '320', 'before the restart: 320 cached');

# e1 restarted: its record names a new incarnation, and the very next
# request, sent as soon as redis-cli has written it (no sleep: the
# gateway's background refresh has not run), ignores the old entries
$inc{e1} = '00000000000000b1';
put_hosts(1);
$r = complete('/v1/completions', @p4, 1);
is($r->{backend}, 'e2', 'after the restart, at once: old entries worthless');
is($r->{reason}, 'least_loaded', 'after the restart, at once: least_loaded');
is($r->{cached}, '0', 'after the restart, at once: nothing cached');

# the new incarnation's entries count at once too
list_under('e1', $inc{e1}, @p4);
$r = complete('/v1/completions', @p4, 1);
is($r->{backend}, 'e1', 'the new incarnation\'s entries: e1');
is($r->{cached}, '320', 'the new incarnation\'s entries: 320 cached');

# an unreadable record does not say the host went away: what was known
# stands
rcli("SET kvs:v1:host:e1 'kvs1 id=e1 garbage' PX 60000");
$r = complete('/v1/completions', @p4, 1);
is($r->{backend}, 'e1', 'an unreadable record: e1 as known');
is($r->{reason}, 'prefix', 'an unreadable record: prefix');

# its key deleted: e1 is out from the very next request
rcli("DEL kvs:v1:host:e1");
$r = complete('/v1/completions', @p4, 1);
is($r->{backend}, 'e2', 'a deleted record: not routed to e1');
is($r->{reason}, 'least_loaded', 'a deleted record: e1 holds nothing');

put_hosts();
my $logged;
for (1 .. 30) {
    last if $logged = $t->log_count(
        qr/kvserve_route: host "e1" incarnation 00000000000000b1/);
    sleep 0.1;
}
ok($logged, 'the new incarnation logged');

# --- 4. mode=approximate ---------------------------------------------------------

my @p5 = ids(50);
$r = complete('/approx/v1/completions', @p5);
is($r->{status}, 200, 'approximate: answered');
is($r->{reason}, 'least_loaded', 'approximate: first turn, nothing known');
my $first = $r->{backend};
like($r->{host}, qr/^127\.0\.0\.1_\d+$/, 'approximate: pseudo host id');
sleep 0.3;
$r = complete('/approx/v1/completions', @p5, ids(20));
is($r->{backend}, $first, 'approximate: turn 2 on the same backend');
is($r->{reason}, 'prefix', 'approximate: turn 2 reason prefix');
is($r->{cached}, '48', 'approximate: turn 2 cached 3 whole blocks');

# --- 5. pass-through --------------------------------------------------------------

{
    my ($st, $head, $j) = post_raw('/v1/chat/completions', '{not json');
    is($st, 200, 'bad JSON: the backend answers, not the gateway');
    ok($j && $j->{backend}, 'bad JSON: a backend got it');
    is(hdr($head, 'X-Route-Reason'), '', 'bad JSON: no reason');

    ($st, $head, $j) = post_raw('/v1/completions',
                                '{"model":"nope","prompt":"hi"}');
    ok($st == 200 && $j && $j->{backend}, 'unknown model: passed through');

    my $g = $t->read_all($t->request('GET', '/v1/models'), 10);
    like($g, qr/"request":"GET \/v1\/models"/, 'GET /v1/models passed');

    $r = complete('/v1/completions', 1, 2, 3);
    is($r->{reason}, 'short_prompt', 'a prompt under a block');

    ($st) = post_raw('/v1/completions', 'x' x (1024 * 1024 + 10));
    is($st, 413, 'over client_max_body_size: nginx\'s 413');
}

# --- 6. SSE ------------------------------------------------------------------------

{
    my $body = $json->encode({ model => 'm', prompt => [ids(20)],
                               stream => JSON::PP::true });
    my $t0 = time;
    my $s = $t->request('POST', '/v1/completions', $body);
    my $got = $t->read_until($s, qr/data: \{"n":1\}/, 10);
    my $first_at = time - $t0;
    $got = $t->read_all($s, 10, $got);
    my $all_at = time - $t0;
    like($got, qr/data: \{"n":1\}\n\n/, 'SSE: first event');
    like($got, qr/data: \[DONE\]/, 'SSE: last event');
    cmp_ok($first_at, '<', 1.0, "SSE: first event after ${first_at}s, "
           . 'before the backend sent the second');
    cmp_ok($all_at, '>=', 1.4, 'SSE: the second came later');
}

# --- 6b. a worker's graceful exit (reload) while a request waits on Redis ----------
#
# Redis paused: the request's round 1 is out (2 s timeout) when the
# worker is told to quit, as a reload tells the old workers.  nginx lets
# a quitting worker go once no timer that is not cancelable is left: the
# request must hold it until its lookup is decided, then be answered.

sub workers {
    my $m = $t->master_pid;
    return grep {
        my ($pp) = (`cat /proc/$_/stat 2>/dev/null` =~ /^\d+ \(.*\) \S (\d+)/);
        $pp && $pp == $m
            && `cat /proc/$_/cmdline 2>/dev/null` =~ /worker process/;
    } map { m{/proc/(\d+)$} ? $1 : () } glob '/proc/[0-9]*';
}

{
    my ($w) = workers();
    ok($w, "the worker's pid");
    rcli('CLIENT PAUSE 1200');
    my $body = $json->encode({ model => 'm', prompt => [ids(40)] });
    my $s = $t->request('POST', '/hold/v1/completions', $body);
    sleep 0.4;
    kill 'QUIT', $w;
    my $got = $t->read_all($s, 10);
    like($got, qr{^HTTP/1\.1 200}, 'worker quitting mid-lookup: answered');
    like($got, qr/^X-Backend: e\d/mi, 'worker quitting mid-lookup: proxied');
    ok($t->wait_for(sub { my @n = workers(); @n == 1 && $n[0] != $w }, 5),
       'a new worker');
    sleep 1;
    is($t->log_count(qr/open socket|aborting/), 0,
       'the quitting worker left no socket open');
}

# a client gone while its lookup is out (a long chat: the thread pool
# leaves nginx watching the client): its batch is canceled and the
# replies, when Redis answers, are dropped; the worker lives on
{
    my ($w) = workers();
    rcli('CLIENT PAUSE 150');
    my $text = join(' ', map { "word$_" } 1 .. 9000);
    my $body = $json->encode({ model => 'm', max_tokens => 2,
        messages => [{ role => 'user', content => $text }] });
    my $s = $t->request('POST', '/v1/chat/completions', $body);
    sleep 0.08;
    close $s;
    sleep 0.5;
    $r = complete('/v1/completions', ids(40));
    is($r->{status}, 200, 'client gone mid-lookup: the next one answered');
    is((workers())[0], $w, 'client gone mid-lookup: the same worker');
    is($t->log_count(qr/\[(alert|crit|emerg)\]/), 0, 'no alert logged');
}

# --- 7. redis down -------------------------------------------------------------------

# fresh records first: the worker that 6b started lists only heartbeats
# of the last 10 s, and on a loaded machine 3 to 6b take longer than that
put_hosts();
kill 'KILL', $redis_pid;
waitpid($redis_pid, 0);
sleep 0.3;

my @p7 = ids(64);
my %seen;
for my $i (1 .. 4) {
    $r = complete('/v1/completions', @p7, ids($i));
    is($r->{status}, 200, "redis down: request $i answered");
    is($r->{reason}, 'no_index', "redis down: request $i hashed");
    $seen{$r->{backend}}++;
}
is(scalar keys %seen, 1, 'redis down: one conversation, one backend');
ok($t->log_count(qr/redis/i) >= 1, 'the lost connection logged');

# --- 7b. the route hop in the gateway's metrics ----------------------------

# every request routed above (over 20, redis down or not) took the hop
$r = $t->read_all($t->request('GET', '/metrics'), 10);
my $hop = 'kvserve:request_route_time_seconds';
my ($route_n) = $r =~ /^${hop}_count\{model_name="m"\} (\d+)$/m;
my ($route_s) = $r =~ /^${hop}_sum\{model_name="m"\} (\S+)$/m;
ok(($route_n // 0) >= 20, "the gateway's /metrics counts the route hop "
   . '(' . ($route_n // 'none') . ')');
ok(($route_s // 0) > 0, '... with its time');

# --- 8. no engine -------------------------------------------------------------------

opendir my $dh, "$root/engine" or die "engine dir: $!";
my @left = grep { !/^\.\.?$/ } readdir $dh;
is("@left", '', 'no engine socket or lease on the gateway');
my $m = $t->master_pid;
my @engines = grep {
    my $comm = `cat /proc/$_/comm 2>/dev/null`;
    my ($pp) = (`cat /proc/$_/stat 2>/dev/null` =~ /^\d+ \(.*\) \S (\d+)/);
    $comm =~ /^kvserve engine/ && $pp && ($pp == $m
        || `cat /proc/$pp/stat 2>/dev/null` =~ /^\d+ \(.*\) \S $m /);
} map { m{/proc/(\d+)$} ? $1 : () } glob '/proc/[0-9]*';
is(scalar @engines, 0, 'no engine process under the gateway');
is($t->log_count(qr/engine process|spawn/i), 0, 'no engine spawned');

done_testing();
