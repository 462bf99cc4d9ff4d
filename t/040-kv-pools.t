# KV pools and admission (issue 24 point 2, docs/pools.md) on one nginx
# of our own with the tiny default model: a
# 32-block cache (128k, 16 tokens a block), long requests from 32 tokens
# holding at most 0.9 of it (28 blocks), a queue timeout of 500 ms.
#
#   - a long request whose whole need (prompt + max_tokens) is more than
#     the long pool may hold is a 400 naming both numbers, and changes
#     nothing;
#   - a chat request with a cache breakpoint pins most of the cache
#     (kvserve_cache_pin_max 128k): pinned blocks are neither free nor
#     evictable, so a long request needing one block more than what is
#     left waits, then gets 503 with Retry-After and an OpenAI error
#     (code kv_pool_full) naming the long pool; a short request is still
#     served;
#   - kvserve_metrics shows each pool's figures, the refusal counted;
#   - `nginx -t` refuses bad kvserve_kv_pool and kvserve_queue_timeout
#     values, naming them, and a queue timeout not shorter than
#     kvserve_engine_timeout.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Live;
use JSON::PP ();
use Time::HiRes qw(time);

my $t = Kvserve::Live->new('040-kv-pools');
my $port = $t->port;
my $model = $t->model_dir . "/default.gguf";

END { $t->stop if $t }

$t->write_conf(<<"EOC",
    kvserve_model kvserve-tiny $model;
    kvserve_kv_cache 256k;
    kvserve_threads 1;
    kvserve_engine_wait 20s;
    kvserve_cache_pin_max 256k;
    kvserve_cache_scope global;
    kvserve_kv_pool long min_tokens=32 share=0.9 max_prefill=1;
    kvserve_queue_timeout 500ms;
EOC
    server => <<"EOS");
        location /v1/ { kvserve; }
        location = /metrics { kvserve_metrics; }
        location = /status { kvserve_status; }
EOS

# POSTs $body to $path; (status, head, decoded body or undef).
sub post {
    my ($path, $body) = @_;
    my $r = $t->read_all($t->request('POST', $path, $body), 30);
    my ($head, $b) = $t->split_response($r);
    my ($status) = $head =~ m{^HTTP/1\.1 (\d+)};
    my $j = eval { JSON::PP::decode_json($b) };
    return ($status // 0, $head, $j);
}

# A completion of $n prompt token ids (3 .. 502, no special id) for $max
# tokens.
sub complete {
    my ($n, $max) = @_;
    my @ids = map { 3 + ($_ * 7) % 500 } 1 .. $n;
    return post('/v1/completions', '{"model": "kvserve-tiny", "prompt": ['
                . join(',', @ids) . qq(], "max_tokens": $max, )
                . '"temperature": 0}');
}

sub status {
    my $r = $t->read_all($t->request('GET', '/status'), 10);
    my (undef, $b) = $t->split_response($r);
    return JSON::PP::decode_json($b)->{models}[0];
}

sub metrics {
    my $r = $t->read_all($t->request('GET', '/metrics'), 10);
    my (undef, $b) = $t->split_response($r);
    return $b // '';
}

sub pool_metric {
    my ($m, $name, $pool) = @_;
    return $m =~ /^kvserve:\Q$name\E\{model_name="kvserve-tiny",pool="$pool"\} ([\d.]+)$/m
        ? $1 : undef;
}

ok($t->start, 'nginx started');
ok($t->engine_pid, 'the engine is up');

# --- too big for the long pool: 400, nothing changes --------------------

{
    # 441 + 9 tokens: 449 positions (the last token is never
    # computed), 29 blocks of 16; 448 positions would be 28
    my ($st, undef, $j) = complete(441, 9);
    is($st, 400, 'a long request over the long pool is a 400');
    like($j->{error}{message}, qr/needs 29 KV blocks; the long pool may hold 28/,
         '... naming its need and the pool') or diag explain $j;
    is($j->{error}{code}, 'context_length_exceeded', '... code');
    is(status()->{requests}, 0, '... and the engine never took it');
}

# --- pinned blocks leave too little: 503 with Retry-After ---------------

# about 350 tokens of system prompt, pinned in whole blocks
my $words = join ' ', map { "w$_" } 1 .. 120;
my ($st, undef, $j) = post('/v1/chat/completions',
    '{"model": "kvserve-tiny", "max_tokens": 1, "messages": ['
    . qq({"role": "system", "content": "$words", )
    . '"cache_control": {"type": "ephemeral"}}, '
    . '{"role": "user", "content": "hi"}]}');
is($st, 200, 'a chat request with a breakpoint is served');

my $s;
# /status answers from the engine's last stats reply: wait until it has
# counted the chat request, or a reply from before it passes for idle
ok($t->wait_for(sub { $s = status(); $s->{finished} >= 1
                      && $s->{running} == 0 }, 10),
   'the engine is idle');
my $pinned = $s->{prefix_cache}{pinned_blocks};
my $avail = $s->{kv_blocks} - $s->{kv_used};
ok($pinned >= 12, "it pinned $pinned blocks") or diag explain $s;
ok($avail >= 2 && $avail < 20, "$avail blocks are free or evictable");

# a long request needing $avail + 1 blocks: 16 * ($avail + 1) - 4 prompt
# tokens + 4 generated, the last never computed
{
    my $need = $avail + 1;
    my $t0 = time;
    my ($st2, $head, $j2) = complete(16 * $need - 4, 4);
    my $dt = time - $t0;
    is($st2, 503, "a long request needing $need blocks gets 503")
        or diag explain $j2;
    ok($dt >= 0.45, sprintf('... after the queue timeout (%.2f s)', $dt));
    my ($ra) = $head =~ /^Retry-After: (\S+)\r?$/mi;
    ok(defined $ra && $ra =~ /^\d+$/ && $ra >= 1 && $ra <= 3600,
       '... with Retry-After in seconds, 1..3600') or diag $head;
    my @n = $head =~ /^Retry-After:/mig;
    is(scalar @n, 1, '... once');
    is($j2->{error}{type}, 'server_error', '... an OpenAI error object');
    is($j2->{error}{code}, 'kv_pool_full', '... code kv_pool_full');
    like($j2->{error}{message}, qr/long-request KV pool had no room for this request's $need KV blocks within 500 ms; retry after $ra s/,
         '... naming the pool, the need, the timeout and the retry');
}

{
    my ($st3, undef, $j3) = complete(8, 4);
    is($st3, 200, 'a short request is served meanwhile');
    is($j3->{usage}{completion_tokens}, 4, '... in full');
}

# --- metrics --------------------------------------------------------------

my $m = '';
ok($t->wait_for(sub {
    $m = metrics();
    return (pool_metric($m, 'kv_pool_admitted_total', 'short') // 0) >= 1;
}, 10), 'the metrics show the pools') or diag $m;

is(pool_metric($m, 'kv_pool_blocks_max', 'long'), 28, 'long pool: 28 blocks');
is(pool_metric($m, 'kv_pool_blocks_max', 'short'), 32, 'short: all 32');
is(pool_metric($m, 'kv_pool_refused_total', 'long'), 1,
   'the long refusal is counted');
is(pool_metric($m, 'kv_pool_refused_total', 'short'), 0, 'no short one');
is(pool_metric($m, 'kv_pool_admitted_total', 'long'), 1,
   'one long request admitted (the chat one)');
is(pool_metric($m, 'kv_pool_queued', 'long'), 0, 'none queued now');
is(pool_metric($m, 'kv_pool_blocks_used', 'long'), 0, 'none held now');
like($m, qr/^# TYPE kvserve:kv_pool_refused_total counter$/m,
     'kv_pool_refused_total is a counter');
like($m, qr/^# TYPE kvserve:kv_pool_blocks_used gauge$/m,
     'kv_pool_blocks_used is a gauge');
ok(defined pool_metric($m, 'kv_pool_wait_seconds_total', 'long'),
   'kv_pool_wait_seconds_total is there');

# --- nginx -t -----------------------------------------------------------

sub nginx_t { return $t->nginx_t($_[0]) }

my $pool = 'kvserve_kv_pool long';

for my $c (
    ["kvserve_kv_pool short min_tokens=1 share=0.5 max_prefill=1;",
     qr/invalid value "short" in "kvserve_kv_pool" directive, the pool must be "long"/],
    ["$pool min_tokens=0 share=0.5 max_prefill=1;",
     qr/invalid value "min_tokens=0"/],
    ["$pool min_tokens=x share=0.5 max_prefill=1;",
     qr/invalid value "min_tokens=x"/],
    ["$pool min_tokens=10 share=0 max_prefill=1;",
     qr/invalid value "share=0"/],
    ["$pool min_tokens=10 share=1.5 max_prefill=1;",
     qr/invalid value "share=1.5"/],
    ["$pool min_tokens=10 share=0.5 max_prefill=0;",
     qr/invalid value "max_prefill=0"/],
    ["$pool min_tokens=10 share=0.5 max_prefill=1 chunk=-4;",
     qr/invalid value "chunk=-4"/],
    ["$pool min_tokens=10 share=0.5 max_prefill=1 size=3;",
     qr/invalid parameter "size=3"/],
    ["$pool min_tokens=10 share=0.5;",
     qr/needs min_tokens=<N>, share=<fraction> and max_prefill=<K>/],
    ["$pool min_tokens=10 share=0.5 max_prefill=1; "
     . "$pool min_tokens=20 share=0.5 max_prefill=1;",
     qr/"kvserve_kv_pool" directive is duplicate/],
    ['kvserve_queue_timeout 0;', qr/invalid value "0"/],
    ['kvserve_queue_timeout soon;', qr/invalid value "soon"/],
    ['kvserve_queue_timeout 60s;',
     qr/kvserve_queue_timeout of 60000 ms must be shorter than kvserve_engine_timeout \(60000 ms\)/],
    ['kvserve_queue_timeout 5s; kvserve_queue_timeout 6s;',
     qr/"kvserve_queue_timeout" directive is duplicate/],
) {
    my ($failed, $out) = nginx_t($c->[0]);
    ok($failed, "nginx -t fails: $c->[0]");
    like($out, $c->[1], "... saying $c->[1]");
}

for my $good (
    "$pool min_tokens=2048 share=0.6 max_prefill=1 chunk=32;",
    "$pool min_tokens=1 share=1 max_prefill=4;",
    'kvserve_queue_timeout off;',
    'kvserve_queue_timeout 59s;',
    'kvserve_queue_timeout 90s; kvserve_engine_timeout 120s;',
) {
    my ($failed, $out) = nginx_t($good);
    ok(!$failed, "nginx -t passes: $good") or diag $out;
}

done_testing();
