# A host's disk-tier blocks in the prefix index (issue 26 point 4,
# docs/prefix-index.md "Lower tiers"), end to end: a real redis-server on
# a free port, two engine hosts publishing (kvserve_index) and a gateway
# (kvserve_route).
#
# - e1 has a 16-block pool and a disk tier; e2 a large pool, no tier.
# - A 96-token prompt P (6 blocks) is sent to e1 directly: its block
#   entries list e1 (the names computed by `kvserve index-names`).
# - e2 is sent P's first 32 tokens: its first 2 blocks list e2.
# - Four other prompts sent to e1 evict P from e1's pool: each of P's
#   6 entries loses the field e1 and gains d:e1 (the block was written
#   to e1's disk tier), with e1's incarnation.
# - P and more, sent through the gateway, go to e1 (reason prefix, the
#   gateway believes 96 cached tokens), although e1 holds none of it in
#   its pool and e2 holds 2 blocks in its: 6 disk blocks at the default
#   weight (500 per mille) are worth 48 tokens, more than e2's 32.  e1
#   answers with tokens from its disk tier (cached_tokens_by_tier.disk).
#   e1's pool held none of P then: only its disk entries made it the
#   better host (the choice itself is test_index_tier.c's).
# - After that load, e1's host record carries tw= (its measured weight).
# - e1 restarted (same weights): its tier file keeps P's blocks, and the
#   new engine publishes them again, d:e1 with its new incarnation,
#   before any request reaches it.
#
# The engines use load=always (the tiny model's prefill is so fast that
# the cost model may prefer computing) and the global cache scope on all
# three (index-names names blocks under the empty scope).  Skips when
# redis-server is not installed.
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::Bin/lib";
use Kvserve::Cluster;
use JSON::PP ();
use Time::HiRes qw(sleep);

my $c = Kvserve::Cluster->new('045');
my $model = "$ENV{TEST_NGINX_MODEL_DIR}/default.gguf";
my $cli = $ENV{KVS_CLI} || "$ENV{TEST_NGINX_MODEL_DIR}/../kvserve";
plan skip_all => "no kvserve tool at $cli" unless -x $cli;

my $e1 = $c->live('e1');
my $e2 = $c->live('e2');
my $gw = $c->live('gw');
my $file = $e1->root . '/tier/kv.tier';
mkdir $e1->root . '/tier';
chmod 0777, $e1->root . '/tier';

END { $c->stop if $c }

sub engine_conf {
    my ($e, $id, $extra) = @_;
    $e->write_conf(<<"EOC");
    kvserve_model kvserve-tiny $model;
    kvserve_backend cpu;
    kvserve_kv_block 16;
    kvserve_threads 1;
    kvserve_engine_wait 30s;
    kvserve_cache_scope global;
    $extra
    kvserve_index redis=@{[ $c->redis_addr ]} host_id=$id heartbeat=200ms
                  advertise=http://127.0.0.1:@{[ $e->port ]};
EOC
}

engine_conf($e1, 'e1', "kvserve_kv_cache 128k;\n"
            . "    kvserve_kv_tier disk $file 1m load=always;");
engine_conf($e2, 'e2', 'kvserve_kv_cache 16m;');

# load weight 1: this test is about what a host holds, not its load
$gw->write_conf(<<"EOC", server => <<"EOS");
    kvserve_model kvserve-tiny $model;
    kvserve_kv_block 16;
    kvserve_cache_scope global;
    kvserve_route_load_weight 1;

    upstream engines {
        kvserve_prefix_balance;
        server 127.0.0.1:@{[ $e1->port ]};
        server 127.0.0.1:@{[ $e2->port ]};
    }
EOC
        location /v1/ {
            kvserve_route redis=@{[ $c->redis_addr ]};
            proxy_pass http://engines;
            add_header X-Route-Reason \$kvserve_route_reason always;
            add_header X-Route-Host \$kvserve_route_host always;
            add_header X-Route-Cached \$kvserve_route_cached_tokens always;
        }
EOS

ok($c->redis_start, 'redis-server started on ' . $c->redis_addr);
ok($e1->start, 'e1 started (a disk tier)');
ok($e2->start, 'e2 started');
ok($e1->engine_pid && $e2->engine_pid, 'their engines are up');
ok($gw->start, 'the gateway started');

sub record { return $c->redis('GET', "kvs:v1:host:$_[0]") // '' }

ok($gw->wait_for(sub { record('e1') =~ /^kvs1 / && record('e2') =~ /^kvs1 / },
                 20), 'e1 and e2 registered');
ok($gw->wait_for(sub { $gw->workers_listing(2) >= 2 }, 20),
   "the gateway's two workers list both hosts");
my ($inc) = record('e1') =~ / inc=([0-9a-f]{16})(?: |$)/;
my ($epoch) = record('e1') =~ / epoch=([0-9a-f]{16})(?: |$)/;
unlike(record('e1'), qr/ tw=/, 'no weight before any load');

# a completion of token ids sent to $live directly, or through the
# gateway: (head, decoded body)
sub complete {
    my ($live, @ids) = @_;
    my $r = $live->read_all($live->request('POST', '/v1/completions',
        JSON::PP::encode_json({ model => 'kvserve-tiny',
                                prompt => [@ids], max_tokens => 1,
                                temperature => 0 })), 60);
    my ($head, $body) = $live->split_response($r);
    return ($head, eval { JSON::PP::decode_json($body) } || {});
}

my $seed = 11;
sub ids {
    my ($n) = @_;
    my @v;
    for (1 .. $n) {
        $seed = ($seed * 1103515245 + 12345) % 2147483648;
        push @v, 10 + $seed % 400;
    }
    return @v;
}

my @p = ids(96);
my @names = split /\n/,
    `$cli index-names --model kvserve-tiny --epoch $epoch --block 16 @p`;
is(scalar @names, 6, "P's 6 block names");

# HGETALL of a block's entry, as "field=value ..." sorted
sub entry {
    my %h = $c->redis('HGETALL', "kvs:v1:blk:$_[0]");
    return join ' ', map { "$_=$h{$_}" } sort keys %h;
}

my ($head) = complete($e1, @p);
like($head, qr{^HTTP/1\.1 200}, 'P on e1');
ok($e1->wait_for(sub { 6 == grep { entry($_) =~ /(?:^| )e1=$inc/ } @names },
                 10), "P's 6 blocks list e1 (its pool)");

($head) = complete($e2, @p[0 .. 31]);
like($head, qr{^HTTP/1\.1 200}, "P's first 32 tokens on e2");
ok($e2->wait_for(sub { 2 == grep { entry($_) =~ /(?:^| )e2=/ } @names[0, 1] },
                 10), "P's first 2 blocks list e2");

# four other prompts of 96 tokens through e1's 16-block pool
for my $k (1 .. 4) {
    ($head) = complete($e1, ids(96));
    like($head, qr{^HTTP/1\.1 200}, "other prompt $k on e1");
}

my @e;
ok($e1->wait_for(sub {
       @e = map { entry($_) } @names;
       6 == grep { /(?:^| )d:e1=$inc(?: |$)/ && !/(?:^| )e1=/ } @e;
   }, 10), "P's 6 blocks now list d:e1 (the disk tier), not e1")
    or diag join "\n", @e,
        ($e1->split_response($e1->read_all($e1->request('GET', '/status'),
                                            10)))[1];

# through the gateway: P and 16 more tokens
my $body;
($head, $body) = complete($gw, @p, ids(16));
like($head, qr{^HTTP/1\.1 200}, 'P and more through the gateway');
like($head, qr/^X-Route-Host: e1\r?$/m, '... routed to e1, whose disk holds P');
like($head, qr/^X-Route-Reason: prefix\r?$/m, '... by prefix');
like($head, qr/^X-Route-Cached: 96\r?$/m, '... believing 96 cached tokens');
my $disk = $body->{usage}{prompt_tokens_details}{cached_tokens_by_tier}{disk}
           // 0;
ok($disk >= 80, "e1 loaded $disk tokens from its disk tier");

ok($e1->wait_for(sub { record('e1') =~ / tw=(\d+)(?: |$)/ && $1 >= 1
                       && $1 <= 1000 }, 10),
   'e1 now publishes its weight: ' . (record('e1') =~ / (tw=\d+)/)[0] // '');

# e1 restarted on the same file: the kept blocks are published again
$e1->stop;
ok($e1->start, 'e1 restarted');
ok($e1->wait_for(sub { record('e1') =~ / inc=([0-9a-f]{16})(?: |$)/
                       && $1 ne $inc }, 20), 'e1 registered again');
my ($inc2) = record('e1') =~ / inc=([0-9a-f]{16})(?: |$)/;
ok($e1->wait_for(sub {
       @e = map { entry($_) } @names;
       6 == grep { /(?:^| )d:e1=$inc2(?: |$)/ } @e;
   }, 10), "P's 6 kept blocks list d:e1 again, new incarnation")
    or diag join "\n", @e;

# $e1->stop SIGKILLs the engine, and a worker still exiting then reaps it
# as nginx's "unknown process ... exited on signal 9": the harness's
# doing, not the module's
my $reaped = qr/unknown process \d+ exited on signal 9/;
is($e1->log_count(qr/\[(?:alert|crit|emerg)\](?!.*$reaped)/), 0,
   'no alert on e1');
is($gw->log_count(qr/\[(?:alert|crit|emerg)\]/), 0, 'no alert on the gateway');

done_testing();
