# The prefix index's publisher on an engine host (issue 8 point 2,
# docs/prefix-index.md): one nginx with the tiny default model and
# kvserve_index, a redis-server of our own on a free port.
#
# - The host record (kvs:v1:host:e1) appears, with the engine's
#   incarnation and epoch, the block size, the model and the advertise
#   URL, and e1 is a member of kvs:v1:hosts.
# - After a completion of known token ids, the hash of its first blocks
#   (kvs:v1:blk:<name>) lists e1 with the host record's incarnation, with
#   the entry TTL.  The names are computed here by a throwaway C program
#   against libxxhash alone, from the format in docs/prefix-index.md (it
#   first reproduces the worked example printed there), never by our
#   code.
# - redis-server stopped mid-run: requests keep succeeding, and the
#   error log says "down" exactly once (not per request or heartbeat);
#   started again (empty): an "up" line, and the host record and the
#   block entries are back (the publisher asked the engine for a full
#   listing).
# - With a pool of 128 blocks, distinct prompts evict the first blocks:
#   their entries are deleted (HDEL), and Redis never lists more blocks
#   than the pool holds.
# - nginx -t refuses bad kvserve_index values, quoting them.
#
# Only worker 0 of the two publishes: one "up" line at start.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use IO::Socket::INET ();
use JSON::PP ();
use Time::HiRes qw(sleep time);

my $t = Kvserve::Live->new('019-index', 'redis');

chomp(my $redis_server = `command -v redis-server 2>/dev/null` // '');
chomp(my $redis_cli = `command -v redis-cli 2>/dev/null` // '');
plan skip_all => 'redis-server and redis-cli needed (apt-get install '
    . 'redis-server)' unless $redis_server && $redis_cli;

my $root = $t->root;
my $port = $t->port;
my $model = $t->model_dir . "/default.gguf";
my $rdir = "$root/redis";

my $rport = do {
    my $s = IO::Socket::INET->new(Listen => 1, LocalAddr => '127.0.0.1',
                                  LocalPort => 0) or die "port: $!";
    my $p = $s->sockport;
    close $s;
    $p;
};

my $redis_up = 0;

sub redis_start {
    system($redis_server, '--port', $rport, '--bind', '127.0.0.1',
           '--save', '', '--appendonly', 'no', '--daemonize', 'yes',
           '--pidfile', "$rdir/redis.pid", '--logfile', "$rdir/redis.log",
           '--dir', $rdir) == 0 or return 0;
    $redis_up = 1;
    for (1 .. 200) {
        return 1 if (redis('PING') // '') eq 'PONG';
        sleep 0.02;
    }
    return 0;
}

sub redis_stop {
    return unless $redis_up;
    system("$redis_cli -p $rport shutdown nosave >/dev/null 2>&1");
    for (1 .. 250) {
        last unless -e "$rdir/redis.pid";
        sleep 0.02;
    }
    $redis_up = 0;
}

# redis-cli's --raw answer, lines joined by "\n", undef when none (the
# arguments are plain words)
sub redis {
    my @args = @_;
    open my $fh, '-|', "$redis_cli -p $rport --raw @args 2>/dev/null"
        or return undef;
    local $/;
    my $out = <$fh>;
    close $fh;
    return undef unless defined $out;
    $out =~ s/\n\z//;
    return $out;
}

END {
    $t->stop if $t;
    redis_stop();
}

# ---- the block names, independently ----------------------------------------

my $names_c = "$root/names.c";
open my $nc, '>', $names_c or die "names.c: $!";
print $nc <<'EOC';
/* names MODEL EPOCH_HEX BLOCK_TOKENS ID...: the root, then the name of
 * every whole block, one hex line each (docs/prefix-index.md) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static unsigned char in[16 + 4 + 4 * 1024 + 512];

static size_t le(size_t at, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) in[at + i] = (unsigned char) (v >> (8 * i));
    return at + bytes;
}

static void hash(size_t n, unsigned char out[16])
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c,
        XXH3_128bits_withSeed(in, n, 0x6b76736964783031ULL));
    memcpy(out, c.digest, 16);
    for (int i = 0; i < 16; i++) printf("%02x", out[i]);
    printf("\n");
}

int main(int argc, char **argv)
{
    unsigned char parent[16];
    size_t n, m = strlen(argv[1]);
    uint64_t epoch = strtoull(argv[2], NULL, 16);
    unsigned bt = (unsigned) atoi(argv[3]);
    int ids = argc - 4;

    memcpy(in, "kvsn", 4);
    n = le(4, 1, 4);
    n = le(n, m, 4);
    memcpy(in + n, argv[1], m);
    n = le(n + m, epoch, 8);
    n = le(n, 0, 4);
    n = le(n, 0, 4);
    hash(n, parent);

    for (int b = 0; (b + 1) * (int) bt <= ids; b++) {
        memcpy(in, parent, 16);
        n = le(16, bt, 4);
        for (unsigned i = 0; i < bt; i++)
            n = le(n, (uint32_t) atoi(argv[4 + b * bt + i]), 4);
        hash(n, parent);
    }
    return 0;
}
EOC
close $nc;

my $cc = $ENV{CC} // 'cc';
system("$cc -O1 -o $root/names $names_c -lxxhash") == 0
    or BAIL_OUT('cannot build the name helper (libxxhash-dev?)');

sub names {
    my ($model_name, $epoch, $bt, @ids) = @_;
    my @out = split /\n/, `$root/names $model_name $epoch $bt @ids`;
    return @out;
}

# the worked example of docs/prefix-index.md checks the helper itself
is_deeply([names('stories260K', '0123456789abcdef', 16,
                 map { 7 * $_ + 1 } 0 .. 49)],
          ['a9689ed0fc1a128276a46e8bc735bb09',
           '61da174a1a9d3d638e05c40b811596ea',
           'a62c74ed234c694265a3ae4e1917db01',
           'ac2aac18a8b071242c69e72c31fd0991'],
          'the name helper reproduces the documented example');

# ---- one engine host -------------------------------------------------------

ok(redis_start(), "redis-server on 127.0.0.1:$rport");

# the global scope: the helper names blocks under an empty scope (the
# default, the location's, is a hash the helper does not make)
$t->write_conf(<<"EOC");
    kvserve_model kvserve-tiny $model;
    kvserve_kv_cache 1m;
    kvserve_threads 1;
    kvserve_engine_wait 20s;
    kvserve_cache_scope global;
    kvserve_index redis=127.0.0.1:$rport host_id=e1 heartbeat=200ms;
EOC

ok($t->start, 'nginx started');
ok($t->engine_pid, 'the engine is up');

my $record = '';
ok($t->wait_for(sub {
    $record = redis('GET', 'kvs:v1:host:e1') // '';
    return $record =~ /^kvs1 /;
}, 10), 'the host record appears') or diag $record;

my ($inc) = $record =~ / inc=([0-9a-f]{16})(?: |$)/;
my ($epoch) = $record =~ / epoch=([0-9a-f]{16})(?: |$)/;
ok($inc && $inc ne '0' x 16, "its incarnation: " . ($inc // 'none'));
ok($epoch, "its epoch: " . ($epoch // 'none'));
like($record, qr/ id=e1(?: |$)/, 'the record names e1');
like($record, qr/ bt=16(?: |$)/, 'blocks of 16 tokens');
like($record, qr/ model=kvserve-tiny(?: |$)/, 'the model');
like($record, qr{ url=http://127\.0\.0\.1:$port(?: |$)},
     'the advertise URL defaults to the first listen');
like($record, qr/ ts=\d{13}(?: |$)/, 'a heartbeat time in ms');
my $pttl = redis('PTTL', 'kvs:v1:host:e1') // -1;
ok($pttl > 0 && $pttl <= 600, "its TTL is 3 heartbeats ($pttl ms)");
ok(defined redis('ZSCORE', 'kvs:v1:hosts', 'e1')
   && redis('ZSCORE', 'kvs:v1:hosts', 'e1') =~ /^\d{13}$/,
   'e1 is in kvs:v1:hosts, scored by its heartbeat');

is($t->log_count(qr/kvserve redis 127\.0\.0\.1:$rport: up/), 1,
   'one "up" line: only worker 0 connects');

# POST $body to $path; the decoded answer, undef unless 200
sub post {
    my ($path, $body) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port")
        or die "connect: $!";
    print $s "POST $path HTTP/1.1\r\nHost: localhost\r\n"
        . "Content-Type: application/json\r\n"
        . 'Content-Length: ' . length($body) . "\r\n"
        . "Connection: close\r\n\r\n$body";
    my $r = $t->read_all($s, 30);
    my ($head, $b) = $t->split_response($r);
    return undef unless $head =~ m{^HTTP/1\.1 200};
    return eval { JSON::PP::decode_json($b) };
}

sub complete_ids {
    my (@ids) = @_;
    return post('/v1/completions', '{"model": "kvserve-tiny", "prompt": ['
                . join(', ', @ids) . '], "max_tokens": 2}');
}

ok(post('/v1/chat/completions', '{"model": "kvserve-tiny", "messages": '
        . '[{"role": "user", "content": "Once upon a time there was a '
        . 'little dog"}], "max_tokens": 4}'),
   'a chat completion');

my @ids = map { 10 + $_ } 0 .. 39;
ok(complete_ids(@ids), 'a completion of 40 known ids');

my (undef, @blk) = names('kvserve-tiny', $epoch // '0', 16, @ids);
is(scalar @blk, 2, 'two whole blocks named');

sub entry { return redis('HGETALL', "kvs:v1:blk:$_[0]") // '' }

for my $i (0, 1) {
    my $e = '';
    ok($t->wait_for(sub { ($e = entry($blk[$i])) ne '' }, 10),
       "block $i ($blk[$i]) is published") or diag "HGETALL: '$e'";
    is($e, "e1\n" . ($inc // ''),
       "block $i: e1 with the record's incarnation");
}

my $bttl = redis('PTTL', "kvs:v1:blk:$blk[0]") // -1;
ok($bttl > 3_000_000 && $bttl <= 3_600_000,
   "the block entry's TTL is the default hour ($bttl ms)");

# ---- Redis goes away, comes back -------------------------------------------

redis_stop();

my $ok = 0;
for my $k (1 .. 6) {
    $ok++ if complete_ids(map { 100 + 7 * $k + $_ } 0 .. 19);
    sleep 0.2;
}
is($ok, 6, 'requests succeed while redis is down');

sleep 1;    # several heartbeats and reconnect tries
is($t->log_count(qr/kvserve redis 127\.0\.0\.1:$rport: down: /), 1,
   'exactly one "down" line');

ok(redis_start(), 'redis-server started again, empty');

ok($t->wait_for(sub {
    $t->log_count(qr/kvserve redis 127\.0\.0\.1:$rport: up/) == 2
}, 10), 'an "up" line');

ok($t->wait_for(sub {
    (redis('GET', 'kvs:v1:host:e1') // '') =~ /^kvs1 id=e1 inc=$inc /
}, 10), 'the host record is back, same incarnation');

for my $i (0, 1) {
    my $e = '';
    ok($t->wait_for(sub { ($e = entry($blk[$i])) ne '' }, 10),
       "block $i is published again (a full listing)")
        or diag "HGETALL: '$e'";
    is($e, "e1\n" . ($inc // ''), "block $i: e1 and its incarnation");
}

# ---- evictions --------------------------------------------------------------

# distinct prompts until the engine's pool (free= at start: nothing held
# then) evicts the first blocks: their entries go (HDEL), and Redis never
# lists more blocks for e1 than the pool holds
my ($pool) = $record =~ / free=(\d+)(?: |$)/;
ok($pool && $pool < 1000, "a small pool: " . ($pool // 'none') . " blocks");
my ($n, $most) = (0, 0);
for my $k (1 .. 4 * ($pool // 0)) {
    last if entry($blk[0]) eq '' && entry($blk[1]) eq '';
    # ids below 500: the tiny vocabulary's ordinary tokens
    $n++ if complete_ids($k % 400 + 50, map { ($k * 37 + $_ * 11) % 499 + 1 }
                                            1 .. 39);
    my @keys = split /\n/, redis('KEYS', 'kvs:v1:blk:*') // '';
    my $keys = @keys;
    $most = $keys if $keys > $most;
}
ok($t->wait_for(sub { entry($blk[0]) eq '' && entry($blk[1]) eq '' }, 10),
   "evicted after $n more prompts: both entries deleted");
ok($most > 0 && $most <= $pool,
   "at most the pool's $pool blocks listed at any time ($most)");

is($t->log_count(qr/kvserve redis 127\.0\.0\.1:$rport: down: /), 1,
   'still one "down" line');
is($t->log_count(qr/\[(?:alert|crit|emerg)\]/), 0,
   'no alert in the error log');

# ---- nginx -t ----------------------------------------------------------------

sub nginx_t { return $t->nginx_t($_[0]) }

my $r = "redis=127.0.0.1:6379";
my $long = 'h' x 65;
for my $c (
    ["kvserve_index $r host_id=bad/id;", qr/invalid value "host_id=bad\/id"/],
    ["kvserve_index $r host_id=$long;", qr/invalid value "host_id=$long"/],
    ["kvserve_index $r host_id=;", qr/invalid value "host_id="/],
    ['kvserve_index host_id=e1;', qr/needs redis=/],
    ['kvserve_index redis=127.0.0.1:99999;',
     qr/invalid value "redis=127\.0\.0\.1:99999"/],
    ['kvserve_index redis=unix:/tmp/r.sock;',
     qr/invalid value "redis=unix:\/tmp\/r\.sock"/],
    ["kvserve_index $r heartbeat=soon;", qr/invalid value "heartbeat=soon"/],
    ["kvserve_index $r heartbeat=5ms;", qr/invalid value "heartbeat=5ms"/],
    ["kvserve_index $r ttl=0;", qr/invalid value "ttl=0"/],
    ["kvserve_index $r advertise=ftp://x;",
     qr/invalid value "advertise=ftp:\/\/x"/],
    ["kvserve_index $r tls=on;", qr/invalid parameter "tls=on"/],
    ["kvserve_index $r; kvserve_index $r;",
     qr/"kvserve_index" directive is duplicate/],
    ["kvserve_index $r;", qr/no listen in the http block/],
) {
    my ($failed, $out) = nginx_t($c->[0]);
    ok($failed, "nginx -t fails: $c->[0]");
    like($out, $c->[1], "... saying $c->[1]");
}

for my $good (
    "kvserve_index $r host_id=gpu-a.1 advertise=http://10.0.0.7:8080;",
    "kvserve_index redis=localhost:6379 advertise=http://h:1 heartbeat=2s "
        . 'ttl=10m;',
) {
    my ($failed, $out) = nginx_t($good);
    ok(!$failed, "nginx -t passes: $good") or diag $out;
}

# the defaults: the host id is the hostname and the first listen's port
{
    chomp(my $hn = `hostname`);
    $hn =~ s/[^A-Za-z0-9._-]/-/g;
    my ($failed, $out) = nginx_t("kvserve_index $r; server { listen "
                                 . "127.0.0.2:$port; }");
    ok(!$failed, 'nginx -t passes with the defaults') or diag $out;
    like($out, qr{host "\Q$hn\E-$port" at http://127\.0\.0\.2:$port },
         "the default host id and advertise URL");
}

done_testing();
